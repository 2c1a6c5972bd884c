//! Where the user's configuration and kiln's trust records live, and how a configuration file
//! is read.

use crate::error::ConfigError;
use std::path::{Path, PathBuf};

pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(bytes))
}

/// kiln's directory in the user's state directory: `$XDG_STATE_HOME/kiln` (an absolute
/// `XDG_STATE_HOME`), else `~/.local/state/kiln`. Outside every workspace.
pub(crate) fn user_state_dir() -> Option<PathBuf> {
    kiln_state::base().ok()
}

pub(crate) fn read_text(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// The workspace's `kiln.toml` (`path`), read only as a regular file: a link is refused (a
/// committed `kiln.toml -> /proc/self/environ` would put kiln's environment, API keys
/// included, in the parse error), and so is anything else that is not a regular file (it is
/// opened without blocking, so a FIFO cannot hang kiln). `None` when there is none.
pub(crate) fn read_workspace_file(path: &Path) -> Result<Option<String>, ConfigError> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let refuse = |what: &str| ConfigError::Invalid {
        path: path.to_path_buf(),
        message: format!(
            "it is {what}; kiln reads a workspace's kiln.toml only as a regular file (a link \
             could lead anywhere, such as to kiln's own environment): replace it with the file"
        ),
    };
    let mut file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(refuse("a symbolic link"));
        }
        Err(source) => {
            return Err(ConfigError::Read {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    let read_err = |source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    };
    if !file.metadata().map_err(read_err)?.is_file() {
        return Err(refuse("not a regular file"));
    }
    let mut text = String::new();
    file.read_to_string(&mut text).map_err(read_err)?;
    Ok(Some(text))
}

/// The user-level configuration file, if a home directory is known.
pub fn user_config_path() -> Option<PathBuf> {
    if let Some(p) = kiln_env::env().kiln_config() {
        return Some(p.to_path_buf());
    }
    Some(kiln_state::UserDir::Config.kiln_dir()?.join("config.toml"))
}

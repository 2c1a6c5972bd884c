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

/// The user-level configuration file, if a home directory is known.
pub fn user_config_path() -> Option<PathBuf> {
    if let Some(p) = kiln_env::env().kiln_config() {
        return Some(p.to_path_buf());
    }
    Some(kiln_state::UserDir::Config.kiln_dir()?.join("config.toml"))
}

//! kiln-state: kiln's own state outside any repository: `$XDG_STATE_HOME/kiln/` (else
//! `~/.local/state/kiln/`), with one directory per workspace, so nothing a repository ships
//! can steer it. The edit journal and its backups live there (`journal/`); trust records and
//! undo backups are meant to as well.
//!
//! A workspace is known by its identity, not only its path: its directory is
//! `workspaces/<key>`, where `<key>` is the first 16 bytes (hex) of the SHA-256 of the
//! workspace root's canonical path, its device and its inode number. A different directory
//! later created at the same path (a fresh clone after `rm -rf`) gets another key, so it never
//! inherits the journal or the trust of the one before. `workspace.json` inside records the
//! canonical path, device and inode for a person looking around, and is checked on every open.
//!
//! Every directory kiln creates here is mode 0700. The base directory is the user's own and is
//! used as found; below it, each level is opened without following a symbolic link.
//!
//! It also holds the one lookup of the XDG base directories kiln keeps a `kiln` directory in
//! ([`UserDir`]: configuration, state, compile cache).
//!
//! It must never import another kiln crate but kiln-env (the environment, read once): the store, the edit journal, undo and the plugin
//! cache all find their directories through it.
// Unit tests set up their fixtures as they like; only the writer writes a workspace (clippy.toml).
#![cfg_attr(test, allow(clippy::disallowed_methods))]

mod run_lock;

pub use run_lock::{RunLock, RunLockError};

use cap_std::fs::Dir;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

/// Why kiln's state directory for a workspace cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum StateDirError {
    /// Neither `XDG_STATE_HOME` (absolute) nor `HOME` is set.
    #[error(
        "cannot find kiln's state directory: set XDG_STATE_HOME or HOME (kiln keeps its edit journal and trust records there)"
    )]
    NoHome,
    /// A file system operation failed.
    #[error("kiln's state directory {path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The compile cache's key file is not one kiln made for this user.
    #[error(
        "the compile cache key {path} is refused: {why}; remove it (kiln makes a new one and recompiles its plugins)"
    )]
    BadKey {
        /// The key file.
        path: PathBuf,
        /// What is wrong with it.
        why: &'static str,
    },
    /// `workspace.json` names another workspace.
    #[error(
        "kiln's state directory {path} belongs to another workspace ({other}); remove it if that workspace is gone"
    )]
    Mismatch {
        /// The state directory.
        path: PathBuf,
        /// The workspace it records.
        other: String,
    },
}

/// `$XDG_STATE_HOME/kiln` when `XDG_STATE_HOME` is an absolute path, else
/// `$HOME/.local/state/kiln`.
pub fn base() -> Result<PathBuf, StateDirError> {
    UserDir::State.kiln_dir().ok_or(StateDirError::NoHome)
}

/// A base directory of the XDG spec in which kiln keeps a `kiln` directory. Every lookup of
/// one (the configuration, state and compile cache directories) goes through here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UserDir {
    /// `$XDG_CONFIG_HOME`, else `~/.config`: the user's configuration.
    Config,
    /// `$XDG_STATE_HOME`, else `~/.local/state`: kiln's state ([`base`]).
    State,
    /// `$XDG_CACHE_HOME`, else `~/.cache`: the compile cache.
    Cache,
}

impl UserDir {
    /// kiln's directory in this base: `$XDG_…_HOME/kiln`, else `$HOME/<default>/kiln`. For
    /// [`UserDir::State`] either variable counts only when it is an absolute path (a relative
    /// one would move the journal and trust records with the current directory); for the
    /// others a variable counts when it is set. `KILN_*` overrides are the caller's, before
    /// this.
    pub fn kiln_dir(self) -> Option<PathBuf> {
        self.kiln_dir_in(|name| kiln_env::env().var_os(name).map(Into::into))
    }

    /// [`UserDir::kiln_dir`] with the environment read through `var`.
    fn kiln_dir_in(self, var: impl Fn(&str) -> Option<std::ffi::OsString>) -> Option<PathBuf> {
        let (xdg, under_home) = match self {
            UserDir::Config => ("XDG_CONFIG_HOME", ".config"),
            UserDir::State => ("XDG_STATE_HOME", ".local/state"),
            UserDir::Cache => ("XDG_CACHE_HOME", ".cache"),
        };
        let counts = |p: &PathBuf| self != UserDir::State || p.is_absolute();
        let base = var(xdg).map(PathBuf::from).filter(counts).or_else(|| {
            var("HOME")
                .map(PathBuf::from)
                .filter(counts)
                .map(|h| h.join(under_home))
        })?;
        Some(base.join("kiln"))
    }
}

/// Length of the compile cache's key, bytes.
pub const CACHE_KEY_LEN: usize = 32;

/// The compile cache's key file: `$KILN_CACHE_KEY` when it is an absolute path, else
/// `cache.key` in [`base`]. Never inside the cache directory: whoever can write the cache must
/// not be able to sign what they write.
pub fn cache_key_path() -> Result<PathBuf, StateDirError> {
    if let Some(p) = kiln_env::env().kiln_cache_key()
        && p.is_absolute()
    {
        return Ok(p.to_path_buf());
    }
    Ok(base()?.join("cache.key"))
}

/// The key in `path`, made when missing: [`CACHE_KEY_LEN`] random bytes, written to a new
/// file (mode 0600, `O_EXCL`, following no link) and published under its name with a hard
/// link, so a concurrent kiln reads either no key or a whole one. A key file that is a link,
/// not a regular file, not the user's own, readable by others or of another length is
/// refused.
// kiln's state directory, outside the workspace.
#[allow(clippy::disallowed_methods)]
pub fn load_or_create_key(path: &Path) -> Result<[u8; CACHE_KEY_LEN], StateDirError> {
    let io = |source| StateDirError::Io {
        path: path.to_path_buf(),
        source,
    };
    match read_key(path) {
        Err(StateDirError::Io { source, .. }) if source.kind() == ErrorKind::NotFound => {}
        other => return other,
    }
    let parent = path.parent().unwrap_or(Path::new("/"));
    create_private_all(parent).map_err(io)?;
    let mut key = [0u8; CACHE_KEY_LEN];
    random(&mut key).map_err(io)?;
    let tmp = parent.join(format!(
        ".{}.{}.new",
        path.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id()
    ));
    let written = (|| {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)?;
        f.write_all(&key)?;
        f.sync_all()?;
        match std::fs::hard_link(&tmp, path) {
            Ok(()) => Ok(()),
            // Another kiln published its key first: use that one.
            Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(e),
        }
    })();
    let _ = std::fs::remove_file(&tmp);
    written.map_err(io)?;
    read_key(path)
}

/// Read and check the key file at `path` (see [`load_or_create_key`]).
fn read_key(path: &Path) -> Result<[u8; CACHE_KEY_LEN], StateDirError> {
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let io = |source| StateDirError::Io {
        path: path.to_path_buf(),
        source,
    };
    let bad = |why| StateDirError::BadKey {
        path: path.to_path_buf(),
        why,
    };
    let mut f = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(bad("it is a symbolic link"));
        }
        Err(e) => return Err(io(e)),
    };
    let meta = f.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(bad("it is not a regular file"));
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    if meta.uid() != unsafe { libc::geteuid() } {
        return Err(bad("another user owns it"));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(bad(
            "other users may read or write it (it must be mode 0600)",
        ));
    }
    let mut key = [0u8; CACHE_KEY_LEN];
    let mut rest = Vec::new();
    if meta.len() != CACHE_KEY_LEN as u64
        || f.read_exact(&mut key).is_err()
        || f.read_to_end(&mut rest).map_err(io)? != 0
    {
        return Err(bad("it is not a key kiln wrote (wrong length)"));
    }
    Ok(key)
}

/// Fill `buf` from the kernel's random number generator.
fn random(buf: &mut [u8]) -> std::io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        // SAFETY: the pointer and length describe the unfilled part of `buf`.
        let n = unsafe { libc::getrandom(buf[done..].as_mut_ptr().cast(), buf.len() - done, 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        done += n as usize;
    }
    Ok(())
}

/// `path` with every link resolved: each leading part that exists made canonical, the rest
/// appended (`.` dropped, `..` the parent of what precedes it). For comparing paths that may
/// not exist yet.
pub fn resolve(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            // `out` is canonical wherever it exists, so its parent is the real one.
            Component::ParentDir => {
                out.pop();
            }
            other => {
                out.push(other);
                if let Ok(real) = out.canonicalize() {
                    out = real;
                }
            }
        }
    }
    out
}

/// Where kiln's state directory lies inside the workspace at `root`, relative to it, when it
/// does (a workspace that is `$HOME` itself, or holds `XDG_STATE_HOME`): the writer refuses
/// that path like a protected one, so no edit can plant a journal there.
pub fn inside(root: &Path) -> Option<PathBuf> {
    let base = base().ok()?;
    let root = root.canonicalize().ok()?;
    resolve(&base)
        .strip_prefix(&root)
        .ok()
        .map(Path::to_path_buf)
}

/// The directory under a workspace's state directory that holds the build caches kiln keeps
/// for its runners ([`build_cache`]).
pub const BUILD_CACHES: &str = "build-cache";

/// Where kiln keeps the build cache of the runner `plugin` for the workspace at `root`:
/// `workspaces/<key>/build-cache/<plugin>` in [`base`]. Computed, not created: for comparing a
/// grant with it. `None` when `plugin` is not one plain path component.
pub fn build_cache_path(root: &Path, plugin: &str) -> Result<Option<PathBuf>, StateDirError> {
    if !is_component(plugin) {
        return Ok(None);
    }
    let key = Identity::of(root)?.key();
    Ok(Some(
        base()?
            .join("workspaces")
            .join(key)
            .join(BUILD_CACHES)
            .join(plugin),
    ))
}

/// [`build_cache_path`], created (each new level mode 0700, no level followed when it is a
/// link) with the workspace's state directory. A build cache of kiln's own, keyed by
/// workspace: outside the workspace (nothing a repository ships can plant an object there)
/// and outside the user's own caches (a confined build can write it; the user's next
/// unconfined build never reads it).
pub fn build_cache(root: &Path, plugin: &str) -> Result<Option<PathBuf>, StateDirError> {
    let Some(path) = build_cache_path(root, plugin)? else {
        return Ok(None);
    };
    let Some(state) = WorkspaceState::open(root, true)? else {
        return Ok(None);
    };
    let io = |source| StateDirError::Io {
        path: path.clone(),
        source,
    };
    let Some(caches) = state.subdir(BUILD_CACHES, true)? else {
        return Ok(None);
    };
    Ok(subdir_of(&caches, plugin, true).map_err(io)?.map(|_| path))
}

/// `name` is one ordinary path component.
fn is_component(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\0'])
}

/// What identifies a workspace: its canonical path, device and inode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// The canonical path of the workspace root.
    pub path: PathBuf,
    /// `st_dev` of the root.
    pub dev: u64,
    /// `st_ino` of the root.
    pub ino: u64,
}

impl Identity {
    /// The identity of the workspace at `root`.
    pub fn of(root: &Path) -> Result<Identity, StateDirError> {
        use std::os::unix::fs::MetadataExt;
        let io = |source| StateDirError::Io {
            path: root.to_path_buf(),
            source,
        };
        let path = root.canonicalize().map_err(io)?;
        let meta = std::fs::metadata(&path).map_err(io)?;
        Ok(Identity {
            path,
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }

    /// The name of the workspace's state directory under `workspaces/`.
    pub fn key(&self) -> String {
        use std::os::unix::ffi::OsStrExt;
        let mut h = Sha256::new();
        h.update(self.path.as_os_str().as_bytes());
        h.update(b"\0");
        h.update(self.dev.to_le_bytes());
        h.update(self.ino.to_le_bytes());
        hex::encode(&h.finalize()[..16])
    }
}

/// kiln's state directory for one workspace, open.
pub struct WorkspaceState {
    path: PathBuf,
    dir: Dir,
}

impl WorkspaceState {
    /// The state directory of the workspace at `root`: created (with `workspace.json`) when
    /// `create`, else `Ok(None)` when it does not exist yet.
    pub fn open(root: &Path, create: bool) -> Result<Option<WorkspaceState>, StateDirError> {
        let id = Identity::of(root)?;
        let base = base()?;
        let path = base.join("workspaces").join(id.key());
        let io = |p: &Path| {
            let p = p.to_path_buf();
            move |source| StateDirError::Io { path: p, source }
        };
        if create {
            create_private_all(&base.join("workspaces")).map_err(io(&base))?;
        }
        let workspaces = match open_real_dir(&base.join("workspaces")) {
            Ok(d) => d,
            Err(e) if e.kind() == ErrorKind::NotFound && !create => return Ok(None),
            Err(e) => return Err(io(&base)(e)),
        };
        let Some(dir) = subdir_of(&workspaces, &id.key(), create).map_err(io(&path))? else {
            return Ok(None);
        };
        check_identity(&dir, &path, &id)?;
        Ok(Some(WorkspaceState { path, dir }))
    }

    /// The directory's path (for messages).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory, open.
    pub fn dir(&self) -> &Dir {
        &self.dir
    }

    /// Take the workspace's run lock for `what` (the command, named to a second process that
    /// is refused): one run, undo or edit at a time per workspace, held until it is dropped.
    pub fn lock_run(&self, what: &str) -> Result<RunLock, RunLockError> {
        run_lock::take(&self.dir, &self.path, what)
    }

    /// The subdirectory `name` (one component), opened without following a link; created
    /// (mode 0700) when `create`, else `Ok(None)` when missing.
    pub fn subdir(&self, name: &str, create: bool) -> Result<Option<Dir>, StateDirError> {
        subdir_of(&self.dir, name, create).map_err(|source| StateDirError::Io {
            path: self.path.join(name),
            source,
        })
    }
}

/// `workspace.json` of a state directory: written when missing, else it must name `id`.
fn check_identity(dir: &Dir, path: &Path, id: &Identity) -> Result<(), StateDirError> {
    const NAME: &str = "workspace.json";
    let io = |source| StateDirError::Io {
        path: path.join(NAME),
        source,
    };
    match dir.read(NAME) {
        Ok(bytes) => match serde_json::from_slice::<Identity>(&bytes) {
            Ok(found) if found == *id => Ok(()),
            Ok(found) => Err(StateDirError::Mismatch {
                path: path.to_path_buf(),
                other: format!(
                    "{} (device {}, inode {})",
                    found.path.display(),
                    found.dev,
                    found.ino
                ),
            }),
            Err(e) => Err(io(std::io::Error::other(e))),
        },
        Err(e) if e.kind() == ErrorKind::NotFound => {
            use std::io::Write;
            let text = serde_json::to_vec_pretty(id).map_err(|e| io(std::io::Error::other(e)))?;
            let tmp = format!(".{NAME}.{}", std::process::id());
            let mut f = dir.create(&tmp).map_err(io)?;
            f.write_all(&text).map_err(io)?;
            f.sync_all().map_err(io)?;
            dir.rename(&tmp, dir, NAME).map_err(io)
        }
        Err(e) => Err(io(e)),
    }
}

/// Create `path` and its missing parents, each new one mode 0700.
// kiln's state directory, outside the workspace.
#[allow(clippy::disallowed_methods)]
fn create_private_all(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
}

/// Open the directory at `path` (its last component not a link).
fn open_real_dir(path: &Path) -> std::io::Result<Dir> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(path)?;
    Ok(Dir::from_std_file(f))
}

/// The directory `name` inside `parent`, not followed when it is a link; created (0700) when
/// missing and `create`.
fn subdir_of(parent: &Dir, name: &str, create: bool) -> std::io::Result<Option<Dir>> {
    use cap_std::fs::DirBuilderExt;
    use std::os::fd::{AsRawFd, FromRawFd};
    let c_name = std::ffi::CString::new(name).map_err(std::io::Error::other)?;
    for attempt in 0..2 {
        // SAFETY: openat with a valid directory fd and a NUL-terminated name; the fd returned
        // is owned by the File built from it.
        let fd = unsafe {
            libc::openat(
                parent.as_raw_fd(),
                c_name.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        if fd >= 0 {
            // SAFETY: a fresh descriptor we own.
            let f = unsafe { std::fs::File::from_raw_fd(fd) };
            return Ok(Some(Dir::from_std_file(f)));
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != ErrorKind::NotFound {
            return Err(err);
        }
        if !create || attempt > 0 {
            return Ok(None);
        }
        let mut b = cap_std::fs::DirBuilder::new();
        b.mode(0o700);
        match parent.create_dir_with(name, &b) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_directory_at_the_same_path_is_another_workspace() {
        let t = tempfile::tempdir().unwrap();
        let ws = t.path().join("ws");
        std::fs::create_dir(&ws).unwrap();
        let a = Identity::of(&ws).unwrap();
        // Keep the first inode alive so the new directory cannot reuse its number.
        std::fs::rename(&ws, t.path().join("old")).unwrap();
        std::fs::create_dir(&ws).unwrap();
        let b = Identity::of(&ws).unwrap();
        assert_eq!(a.path, b.path);
        assert_ne!(a.key(), b.key());
    }

    #[test]
    fn user_dirs_take_xdg_then_home() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| std::ffi::OsString::from(v))
            }
        };
        let p = |s: &str| Some(PathBuf::from(s));
        let all: &[(&str, &str)] = &[
            ("HOME", "/h"),
            ("XDG_CONFIG_HOME", "/x/config"),
            ("XDG_STATE_HOME", "/x/state"),
            ("XDG_CACHE_HOME", "/x/cache"),
        ];
        assert_eq!(UserDir::Config.kiln_dir_in(env(all)), p("/x/config/kiln"));
        assert_eq!(UserDir::State.kiln_dir_in(env(all)), p("/x/state/kiln"));
        assert_eq!(UserDir::Cache.kiln_dir_in(env(all)), p("/x/cache/kiln"));
        let home: &[(&str, &str)] = &[("HOME", "/h")];
        assert_eq!(UserDir::Config.kiln_dir_in(env(home)), p("/h/.config/kiln"));
        assert_eq!(
            UserDir::State.kiln_dir_in(env(home)),
            p("/h/.local/state/kiln")
        );
        assert_eq!(UserDir::Cache.kiln_dir_in(env(home)), p("/h/.cache/kiln"));
        // A relative XDG_STATE_HOME or HOME does not count for the state directory; the
        // others take the variables as they are.
        let relative: &[(&str, &str)] = &[
            ("HOME", "/h"),
            ("XDG_STATE_HOME", "rel"),
            ("XDG_CACHE_HOME", "rel"),
        ];
        assert_eq!(
            UserDir::State.kiln_dir_in(env(relative)),
            p("/h/.local/state/kiln")
        );
        assert_eq!(UserDir::Cache.kiln_dir_in(env(relative)), p("rel/kiln"));
        let relative_home: &[(&str, &str)] = &[("HOME", "h")];
        assert_eq!(UserDir::State.kiln_dir_in(env(relative_home)), None);
        assert_eq!(
            UserDir::Config.kiln_dir_in(env(relative_home)),
            p("h/.config/kiln")
        );
        assert_eq!(UserDir::Cache.kiln_dir_in(env(&[])), None);
    }
}

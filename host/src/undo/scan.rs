//! Reading the workspace for undo: a walk of its regular files with their `stat` keys, and
//! the content of one file. Read-only: nothing here writes anything.
//!
//! The walk skips what a run's undo should never restore and what would make it costly on a
//! big repository: `.git/`, `.kiln/`, `node_modules/`, every directory holding a
//! `CACHEDIR.TAG` (cargo's `target/`, and every cache that follows that convention), kiln's
//! state directory when it lies inside the workspace, symbolic links (never followed) and
//! everything that is not a regular file or a directory.

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Files larger than this are not backed up (and undo says so when one changes).
pub const MAX_FILE: u64 = 16 << 20;
/// A walk stops after this many files (and the run's record says it is partial).
pub const MAX_FILES: usize = 200_000;

/// What `stat` says about a file: when any of it differs, its content is read again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StatKey {
    /// Size in bytes.
    pub size: u64,
    /// Modification time, ns since the epoch.
    pub mtime_ns: i64,
    /// Status change time, ns since the epoch.
    pub ctime_ns: i64,
    /// Inode number.
    pub ino: u64,
    /// Permission bits (`st_mode & 0o7777`); 0 in a cache written before kiln kept them.
    #[serde(default)]
    pub mode: u32,
}

impl StatKey {
    fn of(m: &std::fs::Metadata) -> StatKey {
        StatKey {
            size: m.len(),
            mtime_ns: m.mtime() * 1_000_000_000 + m.mtime_nsec(),
            ctime_ns: m.ctime() * 1_000_000_000 + m.ctime_nsec(),
            ino: m.ino(),
            mode: m.mode() & 0o7777,
        }
    }
}

/// The regular files of a workspace (workspace-relative, `/`-separated) with their stat keys.
#[derive(Debug, Default)]
pub struct Listing {
    /// Every regular file found.
    pub files: BTreeMap<String, StatKey>,
    /// True when the walk stopped at [`MAX_FILES`].
    pub truncated: bool,
}

/// Walk `root`.
pub fn walk(root: &Path) -> Listing {
    let skip_state = crate::state_dir::inside(root);
    let mut out = Listing::default();
    let mut stack: Vec<(PathBuf, String)> = vec![(root.to_path_buf(), String::new())];
    while let Some((dir, rel)) = stack.pop() {
        if dir.join("CACHEDIR.TAG").is_file() {
            continue;
        }
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let child_rel = if rel.is_empty() {
                name.clone()
            } else {
                format!("{rel}/{name}")
            };
            let Ok(meta) = e.path().symlink_metadata() else {
                continue;
            };
            if meta.is_dir() {
                let skipped = matches!(name.as_str(), ".git" | ".kiln" | "node_modules")
                    || skip_state
                        .as_deref()
                        .is_some_and(|s| Path::new(&child_rel) == s);
                if !skipped {
                    stack.push((e.path(), child_rel));
                }
            } else if meta.is_file() {
                if out.files.len() >= MAX_FILES {
                    out.truncated = true;
                    return out;
                }
                out.files.insert(child_rel, StatKey::of(&meta));
            }
        }
    }
    out
}

/// What a path holds now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Now {
    /// Nothing.
    Absent,
    /// A regular file with this stat key.
    File(StatKey),
    /// A directory, a link, a device.
    Other,
}

/// What `root/rel` is (no link followed at its end).
pub fn now(root: &Path, rel: &str) -> Now {
    match root.join(rel).symlink_metadata() {
        Ok(m) if m.is_file() => Now::File(StatKey::of(&m)),
        Ok(_) => Now::Other,
        Err(_) => Now::Absent,
    }
}

/// The content of the regular file `root/rel` (its last component not followed, opened
/// non-blocking so a FIFO swapped in cannot stall).
pub fn read(root: &Path, rel: &str) -> std::io::Result<Vec<u8>> {
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(root.join(rel))?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut buf = Vec::new();
    f.read_to_end(&mut buf)?;
    Ok(buf)
}

/// SHA-256 of `bytes`, hex.
pub fn hash(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

//! One run at a time per workspace: an exclusive `flock` on `run.lock` in the workspace's
//! state directory, taken before a run's undo snapshot and first check and held until the
//! process ends (the kernel lets go of it when the process dies, however it dies). `kiln undo`
//! and `kiln edit apply` take it too, so nothing rewrites files under a live run and no run's
//! record takes in another's changes.
//!
//! The file records its holder (pid, command, start) for the refusal message; the lock itself,
//! not that text, decides.

use cap_std::fs::{Dir, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// The lock file's name in a workspace's state directory.
const NAME: &str = "run.lock";

/// Why the run lock was not taken.
#[derive(Debug, thiserror::Error)]
pub enum RunLockError {
    /// Another process holds it.
    #[error(
        "another kiln process is working on this workspace ({holder}); wait for it to end or stop it first"
    )]
    Busy {
        /// What the holder wrote of itself: pid, command and start, or "pid unknown".
        holder: String,
    },
    /// The lock file could not be opened or locked.
    #[error("cannot take the workspace's run lock {path}: {source}")]
    Io {
        /// The lock file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// The held lock; dropping it lets go.
#[derive(Debug)]
pub struct RunLock {
    _file: std::fs::File,
}

/// Take `run.lock` in `dir` (the state directory at `dir_path`) for `what` (the command, for
/// the message a second process gets), without waiting.
pub fn take(dir: &Dir, dir_path: &Path, what: &str) -> Result<RunLock, RunLockError> {
    let path = dir_path.join(NAME);
    let io = |source| RunLockError::Io {
        path: path.clone(),
        source,
    };
    let mut opts = OpenOptions::new();
    opts.read(true).write(true).create(true).truncate(false);
    let mut file = dir.open_with(NAME, &opts).map_err(io)?.into_std();
    // SAFETY: flock on a descriptor this function owns.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(io(err));
        }
        let mut text = String::new();
        let _ = file.read_to_string(&mut text);
        let holder = text.trim();
        return Err(RunLockError::Busy {
            holder: if holder.is_empty() {
                "pid unknown".to_string()
            } else {
                holder.chars().take(200).collect()
            },
        });
    }
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let me = format!(
        "pid {}, `kiln {}`, since unix time {since}",
        std::process::id(),
        what
    );
    // Only for the message: a failure to write it leaves the lock held all the same.
    let _ = file
        .set_len(0)
        .and_then(|()| file.rewind())
        .and_then(|()| file.write_all(me.as_bytes()));
    Ok(RunLock { _file: file })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_taker_is_refused_naming_the_holder_until_the_first_lets_go() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = Dir::open_ambient_dir(tmp.path(), cap_std::ambient_authority()).unwrap();
        let held = take(&dir, tmp.path(), "fix").unwrap();
        // flock belongs to the open file description: a second open in this process conflicts
        // as another process's would.
        match take(&dir, tmp.path(), "undo") {
            Err(RunLockError::Busy { holder }) => {
                assert!(
                    holder.contains(&format!("pid {}", std::process::id())),
                    "{holder}"
                );
                assert!(holder.contains("`kiln fix`"), "{holder}");
            }
            other => panic!("expected Busy, got {other:?}"),
        }
        drop(held);
        take(&dir, tmp.path(), "undo").unwrap();
    }
}

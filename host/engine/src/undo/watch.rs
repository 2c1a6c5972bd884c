//! Change notification for undo's checkpoints (Linux `inotify`): one watch on every directory
//! the snapshot's walk entered, so a checkpoint reads what changed since the last one instead
//! of walking the workspace again. The kernel queues an event as each write, creation,
//! removal or rename happens, whichever process makes it (a program the run started in its
//! sandbox's view of the workspace included: watches follow inodes, not mounts), so once a
//! program has exited, or kiln's writer has returned, its changes are in the queue.
//!
//! When the answer cannot be trusted (the queue overflowed, a watched directory was moved or
//! removed, the watch limit was reached) [`Drained::rescan`] says so and the caller walks the
//! workspace as it would without notification. Read-only: nothing here writes anything.

use std::collections::{BTreeSet, HashMap};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

/// What a checkpoint learns from the queue.
#[derive(Debug, Default)]
pub struct Drained {
    /// Workspace-relative paths created, written, removed or renamed (files and directories).
    pub paths: BTreeSet<String>,
    /// Directories created or moved in: the caller looks inside and watches them.
    pub new_dirs: BTreeSet<String>,
    /// Events were lost, or the watched tree moved: walk the workspace instead.
    pub rescan: bool,
}

/// The watches of one run.
pub struct Watcher {
    fd: OwnedFd,
    /// Watch descriptor → workspace-relative directory (`""`: the root).
    dirs: HashMap<i32, String>,
    /// Set when a watch could not be added (the limit): the caller walks instead.
    broken: bool,
}

const MASK: u32 = libc::IN_MODIFY
    | libc::IN_CLOSE_WRITE
    | libc::IN_ATTRIB
    | libc::IN_CREATE
    | libc::IN_DELETE
    | libc::IN_MOVED_FROM
    | libc::IN_MOVED_TO
    | libc::IN_DELETE_SELF
    | libc::IN_MOVE_SELF
    | libc::IN_ONLYDIR
    | libc::IN_DONT_FOLLOW
    | libc::IN_EXCL_UNLINK;

impl Watcher {
    /// A new, empty set of watches (`None` where inotify is not available).
    pub fn new() -> Option<Watcher> {
        // The test hook: `KILN_TEST_NO_INOTIFY` makes kiln behave as where inotify is missing
        // (every checkpoint walks). Honoured by debug builds only.
        #[cfg(debug_assertions)]
        if kiln_env::env().test().no_inotify {
            return None;
        }
        // SAFETY: plain system call; the descriptor is owned below.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        if fd < 0 {
            return None;
        }
        Some(Watcher {
            // SAFETY: `fd` was just returned by the kernel and nothing else owns it.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            dirs: HashMap::new(),
            broken: false,
        })
    }

    /// Watch the directory `rel` of the workspace at `root`. False when it cannot be (the
    /// watch limit, or it is gone): from then on [`Watcher::drain`] asks for a rescan.
    pub fn add(&mut self, root: &Path, rel: &str) -> bool {
        use std::os::unix::ffi::OsStrExt;
        let path = if rel.is_empty() {
            root.to_path_buf()
        } else {
            root.join(rel)
        };
        let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
            self.broken = true;
            return false;
        };
        // SAFETY: a valid descriptor and a NUL-terminated path.
        let wd = unsafe { libc::inotify_add_watch(self.fd.as_raw_fd(), c.as_ptr(), MASK) };
        if wd < 0 {
            let gone = std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOENT);
            // A directory removed before it could be watched has nothing to report.
            if !gone {
                self.broken = true;
            }
            return false;
        }
        self.dirs.insert(wd, rel.to_string());
        true
    }

    /// Everything queued since the last call.
    pub fn drain(&mut self) -> Drained {
        let mut out = Drained {
            rescan: self.broken,
            ..Drained::default()
        };
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            // SAFETY: reading into a buffer we own, of the length given.
            let n = unsafe {
                libc::read(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast::<libc::c_void>(),
                    buf.len(),
                )
            };
            if n <= 0 {
                break;
            }
            self.parse(&buf[..n as usize], &mut out);
        }
        out
    }

    fn parse(&mut self, buf: &[u8], out: &mut Drained) {
        const HEADER: usize = 16;
        let mut at = 0;
        while at + HEADER <= buf.len() {
            let word = |i: usize| {
                let b = &buf[at + i..at + i + 4];
                [b[0], b[1], b[2], b[3]]
            };
            let wd = i32::from_ne_bytes(word(0));
            let mask = u32::from_ne_bytes(word(4));
            let len = u32::from_ne_bytes(word(12)) as usize;
            let name_bytes = &buf[(at + HEADER).min(buf.len())..(at + HEADER + len).min(buf.len())];
            at += HEADER + len;
            let name_end = name_bytes
                .iter()
                .position(|b| *b == 0)
                .unwrap_or(name_bytes.len());
            let name = String::from_utf8_lossy(&name_bytes[..name_end]).into_owned();
            if mask & libc::IN_Q_OVERFLOW != 0 {
                out.rescan = true;
                continue;
            }
            if mask & libc::IN_IGNORED != 0 {
                self.dirs.remove(&wd);
                continue;
            }
            // A watched directory moved: its watch's paths are stale. (One removed was empty
            // by then: its files' removals came first.)
            if mask & libc::IN_MOVE_SELF != 0 {
                out.rescan = true;
                continue;
            }
            if mask & libc::IN_DELETE_SELF != 0 {
                continue;
            }
            let Some(dir) = self.dirs.get(&wd) else {
                continue;
            };
            if name.is_empty() {
                continue;
            }
            let rel = if dir.is_empty() {
                name
            } else {
                format!("{dir}/{name}")
            };
            if mask & libc::IN_ISDIR != 0 {
                if mask & libc::IN_MOVED_FROM != 0 {
                    // Every file below moved away, under names no event gives.
                    out.rescan = true;
                } else if mask & (libc::IN_CREATE | libc::IN_MOVED_TO) != 0 {
                    out.new_dirs.insert(rel.clone());
                }
            }
            out.paths.insert(rel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_writes_creations_new_directories_and_asks_for_a_walk_after_a_move() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/a.txt"), "a").unwrap();
        let mut w = Watcher::new().expect("inotify");
        assert!(w.add(root, ""));
        assert!(w.add(root, "sub"));
        assert!(w.drain().paths.is_empty());

        std::fs::write(root.join("sub/a.txt"), "b").unwrap();
        std::fs::write(root.join("new.txt"), "n").unwrap();
        std::fs::create_dir(root.join("made")).unwrap();
        std::fs::remove_file(root.join("new.txt")).unwrap();
        let d = w.drain();
        assert!(!d.rescan);
        let paths: Vec<&str> = d.paths.iter().map(String::as_str).collect();
        assert_eq!(paths, ["made", "new.txt", "sub/a.txt"]);
        assert_eq!(d.new_dirs.iter().collect::<Vec<_>>(), ["made"]);
        assert!(w.drain().paths.is_empty(), "drained");

        // Emptied and removed: its files' removals say all.
        std::fs::remove_file(root.join("sub/a.txt")).unwrap();
        std::fs::remove_dir(root.join("sub")).unwrap();
        let d = w.drain();
        assert!(!d.rescan);
        assert!(d.paths.contains("sub/a.txt") && d.paths.contains("sub"));

        std::fs::create_dir(root.join("moved")).unwrap();
        assert!(w.add(root, "moved"));
        std::fs::rename(root.join("moved"), root.join("elsewhere")).unwrap();
        assert!(
            w.drain().rescan,
            "a directory moved: its files moved under names no event gives"
        );
    }
}

//! The descendants of the programs plugins run. Each program starts in a session of its own;
//! kiln is a child subreaper, so a descendant that double-forks or calls `setsid` is re-parented
//! to kiln rather than to init. When a call ends, every process of its session, everything
//! below them and the stray orphans re-parented to kiln are killed and reaped, found via `/proc`.
//!
//! A process of the call's session is the call's: Linux keeps a session id allocated while any
//! process uses it, so no unrelated process can have it. An orphan that left the session
//! (`setsid`) cannot be told apart from another call's, so strays are swept only when no other
//! call is running (then they are killed by whichever call ends last). A stray must carry
//! `no_new_privs`, which every program kiln runs sets and passes on to all its descendants, so a
//! child of the embedding process that runs in a session of its own is left alone (unless kiln
//! itself runs with `no_new_privs`, when the mark tells nothing).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Mutex, MutexGuard, Once};
use std::time::{Duration, Instant};

/// How long a sweep waits for killed processes to die (a process in uninterruptible sleep can
/// take a while; it is reaped by a later sweep).
const SWEEP_LIMIT: Duration = Duration::from_secs(2);

#[derive(Default)]
struct Tracker {
    /// Calls between [`Call::begin`] and the end of [`Call::finish`].
    in_flight: usize,
    /// Direct children spawned by calls (tokio reaps those, never a sweep).
    children: BTreeSet<i32>,
}

static TRACKER: Mutex<Tracker> = Mutex::new(Tracker {
    in_flight: 0,
    children: BTreeSet::new(),
});

fn tracker() -> MutexGuard<'static, Tracker> {
    TRACKER.lock().unwrap_or_else(|p| p.into_inner())
}

/// Make kiln the reaper of its descendants' orphans (once per process).
pub fn become_subreaper() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: sets a flag of this process; no memory is passed.
        let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
        if rc != 0 {
            eprintln!(
                "kiln: warning: cannot become a child subreaper ({}); programs that daemonize may outlive their call",
                std::io::Error::last_os_error()
            );
        }
    });
}

/// One exec call's processes, from before the spawn until every one of them is gone.
#[derive(Debug)]
pub struct Call {
    /// The direct child's pid, which is also its session id.
    pid: Option<i32>,
    finished: bool,
}

impl Call {
    /// Announce a call before spawning (so no sweep takes its child for a stray).
    pub fn begin() -> Call {
        become_subreaper();
        tracker().in_flight += 1;
        Call {
            pid: None,
            finished: false,
        }
    }

    /// The direct child was spawned.
    pub fn spawned(&mut self, pid: i32) {
        tracker().children.insert(pid);
        self.pid = Some(pid);
    }

    /// A function that kills every process of the call (the direct child included) and reaps
    /// the orphans among them; blocking, bounded by a short limit. The call stays in flight.
    pub fn killer(&self) -> impl FnOnce() + Send + 'static {
        let sid = self.pid;
        move || {
            if sid.is_some() {
                let children = tracker().children.clone();
                sweep(sid, false, &children);
            }
        }
    }

    /// The call is over: kill and reap whatever is left of it and, when no other call runs,
    /// the stray orphans too. Blocking, bounded.
    pub fn finish(mut self) {
        self.end();
    }

    fn end(&mut self) {
        if self.finished {
            return;
        }
        self.finished = true;
        let mut t = tracker();
        t.in_flight -= 1;
        // The lock is held through the sweep: no call can spawn (and look like a stray) meanwhile.
        let strays = t.in_flight == 0;
        sweep(self.pid, strays, &t.children);
        if let Some(pid) = self.pid {
            t.children.remove(&pid);
        }
    }
}

impl Drop for Call {
    /// A cancelled call (its future dropped) is cleaned up here.
    fn drop(&mut self) {
        self.end();
    }
}

/// What `/proc/<pid>/stat` says about one process.
#[derive(Debug, Clone, Copy)]
struct Proc {
    pid: i32,
    ppid: i32,
    sid: i32,
    zombie: bool,
}

fn scan() -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            parse_stat(pid, &stat)
        })
        .collect()
}

/// Parse `pid (comm) state ppid pgrp session ...`; `comm` may contain anything, so the fields
/// are read after its last `)`.
fn parse_stat(pid: i32, stat: &str) -> Option<Proc> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut f = rest.split_whitespace();
    let state = f.next()?;
    let ppid = f.next()?.parse().ok()?;
    let _pgrp = f.next()?;
    let sid = f.next()?.parse().ok()?;
    Some(Proc {
        pid,
        ppid,
        sid,
        zombie: state == "Z" || state == "X",
    })
}

/// Whether a process runs with `no_new_privs` (the mark of everything a call started).
fn no_new_privs(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
        s.lines().any(|l| {
            l.strip_prefix("NoNewPrivs:")
                .is_some_and(|v| v.trim() == "1")
        })
    })
}

/// The processes to kill: those of session `sid`, with `strays` kiln's children outside its
/// own session that no call spawned and that carry the mark, and everything below them.
fn targets(
    procs: &[Proc],
    me: i32,
    my_sid: i32,
    sid: Option<i32>,
    strays: bool,
    children: &BTreeSet<i32>,
    marked: &dyn Fn(i32) -> bool,
) -> HashSet<i32> {
    let mut t: HashSet<i32> = procs
        .iter()
        .filter(|p| p.pid != me)
        .filter(|p| {
            Some(p.sid) == sid
                || (strays
                    && p.ppid == me
                    && p.sid != my_sid
                    && !children.contains(&p.pid)
                    && marked(p.pid))
        })
        .map(|p| p.pid)
        .collect();
    let mut by_parent: HashMap<i32, Vec<i32>> = HashMap::new();
    for p in procs {
        by_parent.entry(p.ppid).or_default().push(p.pid);
    }
    let mut stack: Vec<i32> = t.iter().copied().collect();
    while let Some(pid) = stack.pop() {
        for &c in by_parent.get(&pid).into_iter().flatten() {
            if c != me && t.insert(c) {
                stack.push(c);
            }
        }
    }
    t
}

/// Kill the targets, reap those that are kiln's children (never a call's direct child: tokio
/// reaps those), and repeat until none is left or the limit passes.
fn sweep(sid: Option<i32>, strays: bool, children: &BTreeSet<i32>) {
    if sid.is_none() && !strays {
        return;
    }
    // SAFETY: getpid and getsid(0) only read this process's ids.
    let (me, my_sid) = unsafe { (libc::getpid(), libc::getsid(0)) };
    let self_marked = no_new_privs(me);
    let marked = |pid: i32| self_marked || no_new_privs(pid);
    let start = Instant::now();
    loop {
        let procs = scan();
        let t = targets(&procs, me, my_sid, sid, strays, children, &marked);
        let mut pending = false;
        for p in procs.iter().filter(|p| t.contains(&p.pid)) {
            if p.zombie {
                if p.ppid == me {
                    if !children.contains(&p.pid) {
                        // SAFETY: reaps one known child without blocking.
                        unsafe {
                            libc::waitpid(p.pid, std::ptr::null_mut(), libc::WNOHANG);
                        }
                    }
                } else if t.contains(&p.ppid) {
                    // Re-parented to kiln once its parent (being killed) is gone.
                    pending = true;
                }
            } else {
                // SAFETY: sends a signal to a process found above; a pid that exited since is
                // still held as a session member or kiln's child, or is gone (ESRCH).
                unsafe {
                    libc::kill(p.pid, libc::SIGKILL);
                }
                pending = true;
            }
        }
        if !pending || start.elapsed() > SWEEP_LIMIT {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pid: i32, ppid: i32, sid: i32) -> Proc {
        Proc {
            pid,
            ppid,
            sid,
            zombie: false,
        }
    }

    #[test]
    fn stat_fields_are_read_after_the_command_name() {
        let s = "42 (evil) Z 7 8) S 1 2 3 4 5";
        let q = parse_stat(42, s).unwrap();
        assert_eq!((q.ppid, q.sid, q.zombie), (1, 3, false));
        let q = parse_stat(9, "9 (sh) Z 100 9 9 0").unwrap();
        assert_eq!((q.ppid, q.sid, q.zombie), (100, 9, true));
    }

    #[test]
    fn targets_are_the_session_its_descendants_and_strays_only_when_asked() {
        let me = 100;
        let procs = [
            p(100, 1, 50),    // kiln
            p(200, 100, 200), // the call's child (session 200)
            p(201, 200, 200), // its child
            p(202, 201, 202), // left the session, parent alive
            p(203, 202, 202), // below that
            p(300, 100, 300), // setsid'd orphan re-parented to kiln
            p(400, 100, 50),  // a hook kiln runs in its own session
            p(500, 100, 500), // another call's direct child
            p(600, 1, 600),   // unrelated
            p(700, 100, 700), // the embedder's own child in a session of its own (no mark)
        ];
        let children: BTreeSet<i32> = [200, 500].into();
        let marked = |pid: i32| pid != 700;
        let t = targets(&procs, me, 50, Some(200), false, &children, &marked);
        assert_eq!(t, [200, 201, 202, 203].into());
        let t = targets(&procs, me, 50, Some(200), true, &children, &marked);
        assert_eq!(t, [200, 201, 202, 203, 300].into());
    }
}

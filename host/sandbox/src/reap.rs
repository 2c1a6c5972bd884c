//! The descendants of the programs kiln runs, and how they end with their call.
//!
//! Where the kernel allows it (root, or `CAP_SYS_ADMIN`), every call runs in a PID namespace of
//! its own ([`enter_pid_ns`]): the spawned process waits for the namespace's init, which runs
//! the program as its child and exits with it, and the kernel then kills everything left in
//! the namespace, a fork chain included. Nothing of the call can leave it.
//!
//! Elsewhere each program starts in a session of its own; kiln is a child subreaper, so a
//! descendant that double-forks or calls `setsid` is re-parented to kiln rather than to init.
//! When a call ends its process group is killed (atomic against fork), and every process of its
//! session, everything below them and the stray orphans re-parented to kiln are stopped, then
//! killed, found via `/proc`, again and again until none is left: a sweep gives up waiting only
//! once no new process has appeared for a while.
//!
//! A process of the call's session is the call's: Linux keeps a session id allocated while any
//! process uses it, so no unrelated process can have it. An orphan that left the session
//! (`setsid`) cannot be told apart from another call's, so strays are swept only when no other
//! call is running (then they are killed by whichever call ends last). A stray must carry
//! `no_new_privs`, which every program kiln runs sets and passes on to all its descendants, so a
//! child of the embedding process that runs in a session of its own is left alone (unless kiln
//! itself runs with `no_new_privs`, when the mark tells nothing).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Mutex, MutexGuard, Once, OnceLock};
use std::time::{Duration, Instant};

/// How long a sweep waits for killed processes to die once no new process has appeared (a
/// process in uninterruptible sleep can take a while; it is reaped by a later sweep). A process
/// that forks keeps the sweep going: the limit only starts when the call's processes stop
/// multiplying.
const SWEEP_LIMIT: Duration = Duration::from_secs(2);

/// Test hook: in debug builds only, `KILN_TEST_NO_PIDNS=1` makes kiln behave as on a kernel
/// that gives it no PID namespaces. Release builds ignore it.
const TEST_NO_PIDNS: &str = kiln_env::hook::NO_PIDNS;

/// Whether calls can get PID namespaces of their own here, and whether they need a user
/// namespace for it (kiln is not root, but unprivileged user namespaces are allowed).
#[derive(Debug)]
pub struct PidNs {
    missing: Option<String>,
    /// `Some((uid_map, gid_map))`: enter a user namespace first, mapping kiln's own uid and gid
    /// to themselves (written before the fork: the child allocates nothing).
    user: Option<(Vec<u8>, Vec<u8>)>,
}

impl PidNs {
    /// Probe once per process: a forked child tries `unshare(CLONE_NEWPID)` and exits.
    pub fn current() -> &'static PidNs {
        static CURRENT: OnceLock<PidNs> = OnceLock::new();
        CURRENT.get_or_init(|| {
            if cfg!(debug_assertions) && kiln_env::env().test().no_pidns {
                return PidNs {
                    missing: Some(format!("turned off by {TEST_NO_PIDNS}=1 (debug build)")),
                    user: None,
                };
            }
            match probe(NS) {
                None => PidNs {
                    missing: None,
                    user: None,
                },
                // Not root: a user namespace of kiln's own ids gives the PID namespace.
                Some(why) => match probe(NS | libc::CLONE_NEWUSER) {
                    None => PidNs {
                        missing: None,
                        user: Some(id_maps()),
                    },
                    Some(user_why) => PidNs {
                        missing: Some(format!("{why}; in a user namespace: {user_why}")),
                        user: None,
                    },
                },
            }
        })
    }

    /// Calls run in PID namespaces.
    pub fn available(&self) -> bool {
        self.missing.is_none()
    }

    /// Why not, when they cannot.
    pub fn missing(&self) -> Option<&str> {
        self.missing.as_deref()
    }

    /// Calls enter a user namespace first (kiln is not root).
    pub fn in_user_ns(&self) -> bool {
        self.user.is_some()
    }
}

/// The namespaces a call gets: its own PIDs and its own SysV IPC.
const NS: libc::c_int = libc::CLONE_NEWPID | libc::CLONE_NEWIPC;

/// `uid_map` and `gid_map` lines mapping kiln's own ids to themselves.
fn id_maps() -> (Vec<u8>, Vec<u8>) {
    // SAFETY: getuid and getgid only read this process's ids.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    (
        format!("{uid} {uid} 1\n").into_bytes(),
        format!("{gid} {gid} 1\n").into_bytes(),
    )
}

/// Write `data` to the file at `path` (a NUL-terminated `/proc/self/...` name).
///
/// # Safety
/// System calls only, on memory the caller keeps alive.
unsafe fn write_proc(path: &std::ffi::CStr, data: &[u8]) -> std::io::Result<()> {
    // SAFETY: open, write and close on a live NUL-terminated path and a live buffer.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let n = libc::write(fd, data.as_ptr().cast(), data.len());
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        if n != data.len() as isize {
            return Err(err);
        }
    }
    Ok(())
}

fn probe(flags: libc::c_int) -> Option<String> {
    // SAFETY: the child makes two system calls and exits; the parent waits for that child only.
    let errno = unsafe {
        let pid = libc::fork();
        if pid == 0 {
            let rc = libc::unshare(flags);
            libc::_exit(if rc == 0 {
                0
            } else {
                *libc::__errno_location() & 0x7f
            });
        }
        match probe_exit(pid, libc::EINVAL) {
            Ok(code) => code,
            Err(why) => return Some(why),
        }
    };
    match errno {
        0 => None,
        libc::EPERM => Some(
            "creating a PID namespace needs CAP_SYS_ADMIN (run as root, or allow unprivileged user namespaces)".into(),
        ),
        e => Some(format!(
            "this kernel gives no PID namespaces: {}",
            std::io::Error::from_raw_os_error(e)
        )),
    }
}

/// The read end of a pipe whose write end only kiln holds (close-on-exec, and closed by the
/// processes that wait in a call): it reads end-of-file once kiln is gone, however it died.
pub fn lifeline() -> libc::c_int {
    static LIFELINE: OnceLock<libc::c_int> = OnceLock::new();
    *LIFELINE.get_or_init(|| {
        let mut fds = [-1; 2];
        // SAFETY: creates two descriptors that stay open for the life of the process.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return -1;
        }
        fds[0]
    })
}

/// The namespaces a call's view needs on top of [`NS`]: its own mounts and host name, and its
/// own network (only `lo`, down) unless `net` is granted.
pub fn view_flags(net: bool) -> libc::c_int {
    libc::CLONE_NEWNS | libc::CLONE_NEWUTS | if net { 0 } else { libc::CLONE_NEWNET }
}

/// Whether calls can get a view of their own here (mount, UTS and network namespaces beside the
/// PID one, a tmpfs and a procfs mounted inside): `None` when they can, else why not. Probed
/// once per process in a forked child, as the calls will do it.
pub fn view_missing() -> Option<&'static str> {
    static CURRENT: OnceLock<Option<String>> = OnceLock::new();
    CURRENT
        .get_or_init(|| {
            if cfg!(debug_assertions) && kiln_env::env().test().no_view {
                return Some(format!("turned off by {TEST_NO_VIEW}=1 (debug build)"));
            }
            if let Some(why) = PidNs::current().missing() {
                return Some(why.to_string());
            }
            probe_view()
        })
        .as_deref()
}

/// Test hook: in debug builds only, `KILN_TEST_NO_VIEW=1` makes kiln behave as on a kernel that
/// refuses mount namespaces (the fallback: Landlock and seccomp only). Release builds ignore it.
const TEST_NO_VIEW: &str = kiln_env::hook::NO_VIEW;

/// The exit code of the probe child `pid` (`killed` when a signal ended it), or why there is
/// none (the fork failed, or waiting did).
fn probe_exit(pid: libc::pid_t, killed: i32) -> Result<i32, String> {
    if pid < 0 {
        return Err(format!("cannot probe: {}", std::io::Error::last_os_error()));
    }
    let mut st = 0;
    // SAFETY: waits for this process's own child, writing the live `st`.
    while unsafe { libc::waitpid(pid, &mut st, 0) } < 0 {
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return Err("cannot probe: waitpid failed".into());
        }
    }
    Ok(if libc::WIFEXITED(st) {
        libc::WEXITSTATUS(st)
    } else {
        killed
    })
}

fn probe_view() -> Option<String> {
    // SAFETY: the children make system calls on constants and exit; the parent waits for its
    // own child only.
    let code = unsafe {
        let pid = libc::fork();
        if pid == 0 {
            let flags = NS | view_flags(false);
            let rc = match &PidNs::current().user {
                None => libc::unshare(flags),
                Some((uid_map, gid_map)) => {
                    let mut rc = libc::unshare(flags | libc::CLONE_NEWUSER);
                    if rc == 0
                        && (write_proc(c"/proc/self/setgroups", b"deny").is_err()
                            || write_proc(c"/proc/self/uid_map", uid_map).is_err()
                            || write_proc(c"/proc/self/gid_map", gid_map).is_err())
                    {
                        rc = -1;
                    }
                    rc
                }
            };
            if rc != 0 {
                libc::_exit(1);
            }
            // The mounts are made by a process of the new PID namespace, as a call's are.
            let inner = libc::fork();
            if inner == 0 {
                let null = std::ptr::null::<libc::c_char>();
                let ok = libc::mount(
                    null,
                    c"/".as_ptr(),
                    null,
                    libc::MS_REC | libc::MS_PRIVATE,
                    null.cast(),
                ) == 0
                    && libc::mount(
                        c"tmpfs".as_ptr(),
                        c"/tmp".as_ptr(),
                        c"tmpfs".as_ptr(),
                        0,
                        null.cast(),
                    ) == 0
                    && libc::mkdir(c"/tmp/p".as_ptr(), 0o755) == 0
                    && libc::mount(
                        c"proc".as_ptr(),
                        c"/tmp/p".as_ptr(),
                        c"proc".as_ptr(),
                        0,
                        null.cast(),
                    ) == 0;
                libc::_exit(if ok { 0 } else { 2 });
            }
            let mut st = 0;
            libc::waitpid(inner, &mut st, 0);
            libc::_exit(if libc::WIFEXITED(st) {
                libc::WEXITSTATUS(st)
            } else {
                3
            });
        }
        match probe_exit(pid, 3) {
            Ok(code) => code,
            Err(why) => return Some(why),
        }
    };
    match code {
        0 => None,
        1 => Some("the kernel refuses mount or network namespaces to kiln".into()),
        2 => Some("the kernel refuses mounting a tmpfs or /proc in a new namespace (a container that hides parts of /proc?)".into()),
        _ => Some("the namespace probe failed".into()),
    }
}

/// In the child, between fork and exec: enter a new PID namespace (and, with `view` flags,
/// the other namespaces of the call's view). The calling process (the
/// one kiln waits for) forks the namespace's init and only waits for it, then exits as the
/// program did; init forks the program's process and reaps orphans until the program exits,
/// then exits, and the kernel kills whatever is left in the namespace. When kiln dies first
/// (`lifeline` reads end-of-file), the waiting process kills init, which ends the namespace too.
/// Returns in the program's process only.
///
/// # Safety
/// Async-signal-safe system calls only, no allocation (runs after `fork` in a copy of a
/// multi-threaded process). Never returns in the two waiting processes.
pub unsafe fn enter_pid_ns(lifeline: libc::c_int, view: libc::c_int) -> std::io::Result<()> {
    let err = std::io::Error::last_os_error;
    // SAFETY: system calls on this process and on descriptors it just created.
    unsafe {
        match &PidNs::current().user {
            None => {
                if libc::unshare(NS | view) != 0 {
                    return Err(err());
                }
            }
            Some((uid_map, gid_map)) => {
                // kiln is not root: a user namespace where its ids map to themselves, which
                // may then create the PID and IPC namespaces.
                if libc::unshare(NS | view | libc::CLONE_NEWUSER) != 0 {
                    return Err(err());
                }
                write_proc(c"/proc/self/setgroups", b"deny")?;
                write_proc(c"/proc/self/uid_map", uid_map)?;
                write_proc(c"/proc/self/gid_map", gid_map)?;
            }
        }
        let mut fds = [-1; 2];
        if libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            return Err(err());
        }
        let init = libc::fork();
        if init < 0 {
            return Err(err());
        }
        if init > 0 {
            libc::close(fds[1]);
            // Hold none of kiln's descriptors (another call's pipes, the exec error pipe whose
            // end tells kiln the program started) while waiting.
            close_all_but(&[fds[0], lifeline]);
            outer(init, fds[0], lifeline);
        }
        // PID 1 of the namespace: ends when the process that spawned it does (kiln killed it).
        libc::close(fds[0]);
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        );
        let program = libc::fork();
        if program < 0 {
            return Err(err());
        }
        if program > 0 {
            close_all_but(&[fds[1]]);
            init_loop(program, fds[1]);
        }
        libc::close(fds[1]);
    }
    Ok(())
}

/// The highest descriptor number to visit one by one where `close_range` is missing: the
/// descriptor limit, at most 65536 (1024 when it cannot be read).
///
/// # Safety
/// One system call on stack memory.
pub(super) unsafe fn fd_limit() -> libc::c_int {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the live `lim`.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        lim.rlim_cur.min(1 << 16) as libc::c_int
    } else {
        1024
    }
}

/// Close every descriptor but those in `keep` (standard streams included; negative entries
/// are ignored).
///
/// # Safety
/// System calls only.
unsafe fn close_all_but(keep: &[libc::c_int]) {
    let mut kept = [-1; 2];
    for (slot, &k) in kept.iter_mut().zip(keep) {
        *slot = k;
    }
    if kept[0] > kept[1] {
        kept.swap(0, 1);
    }
    // SAFETY: closing descriptors of this process.
    unsafe {
        let mut from: libc::c_int = 0;
        let mut failed = false;
        for &k in kept.iter().filter(|&&k| k >= 0) {
            if k > from {
                failed |=
                    libc::syscall(libc::SYS_close_range, from as u32, (k - 1) as u32, 0u32) != 0;
            }
            from = k + 1;
        }
        failed |= libc::syscall(libc::SYS_close_range, from as u32, u32::MAX, 0u32) != 0;
        if failed {
            // Kernels before 5.9: one by one, up to the descriptor limit.
            let max = fd_limit();
            for fd in (0..max).filter(|fd| !kept.contains(fd)) {
                libc::close(fd);
            }
        }
    }
}

/// The spawned process: wait for the namespace's init (killing it if kiln dies meanwhile), then
/// end as the program did (its wait status comes through `status_fd`; without it, as init did).
///
/// # Safety
/// System calls only; never returns.
unsafe fn outer(init: libc::pid_t, status_fd: libc::c_int, lifeline: libc::c_int) -> ! {
    // SAFETY: polling descriptors of this process, signalling and waiting for its own child,
    // reading into stack memory, exiting.
    unsafe {
        let pidfd = libc::syscall(libc::SYS_pidfd_open, init, 0) as libc::c_int;
        if pidfd >= 0 && lifeline >= 0 {
            let mut fds = [
                libc::pollfd {
                    fd: pidfd,
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: lifeline,
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            loop {
                let n = libc::poll(fds.as_mut_ptr(), 2, -1);
                if n < 0 && *libc::__errno_location() == libc::EINTR {
                    continue;
                }
                if n > 0 && fds[1].revents != 0 {
                    // kiln is gone: end the call's namespace with it.
                    libc::kill(init, libc::SIGKILL);
                }
                break;
            }
        }
        let mut st = 0;
        while libc::waitpid(init, &mut st, 0) != init {
            if *libc::__errno_location() != libc::EINTR {
                libc::_exit(127);
            }
        }
        let mut program: libc::c_int = 0;
        let n = libc::read(
            status_fd,
            (&mut program as *mut libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>(),
        );
        if n == std::mem::size_of::<libc::c_int>() as isize {
            st = program;
        }
        exit_as(st)
    }
}

/// PID 1 of the namespace: reap every child (orphans are re-parented here) until the program
/// exits; pass its wait status on and exit, which ends the namespace.
///
/// # Safety
/// System calls only; never returns.
unsafe fn init_loop(program: libc::pid_t, status_fd: libc::c_int) -> ! {
    // SAFETY: waiting for children, writing stack memory to a pipe, exiting.
    unsafe {
        loop {
            let mut st = 0;
            let pid = libc::waitpid(-1, &mut st, libc::__WALL);
            if pid == program {
                libc::write(
                    status_fd,
                    (&st as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>(),
                );
                libc::_exit(0);
            }
            if pid < 0 && *libc::__errno_location() == libc::ECHILD {
                libc::_exit(127);
            }
        }
    }
}

/// Exit with wait status `st`: the same code, or death by the same signal (no core dump).
///
/// # Safety
/// System calls only; never returns.
unsafe fn exit_as(st: libc::c_int) -> ! {
    // SAFETY: changes this process's own limits, signal disposition and mask, then ends it.
    unsafe {
        if libc::WIFSIGNALED(st) {
            let sig = libc::WTERMSIG(st);
            let none = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &none);
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(sig, &act, std::ptr::null_mut());
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
            libc::kill(libc::getpid(), sig);
            libc::_exit(128 + sig);
        }
        libc::_exit(if libc::WIFEXITED(st) {
            libc::WEXITSTATUS(st)
        } else {
            127
        })
    }
}

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
    /// The call runs in a PID namespace of its own.
    pid_ns: bool,
    /// The direct child was waited for: in a PID namespace, nothing of the call is left.
    exited: bool,
}

impl Call {
    /// Announce a call before spawning (so no sweep takes its child for a stray); `pid_ns`
    /// when its program runs in a PID namespace of its own.
    pub fn begin(pid_ns: bool) -> Call {
        become_subreaper();
        tracker().in_flight += 1;
        Call {
            pid: None,
            finished: false,
            pid_ns,
            exited: false,
        }
    }

    /// The direct child exited and was waited for. In a PID namespace that means every
    /// process of the call is gone (the namespace's init exited before it, and the kernel does
    /// not let init finish exiting while anything of its namespace is alive).
    pub fn exited(&mut self) {
        self.exited = true;
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
        if self.pid_ns && self.exited {
            // Nothing left, and nothing could have left the namespace: no sweep to make.
            if let Some(pid) = self.pid {
                t.children.remove(&pid);
            }
            return;
        }
        // The lock is held through the sweep: no call can spawn (and look like a stray) meanwhile.
        // With PID namespaces no process leaves its call, so there are no strays to look for.
        let strays = t.in_flight == 0 && !self.pid_ns;
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

/// Kill the targets and reap those that are kiln's children (never a call's direct child:
/// tokio reaps those), again and again until none is left. Each round first kills the call's
/// process group (the kernel applies that atomically against fork), then stops every target
/// found (a stopped process cannot fork) and kills it. The sweep gives up only once no new
/// process has appeared for [`SWEEP_LIMIT`]: a chain that keeps forking keeps it going.
fn sweep(sid: Option<i32>, strays: bool, children: &BTreeSet<i32>) {
    if sid.is_none() && !strays {
        return;
    }
    // SAFETY: getpid and getsid(0) only read this process's ids.
    let (me, my_sid) = unsafe { (libc::getpid(), libc::getsid(0)) };
    let self_marked = no_new_privs(me);
    let marked = |pid: i32| self_marked || no_new_privs(pid);
    let mut seen: HashSet<i32> = HashSet::new();
    let mut quiet_since = Instant::now();
    // Once anything of the call was found, a few scans in a row must find nothing: a chain can
    // slip through one scan (the parent gone before it was read, the child born after).
    let mut empty_rounds = 0;
    loop {
        if let Some(sid) = sid {
            // The call's process group (its id is the session's, held while in use; a pid is
            // not handed out again before the pid space wraps). Atomic against fork.
            // SAFETY: sends a signal; ESRCH when the group is gone.
            unsafe {
                libc::kill(-sid, libc::SIGKILL);
            }
        }
        let procs = scan();
        let t = targets(&procs, me, my_sid, sid, strays, children, &marked);
        let live: Vec<&Proc> = procs
            .iter()
            .filter(|p| t.contains(&p.pid) && !p.zombie)
            .collect();
        for p in &live {
            if seen.insert(p.pid) {
                quiet_since = Instant::now();
            }
            // SAFETY: a process found above; a pid that exited since is still held as a
            // session member or kiln's child, or is gone (ESRCH).
            unsafe {
                libc::kill(p.pid, libc::SIGSTOP);
            }
        }
        for p in &live {
            // SAFETY: as above.
            unsafe {
                libc::kill(p.pid, libc::SIGKILL);
            }
        }
        let mut pending = !live.is_empty();
        for p in procs.iter().filter(|p| t.contains(&p.pid) && p.zombie) {
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
        }
        empty_rounds = if pending { 0 } else { empty_rounds + 1 };
        let settled = seen.is_empty() || empty_rounds >= 3;
        if (!pending && settled) || quiet_since.elapsed() > SWEEP_LIMIT {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
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

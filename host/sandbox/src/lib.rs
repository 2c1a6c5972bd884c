//! The world a program kiln runs lives in (plugins' `exec`, runners, `run_cmd`, hooks, the
//! review phase's commands): built for each call, not filtered. Owns the namespaces, mounts,
//! seccomp filter, Landlock rules, capabilities and the reaping of every process of a call.
//! Depends on no kiln crate but kiln-env (the environment, read once) and must never import
//! one: its input is a small [`Policy`].
//!
//! Each call runs in mount, user, PID, IPC, UTS and (without `net`) network namespaces of its
//! own, in a root made of nothing ([`view`]): system directories and the declared toolchains
//! read-only, the workspace, a fresh `/tmp` and granted `write` paths read-write, `.git`,
//! `kiln.toml`, `.kiln` and `[sandbox] protect` read-only over them, an empty `HOME`, a filtered
//! `/etc`, its own `/proc` and a `/dev` of the usual nodes. It holds no capability, sets
//! `no_new_privs`, gets a fresh session keyring, and runs under a seccomp filter (no sockets but
//! `AF_UNIX` without `net`, no keyrings, no special files, no set-user-ID modes) and Landlock as
//! a second layer. Where the kernel refuses namespaces, the call falls back to Landlock rules
//! over the host's files, the seccomp filter and a `/proc` sweep, and kiln warns once naming
//! what is not held (or refuses, with `require`).
//!
//! Everything is built in kiln; the child applies it between fork and exec with
//! async-signal-safe system calls only (kiln is multi-threaded).
//!
//! What the confinement refused a call is reported back ([`Refusals`]): the sockets the kernel
//! handed to kiln's listener ([`notify`]), and the paths the program reported refused where
//! the call's own rules refuse them ([`refused`]), so kiln can say what to grant.
// Unit tests set up their fixtures as they like; only the writer writes a workspace (clippy.toml).
#![cfg_attr(test, allow(clippy::disallowed_methods))]

mod caps;
pub mod landlock;
pub mod notify;
mod paths;
mod policy;
pub mod reap;
pub mod refused;
pub mod seccomp;
pub mod view;
mod world;

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

pub use landlock::Landlock;
pub use paths::{DEVICES, SYSTEM_READ, expand_home, install_roots, toolchain_roots};
pub use policy::{Policy, Writes};
pub use refused::{Refusals, RefusedPath};
use seccomp::NetFilter;
pub use view::Reach;

/// The kernel mechanisms that hold the boundaries of programs, and what is missing here for a
/// grant with or without `net`: each entry names the boundary that is not held.
pub fn gaps(net: bool) -> Vec<String> {
    let ll = Landlock::current();
    let mut gaps = Vec::new();
    if reap::view_missing().is_none() {
        // The view holds reads, writes and (without `net`) the network; Landlock is the
        // second layer.
        if let Some(why) = &ll.missing {
            gaps.push(format!(
                "Landlock, the second layer ({why}): the view alone holds reads and writes"
            ));
        }
        if let Some(why) = NetFilter::current().missing() {
            gaps.push(format!(
                "the seccomp filter ({why}): keyrings, special files and set-user-ID modes are not refused"
            ));
        }
        return gaps;
    }
    gaps.extend(ll.gaps(net));
    if !net && let Some(why) = NetFilter::current().missing() {
        gaps.push(format!(
            "denying UDP, MPTCP and raw sockets ({why}; only Landlock's TCP rules hold)"
        ));
    }
    if let Some(why) = reap::PidNs::current().missing() {
        gaps.push(format!(
            "a PID namespace per call ({why}): descendants are frozen and killed by a /proc sweep instead"
        ));
    }
    if let Some(why) = reap::view_missing() {
        gaps.push(format!(
            "a view built for each call ({why}): programs see the host's files as Landlock filters them, so kernel keyrings are shielded only by seccomp, pathname UNIX sockets the user can open (ssh-agent, docker.sock) and other processes' /proc stay reachable, and .git inside the workspace is writable"
        ));
    }
    gaps
}

/// The status of every boundary of a plugin's programs and what holds it, as `kiln plugin
/// inspect` shows it.
pub fn describe(net: bool, require: bool) -> serde_json::Value {
    let ll = Landlock::current();
    let gaps = gaps(net);
    let state = if ll.missing.is_some() && reap::view_missing().is_some() {
        "missing"
    } else if gaps.is_empty() {
        "enforced"
    } else {
        "partial"
    };
    let held = |missing: Option<&str>, by: &str| match missing {
        None => serde_json::json!({ "held_by": by, "state": "enforced" }),
        Some(why) => serde_json::json!({ "held_by": by, "state": "missing", "why": why }),
    };
    let ll_missing = ll.missing.as_deref();
    let seccomp = NetFilter::current().missing().map(|why| why.to_string());
    let seccomp = seccomp.as_deref();
    let view = reap::view_missing();
    let pidns = reap::PidNs::current().missing();
    let by_view = |by: &str| match view {
        None => {
            serde_json::json!({ "held_by": format!("a view built for the call (mount namespace), and {by}"), "state": "enforced" })
        }
        Some(why) => match ll_missing {
            None => serde_json::json!({ "held_by": by, "state": "partial", "why": why }),
            Some(ll_why) => {
                serde_json::json!({ "held_by": by, "state": "missing", "why": format!("{why}; {ll_why}") })
            }
        },
    };
    let network = if net {
        serde_json::json!({ "held_by": "granted: net = true", "state": "open" })
    } else if view.is_none() {
        serde_json::json!({
            "held_by": "a network namespace of the call's own (no device but lo), the seccomp filter (AF_UNIX sockets only) and Landlock TCP rules",
            "state": "enforced",
            "seccomp": seccomp.unwrap_or("enforced"),
        })
    } else {
        serde_json::json!({
            "held_by": "seccomp filter (socket/socketpair: AF_UNIX only; no io_uring) and Landlock TCP rules",
            "state": match (seccomp, ll_missing.is_some() || ll.abi < landlock::NET_ABI) {
                (None, false) => "enforced",
                (Some(_), true) => "missing",
                _ => "partial",
            },
            "seccomp": seccomp.unwrap_or("enforced"),
        })
    };
    serde_json::json!({
        "state": state,
        "abi": ll.abi,
        "missing": ll.missing,
        "gaps": gaps,
        "scoped_signals_and_sockets": ll.scoped(),
        "on_gaps": if require { "refuse to run (require_confinement)" } else { "warn once and run" },
        "boundaries": {
            "view": match view {
                None => serde_json::json!({
                    "held_by": if reap::PidNs::current().in_user_ns() {
                        "mount, user, PID, IPC, UTS and network namespaces per call"
                    } else {
                        "mount, PID, IPC, UTS and network namespaces per call (kiln is root: no user namespace needed)"
                    },
                    "state": "enforced",
                }),
                Some(why) => serde_json::json!({ "held_by": "Landlock and seccomp only (fallback)", "state": "missing", "why": why }),
            },
            "reads": by_view("Landlock read rules"),
            "writes": by_view("Landlock write rules; .git, kiln.toml, .kiln and [sandbox] protect mounted read-only"),
            "network": network,
            "descendants": match pidns {
                None => serde_json::json!({ "held_by": "a PID namespace per call", "state": "enforced" }),
                Some(why) => serde_json::json!({
                    "held_by": "freeze-and-kill of the call's processes until none is left",
                    "state": "partial",
                    "why": why,
                }),
            },
            "privilege": held(seccomp, "no capabilities, no_new_privs, a fresh session keyring, seccomp (no keyrings, no special files, no set-user-ID modes)"),
            "kiln": held(ll_missing, "Landlock ptrace scoping and dropped capabilities"),
        },
    })
}

/// The confinement of one exec call: its temp dir (removed when this is dropped), the Landlock
/// ruleset and the other mechanisms the child applies to itself.
#[derive(Debug)]
pub struct Confinement {
    tmp: tempfile::TempDir,
    ruleset: Option<OwnedFd>,
    filter: Option<(usize, u16)>,
    pid_ns: bool,
    /// The call's view, when the kernel builds one (boxed: the child reads it by address).
    view: Option<Box<view::View>>,
    /// The namespaces of the view beside the PID one.
    view_flags: libc::c_int,
    /// The paths of the view, for inspection.
    layout: Option<view::Layout>,
    /// With a view: the workspace and the protected paths that existed when the call began
    /// (the view holds those read-only; one the program creates is found after it).
    protected: Option<(PathBuf, Vec<PathBuf>)>,
    /// Without `net`: the pair the child passes its seccomp listener over, until
    /// [`Confinement::supervise`] takes it.
    channel: Option<notify::Channel>,
    /// The thread answering the call's refused sockets.
    supervisor: Option<notify::Supervisor>,
    /// Landlock's read and write paths, for telling what was refused where there is no view.
    lists: (Vec<PathBuf>, Vec<PathBuf>),
    /// The workspace (a refused path inside it is a protected one, not one outside).
    workspace: PathBuf,
}

/// What the child applies between fork and exec (plain values: it allocates nothing).
#[derive(Debug, Clone, Copy)]
pub struct Child {
    cwd: RawFd,
    ruleset: Option<RawFd>,
    filter: Option<(usize, u16)>,
    pid_ns: bool,
    lifeline: RawFd,
    /// The address of the call's [`view::View`] (0: none), alive as long as the [`Confinement`].
    view: usize,
    view_flags: libc::c_int,
    /// Landlock rights for the view's own paths (read, all), from [`landlock::masks`].
    masks: (u64, u64),
    /// The socket rules that notify kiln, the mode rules, and the socket to send the listener
    /// over; when the kernel gives no listener, `filter` is installed instead.
    notify: Option<Notify>,
}

/// What the child installs to hand its refused sockets to kiln ([`notify`]).
#[derive(Debug, Clone, Copy)]
struct Notify {
    /// The socket rules ([`NetFilter::raw_notify`]).
    sockets: (usize, u16),
    /// The mode rules beside them ([`NetFilter::raw_with_net`]).
    modes: (usize, u16),
    /// The child's end of the [`notify::Channel`].
    sock: RawFd,
}

impl Confinement {
    /// The workspace and the protected paths that existed when the call began, when a view
    /// holds them (the caller looks for protected names the program created).
    pub fn protected(&self) -> Option<(&Path, &[PathBuf])> {
        self.protected
            .as_ref()
            .map(|(w, p)| (w.as_path(), p.as_slice()))
    }

    /// Create the call's temp dir and build the ruleset. `Err(refusal)` when the program may
    /// not run: confinement is required (`[sandbox] require_confinement`) but not complete here,
    /// or the ruleset could not be built.
    /// The call's temporary directory is removed when the confinement is dropped, or by
    /// [`remove_call_dirs`] when kiln exits on a signal first.
    pub fn prepare(policy: &Policy<'_>) -> Result<Confinement, Refusal> {
        let c = Confinement::build(policy)?;
        call_dirs().push(c.tmp.path().to_path_buf());
        Ok(c)
    }

    // The `tmp` and `home` directories of a call, inside the call's own fresh temporary directory.
    #[allow(clippy::disallowed_methods)]
    fn build(policy: &Policy<'_>) -> Result<Confinement, Refusal> {
        let ll = Landlock::current();
        let gaps = gaps(policy.net);
        if !gaps.is_empty() {
            if policy.require {
                return Err(Refusal::Denied(format!(
                    "[sandbox] require_confinement is set, but the kernel cannot confine this program: {}; the program was not run",
                    gaps.join("; ")
                )));
            }
            warn_once(&gaps);
        }
        let tmp = tempfile::Builder::new()
            .prefix("kiln-exec-")
            .tempdir()
            .map_err(|e| Refusal::Failed(format!("cannot create the call's temp dir: {e}")))?;
        let failed =
            |e: std::io::Error| Refusal::Failed(format!("cannot prepare the call's temp dir: {e}"));
        std::fs::create_dir(tmp.path().join("tmp")).map_err(failed)?;
        std::fs::create_dir(tmp.path().join("home")).map_err(failed)?;
        let in_view = reap::view_missing().is_none();
        if in_view && !policy.shown.is_empty() {
            use std::os::unix::fs::PermissionsExt;
            std::fs::create_dir(tmp.path().join("shown")).map_err(failed)?;
            for (i, (_, content)) in policy.shown.iter().enumerate() {
                let f = world::shown_file(tmp.path(), i);
                std::fs::write(&f, content).map_err(failed)?;
                std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o444))
                    .map_err(failed)?;
            }
        }
        let (layout, view) = if in_view {
            let layout = world::layout(policy, tmp.path());
            let view = layout
                .compile(policy.cwd)
                .map_err(|e| Refusal::Failed(format!("cannot build the program's view: {e}")))?;
            (Some(layout), Some(Box::new(view)))
        } else {
            (None, None)
        };
        let lists = world::landlock_paths(policy, tmp.path(), in_view);
        let ruleset = if ll.missing.is_none() {
            Some(
                landlock::ruleset(&lists.0, &lists.1, policy.net).map_err(|e| {
                    Refusal::Failed(format!("cannot build the Landlock ruleset: {e}"))
                })?,
            )
        } else {
            None
        };
        let filter = if policy.net {
            NetFilter::current().raw_with_net()
        } else {
            NetFilter::current().raw()
        };
        Ok(Confinement {
            tmp,
            ruleset,
            filter,
            pid_ns: reap::PidNs::current().available(),
            view,
            view_flags: if in_view {
                reap::view_flags(policy.net)
            } else {
                0
            },
            layout,
            protected: in_view.then(|| (policy.workspace.to_path_buf(), policy.protect.to_vec())),
            channel: (!policy.net && NetFilter::current().raw_notify().is_some())
                .then(notify::Channel::new)
                .flatten(),
            supervisor: None,
            lists,
            workspace: policy.workspace.to_path_buf(),
        })
    }

    /// The child's `TMPDIR`: `/tmp` of its view, or the call's temp dir on the host.
    pub fn tmp(&self) -> PathBuf {
        if self.view.is_some() {
            PathBuf::from("/tmp")
        } else {
            self.tmp.path().join("tmp")
        }
    }

    /// What the view holds (path as the program sees it, and what it is); empty without one.
    pub fn describe_view(&self) -> Vec<(PathBuf, String)> {
        self.layout
            .as_ref()
            .map(view::Layout::describe)
            .unwrap_or_default()
    }

    /// After the spawn: answer the program's refused sockets on a thread of kiln's (when the
    /// child passed its listener; else they are refused on the spot, unrecorded).
    pub fn supervise(&mut self) {
        if let Some(channel) = self.channel.take() {
            self.supervisor = notify::Supervisor::start(channel);
        }
    }

    /// Once every process of the call is gone: what the confinement refused it, from the
    /// sockets the kernel reported and the paths its output (`stdout`, `stderr`) names where
    /// kiln's rules refuse them ([`refused`]).
    pub fn refusals(&mut self, stdout: &[u8], stderr: &[u8]) -> Refusals {
        let sockets = self
            .supervisor
            .take()
            .map(notify::Supervisor::finish)
            .unwrap_or_default();
        let reach = |p: &Path| match &self.layout {
            Some(l) => l.reach(p),
            None => refused::by_lists(p, &self.lists.0, &self.lists.1),
        };
        let mut paths = refused::paths_in(&String::from_utf8_lossy(stderr), &reach);
        for p in refused::paths_in(&String::from_utf8_lossy(stdout), &reach) {
            if !paths.iter().any(|q| q.path == p.path) {
                paths.push(p);
            }
        }
        for p in &mut paths {
            p.in_workspace = p.path.starts_with(&self.workspace);
        }
        Refusals { sockets, paths }
    }

    /// The call runs in a PID namespace of its own: when its direct child has been waited for,
    /// every process of the call is gone.
    pub fn pid_ns(&self) -> bool {
        self.pid_ns
    }

    /// What the child applies for [`enter`], entering `cwd`; `self` must outlive the spawn.
    pub fn child(&self, cwd: RawFd) -> Child {
        Child {
            cwd,
            ruleset: self.ruleset.as_ref().map(|f| f.as_raw_fd()),
            filter: self.filter,
            pid_ns: self.pid_ns,
            lifeline: if self.pid_ns { reap::lifeline() } else { -1 },
            view: self
                .view
                .as_deref()
                .map_or(0, |v| v as *const view::View as usize),
            view_flags: self.view_flags,
            masks: landlock::masks(),
            notify: match (
                &self.channel,
                NetFilter::current().raw_notify(),
                self.filter,
            ) {
                (Some(c), Some(sockets), Some(_)) => {
                    NetFilter::current().raw_with_net().map(|modes| Notify {
                        sockets,
                        modes,
                        sock: c.child_fd(),
                    })
                }
                _ => None,
            },
        }
    }
}

/// Why a program may not run.
#[derive(Debug)]
pub enum Refusal {
    /// A policy says no (WIT `denied`).
    Denied(String),
    /// Setting up the confinement failed (WIT `failed`).
    Failed(String),
}

/// The temporary directories of the calls in flight (see [`remove_call_dirs`]).
static CALL_DIRS: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

fn call_dirs() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    CALL_DIRS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Remove the temporary directory of every call in flight: for a kiln that is about to exit
/// on a signal (Ctrl-C, SIGTERM) while a program runs, whose calls are never dropped. The
/// programs die with kiln (their namespace's init has PDEATHSIG).
pub fn remove_call_dirs() {
    for dir in std::mem::take(&mut *call_dirs()) {
        remove_call_dir(&dir);
    }
}

/// Remove a call's temporary directory whatever the program left in it: a directory it made
/// unreadable or unwritable (`chmod 000`) is made the owner's again first, where a plain
/// recursive removal would fail and leave the whole tree behind.
// The call's own temporary directory, never a workspace (links are not followed).
#[allow(clippy::disallowed_methods)]
fn remove_call_dir(dir: &Path) {
    if std::fs::remove_dir_all(dir).is_ok() || !dir.exists() {
        return;
    }
    fn open_up(dir: &Path) {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
        if let Ok(rd) = std::fs::read_dir(dir) {
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    open_up(&e.path());
                }
            }
        }
    }
    open_up(dir);
    let _ = std::fs::remove_dir_all(dir);
}

impl Drop for Confinement {
    /// The call's temporary directory goes with it (on every path: the program's end, the
    /// plugin's deadline, a trap or a cancelled call dropping it), even one the program made
    /// hard to remove.
    fn drop(&mut self) {
        let dir = self.tmp.path().to_path_buf();
        call_dirs().retain(|d| *d != dir);
        remove_call_dir(&dir);
    }
}

fn warn_once(gaps: &[String]) {
    static WARNED: AtomicBool = AtomicBool::new(false);
    if !WARNED.swap(true, Ordering::Relaxed) {
        eprintln!(
            "kiln: warning: programs run by plugins are not fully confined: {}. To refuse instead, set in kiln.toml:\n  [sandbox]\n  require_confinement = true",
            gaps.join("; ")
        );
    }
}

/// In the child, between fork and exec: start a new session (so the call's processes can be
/// found and killed, and none can join kiln's), enter the checked cwd by its descriptor, set
/// `no_new_privs`, enter a PID namespace of the call's own (the process that returns from here
/// is the program's, below the namespace's init), drop the capabilities that would step around
/// the sandbox, apply the Landlock ruleset and the seccomp filter (sockets without `net`, modes always).
///
/// # Safety
/// Runs after `fork` in a copy of a multi-threaded process: it only makes async-signal-safe
/// system calls and allocates nothing. The descriptors in `child` must be open, and the
/// [`Confinement`] it came from alive.
pub unsafe fn enter(child: Child) -> std::io::Result<()> {
    // SAFETY: plain system calls on descriptors the caller keeps open across the fork; the view
    // is alive (the `Confinement` outlives the spawn) and only read.
    unsafe {
        if libc::setsid() < 0 || libc::fchdir(child.cwd) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // Always: no setuid gains, and the mark `reap` recognises the call's descendants by.
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if child.pid_ns {
            // Needs CAP_SYS_ADMIN: before the capabilities are dropped.
            reap::enter_pid_ns(child.lifeline, child.view_flags)?;
        }
        if child.view != 0 {
            let view = &*(child.view as *const view::View);
            if let Err(f) = view.build() {
                report_failure(f);
                return Err(std::io::Error::from_raw_os_error(f.errno));
            }
        }
        caps::drop_caps()?;
        caps::fresh_keyring();
        if let Some(fd) = child.ruleset {
            if child.view != 0 {
                // The view's own root, procfs and shared memory exist only here: readable
                // (everything below the root is what the view put in), `/dev/shm` writable.
                landlock::add_rule(fd, c"/", child.masks.0)?;
                landlock::add_rule(fd, c"/dev/shm", child.masks.1)?;
            }
            if libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        match (child.notify, child.filter) {
            (
                Some(Notify {
                    sockets,
                    modes,
                    sock,
                }),
                Some(full),
            ) => {
                match seccomp::install_listener(sockets) {
                    Ok(listener) => {
                        // Without kiln holding the listener, a refused call fails (ENOSYS): the
                        // program must never hold it, whatever the send did.
                        notify::send_listener(sock, listener);
                        libc::close(listener);
                        seccomp::install(modes)?;
                    }
                    // A listener the kernel refuses (one is already installed above kiln): the
                    // sockets are refused on the spot.
                    Err(_) => seccomp::install(full)?,
                }
            }
            (_, Some(raw)) => seccomp::install(raw)?,
            _ => {}
        }
        // No descriptor kiln inherited (a secret file its parent opened, another process's
        // pipe) reaches the program: everything past the standard streams closes at exec.
        caps::cloexec_from(3);
    }
    Ok(())
}

/// Say on the program's standard error which step of building its view failed (the spawn
/// then fails with the system's error).
///
/// # Safety
/// System calls only.
unsafe fn report_failure(f: view::Failed) {
    // SAFETY: writes of static bytes to descriptor 2.
    unsafe {
        let w = |b: &[u8]| libc::write(2, b.as_ptr().cast(), b.len());
        w(b"kiln: cannot build the program's view: ");
        w(f.step.as_bytes());
        w(b"\n");
    }
}

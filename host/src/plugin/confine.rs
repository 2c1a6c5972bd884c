//! Confinement of the programs kiln runs (plugins' `exec`, hooks, the review phase's
//! commands), held by the kernel. Landlock: reads and execution only in the workspace, the
//! call's temp dir, the system directories, the program's own installation and granted `read`
//! paths; writes only to the workspace, the temp dir, granted `write` paths and a few device
//! files (the review phase: nowhere); TCP bind/connect only with `net = true`; no signals or
//! abstract UNIX sockets outside the sandbox, and ptrace-class access to kiln denied. Without
//! `net` a seccomp filter (`seccomp`) also lets only `AF_UNIX` sockets be created. Each call
//! runs in a PID namespace of its own where the kernel allows it (`reap`). Everything is built
//! in kiln; the child applies it between fork and exec with async-signal-safe system calls
//! only (kiln is multi-threaded).

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, RulesetAttr, RulesetCreatedAttr, Scope,
    path_beneath_rules,
};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use super::reap;
use super::seccomp::NetFilter;

/// The Landlock ABI kiln's rules are written and tested for; newer kernels enforce the same,
/// older ones the subset they know (see [`Landlock::gaps`]).
const TARGET_ABI: ABI = ABI::V7;
/// From ABI 3 `truncate(2)` is covered too, so writes are confined completely.
const FS_ABI: i32 = 3;
/// From ABI 4 TCP bind and connect can be denied.
const NET_ABI: i32 = 4;
/// From ABI 6 signals and abstract UNIX sockets are scoped to the sandbox.
const SCOPE_ABI: i32 = 6;

/// Device files every program may open for writing.
pub const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];

/// Test hook: in debug builds only, `KILN_TEST_NO_LANDLOCK=1` makes kiln behave as on a kernel
/// without Landlock. Release builds ignore it.
const TEST_NO_LANDLOCK: &str = "KILN_TEST_NO_LANDLOCK";

/// What this kernel's Landlock can enforce.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Landlock {
    /// The kernel's Landlock ABI version; 0 when Landlock is missing.
    pub abi: i32,
    /// Why Landlock is missing, when it is.
    pub missing: Option<String>,
}

impl Landlock {
    /// Detect once per process.
    pub fn current() -> &'static Landlock {
        static CURRENT: OnceLock<Landlock> = OnceLock::new();
        CURRENT.get_or_init(|| {
            if cfg!(debug_assertions)
                && std::env::var_os(TEST_NO_LANDLOCK).is_some_and(|v| v == "1")
            {
                return Landlock {
                    abi: 0,
                    missing: Some(format!("turned off by {TEST_NO_LANDLOCK}=1 (debug build)")),
                };
            }
            Landlock::detect()
        })
    }

    fn detect() -> Landlock {
        const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
        // SAFETY: asking for the ABI version reads and writes no memory (null attribute, size 0).
        let v = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                std::ptr::null::<libc::c_void>(),
                0usize,
                LANDLOCK_CREATE_RULESET_VERSION,
            )
        };
        if v >= 1 {
            return Landlock {
                abi: v as i32,
                missing: None,
            };
        }
        let e = std::io::Error::last_os_error();
        let why = match e.raw_os_error() {
            Some(libc::ENOSYS) => "this kernel has no Landlock (Linux 5.13 or later, built with CONFIG_SECURITY_LANDLOCK)".to_string(),
            Some(libc::EOPNOTSUPP) => {
                "Landlock is disabled at boot (add `landlock` to the kernel's `lsm=` parameter)"
                    .to_string()
            }
            _ => format!("Landlock is unavailable: {e}"),
        };
        Landlock {
            abi: 0,
            missing: Some(why),
        }
    }

    /// What kiln promises for programs but cannot enforce here, for a grant with or without
    /// `net`; empty when the program is fully confined.
    pub fn gaps(&self, net: bool) -> Vec<String> {
        if let Some(why) = &self.missing {
            return vec![format!(
                "no confinement at all ({why}): programs can read and write anywhere you can, use the network and read kiln's environment"
            )];
        }
        let mut gaps = Vec::new();
        if self.abi < FS_ABI {
            gaps.push(format!(
                "truncate(2) of files outside the writable paths (needs Landlock ABI {FS_ABI}, Linux 6.2; this kernel has ABI {})",
                self.abi
            ));
        }
        if !net && self.abi < NET_ABI {
            gaps.push(format!(
                "denying TCP (needs Landlock ABI {NET_ABI}, Linux 6.7; this kernel has ABI {})",
                self.abi
            ));
        }
        gaps
    }

    /// Signals and abstract UNIX sockets stay inside the sandbox.
    pub fn scoped(&self) -> bool {
        self.missing.is_none() && self.abi >= SCOPE_ABI
    }
}

/// The kernel mechanisms that hold the boundaries of programs, and what is missing here for a
/// grant with or without `net`: each entry names the boundary that is not held.
pub fn gaps(net: bool) -> Vec<String> {
    let mut gaps = Landlock::current().gaps(net);
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
    gaps
}

/// The status of every boundary of a plugin's programs and what holds it, as `kiln plugin
/// inspect` shows it.
pub fn describe(net: bool, require: bool) -> serde_json::Value {
    let ll = Landlock::current();
    let gaps = gaps(net);
    let state = if ll.missing.is_some() {
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
    let pidns = reap::PidNs::current().missing();
    let network = if net {
        serde_json::json!({ "held_by": "granted: net = true", "state": "open" })
    } else {
        serde_json::json!({
            "held_by": "seccomp filter (socket/socketpair: AF_UNIX only; no io_uring) and Landlock TCP rules",
            "state": match (seccomp, ll_missing.is_some() || ll.abi < NET_ABI) {
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
            "reads": held(ll_missing, "Landlock read rules"),
            "writes": held(ll_missing, "Landlock write rules"),
            "network": network,
            "descendants": match pidns {
                None => serde_json::json!({ "held_by": "a PID namespace per call", "state": "enforced" }),
                Some(why) => serde_json::json!({
                    "held_by": "freeze-and-kill of the call's processes until none is left",
                    "state": "partial",
                    "why": why,
                }),
            },
            "kiln": held(ll_missing, "Landlock ptrace scoping and dropped capabilities"),
        },
    })
}

/// `~/x` is `$HOME/x`; anything else is kept as written (config validation refuses relative
/// paths).
pub fn expand_home(p: &str) -> PathBuf {
    match p.strip_prefix("~/") {
        Some(rest) => match std::env::var_os("HOME") {
            Some(home) => PathBuf::from(home).join(rest),
            None => PathBuf::from(p),
        },
        None if p == "~" => std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(p)),
        None => PathBuf::from(p),
    }
}

/// Where the programs of a call may write. A type, not a flag: the review phase asks for
/// [`Writes::Nowhere`] and nothing on the way can widen it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Writes {
    /// The workspace, the call's temp dir and the grant's `write` paths.
    #[default]
    WorkspaceAndGrants,
    /// Nothing but the device files: the workspace and the temp dir are read-only.
    Nowhere,
}

/// System directories every program may read and execute from.
pub const SYSTEM_READ: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/opt",
    "/nix/store",
    "/proc",
    "/sys/devices/system/cpu",
    "/sys/fs/cgroup",
];

/// What one call's programs may reach.
#[derive(Debug, Clone, Copy)]
pub struct Policy<'a> {
    /// The workspace (readable; writable unless `writes` is [`Writes::Nowhere`]).
    pub workspace: &'a Path,
    /// The program, as resolved: the installation it comes from stays readable.
    pub program: &'a Path,
    /// Granted read paths outside the workspace (absolute).
    pub read: &'a [PathBuf],
    /// Granted write paths outside the workspace (absolute).
    pub write: &'a [PathBuf],
    /// Where writes may go.
    pub writes: Writes,
    /// TCP, UDP and every other socket family allowed.
    pub net: bool,
    /// Refuse rather than run with a gap (`[sandbox] require_confinement`).
    pub require: bool,
}

/// The confinement of one exec call: its temp dir (removed when this is dropped), the Landlock
/// ruleset and the other mechanisms the child applies to itself.
#[derive(Debug)]
pub struct Confinement {
    tmp: tempfile::TempDir,
    ruleset: Option<OwnedFd>,
    filter: Option<(usize, u16)>,
    pid_ns: bool,
}

/// What the child applies between fork and exec (plain values: it allocates nothing).
#[derive(Debug, Clone, Copy)]
pub struct Child {
    cwd: RawFd,
    ruleset: Option<RawFd>,
    filter: Option<(usize, u16)>,
    pid_ns: bool,
    lifeline: RawFd,
}

impl Confinement {
    /// Create the call's temp dir and build the ruleset. `Err(refusal)` when the program may
    /// not run: confinement is required (`[sandbox] require_confinement`) but not complete here,
    /// or the ruleset could not be built.
    pub fn prepare(policy: &Policy<'_>) -> Result<Confinement, Refusal> {
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
        let ruleset =
            if ll.missing.is_none() {
                let (read, write) = paths(policy, tmp.path());
                Some(ruleset(&read, &write, policy.net).map_err(|e| {
                    Refusal::Failed(format!("cannot build the Landlock ruleset: {e}"))
                })?)
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
        })
    }

    /// The call's temp dir (the child's `TMPDIR`).
    pub fn tmp(&self) -> &Path {
        self.tmp.path()
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
        }
    }
}

/// The paths a call's programs may read and those they may write (all of them readable too).
fn paths(policy: &Policy<'_>, tmp: &Path) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let mut read: Vec<PathBuf> = SYSTEM_READ.iter().map(PathBuf::from).collect();
    read.extend(policy.read.iter().cloned());
    read.extend(install_roots(policy.program));
    if policy.net {
        // Name resolution where /etc/resolv.conf links to systemd-resolved's stub file.
        read.push("/run/systemd/resolve".into());
    }
    let mut write = Vec::new();
    match policy.writes {
        Writes::WorkspaceAndGrants => {
            write.push(policy.workspace.to_path_buf());
            write.push(tmp.to_path_buf());
            write.extend(policy.write.iter().cloned());
        }
        Writes::Nowhere => {
            read.push(policy.workspace.to_path_buf());
            read.push(tmp.to_path_buf());
        }
    }
    (read, write)
}

/// The installation a program comes from, when it is not a system directory: its own
/// directory and, for a `prefix/bin/prog`, the prefix's `lib`, `libexec`, `share` and
/// `include`; with symbolic links resolved (`~/.cargo/bin/cargo -> rustup`). A pyenv or rbenv
/// shim (`root/shims/prog`) makes the manager's root readable; a rustup proxy its toolchains
/// and settings. Nothing else of `$HOME` is.
pub fn install_roots(program: &Path) -> Vec<PathBuf> {
    let mut roots = Vec::new();
    let real = std::fs::canonicalize(program).ok();
    for p in std::iter::once(program).chain(real.as_deref()) {
        let Some(dir) = p.parent() else { continue };
        if SYSTEM_READ.iter().any(|s| dir.starts_with(s)) {
            continue;
        }
        roots.push(dir.to_path_buf());
        match dir.file_name().and_then(|n| n.to_str()) {
            Some("bin") => {
                // `~/bin` and `~/.local/bin` are not installations: their prefix is the home
                // directory (or `~/.local`, where `share/` holds keyrings and app data).
                let home = std::env::var_os("HOME").map(PathBuf::from);
                let personal = |p: &Path| {
                    home.as_deref()
                        .is_some_and(|h| p == h || p == h.join(".local"))
                };
                if let Some(prefix) = dir.parent().filter(|p| !personal(p)) {
                    for sub in ["lib", "lib64", "libexec", "share", "include"] {
                        roots.push(prefix.join(sub));
                    }
                }
            }
            Some("shims") => roots.extend(dir.parent().map(Path::to_path_buf)),
            _ => {}
        }
    }
    if real
        .as_deref()
        .and_then(Path::file_name)
        .is_some_and(|n| n == "rustup")
    {
        let rustup_home = std::env::var_os("RUSTUP_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .unwrap_or_else(|| expand_home("~/.rustup"));
        roots.push(rustup_home.join("toolchains"));
        roots.push(rustup_home.join("settings.toml"));
        roots.push(rustup_home.join("update-hashes"));
    }
    roots.sort();
    roots.dedup();
    roots
}

/// Why a program may not run.
#[derive(Debug)]
pub enum Refusal {
    /// A policy says no (WIT `denied`).
    Denied(String),
    /// Setting up the confinement failed (WIT `failed`).
    Failed(String),
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

/// Why the Landlock ruleset of a call could not be built.
#[derive(Debug, thiserror::Error)]
enum RulesetFailed {
    /// The landlock crate refused a step (an access right, a rule, the ruleset itself).
    #[error(transparent)]
    Landlock(#[from] landlock::RulesetError),
    /// The ruleset was built but the kernel gave no descriptor for it.
    #[error("the kernel returned no ruleset")]
    NoDescriptor,
}

/// The call's Landlock ruleset as a descriptor the child enforces.
fn ruleset(read: &[PathBuf], write: &[PathBuf], net: bool) -> Result<OwnedFd, RulesetFailed> {
    build(read, write, net)?.ok_or(RulesetFailed::NoDescriptor)
}

fn build(
    read: &[PathBuf],
    write: &[PathBuf],
    net: bool,
) -> Result<Option<OwnedFd>, landlock::RulesetError> {
    let abi = TARGET_ABI;
    let mut rs = landlock::Ruleset::default().handle_access(AccessFs::from_all(abi))?;
    if !net {
        // Handled with no rule allowing any port: every TCP bind and connect is denied.
        rs = rs.handle_access(AccessNet::from_all(abi))?;
    }
    let device: BitFlags<AccessFs> =
        AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev;
    let created = rs
        .scope(Scope::from_all(abi))?
        .create()?
        // Paths that do not exist are skipped (nothing to reach there); a rule on a file
        // carries only the rights that apply to files.
        .add_rules(path_beneath_rules(read, AccessFs::from_read(abi)))?
        .add_rules(path_beneath_rules(write, AccessFs::from_all(abi)))?
        .add_rules(path_beneath_rules(DEVICES, device))?;
    Ok(created.into())
}

/// The only capability a program keeps (it matters when kiln runs as root): overriding file
/// permission bits, so a root kiln can still build a workspace owned by another user. Every
/// other one is dropped: an allowlist, so a capability nobody thought of is gone too. Without
/// them a program cannot step around Landlock (`CAP_SYS_ADMIN`, `CAP_PERFMON`,
/// `CAP_DAC_READ_SEARCH` for `open_by_handle_at`), read kiln's memory (`CAP_SYS_PTRACE`),
/// change files it may not write through their metadata (`CAP_CHOWN`, `CAP_FOWNER`,
/// `CAP_SETFCAP`, `CAP_LINUX_IMMUTABLE`), make device nodes (`CAP_MKNOD`), set the clock or
/// reach the network past the filter (`CAP_NET_RAW`, `CAP_NET_ADMIN`).
const KEPT_CAPS: &[u32] = &[
    1, // CAP_DAC_OVERRIDE
];
/// The highest capability number kiln knows of (`CAP_CHECKPOINT_RESTORE`); a kernel that
/// knows more caps drops them from the bounding set too (see [`drop_caps`]).
const LAST_CAP: u32 = 40;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Remove every capability but [`KEPT_CAPS`] from the bounding, ambient, inheritable, permitted and effective
/// sets, so the program does not get them back at exec. Async-signal-safe (system calls only).
///
/// # Safety
/// Plain system calls on stack memory.
unsafe fn drop_caps() -> std::io::Result<()> {
    const VERSION_3: u32 = 0x2008_0522;
    // SAFETY: prctl and capget/capset with pointers to live stack memory of the right layout.
    unsafe {
        for cap in (0..=LAST_CAP + 23).filter(|c| !KEPT_CAPS.contains(c)) {
            // Fails without CAP_SETPCAP (then the cap cannot be regained anyway: no_new_privs)
            // or for a cap this kernel does not know; both are fine.
            libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0);
        }
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        );
        let mut header = CapHeader {
            version: VERSION_3,
            pid: 0,
        };
        let mut data = [CapData {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        }; 2];
        if libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut held = false;
        for cap in (0..64u32).filter(|c| !KEPT_CAPS.contains(c)) {
            let (i, bit) = ((cap / 32) as usize, 1u32 << (cap % 32));
            held |= (data[i].permitted | data[i].inheritable) & bit != 0;
            data[i].effective &= !bit;
            data[i].permitted &= !bit;
            data[i].inheritable &= !bit;
        }
        if held && libc::syscall(libc::SYS_capset, &header, data.as_ptr()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
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
    // SAFETY: plain system calls on descriptors the caller keeps open across the fork.
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
            reap::enter_pid_ns(child.lifeline)?;
        }
        drop_caps()?;
        if let Some(fd) = child.ruleset
            && libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
        if let Some(raw) = child.filter {
            super::seccomp::install(raw)?;
        }
        // No descriptor kiln inherited (a secret file its parent opened, another process's
        // pipe) reaches the program: everything past the standard streams closes at exec.
        cloexec_from(3);
    }
    Ok(())
}

/// Mark every descriptor from `first` on close-on-exec (`close_range` with
/// `CLOSE_RANGE_CLOEXEC`, Linux 5.11; one by one before that).
///
/// # Safety
/// System calls only.
unsafe fn cloexec_from(first: libc::c_int) {
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    // SAFETY: changes flags of this process's descriptors only.
    unsafe {
        if libc::syscall(
            libc::SYS_close_range,
            first as libc::c_uint,
            libc::c_uint::MAX,
            CLOSE_RANGE_CLOEXEC,
        ) == 0
        {
            return;
        }
        let max = super::reap::fd_limit();
        for fd in first..max {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_name_what_an_old_or_missing_landlock_cannot_enforce() {
        let missing = Landlock {
            abi: 0,
            missing: Some("no Landlock".into()),
        };
        let g = missing.gaps(true);
        assert_eq!(g.len(), 1);
        assert!(
            g[0].contains("no confinement at all (no Landlock)"),
            "{g:?}"
        );
        let v2 = Landlock {
            abi: 2,
            missing: None,
        };
        let g = v2.gaps(false);
        assert!(g[0].contains("truncate") && g[1].contains("TCP"), "{g:?}");
        assert_eq!(v2.gaps(true).len(), 1, "with net granted TCP is no gap");
        let v7 = Landlock {
            abi: 7,
            missing: None,
        };
        assert!(v7.gaps(false).is_empty() && v7.scoped());
    }

    #[test]
    fn a_program_outside_the_system_keeps_its_installation_readable_and_nothing_more() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path();
        // A pyenv shim: the manager's root.
        std::fs::create_dir_all(home.join(".pyenv/shims")).unwrap();
        std::fs::write(home.join(".pyenv/shims/python3"), "#!/bin/sh\n").unwrap();
        let roots = install_roots(&home.join(".pyenv/shims/python3"));
        assert_eq!(roots, [home.join(".pyenv"), home.join(".pyenv/shims")]);
        // A rustup proxy found as `cargo`: its bin directory and rustup's toolchains, never
        // CARGO_HOME itself.
        std::fs::create_dir_all(home.join(".cargo/bin")).unwrap();
        std::fs::write(home.join(".cargo/bin/rustup"), "").unwrap();
        std::os::unix::fs::symlink("rustup", home.join(".cargo/bin/cargo")).unwrap();
        let roots = install_roots(&home.join(".cargo/bin/cargo"));
        assert!(roots.contains(&home.join(".cargo/bin")), "{roots:?}");
        assert!(roots.iter().any(|r| r.ends_with("toolchains")), "{roots:?}");
        assert!(!roots.contains(&home.join(".cargo")), "{roots:?}");
        assert!(!roots.iter().any(|r| r == home), "{roots:?}");
        // A system program adds nothing.
        assert!(install_roots(Path::new("/bin/sh")).is_empty());
    }

    #[test]
    fn home_is_expanded() {
        let home = std::env::var("HOME").unwrap();
        assert_eq!(expand_home("~/.cargo"), Path::new(&home).join(".cargo"));
        assert_eq!(expand_home("/opt/x"), PathBuf::from("/opt/x"));
    }
}

//! Confinement of the programs plugins run (the `exec` import) with Landlock: reads and
//! execution everywhere; writes only to the workspace, the call's own temp dir (`TMPDIR`), the
//! paths the grant lists (`write = [...]`) and a few device files; TCP bind/connect only with
//! `net = true`; no signals or abstract UNIX sockets outside the sandbox. Landlock also denies
//! ptrace-class access to processes outside the sandbox, so kiln's memory and
//! `/proc/<kiln>/environ` are out of reach. The ruleset is built in kiln; the child applies it
//! between fork and exec with async-signal-safe system calls only (kiln is multi-threaded).

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, RulesetAttr, RulesetCreatedAttr, Scope,
    path_beneath_rules,
};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

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
                "no confinement at all ({why}): programs can write anywhere you can, use the network and read kiln's environment"
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

/// The Landlock status of a plugin's programs, as `kiln plugin inspect` shows it.
pub fn describe(net: bool, require: bool) -> serde_json::Value {
    let ll = Landlock::current();
    let gaps = ll.gaps(net);
    let state = if ll.missing.is_some() {
        "missing"
    } else if gaps.is_empty() {
        "enforced"
    } else {
        "partial"
    };
    serde_json::json!({
        "state": state,
        "abi": ll.abi,
        "missing": ll.missing,
        "gaps": gaps,
        "scoped_signals_and_sockets": ll.scoped(),
        "on_gaps": if require { "refuse to run (require_confinement)" } else { "warn once and run" },
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

/// The confinement of one exec call: its temp dir (removed when this is dropped) and the
/// Landlock ruleset the child applies to itself.
#[derive(Debug)]
pub struct Confinement {
    tmp: tempfile::TempDir,
    ruleset: Option<OwnedFd>,
}

impl Confinement {
    /// Create the call's temp dir and build the ruleset. `Err(refusal)` when the program may
    /// not run: confinement is required (`[sandbox] require_confinement`) but not complete here,
    /// or the ruleset could not be built.
    pub fn prepare(
        workspace: &Path,
        write: &[PathBuf],
        net: bool,
        require: bool,
    ) -> Result<Confinement, Refusal> {
        let ll = Landlock::current();
        let gaps = ll.gaps(net);
        if !gaps.is_empty() {
            if require {
                return Err(Refusal::Denied(format!(
                    "[sandbox] require_confinement is set, but Landlock cannot confine this program: {}; the program was not run",
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
                let mut writable = vec![workspace.to_path_buf(), tmp.path().to_path_buf()];
                writable.extend(write.iter().cloned());
                Some(ruleset(&writable, net).map_err(|e| {
                    Refusal::Failed(format!("cannot build the Landlock ruleset: {e}"))
                })?)
            } else {
                None
            };
        Ok(Confinement { tmp, ruleset })
    }

    /// The call's temp dir (the child's `TMPDIR`).
    pub fn tmp(&self) -> &Path {
        self.tmp.path()
    }

    /// The raw ruleset descriptor for [`enter`]; `None` when Landlock is missing.
    pub fn ruleset_fd(&self) -> Option<RawFd> {
        self.ruleset.as_ref().map(|f| f.as_raw_fd())
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

fn warn_once(gaps: &[String]) {
    static WARNED: AtomicBool = AtomicBool::new(false);
    if !WARNED.swap(true, Ordering::Relaxed) {
        eprintln!(
            "kiln: warning: programs run by plugins are not fully confined: {}. To refuse instead, set in kiln.toml:\n  [sandbox]\n  require_confinement = true",
            gaps.join("; ")
        );
    }
}

fn ruleset(writable: &[PathBuf], net: bool) -> Result<OwnedFd, String> {
    build(writable, net)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| "the kernel returned no ruleset".to_string())
}

fn build(writable: &[PathBuf], net: bool) -> Result<Option<OwnedFd>, landlock::RulesetError> {
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
        .add_rules(path_beneath_rules(["/"], AccessFs::from_read(abi)))?
        // Paths that do not exist are skipped (nothing to write there).
        .add_rules(path_beneath_rules(writable, AccessFs::from_all(abi)))?
        .add_rules(path_beneath_rules(DEVICES, device))?;
    Ok(created.into())
}

/// Capabilities a program never keeps (they matter when kiln runs as root): with them a
/// program could step around Landlock (`CAP_SYS_ADMIN` and `CAP_PERFMON` let it read
/// `/proc/<kiln>/environ` despite ptrace scoping), read kiln's memory (`CAP_SYS_PTRACE`,
/// `CAP_SYS_RAWIO`), change the kernel (`CAP_SYS_MODULE`, `CAP_BPF`, `CAP_MAC_*`, `CAP_SYS_BOOT`)
/// or reach the network past the TCP rules (`CAP_NET_RAW`, `CAP_NET_ADMIN`).
const DROPPED_CAPS: &[u32] = &[
    12, // CAP_NET_ADMIN
    13, // CAP_NET_RAW
    16, // CAP_SYS_MODULE
    17, // CAP_SYS_RAWIO
    19, // CAP_SYS_PTRACE
    21, // CAP_SYS_ADMIN
    22, // CAP_SYS_BOOT
    32, // CAP_MAC_OVERRIDE
    33, // CAP_MAC_ADMIN
    34, // CAP_SYSLOG
    38, // CAP_PERFMON
    39, // CAP_BPF
    40, // CAP_CHECKPOINT_RESTORE
];

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

/// Remove [`DROPPED_CAPS`] from the bounding, ambient, inheritable, permitted and effective
/// sets, so the program does not get them back at exec. Async-signal-safe (system calls only).
///
/// # Safety
/// Plain system calls on stack memory.
unsafe fn drop_caps() -> std::io::Result<()> {
    const VERSION_3: u32 = 0x2008_0522;
    // SAFETY: prctl and capget/capset with pointers to live stack memory of the right layout.
    unsafe {
        for &cap in DROPPED_CAPS {
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
        for &cap in DROPPED_CAPS {
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
/// found and killed, and none can join kiln's), enter the checked cwd by its descriptor, drop
/// the capabilities that would step around the sandbox, set `no_new_privs` and apply the
/// ruleset.
///
/// # Safety
/// Runs after `fork` in a copy of a multi-threaded process: it only makes async-signal-safe
/// system calls and allocates nothing. `cwd` and `ruleset` must be open descriptors.
pub unsafe fn enter(cwd: RawFd, ruleset: Option<RawFd>) -> std::io::Result<()> {
    // SAFETY: plain system calls on descriptors the caller keeps open across the fork.
    unsafe {
        if libc::setsid() < 0 || libc::fchdir(cwd) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        drop_caps()?;
        // Always: no setuid gains, and the mark `reap` recognises the call's descendants by.
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if let Some(fd) = ruleset
            && libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
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
    fn home_is_expanded() {
        let home = std::env::var("HOME").unwrap();
        assert_eq!(expand_home("~/.cargo"), Path::new(&home).join(".cargo"));
        assert_eq!(expand_home("/opt/x"), PathBuf::from("/opt/x"));
    }
}

//! Landlock, the second layer: rules over the host's files that hold even if the view were
//! wrong, and TCP and scope rules the view does not give. Detection of the kernel's ABI, the
//! ruleset built in kiln, and the rules the program's process adds for paths that exist only
//! inside its view.

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, RulesetAttr, RulesetCreatedAttr, Scope,
    path_beneath_rules,
};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::OnceLock;

use crate::paths::DEVICES;

/// The Landlock ABI kiln's rules are written and tested for; newer kernels enforce the same,
/// older ones the subset they know (see [`Landlock::gaps`]).
const TARGET_ABI: ABI = ABI::V7;
/// From ABI 3 `truncate(2)` is covered too, so writes are confined completely.
const FS_ABI: i32 = 3;
/// From ABI 4 TCP bind and connect can be denied.
pub const NET_ABI: i32 = 4;
/// From ABI 6 signals and abstract UNIX sockets are scoped to the sandbox.
const SCOPE_ABI: i32 = 6;

/// Test hook: in debug builds only, `KILN_TEST_NO_LANDLOCK=1` makes kiln behave as on a kernel
/// without Landlock. Release builds ignore it.
const TEST_NO_LANDLOCK: &str = kiln_env::hook::NO_LANDLOCK;

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
            if cfg!(debug_assertions) && kiln_env::env().test().no_landlock {
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

/// Why the Landlock ruleset of a call could not be built.
#[derive(Debug, thiserror::Error)]
pub enum RulesetFailed {
    /// The landlock crate refused a step (an access right, a rule, the ruleset itself).
    #[error(transparent)]
    Landlock(#[from] landlock::RulesetError),
    /// The ruleset was built but the kernel gave no descriptor for it.
    #[error("the kernel returned no ruleset")]
    NoDescriptor,
}

/// The call's Landlock ruleset as a descriptor the child enforces.
pub fn ruleset(read: &[PathBuf], write: &[PathBuf], net: bool) -> Result<OwnedFd, RulesetFailed> {
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

/// The rights of a rule that lets a path be read and executed, and of one that lets it be
/// changed too, as this kernel's ABI knows them (raw bits, for [`add_rule`]).
pub fn masks() -> (u64, u64) {
    let abi = ABI::from(Landlock::current().abi);
    (
        AccessFs::from_read(abi).bits(),
        AccessFs::from_all(abi).bits(),
    )
}

/// In the program's process, inside its view: let `path` be reached with `access` (bits from
/// [`masks`]). Used for the view's own paths (its root, `/dev/shm`), which exist only there.
///
/// # Safety
/// System calls only, on a live NUL-terminated path and a ruleset descriptor the caller holds.
pub unsafe fn add_rule(
    ruleset: libc::c_int,
    path: &std::ffi::CStr,
    access: u64,
) -> std::io::Result<()> {
    #[repr(C, packed)]
    struct PathBeneath {
        allowed_access: u64,
        parent_fd: i32,
    }
    const LANDLOCK_RULE_PATH_BENEATH: libc::c_int = 1;
    // SAFETY: open, the rule system call on stack memory, close.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let attr = PathBeneath {
            allowed_access: access,
            parent_fd: fd,
        };
        let rc = libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset,
            LANDLOCK_RULE_PATH_BENEATH,
            &attr as *const PathBeneath,
            0u32,
        );
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        if rc != 0 {
            return Err(err);
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
}

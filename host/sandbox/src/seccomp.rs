//! The seccomp filter of the programs kiln runs: a seccomp-BPF program (compiled by
//! `seccompiler`, once, in kiln) that, without `net`, lets `socket(2)` and `socketpair(2)`
//! create `AF_UNIX` sockets only (so no TCP, UDP, MPTCP, raw, packet or netlink sockets) and
//! refuses `io_uring_setup(2)` (an io_uring can open sockets of its own); and, with or without
//! `net`, refuses a file mode with the set-user-ID or set-group-ID bit in `chmod`, `open` and
//! their kin (Landlock does not cover `chmod`), a special file in `mknod` (only regular files
//! and FIFOs), and every keyring call (`keyctl`, `add_key`, `request_key`). The child installs it between
//! fork and exec, after `no_new_privs`, with one `prctl` on memory built beforehand.

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, sock_filter,
};
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// Test hook: in debug builds only, `KILN_TEST_NO_SECCOMP=1` makes kiln behave as on a kernel
/// without seccomp filters. Release builds ignore it.
const TEST_NO_SECCOMP: &str = kiln_env::hook::NO_SECCOMP;

/// The compiled filters (without `net`: sockets and modes; with `net`: modes only), or why
/// this kernel or architecture has none.
pub struct NetFilter {
    program: Result<BpfProgram, NoFilter>,
    modes_only: Result<BpfProgram, NoFilter>,
    /// The socket rules alone, handing each refused call to kiln's listener ([`crate::notify`]):
    /// installed with `modes_only` beside it, in place of `program`.
    notify: Result<BpfProgram, NoFilter>,
}

/// Why kiln has no seccomp filter for the programs it runs.
#[derive(Debug, thiserror::Error)]
pub enum NoFilter {
    /// The test hook turned filters off.
    #[error("turned off by {TEST_NO_SECCOMP}=1 (debug build)")]
    TurnedOff,
    /// The kernel refused a filter: the error of the probe.
    #[error("this kernel takes no seccomp filters (CONFIG_SECCOMP_FILTER): {0}")]
    Kernel(std::io::Error),
    /// seccompiler has no filter for this processor architecture.
    #[error("no seccomp filter for {0}")]
    Architecture(&'static str),
    /// seccompiler could not build the filter.
    #[error("cannot build the seccomp filter: {0}")]
    Build(seccompiler::BackendError),
    /// The compiled filter does not begin as [`guard_x32`] expects.
    #[error("the seccomp filter does not start with an architecture check")]
    NoArchitectureCheck,
    /// The compiled socket rules hold no refusal to hand to kiln's listener.
    #[error("the seccomp socket rules hold no refusal to hand to kiln")]
    NoRefusal,
}

impl NetFilter {
    /// Build once per process.
    pub fn current() -> &'static NetFilter {
        static CURRENT: OnceLock<NetFilter> = OnceLock::new();
        CURRENT.get_or_init(|| NetFilter {
            program: available().and_then(|()| compile(true)),
            modes_only: available().and_then(|()| compile(false)),
            notify: available().and_then(|()| compile_notify()),
        })
    }

    /// Why there is no filter, if there is none.
    pub fn missing(&self) -> Option<&NoFilter> {
        self.program.as_ref().err()
    }

    /// The filter as the child installs it: the address and length of its instructions (they
    /// live as long as the process). Without `net` it also holds the socket rules.
    pub fn raw(&self) -> Option<(usize, u16)> {
        let p = self.program.as_ref().ok()?;
        Some((p.as_ptr() as usize, p.len() as u16))
    }

    /// The socket rules that notify kiln ([`crate::notify`]), installed with
    /// [`NetFilter::raw_with_net`] beside them.
    pub fn raw_notify(&self) -> Option<(usize, u16)> {
        let p = self.notify.as_ref().ok()?;
        Some((p.as_ptr() as usize, p.len() as u16))
    }

    /// The filter for a program granted `net`: the mode rules only.
    pub fn raw_with_net(&self) -> Option<(usize, u16)> {
        let p = self.modes_only.as_ref().ok()?;
        Some((p.as_ptr() as usize, p.len() as u16))
    }
}

/// The system calls that take a file mode, and the index of the mode argument: a mode with
/// the set-user-ID or set-group-ID bit is refused (Landlock does not cover `chmod`, so a root
/// program could otherwise make any binary on the system set-user-ID root).
fn mode_calls() -> Vec<(i64, u8)> {
    let mut calls = vec![
        (libc::SYS_fchmod, 1),
        (libc::SYS_fchmodat, 2),
        // fchmodat2 (Linux 6.6), the same number on every architecture.
        (452, 2),
        (libc::SYS_openat, 3),
        (libc::SYS_mknodat, 2),
    ];
    #[cfg(target_arch = "x86_64")]
    calls.extend([
        (libc::SYS_chmod, 1),
        (libc::SYS_open, 2),
        (libc::SYS_creat, 1),
        (libc::SYS_mknod, 1),
    ]);
    calls
}

/// The system calls that make a file of a given type, and the index of the mode argument:
/// only a regular file or a FIFO may be made (no device, socket or other special file, which a
/// program could leave for kiln or the user to open).
fn mknod_calls() -> Vec<(i64, u8)> {
    let mut calls = vec![(libc::SYS_mknodat, 2)];
    #[cfg(target_arch = "x86_64")]
    calls.push((libc::SYS_mknod, 1));
    calls
}

/// The kernel's keyrings hold secrets that are not files (Kerberos tickets, credential
/// helpers' keys): no program kiln runs may reach them.
const KEYRING_CALLS: &[i64] = &[libc::SYS_keyctl, libc::SYS_add_key, libc::SYS_request_key];

/// Whether the kernel takes seccomp filters: `PR_SET_SECCOMP` with a null filter fails with
/// `EFAULT` when it does, `EINVAL` when it does not.
fn available() -> Result<(), NoFilter> {
    if cfg!(debug_assertions) && kiln_env::env().test().no_seccomp {
        return Err(NoFilter::TurnedOff);
    }
    // SAFETY: a null filter pointer is never dereferenced: the kernel checks the mode first and
    // fails reading the filter (EFAULT) without installing anything.
    let rc = unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER as libc::c_ulong,
            0usize,
            0,
            0,
        )
    };
    let e = std::io::Error::last_os_error();
    match (rc, e.raw_os_error()) {
        (-1, Some(libc::EFAULT)) => Ok(()),
        _ => Err(NoFilter::Kernel(e)),
    }
}

fn compile(sockets: bool) -> Result<BpfProgram, NoFilter> {
    let arch = std::env::consts::ARCH
        .try_into()
        .map_err(|_| NoFilter::Architecture(std::env::consts::ARCH))?;
    let not_unix = || -> Result<Vec<SeccompRule>, seccompiler::BackendError> {
        Ok(vec![SeccompRule::new(vec![SeccompCondition::new(
            0,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Ne,
            libc::AF_UNIX as u64,
        )?])?])
    };
    let build = || -> Result<BpfProgram, seccompiler::BackendError> {
        let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
        if sockets {
            rules.insert(libc::SYS_socket, not_unix()?);
            rules.insert(libc::SYS_socketpair, not_unix()?);
            // An empty rule list matches every call.
            rules.insert(libc::SYS_io_uring_setup, Vec::new());
        }
        for nr in KEYRING_CALLS {
            rules.insert(*nr, Vec::new());
        }
        for (nr, arg) in mode_calls() {
            let bit = |b: u64| -> Result<SeccompRule, seccompiler::BackendError> {
                SeccompRule::new(vec![SeccompCondition::new(
                    arg,
                    SeccompCmpArgLen::Dword,
                    SeccompCmpOp::MaskedEq(b),
                    b,
                )?])
            };
            let mut refused = vec![bit(libc::S_ISUID as u64)?, bit(libc::S_ISGID as u64)?];
            if mknod_calls().iter().any(|(n, _)| *n == nr) {
                // Every file type but 0 (a regular file), S_IFREG and S_IFIFO.
                let ifmt = libc::S_IFMT as u64;
                for ty in (1u64..16).map(|t| t << 12) {
                    if ty == libc::S_IFREG as u64 || ty == libc::S_IFIFO as u64 {
                        continue;
                    }
                    refused.push(SeccompRule::new(vec![SeccompCondition::new(
                        arg,
                        SeccompCmpArgLen::Dword,
                        SeccompCmpOp::MaskedEq(ifmt),
                        ty,
                    )?])?);
                }
            }
            rules.insert(nr, refused);
        }
        let filter = SeccompFilter::new(
            rules,
            SeccompAction::Allow,
            SeccompAction::Errno(libc::EACCES as u32),
            arch,
        )?;
        filter.try_into()
    };
    let mut program = build().map_err(NoFilter::Build)?;
    guard_x32(&mut program)?;
    Ok(program)
}

/// A marker errno the socket rules are compiled with, turned into `SECCOMP_RET_USER_NOTIF`
/// afterwards (seccompiler has no such action).
const NOTIFY_MARK: u32 = 4095;

/// The socket rules of [`compile`] (`socket`/`socketpair` of a family but `AF_UNIX`,
/// `io_uring_setup`), each refused call handed to kiln's listener instead of failed here.
fn compile_notify() -> Result<BpfProgram, NoFilter> {
    let arch = std::env::consts::ARCH
        .try_into()
        .map_err(|_| NoFilter::Architecture(std::env::consts::ARCH))?;
    let not_unix = || -> Result<Vec<SeccompRule>, seccompiler::BackendError> {
        Ok(vec![SeccompRule::new(vec![SeccompCondition::new(
            0,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Ne,
            libc::AF_UNIX as u64,
        )?])?])
    };
    let build = || -> Result<BpfProgram, seccompiler::BackendError> {
        let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
        rules.insert(libc::SYS_socket, not_unix()?);
        rules.insert(libc::SYS_socketpair, not_unix()?);
        rules.insert(libc::SYS_io_uring_setup, Vec::new());
        SeccompFilter::new(
            rules,
            SeccompAction::Allow,
            SeccompAction::Errno(NOTIFY_MARK),
            arch,
        )?
        .try_into()
    };
    let mut program = build().map_err(NoFilter::Build)?;
    const BPF_RET_K: u16 = 0x06;
    let mark = libc::SECCOMP_RET_ERRNO | NOTIFY_MARK;
    let mut marked = 0;
    for i in program.iter_mut() {
        if i.code == BPF_RET_K && i.k == mark {
            i.k = libc::SECCOMP_RET_USER_NOTIF;
            marked += 1;
        }
    }
    if marked == 0 {
        return Err(NoFilter::NoRefusal);
    }
    guard_x32(&mut program)?;
    Ok(program)
}

/// In the child: install the socket rules of [`NetFilter::raw_notify`] with a listener, and
/// return the listener's descriptor.
///
/// # Safety
/// As [`install`].
pub unsafe fn install_listener(raw: (usize, u16)) -> std::io::Result<libc::c_int> {
    #[repr(C)]
    struct SockFprog {
        len: libc::c_ushort,
        filter: *const sock_filter,
    }
    let prog = SockFprog {
        len: raw.1,
        filter: raw.0 as *const sock_filter,
    };
    // SAFETY: `prog` points at a live, well-formed filter.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
            &prog as *const SockFprog,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(fd as libc::c_int)
}

/// On x86-64 the x32 ABI reaches the same system calls under numbers with bit 30 set, which
/// the rules above do not name: refuse every x32 call (no program kiln runs uses that ABI).
/// The block goes right after seccompiler's architecture check (3 instructions, which kill a
/// process calling through another ABI, such as i386's `int 0x80`).
fn guard_x32(program: &mut BpfProgram) -> Result<(), NoFilter> {
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    const BPF_LD_W_ABS: u16 = 0x20;
    const BPF_JGE_K: u16 = 0x35;
    const BPF_RET_K: u16 = 0x06;
    let kill = program
        .get(2)
        .is_some_and(|i| i.code == BPF_RET_K && i.k == libc::SECCOMP_RET_KILL_PROCESS);
    if !kill {
        return Err(NoFilter::NoArchitectureCheck);
    }
    if std::env::consts::ARCH != "x86_64" {
        return Ok(());
    }
    let errno = libc::SECCOMP_RET_ERRNO | libc::EACCES as u32;
    let block = [
        // seccomp_data.nr is at offset 0.
        sock_filter {
            code: BPF_LD_W_ABS,
            jt: 0,
            jf: 0,
            k: 0,
        },
        sock_filter {
            code: BPF_JGE_K,
            jt: 0,
            jf: 1,
            k: X32_SYSCALL_BIT,
        },
        sock_filter {
            code: BPF_RET_K,
            jt: 0,
            jf: 0,
            k: errno,
        },
    ];
    program.splice(3..3, block);
    Ok(())
}

/// In the child, between fork and exec (after `no_new_privs`): install the filter.
///
/// # Safety
/// `raw` comes from [`NetFilter::raw`] (instructions that live as long as the process). Makes
/// one system call on stack memory; allocates nothing.
pub unsafe fn install(raw: (usize, u16)) -> std::io::Result<()> {
    #[repr(C)]
    struct SockFprog {
        len: libc::c_ushort,
        filter: *const sock_filter,
    }
    let prog = SockFprog {
        len: raw.1,
        filter: raw.0 as *const sock_filter,
    };
    // SAFETY: `prog` points at a live, well-formed filter (see above).
    let rc = unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER as libc::c_ulong,
            &prog as *const SockFprog as usize,
            0,
            0,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filter_refuses_every_socket_family_but_unix() {
        let f = NetFilter::current();
        assert!(f.missing().is_none(), "{:?}", f.missing());
        // Run the filter in a forked child and report what socket() returned.
        let probe = |domain: i32, ty: i32, proto: i32| -> i32 {
            // SAFETY: the child only makes system calls and exits.
            unsafe {
                let pid = libc::fork();
                if pid == 0 {
                    libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
                    if install(f.raw().unwrap()).is_err() {
                        libc::_exit(100);
                    }
                    let fd = libc::socket(domain, ty, proto);
                    let code = if fd >= 0 {
                        0
                    } else {
                        *libc::__errno_location()
                    };
                    libc::_exit(code);
                }
                let mut st = 0;
                libc::waitpid(pid, &mut st, 0);
                libc::WEXITSTATUS(st)
            }
        };
        assert_eq!(probe(libc::AF_UNIX, libc::SOCK_STREAM, 0), 0);
        // Set-user-ID and set-group-ID modes are refused, with or without `net`; plain ones
        // pass.
        let dir = tempfile::tempdir().unwrap();
        let file = std::ffi::CString::new(dir.path().join("f").to_str().unwrap()).unwrap();
        std::fs::write(dir.path().join("f"), "").unwrap();
        for raw in [f.raw().unwrap(), f.raw_with_net().unwrap()] {
            let chmod = |mode: libc::mode_t| -> i32 {
                // SAFETY: the child only makes system calls and exits.
                unsafe {
                    let pid = libc::fork();
                    if pid == 0 {
                        libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
                        if install(raw).is_err() {
                            libc::_exit(100);
                        }
                        let rc = libc::fchmodat(libc::AT_FDCWD, file.as_ptr(), mode, 0);
                        libc::_exit(if rc == 0 {
                            0
                        } else {
                            *libc::__errno_location()
                        });
                    }
                    let mut st = 0;
                    libc::waitpid(pid, &mut st, 0);
                    libc::WEXITSTATUS(st)
                }
            };
            let run = |f: &dyn Fn() -> libc::c_long| -> i32 {
                // SAFETY: the child only makes system calls and exits.
                unsafe {
                    let pid = libc::fork();
                    if pid == 0 {
                        libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
                        if install(raw).is_err() {
                            libc::_exit(100);
                        }
                        libc::_exit(if f() >= 0 {
                            0
                        } else {
                            *libc::__errno_location()
                        });
                    }
                    let mut st = 0;
                    libc::waitpid(pid, &mut st, 0);
                    libc::WEXITSTATUS(st)
                }
            };
            let node = |name: &str, mode: libc::mode_t| {
                let p = std::ffi::CString::new(dir.path().join(name).to_str().unwrap()).unwrap();
                // SAFETY: mknodat on a live path.
                run(&|| unsafe {
                    libc::mknodat(libc::AT_FDCWD, p.as_ptr(), mode, 0) as libc::c_long
                })
            };
            assert_eq!(node(&format!("reg{}", raw.0), libc::S_IFREG | 0o644), 0);
            assert_eq!(node(&format!("fifo{}", raw.0), libc::S_IFIFO | 0o644), 0);
            assert_eq!(node("suid", libc::S_IFREG | 0o4755), libc::EACCES);
            assert_eq!(node("chr", libc::S_IFCHR | 0o644), libc::EACCES);
            assert_eq!(node("blk", libc::S_IFBLK | 0o644), libc::EACCES);
            assert_eq!(node("sock", libc::S_IFSOCK | 0o644), libc::EACCES);
            // SAFETY: keyctl(KEYCTL_GET_KEYRING_ID, @s, 0) reads nothing of ours.
            let key = run(&|| unsafe { libc::syscall(libc::SYS_keyctl, 0, -3, 0) });
            assert_eq!(key, libc::EACCES, "keyrings are out of reach");
            assert_eq!(chmod(0o755), 0);
            assert_eq!(chmod(0o4755), libc::EACCES);
            assert_eq!(chmod(0o2755), libc::EACCES);
        }
        for (d, t, p) in [
            (libc::AF_INET, libc::SOCK_STREAM, 0),
            (libc::AF_INET, libc::SOCK_DGRAM, 0),
            (libc::AF_INET, libc::SOCK_STREAM, 262), // MPTCP
            (libc::AF_INET6, libc::SOCK_DGRAM, 0),
            (libc::AF_INET, libc::SOCK_RAW, 1),
            (libc::AF_NETLINK, libc::SOCK_RAW, 0),
            (libc::AF_PACKET, libc::SOCK_RAW, 0),
        ] {
            assert_eq!(probe(d, t, p), libc::EACCES, "socket({d}, {t}, {p})");
        }
    }
}

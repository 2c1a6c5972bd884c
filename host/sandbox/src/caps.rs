//! What a program holds: no capability, no inherited descriptor, a keyring of its own.

/// The capabilities a program keeps: none, not even `CAP_DAC_OVERRIDE` (a root kiln's programs
/// cannot read or write files they do not own). An allowlist, so a capability nobody thought
/// of is gone too. Without
/// them a program cannot step around Landlock (`CAP_SYS_ADMIN`, `CAP_PERFMON`,
/// `CAP_DAC_READ_SEARCH` for `open_by_handle_at`), read kiln's memory (`CAP_SYS_PTRACE`),
/// change files it may not write through their metadata (`CAP_CHOWN`, `CAP_FOWNER`,
/// `CAP_SETFCAP`, `CAP_LINUX_IMMUTABLE`), make device nodes (`CAP_MKNOD`), set the clock or
/// reach the network past the filter (`CAP_NET_RAW`, `CAP_NET_ADMIN`).
const KEPT_CAPS: &[u32] = &[];
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
pub unsafe fn drop_caps() -> std::io::Result<()> {
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

/// Mark every descriptor from `first` on close-on-exec (`close_range` with
/// `CLOSE_RANGE_CLOEXEC`, Linux 5.11; one by one before that).
///
/// # Safety
/// System calls only.
pub unsafe fn cloexec_from(first: libc::c_int) {
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
        let max = crate::reap::fd_limit();
        for fd in first..max {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
    }
}

/// Give the process a new, empty session keyring, so the keys of kiln's session (Kerberos
/// tickets, credential helpers' secrets) are out of reach; the seccomp filter then refuses
/// every keyring call. A kernel without keyrings has nothing to hide.
///
/// # Safety
/// One system call.
pub unsafe fn fresh_keyring() {
    const KEYCTL_JOIN_SESSION_KEYRING: libc::c_long = 1;
    // SAFETY: a null name asks for a new anonymous keyring; no memory is passed.
    unsafe {
        libc::syscall(
            libc::SYS_keyctl,
            KEYCTL_JOIN_SESSION_KEYRING,
            std::ptr::null::<libc::c_char>(),
        );
    }
}

//! A stdout or stderr whose reader went away (`kiln fix 2>&1 | head -1`): found with `poll`
//! and pointed at /dev/null, from a signal handler too (every call here is
//! async-signal-safe), so later writes are dropped instead of failing.

/// Whether `fd` is a pipe or socket whose reader went away (`poll` reports an error).
/// Async-signal-safe.
pub(super) fn stream_closed(fd: libc::c_int) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no wait.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n == 1 && p.revents & libc::POLLERR != 0
}

/// Point `fd` at /dev/null, so writes to a stream whose reader went away succeed and are
/// dropped. Async-signal-safe (`open`, `dup2`, `close`).
pub(super) fn null_over(fd: libc::c_int) {
    // SAFETY: a NUL-terminated path; the descriptor opened here is closed after the dup2.
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if null >= 0 {
            libc::dup2(null, fd);
            libc::close(null);
        }
    }
}

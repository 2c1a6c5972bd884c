//! The sockets a program was refused, as the kernel reports them. Without `net`, the seccomp
//! filter hands every `socket`/`socketpair` of a family but `AF_UNIX` (and `io_uring_setup`) to
//! a listener in kiln (`SECCOMP_RET_USER_NOTIF`) instead of failing it on the spot: a thread of
//! kiln answers each with `EACCES`, as the plain filter would, and records what was asked. So
//! "the program tried to open a network socket and was refused" is what the kernel said, not a
//! guess from the program's output. The listener never lets a call through; if kiln's thread is
//! gone, the kernel fails the call (`ENOSYS`): the refusal holds either way.
//!
//! The child gets the listener when it installs the filter (between fork and exec) and passes
//! it to kiln over a socket pair made before the fork, then closes it: the program never holds
//! it.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// One refused system call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    /// `socket(family, type, protocol)` or `socketpair` of a family other than `AF_UNIX`.
    Socket {
        /// `AF_INET`, `AF_INET6`, `AF_NETLINK`, ...
        family: i32,
        /// `SOCK_STREAM`, `SOCK_DGRAM`, ... (flags removed).
        kind: i32,
    },
    /// `io_uring_setup` (an io_uring opens sockets of its own).
    IoUring,
}

impl Attempt {
    /// The family's usual name (`AF_INET`), or its number.
    pub fn family_name(&self) -> String {
        match self {
            Attempt::Socket { family, .. } => match *family {
                libc::AF_INET => "AF_INET".into(),
                libc::AF_INET6 => "AF_INET6".into(),
                libc::AF_NETLINK => "AF_NETLINK".into(),
                libc::AF_PACKET => "AF_PACKET".into(),
                n => format!("address family {n}"),
            },
            Attempt::IoUring => "io_uring".into(),
        }
    }
}

/// The socket pair a child passes its listener over (both ends close-on-exec).
#[derive(Debug)]
pub struct Channel {
    parent: OwnedFd,
    child: OwnedFd,
}

impl Channel {
    /// A new pair, or `None` when the system refuses one (the call then runs under the plain
    /// filter).
    pub fn new() -> Option<Channel> {
        let mut fds = [0; 2];
        // SAFETY: socketpair writes two descriptors into `fds`.
        let rc = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
                0,
                fds.as_mut_ptr(),
            )
        };
        if rc != 0 {
            return None;
        }
        // SAFETY: both descriptors were just made and are owned here.
        Some(unsafe {
            Channel {
                parent: OwnedFd::from_raw_fd(fds[0]),
                child: OwnedFd::from_raw_fd(fds[1]),
            }
        })
    }

    /// The child's end (used between fork and exec).
    pub fn child_fd(&self) -> RawFd {
        self.child.as_raw_fd()
    }
}

/// In the child: send `listener` to kiln over `sock`.
///
/// # Safety
/// System calls on stack memory only; async-signal-safe.
pub unsafe fn send_listener(sock: RawFd, listener: RawFd) -> bool {
    // SAFETY: a msghdr with one byte of data and one SCM_RIGHTS descriptor, all on the stack.
    unsafe {
        let mut byte = [0u8; 1];
        let mut iov = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: 1,
        };
        // Room for one descriptor, aligned as a cmsghdr.
        let mut space = [0u64; 4];
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = space.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null() {
            return false;
        }
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), listener);
        libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) == 1
    }
}

/// Receive the listener the child sent, if it sent one (it has, once the spawn returned: the
/// child sends it before exec).
fn receive_listener(sock: RawFd) -> Option<OwnedFd> {
    // SAFETY: recvmsg into stack buffers; the descriptor received is owned from here on.
    unsafe {
        let mut byte = [0u8; 1];
        let mut iov = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: 1,
        };
        let mut space = [0u64; 4];
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = space.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&space) as _;
        if libc::recvmsg(sock, &mut msg, libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC) != 1 {
            return None;
        }
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null()
            || (*cmsg).cmsg_level != libc::SOL_SOCKET
            || (*cmsg).cmsg_type != libc::SCM_RIGHTS
        {
            return None;
        }
        let fd = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>());
        (fd >= 0).then(|| OwnedFd::from_raw_fd(fd))
    }
}

/// kiln's thread answering one call's refused sockets.
#[derive(Debug)]
pub struct Supervisor {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Vec<Attempt>>>,
}

impl Supervisor {
    /// Take the listener the child sent over `channel` (which is closed) and answer its
    /// notifications on a thread; `None` when the child sent none (it runs under the plain
    /// filter, or with `net`).
    pub fn start(channel: Channel) -> Option<Supervisor> {
        let listener = receive_listener(channel.parent.as_raw_fd())?;
        drop(channel);
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("kiln-seccomp".into())
            .spawn(move || answer(listener, &flag))
            .ok()?;
        Some(Supervisor {
            stop,
            thread: Some(thread),
        })
    }

    /// Stop (every process of the call is gone by now) and return what was refused.
    pub fn finish(mut self) -> Vec<Attempt> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// At most this many attempts are kept (a program looping on `socket` is still answered).
const MAX_KEPT: usize = 64;

/// Answer every notification with `EACCES` until the call's processes are gone (the listener
/// hangs up) or `stop` is set.
fn answer(listener: OwnedFd, stop: &AtomicBool) -> Vec<Attempt> {
    let fd = listener.as_raw_fd();
    let mut seen = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll on one live descriptor.
        let n = unsafe { libc::poll(&mut p, 1, 100) };
        if n <= 0 {
            continue;
        }
        if p.revents & libc::POLLIN == 0 {
            if p.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
                break;
            }
            continue;
        }
        // SAFETY: the kernel requires a zeroed notification buffer; both ioctls take pointers
        // to live structs of the right layout.
        unsafe {
            let mut notif: libc::seccomp_notif = std::mem::zeroed();
            if libc::ioctl(fd, libc::SECCOMP_IOCTL_NOTIF_RECV, &mut notif) != 0 {
                // The caller died meanwhile (ENOENT), or a signal: look again.
                continue;
            }
            let d = notif.data;
            let attempt = if d.nr as libc::c_long == libc::SYS_io_uring_setup {
                Attempt::IoUring
            } else {
                Attempt::Socket {
                    family: d.args[0] as i32,
                    kind: (d.args[1] as i32) & !(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC),
                }
            };
            if seen.len() < MAX_KEPT {
                seen.push(attempt);
            }
            let mut resp: libc::seccomp_notif_resp = std::mem::zeroed();
            resp.id = notif.id;
            resp.error = -libc::EACCES;
            libc::ioctl(fd, libc::SECCOMP_IOCTL_NOTIF_SEND, &mut resp);
        }
    }
    seen
}

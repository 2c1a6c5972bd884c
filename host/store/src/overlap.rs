//! The overlap rule of a new loop (applied inside its begin's transaction): a live loop of
//! the same project on this machine refuses it, a crashed one is closed. And this machine's
//! name, which the rule compares.

use super::error::StoreError;

/// A running loop of the same project and host that a new loop's begin found.
#[derive(Debug, Clone, Copy)]
pub struct Running {
    /// Its id.
    pub id: i64,
    /// Its process.
    pub pid: i64,
    /// Its start, unix ms.
    pub started: i64,
}

/// Decide about the running loops a new loop's begin found (same project, same host): an
/// error when one's process is alive (and it is not `parent`), else the ids to close as
/// crashed.
pub fn check_running(found: &[Running], parent: Option<i64>) -> Result<Vec<i64>, StoreError> {
    let mut crashed = Vec::new();
    for r in found {
        if Some(r.id) == parent {
            continue;
        }
        if pid_alive(r.pid) {
            return Err(StoreError::Overlap {
                id: r.id,
                pid: r.pid,
                started: r.started,
            });
        }
        crashed.push(r.id);
    }
    Ok(crashed)
}

/// What a crashed loop's `last_error` says.
pub const CRASHED: &str = "the process running this loop ended without finishing it";

fn pid_alive(pid: i64) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    pid > 0 && unsafe { libc::kill(pid as i32, 0) } == 0
}

/// This machine's name (`gethostname`), or `localhost` when it has none.
pub fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; the name is NUL-terminated when it fits.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    match std::str::from_utf8(&buf[..end]) {
        Ok(s) if rc == 0 && !s.is_empty() => s.to_string(),
        _ => "localhost".to_string(),
    }
}

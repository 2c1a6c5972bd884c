//! The warmer of the compile cache: a command that found built-ins the cache does not hold
//! starts a detached, niced `kiln` in the background (the CLI's hidden `warm-cache` command)
//! that compiles them one at a time, so the next call of each finds it compiled. One warmer
//! runs per cache directory: it holds [`LOCK_FILE`] there (`flock`, never waited on: a second
//! warmer finding it held exits at once, and no foreground command takes it). A foreground
//! command compiling the same built-in meanwhile is harmless: each writes its entry to a file
//! of its own and renames it into place ([`crate::cache::store`]), signed as any entry.

// Writes only its lock file in the compile cache's directory (kiln's own, outside any
// workspace), as cache.rs writes the entries there.
#![allow(clippy::disallowed_methods)]

use super::{PluginError, Runtime, Source, builtin};
use std::fs::File;
use std::path::Path;

/// The lock file a warmer holds in the cache directory while it runs.
pub const LOCK_FILE: &str = "warm.lock";

/// The warmer lock of a cache directory, held until dropped (or the process ends).
#[derive(Debug)]
pub struct WarmLock {
    _file: File,
}

/// Take the warmer lock of the cache directory `dir` without waiting: `None` when another
/// process holds it.
pub fn try_lock(dir: &Path) -> std::io::Result<Option<WarmLock>> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::create_dir_all(dir)?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(dir.join(LOCK_FILE))?;
    // SAFETY: flock on a descriptor this function owns; no memory is involved.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(Some(WarmLock { _file: file }));
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(None)
    } else {
        Err(e)
    }
}

/// The built-ins (by name) the compile cache of `runtime` does not hold; none when the cache
/// is off.
pub fn cold_builtins(runtime: &Runtime) -> Vec<String> {
    if runtime.cache_dir().is_none() {
        return Vec::new();
    }
    builtin::BUILTINS
        .iter()
        .filter(|(_, bytes)| !runtime.is_cached(bytes))
        .map(|(stem, _)| builtin::name_of(stem))
        .collect()
}

/// Compile every built-in the cache of `runtime` does not hold, one at a time, each stored
/// signed; the names compiled. A built-in that fails to compile stops it (with the error).
pub fn warm(runtime: &Runtime) -> Result<Vec<String>, PluginError> {
    let mut done = Vec::new();
    if runtime.cache_dir().is_none() {
        return Ok(done);
    }
    for (stem, bytes) in builtin::BUILTINS {
        // Checked again before each: a foreground command may have compiled it meanwhile.
        if runtime.is_cached(bytes) {
            continue;
        }
        runtime.check_bytes(bytes, Source::Builtin)?;
        done.push(builtin::name_of(stem));
    }
    Ok(done)
}

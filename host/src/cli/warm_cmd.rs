//! `kiln warm-cache` (hidden): the background warmer of the compile cache. A command that
//! finds built-ins the cache does not hold answers without compiling them (what they declare is
//! embedded, see `kiln_plugin::Declared`) and starts this command detached
//! (`warmer::spawn_if_cold`): at the lowest priority, under the cache directory's warmer lock (a
//! second warmer exits at once), it compiles the rest one at a time, so the next call of each
//! finds it compiled. `KILN_NO_WARMER=1` turns it off. Starting it is `warmer.rs`'s.

use crate::plugin::{Runtime, warm};
use std::process::ExitCode;

/// The warmer itself: lowest priority, the lock or exit, then every built-in the cache lacks.
/// Exit 0 when it compiled them or another warmer holds the lock, 2 on an error (printed, for
/// a person running it by hand).
pub(crate) fn run() -> ExitCode {
    // SAFETY: setpriority on this process; no memory is involved.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, 0, 19);
    }
    let runtime = match Runtime::with_default_cache() {
        Ok(r) => r,
        Err(e) => return fail(&e.to_string()),
    };
    let Some(dir) = runtime.cache_dir() else {
        return ExitCode::SUCCESS;
    };
    let _lock = match warm::try_lock(dir) {
        Ok(Some(lock)) => lock,
        Ok(None) => return ExitCode::SUCCESS,
        Err(e) => return fail(&format!("cannot lock {}: {e}", dir.display())),
    };
    match warm::warm(&runtime) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => fail(&e.to_string()),
    }
}

fn fail(why: &str) -> ExitCode {
    eprintln!(
        "error: warming the compile cache: {}",
        crate::terminal::printable(why)
    );
    ExitCode::from(2)
}

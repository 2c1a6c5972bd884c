//! `kiln warm-cache` (hidden): the background warmer of the compile cache. A command that
//! finds built-ins the cache does not hold answers without compiling them (what they declare is
//! embedded, see `kiln_plugin::Declared`) and starts this command detached
//! ([`spawn_if_cold`]): at the lowest priority, under the cache directory's warmer lock (a
//! second warmer exits at once), it compiles the rest one at a time, so the next call of each
//! finds it compiled. `KILN_NO_WARMER=1` turns it off.

use crate::plugin::{Runtime, warm};
use std::process::{ExitCode, Stdio};

/// The hidden subcommand that runs the warmer.
pub(crate) const SUBCOMMAND: &str = "warm-cache";

/// Whether `KILN_NO_WARMER` turns the warmer off (set to anything but empty or `0`).
fn disabled() -> bool {
    kiln_env::env()
        .var_os("KILN_NO_WARMER")
        .is_some_and(|v| !v.is_empty() && v != "0")
}

/// Start the warmer when the cache of `runtime` lacks a built-in: `kiln warm-cache`, detached
/// (its own process group, no terminal, stdin/stdout/stderr on /dev/null, in `/`), never
/// waited for. Starting it failing (kiln's binary replaced by a rebuild) only costs speed.
pub(crate) fn spawn_if_cold(runtime: &Runtime) {
    if disabled() || warm::cold_builtins(runtime).is_empty() {
        return;
    }
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    use std::os::unix::process::CommandExt;
    let child = std::process::Command::new(exe)
        .arg(SUBCOMMAND)
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn();
    if let Ok(mut child) = child {
        // Reaped when it ends, if kiln is still running then (else init reaps it).
        let _ = std::thread::Builder::new()
            .name("kiln-warmer-reaper".into())
            .spawn(move || child.wait());
    }
}

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

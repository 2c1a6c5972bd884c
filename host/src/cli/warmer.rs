//! Starting the background warmer of the compile cache (`kiln warm-cache`, `warm_cmd.rs`)
//! when a command finds built-ins the cache lacks.

use crate::plugin::{Runtime, warm};
use std::process::Stdio;

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

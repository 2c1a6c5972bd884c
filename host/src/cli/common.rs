//! What every loop command shares: the Ctrl-C watch that cancels a run, and the mapping from
//! a run's stop reason to the command's outcome (and so its exit code).

use super::Outcome;
use crate::engine::StopReason;

/// A channel that turns `true` on the first Ctrl-C; the loops watch it and stop between steps.
/// The task listening for the signal ends with the process (or when aborted by the caller).
pub(crate) fn ctrl_c_watch() -> (
    tokio::sync::watch::Receiver<bool>,
    tokio::task::JoinHandle<()>,
) {
    let (tx, rx) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            let _ = tx.send(true);
        }
    });
    (rx, task)
}

/// The outcome of a loop that stopped for `reason`: success exits 0, an interrupted run 130
/// (as a shell reports a process ended by SIGINT), an error 2, any other end 1.
pub(crate) fn outcome_of(reason: StopReason, success: bool) -> Outcome {
    match reason {
        _ if success => Outcome::Success,
        StopReason::Cancelled => Outcome::Interrupted,
        StopReason::Error => Outcome::Error,
        _ => Outcome::Failure,
    }
}

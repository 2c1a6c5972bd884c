//! The process-wide request to stop: the stop signals (Ctrl-C, SIGTERM, SIGHUP unless kiln
//! started ignoring it) and a closed output ask the running loop to stop between steps.

/// The process-wide request to stop: `true` once a stop signal came or stdout was closed.
static STOP: std::sync::OnceLock<tokio::sync::watch::Sender<bool>> = std::sync::OnceLock::new();
/// The signal that asked to stop (SIGPIPE for a closed output), 0 while none did.
static STOP_SIGNAL: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);
/// SIGHUP was ignored when kiln started (`nohup`): a hangup then stops nothing.
static HUP_IGNORED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// The stop signals are being listened for.
static LISTENING: std::sync::Once = std::sync::Once::new();

fn stop_sender() -> &'static tokio::sync::watch::Sender<bool> {
    STOP.get_or_init(|| tokio::sync::watch::channel(false).0)
}

/// Called once at start, before any thread: remember whether SIGHUP is ignored (`nohup`), so
/// that kiln keeps ignoring it.
pub(crate) fn note_inherited_signals() {
    // SAFETY: reading the current disposition, changing nothing.
    let ignored = unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(libc::SIGHUP, std::ptr::null(), &mut old) == 0
            && old.sa_sigaction == libc::SIG_IGN
    };
    HUP_IGNORED.store(ignored, std::sync::atomic::Ordering::Relaxed);
}

/// Ask the running loop to stop because of `signal` (the first cause is kept): it ends as
/// `cancelled`, between steps, with its row closed and every file whole.
pub(crate) fn request_stop(signal: i32) {
    use std::sync::atomic::Ordering::SeqCst;
    let _ = STOP_SIGNAL.compare_exchange(0, signal, SeqCst, SeqCst);
    stop_sender().send_replace(true);
}

/// The signal that stopped the work (SIGPIPE when its output was closed), if one did.
pub(crate) fn stop_signal() -> Option<i32> {
    Some(STOP_SIGNAL.load(std::sync::atomic::Ordering::SeqCst)).filter(|s| *s != 0)
}

/// A channel that turns `true` on the first Ctrl-C (SIGINT), SIGTERM or SIGHUP (unless kiln
/// was started ignoring it), or when stdout or stderr is closed under kiln (a broken pipe); the
/// loops watch it and stop between steps, recorded as `cancelled`. A signal that comes while
/// no run watches (between the tasks of an interactive agent, say) ends kiln at once, as it
/// would without this watch. The returned task stands for the caller's watch: aborting it is
/// harmless.
pub(crate) fn ctrl_c_watch() -> (
    tokio::sync::watch::Receiver<bool>,
    tokio::task::JoinHandle<()>,
) {
    use tokio::signal::unix::{SignalKind, signal};
    LISTENING.call_once(|| {
        let mut kinds = vec![SignalKind::interrupt(), SignalKind::terminate()];
        if !HUP_IGNORED.load(std::sync::atomic::Ordering::Relaxed) {
            kinds.push(SignalKind::hangup());
        }
        for kind in kinds {
            let Ok(mut stream) = signal(kind) else {
                continue;
            };
            tokio::spawn(async move {
                while stream.recv().await.is_some() {
                    request_stop(kind.as_raw_value());
                    if stop_sender().receiver_count() == 0 {
                        kiln_sandbox::remove_call_dirs();
                        std::process::exit(128 + kind.as_raw_value());
                    }
                }
            });
        }
    });
    let rx = stop_sender().subscribe();
    (rx, tokio::spawn(async {}))
}

/// For a command that runs programs with no loop to stop (`kiln check`, `kiln tool call`): a
/// stop signal (Ctrl-C, SIGTERM, SIGHUP unless kiln was started ignoring it) first removes the
/// temporary directories of the program calls in flight, which the default action would leave
/// in `/tmp`, then ends kiln as the signal would have.
pub(crate) fn end_cleanly_on_stop_signals() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut kinds = vec![SignalKind::interrupt(), SignalKind::terminate()];
    if !HUP_IGNORED.load(std::sync::atomic::Ordering::Relaxed) {
        kinds.push(SignalKind::hangup());
    }
    for kind in kinds {
        let Ok(mut stream) = signal(kind) else {
            continue;
        };
        tokio::spawn(async move {
            if stream.recv().await.is_some() {
                kiln_sandbox::remove_call_dirs();
                let raw = kind.as_raw_value();
                // SAFETY: the default action back, then the signal again: kiln ends by it.
                unsafe {
                    libc::signal(raw, libc::SIG_DFL);
                    libc::raise(raw);
                }
                std::process::exit(128 + raw);
            }
        });
    }
}

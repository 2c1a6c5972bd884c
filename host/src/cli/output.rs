//! What kiln writes on stdout and stderr: JSON lines, text lines, and what happens when the
//! reader goes away (the running loop is asked to stop).

use crate::plugin::Source;

/// Print a value as one line of JSON on stdout (see [`out_line`]).
pub(crate) fn print_json(value: &serde_json::Value) {
    out_line(&serde_json::to_string(value).expect("JSON values serialize"));
}

/// stdout or stderr was closed under kiln (EPIPE): nothing more is written to it.
static OUT_CLOSED: [std::sync::atomic::AtomicBool; 2] = [
    std::sync::atomic::AtomicBool::new(false),
    std::sync::atomic::AtomicBool::new(false),
];

/// Write `text` on stdout (`err` false) or stderr, flushed. A reader that went away (`kiln
/// fix --json | head -1`) asks the running loop to stop, recorded as `cancelled`; later
/// writes to that stream are dropped. Any other write error is ignored.
pub(crate) fn write_out(err: bool, text: &str) {
    use std::io::Write;
    use std::sync::atomic::Ordering::SeqCst;
    let closed = &OUT_CLOSED[usize::from(err)];
    if closed.load(SeqCst) {
        return;
    }
    let result = if err {
        let mut e = std::io::stderr().lock();
        e.write_all(text.as_bytes()).and_then(|_| e.flush())
    } else {
        let mut o = std::io::stdout().lock();
        o.write_all(text.as_bytes()).and_then(|_| o.flush())
    };
    if let Err(e) = result
        && e.kind() == std::io::ErrorKind::BrokenPipe
    {
        closed.store(true, SeqCst);
        super::closed_output::null_over(if err {
            libc::STDERR_FILENO
        } else {
            libc::STDOUT_FILENO
        });
        super::signals::request_stop(libc::SIGPIPE);
    }
}

/// A line on stdout: see [`write_out`].
pub(crate) fn out_line(text: &str) {
    write_out(false, &format!("{text}\n"));
}

/// A line on stderr: see [`write_out`].
pub(crate) fn err_line(text: &str) {
    write_out(true, &format!("{text}\n"));
}

/// `built-in` or the file path.
pub(crate) fn source_label(s: &Source) -> String {
    s.to_string()
}

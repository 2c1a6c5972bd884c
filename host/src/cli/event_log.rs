//! How a loop's events reach a person: the console log (one line per event on stderr, streamed
//! model text as it comes, always ended by a newline before the next status line) and the file
//! log (the same lines, timestamped, appended to a log file).

use super::render::Human;
use crate::engine::Event;
use crate::terminal::printable;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Where event lines go.
pub(crate) struct EventLog {
    console: bool,
    /// Diffs in color: stderr is a terminal and `NO_COLOR` is not set.
    color: bool,
    file: Option<(PathBuf, std::fs::File)>,
    /// Streamed text on stderr that did not end with a newline yet.
    mid_line: bool,
    /// Streamed text of the current line, not yet written to the file.
    pending: String,
    /// Streamed model text is shown (else only the status lines).
    show_text: bool,
    /// The model text shown on the console since the current agent turn began.
    turn_text: String,
    /// Stderr is a terminal: a running check shows a spinner with the seconds elapsed.
    tty: bool,
    /// The spinner under the running check, if one runs.
    spinner: Option<Spinner>,
    /// The loop's banner was printed before the first check: `loop.started` only names the
    /// loop.
    bannered: bool,
}

/// A line redrawn under a running check, on a terminal: a spinner and the
/// seconds elapsed. Cleared when the next line comes.
pub(crate) struct Spinner {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Spinner {
    pub(crate) fn start() -> Spinner {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            const FRAMES: [char; 4] = ['|', '/', '-', '\\'];
            let start = std::time::Instant::now();
            let mut shown = false;
            let mut n = 0usize;
            while !flag.load(Ordering::Relaxed) {
                std::thread::sleep(std::time::Duration::from_millis(100));
                n += 1;
                // After a second, redraw four times a second.
                if n >= 10 && n.is_multiple_of(4) && !flag.load(Ordering::Relaxed) {
                    let secs = start.elapsed().as_secs();
                    eprint!(
                        "{}    {} {secs} s",
                        crate::terminal::CLEAR_LINE,
                        FRAMES[(n / 4) % 4]
                    );
                    shown = true;
                }
            }
            if shown {
                eprint!("{}", crate::terminal::CLEAR_LINE);
            }
        });
        Spinner {
            stop,
            thread: Some(thread),
        }
    }

    pub(crate) fn stop(mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl EventLog {
    pub fn new(console: bool, file: Option<(PathBuf, std::fs::File)>) -> EventLog {
        EventLog {
            console,
            color: console && crate::terminal::colors_on_stderr(),
            file,
            mid_line: false,
            pending: String::new(),
            show_text: true,
            turn_text: String::new(),
            tty: console && std::io::IsTerminal::is_terminal(&std::io::stderr()),
            spinner: None,
            bannered: false,
        }
    }

    /// The loop's banner was printed before the first check (see [`EventLog::bannered`]).
    pub fn bannered(mut self) -> EventLog {
        self.bannered = true;
        self
    }

    /// A console log of status lines only: no streamed model text, no colored diffs.
    pub fn lines_only(console: bool) -> EventLog {
        let mut log = EventLog::new(console, None);
        log.color = false;
        log.show_text = false;
        log
    }

    /// One event: its human line, or streamed text.
    pub fn event(&mut self, e: &Event) {
        if let Event::TurnStart { .. } = e {
            self.turn_text.clear();
        }
        // On a terminal the spinner shows the time elapsed: no periodic line.
        if matches!(e, Event::RunnerProgress { .. }) && self.spinner.is_some() {
            return;
        }
        self.stop_spinner();
        match e {
            Event::LoopStarted { loop_id, .. } if self.bannered => {
                self.line(&format!("loop {loop_id} started"));
            }
            Event::RunnerStarted { .. } => {
                if let Some(line) = e.human() {
                    self.line(&line);
                }
                if self.tty {
                    self.spinner = Some(Spinner::start());
                }
            }
            Event::TextDelta { text } if self.show_text => self.text(text),
            Event::TextDelta { .. } => {}
            Event::EditDiff { .. } if self.color => {
                if let Some(diff) = e.human() {
                    self.end_text();
                    super::output::err_line(&crate::terminal::color_diff(&diff));
                    self.write_file(&diff);
                }
            }
            _ => {
                if let Some(line) = e.human() {
                    self.line(&line);
                }
            }
        }
    }

    /// Streamed model text, shown as it comes.
    pub fn text(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        let shown = printable(text);
        if self.console {
            self.turn_text.push_str(text);
            super::output::write_out(true, &shown);
            self.mid_line = !shown.ends_with('\n');
        }
        if self.file.is_some() {
            self.pending.push_str(&shown);
            while let Some(i) = self.pending.find('\n') {
                let line: String = self.pending.drain(..=i).collect();
                self.write_file(line.trim_end_matches('\n'));
            }
        }
    }

    /// Whether `answer` is what the console showed as the last turn's streamed text (so a
    /// person looking at the same terminal has read it already).
    pub fn showed(&self, answer: &str) -> bool {
        !answer.trim().is_empty() && self.turn_text.trim() == answer.trim()
    }

    /// A status line (console and file).
    pub fn line(&mut self, line: &str) {
        self.end_text();
        if self.console {
            super::output::err_line(line);
        }
        self.write_file(line);
    }

    /// A line shown on stderr whether or not the console log is on (a final summary), and
    /// logged to the file.
    pub fn always(&mut self, line: &str) {
        self.end_text();
        super::output::err_line(line);
        self.write_file(line);
    }

    fn stop_spinner(&mut self) {
        if let Some(s) = self.spinner.take() {
            s.stop();
        }
    }

    /// End a line of streamed text, so what follows starts on a line of its own.
    pub fn end_text(&mut self) {
        self.stop_spinner();
        if self.mid_line {
            super::output::err_line("");
            self.mid_line = false;
        }
        if !self.pending.is_empty() {
            let line = std::mem::take(&mut self.pending);
            self.write_file(&line);
        }
    }

    fn write_file(&mut self, line: &str) {
        let Some((path, f)) = &mut self.file else {
            return;
        };
        let stamp = crate::clock::utc_text(crate::clock::now_ms());
        let mut text = String::new();
        for l in line.split('\n') {
            text.push_str(&format!("{stamp} {l}\n"));
        }
        if let Err(e) = f.write_all(text.as_bytes()) {
            self.mid_line = false;
            eprintln!(
                "warning: cannot write the log {}: {e}; file logging stops",
                path.display()
            );
            self.file = None;
        }
    }
}

impl Drop for EventLog {
    fn drop(&mut self) {
        self.end_text();
    }
}

/// The value of a boolean environment variable: `Some(true)` for 1/true/yes/on,
/// `Some(false)` for 0/false/no/off, `None` when unset; anything else is warned about and
/// ignored.
pub(crate) fn env_flag(name: &str) -> Option<bool> {
    let v = kiln_env::env().var(name)?;
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" => Some(false),
        "" => None,
        _ => {
            eprintln!(
                "warning: {name}={} is not true or false; ignored",
                printable(v)
            );
            None
        }
    }
}

/// Open the log file for appending: `.kiln/logs/<name>` (as kiln's other logs: no symlink
/// followed) when `path` is `None`, else `path` (relative to the current directory) through
/// the workspace's one writer ([`crate::edit::writer::open_log`]): inside the workspace no
/// link at any component, no protected file (`kiln.toml`, `.git/`, `[sandbox] protect`), a
/// regular file only.
pub(crate) fn open_log_file(
    workspace: &Path,
    path: Option<&Path>,
    default_name: &str,
    protected: &crate::path::Protected,
) -> anyhow::Result<(PathBuf, std::fs::File)> {
    let Some(path) = path else {
        let f = crate::store::open_log(workspace, default_name)?;
        return Ok((workspace.join(".kiln/logs").join(default_name), f));
    };
    crate::edit::writer::open_log(workspace, path, protected)
        .map_err(|e| anyhow::anyhow!("refusing to write the log to {}: {e}", path.display()))
}

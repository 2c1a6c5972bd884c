//! The `tracing` subscriber of the command line: kiln's own events (target `kiln…`) at the
//! level `-q`/`-v` chose, each written to stderr as the line a person has always seen (a
//! plugin's message: `[plugin NAME] LEVEL: LINE`, each line of it prefixed). Events of the
//! crates kiln uses (wasmtime, rmcp, ...) are not shown.

use crate::plugin::PLUGIN_LOG_TARGET;
use std::fmt::Write as _;
use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::span;
use tracing::{Event, Level, Metadata, Subscriber};

/// The plugin log level of `-q` (errors only), `-v` (debug) or neither (warnings).
pub(crate) fn level(quiet: bool, verbose: bool) -> LevelFilter {
    if quiet {
        LevelFilter::ERROR
    } else if verbose {
        LevelFilter::DEBUG
    } else {
        LevelFilter::WARN
    }
}

/// Show kiln's events up to `max` on stderr, for the rest of the process.
pub(crate) fn install(max: LevelFilter) {
    // Set once, before anything logs; a second call (none today) keeps the first.
    let _ = tracing::subscriber::set_global_default(Lines {
        max,
        write: |s: &str| eprint!("{s}"),
    });
}

/// Writes each enabled event as lines (on stderr, once installed).
struct Lines<W> {
    max: LevelFilter,
    write: W,
}

impl<W: Fn(&str) + Send + Sync + 'static> Subscriber for Lines<W> {
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        m.target().starts_with("kiln") && *m.level() <= self.max
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(self.max)
    }

    fn new_span(&self, _: &span::Attributes<'_>) -> span::Id {
        span::Id::from_u64(1)
    }

    fn record(&self, _: &span::Id, _: &span::Record<'_>) {}

    fn record_follows_from(&self, _: &span::Id, _: &span::Id) {}

    fn event(&self, e: &Event<'_>) {
        let mut f = Fields::default();
        e.record(&mut f);
        (self.write)(&lines(e.metadata(), &f));
    }

    fn enter(&self, _: &span::Id) {}

    fn exit(&self, _: &span::Id) {}
}

/// An event's message and the plugin it came from.
#[derive(Default)]
struct Fields {
    message: String,
    plugin: Option<String>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "plugin" => self.plugin = Some(value.to_string()),
            "message" => self.message = value.to_string(),
            _ => {}
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "plugin" => self.plugin = Some(format!("{value:?}")),
            "message" => self.message = format!("{value:?}"),
            _ => {}
        }
    }
}

/// The lines an event is shown as, each ended by a newline.
fn lines(m: &Metadata<'_>, f: &Fields) -> String {
    let level = match *m.level() {
        Level::ERROR => "error",
        Level::WARN => "warn",
        Level::INFO => "info",
        Level::DEBUG => "debug",
        Level::TRACE => "trace",
    };
    let prefix = match &f.plugin {
        Some(name) if m.target() == PLUGIN_LOG_TARGET => format!("[plugin {name}] {level}: "),
        _ => format!("kiln: {level}: "),
    };
    let mut out = String::new();
    for line in f.message.split('\n') {
        let _ = writeln!(out, "{prefix}{line}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn quiet_shows_errors_verbose_debug_and_neither_warnings() {
        assert_eq!(level(true, false), LevelFilter::ERROR);
        assert_eq!(level(false, true), LevelFilter::DEBUG);
        assert_eq!(level(false, false), LevelFilter::WARN);
    }

    #[test]
    fn a_plugin_message_is_one_prefixed_line_per_line_and_only_kiln_events_are_shown() {
        let shown = Arc::new(Mutex::new(String::new()));
        let into = shown.clone();
        let lines = Lines {
            max: LevelFilter::WARN,
            write: move |s: &str| into.lock().unwrap().push_str(s),
        };
        tracing::subscriber::with_default(lines, || {
            tracing::warn!(target: "kiln::plugin", plugin = "shell", "first\nsecond");
            tracing::info!(target: "kiln::plugin", plugin = "shell", "not shown at warn");
            tracing::error!(target: "wasmtime", "not kiln's");
            tracing::error!(target: "kiln::plugin", plugin = "fs", "bad");
        });
        assert_eq!(
            *shown.lock().unwrap(),
            "[plugin shell] warn: first\n[plugin shell] warn: second\n[plugin fs] error: bad\n"
        );
    }
}

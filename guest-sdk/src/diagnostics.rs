//! Parsing of `file:line:col: severity: message` diagnostics, the format printed by gcc,
//! clang, `rustc --error-format=short`, tsc (`--pretty false`), eslint (unix), mypy, go vet
//! and many others. Pure Rust, usable by any runner and by the host.

/// Severity of a parsed diagnostic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// `error`, `fatal error`.
    Error,
    /// `warning`: the tool went on, but something looks wrong.
    Warning,
    /// `note`: context attached to the diagnostic before it.
    Note,
    /// `help`: a suggested fix attached to the diagnostic before it.
    Help,
}

/// One diagnostic parsed from a line of tool output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    /// File as printed.
    pub file: String,
    /// The line the diagnostic points at, 1-based.
    pub line: u32,
    /// 1-based column, 0 when the tool printed none.
    pub column: u32,
    /// How serious the tool says it is (`error`, `warning`, ...).
    pub severity: Level,
    /// `E0308` from `error[E0308]`, or `-Wunused-variable` from a trailing `[-W...]`.
    pub code: Option<String>,
    /// Message text without the code.
    pub message: String,
}

/// Parse every diagnostic line in `output`; other lines are ignored.
pub fn parse(output: &str) -> Vec<Parsed> {
    output.lines().filter_map(parse_line).collect()
}

/// Parse one line, or `None` when it is not a diagnostic.
pub fn parse_line(line: &str) -> Option<Parsed> {
    let line = line.trim_end_matches('\r');
    // Find "<file>:<line>[:<col>]: <severity>" scanning each ':' as a candidate end of the
    // file name, so Windows drive letters and colons in names do not confuse us.
    for (i, _) in line.match_indices(':') {
        let file = &line[..i];
        if file.is_empty() || file.starts_with(' ') {
            continue;
        }
        let rest = &line[i + 1..];
        let (lno, rest) = take_number(rest)?;
        let rest = match rest.strip_prefix(':') {
            Some(r) => r,
            None => continue,
        };
        let (col, rest) = match take_number(rest) {
            Some((c, r)) => match r.strip_prefix(':') {
                Some(r) => (c, r),
                None => continue,
            },
            None => (0, rest),
        };
        let rest = rest.trim_start();
        let (severity, rest) = take_severity(rest)?;
        let (mut code, rest) = match rest.strip_prefix('[') {
            Some(r) => match r.find(']') {
                Some(end) => (Some(r[..end].to_string()), &r[end + 1..]),
                None => (None, rest),
            },
            None => (None, rest),
        };
        let rest = rest.strip_prefix(':').unwrap_or(rest).trim();
        let mut message = rest.to_string();
        if code.is_none()
            && message.ends_with(']')
            && let Some(open) = message.rfind(" [")
        {
            code = Some(message[open + 2..message.len() - 1].to_string());
            message.truncate(open);
        }
        return Some(Parsed {
            file: file.to_string(),
            line: lno,
            column: col,
            severity,
            code,
            message,
        });
    }
    None
}

fn take_number(s: &str) -> Option<(u32, &str)> {
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    if end == 0 {
        return None;
    }
    Some((s[..end].parse().ok()?, &s[end..]))
}

fn take_severity(s: &str) -> Option<(Level, &str)> {
    const WORDS: [(&str, Level); 7] = [
        ("fatal error", Level::Error),
        ("error", Level::Error),
        ("warning", Level::Warning),
        ("note", Level::Note),
        ("help", Level::Help),
        ("Error", Level::Error),
        ("Warning", Level::Warning),
    ];
    for (word, level) in WORDS {
        if let Some(rest) = s.strip_prefix(word)
            && (rest.starts_with(':') || rest.starts_with('['))
        {
            return Some((level, rest));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gcc_error_with_column() {
        let d = parse_line("main.c:3:12: error: expected ';' before '}' token").unwrap();
        assert_eq!((d.file.as_str(), d.line, d.column), ("main.c", 3, 12));
        assert_eq!(d.severity, Level::Error);
        assert_eq!(d.message, "expected ';' before '}' token");
        assert_eq!(d.code, None);
    }

    #[test]
    fn gcc_warning_flag_becomes_code() {
        let d =
            parse_line("src/a.c:10:7: warning: unused variable 'x' [-Wunused-variable]").unwrap();
        assert_eq!(d.severity, Level::Warning);
        assert_eq!(d.code.as_deref(), Some("-Wunused-variable"));
        assert_eq!(d.message, "unused variable 'x'");
    }

    #[test]
    fn rustc_short_format_code() {
        let d = parse_line("src/main.rs:2:18: error[E0308]: mismatched types").unwrap();
        assert_eq!(d.code.as_deref(), Some("E0308"));
        assert_eq!(d.message, "mismatched types");
        assert_eq!((d.line, d.column), (2, 18));
    }

    #[test]
    fn no_column_and_fatal() {
        let d = parse_line("x.h:7: fatal error: foo.h: No such file or directory").unwrap();
        assert_eq!((d.line, d.column, d.severity), (7, 0, Level::Error));
        assert_eq!(d.message, "foo.h: No such file or directory");
    }

    #[test]
    fn non_diagnostics_ignored() {
        assert!(parse_line("In function 'main':").is_none());
        assert!(parse_line("   12 |     return x").is_none());
        assert!(parse_line("http://example.com:80/path").is_none());
        assert_eq!(
            parse("a.c:1:1: error: x\nnoise\nb.c:2:2: note: y\n").len(),
            2
        );
    }
}

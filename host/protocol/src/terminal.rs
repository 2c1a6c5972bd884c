//! Text shown to a person on a terminal: what plugins, the programs they run and models produce
//! is untrusted, so control characters and escape sequences are rendered visibly (`\u{1b}`)
//! instead of being sent to the terminal, where they could recolour, rewrite or hide lines or
//! talk to the terminal itself. Newlines and tabs are kept. JSON output needs none of this:
//! JSON escapes control characters itself.

use std::borrow::Cow;

/// Whether `c` must not reach a terminal as is: C0 controls other than `\n` and `\t`, DEL,
/// C1 controls, and the Unicode bidirectional overrides and isolates (which reorder what a
/// line appears to say).
fn is_unsafe(c: char) -> bool {
    match c {
        '\n' | '\t' => false,
        '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' => true,
        '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => true,
        _ => false,
    }
}

/// `text` with every unsafe character written as a visible escape (`ESC` becomes `\u{1b}`).
/// A `\r` directly before `\n` is kept (CRLF line ends); any other `\r` is escaped, since it
/// would let a line overwrite itself.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\r' && chars.peek() == Some(&'\n') {
            out.push(c);
        } else if is_unsafe(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// `n` and the noun in the right number: `1 edit`, `0 edits`, `2 errors`.
pub fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Whether stderr shows colors: it is a terminal and `NO_COLOR` is unset or empty
/// (<https://no-color.org>).
pub fn colors_on_stderr() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal() && !kiln_env::env().no_color()
}

/// A unified diff (already made printable) with added lines green, removed lines red and
/// hunk headers cyan.
pub fn color_diff(diff: &str) -> String {
    use anstyle::{AnsiColor, Style};
    let mut out = String::with_capacity(diff.len() + 64);
    for line in diff.lines() {
        let style = if line.starts_with("+++") || line.starts_with("---") {
            Style::new().bold()
        } else if line.starts_with('+') {
            AnsiColor::Green.on_default()
        } else if line.starts_with('-') {
            AnsiColor::Red.on_default()
        } else if line.starts_with("@@") {
            AnsiColor::Cyan.on_default()
        } else {
            Style::new()
        };
        if style == Style::new() {
            out.push_str(line);
        } else {
            out.push_str(&format!("{style}{line}{style:#}"));
        }
        out.push('\n');
    }
    out.pop();
    out
}

#[cfg(test)]
mod tests {
    use super::{color_diff, count, printable};

    #[test]
    fn diffs_are_colored_line_by_line() {
        let d = "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-old\n+new\n same";
        let c = color_diff(d);
        assert!(c.contains("\u{1b}[31m-old\u{1b}[0m"), "{c:?}");
        assert!(c.contains("\u{1b}[32m+new\u{1b}[0m"), "{c:?}");
        assert!(c.contains("\u{1b}[36m@@ -1 +1 @@\u{1b}[0m"), "{c:?}");
        assert!(c.starts_with("\u{1b}[1m--- a/x\u{1b}[0m\n"), "{c:?}");
        assert!(c.ends_with("\n same"), "{c:?}");
    }

    #[test]
    fn counts_agree_in_number() {
        assert_eq!(count(1, "edit", "edits"), "1 edit");
        assert_eq!(count(0, "edit", "edits"), "0 edits");
        assert_eq!(count(2, "error", "errors"), "2 errors");
    }

    #[test]
    fn escapes_are_rendered_visibly_and_text_is_kept() {
        assert_eq!(printable("plain\tline\n"), "plain\tline\n");
        assert_eq!(
            printable("\u{1b}[2J\u{1b}]0;title\u{7}red"),
            "\\u{1b}[2J\\u{1b}]0;title\\u{7}red"
        );
        assert_eq!(printable("a\r\nb\rc"), "a\r\nb\\u{d}c");
        assert_eq!(printable("x\u{9b}31m"), "x\\u{9b}31m");
        assert_eq!(printable("admin\u{202e}txt.exe"), "admin\\u{202e}txt.exe");
        assert_eq!(printable("naïve ✓"), "naïve ✓");
    }
}

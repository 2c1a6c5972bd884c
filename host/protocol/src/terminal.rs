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

/// The most characters of a path one line of human output shows (see [`path`]).
pub const PATH_SHOWN: usize = 200;

/// `path` fit for one line: every character [`printable`] escapes, and newlines and tabs too
/// (a file named `a\nerror: ...` cannot forge a line of kiln's output).
pub fn escape_path(path: &str) -> Cow<'_, str> {
    let unsafe_here = |c: char| c == '\n' || c == '\t' || is_unsafe(c);
    if !path.chars().any(unsafe_here) {
        return Cow::Borrowed(path);
    }
    let mut out = String::with_capacity(path.len() + 16);
    for c in path.chars() {
        if unsafe_here(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// A path as human output shows it: [`escape_path`], and one longer than [`PATH_SHOWN`]
/// characters cut in its middle (`…`), its beginning and its file name kept. JSON output
/// keeps paths whole.
pub fn path(path: &str) -> Cow<'_, str> {
    let escaped = escape_path(path);
    let n = escaped.chars().count();
    if n <= PATH_SHOWN {
        return escaped;
    }
    let head: String = escaped.chars().take(PATH_SHOWN / 3).collect();
    let tail_len = PATH_SHOWN - PATH_SHOWN / 3 - 1;
    let tail: String = escaped.chars().skip(n - tail_len).collect();
    Cow::Owned(format!("{head}…{tail}"))
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

/// Whether stdout shows colors: it is a terminal and `NO_COLOR` is unset or empty.
pub fn colors_on_stdout() -> bool {
    use std::io::IsTerminal;
    std::io::stdout().is_terminal() && !kiln_env::env().no_color()
}

/// Back to the start of the line and erase it (`CR`, then `ESC [2K`): a line redrawn in place
/// on a terminal, such as the spinner under a running check. The one control sequence kiln
/// writes that is not a color; colors are `anstyle`'s (see [`color_diff`]).
pub const CLEAR_LINE: &str = "\r\x1b[2K";

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
    use super::{PATH_SHOWN, color_diff, count, path, printable};

    #[test]
    fn paths_are_one_line_and_capped() {
        assert_eq!(path("src/a.rs"), "src/a.rs");
        assert_eq!(
            path("a\nerror: forged\tx\u{1b}[31m"),
            "a\\u{a}error: forged\\u{9}x\\u{1b}[31m"
        );
        let long = format!("{}/{}/name.txt", "d".repeat(300), "e".repeat(300));
        let shown = path(&long);
        assert_eq!(shown.chars().count(), PATH_SHOWN);
        assert!(
            shown.starts_with("ddd") && shown.ends_with("eee/name.txt"),
            "{shown}"
        );
        assert!(shown.contains('…'));
    }

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

//! Text helpers shared by the language back-ends: span replacements, line numbers and
//! identifier checks.

/// One replacement of the bytes `start..end` by `text`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edit {
    pub start: usize,
    pub end: usize,
    pub text: String,
}

impl Edit {
    pub fn new(start: usize, end: usize, text: impl Into<String>) -> Edit {
        Edit {
            start,
            end,
            text: text.into(),
        }
    }
}

/// Apply non-overlapping edits (in any order; duplicates of the same span are applied once).
pub fn apply(text: &str, edits: &[Edit]) -> Result<String, String> {
    let mut sorted: Vec<&Edit> = edits.iter().collect();
    sorted.sort_by_key(|e| (e.start, e.end));
    sorted.dedup_by(|a, b| a.start == b.start && a.end == b.end && a.text == b.text);
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for e in sorted {
        if e.start < at || e.end > text.len() || e.start > e.end {
            return Err(format!(
                "internal error: overlapping or invalid edit at byte {}",
                e.start
            ));
        }
        out.push_str(&text[at..e.start]);
        out.push_str(&e.text);
        at = e.end;
    }
    out.push_str(&text[at..]);
    Ok(out)
}

/// Byte offsets of the start of every line.
pub struct Lines {
    starts: Vec<usize>,
}

impl Lines {
    pub fn new(text: &str) -> Lines {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        Lines { starts }
    }

    /// 1-based line of a byte offset.
    pub fn line(&self, offset: usize) -> usize {
        match self.starts.binary_search(&offset) {
            Ok(i) => i + 1,
            Err(i) => i,
        }
    }

    /// Byte offset of a 1-based line and a column counted in characters.
    pub fn offset(&self, text: &str, line: usize, column: usize) -> usize {
        let start = self
            .starts
            .get(line.saturating_sub(1))
            .copied()
            .unwrap_or(text.len());
        text[start..]
            .char_indices()
            .nth(column)
            .map(|(i, _)| start + i)
            .unwrap_or(text.len())
    }

    /// The byte range of the whole line(s) containing `start..end`, newline included.
    pub fn full_lines(&self, text: &str, start: usize, end: usize) -> (usize, usize) {
        let first = self.starts[self.line(start) - 1];
        let last = self.line(end.saturating_sub(1).max(start));
        let stop = self.starts.get(last).copied().unwrap_or(text.len());
        (first, stop)
    }
}

/// Is `s` an identifier of the language (ASCII letters, digits, `_` and `$` for JS; any
/// Unicode letter is accepted after the first character check)?
pub fn is_identifier(s: &str, dollar: bool) -> bool {
    let mut chars = s.chars();
    let Some(first) = chars.next() else {
        return false;
    };
    let start_ok = |c: char| c == '_' || c.is_alphabetic() || (dollar && c == '$');
    start_ok(first) && chars.all(|c| start_ok(c) || c.is_alphanumeric())
}

/// Reserved words of JavaScript and TypeScript that cannot name a binding.
pub const JS_KEYWORDS: &[&str] = &[
    "break",
    "case",
    "catch",
    "class",
    "const",
    "continue",
    "debugger",
    "default",
    "delete",
    "do",
    "else",
    "enum",
    "export",
    "extends",
    "false",
    "finally",
    "for",
    "function",
    "if",
    "import",
    "in",
    "instanceof",
    "new",
    "null",
    "return",
    "super",
    "switch",
    "this",
    "throw",
    "true",
    "try",
    "typeof",
    "var",
    "void",
    "while",
    "with",
    "yield",
    "let",
    "static",
    "implements",
    "interface",
    "package",
    "private",
    "protected",
    "public",
    "await",
    "arguments",
    "eval",
];

/// Rust keywords (strict and reserved) that cannot be an identifier without `r#`.
pub const RUST_KEYWORDS: &[&str] = &[
    "as", "break", "const", "continue", "crate", "else", "enum", "extern", "false", "fn", "for",
    "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub", "ref", "return",
    "self", "Self", "static", "struct", "super", "trait", "true", "type", "unsafe", "use", "where",
    "while", "async", "await", "dyn", "abstract", "become", "box", "do", "final", "macro",
    "override", "priv", "typeof", "unsized", "virtual", "yield", "try", "gen", "_",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edits_apply_in_order() {
        let t = "abc def abc";
        let out = apply(t, &[Edit::new(8, 11, "x"), Edit::new(0, 3, "yy")]).unwrap();
        assert_eq!(out, "yy def x");
        assert!(apply(t, &[Edit::new(0, 5, "a"), Edit::new(2, 4, "b")]).is_err());
    }

    #[test]
    fn lines_and_offsets() {
        let t = "ab\nçd\n\nx";
        let l = Lines::new(t);
        assert_eq!(l.line(0), 1);
        assert_eq!(l.line(3), 2);
        assert_eq!(l.offset(t, 2, 1), 5);
        assert_eq!(l.line(t.len() - 1), 4);
        assert_eq!(l.full_lines(t, 3, 5), (3, 7));
    }

    #[test]
    fn identifiers() {
        assert!(is_identifier("foo_1", false));
        assert!(is_identifier("$x", true));
        assert!(!is_identifier("$x", false));
        assert!(!is_identifier("1x", true));
        assert!(!is_identifier("a-b", true));
        assert!(!is_identifier("", true));
    }
}

//! Edits to big files at the cost of the edit, not the file: when a file is large and each of
//! its SEARCH texts occurs exactly once in it, the edit format is given only the lines around
//! that place (and REPLACE's length of margin, so "already applied" is judged on the same
//! text), one edit at a time, and the host splices each result back. Anything else (a SEARCH
//! found only by a tolerant tier, found twice, or an edit that is not a replacement) takes the
//! whole-file path, where the format's limits apply and their errors name the setting.

use crate::plugin::{AppliedFile, ApplyFailure, EditKind, FileEdit, Plugin, PluginError};

/// Files smaller than this go to the format whole.
pub(crate) const WINDOW_MIN_BYTES: usize = 1 << 20;
/// Lines of context kept on each side of the match, beyond REPLACE's own length.
const CONTEXT_LINES: usize = 3;

/// Apply `edits` to `text` window by window; `None` when the file or an edit does not qualify
/// (then the caller sends the whole file).
pub(crate) async fn apply(
    format: &Plugin,
    path: &str,
    text: &str,
    edits: &[FileEdit],
) -> Option<Result<Result<AppliedFile, ApplyFailure>, PluginError>> {
    if text.len() < WINDOW_MIN_BYTES
        || edits
            .iter()
            .any(|e| e.kind != EditKind::Replace || e.search.trim().is_empty())
    {
        return None;
    }
    let mut cur = text.to_string();
    let mut outcomes = Vec::with_capacity(edits.len());
    for (i, edit) in edits.iter().enumerate() {
        let (start, end) = place(&cur, edit)?;
        match format
            .format_apply(path, Some(&cur[start..end]), std::slice::from_ref(edit))
            .await
        {
            Err(e) => return Some(Err(e)),
            Ok(Err(f)) => {
                return Some(Ok(Err(ApplyFailure {
                    index: i as u32,
                    ..f
                })));
            }
            Ok(Ok(applied)) => {
                let new = applied.text?;
                cur.replace_range(start..end, &new);
                outcomes.extend(applied.outcomes);
            }
        }
    }
    Some(Ok(Ok(AppliedFile {
        text: Some(cur),
        outcomes,
    })))
}

/// The byte range of whole lines around the one exact occurrence of the edit's SEARCH, with
/// REPLACE's line count plus [`CONTEXT_LINES`] of margin on each side; `None` unless SEARCH
/// occurs exactly once and REPLACE at most once.
fn place(text: &str, edit: &FileEdit) -> Option<(usize, usize)> {
    let at = once(text, &edit.search)?;
    if !edit.replace.is_empty() && text.matches(edit.replace.as_str()).nth(1).is_some() {
        return None;
    }
    let margin = edit.replace.lines().count() + CONTEXT_LINES;
    let mut start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    for _ in 0..margin {
        if start == 0 {
            break;
        }
        start = text[..start - 1].rfind('\n').map_or(0, |i| i + 1);
    }
    let mut end = at + edit.search.len();
    for _ in 0..=margin {
        match text[end..].find('\n') {
            Some(i) => end += i + 1,
            None => {
                end = text.len();
                break;
            }
        }
    }
    Some((start, end))
}

/// The position of `needle` in `hay` when it occurs exactly once.
fn once(hay: &str, needle: &str) -> Option<usize> {
    let mut it = hay.match_indices(needle);
    let (at, _) = it.next()?;
    it.next().is_none().then_some(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edit(search: &str, replace: &str) -> FileEdit {
        FileEdit {
            path: "f".into(),
            kind: EditKind::Replace,
            search: search.into(),
            replace: replace.into(),
            new_path: None,
        }
    }

    #[test]
    fn the_window_is_whole_lines_around_the_one_match() {
        let text: String = (0..100).map(|i| format!("line {i}\n")).collect();
        let (a, b) = place(&text, &edit("line 50\n", "line fifty\n")).unwrap();
        let w = &text[a..b];
        // REPLACE has 1 line: 4 lines of margin before, the match, 4 after (the last one
        // ends the window).
        assert_eq!(w.lines().next(), Some("line 46"));
        assert!(w.contains("line 50\n") && w.ends_with("line 55\n"), "{w}");
        // At the edges the window stops at the file's ends.
        let (a, _) = place(&text, &edit("line 1\n", "x\n")).unwrap();
        assert_eq!(a, 0);
        let (_, b) = place(&text, &edit("line 99\n", "x\n")).unwrap();
        assert_eq!(b, text.len());
    }

    #[test]
    fn two_matches_or_a_repeated_replace_take_the_whole_file() {
        let text = "a\nb\na\nc\n";
        assert!(place(text, &edit("a\n", "z\n")).is_none());
        assert!(place(text, &edit("b\n", "a\n")).is_none());
        assert!(place(text, &edit("c\n", "b\n")).is_some());
        assert!(place(text, &edit("missing\n", "x\n")).is_none());
    }
}

//! The `apply-patch` edit format: the `*** Begin Patch` envelope several model families are
//! trained to emit. `*** Add File: P` (content as `+` lines), `*** Delete File: P`,
//! `*** Update File: P` with `@@`-separated chunks of ` `/`-`/`+` lines (each chunk located by
//! its content, like a SEARCH/REPLACE block), optionally `*** Move to: Q`, and `*** End Patch`.
//! As Codex's own tests define it: the text after `@@` narrows where a chunk applies, a chunk of
//! only `+` lines is added after its `@@` line or at the end of the file, and `*** End of File`
//! anchors a chunk to the file's end (see [`Anchored`]). An Add or a Move over an existing file
//! is refused, never overwrites.

use kiln_guest::edit;
use kiln_guest::edit_format::{
    self, AppliedFile, ApplyFailure, EditFormat, EditKind, EditOutcome, EditStatus, FailureKind,
    FileEdit, FormatInfo, Manifest, ParseError,
};

struct ApplyPatch;

impl EditFormat for ApplyPatch {
    fn manifest() -> Manifest {
        edit_format::manifest(
            "apply-patch",
            env!("CARGO_PKG_VERSION"),
            "The *** Begin Patch envelope (add, delete, update, move)",
        )
    }

    fn describe() -> FormatInfo {
        FormatInfo {
            name: "apply-patch".into(),
            description: "*** Begin Patch / *** Update File: / @@ / *** End Patch".into(),
            multi_file: true,
        }
    }

    fn instructions(multi_file: bool) -> String {
        let mut s = String::from(
            "Write your change as a patch:\n\n\
             *** Begin Patch\n*** Update File: path/to/file.ext\n@@\n unchanged line\n-removed line\n+added line\n unchanged line\n*** End Patch\n\n\
             Rules:\n\
             - Lines start with a space (unchanged), `-` (removed) or `+` (added); copy unchanged and removed lines exactly.\n\
             - Separate changes in one file with `@@` lines; give each enough unchanged lines to match exactly one place, or put after `@@` a line of the file the change follows (`@@ def g():`).\n\
             - A chunk of only `+` lines adds them after its `@@` line, or at the end of the file; `*** End of File` after a chunk's last line anchors it to the end of the file.\n\
             - `*** Add File: PATH` followed by `+` lines creates a file; `*** Delete File: PATH` deletes one; `*** Move to: NEW` after `*** Update File:` renames it.\n",
        );
        if multi_file {
            s.push_str("- One patch may touch several files, each in its own `*** ... File:` section. Only change the files you were shown.\n");
        }
        s
    }

    fn parse(response: String, targets: Vec<String>) -> Result<Vec<FileEdit>, Vec<ParseError>> {
        parse(&response, &targets)
    }

    fn apply(
        path: String,
        text: Option<String>,
        edits: Vec<FileEdit>,
    ) -> Result<AppliedFile, ApplyFailure> {
        apply_file(&path, text, edits)
    }
}

kiln_guest::export_edit_format!(ApplyPatch);

/// The first line of an encoded anchored chunk (see [`Anchored`]).
const ANCHORED: &str = "*** Anchored chunk";

/// A chunk that is not located by its content alone: narrowed by `@@ TEXT` lines, anchored to
/// the end of the file by `*** End of File`, or adding lines without any to locate them. Its
/// `FileEdit::search` holds it encoded, readable in `kiln edit parse`:
///
/// ```text
/// *** Anchored chunk
/// @@ def g():
/// -    return 1
/// *** End of File
/// ```
///
/// (the `@@` lines, then every line the chunk keeps or removes as a `-` line, then the end
/// marker if it has one); `FileEdit::replace` holds the lines it leaves, as for any chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Anchored {
    contexts: Vec<String>,
    old: Vec<String>,
    eof: bool,
}

impl Anchored {
    fn encode(&self) -> String {
        let mut s = format!("{ANCHORED}\n");
        for c in &self.contexts {
            s.push_str(&format!("@@ {c}\n"));
        }
        for o in &self.old {
            s.push_str(&format!("-{o}\n"));
        }
        if self.eof {
            s.push_str("*** End of File\n");
        }
        s
    }

    fn decode(search: &str) -> Option<Anchored> {
        let body = search.strip_prefix(ANCHORED)?.strip_prefix('\n')?;
        let mut a = Anchored {
            contexts: Vec::new(),
            old: Vec::new(),
            eof: false,
        };
        for line in body.strip_suffix('\n').unwrap_or(body).split('\n') {
            if let Some(c) = line.strip_prefix("@@ ") {
                a.contexts.push(c.to_string());
            } else if let Some(o) = line.strip_prefix('-') {
                a.old.push(o.to_string());
            } else if line == "*** End of File" {
                a.eof = true;
            } else if !line.is_empty() {
                return None;
            }
        }
        Some(a)
    }
}

/// The text an `@@` line narrows to, if any: `@@ def g():` → `def g():`. A unified-diff range
/// (`@@ -3,4 +3,5 @@ def g():`) gives the text after it.
fn chunk_context(line: &str) -> Option<String> {
    let rest = line.trim().strip_prefix("@@")?.trim();
    let rest = match rest.strip_prefix('-') {
        Some(r)
            if r.starts_with(|c: char| c.is_ascii_digit())
                && let Some((range, after)) = r.split_once("@@") =>
        {
            let ok = range
                .chars()
                .all(|c| c.is_ascii_digit() || matches!(c, ',' | '+' | ' '));
            if ok { after.trim() } else { rest }
        }
        _ => rest,
    };
    (!rest.is_empty()).then(|| rest.to_string())
}

/// A file header or the end of the patch, padded or not.
fn is_header(line: &str) -> bool {
    let t = line.trim();
    [
        "*** Add File:",
        "*** Delete File:",
        "*** Update File:",
        "*** End Patch",
    ]
    .iter()
    .any(|h| t.starts_with(h))
}

fn is_end_of_file(line: &str) -> bool {
    line.trim() == "*** End of File"
}

/// One `@@` chunk as parsed.
struct Chunk {
    line: usize,
    contexts: Vec<String>,
    search: Vec<String>,
    replace: Vec<String>,
    eof: bool,
}

fn parse(response: &str, targets: &[String]) -> Result<Vec<FileEdit>, Vec<ParseError>> {
    let lines: Vec<&str> = response
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect();
    let err = |line: usize, message: String| ParseError {
        line: line as u32,
        message,
    };
    let Some(begin) = lines.iter().position(|l| l.trim() == "*** Begin Patch") else {
        return Err(vec![err(0, "no `*** Begin Patch` line found; the patch must start with it and end with `*** End Patch`".into())]);
    };
    let Some(end) = lines
        .iter()
        .skip(begin + 1)
        .position(|l| l.trim() == "*** End Patch")
        .map(|p| p + begin + 1)
    else {
        return Err(vec![err(
            begin + 1,
            "the patch has no `*** End Patch` line".into(),
        )]);
    };
    let mut edits = Vec::new();
    let mut errors = Vec::new();
    let join = |ls: &[String]| {
        if ls.is_empty() {
            String::new()
        } else {
            ls.join("\n") + "\n"
        }
    };
    let mut i = begin + 1;
    while i < end {
        let line = lines[i];
        // Headers padded with spaces are headers, as the Begin/End markers are.
        let header = |prefix: &str| {
            line.trim()
                .strip_prefix(prefix)
                .map(|p| p.trim().trim_start_matches("./").to_string())
        };
        let resolve = |p: &str| edit::resolve_target(Some(p), targets);
        if let Some(p) = header("*** Add File:") {
            let mut content = Vec::new();
            i += 1;
            while i < end && !is_header(lines[i]) {
                match lines[i].strip_prefix('+') {
                    Some(c) => content.push(c.to_string()),
                    None if lines[i].is_empty() => content.push(String::new()),
                    None => errors.push(err(
                        i + 1,
                        format!("lines of an added file must start with `+`: `{}`", lines[i]),
                    )),
                }
                i += 1;
            }
            match resolve(&p) {
                Ok(path) => edits.push(FileEdit {
                    path,
                    kind: EditKind::Create,
                    search: String::new(),
                    replace: join(&content),
                    new_path: None,
                }),
                Err(m) => errors.push(err(i, m)),
            }
        } else if let Some(p) = header("*** Delete File:") {
            match resolve(&p) {
                Ok(path) => edits.push(FileEdit {
                    path,
                    kind: EditKind::Delete,
                    search: String::new(),
                    replace: String::new(),
                    new_path: None,
                }),
                Err(m) => errors.push(err(i + 1, m)),
            }
            i += 1;
        } else if let Some(p) = header("*** Update File:") {
            let header_line = i + 1;
            let path = match resolve(&p) {
                Ok(path) => Some(path),
                Err(m) => {
                    errors.push(err(header_line, m));
                    None
                }
            };
            i += 1;
            let mut move_to = None;
            if let Some(dest) = lines
                .get(i)
                .and_then(|l| l.trim().strip_prefix("*** Move to:"))
            {
                move_to = Some(dest.trim().trim_start_matches("./").to_string());
                i += 1;
            }
            let mut chunks: Vec<Chunk> = Vec::new();
            // A chunk that has a line (or its end marker) takes no more `@@` lines: the next
            // `@@` starts a chunk.
            let open = |chunks: &Vec<Chunk>| {
                chunks
                    .last()
                    .is_some_and(|c| !c.eof && c.search.is_empty() && c.replace.is_empty())
            };
            while i < end && !is_header(lines[i]) {
                let l = lines[i];
                if l.trim_start().starts_with("@@") {
                    if !open(&chunks) {
                        chunks.push(Chunk {
                            line: i + 1,
                            contexts: Vec::new(),
                            search: Vec::new(),
                            replace: Vec::new(),
                            eof: false,
                        });
                    }
                    if let Some(c) = chunk_context(l) {
                        chunks.last_mut().unwrap().contexts.push(c);
                    }
                    i += 1;
                    continue;
                }
                if is_end_of_file(l) {
                    match chunks.last_mut() {
                        Some(c) if !c.eof => c.eof = true,
                        _ => errors.push(err(
                            i + 1,
                            "`*** End of File` ends a chunk: put it after the chunk's last line"
                                .into(),
                        )),
                    }
                    i += 1;
                    continue;
                }
                if chunks.is_empty() || chunks.last().is_some_and(|c| c.eof) {
                    chunks.push(Chunk {
                        line: i + 1,
                        contexts: Vec::new(),
                        search: Vec::new(),
                        replace: Vec::new(),
                        eof: false,
                    });
                }
                let c = chunks.last_mut().unwrap();
                if let Some(k) = l.strip_prefix(' ') {
                    c.search.push(k.to_string());
                    c.replace.push(k.to_string());
                } else if let Some(r) = l.strip_prefix('-') {
                    c.search.push(r.to_string());
                } else if let Some(a) = l.strip_prefix('+') {
                    c.replace.push(a.to_string());
                } else if l.is_empty() {
                    c.search.push(String::new());
                    c.replace.push(String::new());
                } else {
                    errors.push(err(
                        i + 1,
                        format!("patch lines start with ` `, `-` or `+`: `{l}`"),
                    ));
                }
                i += 1;
            }
            let Some(path) = path else { continue };
            let mut changes = 0;
            for mut c in chunks {
                // Trailing empty "context" lines were the blank lines after the chunk.
                while c.search.last().is_some_and(String::is_empty)
                    && c.replace.last().is_some_and(String::is_empty)
                {
                    c.search.pop();
                    c.replace.pop();
                }
                // Lines kept that are all blank locate nothing: the chunk only adds.
                if c.search.iter().all(|l| l.trim().is_empty()) {
                    while c.search.first().is_some_and(|l| l.trim().is_empty())
                        && c.replace.first() == c.search.first()
                    {
                        c.search.remove(0);
                        c.replace.remove(0);
                    }
                }
                if c.search.is_empty() && c.replace.is_empty() {
                    continue;
                }
                if c.search.iter().all(|l| l.trim().is_empty()) && !c.search.is_empty() {
                    errors.push(err(
                        c.line,
                        format!(
                            "a chunk for {path} removes only blank lines; add the lines around them"
                        ),
                    ));
                    continue;
                }
                changes += 1;
                let raw = join(&c.search);
                let search = if c.contexts.is_empty()
                    && !c.eof
                    && !c.search.is_empty()
                    && !raw.starts_with(ANCHORED)
                {
                    raw
                } else {
                    Anchored {
                        contexts: c.contexts,
                        old: c.search,
                        eof: c.eof,
                    }
                    .encode()
                };
                edits.push(FileEdit {
                    path: path.clone(),
                    kind: EditKind::Replace,
                    search,
                    replace: join(&c.replace),
                    new_path: None,
                });
            }
            if changes == 0 && move_to.is_none() {
                errors.push(err(
                    header_line,
                    format!("`*** Update File: {path}` changes nothing: follow it with `@@` chunks of ` `, `-` and `+` lines"),
                ));
            }
            if let Some(dest) = move_to {
                if let Err(why) = check_relative(&dest) {
                    errors.push(err(
                        header_line + 1,
                        format!("cannot move {path} to {dest}: the path {why}"),
                    ));
                } else {
                    edits.push(FileEdit {
                        path,
                        kind: EditKind::Rename,
                        search: String::new(),
                        replace: String::new(),
                        new_path: Some(dest),
                    });
                }
            }
        } else {
            if !line.trim().is_empty() {
                errors.push(err(i + 1, format!("expected `*** Add File:`, `*** Delete File:` or `*** Update File:`, found `{line}`")));
            }
            i += 1;
        }
    }
    if edits.is_empty() && errors.is_empty() {
        errors.push(err(begin + 1, "the patch changes nothing".into()));
    }
    if errors.is_empty() {
        Ok(edits)
    } else {
        Err(errors)
    }
}

/// Refusals in the words of a patch.
const ADVICE: edit_format::Advice = edit_format::Advice {
    unit: "chunk",
    search: "the chunk",
    missing: "to create it, use `*** Add File: {path}` with every line of the file as a `+` line",
    exists: Some(
        "`*** Add File:` creates a new file only (kiln never overwrites a file with it); to change {path}, use `*** Update File: {path}` with `@@` chunks",
    ),
};

/// Apply one file's edits in order: chunks located by content with the shared rules, anchored
/// chunks at their `@@` line or the end of the file. A chunk's `@@` lines are looked for from
/// where the chunk before it ended (then from the start), as Codex does.
fn apply_file(
    path: &str,
    text: Option<String>,
    edits: Vec<FileEdit>,
) -> Result<AppliedFile, ApplyFailure> {
    let mut current = text;
    let mut outcomes = Vec::with_capacity(edits.len());
    let mut cursor = 0usize;
    for (i, e) in edits.iter().enumerate() {
        let n = i + 1;
        let fail = |(kind, message): (FailureKind, String)| ApplyFailure {
            index: i as u32,
            kind,
            message,
        };
        let anchored = (e.kind == EditKind::Replace && e.path == path)
            .then(|| Anchored::decode(&e.search))
            .flatten()
            .filter(|a| !(a.contexts.is_empty() && !a.eof && !a.old.is_empty()));
        match anchored {
            Some(a) => {
                let Some(text) = &current else {
                    return Err(fail((
                        FailureKind::Invalid,
                        format!(
                            "chunk {n}: {path} does not exist; {}",
                            ADVICE.missing.replace("{path}", path)
                        ),
                    )));
                };
                let (new, outcome, end) =
                    apply_anchored(path, text, &a, &e.replace, cursor, n).map_err(fail)?;
                cursor = end;
                current = Some(new);
                outcomes.push(outcome);
            }
            None => {
                let mut e = e.clone();
                if let Some(a) = Anchored::decode(&e.search) {
                    // Encoded only because its first line looked like the encoding.
                    e.search = a.old.join("\n") + "\n";
                }
                let before = current.clone();
                let (next, outcome) =
                    edit_format::apply_one(path, current, &e, n, &ADVICE).map_err(fail)?;
                if let (Some(old), Some(new)) = (&before, &next)
                    && old != new
                {
                    cursor = end_of_change(old, new);
                }
                current = next;
                outcomes.push(outcome);
            }
        }
    }
    Ok(AppliedFile {
        text: current,
        outcomes,
    })
}

/// The line (0-based) just after the part of `new` that differs from `old`.
fn end_of_change(old: &str, new: &str) -> usize {
    let o: Vec<&str> = old.lines().collect();
    let n: Vec<&str> = new.lines().collect();
    let mut k = 0;
    while k < o.len() && k < n.len() && o[o.len() - 1 - k] == n[n.len() - 1 - k] {
        k += 1;
    }
    n.len() - k
}

/// A line's text without its line ending (and without a BOM on the first line).
fn content(line: &str) -> &str {
    let l = line.strip_suffix('\n').unwrap_or(line);
    let l = l.strip_suffix('\r').unwrap_or(l);
    l.strip_prefix('\u{feff}').unwrap_or(l)
}

/// Whether `line` is `want` at a tolerance tier: exact, trailing whitespace, surrounding
/// whitespace, then typographic look-alikes (Codex's order).
fn same(line: &str, want: &str, tier: usize) -> bool {
    match tier {
        0 => line == want,
        1 => line.trim_end() == want.trim_end(),
        2 => line.trim() == want.trim(),
        _ => edit::fold_unicode(line.trim()) == edit::fold_unicode(want.trim()),
    }
}

/// The first index at or after `from` where `pattern` occurs in `lines`, at the strictest tier
/// that finds one.
fn seek(lines: &[&str], pattern: &[String], from: usize) -> Option<usize> {
    if pattern.len() > lines.len() {
        return None;
    }
    (0..4).find_map(|tier| {
        (from..=lines.len() - pattern.len()).find(|&s| {
            pattern
                .iter()
                .enumerate()
                .all(|(k, p)| same(content(lines[s + k]), p, tier))
        })
    })
}

/// Where an end-of-file chunk's lines occur: ending at the last line, or at the last line
/// that is not blank.
fn seek_at_end(lines: &[&str], pattern: &[String], from: usize) -> Option<usize> {
    let mut ends = vec![lines.len()];
    let mut e = lines.len();
    while e > 0 && content(lines[e - 1]).trim().is_empty() {
        e -= 1;
    }
    ends.push(e);
    (0..4).find_map(|tier| {
        ends.iter().find_map(|&e| {
            let s = e.checked_sub(pattern.len())?;
            (s >= from
                && pattern
                    .iter()
                    .enumerate()
                    .all(|(k, p)| same(content(lines[s + k]), p, tier)))
            .then_some(s)
        })
    })
}

/// Apply an anchored chunk to `text`: the new text, its outcome and the line after it.
fn apply_anchored(
    path: &str,
    text: &str,
    a: &Anchored,
    replace: &str,
    cursor: usize,
    n: usize,
) -> Result<(String, EditOutcome, usize), (FailureKind, String)> {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let new_lines: Vec<String> = replace.lines().map(String::from).collect();
    // The `@@` lines, each after the one before.
    let mut from = cursor.min(lines.len());
    let mut at_context: Option<usize> = None;
    for c in &a.contexts {
        let want = [c.clone()];
        let found = seek(&lines, &want, from).or_else(|| seek(&lines, &want, 0));
        let Some(k) = found else {
            return Err((
                FailureKind::NoMatch,
                format!(
                    "chunk {n}: the line `@@ {c}` names was not found in {path}; after `@@` copy one line of the file exactly (the `def`, `class` or function line the change is in), or write `@@` alone"
                ),
            ));
        };
        at_context = Some(k);
        from = k + 1;
    }
    let where_ = match at_context {
        Some(k) => format!(" after line {} (`{}`)", k + 1, content(lines[k])),
        None => String::new(),
    };
    if a.old.is_empty() {
        // Only added lines: after the `@@` line, else at the end of the file.
        let at = match at_context {
            Some(k) if !a.eof => k + 1,
            _ => lines.len(),
        };
        let eol = if text.contains("\r\n") { "\r\n" } else { "\n" };
        let mut out = String::with_capacity(text.len() + replace.len());
        for l in &lines[..at] {
            out.push_str(l);
        }
        let missing_final_newline = at == lines.len() && !text.is_empty() && !text.ends_with('\n');
        if missing_final_newline {
            // The file keeps having no final newline: the added lines come after one.
            out.push_str(eol);
            out.push_str(&new_lines.join(eol));
        } else {
            for l in &new_lines {
                out.push_str(l);
                out.push_str(eol);
            }
        }
        for l in &lines[at..] {
            out.push_str(l);
        }
        let outcome = EditOutcome {
            status: EditStatus::Applied,
            tier: None,
        };
        return Ok((out, outcome, at + new_lines.len()));
    }
    let start = at_context.unwrap_or(from);
    let found = if a.eof {
        seek_at_end(&lines, &a.old, start)
    } else {
        seek(&lines, &a.old, start)
    };
    let Some(s) = found else {
        // Already applied: the lines it leaves are there instead.
        let done = if a.eof {
            seek_at_end(&lines, &new_lines, start)
        } else {
            seek(&lines, &new_lines, start)
        };
        if !new_lines.is_empty() && done.is_some() {
            let outcome = EditOutcome {
                status: EditStatus::AlreadyApplied,
                tier: None,
            };
            return Ok((text.to_string(), outcome, cursor));
        }
        let place = if a.eof { " at the end of the file" } else { "" };
        return Err((
            FailureKind::NoMatch,
            format!(
                "chunk {n}: its ` ` and `-` lines were not found in {path}{where_}{place}; copy the lines to change exactly from the file"
            ),
        ));
    };
    // Apply it to the lines it matched, with the shared rules (indentation, line endings,
    // the file's own whitespace on kept lines), and splice the result back.
    let window: String = lines[s..s + a.old.len()].concat();
    let old = a.old.join("\n") + "\n";
    let applied = edit::apply_search_replace(path, &window, &old, replace, n).map_err(|_| {
        (
            FailureKind::NoMatch,
            format!(
                "chunk {n}: its ` ` and `-` lines at line {} of {path} differ from the file in more than whitespace; copy them exactly from the file",
                s + 1
            ),
        )
    })?;
    let mut out: String = lines[..s].concat();
    out.push_str(&applied.text);
    out.push_str(&lines[s + a.old.len()..].concat());
    let status = if applied.already_applied {
        EditStatus::AlreadyApplied
    } else {
        EditStatus::Applied
    };
    let outcome = EditOutcome {
        status,
        tier: applied.tier.map(|t| t.name().to_string()),
    };
    Ok((out, outcome, s + new_lines.len()))
}

fn check_relative(p: &str) -> Result<(), &'static str> {
    if p.is_empty() {
        return Err("is empty");
    }
    if p.starts_with('/') {
        return Err("is absolute");
    }
    if p.split('/').any(|c| c == "..") {
        return Err("contains `..`");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn t(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn add_update_move_delete() {
        let r = "*** Begin Patch\n*** Add File: new.txt\n+hello\n*** Update File: a.py\n*** Move to: b.py\n@@ def f():\n def f():\n-    return 1\n+    return 2\n@@\n x = 1\n-y = 2\n*** Delete File: old.py\n*** End Patch\n";
        let e = parse(r, &t(&["new.txt", "a.py", "old.py"])).unwrap();
        let kinds: Vec<EditKind> = e.iter().map(|e| e.kind).collect();
        assert_eq!(
            kinds,
            [
                EditKind::Create,
                EditKind::Replace,
                EditKind::Replace,
                EditKind::Rename,
                EditKind::Delete
            ]
        );
        // `@@ def f():` narrows where the chunk applies: the chunk is anchored.
        assert_eq!(
            e[1].search,
            "*** Anchored chunk\n@@ def f():\n-def f():\n-    return 1\n"
        );
        assert_eq!(e[2].search, "x = 1\ny = 2\n");
        assert_eq!(e[2].replace, "x = 1\n");
        assert_eq!(e[3].new_path.as_deref(), Some("b.py"));
    }

    #[test]
    fn envelope_errors() {
        assert!(
            parse("*** Update File: a\n", &t(&["a"])).unwrap_err()[0]
                .message
                .contains("Begin Patch")
        );
        assert!(
            parse("*** Begin Patch\n*** Update File: a\n", &t(&["a"])).unwrap_err()[0]
                .message
                .contains("End Patch")
        );
        let e = parse(
            "*** Begin Patch\n*** Update File: zz.c\n@@\n-a\n*** End Patch",
            &t(&["a.c", "b.c"]),
        )
        .unwrap_err();
        assert!(e[0].message.contains("zz.c is not one of the files"));
        let e = parse(
            "*** Begin Patch\n*** Update File: a.c\n*** Move to: ../x\n@@\n-a\n*** End Patch",
            &t(&["a.c", "b.c"]),
        )
        .unwrap_err();
        assert!(e[0].message.contains("contains `..`"));
    }

    /// Parse `patch` for `targets` and apply it to `files` (path, text) in memory, file by
    /// file as the host does: each file's new text, or the first failure's message.
    fn run(files: &[(&str, &str)], patch: &str) -> Result<Vec<(String, Option<String>)>, String> {
        let targets: Vec<String> = Vec::new();
        let edits = parse(patch, &targets).map_err(|e| format!("{e:?}"))?;
        let mut paths: Vec<String> = Vec::new();
        for e in &edits {
            if !paths.contains(&e.path) {
                paths.push(e.path.clone());
            }
        }
        let mut out = Vec::new();
        for p in paths {
            let text = files
                .iter()
                .find(|(f, _)| *f == p)
                .map(|(_, t)| t.to_string());
            let mine: Vec<FileEdit> = edits.iter().filter(|e| e.path == p).cloned().collect();
            let applied = apply_file(&p, text, mine).map_err(|f| f.message)?;
            out.push((p, applied.text));
        }
        Ok(out)
    }

    fn one(file: &str, patch_body: &str) -> Result<String, String> {
        let patch = format!("*** Begin Patch\n*** Update File: f.txt\n{patch_body}*** End Patch\n");
        run(&[("f.txt", file)], &patch).map(|v| v[0].1.clone().unwrap_or_default())
    }

    #[test]
    fn only_added_lines_append_at_the_end_or_after_the_context_line() {
        assert_eq!(
            one("line1\nline2\n", "@@\n+added 1\n+added 2\n").unwrap(),
            "line1\nline2\nadded 1\nadded 2\n"
        );
        // A first chunk without `@@`.
        assert_eq!(one("a\n", "+b\n").unwrap(), "a\nb\n");
        // After the `@@` line's text.
        assert_eq!(
            one("fn a() {\n}\nfn b() {\n}\n", "@@ fn a() {\n+    x();\n").unwrap(),
            "fn a() {\n    x();\n}\nfn b() {\n}\n"
        );
        // With `*** End of File`, at the end even with a context line.
        assert_eq!(
            one("a\nb\n", "@@ a\n+z\n*** End of File\n").unwrap(),
            "a\nb\nz\n"
        );
        // The file's conventions: CRLF, no final newline.
        assert_eq!(one("a\r\nb\r\n", "@@\n+c\n").unwrap(), "a\r\nb\r\nc\r\n");
        assert_eq!(one("a\nb", "@@\n+c\n").unwrap(), "a\nb\nc");
        // An addition, then a removal located by content (Codex's unit test of the two).
        assert_eq!(
            one(
                "line1\nline2\nline3\n",
                "@@\n+after-context\n+second-line\n@@\n line1\n-line2\n-line3\n+line2-replacement\n"
            )
            .unwrap(),
            "line1\nline2-replacement\nafter-context\nsecond-line\n"
        );
    }

    #[test]
    fn end_of_file_anchors_a_chunk_to_the_files_end() {
        assert_eq!(
            one("end\nmid\nend\n", "@@\n-end\n+END\n*** End of File\n").unwrap(),
            "end\nmid\nEND\n"
        );
        // Interleaved chunks, the last appending at the end (Codex's unit test).
        assert_eq!(
            one(
                "a\nb\nc\nd\ne\nf\n",
                "@@\n a\n-b\n+B\n@@\n c\n d\n-e\n+E\n@@\n f\n+g\n*** End of File\n"
            )
            .unwrap(),
            "a\nB\nc\nd\nE\nf\ng\n"
        );
        // Lines that are not the file's last ones are refused.
        let e = one("x\ny\n", "@@\n-x\n+X\n*** End of File\n").unwrap_err();
        assert!(e.contains("at the end of the file"), "{e}");
        // An end marker with no lines before it is no chunk.
        assert!(
            one("x\n", "@@\n*** End of File\n")
                .unwrap_err()
                .contains("changes nothing")
        );
    }

    #[test]
    fn the_text_after_at_at_narrows_where_a_chunk_applies() {
        let file = "def f():\n    return 1\n\ndef g():\n    return 1\n";
        assert_eq!(
            one(file, "@@ def g():\n-    return 1\n+    return 2\n").unwrap(),
            "def f():\n    return 1\n\ndef g():\n    return 2\n"
        );
        // The context line may also be the chunk's first line.
        assert_eq!(
            one(
                file,
                "@@ def g():\n def g():\n-    return 1\n+    return 2\n"
            )
            .unwrap(),
            "def f():\n    return 1\n\ndef g():\n    return 2\n"
        );
        // Without it, the repeated snippet is ambiguous and refused in apply-patch's words.
        let e = one(file, "@@\n-    return 1\n+    return 2\n").unwrap_err();
        assert!(e.starts_with("chunk 1: the chunk matches 2 places"), "{e}");
        // A git-style range before the text is skipped; a context line not in the file is refused.
        assert_eq!(
            one(
                file,
                "@@ -4,2 +4,2 @@ def g():\n-    return 1\n+    return 3\n"
            )
            .unwrap(),
            "def f():\n    return 1\n\ndef g():\n    return 3\n"
        );
        let e = one(file, "@@ def h():\n-    return 1\n+    return 2\n").unwrap_err();
        assert!(e.contains("`@@ def h():`") || e.contains("def h():"), "{e}");
        // Chunks in order: the second `@@ return` after the first chunk, not the first line.
        assert_eq!(
            one("x\nv\nx\nv\n", "@@ x\n-v\n+V1\n@@ x\n-v\n+V2\n").unwrap(),
            "x\nV1\nx\nV2\n"
        );
        // Tolerance: surrounding whitespace and look-alike dashes in the context line.
        assert_eq!(
            one("# a \u{2013} b\nv = 1\n", "@@ # a - b\n-v = 1\n+v = 2\n").unwrap(),
            "# a \u{2013} b\nv = 2\n"
        );
        // Applying the same chunk again: already applied, not a failure.
        let once = one(file, "@@ def g():\n-    return 1\n+    return 2\n").unwrap();
        assert_eq!(
            one(&once, "@@ def g():\n-    return 1\n+    return 2\n").unwrap(),
            once
        );
    }

    #[test]
    fn headers_padded_with_spaces_are_headers() {
        let out = run(
            &[("foo.txt", "old\n"), ("b.txt", "x\n")],
            " *** Begin Patch\n  *** Update File: foo.txt\n@@\n-old\n+new\n   *** Update File: b.txt\n   *** Move to: c.txt\n@@\n-x\n+y\n *** End Patch \n",
        )
        .unwrap();
        assert_eq!(out[0], ("foo.txt".into(), Some("new\n".into())));
        let e = parse(
            "*** Begin Patch\n  *** Add File: n.txt\n+hi\n  *** Delete File: d.txt\n*** End Patch",
            &[],
        )
        .unwrap();
        assert_eq!((e[0].kind, e[1].kind), (EditKind::Create, EditKind::Delete));
        assert_eq!(e[0].replace, "hi\n");
    }

    #[test]
    fn codex_parser_cases() {
        // An Update with no chunk is refused, as is a line that is not ` `, `-` or `+`.
        let e = parse("*** Begin Patch\n*** Update File: t.py\n*** End Patch", &[]).unwrap_err();
        assert!(e[0].message.contains("changes nothing"), "{e:?}");
        let e = parse(
            "*** Begin Patch\n*** Update File: t.py\n@@\nbad\n*** End Patch",
            &[],
        )
        .unwrap_err();
        assert_eq!(e[0].line, 4);
        // An invalid file header.
        let e = parse(
            "*** Begin Patch\n*** Frobnicate File: x\n*** End Patch",
            &[],
        )
        .unwrap_err();
        assert!(e[0].message.contains("expected `*** Add File:`"), "{e:?}");
        // Blank lines inside a chunk are blank context; a chunk may follow a blank line.
        let e = parse(
            "*** Begin Patch\n*** Update File: t.py\n@@ ctx\n\n context\n-remove\n+add\n context2\n*** End Patch",
            &[],
        )
        .unwrap();
        assert_eq!(
            Anchored::decode(&e[0].search).unwrap(),
            Anchored {
                contexts: vec!["ctx".into()],
                old: vec![
                    "".into(),
                    "context".into(),
                    "remove".into(),
                    "context2".into()
                ],
                eof: false
            }
        );
        assert_eq!(e[0].replace, "\ncontext\nadd\ncontext2\n");
        // Add then Update of the same path, Update twice: in order.
        let out = run(
            &[("u.txt", "before\n")],
            "*** Begin Patch\n*** Add File: s.txt\n+one\n*** Update File: s.txt\n@@\n-one\n+two\n*** Update File: u.txt\n@@\n-before\n+middle\n*** Update File: u.txt\n@@\n-middle\n+after\n*** End Patch",
        )
        .unwrap();
        assert_eq!(out[0].1.as_deref(), Some("two\n"));
        assert_eq!(out[1].1.as_deref(), Some("after\n"));
    }

    #[test]
    fn refusals_give_apply_patch_advice() {
        let e = run(
            &[],
            "*** Begin Patch\n*** Update File: m.txt\n@@\n-a\n+b\n*** End Patch",
        )
        .unwrap_err();
        assert!(
            e.contains("*** Add File: m.txt") && !e.contains("SEARCH"),
            "{e}"
        );
        let e = run(
            &[],
            "*** Begin Patch\n*** Update File: m.txt\n@@ x\n+b\n*** End Patch",
        )
        .unwrap_err();
        assert!(e.contains("*** Add File: m.txt"), "{e}");
        let e = run(
            &[("d.txt", "old\n")],
            "*** Begin Patch\n*** Add File: d.txt\n+new\n*** End Patch",
        )
        .unwrap_err();
        assert!(
            e.contains("already exists")
                && e.contains("*** Update File: d.txt")
                && !e.contains("SEARCH"),
            "{e}"
        );
        let e = run(
            &[("d.txt", "old\n")],
            "*** Begin Patch\n*** Update File: d.txt\n@@\n-nope\n+new\n*** End Patch",
        )
        .unwrap_err();
        assert!(
            e.starts_with("chunk 1: the chunk does not match d.txt"),
            "{e}"
        );
        let e = run(
            &[],
            "*** Begin Patch\n*** Delete File: gone.txt\n*** End Patch",
        )
        .unwrap_err();
        assert!(
            e.contains("cannot delete gone.txt: it does not exist"),
            "{e}"
        );
    }

    fn fragment() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("*** Begin Patch\n".to_string()),
            Just("*** End Patch\n".to_string()),
            Just("*** Update File: a.c\n".to_string()),
            Just("*** Add File: b.c\n".to_string()),
            Just("*** Delete File: a.c\n".to_string()),
            Just("*** Move to: c.c\n".to_string()),
            Just("@@\n".to_string()),
            Just(" ctx\n".to_string()),
            Just("-old\n".to_string()),
            Just("+new\n".to_string()),
            Just("  *** Update File: a.c\n".to_string()),
            Just("@@ ctx\n".to_string()),
            Just("*** End of File\n".to_string()),
            Just("*** Anchored chunk\n".to_string()),
            ".{0,10}\n",
        ]
    }

    proptest! {
        #[test]
        fn the_parser_never_panics(parts in prop::collection::vec(fragment(), 0..30), file in prop::collection::vec(prop_oneof![Just("ctx\n"), Just("old\n"), Just("x\n"), Just("\n")], 0..8)) {
            if let Ok(edits) = parse(&parts.concat(), &t(&["a.c", "b.c"])) {
                let mine: Vec<FileEdit> = edits.into_iter().filter(|e| e.path == "a.c").collect();
                let _ = apply_file("a.c", Some(file.concat()), mine);
            }
        }
    }
}

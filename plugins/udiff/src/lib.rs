//! The `udiff` edit format: unified diffs. Files are named by `--- a/PATH` / `+++ b/PATH`
//! headers (`/dev/null` for creation and deletion); each hunk becomes a SEARCH (context and
//! removed lines) / REPLACE (context and added lines) pair located by its content, never by the
//! line numbers of its `@@` header, which LLMs rarely get right.

use kiln_guest::edit;
use kiln_guest::edit_format::{
    self, AppliedFile, ApplyFailure, EditFormat, EditKind, FileEdit, FormatInfo, Manifest,
    ParseError,
};

struct Udiff;

impl EditFormat for Udiff {
    fn manifest() -> Manifest {
        edit_format::manifest(
            "udiff",
            env!("CARGO_PKG_VERSION"),
            "Unified diffs, hunks located by content",
        )
    }

    fn describe() -> FormatInfo {
        FormatInfo {
            name: "udiff".into(),
            description: "Unified diff (--- a/ +++ b/ @@ hunks), located by content".into(),
            multi_file: true,
        }
    }

    fn instructions(multi_file: bool) -> String {
        let mut s = String::from(
            "Write each change as a unified diff:\n\n\
             --- a/path/to/file.ext\n+++ b/path/to/file.ext\n@@ ... @@\n context line\n-removed line\n+added line\n context line\n\n\
             Rules:\n\
             - Start lines with a space (unchanged), `-` (removed) or `+` (added). Copy unchanged and removed lines exactly.\n\
             - Include 2-3 unchanged lines around each change so every hunk matches exactly one place; line numbers in @@ may be omitted.\n\
             - To create a file use `--- /dev/null`; to delete one use `+++ /dev/null`.\n",
        );
        if multi_file {
            s.push_str("- You may change several files: give each file its own ---/+++ header. Only change the files you were shown.\n");
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
        edit_format::apply_edits_as(&path, text, edits, &ADVICE)
    }
}

/// Refusals in the words of a unified diff.
const ADVICE: edit_format::Advice = edit_format::Advice {
    unit: "hunk",
    search: "the hunk",
    missing: "to create it, write its diff from `--- /dev/null` to `+++ b/{path}` with only `+` lines",
    exists: Some(
        "a diff from `--- /dev/null` creates a new file; to change {path}, write `--- a/{path}` and `+++ b/{path}` with hunks of its lines",
    ),
};

kiln_guest::export_edit_format!(Udiff);

fn header_path(rest: &str) -> String {
    let p = rest.split('\t').next().unwrap_or(rest).trim();
    let p = p.trim_matches('"');
    if p == "/dev/null" {
        return p.to_string();
    }
    p.strip_prefix("a/")
        .or_else(|| p.strip_prefix("b/"))
        .unwrap_or(p)
        .trim_start_matches("./")
        .to_string()
}

struct Hunk {
    line: usize,
    search: Vec<String>,
    replace: Vec<String>,
}

fn parse(response: &str, targets: &[String]) -> Result<Vec<FileEdit>, Vec<ParseError>> {
    let lines: Vec<&str> = response
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect();
    let mut edits = Vec::new();
    let mut errors = Vec::new();
    let err = |line: usize, message: String| ParseError {
        line: line as u32,
        message,
    };
    let mut i = 0;
    while i < lines.len() {
        let Some(old) = lines[i].strip_prefix("--- ") else {
            i += 1;
            continue;
        };
        let header_line = i + 1;
        let Some(new) = lines.get(i + 1).and_then(|l| l.strip_prefix("+++ ")) else {
            errors.push(err(
                header_line,
                "`---` header without a `+++` line after it".into(),
            ));
            i += 1;
            continue;
        };
        let (old, new) = (header_path(old), header_path(new));
        i += 2;
        // Hunks until the next file header.
        let mut hunks: Vec<Hunk> = Vec::new();
        let mut in_hunk = false;
        while i < lines.len()
            && !(lines[i].starts_with("--- ")
                && lines.get(i + 1).is_some_and(|l| l.starts_with("+++ ")))
        {
            let l = lines[i];
            if l.starts_with("@@") {
                hunks.push(Hunk {
                    line: i + 1,
                    search: Vec::new(),
                    replace: Vec::new(),
                });
                in_hunk = true;
            } else if let Some(h) = hunks.last_mut().filter(|_| in_hunk) {
                if let Some(c) = l.strip_prefix(' ') {
                    h.search.push(c.to_string());
                    h.replace.push(c.to_string());
                } else if let Some(r) = l.strip_prefix('-') {
                    h.search.push(r.to_string());
                } else if let Some(a) = l.strip_prefix('+') {
                    h.replace.push(a.to_string());
                } else if l.is_empty() {
                    // LLMs drop the space of an empty context line.
                    h.search.push(String::new());
                    h.replace.push(String::new());
                } else if l.starts_with('\\') {
                    // "\ No newline at end of file"
                } else {
                    // Prose or a closing fence ends the hunk.
                    in_hunk = false;
                }
            } else if old == "/dev/null" && hunks.is_empty() && l.starts_with('+') {
                // A creation diff without an @@ line.
                hunks.push(Hunk {
                    line: i + 1,
                    search: Vec::new(),
                    replace: vec![l[1..].to_string()],
                });
                in_hunk = true;
            }
            i += 1;
        }
        // Trailing empty "context" lines were the blank lines after the hunk.
        for h in &mut hunks {
            while h.search.last().is_some_and(String::is_empty)
                && h.replace.last().is_some_and(String::is_empty)
            {
                h.search.pop();
                h.replace.pop();
            }
        }
        hunks.retain(|h| !(h.search.is_empty() && h.replace.is_empty()));
        let named = if new == "/dev/null" { &old } else { &new };
        let path = match edit::resolve_target(Some(named), targets) {
            Ok(p) => p,
            Err(m) => {
                errors.push(err(header_line, m));
                continue;
            }
        };
        let join = |ls: &[String]| {
            if ls.is_empty() {
                String::new()
            } else {
                ls.join("\n") + "\n"
            }
        };
        if new == "/dev/null" {
            edits.push(FileEdit {
                path,
                kind: EditKind::Delete,
                search: String::new(),
                replace: String::new(),
                new_path: None,
            });
        } else if old == "/dev/null" {
            // A new file has nothing to remove or keep: a `-` or ` ` line here means the diff
            // is not what it claims, and creating the file without those lines would be a guess.
            if let Some(h) = hunks
                .iter()
                .find(|h| h.search.iter().any(|l| !l.is_empty()))
            {
                errors.push(err(
                    h.line,
                    format!(
                        "the diff for {path} starts from `--- /dev/null` (a new file) but its hunk removes or keeps lines; a new file's hunk has only `+` lines. To change the existing {path}, use `--- a/{path}`"
                    ),
                ));
                continue;
            }
            let content: Vec<String> = hunks.iter().flat_map(|h| h.replace.clone()).collect();
            edits.push(FileEdit {
                path,
                kind: EditKind::Create,
                search: String::new(),
                replace: join(&content),
                new_path: None,
            });
        } else {
            if hunks.is_empty() {
                errors.push(err(
                    header_line,
                    format!("the diff for {path} has no hunks"),
                ));
            }
            for h in hunks {
                if h.search.iter().all(|l| l.trim().is_empty()) {
                    errors.push(err(h.line, format!("a hunk for {path} has no unchanged or removed lines to locate it; add context lines")));
                    continue;
                }
                edits.push(FileEdit {
                    path: path.clone(),
                    kind: EditKind::Replace,
                    search: join(&h.search),
                    replace: join(&h.replace),
                    new_path: None,
                });
            }
        }
    }
    if edits.is_empty() && errors.is_empty() {
        errors.push(err(
            0,
            "no unified diff found: start each file with `--- a/PATH` and `+++ b/PATH` lines"
                .into(),
        ));
    }
    if errors.is_empty() {
        Ok(edits)
    } else {
        Err(errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn t(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn hunks_become_search_replace_pairs() {
        let r = "```diff\n--- a/src/m.c\n+++ b/src/m.c\n@@ -10,3 +10,3 @@\n int main() {\n-  return 1;\n+  return 0;\n }\n```\n";
        let e = parse(r, &t(&["src/m.c"])).unwrap();
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].search, "int main() {\n  return 1;\n}\n");
        assert_eq!(e[0].replace, "int main() {\n  return 0;\n}\n");
    }

    #[test]
    fn create_delete_and_blank_context() {
        let r = "--- /dev/null\n+++ b/new.py\n@@ -0,0 +1,2 @@\n+a = 1\n+b = 2\n--- a/old.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n";
        let e = parse(r, &t(&["new.py", "old.py"])).unwrap();
        assert_eq!(
            (e[0].kind, e[0].replace.as_str()),
            (EditKind::Create, "a = 1\nb = 2\n")
        );
        assert_eq!(
            (e[1].kind, e[1].path.as_str()),
            (EditKind::Delete, "old.py")
        );
        let r = "--- a/f\n+++ b/f\n@@\n a\n\n-b\n+c\n";
        let e = parse(r, &t(&["f"])).unwrap();
        assert_eq!(e[0].search, "a\n\nb\n");
    }

    #[test]
    fn unknown_file_and_contextless_hunk_are_errors() {
        let errs = parse("--- a/x.c\n+++ b/x.c\n@@\n-a\n+b\n", &t(&["a.c", "b.c"])).unwrap_err();
        assert!(
            errs[0].message.contains("x.c is not one of the files"),
            "{:?}",
            errs[0].message
        );
        let errs = parse("--- a/a.c\n+++ b/a.c\n@@\n+b\n", &t(&["a.c"])).unwrap_err();
        assert!(errs[0].message.contains("no unchanged or removed lines"));
        assert!(parse("just prose", &t(&["a.c"])).is_err());
    }

    #[test]
    fn a_dev_null_hunk_that_removes_or_keeps_lines_is_refused() {
        for body in ["-Original\n+Modified\n", " kept\n+added\n"] {
            let r = format!("```diff\n--- /dev/null\n+++ file.txt\n@@ ... @@\n{body}```\n");
            let errs = parse(&r, &[]).unwrap_err();
            assert_eq!(errs[0].line, 4, "{body}");
            assert!(errs[0].message.contains("only `+` lines"), "{errs:?}");
        }
        // Blank lines in a new file's hunk are its blank lines, not removals.
        let e = parse(
            "--- /dev/null\n+++ b/n.py\n@@ -0,0 +1,3 @@\n+a\n\n+b\n",
            &[],
        )
        .unwrap();
        assert_eq!(
            (e[0].kind, e[0].replace.as_str()),
            (EditKind::Create, "a\n\nb\n")
        );
    }

    #[test]
    fn aider_headers_hunks_and_several_files() {
        // No a/ b/ prefixes, `@@ ... @@`, a directory with spaces.
        for name in ["file.txt", "dir name with spaces/file.txt"] {
            let r = format!(
                "Some text...\n\n```diff\n--- {name}\n+++ {name}\n@@ ... @@\n-Original\n+Modified\n```\n"
            );
            let e = parse(&r, &[]).unwrap();
            assert_eq!(
                (
                    e[0].path.as_str(),
                    e[0].search.as_str(),
                    e[0].replace.as_str()
                ),
                (name, "Original\n", "Modified\n")
            );
        }
        // Two files in one fence, a blank line between them.
        let r = "```diff\n--- a/v.py\n+++ a/v.py\n@@ ... @@\n     except Exception as err:\n         print(err)\n+        return False\n\n--- m.py\n+++ m.py\n@@ ... @@\n     x = 1\n+    y = 2\n     z = 3\n```\n";
        let e = parse(r, &[]).unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].path, "v.py");
        assert_eq!(e[0].replace.lines().count(), 3);
        assert_eq!(e[1].path, "m.py");
    }

    #[test]
    fn refusals_give_udiff_advice() {
        let edits = parse("--- a/m.txt\n+++ b/m.txt\n@@\n-a\n+b\n", &[]).unwrap();
        let f = edit_format::apply_edits_as("m.txt", None, edits, &ADVICE).unwrap_err();
        assert!(
            f.message.contains("--- /dev/null") && !f.message.contains("SEARCH"),
            "{}",
            f.message
        );
        let edits = parse("--- /dev/null\n+++ b/m.txt\n@@\n+b\n", &[]).unwrap();
        let f =
            edit_format::apply_edits_as("m.txt", Some("a\n".into()), edits, &ADVICE).unwrap_err();
        assert!(
            f.message.contains("already exists") && f.message.contains("--- a/m.txt"),
            "{}",
            f.message
        );
        let edits = parse("--- a/m.txt\n+++ b/m.txt\n@@\n-x\n+y\n", &[]).unwrap();
        let f = edit_format::apply_edits_as("m.txt", Some("x\nz\nx\n".into()), edits, &ADVICE)
            .unwrap_err();
        assert!(
            f.message.starts_with("hunk 1: the hunk matches 2 places"),
            "{}",
            f.message
        );
    }

    fn fragment() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("--- a/a.c\n".to_string()),
            Just("+++ b/a.c\n".to_string()),
            Just("--- /dev/null\n".to_string()),
            Just("+++ /dev/null\n".to_string()),
            Just("@@ -1,2 +1,2 @@\n".to_string()),
            Just(" ctx\n".to_string()),
            Just("-old\n".to_string()),
            Just("+new\n".to_string()),
            Just("\n".to_string()),
            ".{0,10}\n",
        ]
    }

    proptest! {
        #[test]
        fn the_parser_never_panics(parts in prop::collection::vec(fragment(), 0..30)) {
            let _ = parse(&parts.concat(), &t(&["a.c", "b.c"]));
        }
    }
}

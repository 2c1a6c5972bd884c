//! The `whole-file` edit format: the LLM sends the complete new content of each file it
//! changes, as a fenced code block preceded by the file's path. Lazy output that elides code
//! (`// ... existing code ...`, `# rest unchanged`) is refused, since writing it would delete
//! the elided code.

use kiln_guest::edit_format::{
    self, AppliedFile, ApplyFailure, EditFormat, EditKind, EditOutcome, EditStatus, FailureKind,
    FileEdit, FormatInfo, Manifest, ParseError,
};

struct WholeFile;

impl EditFormat for WholeFile {
    fn manifest() -> Manifest {
        edit_format::manifest(
            "whole-file",
            env!("CARGO_PKG_VERSION"),
            "Whole-file replacement with a path header per file",
        )
    }

    fn describe() -> FormatInfo {
        FormatInfo {
            name: "whole-file".into(),
            description:
                "Whole-file replacement: the path, then the complete new content in a fenced block"
                    .into(),
            multi_file: true,
        }
    }

    fn instructions(multi_file: bool) -> String {
        let mut s = String::from(
            "To change a file, reply with its path on a line of its own, then the COMPLETE new content \
             of the file in a fenced code block:\n\npath/to/file.ext\n```\n<every line of the new file>\n```\n\n\
             Always write the entire file. Never elide code with comments such as \
             \"... existing code ...\" or \"rest unchanged\": such a reply is refused.\n",
        );
        if multi_file {
            s.push_str("You may change several files: give one path line and one fenced block per file. Only change the files you were shown.\n");
        }
        s
    }

    fn parse(response: String, targets: Vec<String>) -> Result<Vec<FileEdit>, Vec<ParseError>> {
        parse_response(&response, &targets)
    }

    fn apply(
        path: String,
        text: Option<String>,
        edits: Vec<FileEdit>,
    ) -> Result<AppliedFile, ApplyFailure> {
        apply_edits(&path, text, edits)
    }
}

kiln_guest::export_edit_format!(WholeFile);

/// Phrases that mark elided code in a "whole" file.
const LAZY_MARKERS: [&str; 8] = [
    "... existing code",
    "...existing code",
    "rest unchanged",
    "rest of the file",
    "rest of file unchanged",
    "remaining code unchanged",
    "unchanged code",
    "... rest of",
];

fn parse_response(response: &str, targets: &[String]) -> Result<Vec<FileEdit>, Vec<ParseError>> {
    let lines: Vec<&str> = response
        .split('\n')
        .map(|l| l.trim_end_matches('\r'))
        .collect();
    let mut edits = Vec::new();
    let mut errors = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let trimmed = line.trim_start();
        if !trimmed.starts_with("```") {
            i += 1;
            continue;
        }
        let fence: String = trimmed.chars().take_while(|c| *c == '`').collect();
        let open_line = i;
        let named = (0..i)
            .rev()
            .map(|j| lines[j].trim())
            .find(|l| !l.is_empty())
            .and_then(clean_path);
        let mut body = Vec::new();
        i += 1;
        let mut closed = false;
        while i < lines.len() {
            if lines[i].trim() == fence {
                closed = true;
                break;
            }
            body.push(lines[i]);
            i += 1;
        }
        i += 1;
        if !closed {
            errors.push(ParseError {
                line: open_line as u32 + 1,
                message: "code block is not closed with ```".into(),
            });
            break;
        }
        let path = match resolve_path(named.as_deref(), targets) {
            Ok(p) => p,
            Err(message) => {
                errors.push(ParseError {
                    line: open_line as u32 + 1,
                    message,
                });
                continue;
            }
        };
        if edits.iter().any(|e: &FileEdit| e.path == path) {
            errors.push(ParseError {
                line: open_line as u32 + 1,
                message: format!("{path} is given twice; send each file once"),
            });
            continue;
        }
        let mut content = body.join("\n");
        content.push('\n');
        edits.push(FileEdit {
            path,
            kind: EditKind::Rewrite,
            search: String::new(),
            replace: content,
            new_path: None,
        });
    }
    if edits.is_empty() && errors.is_empty() {
        errors.push(ParseError {
            line: 0,
            message: "no fenced code block found: send the path, then the whole file in ``` fences"
                .into(),
        });
    }
    if errors.is_empty() {
        Ok(edits)
    } else {
        Err(errors)
    }
}

/// Strip the decorations LLMs put around a path line (`**a.c**`, `` `a.c` ``, `# a.c`, `a.c:`).
fn clean_path(line: &str) -> Option<String> {
    let p = line
        .trim_start_matches('#')
        .trim()
        .trim_matches(|c| c == '*' || c == '`')
        .trim_end_matches(':')
        .trim();
    let p = p
        .strip_prefix("File:")
        .or_else(|| p.strip_prefix("file:"))
        .unwrap_or(p)
        .trim();
    if p.is_empty() || p.contains(char::is_whitespace) || p.ends_with('.') {
        return None;
    }
    Some(p.to_string())
}

fn resolve_path(named: Option<&str>, targets: &[String]) -> Result<String, String> {
    match named {
        Some(n) if targets.iter().any(|t| t == n) => Ok(n.to_string()),
        Some(n) => {
            let by_name: Vec<&String> = targets
                .iter()
                .filter(|t| t.rsplit('/').next() == Some(n))
                .collect();
            match (by_name.as_slice(), targets) {
                ([one], _) => Ok((*one).clone()),
                (_, [only]) if !looks_like_path(n) => Ok(only.clone()),
                (_, []) => Ok(n.to_string()),
                _ => Err(format!(
                    "{n} is not one of the files you may change ({})",
                    targets.join(", ")
                )),
            }
        }
        None => match targets {
            [only] => Ok(only.clone()),
            _ => Err("put the file's path on the line before its code block".into()),
        },
    }
}

fn looks_like_path(s: &str) -> bool {
    s.contains('/') || s.contains('.')
}

fn apply_edits(
    path: &str,
    text: Option<String>,
    edits: Vec<FileEdit>,
) -> Result<AppliedFile, ApplyFailure> {
    let mut current = text;
    let mut outcomes = Vec::with_capacity(edits.len());
    for (index, edit) in edits.into_iter().enumerate() {
        let fail = |kind, message: String| ApplyFailure {
            index: index as u32,
            kind,
            message,
        };
        if edit.path != path {
            return Err(fail(
                FailureKind::Invalid,
                format!("edit names {} but was applied to {path}", edit.path),
            ));
        }
        match edit.kind {
            EditKind::Rewrite | EditKind::Create => {
                if let Some(marker) = lazy_marker(&edit.replace) {
                    return Err(fail(
                        FailureKind::Invalid,
                        format!(
                            "the new content of {path} elides code (\"{marker}\"); send the complete file"
                        ),
                    ));
                }
                let new = match &current {
                    Some(old) => conform(old, &edit.replace),
                    None => edit.replace.clone(),
                };
                let status = if current.as_deref() == Some(new.as_str()) {
                    EditStatus::AlreadyApplied
                } else {
                    EditStatus::Applied
                };
                outcomes.push(EditOutcome { status, tier: None });
                current = Some(new);
            }
            EditKind::Delete => {
                if current.is_none() {
                    return Err(fail(
                        FailureKind::Invalid,
                        format!("cannot delete {path}: it does not exist"),
                    ));
                }
                outcomes.push(EditOutcome {
                    status: EditStatus::Applied,
                    tier: None,
                });
                current = None;
            }
            EditKind::Replace | EditKind::Rename => {
                return Err(fail(
                    FailureKind::Invalid,
                    "the whole-file format only rewrites, creates or deletes files".into(),
                ));
            }
        }
    }
    Ok(AppliedFile {
        text: current,
        outcomes,
    })
}

fn lazy_marker(content: &str) -> Option<&'static str> {
    content.lines().find_map(|line| {
        let l = line.trim().to_lowercase();
        let is_comment = ["//", "#", "/*", "--", "<!--", ";", "*"]
            .iter()
            .any(|c| l.starts_with(c));
        if !is_comment && !l.starts_with("...") {
            return None;
        }
        LAZY_MARKERS.iter().copied().find(|m| l.contains(m))
    })
}

/// Give `new` the line endings, BOM and final-newline convention of `old`.
fn conform(old: &str, new: &str) -> String {
    let bom = old.starts_with('\u{feff}');
    let crlf = old.contains("\r\n");
    let body = new.trim_start_matches('\u{feff}').replace("\r\n", "\n");
    let body = if old.is_empty() || old.ends_with('\n') {
        if body.ends_with('\n') {
            body
        } else {
            body + "\n"
        }
    } else {
        body.trim_end_matches('\n').to_string()
    };
    let body = if crlf {
        body.replace('\n', "\r\n")
    } else {
        body
    };
    if bom { format!("\u{feff}{body}") } else { body }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn single_target_without_header() {
        let e = parse_response("Here:\n```c\nint main(){}\n```\n", &t(&["src/m.c"])).unwrap();
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].path, "src/m.c");
        assert_eq!(e[0].replace, "int main(){}\n");
    }

    #[test]
    fn multi_file_headers_and_unknown_path() {
        let r = "a.c\n```\nA\n```\n\n**b.c**\n```\nB\n```\n";
        let e = parse_response(r, &t(&["a.c", "b.c"])).unwrap();
        assert_eq!((e[0].path.as_str(), e[1].path.as_str()), ("a.c", "b.c"));
        let err = parse_response("x/c.c\n```\nC\n```\n", &t(&["a.c", "b.c"])).unwrap_err();
        assert!(
            err[0].message.contains("not one of the files"),
            "{}",
            err[0].message
        );
    }

    #[test]
    fn lazy_output_refused() {
        let edits =
            parse_response("```\nint a;\n// ... existing code ...\n```\n", &t(&["a.c"])).unwrap();
        let err = apply_edits("a.c", Some("int a;\nint b;\n".into()), edits).unwrap_err();
        assert!(err.message.contains("elides code"));
    }

    #[test]
    fn keeps_crlf_bom_and_detects_already_applied() {
        let edits = parse_response("```\nx\ny\n```", &t(&["a.txt"])).unwrap();
        let out = apply_edits("a.txt", Some("\u{feff}old\r\n".into()), edits.clone()).unwrap();
        assert_eq!(out.text.as_deref(), Some("\u{feff}x\r\ny\r\n"));
        let again = apply_edits("a.txt", out.text, edits).unwrap();
        assert!(matches!(
            again.outcomes[0].status,
            EditStatus::AlreadyApplied
        ));
    }
}

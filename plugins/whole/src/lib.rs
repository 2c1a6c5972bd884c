//! The `whole` edit format (alias `whole-file`): the LLM sends the complete new content of each file it
//! changes, as a fenced code block preceded by the file's path. Lazy output that elides code
//! (`// ... existing code ...`, `# rest unchanged`) is refused, since writing it would delete
//! the elided code.

use kiln_guest::edit;
use kiln_guest::edit_format::{
    self, AppliedFile, ApplyFailure, EditFormat, EditKind, FailureKind, FileEdit, FormatInfo,
    Manifest, ParseError,
};

struct Whole;

impl EditFormat for Whole {
    fn manifest() -> Manifest {
        edit_format::manifest(
            "whole",
            env!("CARGO_PKG_VERSION"),
            "Whole-file replacement with a path header per file",
        )
    }

    fn describe() -> FormatInfo {
        FormatInfo {
            name: "whole".into(),
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

kiln_guest::export_edit_format!(Whole);

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
        let Some(fence) = edit::Fence::open(lines[i]) else {
            i += 1;
            continue;
        };
        let open_line = i;
        // The path is the line above the fence (never the fence's own tag or language).
        let named = (0..i)
            .rev()
            .map(|j| lines[j].trim())
            .find(|l| !l.is_empty())
            .filter(|l| !edit::Fence::is_fence_line(l))
            .and_then(edit::clean_path);
        let mut body = Vec::new();
        i += 1;
        let mut closed = false;
        while i < lines.len() {
            if fence.closed_by(lines[i]) {
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
                message: match &fence {
                    edit::Fence::Backticks(t) => format!("code block is not closed with {t}"),
                    edit::Fence::Tag(tag) => format!("code block is not closed with </{tag}>"),
                },
            });
            break;
        }
        let path = match edit::resolve_target(named.as_deref(), targets) {
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

fn apply_edits(
    path: &str,
    text: Option<String>,
    edits: Vec<FileEdit>,
) -> Result<AppliedFile, ApplyFailure> {
    for (index, edit) in edits.iter().enumerate() {
        if let Some(marker) = lazy_marker(&edit.replace) {
            return Err(ApplyFailure {
                index: index as u32,
                kind: FailureKind::Invalid,
                message: format!(
                    "the new content of {path} elides code (\"{marker}\"); send the complete file"
                ),
            });
        }
    }
    edit_format::apply_edits(path, text, edits)
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
    fn every_fence_kind_with_the_path_on_the_line_above() {
        for (open, close) in [
            ("```python", "```"),
            ("````python", "````"),
            ("<source python>", "</source>"),
            ("<code>", "</code>"),
            ("<pre>", "</pre>"),
            ("<codeblock>", "</codeblock>"),
            ("<sourcecode python>", "</sourcecode>"),
        ] {
            let r =
                format!("src/a.py\n{open}\nx = 1\n```\n{close}\nb.py\n{open}\ny = 2\n{close}\n");
            let r = if open.starts_with('`') {
                // A backtick fence closes at the first matching line: no nested ``` inside.
                format!("src/a.py\n{open}\nx = 1\n{close}\nb.py\n{open}\ny = 2\n{close}\n")
            } else {
                r
            };
            let e = parse_response(&r, &t(&["src/a.py", "b.py"]))
                .unwrap_or_else(|e| panic!("{open}: {e:?}"));
            assert_eq!(e[0].path, "src/a.py", "{open}");
            assert_eq!(e[1].path, "b.py", "{open}");
            assert_eq!(e[1].replace, "y = 2\n", "{open}");
        }
        // A tag fence keeps ``` lines of the file inside it.
        let e = parse_response(
            "README.md\n<source>\n```sh\nls\n```\n</source>\n",
            &t(&["README.md"]),
        )
        .unwrap();
        assert_eq!(e[0].replace, "```sh\nls\n```\n");
        let err = parse_response("a.py\n<source>\nx\n", &t(&["a.py"])).unwrap_err();
        assert!(err[0].message.contains("</source>"), "{}", err[0].message);
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
            edit_format::EditStatus::AlreadyApplied
        ));
    }
}

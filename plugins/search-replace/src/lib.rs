//! The `search-replace` edit format: `<<<<<<< SEARCH` / `=======` / `>>>>>>> REPLACE` blocks.
//!
//! Single-file mode (one target): every block applies to the target; path headers are accepted
//! and ignored. Multi-file mode: each group of blocks follows a `<<< path=REL >>>` header (or,
//! as LLMs often write, the file's path on the line before a block); a block before any header,
//! a path not among the targets and the same header twice are parse errors. A filename line
//! naming a file outside the targets is refused too, in either mode; without targets, a block
//! with no filename line belongs to the file named before it (Aider's rule). Also accepted:
//! blocks inside code fences and markers of 5 to 9 characters. An empty SEARCH creates a file;
//! an empty REPLACE deletes the matched text.

use kiln_guest::edit;
use kiln_guest::edit_format::{
    self, EditFormat, EditKind, FileEdit, FormatInfo, Manifest, ParseError,
};

struct SearchReplace;

impl EditFormat for SearchReplace {
    fn manifest() -> Manifest {
        edit_format::manifest(
            "search-replace",
            env!("CARGO_PKG_VERSION"),
            "SEARCH/REPLACE blocks, single- or multi-file",
        )
    }

    fn describe() -> FormatInfo {
        FormatInfo {
            name: "search-replace".into(),
            description: "SEARCH/REPLACE blocks: exact existing lines, then their replacement"
                .into(),
            multi_file: true,
        }
    }

    fn instructions(multi_file: bool) -> String {
        instructions(multi_file)
    }

    fn parse(response: String, targets: Vec<String>) -> Result<Vec<FileEdit>, Vec<ParseError>> {
        parse(&response, &targets)
    }
}

kiln_guest::export_edit_format!(SearchReplace);

fn instructions(multi_file: bool) -> String {
    let mut s = String::from(
        "Describe each change as a SEARCH/REPLACE block:\n\n\
         <<<<<<< SEARCH\n<existing lines, copied exactly from the file>\n=======\n<the lines that replace them>\n>>>>>>> REPLACE\n\n\
         Rules:\n\
         - SEARCH must match the file exactly, including indentation, and match only one place: include enough surrounding lines to make it unique.\n\
         - Keep blocks small: only the lines that change plus a little context.\n\
         - Several blocks apply in order, each to the text the earlier ones produced.\n\
         - An empty REPLACE deletes the matched lines. An empty SEARCH creates a new file.\n",
    );
    if multi_file {
        s.push_str(
            "- Before the blocks of each file, write a path header line naming it exactly as given:\n\n\
             <<< path=src/file.ext >>>\n<<<<<<< SEARCH\n...\n>>>>>>> REPLACE\n\n\
             - Every block must follow a path header; give each file's header once and only change the files you were shown.\n",
        );
    }
    s
}

/// Which marker a line is, if any: `<` SEARCH, `=` divider, `>` REPLACE.
fn marker(line: &str) -> Option<char> {
    let t = line.trim();
    for (c, word) in [('<', "SEARCH"), ('=', ""), ('>', "REPLACE")] {
        let n = t.chars().take_while(|x| *x == c).count();
        if (5..=9).contains(&n) && t[n..].trim() == word {
            return Some(c);
        }
    }
    None
}

/// `<<< path=REL >>>` → `REL`.
fn path_header(line: &str) -> Option<String> {
    let t = line.trim();
    let inner = t.strip_prefix("<<<")?.strip_suffix(">>>")?;
    if inner.starts_with('<') || inner.ends_with('>') {
        return None;
    }
    let p = inner
        .trim()
        .strip_prefix("path=")?
        .trim()
        .trim_matches(|c| c == '"' || c == '\'');
    Some(p.trim_start_matches("./").to_string())
}

fn parse(response: &str, targets: &[String]) -> Result<Vec<FileEdit>, Vec<ParseError>> {
    let lines: Vec<&str> = response
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect();
    let multi = targets.len() > 1;
    let mut edits = Vec::new();
    let mut errors = Vec::new();
    let mut current: Option<String> = None;
    let mut headers_seen: Vec<String> = Vec::new();
    let mut last_text_line: Option<&str> = None;
    let mut i = 0;
    let err = |line: usize, message: String| ParseError {
        line: line as u32,
        message,
    };
    while i < lines.len() {
        let line = lines[i];
        if let Some(p) = path_header(line) {
            if multi {
                if !targets.iter().any(|t| t == &p) {
                    errors.push(err(i + 1, format!("path header names {p}, which is not one of the files you may change ({})", targets.join(", "))));
                } else if headers_seen.contains(&p) {
                    errors.push(err(i + 1, format!("path header for {p} appears twice; put all of a file's blocks under one header")));
                } else {
                    headers_seen.push(p.clone());
                    current = Some(p);
                }
            } else if targets.is_empty() {
                // No targets given (`kiln edit apply` without --files): the header names the
                // file of the blocks after it.
                current = Some(p);
            } else if !targets.iter().any(|t| t == &p) {
                // Single-target mode: a header naming another file is refused, never
                // re-pointed to the target.
                errors.push(err(
                    i + 1,
                    format!(
                        "{p} is not a file this loop may change (only {})",
                        targets.join(", ")
                    ),
                ));
            }
            last_text_line = None;
            i += 1;
            continue;
        }
        match marker(line) {
            Some('<') => {}
            Some(c) => {
                errors.push(err(
                    i + 1,
                    format!(
                        "`{}` without an opening `<<<<<<< SEARCH`",
                        if c == '=' {
                            "======="
                        } else {
                            ">>>>>>> REPLACE"
                        }
                    ),
                ));
                i += 1;
                continue;
            }
            None => {
                if !line.trim().is_empty() && !edit::Fence::is_fence_line(line) {
                    last_text_line = Some(line);
                }
                i += 1;
                continue;
            }
        }
        // A block: SEARCH lines, divider, REPLACE lines, end marker.
        let start = i;
        let mut search = Vec::new();
        let mut replace = Vec::new();
        let mut j = i + 1;
        while j < lines.len() && marker(lines[j]).is_none() {
            search.push(lines[j]);
            j += 1;
        }
        if j >= lines.len() || marker(lines[j]) != Some('=') {
            errors.push(err(
                start + 1,
                "SEARCH block is missing its `=======` divider".into(),
            ));
            i = j.max(i + 1);
            continue;
        }
        j += 1;
        while j < lines.len() && marker(lines[j]).is_none() {
            replace.push(lines[j]);
            j += 1;
        }
        // A second `=======` closes the block when that is unambiguous: the next line ends
        // the fence, starts another block, or nothing follows.
        let closes_with_divider = j < lines.len()
            && marker(lines[j]) == Some('=')
            && lines[j + 1..]
                .iter()
                .find(|l| !l.trim().is_empty())
                .is_none_or(|next| edit::Fence::is_fence_line(next) || marker(next) == Some('<'));
        if !closes_with_divider && (j >= lines.len() || marker(lines[j]) != Some('>')) {
            errors.push(err(
                start + 1,
                "SEARCH block is missing its `>>>>>>> REPLACE` end marker".into(),
            ));
            i = j.max(i + 1);
            continue;
        }
        i = j + 1;
        // The file name on the line before the block names the block's file. A name that is
        // not a file this run may change is refused, never re-pointed to another file; a
        // word that is not path-like (no `.` or `/`) is prose, not a name.
        let named = last_text_line
            .take()
            .and_then(edit::clean_path)
            .map(|n| n.trim_start_matches("./").to_string());
        let named = match named {
            Some(n) if targets.is_empty() => Some(n),
            Some(n) => match edit::resolve_target(Some(&n), targets) {
                Ok(p) => Some(p),
                Err(_) if edit::looks_like_path(&n) => {
                    errors.push(err(
                        start + 1,
                        format!(
                            "this block is for {n}, which is not one of the files you may change ({}); name one of them on the line before the block",
                            targets.join(", ")
                        ),
                    ));
                    continue;
                }
                Err(_) => None,
            },
            None => None,
        };
        // A named block sets the file of the blocks after it that name none (Aider's rule).
        if let Some(n) = &named
            && (multi || targets.is_empty())
        {
            current = Some(n.clone());
        }
        let path = if multi {
            match &current {
                Some(p) => p.clone(),
                None => {
                    errors.push(err(start + 1, "this block has no path header before it; write `<<< path=FILE >>>` before each file's blocks".into()));
                    continue;
                }
            }
        } else {
            match targets.first() {
                Some(t) => t.clone(),
                None => match &current {
                    Some(n) => n.clone(),
                    None => {
                        errors.push(err(
                            start + 1,
                            "no target file: name the file on the line before the block, or with a `<<< path=FILE >>>` header"
                                .into(),
                        ));
                        continue;
                    }
                },
            }
        };
        let join = |ls: &[&str]| {
            if ls.is_empty() {
                String::new()
            } else {
                ls.join("\n") + "\n"
            }
        };
        let search = join(&search);
        let kind = if search.trim().is_empty() {
            EditKind::Create
        } else {
            EditKind::Replace
        };
        edits.push(FileEdit {
            path,
            kind,
            search,
            replace: join(&replace),
            new_path: None,
        });
    }
    if edits.is_empty() && errors.is_empty() {
        errors.push(err(0, "no SEARCH/REPLACE block found; write the change as <<<<<<< SEARCH / ======= / >>>>>>> REPLACE".into()));
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
    fn single_file_headers_must_name_the_target() {
        // A header naming another file is refused, never re-pointed to the target.
        let r = "<<< path=other.c >>>\n<<<<<<< SEARCH\nint a;\n=======\nint b;\n>>>>>>> REPLACE\n";
        let errs = parse(r, &t(&["main.c"])).unwrap_err();
        assert!(
            errs[0]
                .message
                .contains("other.c is not a file this loop may change"),
            "{errs:?}"
        );
        let r = "<<< path=main.c >>>\n<<<<<<< SEARCH\nint a;\n=======\nint b;\n>>>>>>> REPLACE\n";
        let e = parse(r, &t(&["main.c"])).unwrap();
        assert_eq!(e.len(), 1);
        assert_eq!(
            (
                e[0].path.as_str(),
                e[0].search.as_str(),
                e[0].replace.as_str()
            ),
            ("main.c", "int a;\n", "int b;\n")
        );
    }

    #[test]
    fn aider_fences_with_the_language_after_the_tag() {
        // As Aider writes it: the path, then `<source>python`, then the block.
        for (open, close) in [
            ("<source>python", "</source>"),
            ("<code>js", "</code>"),
            ("<pre>rust", "</pre>"),
            ("<codeblock>c", "</codeblock>"),
            ("<sourcecode>go", "</sourcecode>"),
        ] {
            let r = format!(
                "app.py\n{open}\n<<<<<<< SEARCH\nx = 1\n=======\nx = 2\n>>>>>>> REPLACE\n{close}\n"
            );
            let e = parse(&r, &t(&["app.py", "b.py"])).unwrap_or_else(|e| panic!("{open}: {e:?}"));
            assert_eq!(e.len(), 1, "{open}");
            assert_eq!(e[0].path, "app.py", "{open}");
        }
    }

    #[test]
    fn multi_file_rules() {
        let ts = t(&["a.c", "b.c"]);
        let r = "<<< path=a.c >>>\n<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE\n<<< path=b.c >>>\n<<<<<<< SEARCH\np\n=======\n>>>>>>> REPLACE\n";
        let e = parse(r, &ts).unwrap();
        assert_eq!(
            (
                e[0].path.as_str(),
                e[1].path.as_str(),
                e[1].replace.as_str()
            ),
            ("a.c", "b.c", "")
        );

        let no_header = parse("<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE\n", &ts).unwrap_err();
        assert!(
            no_header[0].message.contains("no path header"),
            "{:?}",
            no_header
        );
        let outside = parse(
            "<<< path=c.c >>>\n<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE\n",
            &ts,
        )
        .unwrap_err();
        assert!(
            outside[0]
                .message
                .contains("c.c, which is not one of the files")
        );
        let twice = parse(&format!("{r}<<< path=a.c >>>\n"), &ts).unwrap_err();
        assert!(twice[0].message.contains("appears twice"));
    }

    #[test]
    fn fences_filename_lines_and_marker_lengths() {
        let ts = t(&["src/a.c", "src/b.c"]);
        let r = "Here is the fix.\n\nsrc/b.c\n```c\n<<<<< SEARCH\nold\n=========\nnew\n>>>>>>>>> REPLACE\n```\n";
        let e = parse(r, &ts).unwrap();
        assert_eq!(
            (
                e[0].path.as_str(),
                e[0].search.as_str(),
                e[0].replace.as_str()
            ),
            ("src/b.c", "old\n", "new\n")
        );
        let four = parse("<<<< SEARCH\nold\n====\nnew\n>>>> REPLACE\n", &t(&["a"])).unwrap_err();
        assert!(four[0].message.contains("no SEARCH/REPLACE block"));
    }

    #[test]
    fn headers_name_the_files_when_no_targets_are_given() {
        let r = "<<< path=src/a.py >>>\n<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n<<< path=src/b.py >>>\n<<<<<<< SEARCH\nc\n=======\nd\n>>>>>>> REPLACE\n";
        let e = parse(r, &[]).unwrap();
        assert_eq!(
            (e[0].path.as_str(), e[1].path.as_str()),
            ("src/a.py", "src/b.py")
        );
    }

    #[test]
    fn aider_fences_never_name_the_file() {
        let ts = t(&["src/a.py", "src/b.py"]);
        for (open, close) in [
            ("```python", "```"),
            ("````python", "````"),
            ("<source>", "</source>"),
            ("<source python>", "</source>"),
            ("<code>", "</code>"),
            ("<pre>", "</pre>"),
            ("<codeblock>", "</codeblock>"),
            ("<sourcecode python>", "</sourcecode>"),
        ] {
            let r = format!(
                "src/b.py\n{open}\n<<<<<<< SEARCH\nold\n=======\nnew\n>>>>>>> REPLACE\n{close}\n"
            );
            let e = parse(&r, &ts).unwrap_or_else(|e| panic!("{open}: {e:?}"));
            assert_eq!(e[0].path, "src/b.py", "{open}");
        }
    }

    #[test]
    fn a_block_closed_by_a_second_divider_when_unambiguous() {
        let ts = t(&["a.py"]);
        // The next line ends the fence.
        let e = parse(
            "```python\n<<<<<<< SEARCH\nold\n=======\nnew\n=======\n```\n",
            &ts,
        )
        .unwrap();
        assert_eq!(
            (e[0].search.as_str(), e[0].replace.as_str()),
            ("old\n", "new\n")
        );
        // The next line starts another block.
        let e = parse(
            "<<<<<<< SEARCH\na\n=======\nb\n=======\n<<<<<<< SEARCH\nc\n=======\nd\n>>>>>>> REPLACE\n",
            &ts,
        )
        .unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!(e[1].replace, "d\n");
        // Text follows the second divider: ambiguous, refused with the block's line.
        let errs = parse("<<<<<<< SEARCH\na\n=======\nb\n=======\nmore text\n", &ts).unwrap_err();
        assert_eq!(errs[0].line, 1);
        assert!(errs[0].message.contains("end marker"));
    }

    #[test]
    fn empty_search_creates_and_missing_markers_are_reported() {
        let e = parse(
            "<<<<<<< SEARCH\n=======\nfn main() {}\n>>>>>>> REPLACE\n",
            &t(&["new.rs"]),
        )
        .unwrap();
        assert_eq!(e[0].kind, EditKind::Create);
        let errs = parse("<<<<<<< SEARCH\nx\n>>>>>>> REPLACE\n", &t(&["a"])).unwrap_err();
        assert_eq!(errs[0].line, 1);
        assert!(errs[0].message.contains("divider"));
        let errs = parse("<<<<<<< SEARCH\nx\n=======\ny\n", &t(&["a"])).unwrap_err();
        assert!(errs[0].message.contains("end marker"));
    }

    #[test]
    fn a_filename_line_naming_a_file_outside_the_targets_is_refused() {
        let block = "<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE\n";
        // One target: the block named for utils.py is not applied to main.py.
        let errs = parse(&format!("utils.py\n{block}"), &t(&["main.py"])).unwrap_err();
        assert!(
            errs[0].message.contains("utils.py") && errs[0].message.contains("(main.py)"),
            "{errs:?}"
        );
        assert_eq!(errs[0].line, 2);
        // Several: a block named for c.py is not applied to the previous block's file.
        let errs = parse(
            &format!("a.py\n{block}\nc.py\n```python\n{block}```\n"),
            &t(&["a.py", "b.py"]),
        )
        .unwrap_err();
        assert!(
            errs[0].message.contains("c.py") && errs[0].message.contains("(a.py, b.py)"),
            "{errs:?}"
        );
        // The target named as written, with `./`, by its file name, or decorated: applied.
        for name in [
            "main.py",
            "./main.py",
            "`main.py`",
            "**src/main.py**",
            "# main.py",
        ] {
            let e = parse(&format!("{name}\n{block}"), &t(&["src/main.py"]))
                .unwrap_or_else(|e| panic!("{name}: {e:?}"));
            assert_eq!(e[0].path, "src/main.py", "{name}");
        }
        // A word of prose on the line before is not a name.
        let e = parse(&format!("Change:\n{block}"), &t(&["main.py"])).unwrap();
        assert_eq!(e[0].path, "main.py");
    }

    #[test]
    fn an_unnamed_block_belongs_to_the_file_named_before_it() {
        let b = |s: &str, r: &str| format!("<<<<<<< SEARCH\n{s}\n=======\n{r}\n>>>>>>> REPLACE\n");
        // Several blocks of one file after one name, prose between them (Aider's rule).
        let r = format!(
            "Here's the change:\n\n```text\nfoo.txt\n{}\n...\n\n{}```\n\nHope you like it!\n",
            b("one", "two"),
            b("three", "four")
        );
        let e = parse(&r, &[]).unwrap();
        assert_eq!(
            e.iter()
                .map(|e| (e.path.as_str(), e.search.as_str()))
                .collect::<Vec<_>>(),
            [("foo.txt", "one\n"), ("foo.txt", "three\n")]
        );
        // A later name switches the file; the name inside its own fence before the block's
        // fence (as DeepSeek writes it) counts.
        let r = format!(
            "a.txt\n{}\nb.txt\n{}\n{}\n ```python\nc.txt\n```\n```python\n{}```\n",
            b("1", "2"),
            b("3", "4"),
            b("5", "6"),
            b("7", "8")
        );
        let e = parse(&r, &[]).unwrap();
        assert_eq!(
            e.iter().map(|e| e.path.as_str()).collect::<Vec<_>>(),
            ["a.txt", "b.txt", "b.txt", "c.txt"]
        );
        // No name at all: refused, saying how to name it.
        let errs = parse(&b("x", "y"), &[]).unwrap_err();
        assert!(errs[0].message.contains("name the file"), "{errs:?}");
        // An empty SEARCH under a new name creates that file.
        let e = parse(&format!("newfile.txt\n{}", b("", "created")), &[]).unwrap();
        assert_eq!(
            (e[0].path.as_str(), e[0].kind),
            ("newfile.txt", EditKind::Create)
        );
    }

    fn fragment() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("<<<<<<< SEARCH\n".to_string()),
            Just("=======\n".to_string()),
            Just(">>>>>>> REPLACE\n".to_string()),
            Just("<<< path=a.c >>>\n".to_string()),
            Just("<<< path=b.c >>>\n".to_string()),
            Just("```\n".to_string()),
            Just("a.c\n".to_string()),
            Just("\r\n".to_string()),
            ".{0,12}\n",
        ]
    }

    proptest! {
        #[test]
        fn the_parser_never_panics(parts in prop::collection::vec(fragment(), 0..30), multi in any::<bool>()) {
            let targets = if multi { t(&["a.c", "b.c"]) } else { t(&["a.c"]) };
            let _ = parse(&parts.concat(), &targets);
        }
    }
}

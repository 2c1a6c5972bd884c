//! The `apply-patch` edit format: the `*** Begin Patch` envelope several model families are
//! trained to emit. `*** Add File: P` (content as `+` lines), `*** Delete File: P`,
//! `*** Update File: P` with `@@`-separated chunks of ` `/`-`/`+` lines (each chunk located by
//! its content, like a SEARCH/REPLACE block), optionally `*** Move to: Q`, and `*** End Patch`.

use kiln_guest::edit;
use kiln_guest::edit_format::{
    self, EditFormat, EditKind, FileEdit, FormatInfo, Manifest, ParseError,
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
             - Separate changes in one file with `@@` lines; give each enough unchanged lines to match exactly one place.\n\
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
}

kiln_guest::export_edit_format!(ApplyPatch);

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
        let header = |prefix: &str| {
            line.strip_prefix(prefix)
                .map(|p| p.trim().trim_start_matches("./").to_string())
        };
        let resolve = |p: &str| edit::resolve_target(Some(p), targets);
        if let Some(p) = header("*** Add File:") {
            let mut content = Vec::new();
            i += 1;
            while i < end && !lines[i].starts_with("*** ") {
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
            if let Some(dest) = lines.get(i).and_then(|l| l.strip_prefix("*** Move to:")) {
                move_to = Some(dest.trim().trim_start_matches("./").to_string());
                i += 1;
            }
            let mut chunks: Vec<(usize, Vec<String>, Vec<String>)> = Vec::new();
            while i < end
                && (!lines[i].starts_with("*** ") || lines[i].starts_with("*** End of File"))
            {
                let l = lines[i];
                if l.starts_with("@@") || chunks.is_empty() {
                    chunks.push((i + 1, Vec::new(), Vec::new()));
                    if l.starts_with("@@") {
                        i += 1;
                        continue;
                    }
                }
                let (_, search, replace) = chunks.last_mut().unwrap();
                if let Some(c) = l.strip_prefix(' ') {
                    search.push(c.to_string());
                    replace.push(c.to_string());
                } else if let Some(r) = l.strip_prefix('-') {
                    search.push(r.to_string());
                } else if let Some(a) = l.strip_prefix('+') {
                    replace.push(a.to_string());
                } else if l.is_empty() {
                    search.push(String::new());
                    replace.push(String::new());
                } else if !l.starts_with("*** End of File") {
                    errors.push(err(
                        i + 1,
                        format!("patch lines start with ` `, `-` or `+`: `{l}`"),
                    ));
                }
                i += 1;
            }
            let Some(path) = path else { continue };
            for (line, mut search, mut replace) in chunks {
                while search.last().is_some_and(String::is_empty)
                    && replace.last().is_some_and(String::is_empty)
                {
                    search.pop();
                    replace.pop();
                }
                if search.is_empty() && replace.is_empty() {
                    continue;
                }
                if search.iter().all(|l| l.trim().is_empty()) {
                    errors.push(err(
                        line,
                        format!(
                            "a chunk for {path} has no unchanged or removed lines to locate it"
                        ),
                    ));
                    continue;
                }
                edits.push(FileEdit {
                    path: path.clone(),
                    kind: EditKind::Replace,
                    search: join(&search),
                    replace: join(&replace),
                    new_path: None,
                });
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
        assert_eq!(e[1].search, "def f():\n    return 1\n");
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

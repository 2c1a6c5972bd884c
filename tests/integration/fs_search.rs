//! The fs plugin's `search` and `search_repo` through the real plugin: regex patterns,
//! `.gitignore` respected and binary files skipped, as ripgrep does.

use crate::support::{Run, Workspace, error_of};
use serde_json::{Value, json};

/// Call `tool` of the fs plugin with `args` and return the run.
fn call(ws: &Workspace, tool: &str, args: Value) -> Run {
    ws.kiln(
        &["tool", "call", tool, "--args", &args.to_string(), "--json"],
        &[],
    )
}

/// `(path, line)` of every match of a successful search.
fn hits(r: &Run) -> Vec<(String, u64)> {
    r.expect_code(0);
    r.json()["result"]["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["path"].as_str().unwrap().to_string(),
                m["line"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn search_takes_a_regex_and_literal_text_on_request() {
    let ws = Workspace::new();
    ws.write(
        "src/a.rs",
        "fn alpha_test() {}\nfn alpha() {}\nlet x = f(1);\n",
    );
    ws.write("src/b.rs", "fn beta_test() {}\n");
    for tool in ["search", "search_repo"] {
        let r = call(&ws, tool, json!({ "pattern": r"fn \w+_test\(" }));
        assert_eq!(
            hits(&r),
            [("src/a.rs".to_string(), 1), ("src/b.rs".to_string(), 1)],
            "{tool}"
        );
    }
    let r = call(&ws, "search", json!({ "pattern": "f(1)", "literal": true }));
    assert_eq!(hits(&r), [("src/a.rs".to_string(), 3)]);
    let r = call(
        &ws,
        "search",
        json!({ "pattern": "alpha|beta", "path": "src/b.rs" }),
    );
    assert_eq!(hits(&r), [("src/b.rs".to_string(), 1)]);
}

#[test]
fn a_bad_regex_is_a_tool_error_naming_the_pattern() {
    let ws = Workspace::new();
    ws.write("a.rs", "f(1)\n");
    let r = call(&ws, "search_repo", json!({ "pattern": "f(1" }));
    r.expect_code(1);
    let msg = error_of(&r, "invalid-input");
    assert!(
        msg.contains("`f(1`") && msg.contains("not a valid regular expression"),
        "{msg}"
    );
}

#[test]
fn search_skips_gitignored_and_binary_files() {
    let ws = Workspace::new();
    ws.write(".gitignore", "generated/\n*.log\n");
    ws.write("src/a.rs", "needle\n");
    ws.write("generated/out.rs", "needle\n");
    ws.write("run.log", "needle\n");
    ws.write("src/sub/.gitignore", "local.rs\n");
    ws.write("src/sub/local.rs", "needle\n");
    ws.write("src/sub/kept.rs", "needle\n");
    let mut binary = b"needle\n".to_vec();
    binary.extend([0u8, 1, 2, 3]);
    binary.extend(b"needle\n");
    std::fs::write(ws.root().join("src/data.bin"), &binary).unwrap();
    // Not UTF-8 but text: still searched.
    std::fs::write(ws.root().join("src/latin1.txt"), b"caf\xe9 needle\n").unwrap();
    let r = call(&ws, "search_repo", json!({ "pattern": "needle" }));
    let paths: Vec<String> = hits(&r).into_iter().map(|(p, _)| p).collect();
    assert_eq!(paths, ["src/a.rs", "src/latin1.txt", "src/sub/kept.rs"]);
    // A file named explicitly is searched even when ignored, as ripgrep does.
    let r = call(
        &ws,
        "search",
        json!({ "pattern": "needle", "path": "run.log" }),
    );
    assert_eq!(hits(&r), [("run.log".to_string(), 1)]);
}

/// git's own files can hold credentials (a token in a remote URL, the auth header a CI
/// checkout persists): the file tools the model calls read, search and list nothing inside
/// `.git`, however the path is written.
#[test]
fn the_file_tools_read_nothing_inside_git() {
    let ws = Workspace::new();
    ws.write(
        ".git/config",
        "[http]\n\textraheader = AUTHORIZATION: basic c2VjcmV0LXRva2Vu\n",
    );
    ws.write("src/a.rs", "fn a() {}\n");
    for (tool, args) in [
        ("read_files", json!({ "paths": [".git/config"] })),
        ("read_file", json!({ "path": "./.git/config" })),
        (
            "search_repo",
            json!({ "pattern": "extraheader", "path": ".git" }),
        ),
        ("list_dir", json!({ "path": ".git" })),
    ] {
        let r = call(&ws, tool, args.clone());
        assert!(
            !r.stdout().contains("c2VjcmV0LXRva2Vu") && !r.stdout().contains("extraheader"),
            "{tool} {args}: {}",
            r.stdout()
        );
        assert!(
            r.stdout().contains("is inside `.git`"),
            "{tool} {args}: {}",
            r.stdout()
        );
    }
    // A search of the whole workspace skips it too.
    let r = call(&ws, "search_repo", json!({ "pattern": "extraheader" }));
    r.expect_code(0);
    assert!(!r.stdout().contains("c2VjcmV0"), "{}", r.stdout());
}

/// A repository can commit a link into `.git` (`docs -> .git`, `cfg -> .git/config`, one into a
/// nested repository's): the file tools follow it to no file of git's. The host refuses to open
/// anything whose real path lies in a `.git` directory, whatever path the plugin named it by,
/// and `.git/info/exclude` (git's local ignore list, no secret) is still honoured by a search.
#[test]
fn a_link_into_git_reads_nothing_of_gits() {
    let ws = Workspace::new();
    let secret = "[http]\n\textraheader = AUTHORIZATION: basic c2VjcmV0LXRva2Vu\n";
    ws.write(".git/config", secret);
    ws.write(".git/info/exclude", "local-only.txt\n");
    ws.write("local-only.txt", "needle_excluded\n");
    ws.write("sub/.git/config", secret);
    ws.write("src/a.rs", "fn a() {} // needle_kept\n");
    let link = |target: &str, name: &str| {
        std::os::unix::fs::symlink(target, ws.root().join(name)).unwrap();
    };
    link(".git", "docs");
    link(".git/config", "cfg");
    link("sub/.git", "nested");
    link("../.git", "src/up");
    for (tool, args) in [
        ("read_files", json!({ "paths": ["docs/config"] })),
        ("read_files", json!({ "paths": ["cfg"] })),
        ("read_files", json!({ "paths": ["nested/config"] })),
        ("read_files", json!({ "paths": ["src/up/config"] })),
        ("read_file", json!({ "path": "cfg" })),
        (
            "search_repo",
            json!({ "pattern": "extraheader", "path": "docs" }),
        ),
        (
            "search_repo",
            json!({ "pattern": "extraheader", "path": "nested" }),
        ),
        ("list_dir", json!({ "path": "docs" })),
    ] {
        let r = call(&ws, tool, args.clone());
        let out = format!("{}{}", r.stdout(), r.stderr());
        assert!(
            !out.contains("c2VjcmV0LXRva2Vu") && !out.contains("extraheader ="),
            "{tool} {args}: {out}"
        );
        assert!(
            r.stdout().contains("`.git`"),
            "{tool} {args} does not say why: {out}"
        );
    }
    // A whole-workspace search finds the workspace's own files, none of git's, and still
    // leaves out what `.git/info/exclude` lists.
    let r = call(
        &ws,
        "search_repo",
        json!({ "pattern": "needle_|extraheader" }),
    );
    let found = hits(&r);
    assert_eq!(found, vec![("src/a.rs".to_string(), 1)], "{}", r.stdout());
}

/// Files past the plugin's 4 MiB output limit: `search_repo` skips a file over 4 MiB, says
/// how many it skipped and which, and cuts a long matching line (it failed the whole call with
/// "output limit exceeded"); `read_files` returns a head of each file with a note, all of them
/// within 2 MiB in all, and the files past that get an error of their own while the others
/// are read (eighteen 256 KiB heads failed the whole call).
#[test]
fn large_files_are_cut_or_skipped_and_said_not_fatal() {
    let ws = Workspace::new();
    // One line of 5 MiB holding the pattern (minified code), and a 1 MiB one.
    ws.write("big.min.js", &format!("TODO {}\n", "x".repeat(5 << 20)));
    ws.write("long.js", &format!("TODO {}\n", "y".repeat(1 << 20)));
    ws.write("small.txt", "a TODO here\n");
    let r = call(&ws, "search_repo", json!({ "pattern": "TODO" }));
    r.expect_code(0);
    let res = &r.json()["result"];
    assert_eq!(
        hits(&r),
        [("long.js".to_string(), 1), ("small.txt".to_string(), 1)]
    );
    assert_eq!(res["skipped_too_large"], 1, "{res}");
    assert!(
        res["note"]
            .as_str()
            .unwrap()
            .contains("1 file over 4 MiB not searched: big.min.js"),
        "{res}"
    );
    let long = &res["matches"][0];
    assert!(
        long["text"].as_str().unwrap().len() < 1100,
        "a long line is cut"
    );
    assert_eq!(long["line_bytes"], (1 << 20) + 5);

    // read_files: eighteen files of 300 KiB each, then a small one.
    let mut paths = Vec::new();
    for i in 0..18 {
        let p = format!("part{i:02}.txt");
        ws.write(&p, &"z".repeat(300 * 1024));
        paths.push(p);
    }
    paths.push("small.txt".into());
    paths.insert(0, "big.min.js".into());
    let r = call(&ws, "read_files", json!({ "paths": paths }));
    r.expect_code(0);
    let files = r.json()["result"]["files"].as_array().unwrap().clone();
    assert_eq!(files.len(), 20);
    let big = &files[0];
    assert_eq!(big["truncated"], true, "{}", big["path"]);
    assert_eq!(big["bytes"], (5 << 20) + 6);
    assert_eq!(big["content"].as_str().unwrap().len(), 256 * 1024);
    assert!(
        big["note"].as_str().unwrap().contains(&format!(
            "only the first 262144 of its {} bytes",
            (5 << 20) + 6
        )),
        "{big}"
    );
    let shown: usize = files
        .iter()
        .filter_map(|f| f["content"].as_str())
        .map(str::len)
        .sum();
    assert!(shown <= 2 << 20, "{shown}");
    let unread = files.last().unwrap();
    assert!(
        unread["error"]
            .as_str()
            .unwrap()
            .contains("read it in another call"),
        "{unread}"
    );
    // A file read alone is read whatever came before.
    let r = call(&ws, "read_files", json!({ "paths": ["small.txt"] }));
    assert_eq!(r.json()["result"]["files"][0]["content"], "a TODO here\n");
}

/// An entry whose name is not UTF-8 no longer fails `list_dir` (WASI gives it as an error in
/// the directory's stream, where the listing used to end): the other entries are listed and
/// the note counts it; `glob` finds the files beside it.
#[test]
fn a_name_that_is_not_utf8_does_not_hide_the_rest_of_its_directory() {
    use std::os::unix::ffi::OsStrExt;
    let ws = Workspace::new();
    ws.write("a.txt", "a\n");
    ws.write("z.txt", "z\n");
    ws.write("sub/b.txt", "b\n");
    std::fs::write(
        ws.root().join(std::ffi::OsStr::from_bytes(b"bad\xff.txt")),
        "x\n",
    )
    .unwrap();
    let r = call(&ws, "list_dir", json!({}));
    r.expect_code(0);
    let res = &r.json()["result"];
    assert_eq!(res["entries"], json!(["a.txt", "sub/", "z.txt"]), "{res}");
    assert_eq!(res["unlisted"], 1, "{res}");
    assert!(
        res["note"]
            .as_str()
            .unwrap()
            .contains("1 more entry whose name is not UTF-8"),
        "{res}"
    );
    let r = call(&ws, "glob", json!({ "pattern": "**/*.txt" }));
    r.expect_code(0);
    assert_eq!(
        r.json()["result"]["files"],
        json!(["a.txt", "sub/b.txt", "z.txt"])
    );
    // A sub-directory is listed the same way.
    let r = call(&ws, "list_dir", json!({ "path": "sub" }));
    assert_eq!(r.json()["result"]["entries"], json!(["b.txt"]));
}

/// F3: a hard link to `.git/config` inside the workspace (a tarball or zip that carries hard
/// links, `cp -al`, a restored backup) is git's configuration under another name: the file
/// tools and kiln's own readers refuse it like the file itself.
#[test]
fn a_hard_link_to_git_config_reads_nothing_of_gits() {
    let ws = Workspace::new();
    let secret = "[http]\n\textraheader = AUTHORIZATION: basic c2VjcmV0LXRva2Vu\n";
    ws.write(".git/config", secret);
    ws.write("src/a.rs", "fn a() {} // needle_kept\n");
    std::fs::hard_link(ws.root().join(".git/config"), ws.root().join("notes.md")).unwrap();
    std::fs::hard_link(ws.root().join(".git/config"), ws.root().join("src/cfg.txt")).unwrap();
    for (tool, args) in [
        ("read_file", json!({ "path": "notes.md" })),
        (
            "read_files",
            json!({ "paths": ["notes.md", "src/cfg.txt"] }),
        ),
        ("search_repo", json!({ "pattern": "extraheader" })),
    ] {
        let r = call(&ws, tool, args.clone());
        let out = format!("{}{}", r.stdout(), r.stderr());
        assert!(
            !out.contains("c2VjcmV0LXRva2Vu") && !out.contains("extraheader ="),
            "{tool} {args}: {out}"
        );
    }
    let r = call(&ws, "read_file", json!({ "path": "notes.md" }));
    assert!(
        r.stdout().contains("into `.git`") && r.stderr().contains("hard link to `.git/config`"),
        "says why: {}{}",
        r.stdout(),
        r.stderr()
    );
    // kiln's own reader of workspace files (task files, targets) refuses it too.
    let r = ws.kiln(
        &[
            "loop",
            "--task",
            "notes.md",
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--model",
            "m",
        ],
        &[],
    );
    let out = format!("{}{}", r.stdout(), r.stderr());
    assert!(!out.contains("c2VjcmV0LXRva2Vu"), "{out}");
    assert!(out.contains("hard link to `.git/config`"), "{out}");
    // An ordinary file with other links is still read.
    std::fs::hard_link(ws.root().join("src/a.rs"), ws.root().join("b.rs")).unwrap();
    let r = call(&ws, "read_file", json!({ "path": "b.rs" }));
    r.expect_code(0);
    assert!(r.stdout().contains("needle_kept"), "{}", r.stdout());
}

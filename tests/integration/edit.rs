//! Edit formats end to end: `kiln edit parse|apply` on real files, atomicity, conventions,
//! and the host-side checks (stale files, paths leaving the workspace).

use crate::support::{Workspace, sr};
use kiln::config::Config;
use kiln::edit::{self, ApplyOptions};
use kiln::plugin::{PluginKind, Registry, Runtime};

const MAIN_C: &str = "#include <stdio.h>\n\nint main(void) {\n    int x = 1;\n    printf(\"%d\\n\", x);\n    return 0;\n}\n";

#[test]
fn search_replace_applies_and_reports_the_tier() {
    let ws = Workspace::new();
    ws.write("main.c", MAIN_C);
    let r = ws.kiln_stdin(
        &["edit", "apply", "--files", "main.c", "--json"],
        &sr(
            "  int x = 1;\n  printf(\"%d\\n\", x);\n",
            "  int x = 2;\n  printf(\"%d\\n\", x);\n",
        ),
    );
    r.expect_code(0);
    let j = r.json();
    assert_eq!(j["ok"], true);
    assert_eq!(j["edits"][0]["status"], "applied");
    assert_eq!(j["edits"][0]["tier"], "indentation");
    assert_eq!(
        ws.read("main.c"),
        MAIN_C.replace("int x = 1;", "int x = 2;")
    );
}

#[test]
fn an_ambiguous_block_is_refused_and_nothing_is_written() {
    let ws = Workspace::new();
    ws.write("a.c", "x++;\ny++;\nx++;\n");
    let r = ws.kiln_stdin(
        &["edit", "apply", "--files", "a.c"],
        &sr("x++;\n", "x--;\n"),
    );
    r.expect_code(1);
    assert!(
        r.stdout()
            .contains("SEARCH matches 2 places in a.c (lines 1, 3)"),
        "{}",
        r.stdout()
    );
    assert_eq!(ws.read("a.c"), "x++;\ny++;\nx++;\n");
}

#[test]
fn a_multi_file_response_applies_whole_or_not_at_all() {
    let ws = Workspace::new();
    ws.write("a.c", "int a = 1;\n");
    ws.write("b.c", "int b = 1;\n");
    ws.write("c.c", "int c = 1;\n");
    let good = format!(
        "<<< path=a.c >>>\n{}<<< path=b.c >>>\n{}",
        sr("int a = 1;\n", "int a = 2;\n"),
        sr("int b = 1;\n", "int b = 2;\n")
    );
    let bad = format!(
        "<<< path=a.c >>>\n{}<<< path=b.c >>>\n{}",
        sr("int a = 1;\n", "int a = 2;\n"),
        sr("int nope;\n", "x\n")
    );
    let r = ws.kiln_stdin(&["edit", "apply", "--files", "a.c", "b.c", "--json"], &bad);
    r.expect_code(1);
    let j = r.json();
    assert_eq!(j["edits"][0]["status"], "not_applied");
    assert_eq!(j["edits"][1]["failure"], "no_match");
    assert_eq!(
        (ws.read("a.c"), ws.read("b.c")),
        ("int a = 1;\n".into(), "int b = 1;\n".into())
    );

    ws.kiln_stdin(&["edit", "apply", "--files", "a.c", "b.c"], &good)
        .expect_code(0);
    assert_eq!(
        (ws.read("a.c"), ws.read("b.c")),
        ("int a = 2;\n".into(), "int b = 2;\n".into())
    );
    assert_eq!(
        ws.read("c.c"),
        "int c = 1;\n",
        "a file not named is byte-identical"
    );
    // Applying the same response again: already applied, not a failure.
    let r = ws.kiln_stdin(&["edit", "apply", "--files", "a.c", "b.c", "--json"], &good);
    r.expect_code(0);
    assert_eq!(r.json()["edits"][0]["status"], "already_applied");
}

#[test]
fn crlf_bom_and_missing_final_newline_are_kept() {
    let ws = Workspace::new();
    ws.write("w.txt", "\u{feff}one\r\ntwo\r\nthree");
    ws.kiln_stdin(&["edit", "apply", "--files", "w.txt"], &sr("two\n", "2\n"))
        .expect_code(0);
    assert_eq!(ws.read("w.txt"), "\u{feff}one\r\n2\r\nthree");
}

#[test]
fn empty_replace_deletes_and_empty_search_creates() {
    let ws = Workspace::new();
    ws.write("m.py", "import os\nimport sys\n\nprint(1)\n");
    ws.kiln_stdin(
        &["edit", "apply", "--files", "m.py"],
        &sr("import sys\n", ""),
    )
    .expect_code(0);
    assert_eq!(ws.read("m.py"), "import os\n\nprint(1)\n");
    ws.kiln_stdin(
        &["edit", "apply", "--files", "new.py"],
        &sr("", "print('new')\n"),
    )
    .expect_code(0);
    assert_eq!(ws.read("new.py"), "print('new')\n");
    // An empty SEARCH over an existing, non-empty file is refused.
    let r = ws.kiln_stdin(&["edit", "apply", "--files", "m.py"], &sr("", "x\n"));
    r.expect_code(1);
    assert!(r.stdout().contains("already exists"), "{}", r.stdout());
}

#[test]
fn udiff_creates_changes_and_deletes() {
    let ws = Workspace::new();
    ws.write("keep.py", "def f():\n    return 1\n");
    ws.write("gone.py", "x = 1\n");
    let diff = "```diff\n--- a/keep.py\n+++ b/keep.py\n@@ -1,2 +1,2 @@\n def f():\n-    return 1\n+    return 2\n--- /dev/null\n+++ b/new.py\n@@ -0,0 +1 @@\n+y = 2\n--- a/gone.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-x = 1\n```\n";
    let r = ws.kiln_stdin(&["edit", "apply", "--format", "udiff", "--json"], diff);
    r.expect_code(0);
    assert_eq!(ws.read("keep.py"), "def f():\n    return 2\n");
    assert_eq!(ws.read("new.py"), "y = 2\n");
    assert!(!ws.root().join("gone.py").exists());
    assert_eq!(r.json()["deleted"], serde_json::json!(["gone.py"]));
}

#[test]
fn apply_patch_updates_moves_and_adds() {
    let ws = Workspace::new();
    ws.write(
        "src/a.py",
        "def a():\n    return 1\n\ndef b():\n    return 2\n",
    );
    let patch = "*** Begin Patch\n*** Update File: src/a.py\n*** Move to: src/renamed.py\n@@ def b():\n def b():\n-    return 2\n+    return 3\n*** Add File: src/c.py\n+c = 1\n*** End Patch\n";
    ws.kiln_stdin(&["edit", "apply", "--format", "apply-patch"], patch)
        .expect_code(0);
    assert!(!ws.root().join("src/a.py").exists());
    assert_eq!(
        ws.read("src/renamed.py"),
        "def a():\n    return 1\n\ndef b():\n    return 3\n"
    );
    assert_eq!(ws.read("src/c.py"), "c = 1\n");
}

#[test]
fn whole_refuses_lazy_output_and_dry_run_writes_nothing() {
    let ws = Workspace::new();
    ws.write("a.rs", "fn a() {}\nfn b() {}\n");
    let r = ws.kiln_stdin(
        &["edit", "apply", "--format", "whole", "--files", "a.rs"],
        "a.rs\n```rust\nfn a() { 1 }\n// ... existing code ...\n```\n",
    );
    r.expect_code(1);
    assert!(r.stdout().contains("elides code"), "{}", r.stdout());
    let r = ws.kiln_stdin(
        &[
            "edit",
            "apply",
            "--format",
            "whole-file",
            "--files",
            "a.rs",
            "--dry-run",
        ],
        "```\nfn a() { 1 }\n```\n",
    );
    r.expect_code(0);
    assert_eq!(ws.read("a.rs"), "fn a() {}\nfn b() {}\n");
}

#[test]
fn edits_may_not_leave_the_workspace_or_touch_unnamed_files() {
    let ws = Workspace::new();
    std::fs::write(ws.path().join("outside.c"), "int secret;\n").unwrap();
    std::os::unix::fs::symlink(ws.path().join("outside.c"), ws.root().join("link.c")).unwrap();
    ws.write("a.c", "int a;\n");
    let r = ws.kiln_stdin(
        &["edit", "apply", "--format", "udiff", "--json"],
        "--- a/../outside.c\n+++ b/../outside.c\n@@\n-int secret;\n+int leaked;\n",
    );
    r.expect_code(1);
    assert_eq!(r.json()["edits"][0]["failure"], "policy");
    let r = ws.kiln_stdin(
        &["edit", "apply", "--files", "link.c"],
        &sr("int secret;\n", "int leaked;\n"),
    );
    assert_ne!(r.code(), 0);
    assert_eq!(
        std::fs::read_to_string(ws.path().join("outside.c")).unwrap(),
        "int secret;\n"
    );
    // A udiff naming a file other than the targets is a parse error.
    let r = ws.kiln_stdin(
        &[
            "edit", "apply", "--format", "udiff", "--files", "a.c", "b.c", "--json",
        ],
        "--- a/z.c\n+++ b/z.c\n@@\n-int a;\n+int b;\n",
    );
    r.expect_code(1);
    assert!(
        r.json()["parse_errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("z.c is not one of the files")
    );
}

#[test]
fn parse_prints_edits_as_json() {
    let ws = Workspace::new();
    let r = ws.kiln_stdin(
        &["edit", "parse", "--files", "a.c", "b.c", "--json"],
        &format!("<<< path=b.c >>>\n{}", sr("old\n", "new\n")),
    );
    r.expect_code(0);
    let j = r.json();
    assert_eq!(
        j["edits"][0],
        serde_json::json!({ "path": "b.c", "kind": "replace", "search": "old\n", "replace": "new\n", "new_path": null })
    );
    let r = ws.kiln_stdin(&["edit", "parse", "--json"], "no blocks here");
    r.expect_code(1);
    assert!(j["ok"] == true && r.json()["ok"] == false);
}

async fn formats(ws: &Workspace) -> (Runtime, Config) {
    let _ = ws;
    (crate::support::shared_runtime(), Config::default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_changed_since_the_llm_saw_it_is_stale() {
    let ws = Workspace::new();
    ws.write("a.c", "int a = 1;\n");
    let (rt, config) = formats(&ws).await;
    let reg = Registry::load(&rt, &ws.root(), &config).await.unwrap();
    let format = reg
        .get("search-replace", Some(PluginKind::EditFormat))
        .unwrap();
    let w = edit::Workspace::open(&ws.root()).unwrap();
    let mut opts = ApplyOptions::default();
    opts.shown
        .insert("a.c".into(), edit::fingerprint("int a = 1;\n"));
    ws.write("a.c", "int a = 100;\n");
    let report = edit::apply_response(
        format,
        &w,
        &sr("int a = 100;\n", "int a = 2;\n"),
        &["a.c".into()],
        &opts,
    )
    .await
    .unwrap();
    assert!(!report.ok);
    assert_eq!(report.edits[0].failure, Some("stale"));
    assert!(
        report.edits[0]
            .error
            .as_deref()
            .unwrap()
            .contains("a.c changed since you were shown it")
    );
    assert_eq!(ws.read("a.c"), "int a = 100;\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_input_makes_a_format_plugin_trap() {
    use proptest::strategy::{Strategy, ValueTree};
    use proptest::test_runner::TestRunner;
    let ws = Workspace::new();
    let (rt, config) = formats(&ws).await;
    let reg = Registry::load(&rt, &ws.root(), &config).await.unwrap();
    let pieces = [
        "<<<<<<< SEARCH\n",
        "=======\n",
        ">>>>>>> REPLACE\n",
        "<<< path=a.c >>>\n",
        "--- a/a.c\n",
        "+++ b/a.c\n",
        "@@\n",
        "-x\n",
        "+y\n",
        " z\n",
        "*** Begin Patch\n",
        "*** End Patch\n",
        "*** Update File: a.c\n",
        "*** Move to: b.c\n",
        "```\n",
        "a.c\n",
        "\r\n",
        "\u{feff}",
        "é",
        "\0",
    ];
    let strategy = proptest::collection::vec(proptest::sample::select(pieces.to_vec()), 0..40);
    let mut runner = TestRunner::deterministic();
    for name in ["search-replace", "udiff", "whole", "apply-patch"] {
        let format = reg.get(name, Some(PluginKind::EditFormat)).unwrap();
        for _ in 0..150 {
            let input: String = strategy.new_tree(&mut runner).unwrap().current().concat();
            for targets in [
                vec!["a.c".to_string()],
                vec!["a.c".to_string(), "b.c".to_string()],
            ] {
                let parsed = format
                    .format_parse(&input, &targets)
                    .await
                    .unwrap_or_else(|e| panic!("{name} trapped on {input:?}: {e}"));
                if let Ok(edits) = parsed {
                    let mine: Vec<_> = edits.into_iter().filter(|e| e.path == "a.c").collect();
                    let _outcome = format
                        .format_apply("a.c", Some("x\nz\n"), &mine)
                        .await
                        .unwrap_or_else(|e| panic!("{name} apply trapped on {input:?}: {e}"));
                }
            }
        }
    }
}

#[test]
fn a_filename_line_naming_a_file_outside_the_run_is_refused() {
    // Issue 31, item 1: the block's filename line names utils.py; the run may change main.py.
    let ws = Workspace::new();
    ws.write("main.py", "x = 1\n");
    ws.write("utils.py", "x = 1\n");
    let r = ws.kiln_stdin(
        &["edit", "apply", "--files", "main.py", "--json"],
        &format!("utils.py\n{}", sr("x = 1\n", "x = 2\n")),
    );
    r.expect_code(1);
    let msg = r.json()["parse_errors"][0]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        msg.contains("utils.py") && msg.contains("(main.py)"),
        "{msg}"
    );
    assert_eq!(ws.read("main.py"), "x = 1\n");
    assert_eq!(ws.read("utils.py"), "x = 1\n");
    // Naming the target itself (or as `./main.py`) applies.
    ws.kiln_stdin(
        &["edit", "apply", "--files", "main.py"],
        &format!("./main.py\n{}", sr("x = 1\n", "x = 2\n")),
    )
    .expect_code(0);
    assert_eq!(ws.read("main.py"), "x = 2\n");

    // Several targets: a block named for c.py is refused, not given to the previous block's file.
    ws.write("a.py", "a = 1\n");
    ws.write("b.py", "b = 1\n");
    ws.write("c.py", "a = 1\n");
    let r = ws.kiln_stdin(
        &["edit", "apply", "--files", "a.py", "b.py", "--json"],
        &format!(
            "a.py\n{}\nc.py\n{}",
            sr("a = 1\n", "a = 2\n"),
            sr("a = 2\n", "a = 3\n")
        ),
    );
    r.expect_code(1);
    let msg = r.json()["parse_errors"][0]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(msg.contains("c.py") && msg.contains("a.py, b.py"), "{msg}");
    assert_eq!(
        (ws.read("a.py"), ws.read("c.py")),
        ("a = 1\n".into(), "a = 1\n".into())
    );
}

#[test]
fn without_files_an_unnamed_block_belongs_to_the_file_named_before_it() {
    // Issue 31, item 4 (Aider's rule): the second and third blocks name no file.
    let ws = Workspace::new();
    ws.write("foo.txt", "one\nthree\n");
    ws.write("bar.txt", "five\nsix\n");
    let response = format!(
        "Here's the change:\n\n```text\nfoo.txt\n{}\n...\n\n{}```\n\nbar.txt\n```\n{}```\n\n```\n{}```\n",
        sr("one\n", "two\n"),
        sr("three\n", "four\n"),
        sr("five\n", "5\n"),
        sr("six\n", "6\n"),
    );
    let r = ws.kiln_stdin(&["edit", "apply", "--json"], &response);
    r.expect_code(0);
    let paths: Vec<String> = r.json()["edits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(paths, ["foo.txt", "foo.txt", "bar.txt", "bar.txt"]);
    assert_eq!(ws.read("foo.txt"), "two\nfour\n");
    assert_eq!(ws.read("bar.txt"), "5\n6\n");
}

#[test]
fn udiff_a_dev_null_hunk_that_removes_lines_is_refused() {
    // Issue 31, item 3: `--- /dev/null` with `-` lines is malformed, not a creation without them.
    let ws = Workspace::new();
    let r = ws.kiln_stdin(
        &["edit", "apply", "--format", "udiff", "--json"],
        "```diff\n--- /dev/null\n+++ file.txt\n@@ ... @@\n-Original\n+Modified\n```\n",
    );
    r.expect_code(1);
    let msg = r.json()["parse_errors"][0]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        msg.contains("/dev/null") && msg.contains("only `+` lines"),
        "{msg}"
    );
    assert!(!ws.root().join("file.txt").exists());
    // A diff to a file that does not exist gets udiff's advice, not search-replace's.
    let r = ws.kiln_stdin(
        &["edit", "apply", "--format", "udiff", "--json"],
        "--- a/nope.txt\n+++ b/nope.txt\n@@ -1 +1 @@\n-a\n+b\n",
    );
    r.expect_code(1);
    let msg = r.json()["edits"][0]["error"].as_str().unwrap().to_string();
    assert!(
        msg.contains("--- /dev/null") && !msg.contains("SEARCH"),
        "{msg}"
    );
}

/// Apply `patch` (apply-patch) to a workspace holding `files`; the run and the workspace.
fn apply_patch(files: &[(&str, &str)], patch: &str) -> (crate::support::Run, Workspace) {
    let ws = Workspace::new();
    for (p, t) in files {
        ws.write(p, t);
    }
    let r = ws.kiln_stdin(
        &["edit", "apply", "--format", "apply-patch", "--json"],
        patch,
    );
    (r, ws)
}

#[test]
fn apply_patch_chunks_as_codex_defines_them() {
    // Issue 31, item 2. Only `+` lines: appended at the end of the file.
    let (r, ws) = apply_patch(
        &[("input.txt", "line1\nline2\n")],
        "*** Begin Patch\n*** Update File: input.txt\n@@\n+added line 1\n+added line 2\n*** End Patch\n",
    );
    r.expect_code(0);
    assert_eq!(
        ws.read("input.txt"),
        "line1\nline2\nadded line 1\nadded line 2\n"
    );
    // ... or right after the `@@` line's text.
    let (r, ws) = apply_patch(
        &[("m.py", "def f():\n    return 1\n\ndef g():\n    return 2\n")],
        "*** Begin Patch\n*** Update File: m.py\n@@ def f():\n+    \"\"\"F.\"\"\"\n*** End Patch\n",
    );
    r.expect_code(0);
    assert_eq!(
        ws.read("m.py"),
        "def f():\n    \"\"\"F.\"\"\"\n    return 1\n\ndef g():\n    return 2\n"
    );
    // An addition followed by a removal, as Codex's own unit test has it.
    let (r, ws) = apply_patch(
        &[("p.txt", "line1\nline2\nline3\n")],
        "*** Begin Patch\n*** Update File: p.txt\n@@\n+after-context\n+second-line\n@@\n line1\n-line2\n-line3\n+line2-replacement\n*** End Patch\n",
    );
    r.expect_code(0);
    assert_eq!(
        ws.read("p.txt"),
        "line1\nline2-replacement\nafter-context\nsecond-line\n"
    );
    // `*** End of File`: the chunk's lines are the file's last ones, though they occur before.
    let (r, ws) = apply_patch(
        &[("tail.txt", "end\nmiddle\nend\n")],
        "*** Begin Patch\n*** Update File: tail.txt\n@@\n-end\n+END\n*** End of File\n*** End Patch\n",
    );
    r.expect_code(0);
    assert_eq!(ws.read("tail.txt"), "end\nmiddle\nEND\n");
    // The text after `@@` tells repeated snippets apart instead of refusing them as ambiguous;
    // several `@@` lines narrow in turn (a class, then its method).
    let file = "class A:\n    def f(self):\n        return 1\n\nclass B:\n    def f(self):\n        return 1\n";
    let (r, ws) = apply_patch(
        &[("c.py", file)],
        "*** Begin Patch\n*** Update File: c.py\n@@ class B:\n@@     def f(self):\n-        return 1\n+        return 2\n*** End Patch\n",
    );
    r.expect_code(0);
    assert_eq!(
        ws.read("c.py"),
        "class A:\n    def f(self):\n        return 1\n\nclass B:\n    def f(self):\n        return 2\n"
    );
    // Without the `@@` text the same chunk is ambiguous, and refused in apply-patch's words.
    let (r, ws) = apply_patch(
        &[("c.py", file)],
        "*** Begin Patch\n*** Update File: c.py\n@@\n-        return 1\n+        return 2\n*** End Patch\n",
    );
    r.expect_code(1);
    let msg = r.json()["edits"][0]["error"].as_str().unwrap().to_string();
    assert!(
        msg.starts_with("chunk 1: the chunk matches 2 places"),
        "{msg}"
    );
    assert_eq!(ws.read("c.py"), file);
}

#[test]
fn apply_patch_headers_padded_with_spaces_and_refusals_in_its_own_words() {
    // Issue 31, item 2: a file header padded with spaces is a header.
    let (r, ws) = apply_patch(
        &[("foo.txt", "old\n")],
        " *** Begin Patch\n  *** Update File: foo.txt\n@@\n-old\n+new\n *** End Patch \n",
    );
    r.expect_code(0);
    assert_eq!(ws.read("foo.txt"), "new\n");
    // Updating a file that does not exist: apply-patch's advice.
    let (r, _ws) = apply_patch(
        &[],
        "*** Begin Patch\n*** Update File: missing.txt\n@@\n-old\n+new\n*** End Patch\n",
    );
    r.expect_code(1);
    let msg = r.json()["edits"][0]["error"].as_str().unwrap().to_string();
    assert!(
        msg.contains("*** Add File: missing.txt") && !msg.contains("SEARCH"),
        "{msg}"
    );
    // Add over an existing file and Move onto one are refused (documented), never overwrite.
    let (r, ws) = apply_patch(
        &[("duplicate.txt", "old content\n")],
        "*** Begin Patch\n*** Add File: duplicate.txt\n+new content\n*** End Patch\n",
    );
    r.expect_code(1);
    let msg = r.json()["edits"][0]["error"].as_str().unwrap().to_string();
    assert!(
        msg.contains("already exists") && msg.contains("*** Update File: duplicate.txt"),
        "{msg}"
    );
    assert_eq!(ws.read("duplicate.txt"), "old content\n");
    let (r, ws) = apply_patch(
        &[
            ("old/name.txt", "from\n"),
            ("renamed/name.txt", "existing\n"),
        ],
        "*** Begin Patch\n*** Update File: old/name.txt\n*** Move to: renamed/name.txt\n@@\n-from\n+new\n*** End Patch\n",
    );
    r.expect_code(1);
    assert!(
        r.json()["edits"][1]["error"]
            .as_str()
            .unwrap()
            .contains("renamed/name.txt already exists")
    );
    assert_eq!(ws.read("renamed/name.txt"), "existing\n");
    assert_eq!(ws.read("old/name.txt"), "from\n");
}

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

//! Snapshots (insta) of what a person reads, from the real `kiln` binary: `kiln --help` and two
//! commands' help, two common errors, the human lines of a short fix run against the mock model
//! and the HTML report of that run. Paths, temporary directories, times, durations and ids are
//! filtered to placeholders; anything else that changes fails the test. The snapshots live in
//! tests/integration/snapshots/; review a change with `cargo insta review` (or run with
//! `INSTA_UPDATE=always` and read `git diff`).

use crate::mock_llm::{MockLlm, openai_text};
use crate::support::{Run, Workspace, sr};

/// Settings with the filters for what differs between runs: the test's temporary directory
/// (and the workspace inside it), the mock model's port, dates, times, durations and run ids.
fn settings(ws: &Workspace) -> insta::Settings {
    let mut s = insta::Settings::clone_current();
    s.set_prepend_module_to_snapshot(false);
    s.set_omit_expression(true);
    let tmp = ws.path().to_string_lossy().into_owned();
    let canon = ws.path().canonicalize().unwrap();
    for dir in [canon.to_string_lossy().into_owned(), tmp] {
        s.add_filter(&regex_escape(&format!("{dir}/ws")), "[WS]");
        s.add_filter(&regex_escape(&dir), "[TMP]");
    }
    s.add_filter(r"127\.0\.0\.1:\d+", "127.0.0.1:[PORT]");
    // Said only when the shared compile cache lacks a component (the first test to need it).
    s.add_filter(r"(?m)^kiln: compiling .*cached afterwards\)…\n", "");
    s.add_filter(
        r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?Z?",
        "[TIME]",
    );
    s.add_filter(r"\b\d+(\.\d+)? ?(ms|s)\b", "[DURATION]");
    // Run ids, as the lines (`loop 1 started`) and the report's title (`kiln run 1`) name them.
    s.add_filter(r"\b(run|loop) \d+\b", "$1 [ID]");
    s
}

/// `text` with the characters a regex gives meaning to escaped.
fn regex_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if "\\.+*?()|[]{}^$#&-~".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A run's exit code, stdout and stderr as one text.
fn shown(r: &Run) -> String {
    format!(
        "exit: {}\n--- stdout\n{}--- stderr\n{}",
        r.code(),
        r.stdout(),
        r.stderr()
    )
}

/// `kiln ARGS` as a person runs it: without the tests' `KILN_YES`, which clap's help shows.
fn help(ws: &Workspace, args: &[&str]) -> String {
    let mut cmd = ws.command(args);
    cmd.env_remove("KILN_YES");
    shown(&Run(cmd.output().unwrap()))
}

#[test]
fn help_texts() {
    let ws = Workspace::new();
    settings(&ws).bind(|| {
        insta::assert_snapshot!("help", help(&ws, &["--help"]));
        insta::assert_snapshot!("help_fix", help(&ws, &["fix", "--help"]));
        insta::assert_snapshot!("help_report", help(&ws, &["report", "--help"]));
    });
}

#[test]
fn common_errors() {
    let ws = Workspace::new();
    ws.write("main.c", "int main(void) { return 0; }\n");
    settings(&ws).bind(|| {
        // No model anywhere: the fix loop says where one can be set.
        let r = ws.kiln(&["fix", "--cmd", "true", "--file", "main.c"], &[]);
        insta::assert_snapshot!("error_no_model", shown(&r));
        // A misspelt runner: the closest name and every plugin.
        let r = ws.kiln(&["check", "--runner", "cago", "--file", "main.c"], &[]);
        insta::assert_snapshot!("error_unknown_runner", shown(&r));
    });
}

#[test]
fn fix_run_lines_and_its_report() {
    let ws = Workspace::new();
    ws.write("x.txt", "line one\nbroken\n");
    ws.write(
        "check.sh",
        "if grep -q broken \"$1\"; then echo \"$1:2:1: error: still broken\"; exit 1; fi\n",
    );
    let mock = MockLlm::start(vec![openai_text(&format!(
        "I changed the line.\n\n{}",
        sr("broken\n", "mended\n")
    ))]);
    let base = format!("{}/v1", mock.url);
    let r = ws.kiln(
        &[
            "fix",
            "--base-url",
            &base,
            "--model",
            "test-model",
            "--cmd",
            "sh check.sh {file}",
            "--file",
            "x.txt",
        ],
        &[],
    );
    let id = ws.store().loops(1).unwrap().remove(0).id;
    let page = ws.path().join("report.html");
    let rep = ws.kiln(
        &["report", &id.to_string(), "--html", page.to_str().unwrap()],
        &[],
    );
    rep.expect_code(0);
    let html = std::fs::read_to_string(&page).unwrap();

    settings(&ws).bind(|| {
        insta::assert_snapshot!("fix_run_human", shown(&r));
        insta::assert_snapshot!("fix_run_report", html);
    });
}

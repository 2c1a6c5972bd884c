//! `kiln fix` in project mode (no `--file`): the diagnostics name the files, the model looks
//! around with read-only tools (bounded), answers in the multi-file format and may change
//! any file that is not protected, at most `--max-files` per answer (issue 33 item 1).

use crate::mock_llm::{MockLlm, call, openai_text, tool_contents};
use crate::support::{Run, Workspace, fix_result, sr};
use serde_json::{Value, json};

const MAIN_C: &str = "#include \"util.h\"\n\nint main(void) { return helper(); }\n";
const BROKEN_H: &str = "static int helper(void) { return 0 }\n";
const FIXED_H: &str = "static int helper(void) { return 0; }\n";
/// The runner: gcc over main.c only; util.h is named by no flag.
const GCC: &[&str] = &["--cmd", "gcc -fsyntax-only main.c"];

fn fix(ws: &Workspace, mock: &MockLlm, args: &[&str]) -> Run {
    let base = format!("{}/v1", mock.url);
    let mut all = vec![
        "fix",
        "--base-url",
        &base,
        "--model",
        "test-model",
        "--json",
    ];
    all.extend_from_slice(args);
    ws.kiln(&all, &[("OPENAI_API_KEY", "sk-project-test")])
}

/// A multi-file answer: one SEARCH/REPLACE block per `(path, search, replace)`.
fn answer(edits: &[(&str, &str, &str)]) -> String {
    let mut s = String::from("Here is the fix.\n\n");
    for (path, search, replace) in edits {
        s.push_str(&format!("<<< path={path} >>>\n{}", sr(search, replace)));
    }
    s
}

fn events(r: &Run, kind: &str) -> Vec<Value> {
    r.stdout()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == kind)
        .collect()
}

fn tool_names(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .map(|t| {
            t.iter()
                .map(|t| t["function"]["name"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn project() -> Workspace {
    let ws = Workspace::new();
    ws.write("main.c", MAIN_C);
    ws.write("util.h", BROKEN_H);
    ws
}

#[test]
fn project_mode_fixes_a_file_no_flag_named_after_reading_it() {
    let ws = project();
    let mock = MockLlm::start(vec![
        call("read_files", json!({"paths": ["util.h"]})),
        openai_text(&answer(&[(
            "util.h",
            "static int helper(void) { return 0 }\n",
            "static int helper(void) { return 0; }\n",
        )])),
    ]);
    let r = fix(&ws, &mock, GCC);
    r.expect_code(0);
    let res = fix_result(&r);
    assert_eq!(res["stop_reason"], "success", "{res}");
    assert_eq!(
        res["modified_files"],
        json!([ws.root().join("util.h").to_string_lossy()])
    );
    assert_eq!(ws.read("util.h"), FIXED_H);
    assert_eq!(ws.read("main.c"), MAIN_C);
    let reqs = mock.recorded();
    assert_eq!(reqs.len(), 2);
    // The first prompt: the failure and the code of the file the diagnostics name, the
    // multi-file format, and the read-only tools.
    let first = reqs[0].body.to_string();
    assert!(first.contains("Files named by the diagnostics"), "{first}");
    assert!(
        first.contains("return 0 }"),
        "util.h's code is shown: {first}"
    );
    assert!(first.contains("<<< path="), "multi-file instructions");
    let offered = tool_names(&reqs[0].body);
    for t in ["read_files", "search_repo", "list_dir", "loop_stop"] {
        assert!(offered.contains(&t.to_string()), "{t} in {offered:?}");
    }
    assert!(!offered.iter().any(|t| t == "write_file" || t == "run_cmd"));
    // The model's read_files call was answered with the file's text.
    let results = tool_contents(&mock, 1);
    assert!(
        results.iter().any(|c| c.contains("return 0 }")),
        "{results:?}"
    );
    let started = events(&r, "tool.start");
    assert_eq!(started.len(), 1, "{}", r.stdout());
    assert_eq!(started[0]["name"], "read_files");
    // The history says the loop worked on the whole project.
    let id = res["loop_id"].to_string();
    let h = ws.kiln(&["history", "show", &id], &[]);
    assert!(
        h.stdout().contains("targets: the whole project"),
        "{}",
        h.stdout()
    );
    let list = ws.kiln(&["history"], &[]);
    assert!(list.stdout().contains("(project)"), "{}", list.stdout());
    // Undo puts the project back as it was, as for named targets.
    ws.kiln(&["undo"], &[]).expect_code(0);
    assert_eq!(ws.read("util.h"), BROKEN_H);
}

#[test]
fn the_tool_rounds_are_bounded() {
    let ws = project();
    let read = || call("read_files", json!({"paths": ["util.h"]}));
    let mock = MockLlm::start(vec![
        read(),
        // Past the last round: not answered, and the iteration applies nothing.
        read(),
        openai_text(&answer(&[(
            "util.h",
            "static int helper(void) { return 0 }\n",
            "static int helper(void) { return 0; }\n",
        )])),
    ]);
    let mut args = GCC.to_vec();
    args.extend(["--tool-rounds", "1"]);
    let r = fix(&ws, &mock, &args);
    r.expect_code(0);
    let res = fix_result(&r);
    assert_eq!(res["stop_reason"], "success", "{res}");
    assert_eq!(res["iters"], 2, "{res}");
    let reqs = mock.recorded();
    assert_eq!(reqs.len(), 3);
    // After the one round, the tools are gone but `loop_stop`, and the model is told so.
    assert_eq!(tool_names(&reqs[1].body), ["loop_stop"]);
    assert!(
        tool_contents(&mock, 1)
            .iter()
            .any(|c| c.contains("last round of tool calls"))
    );
    assert_eq!(events(&r, "tool.start").len(), 1, "{}", r.stdout());
    // The next iteration offers them again.
    assert!(tool_names(&reqs[2].body).contains(&"read_files".to_string()));
}

#[test]
fn project_mode_refuses_an_edit_to_a_protected_path_whole() {
    let ws = project();
    ws.write(".git/config", "[core]\n");
    let mock = MockLlm::start(vec![openai_text(&answer(&[
        (
            "util.h",
            "static int helper(void) { return 0 }\n",
            "static int helper(void) { return 0; }\n",
        ),
        (".git/config", "[core]\n", "[core]\n\thooksPath = /tmp\n"),
    ]))]);
    let mut args = GCC.to_vec();
    args.extend(["--tool-rounds", "0"]);
    let r = fix(&ws, &mock, &args);
    let res = fix_result(&r);
    assert_eq!(res["stop_reason"], "blocked", "{res}");
    assert!(
        res["summary"].as_str().unwrap().contains("protected"),
        "{res}"
    );
    // All or nothing: the allowed edit was not applied either.
    assert_eq!(ws.read(".git/config"), "[core]\n");
    assert_eq!(ws.read("util.h"), BROKEN_H);
    // With no tool rounds, no look-around tool is offered, nor spoken of.
    let body = &mock.recorded()[0].body;
    assert_eq!(tool_names(body).len(), 3, "loop_stop and history");
    assert!(!body.to_string().contains("read_files"), "{body}");
}

#[test]
fn project_mode_refuses_more_than_max_files() {
    let ws = project();
    ws.write("other.h", "int other;\n");
    let two = answer(&[
        (
            "util.h",
            "static int helper(void) { return 0 }\n",
            "static int helper(void) { return 0; }\n",
        ),
        ("other.h", "int other;\n", "int other = 1;\n"),
    ]);
    let mock = MockLlm::start(vec![openai_text(&two)]);
    let mut args = GCC.to_vec();
    args.extend(["--max-files", "1"]);
    let r = fix(&ws, &mock, &args);
    let res = fix_result(&r);
    assert_eq!(res["stop_reason"], "blocked", "{res}");
    assert!(
        res["summary"].as_str().unwrap().contains("--max-files"),
        "{res}"
    );
    assert_eq!(ws.read("util.h"), BROKEN_H);
    assert_eq!(ws.read("other.h"), "int other;\n");

    // The same answer within the default limit applies.
    let mock = MockLlm::start(vec![openai_text(&two)]);
    let r = fix(&ws, &mock, GCC);
    assert_eq!(fix_result(&r)["stop_reason"], "success", "{}", r.stdout());
    assert_eq!(ws.read("other.h"), "int other = 1;\n");
}

#[test]
fn project_mode_without_a_runner_asks_for_one() {
    let ws = project();
    let mock = MockLlm::start(vec![]);
    let r = fix(&ws, &mock, &[]);
    assert_ne!(r.code(), 0);
    assert!(
        r.stderr().contains("name a runner with --runner or --cmd"),
        "{}",
        r.stderr()
    );
    assert!(mock.recorded().is_empty());
}

/// Issue 33 item 5: a check that outlives the runner's deadline stops the loop as `timeout`,
/// says so, names the setting, and never asks the model.
#[test]
fn a_runner_that_outlives_its_deadline_ends_timeout_without_asking_the_model() {
    let ws = project();
    let mock = MockLlm::start(vec![openai_text("never asked")]);
    let start = std::time::Instant::now();
    let r = fix(&ws, &mock, &["--cmd", "sleep 30", "--timeout", "1"]);
    assert!(start.elapsed() < std::time::Duration::from_secs(20));
    let res = fix_result(&r);
    assert_eq!(res["stop_reason"], "timeout", "{res}");
    let summary = res["summary"].as_str().unwrap();
    assert!(
        summary.contains("ran out of time after 1 s") && summary.contains("--timeout"),
        "{summary}"
    );
    assert!(mock.recorded().is_empty(), "the model was asked");
    assert_ne!(r.code(), 0);

    // `[fix] timeout` in the user's configuration sets it too.
    ws.user_config("[fix]\ntimeout = 1\n");
    let r = fix(&ws, &mock, &["--cmd", "sleep 30", "--file", "main.c"]);
    let res = fix_result(&r);
    assert_eq!(res["stop_reason"], "timeout", "{res}");
    assert!(mock.recorded().is_empty(), "the model was asked");

    // `kiln check` takes --timeout as well.
    ws.user_config("");
    let start = std::time::Instant::now();
    let r = ws.kiln(
        &[
            "check",
            "--cmd",
            "sleep 30",
            "--file",
            "main.c",
            "--timeout",
            "1",
            "--json",
        ],
        &[],
    );
    assert!(start.elapsed() < std::time::Duration::from_secs(20));
    assert_eq!(r.json()["timed_out"], true, "{}", r.stdout());
}

/// Issue 33 item 2: run from a subdirectory, kiln finds the root (the nearest directory
/// holding `.git`, `kiln.toml` or `.kiln`); paths on the command line are relative to the
/// current directory; the history is the root's.
#[test]
fn run_from_a_subdirectory_kiln_finds_the_root() {
    let ws = Workspace::new();
    std::fs::create_dir_all(ws.root().join(".git")).unwrap();
    ws.write("main.c", "int main(void) { return 0 }\n");
    ws.write("src/lib.c", "int lib;\n");
    let sub = ws.root().join("src");
    let mock = MockLlm::start(vec![openai_text(&answer(&[(
        "main.c",
        "int main(void) { return 0 }\n",
        "int main(void) { return 0; }\n",
    )]))]);
    let base = format!("{}/v1", mock.url);
    let run = |args: &[&str]| {
        let mut cmd = ws.command(args);
        cmd.current_dir(&sub).env("OPENAI_API_KEY", "sk-root-test");
        Run(cmd.output().unwrap())
    };
    let r = run(&[
        "fix",
        "--base-url",
        &base,
        "--model",
        "test-model",
        "--json",
        "--cmd",
        "gcc -fsyntax-only {files}",
        "--files",
        "../main.c",
    ]);
    let res = fix_result(&r);
    assert_eq!(res["stop_reason"], "success", "{res}\n{}", r.stderr());
    assert_eq!(ws.read("main.c"), "int main(void) { return 0; }\n");
    assert_eq!(
        res["modified_files"],
        json!([ws.root().join("main.c").to_string_lossy()])
    );
    // One history, the root's; no second .kiln/ in the subdirectory.
    let loops = ws.store().loops(10).unwrap();
    assert_eq!(loops.len(), 1);
    assert_eq!(loops[0].targets, ["main.c"]);
    assert!(!sub.join(".kiln").exists());
    // The banner says which root was chosen, once; a path in the subdirectory is relative
    // to it.
    let r = run(&[
        "fix",
        "--base-url",
        &base,
        "--model",
        "test-model",
        "--cmd",
        "gcc -fsyntax-only {files}",
        "--file",
        "lib.c",
    ]);
    r.expect_code(0);
    let line = format!(
        "workspace: {} (the nearest directory holding .git)",
        ws.root().canonicalize().unwrap().display()
    );
    assert_eq!(r.stderr().matches(&line).count(), 1, "{}", r.stderr());
    assert_eq!(ws.store().loops(10).unwrap()[0].targets, ["src/lib.c"]);
    // `kiln check` too.
    let r = run(&[
        "check",
        "--cmd",
        "gcc -fsyntax-only {file}",
        "--file",
        "../main.c",
    ]);
    r.expect_code(0);
    assert!(r.stderr().contains(&line), "{}", r.stderr());
    assert!(r.stderr().contains("checking main.c"), "{}", r.stderr());
}

/// Issue 33 item 8: `--cmd` with shell syntax is refused (no shell runs it), or run through
/// `sh -c` with `--shell`.
#[test]
fn a_cmd_with_shell_syntax_is_refused_or_run_through_sh_with_shell() {
    let ws = Workspace::new();
    ws.write("main.c", "int main(void) { return 0; }\n");
    let mock = MockLlm::start(vec![]);
    for cmd in [
        "gcc -fsyntax-only main.c && echo ok",
        "gcc -fsyntax-only main.c | cat",
        "CC=gcc make",
        "gcc -fsyntax-only main.c > log",
    ] {
        let r = fix(&ws, &mock, &["--cmd", cmd, "--file", "main.c"]);
        r.expect_code(2);
        assert!(
            r.stderr().contains("no shell runs it; use `sh -c '…'`"),
            "{cmd}: {}",
            r.stderr()
        );
    }
    assert!(!ws.root().join("log").exists());
    // With --shell, `sh -c` runs it: both sides of `&&` run, the redirection writes.
    let r = fix(
        &ws,
        &mock,
        &[
            "--shell",
            "--cmd",
            "gcc -fsyntax-only main.c && echo \"it ran\" > log",
            "--file",
            "main.c",
        ],
    );
    let res = fix_result(&r);
    assert_eq!(res["stop_reason"], "success", "{res}\n{}", r.stderr());
    assert_eq!(ws.read("log"), "it ran\n");
    assert!(mock.recorded().is_empty());
    // A line break is shell syntax too.
    let r = fix(
        &ws,
        &mock,
        &["--cmd", "true\ntouch two", "--file", "main.c"],
    );
    r.expect_code(2);
    assert!(r.stderr().contains("a line break"), "{}", r.stderr());
    // Under --shell a target's name is never shell text: a file named like a command stays
    // a name (it is `sh`'s argument, `"$1"` in the script).
    for name in ["x;touch p20;.txt", "$(touch p21).txt"] {
        ws.write(name, "text\n");
        let r = ws.kiln(
            &["check", "--shell", "--cmd", "cat {file}", "--file", name],
            &[],
        );
        r.expect_code(0);
        assert!(
            r.stderr().contains("passed") || r.stdout().is_empty(),
            "{}",
            r.stderr()
        );
    }
    assert!(
        !ws.root().join("p20").exists(),
        "injected through a file name"
    );
    assert!(
        !ws.root().join("p21").exists(),
        "injected through a file name"
    );
}

/// Issue 33 item 9: the model error points at the user's configuration or KILN_MODEL, not at
/// a workspace kiln.toml that is untrusted (and whose `model` is ignored).
#[test]
fn no_model_points_at_the_user_config_not_kiln_toml() {
    let ws = Workspace::new();
    ws.write("main.c", "int main(void) { return 0; }\n");
    let r = ws.kiln(&["fix", "--cmd", "true", "--file", "main.c"], &[]);
    r.expect_code(2);
    let err = r.stderr();
    // The user's configuration by its real path (KILN_CONFIG here).
    let user_config = ws.path().join("no-user-config.toml");
    assert!(
        err.contains("KILN_MODEL") && err.contains(&user_config.display().to_string()),
        "{err}"
    );
    assert!(!err.contains("under [llm] in kiln.toml"), "{err}");
}

/// `compile_loop` without targets runs the fix loop in project mode: the answer may change a
/// file the call never named.
#[test]
fn compile_loop_without_targets_fixes_the_project() {
    let ws = project();
    let mock = MockLlm::start(vec![
        call("compile_loop", json!({"spec": "make it compile"})),
        openai_text(&answer(&[(
            "util.h",
            "static int helper(void) { return 0 }\n",
            "static int helper(void) { return 0; }\n",
        )])),
        call("final_answer", json!({"summary": "compiles now"})),
    ]);
    let r = crate::support::agent(
        &ws,
        &mock,
        &[
            "--prompt",
            "make it compile",
            "--test-command",
            "gcc -fsyntax-only main.c",
        ],
    );
    r.expect_code(0);
    let cl: Value = serde_json::from_str(&tool_contents(&mock, 2)[0]).unwrap();
    assert_eq!(cl["ok"], true, "{cl}");
    assert_eq!(
        cl["modified_files"],
        json!([ws.root().join("util.h").to_string_lossy()])
    );
    assert_eq!(ws.read("util.h"), FIXED_H);
}

/// Issue 33 item 7: `runner.started` comes before the runner runs (the first check's before
/// `loop.started`, which waits for its answer), so a long build shows at once.
#[test]
fn runner_started_comes_before_the_runner_runs() {
    use std::io::BufRead;
    let ws = project();
    let mut child = ws
        .command(&[
            "fix",
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--model",
            "m",
            "--json",
            "--cmd",
            "sleep 30",
        ])
        .env("OPENAI_API_KEY", "sk-started")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let waited = start.elapsed();
    // SAFETY: sending SIGINT to the child we spawned.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let _ = child.wait();
    let e: Value = serde_json::from_str(&first).unwrap_or_else(|e| panic!("{e}: {first}"));
    assert_eq!(e["type"], "runner.started", "{e}");
    assert_eq!(e["command"], "sleep 30");
    assert_eq!(e["targets"], json!([]));
    assert!(waited < std::time::Duration::from_secs(20), "{waited:?}");
}

/// Issue 33 item 7: `kiln fix` streams the model's text to a person, as `kiln agent` does.
#[test]
fn fix_streams_the_models_text() {
    let ws = project();
    let mock = MockLlm::start(vec![openai_text(&answer(&[(
        "util.h",
        "static int helper(void) { return 0 }\n",
        "static int helper(void) { return 0; }\n",
    )]))]);
    let base = format!("{}/v1", mock.url);
    let r = ws.kiln(
        &[
            "fix",
            "--base-url",
            &base,
            "--model",
            "test-model",
            "--cmd",
            "gcc -fsyntax-only main.c",
        ],
        &[("OPENAI_API_KEY", "sk-stream")],
    );
    r.expect_code(0);
    let err = r.stderr();
    assert!(err.contains("Here is the fix."), "{err}");
    assert!(
        err.contains("[0] checking the project: `gcc -fsyntax-only main.c`…"),
        "{err}"
    );
}

/// Issue 33 item 7: a long check says it is still running, with the time elapsed.
#[test]
fn a_long_check_says_it_is_still_running() {
    let ws = project();
    let mock = MockLlm::start(vec![]);
    let r = fix(&ws, &mock, &["--cmd", "sleep 11"]);
    let res = fix_result(&r);
    assert_eq!(res["stop_reason"], "success", "{res}");
    let types: Vec<String> = r
        .stdout()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|e| e["type"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(
        types[..4],
        [
            "runner.started",
            "runner.progress",
            "loop.started",
            "runner.finished"
        ],
        "{types:?}"
    );
    assert_eq!(events(&r, "runner.progress")[0]["elapsed_s"], 10);
}

/// Issue 33 item 5 in `compile_loop`: the agent's build runs under `[fix] timeout` too, and
/// one that outlives it ends `timeout` without asking the nested loop's model.
#[test]
fn compile_loop_ends_timeout_under_fix_timeout() {
    let ws = project();
    ws.user_config("[fix]\ntimeout = 1\n");
    let mock = MockLlm::start(vec![
        call("compile_loop", json!({"spec": "make it compile"})),
        call("final_answer", json!({"summary": "the build is too slow"})),
    ]);
    let start = std::time::Instant::now();
    let r = crate::support::agent(
        &ws,
        &mock,
        &["--prompt", "build it", "--test-command", "sleep 30"],
    );
    assert!(start.elapsed() < std::time::Duration::from_secs(20));
    r.expect_code(0);
    let cl: Value = serde_json::from_str(&tool_contents(&mock, 1)[0]).unwrap();
    assert_eq!(cl["stop_reason"], "timeout", "{cl}");
    assert_eq!(mock.recorded().len(), 2, "the nested loop asked the model");
}

#[test]
fn check_without_a_file_checks_the_whole_project() {
    let ws = Workspace::new();
    ws.write("t.txt", "BROKEN\n");
    // No --file: the runner checks the project, as `kiln fix` does without one.
    let r = ws.kiln(&["check", "--cmd", "grep -q FIXED t.txt"], &[]);
    r.expect_code(1);
    assert!(
        r.stderr()
            .contains("checking the project with runner `command`"),
        "{}",
        r.stderr()
    );
    ws.write("t.txt", "FIXED\n");
    let r = ws.kiln(&["check", "--cmd", "grep -q FIXED t.txt", "--json"], &[]);
    r.expect_code(0);
    assert_eq!(r.json()["ok"], true, "{}", r.stdout());
}

/// Every tool call of an answer gets its result: a call of a tool the loop does not offer
/// (`read_file` where `read_files` is offered, a common slip) is answered with an error naming
/// the closest tool and shown, so the next request leaves no call unanswered (the APIs refuse
/// such a request) and the model learns its slip.
#[test]
fn a_call_of_an_unknown_tool_is_answered_and_shown() {
    use crate::mock_llm::openai_calls;
    let ws = project();
    let mock = MockLlm::start(vec![
        openai_calls(&[
            ("read_files", r#"{"paths": ["util.h"]}"#),
            ("read_file", r#"{"path": "util.h"}"#),
        ]),
        openai_text(&answer(&[(
            "util.h",
            "static int helper(void) { return 0 }\n",
            "static int helper(void) { return 0; }\n",
        )])),
    ]);
    let r = fix(&ws, &mock, GCC);
    r.expect_code(0);
    assert_eq!(fix_result(&r)["stop_reason"], "success");
    let reqs = mock.recorded();
    assert_eq!(reqs.len(), 2);
    // The second request answers both calls of the first answer, in order.
    let msgs = reqs[1].body["messages"].as_array().unwrap();
    let asked: Vec<&str> = msgs
        .iter()
        .filter_map(|m| m["tool_calls"].as_array())
        .flatten()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    let answered: Vec<&str> = msgs
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["tool_call_id"].as_str().unwrap())
        .collect();
    assert_eq!(asked.len(), 2, "{msgs:?}");
    assert_eq!(asked, answered, "{msgs:?}");
    let results = tool_contents(&mock, 1);
    assert!(
        results.iter().any(
            |c| c.contains("unknown tool `read_file` (did you mean `read_files`?)")
                && c.contains("list_dir")
        ),
        "{results:?}"
    );
    let ended = events(&r, "tool.end");
    assert!(
        ended
            .iter()
            .any(|e| e["name"] == "read_file" && e["ok"] == false),
        "{}",
        r.stdout()
    );
}

/// A file the diagnostics name whose shown part would be huge (a minified bundle is one long
/// line: its 40-line window is the whole file) is named in the prompt, not pasted into it.
#[test]
fn a_minified_file_named_by_a_diagnostic_is_not_pasted_into_the_prompt() {
    let ws = Workspace::new();
    ws.write("min.js", &format!("var a=1;{}\n", "x=1;".repeat(100_000)));
    ws.write("app.c", "int main(void) { return 0 }\n");
    let mock = MockLlm::start(vec![openai_text("I cannot tell.")]);
    let r = fix(
        &ws,
        &mock,
        &[
            "--shell",
            "--cmd",
            "echo 'min.js:1:5: error: boom'; echo 'app.c:1:27: error: expected ;'; exit 1",
            "--max-iters",
            "1",
        ],
    );
    r.expect_code(1);
    let reqs = mock.recorded();
    assert_eq!(reqs.len(), 1);
    let body = reqs[0].body.to_string();
    assert!(body.len() < 100_000, "a {} byte request", body.len());
    assert!(
        body.contains("min.js (400009 bytes, 1 lines: too long to show here"),
        "{body}"
    );
    // The other file is shown as before.
    assert!(body.contains("int main(void) { return 0 }"), "{body}");
}

/// Project mode: the model picks the files, but not one undo keeps no copy of. A git-ignored
/// `.env` (the user's only copy of a secret) is refused as a protected path is, and stays
/// as it was; undo's count stays true.
#[test]
fn project_mode_refuses_an_edit_to_a_file_undo_keeps_no_copy_of() {
    let ws = project();
    let git = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(ws.root())
        .status()
        .unwrap();
    assert!(git.success());
    ws.write(".gitignore", ".env\n");
    ws.write(".env", "DB_PASSWORD=hunter2\n");
    let mock = MockLlm::start(vec![openai_text(&answer(&[
        (".env", "DB_PASSWORD=hunter2\n", "DB_PASSWORD=changed\n"),
        ("util.h", BROKEN_H, FIXED_H),
    ]))]);
    let r = fix(&ws, &mock, GCC);
    assert_eq!(ws.read(".env"), "DB_PASSWORD=hunter2\n");
    assert_eq!(ws.read("util.h"), BROKEN_H, "refused whole");
    let failed = events(&r, "edit.failed");
    assert!(
        failed.iter().any(|e| e["path"] == ".env"
            && e["error"]
                .as_str()
                .unwrap_or("")
                .contains("kiln keeps no copy of it to undo")),
        "{}",
        r.stdout()
    );
}

/// A monorepo: run from `py/`, which holds `pyproject.toml`, under a git root holding no
/// project file. kiln's root is the git root, where no runner is implied; it says where it
/// looked and which `-C` picks the sub-project, and `-C py` then finds pytest.
#[test]
fn from_a_sub_project_without_a_runner_at_the_root_kiln_names_the_sub_project() {
    let ws = Workspace::new();
    let git = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(ws.root())
        .status()
        .unwrap();
    assert!(git.success());
    ws.write("py/pyproject.toml", "[project]\nname = \"x\"\n");
    ws.write("py/pkg/mod.py", "X = 1\n");
    let mut cmd = ws.command(&["check"]);
    cmd.current_dir(ws.root().join("py/pkg"));
    let r = Run(cmd.output().unwrap());
    r.expect_code(2);
    let err = r.stderr();
    assert!(
        err.contains("no project file at the workspace root"),
        "{err}"
    );
    assert!(
        err.contains("py/pyproject.toml")
            && err.contains("`kiln -C ")
            && err.contains("python3 -m pytest"),
        "{err}"
    );
}

/// A program's output can name any path, and a repository can commit a link into `.git`:
/// a diagnostic naming `docs/config` where `docs -> .git` (or a link to a nested repository's
/// `config`) shows nothing of git's in the prompt; the workspace's own file beside it is shown.
#[test]
fn a_diagnostic_naming_a_link_into_git_shows_nothing_of_gits() {
    let ws = Workspace::new();
    let secret = "[http]\n\textraheader = AUTHORIZATION: basic c2VjcmV0LXRva2Vu\n";
    ws.write(".git/config", secret);
    ws.write("vendor/.git/config", secret);
    ws.write("app.c", "int main(void) { return 0 }\n");
    std::os::unix::fs::symlink(".git", ws.root().join("docs")).unwrap();
    std::os::unix::fs::symlink("vendor/.git/config", ws.root().join("cfg.c")).unwrap();
    let mock = MockLlm::start(vec![openai_text("I cannot tell.")]);
    let r = fix(
        &ws,
        &mock,
        &[
            "--shell",
            "--cmd",
            "echo 'docs/config:1:1: error: x'; echo 'cfg.c:1:1: error: y'; echo 'app.c:1:27: error: expected ;'; exit 1",
            "--max-iters",
            "1",
        ],
    );
    r.expect_code(1);
    let reqs = mock.recorded();
    assert_eq!(reqs.len(), 1, "{}", r.stderr());
    let body = reqs[0].body.to_string();
    assert!(
        !body.contains("c2VjcmV0LXRva2Vu") && !body.contains("extraheader"),
        "{body}"
    );
    assert!(body.contains("int main(void) { return 0 }"), "{body}");
}

/// Paths on the command line: a file of the workspace (`--file`, `--files`, `--task`) is
/// relative to the current directory inside the workspace, or to `-C DIR`; a file of the
/// user's (`--replay`, `--prompt-file`, `--system-file`, ...) is relative to the current
/// directory, `-C` or not, and a message about one names where it was looked for.
#[test]
fn workspace_files_follow_the_directory_inside_it_and_the_users_files_the_current_one() {
    let ws = Workspace::new();
    std::fs::create_dir_all(ws.root().join(".git")).unwrap();
    // `--task` from a subdirectory: the subdirectory's task file, as `--file` would be.
    ws.write("tasks/task.md", "Write hello.txt.\n");
    let mock = MockLlm::start(vec![
        openai_text("Nothing to do."),
        openai_text("Looks good to me."),
    ]);
    let base = format!("{}/v1", mock.url);
    let mut cmd = ws.command(&[
        "loop",
        "--base-url",
        &base,
        "--model",
        "test-model",
        "--json",
        "--task",
        "task.md",
        "--loops",
        "1",
    ]);
    cmd.current_dir(ws.root().join("tasks"))
        .env("OPENAI_API_KEY", "sk-t");
    let r = Run(cmd.output().unwrap());
    assert!(!r.stderr().contains("does not exist"), "{}", r.stderr());
    let parent = ws
        .store()
        .loops(10)
        .unwrap()
        .into_iter()
        .find(|l| l.kind == "loop")
        .expect("the loop row");
    assert_eq!(parent.targets, ["tasks/task.md"], "{}", r.stderr());

    // `-C DIR` from elsewhere: `--file` inside DIR, `--replay` and `--prompt-file` here.
    ws.write("x.txt", "v1\n");
    let here = ws.path().join("here");
    std::fs::create_dir_all(&here).unwrap();
    std::fs::write(
        here.join("answers.jsonl"),
        format!("{}\n", json!(sr("v1\n", "ok\n"))),
    )
    .unwrap();
    std::fs::write(here.join("prompt.txt"), "Make x.txt say ok.\n").unwrap();
    let root = ws.root();
    let fix_args = |prompt: &'static str| {
        vec![
            "-C".to_string(),
            root.to_string_lossy().into_owned(),
            "fix".into(),
            "--cmd".into(),
            "grep -q ok x.txt".into(),
            "--file".into(),
            "x.txt".into(),
            "--replay".into(),
            "answers.jsonl".into(),
            "--prompt-file".into(),
            prompt.into(),
        ]
    };
    let args = fix_args("prompt.txt");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut cmd = ws.command(&args);
    cmd.current_dir(&here);
    let r = Run(cmd.output().unwrap());
    r.expect_code(0);
    assert_eq!(ws.read("x.txt"), "ok\n");
    // A missing one is named with where it was looked for.
    let args = fix_args("nope.txt");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut cmd = ws.command(&args);
    cmd.current_dir(&here);
    let r = Run(cmd.output().unwrap());
    r.expect_code(2);
    assert!(
        r.stderr().contains(&format!(
            "cannot read --prompt-file nope.txt (in the current directory: {})",
            here.join("nope.txt").display()
        )),
        "{}",
        r.stderr()
    );
}

/// Two spellings of one file in an answer (`src//lib.h`, `./src/lib.h`, `src/lib.h`) are one
/// file: both edits land (the second used to be planned from the file's old text and to
/// overwrite the first) and `--max-files 1` lets the answer through (it counted two files).
#[test]
fn two_spellings_of_one_file_are_one_file() {
    let ws = Workspace::new();
    ws.write("src/lib.h", "int a = 0\nint b = 0\n");
    let cmd = ["--cmd", "grep -q 'int a = 1;' src/lib.h"];
    let both = answer(&[
        ("src//lib.h", "int a = 0\n", "int a = 1;\n"),
        ("./src/lib.h", "int b = 0\n", "int b = 1;\n"),
    ]);
    let mock = MockLlm::start(vec![openai_text(&both)]);
    let mut args = cmd.to_vec();
    args.extend(["--max-files", "1"]);
    let r = fix(&ws, &mock, &args);
    let res = fix_result(&r);
    assert_eq!(res["stop_reason"], "success", "{res}\n{}", r.stderr());
    assert_eq!(ws.read("src/lib.h"), "int a = 1;\nint b = 1;\n");

    // `kiln edit apply` the same way: one file written, both edits in it.
    ws.write("src/lib.h", "int a = 0\nint b = 0\n");
    let r = ws.kiln_stdin(&["edit", "apply", "--json"], &both);
    r.expect_code(0);
    assert_eq!(r.json()["written"], json!(["src/lib.h"]), "{}", r.stdout());
    assert_eq!(ws.read("src/lib.h"), "int a = 1;\nint b = 1;\n");
}

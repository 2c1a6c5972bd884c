//! `kiln fix` end to end: real compilers (gcc, python3, cargo), a mock LLM over real HTTP, the
//! SQLite store checked after each run.

use crate::mock_llm::{MockLlm, Reply, openai_text, openai_tool_call};
use crate::support::{Run, Workspace, fix_result, sr};
use kiln::store::Store;
use serde_json::Value;

/// A model's answer: a line of prose, then one SEARCH/REPLACE block.
fn answer(search: &str, replace: &str) -> String {
    format!("Here is the fix.\n\n{}", sr(search, replace))
}

const BROKEN_C: &str = "#include <stdio.h>\n\n/* version 0 */\nint main(void) {\n    int x = 1\n    printf(\"%d\\n\", x);\n    return 0;\n}\n";

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
    ws.kiln(&all, &[("OPENAI_API_KEY", "sk-fix-test")])
}

/// `kiln fix --json` against the mock with gcc over main.c, started without waiting.
fn spawn_gcc_fix(ws: &Workspace, mock: &MockLlm) -> std::process::Child {
    let base = format!("{}/v1", mock.url);
    ws.spawn_kiln(&[
        "fix",
        "--base-url",
        &base,
        "--model",
        "m",
        "--json",
        "--cmd",
        "gcc -fsyntax-only {file}",
        "--file",
        "main.c",
    ])
}

fn events(r: &Run) -> Vec<Value> {
    r.stdout()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn store(ws: &Workspace) -> Store {
    ws.store()
}

fn user_prompt(mock: &MockLlm, i: usize) -> String {
    let body = &mock.recorded()[i].body;
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap_or("").to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

const GCC: &[&str] = &["--cmd", "gcc -fsyntax-only {file}", "--file", "main.c"];

#[test]
fn c_program_fixed_in_one_iteration_and_recorded() {
    let ws = Workspace::new();
    ws.write("main.c", BROKEN_C);
    let mock = MockLlm::start(vec![openai_text(&answer(
        "    int x = 1\n",
        "    int x = 1;\n",
    ))]);
    let r = fix(&ws, &mock, GCC);
    r.expect_code(0);
    let res = fix_result(&r);
    assert_eq!(
        (
            res["ok"].as_bool(),
            res["iters"].as_u64(),
            res["stop_reason"].as_str()
        ),
        (Some(true), Some(1), Some("success"))
    );
    assert_eq!(
        res["artifact_path"],
        ws.root().join("main.c").to_string_lossy().as_ref()
    );
    assert!(res.get("modified_files").is_none());
    assert_eq!(
        ws.read("main.c"),
        BROKEN_C.replace("int x = 1\n", "int x = 1;\n")
    );
    // The prompt showed the diagnostics first, and the file.
    let prompt = user_prompt(&mock, 0);
    assert!(
        prompt.contains("Diagnostics:\n- main.c:6:5: error:"),
        "{prompt}"
    );
    assert!(prompt.contains("/* version 0 */"));
    let types: Vec<String> = events(&r)
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_string())
        .collect();
    for t in [
        "loop.started",
        "runner.finished",
        "llm.request",
        "llm.response",
        "edit.applied",
        "loop.iteration",
        "loop.succeeded",
        "loop.result",
    ] {
        assert!(types.iter().any(|x| x == t), "missing {t} in {types:?}");
    }
    // The store.
    let s = store(&ws);
    let rows = s.loops(10).unwrap();
    assert_eq!(
        (
            rows.len(),
            rows[0].status.as_str(),
            rows[0].stop_reason.as_deref()
        ),
        (1, "success", Some("success"))
    );
    assert_eq!(
        (
            rows[0].tokens.input,
            rows[0].tokens.cached_input,
            rows[0].tokens.output
        ),
        (12, 8, 5)
    );
    let d = s.loop_detail(rows[0].id).unwrap();
    assert_eq!(d.iterations.len(), 2);
    assert!(!d.iterations[0].ok && d.iterations[1].ok);
    assert_eq!(d.iterations[0].diagnostics[0]["line"], 6);
    assert_eq!(
        (
            d.edits.len(),
            d.edits[0].status.as_str(),
            d.edits[0].tier.as_deref()
        ),
        (1, "applied", Some("exact"))
    );
    assert_eq!(d.llm_calls.len(), 1);
    assert!(s.event_count(rows[0].id).unwrap() >= 8);
    let log = std::fs::read_to_string(ws.root().join(".kiln/logs/fix-loop.log")).unwrap();
    assert!(log.contains("=== loop 1 iteration 1") && log.contains("int x = 1;"));
}

#[test]
fn two_iterations_then_replay_of_the_same_loop() {
    let ws = Workspace::new();
    let broken = "#include <stdio.h>\nint main(void) {\n    int total = 0\n    printf(\"%d\\n\", totl);\n    return 0;\n}\n";
    ws.write("main.c", broken);
    let mock = MockLlm::start(vec![
        openai_text(&answer("    int total = 0\n", "    int total = 0;\n")),
        openai_text(&answer(
            "    printf(\"%d\\n\", totl);\n",
            "    printf(\"%d\\n\", total);\n",
        )),
    ]);
    let r = fix(&ws, &mock, GCC);
    r.expect_code(0);
    assert_eq!(fix_result(&r)["iters"], 2);
    let prompt2 = user_prompt(&mock, 1);
    assert!(
        prompt2.contains("## Last attempt\nIteration 1: applied 1 edit(s) to main.c"),
        "{prompt2}"
    );
    // Replaying loop 1 on the original file needs no model at all.
    ws.write("main.c", broken);
    let r = ws.kiln(
        &[
            "fix",
            "--replay-loop",
            "1",
            "--json",
            "--cmd",
            "gcc -fsyntax-only {file}",
            "--file",
            "main.c",
        ],
        &[],
    );
    r.expect_code(0);
    assert_eq!(fix_result(&r)["iters"], 2);
    assert_eq!(mock.recorded().len(), 2, "no request during the replay");
}

#[test]
fn max_iters_stops_a_loop_that_keeps_changing_but_never_passes() {
    let ws = Workspace::new();
    ws.write("main.c", BROKEN_C);
    let mock = MockLlm::start(vec![
        openai_text(&answer("/* version 0 */\n", "/* version 1 */\n")),
        openai_text(&answer("/* version 1 */\n", "/* version 2 */\n")),
    ]);
    let mut args = GCC.to_vec();
    args.extend(["--max-iters", "2"]);
    let r = fix(&ws, &mock, &args);
    r.expect_code(1);
    let res = fix_result(&r);
    assert_eq!(
        (
            res["ok"].as_bool(),
            res["failure_reason"].as_str(),
            res["iters"].as_u64()
        ),
        (Some(false), Some("max_iters"), Some(2))
    );
    assert!(
        res["last_error"].as_str().unwrap().contains("main.c:6:5"),
        "{res}"
    );
    assert_eq!(store(&ws).loops(1).unwrap()[0].status, "failed");
}

#[test]
fn stagnation_after_three_identical_failures() {
    let ws = Workspace::new();
    ws.write("main.c", BROKEN_C);
    let replies = (0..3)
        .map(|i| {
            openai_text(&answer(
                &format!("/* version {i} */\n"),
                &format!("/* version {} */\n", i + 1),
            ))
        })
        .collect();
    let mock = MockLlm::start(replies);
    let mut args = GCC.to_vec();
    args.extend(["--max-iters", "8"]);
    let r = fix(&ws, &mock, &args);
    r.expect_code(1);
    let res = fix_result(&r);
    assert_eq!(
        (res["failure_reason"].as_str(), res["iters"].as_u64()),
        (Some("stagnation"), Some(3))
    );
    assert_eq!(
        store(&ws).loops(1).unwrap()[0].stop_reason.as_deref(),
        Some("stagnation")
    );
}

#[test]
fn no_edits_applied_after_three_iterations_with_an_explicit_warning() {
    let ws = Workspace::new();
    ws.write("main.c", BROKEN_C);
    let bad = answer("    this line is not in the file\n", "x\n");
    let mock = MockLlm::start(vec![
        openai_text(&bad),
        openai_text("I think it is fine."),
        openai_text(&bad),
    ]);
    let r = fix(&ws, &mock, GCC);
    r.expect_code(1);
    let res = fix_result(&r);
    assert_eq!(
        (res["failure_reason"].as_str(), res["iters"].as_u64()),
        (Some("no_edits_applied"), Some(3))
    );
    assert!(
        user_prompt(&mock, 1).contains(
            "Your edits could not be applied:\nmain.c: block 1: SEARCH does not match main.c"
        ),
        "{}",
        user_prompt(&mock, 1)
    );
    assert!(!user_prompt(&mock, 1).contains("IMPORTANT: your previous answers applied no edit"));
    assert!(user_prompt(&mock, 2).contains("IMPORTANT: your previous answers applied no edit"));
    assert_eq!(ws.read("main.c"), BROKEN_C);
}

#[test]
fn the_model_can_stop_the_loop_with_loop_stop() {
    let ws = Workspace::new();
    ws.write("main.c", BROKEN_C);
    let mock = MockLlm::start(vec![openai_tool_call(
        "loop_stop",
        r#"{"reason":"the header it needs is not in the repository"}"#,
    )]);
    let r = fix(&ws, &mock, GCC);
    r.expect_code(1);
    let res = fix_result(&r);
    assert_eq!(
        (res["status"].as_str(), res["failure_reason"].as_str()),
        (Some("blocked"), Some("blocked"))
    );
    assert!(
        res["summary"]
            .as_str()
            .unwrap()
            .contains("the header it needs is not in the repository")
    );
    let tools: Vec<String> = mock.recorded()[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(tools, ["loop_stop", "get_loops", "get_loop_detail"]);
    assert_eq!(store(&ws).loops(1).unwrap()[0].status, "blocked");
}

const A_C: &str = "int helper(void);\nint main(void) { return helper() }\n";
const B_C: &str = "int helper(void) { return 0 }\n";
const C_H: &str = "/* untouched */\n";

#[test]
fn a_multi_file_fix_and_a_selective_one() {
    let ws = Workspace::new();
    ws.write("a.c", A_C);
    ws.write("b.c", B_C);
    let both = format!(
        "<<< path=a.c >>>\n{}<<< path=b.c >>>\n{}",
        answer(
            "int main(void) { return helper() }\n",
            "int main(void) { return helper(); }\n"
        ),
        answer(
            "int helper(void) { return 0 }\n",
            "int helper(void) { return 0; }\n"
        )
    );
    let mock = MockLlm::start(vec![openai_text(&both)]);
    let r = fix(
        &ws,
        &mock,
        &[
            "--cmd",
            "gcc -fsyntax-only {files}",
            "--files",
            "a.c",
            "b.c",
        ],
    );
    r.expect_code(0);
    let res = fix_result(&r);
    assert!(res.get("artifact_path").is_none());
    let mut files: Vec<String> = res["modified_files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().rsplit('/').next().unwrap().to_string())
        .collect();
    files.sort();
    assert_eq!(files, ["a.c", "b.c"]);

    // Selective: only b.c is broken and edited; a.c and c.h stay byte-identical.
    let ws = Workspace::new();
    ws.write(
        "a.c",
        "int helper(void);\nint main(void) { return helper(); }\n",
    );
    ws.write("b.c", B_C);
    ws.write("c.h", C_H);
    let before_a = std::fs::read(ws.root().join("a.c")).unwrap();
    let mock = MockLlm::start(vec![openai_text(&format!(
        "<<< path=b.c >>>\n{}",
        answer(
            "int helper(void) { return 0 }\n",
            "int helper(void) { return 0; }\n"
        )
    ))]);
    let r = fix(
        &ws,
        &mock,
        &[
            "--cmd",
            "gcc -fsyntax-only {files}",
            "--files",
            "a.c",
            "b.c",
        ],
    );
    r.expect_code(0);
    assert_eq!(std::fs::read(ws.root().join("a.c")).unwrap(), before_a);
    assert_eq!(ws.read("c.h"), C_H);
    assert_eq!(
        fix_result(&r)["modified_files"].as_array().unwrap().len(),
        1
    );
}

#[test]
fn several_targets_need_a_multi_file_format_and_targets_are_exclusive() {
    let ws = Workspace::new();
    let mock = MockLlm::start(vec![]);
    let r = fix(
        &ws,
        &mock,
        &["--cmd", "true", "--file", "a.c", "--files", "b.c"],
    );
    r.expect_code(2);
    assert!(r.stderr().contains("cannot be used with"), "{}", r.stderr());
    assert!(mock.recorded().is_empty());
}

#[test]
fn a_deletion_through_an_empty_replace_fixes_a_python_program() {
    let ws = Workspace::new();
    ws.write(
        "app.py",
        "import os\nimport no_such_module_kiln\n\nprint(os.sep)\n",
    );
    let mock = MockLlm::start(vec![openai_text(&answer(
        "import no_such_module_kiln\n",
        "",
    ))]);
    let r = fix(&ws, &mock, &["--cmd", "python3 {file}", "--file", "app.py"]);
    r.expect_code(0);
    assert_eq!(ws.read("app.py"), "import os\n\nprint(os.sep)\n");
}

#[test]
fn a_rust_crate_fixed_through_the_cargo_runner() {
    let ws = Workspace::new();
    ws.write("Cargo.toml", "[package]\nname = \"kiln_fix_demo\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n");
    ws.write(
        "src/main.rs",
        "fn main() {\n    let n: u32 = \"three\";\n    println!(\"{n}\");\n}\n",
    );
    let mock = MockLlm::start(vec![openai_text(&answer(
        "    let n: u32 = \"three\";\n",
        "    let n: u32 = 3;\n",
    ))]);
    let home = kiln_env::env()
        .var("REAL_HOME_FOR_TESTS")
        .or_else(|| kiln_env::env().var("HOME"))
        .unwrap_or_default();
    let rustup_home = kiln_env::env()
        .var("RUSTUP_HOME")
        .map_or_else(|| format!("{home}/.rustup"), str::to_string);
    let cargo_home = kiln_env::env()
        .var("CARGO_HOME")
        .map_or_else(|| format!("{home}/.cargo"), str::to_string);
    let toolchain = kiln_env::env().var("RUSTUP_TOOLCHAIN").unwrap_or("stable");
    let base = format!("{}/v1", mock.url);
    let r = ws.kiln(
        &[
            "fix",
            "--runner",
            "cargo",
            "--file",
            "src/main.rs",
            "--base-url",
            &base,
            "--model",
            "m",
            "--json",
        ],
        &[
            ("RUSTUP_HOME", &rustup_home),
            ("CARGO_HOME", &cargo_home),
            ("RUSTUP_TOOLCHAIN", toolchain),
        ],
    );
    r.expect_code(0);
    let prompt = user_prompt(&mock, 0);
    assert!(
        prompt.contains("src/main.rs:2:18: error[E0308]: mismatched types"),
        "{prompt}"
    );
    assert_eq!(fix_result(&r)["iters"], 1);
}

#[test]
fn a_second_loop_on_the_same_workspace_is_refused() {
    let ws = Workspace::new();
    ws.write("main.c", BROKEN_C);
    let mut s = store(&ws);
    // A loop "running" in this (live) test process.
    let id = s
        .begin_loop(&kiln::store::NewLoop {
            kind: kiln::store::RunKind::Fix,
            runner: "command".into(),
            targets: vec!["main.c".into()],
            format: "search-replace".into(),
            model: "m".into(),
            max_iters: 5,
            parent: None,
        })
        .unwrap();
    let mock = MockLlm::start(vec![]);
    let r = fix(&ws, &mock, GCC);
    r.expect_code(2);
    assert!(
        r.stderr()
            .contains(&format!("loop {id} is already running on this workspace")),
        "{}",
        r.stderr()
    );
    assert!(mock.recorded().is_empty());
}

#[test]
fn ctrl_c_mid_loop_records_cancelled_and_leaves_files_whole() {
    use std::time::Duration;
    let ws = Workspace::new();
    ws.write("main.c", BROKEN_C);
    // The model takes 30 s to answer: plenty of time to press Ctrl-C.
    let slow = Reply::Stream(vec![(Duration::from_secs(30), "data: [DONE]\n\n".into())]);
    let mock = MockLlm::start(vec![slow]);
    let child = spawn_gcc_fix(&ws, &mock);
    let start = std::time::Instant::now();
    while mock.recorded().is_empty() && start.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        !mock.recorded().is_empty(),
        "the loop never asked the model"
    );
    // SAFETY: sending SIGINT to the child we spawned.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let out = Run(child.wait_with_output().unwrap());
    // Ctrl-C exits 130, as a shell reports SIGINT.
    out.expect_code(130);
    assert!(start.elapsed() < Duration::from_secs(20));
    assert_eq!(fix_result(&out)["failure_reason"], "cancelled");
    let rows = store(&ws).loops(1).unwrap();
    assert_eq!(
        (rows[0].status.as_str(), rows[0].stop_reason.as_deref()),
        ("failed", Some("cancelled"))
    );
    assert_eq!(ws.read("main.c"), BROKEN_C);
}

#[test]
fn history_lists_and_shows_loops() {
    let ws = Workspace::new();
    ws.write("main.c", BROKEN_C);
    let mock = MockLlm::start(vec![openai_text(&answer(
        "    int x = 1\n",
        "    int x = 1;\n",
    ))]);
    fix(&ws, &mock, GCC).expect_code(0);
    let r = ws.kiln(&["history", "--json"], &[]);
    r.expect_code(0);
    let row: Value = serde_json::from_str(r.stdout().lines().next().unwrap()).unwrap();
    assert_eq!(
        (row["status"].as_str(), row["iters"].as_i64()),
        (Some("success"), Some(1))
    );
    let r = ws.kiln(&["history", "show", "1", "--json"], &[]);
    r.expect_code(0);
    let d = r.json();
    assert_eq!(d["iterations"].as_array().unwrap().len(), 2);
    assert_eq!(d["edits"][0]["path"], "main.c");
    let r = ws.kiln(&["history", "show", "1"], &[]);
    assert!(r.stdout().contains("iteration 1: passed"), "{}", r.stdout());
    let r = ws.kiln(&["history", "show", "42"], &[]);
    r.expect_code(2);
    assert!(r.stderr().contains("no loop with id 42"));
}

#[test]
fn a_large_file_is_shown_as_windows_around_the_diagnostics() {
    let ws = Workspace::new();
    let mut src: String = (0..900)
        .map(|i| format!("int filler_{i} = {i};\n"))
        .collect();
    src.push_str("int main(void) { return 0 }\n");
    ws.write("big.c", &src);
    let mock = MockLlm::start(vec![openai_text(&answer(
        "int main(void) { return 0 }\n",
        "int main(void) { return 0; }\n",
    ))]);
    let r = fix(
        &ws,
        &mock,
        &["--cmd", "gcc -fsyntax-only {file}", "--file", "big.c"],
    );
    r.expect_code(0);
    let prompt = user_prompt(&mock, 0);
    assert!(
        prompt.contains("big.c (901 lines; only the parts around the diagnostics are shown)"),
        "{}",
        &prompt[..prompt.len().min(600)]
    );
    assert!(
        prompt.contains("[... 860 lines not shown ...]")
            && prompt.contains("int filler_899 = 899;")
            && !prompt.contains("int filler_10 = 10;")
    );
}

#[test]
fn a_stream_cut_off_mid_answer_is_retried_and_the_retry_is_recorded() {
    let ws = Workspace::new();
    ws.write("main.c", BROKEN_C);
    let cut = Reply::sse(crate::mock_llm::openai_events(&[
        serde_json::json!({"choices":[{"index":0,"delta":{"content":"<<<<<<< SEARCH\n    int x = 1\n"}}]}),
    ]));
    let mock = MockLlm::start(vec![
        cut,
        openai_text(&answer("    int x = 1\n", "    int x = 1;\n")),
    ]);
    let r = fix(&ws, &mock, GCC);
    r.expect_code(0);
    assert_eq!(fix_result(&r)["iters"], 1);
    let retry = events(&r)
        .into_iter()
        .find(|e| e["type"] == "llm.retry")
        .expect("an llm.retry event");
    assert!(
        retry["reason"].as_str().unwrap().contains("finish_reason"),
        "{retry}"
    );
    let db = rusqlite::Connection::open(ws.store_path()).unwrap();
    let stored: i64 = db
        .query_row(
            "SELECT count(*) FROM events WHERE type = 'llm.retry'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(stored, 1);
}

#[test]
fn a_target_changed_while_the_model_thinks_is_not_edited_against_text_it_never_saw() {
    use std::time::Duration;
    let ws = Workspace::new();
    ws.write("main.c", BROKEN_C);
    // The first answer takes a while; the user edits main.c meanwhile. The answer's edit
    // would still match the changed file, but the model never saw that file.
    let mut slow = vec![(
        Duration::ZERO,
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"
            .to_string(),
    )];
    if let Reply::Stream(parts) = openai_text(&answer("    int x = 1\n", "    int x = 1;\n")) {
        slow.extend(parts.into_iter().enumerate().map(|(i, (_, p))| {
            let pause = if i == 0 { 1500 } else { 0 };
            (Duration::from_millis(pause), p)
        }));
    }
    let edited = BROKEN_C.replace("/* version 0 */", "/* version 1, by the user */");
    let mock = MockLlm::start(vec![
        Reply::Stream(slow),
        openai_text(&answer("    int x = 1\n", "    int x = 1;\n")),
    ]);
    let child = spawn_gcc_fix(&ws, &mock);
    let start = std::time::Instant::now();
    while mock.recorded().is_empty() && start.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    ws.write("main.c", &edited);
    let out = Run(child.wait_with_output().unwrap());
    out.expect_code(0);
    let stale = events(&out)
        .into_iter()
        .find(|e| e["type"] == "edit.failed")
        .expect("the first answer's edit is refused");
    assert_eq!(stale["failure"], "stale", "{stale}");
    // The next prompt shows the current text and says why.
    let second = user_prompt(&mock, 1);
    assert!(second.contains("version 1, by the user"), "{second}");
    assert!(
        second.contains("changed since you were shown it"),
        "{second}"
    );
    assert_eq!(fix_result(&out)["iters"], 2);
    assert_eq!(
        ws.read("main.c"),
        edited.replace("int x = 1\n", "int x = 1;\n")
    );
}

/// A Python target whose check fails with "got N" until N reaches the expected value.
fn counting_py(n: u32, expected: u32) -> String {
    format!("N = {n}\nassert N == {expected}, f\"got {{N}}\"\n")
}

#[test]
fn a_failure_whose_numbers_change_is_progress_not_stagnation() {
    // got 40, got 39, got 38: three different failures (seed 000: stagnation is the same
    // error three times); the fourth edit fixes it.
    let ws = Workspace::new();
    ws.write("main.py", &counting_py(41, 37));
    let replies = (0..4)
        .map(|i| {
            openai_text(&answer(
                &format!("N = {}\n", 41 - i),
                &format!("N = {}\n", 40 - i),
            ))
        })
        .collect();
    let mock = MockLlm::start(replies);
    let r = fix(
        &ws,
        &mock,
        &[
            "--cmd",
            "python3 {file}",
            "--file",
            "main.py",
            "--max-iters",
            "6",
        ],
    );
    let res = fix_result(&r);
    assert_eq!(
        (res["stop_reason"].as_str(), res["iters"].as_u64()),
        (Some("success"), Some(4)),
        "{res}"
    );
    r.expect_code(0);
    assert_eq!(ws.read("main.py"), counting_py(37, 37));
}

#[test]
fn stagnation_ignores_what_varies_between_runs_and_reports_the_last_error() {
    // The same failure each time, but with a made-up temporary path and a duration that
    // differ on every run: stagnation after three edits, and `last_error` is the third
    // iteration's output, not the second's.
    let ws = Workspace::new();
    let program = |v: u32| {
        format!(
            "# version {v}\nimport random, sys\nsys.exit(f\"cannot write /tmp/tmp{{random.randrange(10**12)}}/cache after {{random.random() * 9:.3f}}s\")\n"
        )
    };
    ws.write("main.py", &program(0));
    let replies = (0..3)
        .map(|i| {
            openai_text(&answer(
                &format!("# version {i}\n"),
                &format!("# version {}\n", i + 1),
            ))
        })
        .collect();
    let mock = MockLlm::start(replies);
    let r = fix(
        &ws,
        &mock,
        &[
            "--cmd",
            "python3 {file}",
            "--file",
            "main.py",
            "--max-iters",
            "8",
        ],
    );
    r.expect_code(1);
    let res = fix_result(&r);
    assert_eq!(
        (res["failure_reason"].as_str(), res["iters"].as_u64()),
        (Some("stagnation"), Some(3)),
        "{res}"
    );
    let detail = store(&ws)
        .loop_detail(res["loop_id"].as_i64().unwrap())
        .unwrap();
    let outputs: Vec<String> = detail
        .iterations
        .iter()
        .map(|i| format!("{}{}", i.stderr, i.stdout).trim().to_string())
        .collect();
    assert_eq!(outputs.len(), 4, "{outputs:?}");
    assert_ne!(outputs[2], outputs[3], "each run's path differs");
    assert_eq!(
        res["last_error"].as_str(),
        Some(outputs[3].as_str()),
        "{res}"
    );
    // The result's lastIteration is that iteration too.
    let last = &res["lastIteration"];
    assert_eq!(last["iteration"], 3);
    assert_eq!(last["exit_code"], 1);
    assert_eq!(
        last["stderr"].as_str().map(str::trim),
        Some(outputs[3].as_str())
    );
    assert!(
        last["summary"].as_str().unwrap().contains("# version 3"),
        "the model's answer of that iteration: {last}"
    );
}

#[test]
fn one_file_named_with_files_is_multi_file_mode() {
    // Seed 000: `target_files` (here `--files`) is multi-file mode even with one element, and
    // returns `modified_files`; `--file` is single-file mode with `artifact_path`.
    let fixed = BROKEN_C.replace("int x = 1\n", "int x = 1;\n");
    let reply = || openai_text(&answer("    int x = 1\n", "    int x = 1;\n"));
    let ws = Workspace::new();
    ws.write("main.c", BROKEN_C);
    let mock = MockLlm::start(vec![reply()]);
    let r = fix(
        &ws,
        &mock,
        &["--cmd", "gcc -fsyntax-only {files}", "--files", "main.c"],
    );
    r.expect_code(0);
    let res = fix_result(&r);
    assert!(res.get("artifact_path").is_none(), "{res}");
    assert_eq!(
        res["modified_files"],
        serde_json::json!([ws.root().join("main.c").to_string_lossy()])
    );
    assert_eq!(ws.read("main.c"), fixed);
    // The model was taught the multi-file form of the format (path headers).
    assert!(
        mock.recorded()[0].body.to_string().contains("<<< path="),
        "multi-file instructions"
    );

    let ws = Workspace::new();
    ws.write("main.c", BROKEN_C);
    let mock = MockLlm::start(vec![reply()]);
    let r = fix(&ws, &mock, GCC);
    r.expect_code(0);
    let res = fix_result(&r);
    assert!(res.get("modified_files").is_none(), "{res}");
    assert_eq!(
        res["artifact_path"],
        ws.root().join("main.c").to_string_lossy().as_ref()
    );
}

#[test]
fn the_result_carries_the_last_iteration_and_loop_stop_keeps_the_models_summary() {
    // Seed 001: the result's lastIteration (exit code, output tails, the model's summary).
    let ws = Workspace::new();
    ws.write("main.c", BROKEN_C);
    let mock = MockLlm::start(vec![openai_text(&answer(
        "    int x = 1\n",
        "    int x = 1;\n",
    ))]);
    let r = fix(&ws, &mock, GCC);
    r.expect_code(0);
    let last = &fix_result(&r)["lastIteration"];
    assert_eq!(
        (last["iteration"].as_u64(), last["exit_code"].as_i64()),
        (Some(1), Some(0)),
        "{last}"
    );
    assert!(
        last["summary"]
            .as_str()
            .unwrap()
            .starts_with("Here is the fix."),
        "{last}"
    );
    for k in ["stdout", "stderr"] {
        assert!(last[k].is_string(), "{k}: {last}");
    }

    // A model that stops the loop: its iteration keeps what it said and why it stopped, in
    // the store and in the result.
    let ws = Workspace::new();
    ws.write("main.c", BROKEN_C);
    let mut parts = crate::mock_llm::openai_events(&[
        serde_json::json!({"choices":[{"index":0,"delta":{"content":"The build needs a header that is not here."}}]}),
        serde_json::json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"loop_stop","arguments":"{\"reason\":\"missing config.h\"}"}}]}}]}),
        serde_json::json!({"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}),
    ]);
    parts.push("data: [DONE]\n\n".into());
    let mock = MockLlm::start(vec![Reply::sse(parts)]);
    let r = fix(&ws, &mock, GCC);
    r.expect_code(1);
    let res = fix_result(&r);
    assert_eq!(res["stop_reason"], "blocked");
    let last = &res["lastIteration"];
    assert_eq!(
        (last["iteration"].as_u64(), last["exit_code"].as_i64()),
        (Some(1), Some(1))
    );
    assert!(
        last["stderr"].as_str().unwrap().contains("main.c:6:5"),
        "{last}"
    );
    let summary = last["summary"].as_str().unwrap();
    assert!(
        summary.contains("loop_stop: missing config.h")
            && summary.contains("The build needs a header that is not here."),
        "{summary}"
    );
    let detail = store(&ws)
        .loop_detail(res["loop_id"].as_i64().unwrap())
        .unwrap();
    assert_eq!(
        detail.iterations.last().unwrap().llm_summary.as_deref(),
        Some(summary)
    );
}

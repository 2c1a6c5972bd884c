//! `kiln agent` end to end against a mock LLM over real HTTP, with the real tool plugins on a
//! temporary workspace: a multi-step task, parallel read-only calls, a tool timeout, each cap,
//! a denied hook, manual JSON mode, compaction, context overflow and Ctrl-C.

use crate::mock_llm::{MockLlm, Reply, openai_calls, openai_text};
use crate::support::{Run, Workspace, agent, agent_result, wasm};
use serde_json::Value;
use std::time::{Duration, Instant};

fn tool_results(mock: &MockLlm, request: usize) -> Vec<Value> {
    mock.recorded()[request].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .cloned()
        .collect()
}

#[test]
fn a_multi_step_task_reads_patches_runs_and_answers() {
    let ws = Workspace::new();
    ws.write(
        "calc.py",
        "def add(a, b):\n    return a - b\n\nassert add(2, 3) == 5\n",
    );
    let patch = "<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE\n";
    let mock = MockLlm::start(vec![
        openai_calls(&[("read_files", r#"{"paths":["calc.py"]}"#)]),
        openai_calls(&[(
            "write_patch",
            &serde_json::json!({"path": "calc.py", "patch": patch}).to_string(),
        )]),
        openai_calls(&[("run_cmd", r#"{"command":"python3 calc.py"}"#)]),
        openai_calls(&[("final_answer", r#"{"summary":"add() now adds"}"#)]),
    ]);
    let r = agent(
        &ws,
        &mock,
        &["--prompt", "Fix add()", "--test-command", "python3 calc.py"],
    );
    r.expect_code(0);
    let res = agent_result(&r);
    assert_eq!(
        (
            res["success"].as_bool(),
            res["stop_reason"].as_str(),
            res["content"].as_str()
        ),
        (Some(true), Some("complete"), Some("add() now adds"))
    );
    assert_eq!(res["turns"], 4);
    assert_eq!(
        ws.read("calc.py"),
        "def add(a, b):\n    return a + b\n\nassert add(2, 3) == 5\n"
    );
    // What the model observed.
    let read = tool_results(&mock, 1);
    assert!(
        read[0]["content"]
            .as_str()
            .unwrap()
            .contains("return a - b")
    );
    let ran = tool_results(&mock, 3);
    let out: Value = serde_json::from_str(ran[2]["content"].as_str().unwrap()).unwrap();
    assert_eq!(out["exit_code"], 0);
    // Tools offered natively, including the built-ins.
    let names: Vec<String> = mock.recorded()[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .collect();
    for n in [
        "read_files",
        "search_repo",
        "run_cmd",
        "write_patch",
        "evaluate_work",
        "final_answer",
        "compile_loop",
        "get_loops",
    ] {
        assert!(names.contains(&n.to_string()), "{n} missing from {names:?}");
    }
    // The store has the run and its tool calls; history lists it.
    let s = ws.store();
    let rows = s.loops(5).unwrap();
    assert_eq!(
        (
            rows[0].kind.as_str(),
            rows[0].status.as_str(),
            rows[0].stop_reason.as_deref()
        ),
        ("agent", "success", Some("complete"))
    );
    assert_eq!(s.tool_calls(rows[0].id).unwrap().len(), 3);
    let h = ws.kiln(&["history"], &[]);
    assert!(h.stdout().contains("agent"), "{}", h.stdout());
}

#[test]
fn run_cmd_runs_only_the_allowed_command() {
    let ws = Workspace::new();
    let mock = MockLlm::start(vec![
        openai_calls(&[("run_cmd", r#"{"command":"rm -rf /"}"#)]),
        openai_text("I may not run that."),
    ]);
    let r = agent(
        &ws,
        &mock,
        &["--prompt", "x", "--test-command", "python3 -V"],
    );
    r.expect_code(0);
    let res = tool_results(&mock, 1);
    assert_eq!(
        res[0]["content"].as_str().unwrap().split(':').next(),
        Some("denied")
    );
}

#[test]
fn read_only_calls_run_in_parallel_unless_sequential() {
    let ws = Workspace::new();
    ws.write(
        "kiln.toml",
        "[plugins.escape]\nexec = [{ program = \"sleep\", args = [\"*\"] }]\n",
    );
    let escape = wasm("kiln_test_escape");
    let naps = [
        ("nap", r#"{"ms":1000}"#),
        ("nap", r#"{"ms":1001}"#),
        ("nap", r#"{"ms":1002}"#),
    ];
    for (sequential, bound) in [(false, 2.5), (true, 3.0)] {
        let mock = MockLlm::start(vec![openai_calls(&naps), openai_text("rested")]);
        let mut args = vec!["--plugin", escape.to_str().unwrap(), "--prompt", "nap"];
        if sequential {
            args.push("--sequential");
        }
        let start = Instant::now();
        let r = agent(&ws, &mock, &args);
        r.expect_code(0);
        let took = start.elapsed().as_secs_f64();
        if sequential {
            assert!(took >= bound, "sequential naps took {took}s");
        } else {
            assert!(took < bound, "parallel naps took {took}s");
        }
        let results = tool_results(&mock, 1);
        assert_eq!(
            results
                .iter()
                .map(|m| m["tool_call_id"].as_str().unwrap())
                .collect::<Vec<_>>(),
            ["call_0", "call_1", "call_2"],
            "results keep the call order"
        );
    }
}

#[test]
fn a_tool_timeout_is_an_error_result_not_the_end() {
    let ws = Workspace::new();
    let escape = wasm("kiln_test_escape");
    let mock = MockLlm::start(vec![
        openai_calls(&[("spin", "{}")]),
        openai_calls(&[("final_answer", r#"{"summary":"gave up on spin"}"#)]),
    ]);
    let start = Instant::now();
    let r = agent(
        &ws,
        &mock,
        &[
            "--plugin",
            escape.to_str().unwrap(),
            "--prompt",
            "spin",
            "--tool-timeout",
            "1",
        ],
    );
    r.expect_code(0);
    assert!(start.elapsed() < Duration::from_secs(15));
    let res = tool_results(&mock, 1);
    assert!(
        res[0]["content"]
            .as_str()
            .unwrap()
            .contains("timed out after 1 s"),
        "{}",
        res[0]
    );
    assert_eq!(agent_result(&r)["stop_reason"], "complete");
}

#[test]
fn each_cap_is_its_own_stop_reason() {
    let ws = Workspace::new();
    ws.write("a.txt", "one\n");
    // max_steps: a model that keeps reading different things.
    let replies = (0..3)
        .map(|i| openai_calls(&[("search_repo", &format!(r#"{{"pattern":"p{i}"}}"#))]))
        .collect();
    let mock = MockLlm::start(replies);
    let r = agent(&ws, &mock, &["--prompt", "x", "--max-steps", "2"]);
    r.expect_code(1);
    assert_eq!(
        (
            agent_result(&r)["stop_reason"].as_str(),
            agent_result(&r)["success"].as_bool()
        ),
        (Some("max_steps"), Some(false))
    );
    assert_eq!(mock.recorded().len(), 2);

    // max_writes.
    let w = |n: u32| {
        serde_json::json!({"path": "a.txt", "patch": format!("<<<<<<< SEARCH\n=======\nx{n}\n>>>>>>> REPLACE\n")}).to_string()
    };
    let mock = MockLlm::start(vec![
        openai_calls(&[("write_patch", &w(1))]),
        openai_calls(&[("write_patch", &w(2))]),
    ]);
    let r = agent(&ws, &mock, &["--prompt", "x", "--max-writes", "1"]);
    r.expect_code(1);
    assert_eq!(agent_result(&r)["stop_reason"], "max_writes");

    // max_commands.
    let mock = MockLlm::start(vec![openai_calls(&[
        ("run_cmd", r#"{"command":"true"}"#),
        ("run_cmd", r#"{"command":"true","args":[]}"#),
    ])]);
    let r = agent(
        &ws,
        &mock,
        &[
            "--prompt",
            "x",
            "--max-commands",
            "1",
            "--test-command",
            "true",
        ],
    );
    r.expect_code(1);
    assert_eq!(agent_result(&r)["stop_reason"], "max_commands");

    // repeated_call.
    let same = || openai_calls(&[("read_files", r#"{"paths":["a.txt"]}"#)]);
    let mock = MockLlm::start(vec![same(), same(), same()]);
    let r = agent(&ws, &mock, &["--prompt", "x", "--max-repeats", "2"]);
    r.expect_code(1);
    assert_eq!(agent_result(&r)["stop_reason"], "repeated_call");
}

#[test]
fn a_before_tool_hook_can_deny_with_a_reason_the_model_sees() {
    let ws = Workspace::new();
    ws.write("deny.sh", "#!/bin/sh\nif grep -q run_cmd; then echo '{\"decision\":\"deny\",\"reason\":\"no commands on Fridays\"}'; else echo '{\"decision\":\"allow\"}'; fi\n");
    ws.write("kiln.toml", "[agent.hooks]\nbefore_tool = \"sh deny.sh\"\n");
    let mock = MockLlm::start(vec![
        openai_calls(&[
            ("run_cmd", r#"{"command":"true"}"#),
            ("search_repo", r#"{"pattern":"x"}"#),
        ]),
        openai_text("ok"),
    ]);
    let r = agent(
        &ws,
        &mock,
        &["--prompt", "x", "--test-command", "true", "--sequential"],
    );
    r.expect_code(0);
    let res = tool_results(&mock, 1);
    assert_eq!(
        res[0]["content"],
        "denied by the before-tool hook: no commands on Fridays"
    );
    assert!(!res[1]["content"].as_str().unwrap().contains("denied"));
}

#[test]
fn manual_json_mode_recovers_from_one_malformed_answer() {
    let ws = Workspace::new();
    ws.write("a.txt", "hello\n");
    let mock = MockLlm::start(vec![
        openai_text("I will read the file now."),
        openai_text(r#"{"tool": "read_files", "arguments": {"paths": ["a.txt"]}}"#),
        openai_text(r#"{"final_answer": "it says hello"}"#),
    ]);
    let r = agent(
        &ws,
        &mock,
        &["--prompt", "what does a.txt say?", "--manual"],
    );
    r.expect_code(0);
    assert_eq!(agent_result(&r)["content"], "it says hello");
    let first = &mock.recorded()[0].body;
    assert!(
        first.get("tools").is_none(),
        "manual mode sends no native tools"
    );
    assert!(
        first["messages"][0]["content"]
            .as_str()
            .unwrap()
            .contains("exactly one JSON object")
    );
    let second = mock.recorded()[1].body["messages"].to_string();
    assert!(
        second.contains("Your answer could not be used: no JSON object found"),
        "{second}"
    );
    let third = mock.recorded()[2].body["messages"].to_string();
    assert!(third.contains("Result of read_files (ok)") && third.contains("hello"));

    // Never silently done: three malformed answers in a row are an error.
    let mock = MockLlm::start(vec![
        openai_text("no"),
        openai_text("still no"),
        openai_text("nope"),
    ]);
    let r = agent(&ws, &mock, &["--prompt", "x", "--manual"]);
    r.expect_code(2);
    assert_eq!(agent_result(&r)["stop_reason"], "error");
}

#[test]
fn the_conversation_is_compacted_when_it_nears_the_window() {
    let ws = Workspace::new();
    for i in 0..5 {
        ws.write(&format!("big{i}.txt"), &"line of text\n".repeat(2000));
    }
    let replies: Vec<Reply> = (0..5)
        .map(|i| openai_calls(&[("read_files", &format!(r#"{{"paths":["big{i}.txt"]}}"#))]))
        .chain([openai_text("done")])
        .collect();
    let mock = MockLlm::start(replies);
    let r = agent(
        &ws,
        &mock,
        &["--prompt", "read it a lot", "--context-chars", "30000"],
    );
    r.expect_code(0);
    let notices: Vec<Value> = r
        .stdout()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["type"] == "agent.notice")
        .collect();
    assert!(
        !notices.is_empty()
            && notices[0]["message"]
                .as_str()
                .unwrap()
                .contains("context compacted")
    );
    let last = mock.recorded().last().unwrap().body["messages"].to_string();
    assert!(
        last.contains("elided by kiln"),
        "old tool results are elided"
    );
    assert!(last.contains("read it a lot"), "the task is kept");
}

#[test]
fn a_context_overflow_compacts_once_then_stops() {
    let ws = Workspace::new();
    let overflow = || {
        Reply::json(
            400,
            serde_json::json!({"error":{"message":"This model's maximum context length is 8192 tokens","code":"context_length_exceeded"}}),
        )
    };
    let mock = MockLlm::start(vec![overflow(), openai_text("fits now")]);
    let r = agent(&ws, &mock, &["--prompt", "x"]);
    r.expect_code(0);
    assert_eq!(agent_result(&r)["content"], "fits now");
    let mock = MockLlm::start(vec![overflow(), overflow()]);
    let r = agent(&ws, &mock, &["--prompt", "x"]);
    r.expect_code(1);
    assert_eq!(agent_result(&r)["stop_reason"], "context_exceeded");
}

#[test]
fn ctrl_c_cancels_the_agent() {
    let ws = Workspace::new();
    let slow = Reply::Stream(vec![(Duration::from_secs(30), "data: [DONE]\n\n".into())]);
    let mock = MockLlm::start(vec![slow]);
    let base = format!("{}/v1", mock.url);
    let child = ws.spawn_kiln(&[
        "agent",
        "--base-url",
        &base,
        "--model",
        "m",
        "--json",
        "--prompt",
        "x",
    ]);
    let start = Instant::now();
    while mock.recorded().is_empty() && start.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(50));
    }
    // SAFETY: signalling our own child.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let out = Run(child.wait_with_output().unwrap());
    out.expect_code(130);
    assert_eq!(agent_result(&out)["stop_reason"], "cancelled");
    assert!(start.elapsed() < Duration::from_secs(20));
}

#[test]
fn evaluate_work_asks_a_separate_reviewer_and_compile_loop_runs_the_fix_loop() {
    let ws = Workspace::new();
    ws.write("main.c", "int main(void) { return 0 }\n");
    let mock = MockLlm::start(vec![
        openai_calls(&[(
            "evaluate_work",
            r#"{"paths":["main.c"],"criteria":"does it compile"}"#,
        )]),
        openai_text(
            r#"{"score": 3, "strengths": ["short"], "improvements": ["missing semicolon"], "suggestions": ["add ;"]}"#,
        ),
        openai_calls(&[(
            "compile_loop",
            r#"{"spec":"make it compile","target_file":"main.c"}"#,
        )]),
        openai_text(
            "<<<<<<< SEARCH\nint main(void) { return 0 }\n=======\nint main(void) { return 0; }\n>>>>>>> REPLACE\n",
        ),
        openai_calls(&[("final_answer", r#"{"summary":"compiles now"}"#)]),
    ]);
    let r = agent(
        &ws,
        &mock,
        &[
            "--prompt",
            "review and fix main.c",
            "--test-command",
            "gcc -fsyntax-only main.c",
        ],
    );
    r.expect_code(0);
    // The reviewer call is separate: its own system prompt, no tools.
    let review = &mock.recorded()[1].body;
    assert!(
        review["messages"][0]["content"]
            .as_str()
            .unwrap()
            .contains("strict code reviewer")
    );
    assert!(review.get("tools").is_none());
    let fb: Value =
        serde_json::from_str(tool_results(&mock, 2)[0]["content"].as_str().unwrap()).unwrap();
    assert_eq!(
        (fb["score"].as_i64(), fb["improvements"][0].as_str()),
        (Some(3), Some("missing semicolon"))
    );
    // compile_loop ran a nested fix loop (exempt from the overlap guard) and succeeded.
    let cl: Value =
        serde_json::from_str(tool_results(&mock, 4)[1]["content"].as_str().unwrap()).unwrap();
    assert_eq!(
        (cl["ok"].as_bool(), cl["iters"].as_u64()),
        (Some(true), Some(1)),
        "{cl}"
    );
    assert_eq!(ws.read("main.c"), "int main(void) { return 0; }\n");
    let s = ws.store();
    let kinds: Vec<String> = s
        .loops(5)
        .unwrap()
        .iter()
        .map(|r| format!("{}:{}", r.kind, r.status))
        .collect();
    assert_eq!(kinds, ["fix:success", "agent:success"]);
    let show = ws.kiln(&["history", "show", "1", "--json"], &[]);
    assert_eq!(show.json()["tool_calls"].as_array().unwrap().len(), 2);
}

#[test]
fn interactive_mode_reads_tasks_from_stdin_and_keeps_the_conversation() {
    let ws = Workspace::new();
    let mock = MockLlm::start(vec![
        openai_text("first answer"),
        openai_text("second answer"),
    ]);
    let base = format!("{}/v1", mock.url);
    let r = ws.kiln_stdin(
        &["agent", "--base-url", &base, "--model", "m"],
        "remember the word kiwi\nwhat was the word?\n",
    );
    r.expect_code(0);
    assert!(
        r.stdout().contains("first answer") && r.stdout().contains("second answer"),
        "{}",
        r.stdout()
    );
    let second = mock.recorded()[1].body["messages"].to_string();
    assert!(
        second.contains("remember the word kiwi")
            && second.contains("first answer")
            && second.contains("what was the word?"),
        "{second}"
    );
}

#[test]
fn compile_loop_shows_a_whole_file_format_a_long_file_whole() {
    // `--format whole` answers with whole files: the nested fix loop must show it the whole
    // file, not windows around the diagnostics, however long the file is.
    let ws = Workspace::new();
    let body: String = (1..=700).map(|i| format!("line {i}\n")).collect();
    ws.write("big.txt", &body);
    let fixed = format!("{body}FIXED\n");
    let mock = MockLlm::start(vec![
        openai_calls(&[(
            "compile_loop",
            r#"{"spec":"end the file with FIXED","target_file":"big.txt"}"#,
        )]),
        openai_text(&format!("big.txt\n```\n{fixed}```\n")),
        openai_calls(&[("final_answer", r#"{"summary":"done"}"#)]),
    ]);
    let r = agent(
        &ws,
        &mock,
        &[
            "--prompt",
            "fix big.txt",
            "--format",
            "whole",
            "--test-command",
            "grep -q FIXED big.txt",
        ],
    );
    r.expect_code(0);
    let nested = mock.recorded()[1].body["messages"].to_string();
    assert!(nested.contains("## Current files"), "{nested}");
    assert!(
        nested.contains("line 350\\nline 351\\n") && nested.contains("line 700\\n"),
        "the whole file is shown"
    );
    assert!(!nested.contains("lines not shown"), "no windows");
    assert_eq!(ws.read("big.txt"), fixed);
}

/// The `type` of each JSON event line a run printed.
fn event_types(r: &Run) -> Vec<String> {
    r.stdout()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|e| e["type"].as_str().unwrap_or("").to_string())
        .collect()
}

fn count(types: &[String], t: &str) -> usize {
    types.iter().filter(|x| *x == t).count()
}

/// An OpenAI answer that says `text` and calls one tool.
fn text_and_call(text: &str, name: &str, args: &str) -> Reply {
    let mut parts = crate::mock_llm::openai_events(&[
        serde_json::json!({"choices":[{"index":0,"delta":{"content":text}}]}),
        serde_json::json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":name,"arguments":args}}]}}]}),
        serde_json::json!({"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}),
    ]);
    parts.push("data: [DONE]\n\n".into());
    Reply::sse(parts)
}

#[test]
fn max_steps_keeps_the_last_assistant_text_and_a_capped_turn_ends() {
    // Seed 004: on the step cap the content is the last assistant text, and `error` is part
    // of the result (null when nothing failed).
    let ws = Workspace::new();
    ws.write("a.txt", "one\n");
    let mock = MockLlm::start(vec![
        text_and_call(
            "Looking for p0 first.",
            "search_repo",
            r#"{"pattern":"p0"}"#,
        ),
        text_and_call(
            "Now p1, then I will answer.",
            "search_repo",
            r#"{"pattern":"p1"}"#,
        ),
    ]);
    let r = agent(&ws, &mock, &["--prompt", "x", "--max-steps", "2"]);
    r.expect_code(1);
    let res = agent_result(&r);
    assert_eq!(res["stop_reason"], "max_steps");
    assert_eq!(res["content"], "Now p1, then I will answer.", "{res}");
    assert!(res.get("error").is_some_and(Value::is_null), "{res}");
    let types = event_types(&r);
    assert_eq!(
        (count(&types, "turn.start"), count(&types, "turn.end")),
        (2, 2)
    );

    // A turn the write cap stops still ends with turn.end.
    let w = |n: u32| {
        serde_json::json!({"path": "a.txt", "patch": format!("<<<<<<< SEARCH\n=======\nx{n}\n>>>>>>> REPLACE\n")}).to_string()
    };
    let mock = MockLlm::start(vec![
        openai_calls(&[("write_patch", &w(1))]),
        openai_calls(&[("write_patch", &w(2))]),
    ]);
    let r = agent(&ws, &mock, &["--prompt", "x", "--max-writes", "1"]);
    r.expect_code(1);
    assert_eq!(agent_result(&r)["stop_reason"], "max_writes");
    let types = event_types(&r);
    assert_eq!(
        (count(&types, "turn.start"), count(&types, "turn.end")),
        (2, 2),
        "{types:?}"
    );
    let last_end = r
        .stdout()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .rfind(|e| e["type"] == "turn.end")
        .unwrap();
    assert_eq!(last_end["turn"], 2);
}

#[test]
fn an_overflow_retry_is_the_same_turn_and_failures_fill_error() {
    let ws = Workspace::new();
    let overflow = || {
        Reply::json(
            400,
            serde_json::json!({"error":{"message":"This model's maximum context length is 8192 tokens","code":"context_length_exceeded"}}),
        )
    };
    // Compacted and asked again: one turn, started once.
    let mock = MockLlm::start(vec![overflow(), openai_text("fits now")]);
    let r = agent(&ws, &mock, &["--prompt", "x"]);
    r.expect_code(0);
    let types = event_types(&r);
    assert_eq!(
        (count(&types, "turn.start"), count(&types, "turn.end")),
        (1, 1),
        "{types:?}"
    );
    let res = agent_result(&r);
    assert_eq!(
        (res["turns"].as_u64(), res["content"].as_str()),
        (Some(1), Some("fits now"))
    );
    assert!(res["error"].is_null(), "{res}");

    // Overflowing again: context_exceeded, with the reason in `error`, and the turn ends.
    let mock = MockLlm::start(vec![overflow(), overflow()]);
    let r = agent(&ws, &mock, &["--prompt", "x"]);
    r.expect_code(1);
    let res = agent_result(&r);
    assert_eq!(res["stop_reason"], "context_exceeded");
    assert!(
        res["error"]
            .as_str()
            .unwrap()
            .contains("maximum context length"),
        "{res}"
    );
    let types = event_types(&r);
    assert_eq!(
        (count(&types, "turn.start"), count(&types, "turn.end")),
        (1, 1)
    );

    // A request the server refuses: `error` says why.
    let mock = MockLlm::start(vec![Reply::json(
        400,
        serde_json::json!({"error":{"message":"unknown parameter: frobnicate"}}),
    )]);
    let r = agent(&ws, &mock, &["--prompt", "x"]);
    let res = agent_result(&r);
    assert_eq!(res["stop_reason"], "error", "{res}");
    assert!(
        res["error"].as_str().unwrap().contains("frobnicate"),
        "{res}"
    );
}

#[test]
fn compile_loop_with_one_target_file_in_a_list_is_multi_file_mode() {
    // Seed 000: `target_files` with one element is multi-file mode (modified_files), and
    // seed 001's lastIteration comes back with the result.
    let ws = Workspace::new();
    ws.write("main.c", "int main(void) { return 0 }\n");
    let mock = MockLlm::start(vec![
        openai_calls(&[(
            "compile_loop",
            r#"{"spec":"make it compile","target_files":["main.c"]}"#,
        )]),
        openai_text(
            "<<< path=main.c >>>\n<<<<<<< SEARCH\nint main(void) { return 0 }\n=======\nint main(void) { return 0; }\n>>>>>>> REPLACE\n",
        ),
        openai_calls(&[("final_answer", r#"{"summary":"compiles now"}"#)]),
    ]);
    let r = agent(
        &ws,
        &mock,
        &[
            "--prompt",
            "fix main.c",
            "--test-command",
            "gcc -fsyntax-only main.c",
        ],
    );
    r.expect_code(0);
    let cl: Value =
        serde_json::from_str(tool_results(&mock, 2)[0]["content"].as_str().unwrap()).unwrap();
    assert_eq!(cl["ok"], true, "{cl}");
    assert!(cl.get("artifact_path").is_none(), "{cl}");
    assert_eq!(
        cl["modified_files"],
        serde_json::json!([ws.root().join("main.c").to_string_lossy()])
    );
    assert_eq!(
        (
            cl["lastIteration"]["iteration"].as_u64(),
            cl["lastIteration"]["exit_code"].as_i64()
        ),
        (Some(1), Some(0)),
        "{cl}"
    );
    assert_eq!(ws.read("main.c"), "int main(void) { return 0; }\n");
}

#[test]
fn a_turn_runs_at_most_64_calls_and_answers_the_rest_with_the_cap() {
    let ws = Workspace::new();
    let args: Vec<String> = (0..70)
        .map(|i| {
            ws.write(&format!("f{i}.txt"), "hello from a\n");
            format!(r#"{{"paths":["f{i}.txt"]}}"#)
        })
        .collect();
    let calls: Vec<(&str, &str)> = args.iter().map(|a| ("read_files", a.as_str())).collect();
    let mock = MockLlm::start(vec![
        openai_calls(&calls),
        openai_calls(&[("final_answer", r#"{"summary":"read"}"#)]),
    ]);
    let r = agent(&ws, &mock, &["--prompt", "read a lot"]);
    r.expect_code(0);
    let results = tool_results(&mock, 1);
    assert_eq!(results.len(), 70, "every call gets a result");
    let ran = results
        .iter()
        .filter(|m| m["content"].as_str().unwrap().contains("hello from a"))
        .count();
    assert_eq!(ran, 64);
    for m in &results[64..] {
        let c = m["content"].as_str().unwrap();
        assert!(
            c.contains("at most 64 tool calls") && c.contains("made 70"),
            "{c}"
        );
    }
    assert_eq!(results[69]["tool_call_id"], "call_69");
}

#[test]
fn the_agent_checks_arguments_against_the_schema_as_tool_call_does() {
    let ws = Workspace::new();
    ws.write("a.txt", "hello from a\n");
    let mock = MockLlm::start(vec![
        openai_calls(&[
            ("read_files", r#"{"paths":["a.txt"],"nonce":1}"#),
            ("read_files", r#"{"paths":["a.txt"],"nonce":2}"#),
        ]),
        openai_calls(&[("read_files", r#"{"paths":["a.txt"],"nonce":3}"#)]),
        openai_calls(&[("final_answer", r#"{"summary":"read"}"#)]),
    ]);
    let r = agent(&ws, &mock, &["--prompt", "read"]);
    r.expect_code(0);
    // Parallel reads (two in a turn) and a call on its own are both checked.
    for (request, n) in [(1, 2), (2, 1)] {
        let results = tool_results(&mock, request);
        for m in &results[results.len() - n..] {
            let c = m["content"].as_str().unwrap();
            assert!(
                c.contains("unknown field `nonce`") && !c.contains("hello from a"),
                "{c}"
            );
        }
    }
}

//! The agent's policies on the shared loop core, end to end against the mock LLM: hooks on
//! every call (parallel batches included) and a before-LLM hook that rewrites the messages,
//! repeats counted only when nothing changed, generate_patch with a failed dry run fed back,
//! evaluate_work on the run's changed files, and usage summed over every request.

use crate::mock_llm::{MockLlm, Reply, openai_calls, openai_events, openai_text, tool_contents};
use crate::support::{Workspace, agent, agent_result, sr};
use serde_json::{Value, json};

/// A tool-call answer that also reports usage.
fn calls_with_usage(calls: &[(&str, &str)], prompt: u64, completion: u64) -> Reply {
    let mut deltas: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(i, (name, args))| json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":i,"id":format!("call_{i}"),"type":"function","function":{"name":name,"arguments":args}}]}}]}))
        .collect();
    deltas.push(json!({"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}));
    deltas.push(
        json!({"choices":[],"usage":{"prompt_tokens":prompt,"completion_tokens":completion}}),
    );
    let mut parts = openai_events(&deltas);
    parts.push("data: [DONE]\n\n".into());
    Reply::sse(parts)
}

#[test]
fn a_deny_hook_sees_every_call_of_a_parallel_batch() {
    let ws = Workspace::new();
    ws.write("a.txt", "alpha\n");
    ws.write("secret.txt", "s3cret\n");
    ws.write(
        "deny.sh",
        "#!/bin/sh\ninput=$(cat)\necho \"$input\" >> seen.log\ncase \"$input\" in *secret*) echo '{\"decision\":\"deny\",\"reason\":\"not that file\"}';; *) echo '{\"decision\":\"allow\"}';; esac\n",
    );
    ws.write("kiln.toml", "[agent.hooks]\nbefore_tool = \"sh deny.sh\"\n");
    let mock = MockLlm::start(vec![
        openai_calls(&[
            ("read_file", r#"{"path":"a.txt"}"#),
            ("read_file", r#"{"path":"secret.txt"}"#),
            ("search_repo", r#"{"pattern":"alpha"}"#),
        ]),
        openai_text("done"),
    ]);
    let r = agent(&ws, &mock, &["--prompt", "read"]);
    r.expect_code(0);
    let seen = ws.read("seen.log");
    assert_eq!(
        seen.lines().count(),
        3,
        "the hook ran for each call: {seen}"
    );
    let res = tool_contents(&mock, 1);
    assert!(res[0].contains("alpha"), "{}", res[0]);
    assert_eq!(res[1], "denied by the before-tool hook: not that file");
    assert!(!res.iter().any(|t| t.contains("s3cret")));
    assert!(res[2].contains("a.txt"), "{}", res[2]);
}

#[test]
fn a_before_llm_hook_may_rewrite_the_messages_and_after_llm_sees_the_reply() {
    let ws = Workspace::new();
    ws.write(
        "rewrite.sh",
        "#!/bin/sh\ncat > /dev/null\necho '{\"messages\":[{\"role\":\"user\",\"text\":\"REWRITTEN TASK\"}]}'\n",
    );
    ws.write("after.sh", "#!/bin/sh\ncat >> replies.log\n");
    ws.write(
        "kiln.toml",
        "[agent.hooks]\nbefore_llm = \"sh rewrite.sh\"\nafter_llm = \"sh after.sh\"\n",
    );
    let mock = MockLlm::start(vec![openai_text("the answer")]);
    let r = agent(&ws, &mock, &["--prompt", "original task"]);
    r.expect_code(0);
    let body = mock.recorded()[0].body.to_string();
    assert!(body.contains("REWRITTEN TASK"), "{body}");
    assert!(!body.contains("original task"), "{body}");
    let replies = ws.read("replies.log");
    assert!(replies.contains("the answer"), "{replies}");
    assert!(replies.contains("\"usage\""), "{replies}");
}

#[test]
fn an_edit_test_cycle_is_progress_but_an_idle_repeat_is_not() {
    let ws = Workspace::new();
    ws.write("n.txt", "0\n");
    let test = ("run_cmd", r#"{"command":"cat","args":["n.txt"]}"#);
    let patch = |from: &str, to: &str| {
        json!({ "path": "n.txt", "patch": sr(&format!("{from}\n"), &format!("{to}\n")) })
            .to_string()
    };
    let (p1, p2) = (patch("0", "1"), patch("1", "2"));
    let mock = MockLlm::start(vec![
        openai_calls(&[test]),
        openai_calls(&[("write_patch", &p1)]),
        openai_calls(&[test]),
        openai_calls(&[("write_patch", &p2)]),
        openai_calls(&[test]),
        openai_text("done"),
    ]);
    let r = agent(
        &ws,
        &mock,
        &[
            "--prompt",
            "count",
            "--test-command",
            "cat n.txt",
            "--max-repeats",
            "1",
        ],
    );
    assert_eq!(
        agent_result(&r)["stop_reason"],
        "complete",
        "{}",
        r.stderr()
    );
    assert_eq!(ws.read("n.txt"), "2\n");
    // The same test twice with nothing written in between is a repeat.
    let mock = MockLlm::start(vec![openai_calls(&[test]), openai_calls(&[test])]);
    let r = agent(
        &ws,
        &mock,
        &[
            "--prompt",
            "count",
            "--test-command",
            "cat n.txt",
            "--max-repeats",
            "1",
        ],
    );
    assert_eq!(agent_result(&r)["stop_reason"], "repeated_call");
}

#[test]
fn generate_patch_feeds_one_failed_dry_run_back_then_applies() {
    let ws = Workspace::new();
    ws.write("calc.py", "def add(a, b):\n    return a - b\n");
    let args = json!({ "instruction": "fix add", "paths": ["calc.py"] }).to_string();
    let mock = MockLlm::start(vec![
        openai_calls(&[("generate_patch", &args)]),
        // The generated edit: first one that does not match, then a good one.
        openai_text(&format!(
            "calc.py\n{}",
            sr("    return a * b\n", "    return a + b\n")
        )),
        openai_text(&format!(
            "calc.py\n{}",
            sr("    return a - b\n", "    return a + b\n")
        )),
        openai_text("fixed"),
    ]);
    let r = agent(&ws, &mock, &["--prompt", "fix calc.py"]);
    assert_eq!(
        agent_result(&r)["stop_reason"],
        "complete",
        "{}",
        r.stderr()
    );
    assert_eq!(ws.read("calc.py"), "def add(a, b):\n    return a + b\n");
    // The generator saw the file and the instruction; its second request carried the
    // failure of the first.
    let first = mock.recorded()[1].body.to_string();
    assert!(
        first.contains("fix add") && first.contains("return a - b"),
        "{first}"
    );
    assert!(!first.contains("\"tools\":[{"), "a plain call: {first}");
    let second = mock.recorded()[2].body.to_string();
    assert!(second.contains("That edit does not apply"), "{second}");
    let res = tool_contents(&mock, 3);
    let v: Value = serde_json::from_str(&res[0]).unwrap();
    assert_eq!(
        (v["applied"].as_bool(), v["attempts"].as_i64()),
        (Some(true), Some(2))
    );
    // It counts as a write.
    let r2 = {
        let mock = MockLlm::start(vec![openai_calls(&[("generate_patch", &args)])]);
        agent(&ws, &mock, &["--prompt", "x", "--max-writes", "0"])
    };
    assert_eq!(agent_result(&r2)["stop_reason"], "max_writes");
}

#[test]
fn usage_sums_every_request_and_evaluate_work_reviews_the_changed_files() {
    let ws = Workspace::new();
    ws.write("a.txt", "old\n");
    let patch = json!({ "path": "a.txt", "patch": sr("old\n", "new content\n") }).to_string();
    let mock = MockLlm::start(vec![
        calls_with_usage(&[("write_patch", &patch)], 100, 10),
        calls_with_usage(&[("evaluate_work", "{}")], 200, 20),
        // The reviewer (a separate request), then the final answer: 20 in (8 cached) / 5 out
        // (2 reasoning) each.
        openai_text("{\"score\": 9, \"strengths\": [], \"improvements\": [], \"suggestions\": []}"),
        openai_text("done"),
    ]);
    let r = agent(&ws, &mock, &["--prompt", "edit"]);
    let res = agent_result(&r);
    assert_eq!(res["stop_reason"], "complete", "{}", r.stderr());
    let u = &res["usage"];
    assert_eq!(u["input"], 100 + 200 + 12 + 12, "{u}");
    assert_eq!(u["cached_input"], 16, "{u}");
    assert_eq!(u["output"], 10 + 20 + 5 + 5, "{u}");
    assert_eq!(u["reasoning"], 4, "{u}");
    // The reviewer was shown the file this run changed.
    let review = mock.recorded()[2].body.to_string();
    assert!(
        review.contains("a.txt") && review.contains("new content"),
        "{review}"
    );
    assert_eq!(res["changed_files"], json!(["a.txt"]));
    // The store's totals agree.
    let s = ws.store();
    let row = &s.loops(1).unwrap()[0];
    assert_eq!(row.tokens.output, 40);
}

//! Budgets end to end against the mock LLM: `--max-tokens` and `--max-cost` stop a fix loop
//! (and an agent) with reason `budget` before the request that would pass them, recorded and
//! exit 1; `[budget]` in the user's configuration does the same; a cost cap on a model with no
//! known price is refused before any request or loop row.

use crate::mock_llm::{MockLlm, Reply, openai_events};
use crate::support::{Run, Workspace, last_event};
use kiln::store::LoopRow;
use serde_json::{Value, json};

fn loops(ws: &Workspace) -> Vec<LoopRow> {
    if !ws.store_path().exists() {
        return Vec::new();
    }
    ws.store().loops(100).unwrap()
}

/// A streamed answer (text, or one tool call) whose usage reports `prompt` input tokens.
fn answer(prompt: u64, tool: Option<(&str, Value)>) -> Reply {
    let delta = match tool {
        Some((name, args)) => {
            json!({"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":name,"arguments":args.to_string()}}]})
        }
        None => json!({"role":"assistant","content":"I changed nothing."}),
    };
    let mut parts = openai_events(&[
        json!({"model":"m","choices":[{"index":0,"delta":delta}]}),
        json!({"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}),
        json!({"choices":[],"usage":{"prompt_tokens":prompt,"completion_tokens":5}}),
    ]);
    parts.push("data: [DONE]\n\n".into());
    Reply::sse(parts)
}

/// `kiln COMMAND --base-url MOCK/v1 --model MODEL --json ARGS...`.
fn kiln(ws: &Workspace, mock: &MockLlm, command: &str, model: &str, args: &[&str]) -> Run {
    let base = format!("{}/v1", mock.url);
    let mut all = vec![command, "--base-url", &base, "--model", model, "--json"];
    all.extend_from_slice(args);
    ws.kiln(&all, &[])
}

/// A fix loop over a check that always fails, so each iteration asks the model again.
fn fix(ws: &Workspace, mock: &MockLlm, model: &str, budget: &[&str]) -> Run {
    ws.write("a.txt", "x\n");
    let mut args = vec!["--cmd", "false", "--file", "a.txt", "--max-iters", "3"];
    args.extend_from_slice(budget);
    kiln(ws, mock, "fix", model, &args)
}

/// The run stopped with `budget` after `requests` requests: exit 1, one row, failed.
fn assert_budget_stop(ws: &Workspace, mock: &MockLlm, r: &Run, requests: usize) -> LoopRow {
    r.expect_code(1);
    assert_eq!(mock.recorded().len(), requests, "{}", r.stderr());
    let rows = loops(ws);
    assert_eq!(rows.len(), 1, "{rows:?}");
    let row = rows[0].clone();
    assert_eq!(row.stop_reason.as_deref(), Some("budget"), "{row:?}");
    assert_eq!(row.status, "failed");
    row
}

#[test]
fn max_tokens_stops_a_fix_loop_before_the_request_that_would_pass_it() {
    let ws = Workspace::new();
    // The first answer reports 100k input tokens: the second request (about 4k more)
    // would take the run past 50k.
    let mock = MockLlm::start(vec![answer(100_000, None), answer(20, None)]);
    let r = fix(&ws, &mock, "test-model", &["--max-tokens", "50000"]);
    assert_budget_stop(&ws, &mock, &r, 1);
    let res = last_event(&r, "loop.result");
    assert_eq!(res["stop_reason"], "budget", "{res}");
    assert_eq!(res["failure_reason"], "budget", "{res}");
    assert!(
        r.stdout().contains("--max-tokens 50000"),
        "the budget is not named: {}",
        r.stdout()
    );
}

#[test]
fn a_first_request_estimated_past_max_tokens_is_never_sent() {
    let ws = Workspace::new();
    let mock = MockLlm::start(vec![answer(20, None)]);
    // The request's own estimate (its prompt, plus 4096 output tokens) passes 100.
    let r = fix(&ws, &mock, "test-model", &["--max-tokens", "100"]);
    assert_budget_stop(&ws, &mock, &r, 0);
}

#[test]
fn max_cost_stops_a_fix_loop_on_a_priced_model() {
    let ws = Workspace::new();
    // gpt-4o-mini: $0.15 per million input tokens. The first answer costs $0.15, past $0.10;
    // the first request's estimate (a few thousand tokens) is well under.
    let mock = MockLlm::start(vec![answer(1_000_000, None), answer(20, None)]);
    let r = fix(&ws, &mock, "gpt-4o-mini", &["--max-cost", "0.10"]);
    assert_budget_stop(&ws, &mock, &r, 1);
    assert!(r.stdout().contains("--max-cost $0.1000"), "{}", r.stdout());
}

#[test]
fn max_cost_on_a_model_without_a_price_is_refused_before_anything_runs() {
    let ws = Workspace::new();
    let mock = MockLlm::start(vec![answer(20, None)]);
    let r = fix(&ws, &mock, "test-model", &["--max-cost", "1"]);
    r.expect_code(2);
    let err = r.stderr();
    assert!(
        err.contains("test-model") && err.contains("[pricing.\"test-model\"]"),
        "{err}"
    );
    assert!(mock.recorded().is_empty(), "the model was asked");
    assert!(loops(&ws).is_empty(), "a loop row was left behind");
}

#[test]
fn the_user_configuration_sets_a_budget() {
    let ws = Workspace::new();
    std::fs::write(
        ws.path().join("no-user-config.toml"),
        "[budget]\nmax_tokens = 50000\n",
    )
    .unwrap();
    let mock = MockLlm::start(vec![answer(100_000, None), answer(20, None)]);
    let r = fix(&ws, &mock, "test-model", &[]);
    assert_budget_stop(&ws, &mock, &r, 1);
}

#[test]
fn max_tokens_stops_an_agent() {
    let ws = Workspace::new();
    ws.write("a.txt", "hello\n");
    let mock = MockLlm::start(vec![
        answer(100_000, Some(("read_file", json!({"path": "a.txt"})))),
        answer(20, None),
    ]);
    let r = kiln(
        &ws,
        &mock,
        "agent",
        "test-model",
        &["--prompt", "read a.txt", "--max-tokens", "50000"],
    );
    assert_budget_stop(&ws, &mock, &r, 1);
    let res = last_event(&r, "agent.result");
    assert_eq!(res["stop_reason"], "budget", "{res}");
    assert_eq!(res["success"], false, "{res}");
}

#[test]
fn max_tokens_stops_a_loop_and_its_parent_row_says_budget() {
    let ws = Workspace::new();
    ws.write("task.md", "Read a.txt.\n");
    ws.write("a.txt", "hello\n");
    let mock = MockLlm::start(vec![
        answer(100_000, Some(("read_file", json!({"path": "a.txt"})))),
        answer(20, None),
    ]);
    let r = kiln(
        &ws,
        &mock,
        "loop",
        "test-model",
        &["--task", "task.md", "--loops", "1", "--max-tokens", "50000"],
    );
    r.expect_code(1);
    assert_eq!(mock.recorded().len(), 1, "{}", r.stderr());
    let res = last_event(&r, "loop.run.result");
    assert_eq!(res["stop_reason"], "budget", "{res}");
    let rows = loops(&ws);
    let parent = rows
        .iter()
        .find(|l| l.kind == "loop")
        .expect("the loop row");
    assert_eq!(parent.stop_reason.as_deref(), Some("budget"), "{rows:?}");
}

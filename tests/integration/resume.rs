//! `kiln agent --resume ID` on a run killed (SIGKILL) in the middle: the stored answers and
//! tool results are replayed (the model is asked only for what it never answered, the
//! program the run started does not run again), caps and token totals count both parts, a
//! workspace changed since is refused naming the file, and both parts can then be undone.

use crate::mock_llm::{MockLlm, Reply, openai_events, openai_text};
use crate::support::Workspace;
use crate::undo::{assert_as_before, assert_changed, killed_agent_run, patch, workspace};

/// A streamed OpenAI answer calling one tool, with usage (30 in, 7 out).
fn call_with_usage(name: &str, args: &str) -> Reply {
    call_using(name, args, 30)
}

/// A streamed OpenAI answer calling one tool, with usage (`input` in, 7 out).
fn call_using(name: &str, args: &str, input: u64) -> Reply {
    let mut parts = openai_events(&[
        serde_json::json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":format!("call_{name}"),"type":"function","function":{"name":name,"arguments":args}}]}}]}),
        serde_json::json!({"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}),
        serde_json::json!({"choices":[],"usage":{"prompt_tokens":input,"completion_tokens":7}}),
    ]);
    parts.push("data: [DONE]\n\n".into());
    Reply::sse(parts)
}

fn turns_with_usage() -> Vec<Reply> {
    vec![
        call_with_usage("write_patch", &patch("a.txt", "one\n", "ONE\n")),
        call_with_usage("write_patch", &patch("new.txt", "", "new\n")),
        call_with_usage("run_cmd", r#"{"command":"sh gen.sh"}"#),
    ]
}

#[test]
fn a_killed_agent_run_resumes_without_asking_or_running_again() {
    let ws = workspace();
    // Part 2's one answer: another call, so the fifth turn would pass the cap of 4.
    let (id, mock) = killed_agent_run(
        &ws,
        turns_with_usage(),
        vec![call_with_usage("read_file", r#"{"path":"a.txt"}"#)],
        &["-m", "4"],
    );
    assert_changed(&ws);
    assert_eq!(ws.read("runs.log"), "x");
    assert_eq!(mock.recorded().len(), 4);

    // A change the run cannot account for is refused, naming the file.
    ws.write("b.txt", "someone else\n");
    let base = format!("{}/v1", mock.url);
    let model = ["--base-url", base.as_str(), "--model", "test-model"];
    let r = ws.kiln(
        &[&["agent", "--resume", &id.to_string()][..], &model].concat(),
        &[],
    );
    r.expect_code(2);
    assert!(
        r.stderr().contains("cannot account for (b.txt)"),
        "{}",
        r.stderr()
    );
    assert_eq!(mock.recorded().len(), 4, "nothing asked");
    ws.write("b.txt", "formatted\n");

    // The model settings are the resume's own (here the same server): the record holds none.
    let r = ws.kiln(
        &[
            &["agent", "--resume", &id.to_string(), "--json"][..],
            &model,
        ]
        .concat(),
        &[],
    );
    r.expect_code(1);
    assert!(
        r.stderr()
            .contains("3 answers and 3 tool results are replayed"),
        "{}",
        r.stderr()
    );
    let last: serde_json::Value = serde_json::from_str(r.stdout().lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "agent.result", "{last}");
    // The turn cap counted the three replayed turns: one new turn, then max_steps.
    assert_eq!(last["stop_reason"], "max_steps", "{last}");
    assert_eq!(last["turns"], 4);
    // Only the answer the run never had was asked for, with the whole conversation.
    let rec = mock.recorded();
    assert_eq!(rec.len(), 5);
    let msgs = rec[4].body["messages"].to_string();
    assert!(msgs.contains("run_cmd") && msgs.contains("ONE"), "{msgs}");
    // The program the first part ran did not run again; the files are as the run left them.
    assert_eq!(ws.read("runs.log"), "x");
    assert_changed(&ws);
    // Token totals count both parts: 4 answers of 30 in / 7 out.
    let new_id = last["loop_id"].as_i64().unwrap();
    assert_ne!(new_id, id);
    let row = ws
        .store()
        .loops(5)
        .unwrap()
        .into_iter()
        .find(|r| r.id == new_id)
        .unwrap();
    assert_eq!((row.tokens.input, row.tokens.output), (120, 28));
    assert_eq!(last["usage"]["output"], 28, "{last}");

    // Undo the resumed part, then the killed one: the workspace is as before both.
    ws.kiln(&["undo"], &[]).expect_code(0);
    assert_changed(&ws);
    ws.kiln(&["undo", &id.to_string()], &[]).expect_code(0);
    assert_as_before(&ws);
}

#[test]
fn resume_refuses_a_finished_run_and_a_run_of_another_kind() {
    let ws = workspace();
    let mock = MockLlm::start(vec![openai_text("nothing to do")]);
    let base = format!("{}/v1", mock.url);
    ws.kiln(
        &["agent", "--base-url", &base, "--model", "m", "-p", "look"],
        &[],
    )
    .expect_code(0);
    let r = ws.kiln(&["agent", "--resume", "1"], &[]);
    r.expect_code(2);
    assert!(r.stderr().contains("nothing to resume"), "{}", r.stderr());
    let r = ws.kiln(&["loop", "--resume", "1"], &[]);
    r.expect_code(2);
    assert!(
        r.stderr().contains("`kiln agent --resume 1`"),
        "{}",
        r.stderr()
    );
    let r = ws.kiln(&["agent", "--resume", "1", "--max-steps", "3"], &[]);
    r.expect_code(2);
    assert!(
        r.stderr().contains("leave out --max-steps 3"),
        "{}",
        r.stderr()
    );
}

#[test]
fn a_killed_loop_resumes_its_phases_without_asking_again() {
    use crate::review_loop::{final_answer, review};
    use serde_json::json;
    let ws = Workspace::new();
    ws.write(
        "task.md",
        "+++\n[tools]\nbash = [\"cat\"]\n+++\nCreate hello.txt saying hi, then a README.md.\n",
    );
    let mock = MockLlm::start(vec![
        // Round 1, execution.
        crate::mock_llm::openai_calls(&[
            ("write_file", r#"{"path":"hello.txt","content":"hi\n"}"#),
            ("run_cmd", r#"{"command":"cat","args":["hello.txt"]}"#),
        ]),
        final_answer(
            "STATUS: INCOMPLETE\nPlan: hello.\nChecks: cat\nNEXT STEPS:\n- write README.md\n",
        ),
        // Round 1, review: the second answer never comes before the kill.
        crate::mock_llm::call("run_cmd", json!({ "command": "ls" })),
        Reply::Stream(vec![(std::time::Duration::from_secs(60), String::new())]),
        // After the resume.
        review("hello.txt exists", "", &["write README.md"]),
        crate::mock_llm::call(
            "write_file",
            json!({ "path": "README.md", "content": "# hello\n" }),
        ),
        final_answer("STATUS: COMPLETE\nPlan: README.\nChecks: none needed"),
    ]);
    let base = format!("{}/v1", mock.url);
    let child = ws.spawn_kiln(&[
        "loop",
        "--base-url",
        &base,
        "--model",
        "test-model",
        "--json",
        "--task",
        "task.md",
    ]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while mock.recorded().len() < 4 {
        assert!(
            std::time::Instant::now() < deadline,
            "the loop never reached its review"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    child.wait_with_output().unwrap();
    assert_eq!(ws.read("hello.txt"), "hi\n");
    let id = ws
        .store()
        .loops(10)
        .unwrap()
        .into_iter()
        .find(|r| r.kind == "loop")
        .unwrap()
        .id;

    let r = ws.kiln(
        &[
            "loop",
            "--resume",
            &id.to_string(),
            "--json",
            "--base-url",
            &base,
            "--model",
            "test-model",
        ],
        &[],
    );
    let last: serde_json::Value = serde_json::from_str(r.stdout().lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "loop.run.result", "{last}\n{}", r.stderr());
    assert_eq!(last["stop_reason"], "complete", "{}", r.stderr());
    assert_eq!(last["loops_completed"], 2);
    assert!(
        r.stderr()
            .contains("3 answers and 3 tool results are replayed"),
        "{}",
        r.stderr()
    );
    assert_eq!(
        mock.recorded().len(),
        7,
        "only the three answers never given were asked for"
    );
    assert_eq!(ws.read("README.md"), "# hello\n");

    // The resumed loop's report shows each phase, the replayed ones included.
    let new_id = ws
        .store()
        .loops(20)
        .unwrap()
        .into_iter()
        .find(|r| r.kind == "loop" && r.id != id)
        .unwrap()
        .id;
    let out = ws.path().parent().unwrap().join("loop-report.html");
    let rep = ws.kiln(
        &[
            "report",
            &new_id.to_string(),
            "--html",
            out.to_str().unwrap(),
        ],
        &[],
    );
    rep.expect_code(0);
    let dom = crate::report::browser_dom(&out, None);
    // A loop counts rounds, the same number on the console and on the page (not the
    // parent run's own turns, of which it has none).
    let rounds = crate::report::text_of(&dom, "step-count");
    assert!(
        rep.stderr().contains(&format!("({rounds} round")) && rounds != "0",
        "{} / {rounds}",
        rep.stderr()
    );
    assert_eq!(dom.matches("loop-execute · run").count(), 2, "{dom}");
    // Round 2 completed early: no second review.
    assert_eq!(dom.matches("loop-review · run").count(), 1, "{dom}");
    assert!(
        dom.contains("run_cmd") && dom.contains("write_file"),
        "{dom}"
    );
    assert!(dom.contains("id=\"stop-reason\">complete<"), "{dom}");
}

#[test]
fn the_budget_of_a_resumed_run_counts_what_the_first_part_spent() {
    let ws = workspace();
    // Each answer reports 70,000 input tokens; the cap is 250,000. The first part spends
    // 210,021 in three answers (its fourth request, about 4,300 more by estimate, is sent and
    // never answered); the resumed part's first answer brings it to 280,028, so its next
    // request is refused, though the resumed part alone spent only 70,007.
    let turns = vec![
        call_using("write_patch", &patch("a.txt", "one\n", "ONE\n"), 70_000),
        call_using("write_patch", &patch("new.txt", "", "new\n"), 70_000),
        call_using("run_cmd", r#"{"command":"sh gen.sh"}"#, 70_000),
    ];
    let (id, mock) = killed_agent_run(
        &ws,
        turns,
        vec![
            call_using("read_file", r#"{"path":"a.txt"}"#, 70_000),
            openai_text("never asked"),
        ],
        &["--max-tokens", "250000"],
    );
    assert_eq!(mock.recorded().len(), 4);
    let base = format!("{}/v1", mock.url);
    let r = ws.kiln(
        &[
            "agent",
            "--resume",
            &id.to_string(),
            "--json",
            "--base-url",
            &base,
            "--model",
            "test-model",
        ],
        &[],
    );
    r.expect_code(1);
    let last: serde_json::Value = serde_json::from_str(r.stdout().lines().last().unwrap()).unwrap();
    assert_eq!(last["stop_reason"], "budget", "{last}\n{}", r.stderr());
    assert_eq!(
        mock.recorded().len(),
        5,
        "the request past the budget was not sent"
    );
    assert_eq!(last["usage"]["input"], 280_000, "{last}");
}

/// Issue 31 item 12: a run whose task was given as the positional argument (`kiln agent
/// "Make the tests pass"`, the README's first example) resumes with that task.
#[test]
fn an_agent_run_started_with_a_positional_task_resumes() {
    use std::time::Duration;
    let ws = workspace();
    let mock = MockLlm::start(vec![
        call_with_usage("write_patch", &patch("a.txt", "one\n", "ONE\n")),
        // The second answer never comes in time: the run is interrupted (Ctrl-C) while it waits.
        Reply::Stream(vec![(Duration::from_secs(60), String::new())]),
        openai_text("done: a.txt says ONE"),
    ]);
    let base = format!("{}/v1", mock.url);
    let child = ws.spawn_kiln(&[
        "agent",
        "make a.txt shout",
        "--base-url",
        &base,
        "--model",
        "test-model",
    ]);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while mock.recorded().len() < 2 {
        assert!(std::time::Instant::now() < deadline, "never asked twice");
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    child.wait_with_output().unwrap();
    let h = ws.kiln(&["history", "--json", "--limit", "1"], &[]);
    let row: serde_json::Value = serde_json::from_str(h.stdout().lines().next().unwrap()).unwrap();
    let id = row["id"].as_i64().unwrap().to_string();

    let r = ws.kiln(
        &[
            "agent",
            "--resume",
            &id,
            "--base-url",
            &base,
            "--model",
            "test-model",
            "--json",
        ],
        &[],
    );
    r.expect_code(0);
    assert!(
        r.stderr()
            .contains("1 answer and 1 tool result are replayed"),
        "{}",
        r.stderr()
    );
    let last: serde_json::Value = serde_json::from_str(r.stdout().lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "agent.result", "{last}");
    assert_eq!(last["stop_reason"], "complete", "{last}");
    // The resumed part asked with the task it was started with.
    let rec = mock.recorded();
    assert_eq!(rec.len(), 3);
    assert!(
        rec[2].body["messages"]
            .to_string()
            .contains("make a.txt shout"),
        "{}",
        rec[2].body["messages"]
    );
}

//! `kiln loop` (seed 003) end to end against a mock LLM over real HTTP, with the real tool
//! plugins: two rounds with a pending item carried over, early exit on COMPLETE, a reviewer
//! refused outside its command list, a blocker, max_loops, a task file changed between rounds,
//! a task file outside the workspace, and the TOML artifacts.

use crate::mock_llm::{MockLlm, call, openai_calls, tool_contents};
use crate::support::{Run, Workspace, loop_result};
use serde_json::json;

fn kiln_loop(ws: &Workspace, mock: &MockLlm, args: &[&str]) -> Run {
    ws.kiln_model(&mock.url, "loop", args)
}

pub(crate) fn final_answer(text: &str) -> crate::mock_llm::Reply {
    call("final_answer", json!({ "summary": text }))
}

pub(crate) fn review(summary: &str, blocker: &str, pending: &[&str]) -> crate::mock_llm::Reply {
    call(
        "submit_review",
        json!({ "summary": summary, "blocker": blocker, "pending": pending }),
    )
}

/// The text of request `i` (system prompt, messages, tools), to search in.
fn request(mock: &MockLlm, i: usize) -> String {
    mock.recorded()[i].body.to_string()
}

fn tool_names(mock: &MockLlm, i: usize) -> Vec<String> {
    mock.recorded()[i].body["tools"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|t| t["function"]["name"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn toml_file(ws: &Workspace, name: &str) -> toml::Table {
    let text = ws.read(&format!(".kiln/loop/{name}"));
    toml::from_str(&text).unwrap_or_else(|e| panic!("{name} is not TOML: {e}\n{text}"))
}

const TASK: &str =
    "+++\n[tools]\nbash = [\"cat\"]\n+++\nCreate hello.txt saying hi, then a README.md.\n";

#[test]
fn two_rounds_carry_the_pending_item_and_complete_early() {
    let ws = Workspace::new();
    ws.write("task.md", TASK);
    let mock = MockLlm::start(vec![
        // Round 1, execution.
        openai_calls(&[
            ("write_file", r#"{"path":"hello.txt","content":"hi\n"}"#),
            ("run_cmd", r#"{"command":"cat","args":["hello.txt"]}"#),
        ]),
        final_answer(
            "STATUS: INCOMPLETE\nPlan: hello first.\nChecks: cat printed hi\nNEXT STEPS:\n- write README.md\n",
        ),
        // Round 1, review.
        call("run_cmd", json!({ "command": "ls" })),
        review("hello.txt exists", "", &["write README.md"]),
        // Round 2, execution.
        call(
            "write_file",
            json!({ "path": "README.md", "content": "# hello\n" }),
        ),
        final_answer("STATUS: COMPLETE\nPlan: README.\nChecks: none needed"),
    ]);
    let r = kiln_loop(&ws, &mock, &["--task", "task.md"]);
    let res = loop_result(&r);
    assert_eq!(res["stop_reason"], "complete", "{}", r.stderr());
    assert_eq!(res["loops_completed"], 2);
    assert_eq!(r.code(), 0);
    assert_eq!(ws.read("hello.txt"), "hi\n");
    assert_eq!(ws.read("README.md"), "# hello\n");
    assert_eq!(mock.recorded().len(), 6, "no review after COMPLETE");

    // Round 1's execution got the task text and the execution tools.
    let first = request(&mock, 0);
    assert!(first.contains("Create hello.txt saying hi"), "{first}");
    assert!(!first.contains("bash = "), "front matter is not shown");
    let exec_tools = tool_names(&mock, 0);
    for t in [
        "write_file",
        "write_patch",
        "glob",
        "read_files",
        "run_cmd",
        "final_answer",
    ] {
        assert!(
            exec_tools.contains(&t.to_string()),
            "{t} missing: {exec_tools:?}"
        );
    }
    assert!(!exec_tools.contains(&"submit_review".to_string()));
    // The cat command ran (allowed by the task's front matter).
    let cat_result = request(&mock, 1);
    assert!(
        cat_result.contains("hi\\\\n") || cat_result.contains("\\\"stdout\\\":\\\"hi"),
        "{cat_result}"
    );

    // The review is a fresh conversation with the verified actions and the report, and no
    // write tools.
    let rev = request(&mock, 2);
    assert!(rev.contains("files created: hello.txt"), "{rev}");
    assert!(rev.contains("ran `cat hello.txt` (exit 0)"), "{rev}");
    assert!(rev.contains("STATUS: INCOMPLETE"), "{rev}");
    let rev_messages = mock.recorded()[2].body["messages"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(
        rev_messages, 2,
        "a fresh conversation (system + task): {rev}"
    );
    let rev_tools = tool_names(&mock, 2);
    assert!(rev_tools.contains(&"submit_review".to_string()));
    for t in ["write_file", "write_patch", "final_answer"] {
        assert!(!rev_tools.contains(&t.to_string()), "review offered {t}");
    }

    // Round 2's execution carries the pending item and the loop context.
    let second = request(&mock, 4);
    assert!(second.contains("Pending items"), "{second}");
    assert!(second.contains("write README.md"), "{second}");
    assert!(second.contains("files created: hello.txt"), "{second}");

    // Artifacts parse as TOML, in the seed's shapes.
    let run = toml_file(&ws, "run.toml");
    assert_eq!(run["loops_completed"].as_integer(), Some(2));
    assert_eq!(run["model"].as_str(), Some("test-model"));
    for k in ["input", "cached_input", "output", "reasoning"] {
        assert!(
            run["tokens"][k].as_integer().is_some(),
            "tokens.{k} missing"
        );
    }
    assert_eq!(run["limits"]["loops"].as_integer(), Some(5));
    assert_eq!(run["limits"]["review_iterations"].as_integer(), Some(15));
    let state = toml_file(&ws, "state.toml");
    assert_eq!(state["phase"].as_str(), Some("done"));
    assert_eq!(state["task_file"].as_str(), Some("task.md"));
    let out = toml_file(&ws, "review_output.toml");
    assert_eq!(out["loop"].as_integer(), Some(1));
    assert_eq!(out["blocker"].as_str(), Some(""));
    assert_eq!(
        out["pending"].as_array().unwrap()[0]["item"].as_str(),
        Some("write README.md")
    );
    let exec = toml_file(&ws, "execution.toml");
    assert!(
        exec["event"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["type"].as_str() == Some("tool.end"))
    );
    let rev_log = toml_file(&ws, "review.toml");
    assert!(!rev_log["event"].as_array().unwrap().is_empty());

    // The store has the run and its phases; history lists them.
    let s = ws.store();
    let kinds: Vec<String> = s
        .loops(10)
        .unwrap()
        .iter()
        .map(|l| format!("{}:{}", l.kind, l.status))
        .collect();
    for k in [
        "loop:success",
        "loop-execute:success",
        "loop-review:success",
    ] {
        assert!(kinds.contains(&k.to_string()), "{k} missing: {kinds:?}");
    }
    let h = ws.kiln(&["history"], &[]);
    assert!(h.stdout().contains("loop-review"), "{}", h.stdout());
}

#[test]
fn the_reviewer_cannot_run_commands_outside_its_list_or_write() {
    let ws = Workspace::new();
    ws.write("task.md", TASK);
    ws.write("keep.txt", "keep\n");
    let mock = MockLlm::start(vec![
        final_answer("STATUS: INCOMPLETE\nNEXT STEPS:\n- check it\n"),
        openai_calls(&[
            ("run_cmd", r#"{"command":"touch","args":["pwned"]}"#),
            ("run_cmd", r#"{"command":"find","args":[".","-delete"]}"#),
            ("run_cmd", r#"{"command":"env","args":["-Scat keep.txt"]}"#),
            ("run_cmd", r#"{"command":"rg","args":["-iz","keep","."]}"#),
            ("write_file", r#"{"path":"keep.txt","content":"gone"}"#),
        ]),
        review("nothing left", "", &[]),
    ]);
    let r = kiln_loop(&ws, &mock, &["--task", "task.md", "--loops", "3"]);
    let res = loop_result(&r);
    assert_eq!(res["stop_reason"], "review_clean", "{}", r.stderr());
    assert_eq!(r.code(), 0);
    // Each refusal was reported to the reviewer.
    let tool_msgs = tool_contents(&mock, 2);
    assert_eq!(tool_msgs.len(), 5, "{tool_msgs:?}");
    assert!(
        tool_msgs[0].contains("`touch` is not allowed"),
        "{}",
        tool_msgs[0]
    );
    assert!(tool_msgs[1].contains("find -delete"), "{}", tool_msgs[1]);
    assert!(tool_msgs[2].contains("env -Scat"), "{}", tool_msgs[2]);
    assert!(tool_msgs[3].contains("rg -iz"), "{}", tool_msgs[3]);
    assert!(tool_msgs[4].contains("unknown tool"), "{}", tool_msgs[4]);
    // Nothing changed.
    assert!(!ws.root().join("pwned").exists());
    assert_eq!(ws.read("keep.txt"), "keep\n");
    assert_eq!(ws.read("task.md"), TASK);
}

#[test]
fn a_blocker_goes_to_the_next_round_and_stops_the_run_only_when_asked() {
    // Seed 003: a blocker prevents the early exit; the run goes on with the blocker in the
    // next round's context, until STATUS: COMPLETE or the loop limit.
    let ws = Workspace::new();
    ws.write("task.md", "Deploy it.\n");
    let mock = MockLlm::start(vec![
        final_answer("STATUS: INCOMPLETE\nNEXT STEPS:\n- deploy\n"),
        review("cannot deploy", "needs production credentials", &[]),
        final_answer("STATUS: COMPLETE\nPlan: deployed with the staging fallback."),
    ]);
    let r = kiln_loop(&ws, &mock, &["--task", "task.md"]);
    let res = loop_result(&r);
    assert_eq!(res["stop_reason"], "complete", "{}", r.stderr());
    assert_eq!(res["loops_completed"], 2);
    assert_eq!(r.code(), 0);
    assert_eq!(mock.recorded().len(), 3);
    let second = request(&mock, 2);
    assert!(
        second.contains("Blocker named by the last review")
            && second.contains("needs production credentials"),
        "{second}"
    );
    let out = toml_file(&ws, "review_output.toml");
    assert_eq!(
        out["blocker"].as_str(),
        Some("needs production credentials")
    );

    // Still blocked at the round limit: max_loops, with the blocker in the result.
    let ws = Workspace::new();
    ws.write("task.md", "Deploy it.\n");
    let mock = MockLlm::start(vec![
        final_answer("STATUS: INCOMPLETE\nNEXT STEPS:\n- deploy\n"),
        review("cannot deploy", "needs production credentials", &[]),
    ]);
    let r = kiln_loop(&ws, &mock, &["--task", "task.md", "--loops", "1"]);
    let res = loop_result(&r);
    assert_eq!(
        (res["stop_reason"].as_str(), res["blocker"].as_str()),
        (Some("max_loops"), Some("needs production credentials"))
    );
    assert_eq!(r.code(), 1);

    // --stop-on-blocker: today's behaviour, the blocker ends the run as blocked.
    let ws = Workspace::new();
    ws.write("task.md", "Deploy it.\n");
    let mock = MockLlm::start(vec![
        final_answer("STATUS: INCOMPLETE\nNEXT STEPS:\n- deploy\n"),
        review("cannot deploy", "needs production credentials", &["deploy"]),
    ]);
    let r = kiln_loop(&ws, &mock, &["--task", "task.md", "--stop-on-blocker"]);
    let res = loop_result(&r);
    assert_eq!(res["stop_reason"], "blocked");
    assert_eq!(res["blocker"], "needs production credentials");
    assert_eq!(r.code(), 1);
    assert_eq!(mock.recorded().len(), 2);
    let s = ws.store();
    let top = s
        .loops(10)
        .unwrap()
        .into_iter()
        .find(|l| l.kind == "loop")
        .unwrap();
    assert_eq!(
        (top.status.as_str(), top.stop_reason.as_deref()),
        ("blocked", Some("blocked"))
    );
}

#[test]
fn a_relative_task_file_is_found_inside_the_workspace_given_with_c() {
    // `kiln -C W loop --task task.md` run from elsewhere reads W/task.md (as `fix --file`
    // does), not a task.md in the current directory.
    let ws = Workspace::new();
    ws.write("task.md", "The real task: ZEBRA.\n");
    std::fs::write(
        ws.path().join("task.md"),
        "A decoy outside the workspace.\n",
    )
    .unwrap();
    let mock = MockLlm::start(vec![final_answer("STATUS: COMPLETE")]);
    let base = format!("{}/v1", mock.url);
    let root = ws.root();
    let mut cmd = ws.command(&[
        "-C",
        root.to_str().unwrap(),
        "loop",
        "--base-url",
        &base,
        "--model",
        "test-model",
        "--json",
        "--task",
        "task.md",
    ]);
    cmd.current_dir(ws.path());
    let r = Run(cmd.output().unwrap());
    assert_eq!(loop_result(&r)["stop_reason"], "complete", "{}", r.stderr());
    assert!(request(&mock, 0).contains("The real task: ZEBRA."));
    assert!(!request(&mock, 0).contains("decoy"));
    assert_eq!(
        toml_file(&ws, "state.toml")["task_file"].as_str(),
        Some("task.md")
    );
}

#[test]
fn the_round_limit_ends_with_max_loops() {
    let ws = Workspace::new();
    ws.write("task.md", "Do a lot.\n");
    let mock = MockLlm::start(vec![
        final_answer("STATUS: INCOMPLETE\nNEXT STEPS:\n- more\n"),
        review("some done", "", &["more"]),
    ]);
    let r = kiln_loop(&ws, &mock, &["--task", "task.md", "--loops", "1"]);
    let res = loop_result(&r);
    assert_eq!(res["stop_reason"], "max_loops");
    assert_eq!(res["pending"], json!(["more"]));
    assert_eq!(res["loops_completed"], 1);
    assert_eq!(r.code(), 1);
    assert_eq!(
        toml_file(&ws, "run.toml")["loops_completed"].as_integer(),
        Some(1)
    );
}

#[test]
fn a_task_file_changed_between_rounds_is_reloaded() {
    let ws = Workspace::new();
    ws.write("task.md", "Old task.\n");
    let mock = MockLlm::start(vec![
        call(
            "write_file",
            json!({ "path": "task.md", "content": "New task: ZEBRA.\n" }),
        ),
        final_answer("STATUS: INCOMPLETE\nNEXT STEPS:\n- the new task\n"),
        review("task rewritten", "", &["the new task"]),
        final_answer("STATUS: COMPLETE"),
    ]);
    let r = kiln_loop(&ws, &mock, &["--task", "task.md"]);
    assert_eq!(loop_result(&r)["stop_reason"], "complete", "{}", r.stderr());
    assert!(request(&mock, 0).contains("Old task."));
    let second = request(&mock, 3);
    assert!(second.contains("New task: ZEBRA."), "{second}");
    assert!(!second.contains("Old task."), "{second}");
    assert!(r.stdout().contains("changed; reloaded"), "{}", r.stdout());
}

#[test]
fn a_task_file_outside_the_workspace_is_refused() {
    let ws = Workspace::new();
    let outside = tempfile::tempdir().unwrap();
    let task = outside.path().join("task.md");
    std::fs::write(&task, "Escape.\n").unwrap();
    let mock = MockLlm::start(vec![]);
    let r = kiln_loop(&ws, &mock, &["--task", task.to_str().unwrap()]);
    assert_eq!(r.code(), 2, "{}", r.stderr());
    assert!(
        r.stderr().contains("outside the workspace"),
        "{}",
        r.stderr()
    );
    // A link inside the workspace pointing out is refused too.
    std::os::unix::fs::symlink(&task, ws.root().join("link.md")).unwrap();
    let r = kiln_loop(&ws, &mock, &["--task", "link.md"]);
    assert_eq!(r.code(), 2, "{}", r.stderr());
    assert!(
        r.stderr().contains("outside the workspace"),
        "{}",
        r.stderr()
    );
    assert!(mock.recorded().is_empty());
    assert!(!ws.root().join(".kiln/loop").exists());
}

#[test]
fn ctrl_c_in_the_review_phase_is_recorded_and_the_artifacts_stay_consistent() {
    use crate::mock_llm::Reply;
    use std::time::{Duration, Instant};
    let ws = Workspace::new();
    ws.write("task.md", "Do it.\n");
    let slow = Reply::Stream(vec![(Duration::from_secs(30), "data: [DONE]\n\n".into())]);
    let mock = MockLlm::start(vec![
        final_answer("STATUS: INCOMPLETE\nNEXT STEPS:\n- more\n"),
        slow,
    ]);
    let base = format!("{}/v1", mock.url);
    let child = ws.spawn_kiln(&[
        "loop",
        "--base-url",
        &base,
        "--model",
        "m",
        "--json",
        "--task",
        "task.md",
    ]);
    let start = Instant::now();
    while mock.recorded().len() < 2 && start.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(50));
    }
    // SAFETY: signalling our own child.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let out = Run(child.wait_with_output().unwrap());
    assert_eq!(out.code(), 130, "{}", out.stderr());
    assert_eq!(loop_result(&out)["stop_reason"], "cancelled");
    assert!(start.elapsed() < Duration::from_secs(20));
    let state = toml_file(&ws, "state.toml");
    assert_eq!(state["phase"].as_str(), Some("cancelled"));
    assert_eq!(state["stopped_in"].as_str(), Some("review"));
    assert_eq!(state["loop_index"].as_integer(), Some(1));
    assert_eq!(toml_file(&ws, "run.toml")["finished"].as_bool(), Some(true));
    toml_file(&ws, "execution.toml");
    toml_file(&ws, "review.toml");
    // No temporary files are left beside the artifacts.
    let names: Vec<String> = std::fs::read_dir(ws.root().join(".kiln/loop"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.contains("kiln-tmp")), "{names:?}");
    let s = ws.store();
    let top = s
        .loops(10)
        .unwrap()
        .into_iter()
        .find(|l| l.kind == "loop")
        .unwrap();
    assert_eq!(top.stop_reason.as_deref(), Some("cancelled"));
}

#[test]
fn the_execution_phase_cannot_write_protected_files_or_through_links() {
    let ws = Workspace::new();
    ws.write("task.md", "Do it.\n");
    ws.write(".git/config", "[core]\n");
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("victim.txt"), "safe\n").unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("victim.txt"),
        ws.root().join("link.txt"),
    )
    .unwrap();
    let mock = MockLlm::start(vec![
        openai_calls(&[
            (
                "write_file",
                r#"{"path":"kiln.toml","content":"[plugins.shell]\nexec = [{program = \"*\"}]\n"}"#,
            ),
            ("write_file", r#"{"path":".git/config","content":"evil"}"#),
            ("write_file", r#"{"path":"link.txt","content":"pwned"}"#),
            (
                "write_file",
                r#"{"path":"../escape.txt","content":"pwned"}"#,
            ),
        ]),
        final_answer("STATUS: COMPLETE"),
    ]);
    let r = kiln_loop(&ws, &mock, &["--task", "task.md"]);
    assert_eq!(loop_result(&r)["stop_reason"], "complete", "{}", r.stderr());
    let msgs = tool_contents(&mock, 1);
    assert_eq!(msgs.len(), 4);
    for m in &msgs {
        assert!(!m.contains("\"ok\":true"), "a write went through: {m}");
    }
    assert!(!ws.root().join("kiln.toml").exists());
    assert_eq!(ws.read(".git/config"), "[core]\n");
    assert_eq!(
        std::fs::read_to_string(outside.path().join("victim.txt")).unwrap(),
        "safe\n"
    );
    assert!(!outside.path().parent().unwrap().join("escape.txt").exists());
    // The refused calls are the run's "refused" list, for the reviewer.
    let refused = loop_result(&r)["rounds"][0]["refused"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(refused, 4, "{}", loop_result(&r)["rounds"]);
}

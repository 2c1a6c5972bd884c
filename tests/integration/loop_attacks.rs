//! Attacks on `kiln loop` (seed 003) and the tools it offers, as a model controlling the
//! answers or a repository controlling the workspace's content: each test is a hole that was
//! found and closed.

use crate::mock_llm::{MockLlm, call, openai_calls, tool_contents};
use crate::review_loop::{final_answer, review};
use crate::support::{Run, Workspace};
use serde_json::json;

fn kiln_loop(ws: &Workspace, mock: &MockLlm, args: &[&str]) -> Run {
    ws.kiln_model(&mock.url, "loop", args)
}

/// The execution agent rewrites the task file's front matter in round 1 to list programs the
/// user never granted it (here `ls` and `find`, which the sandbox grants the shell plugin for
/// the reviewer); the reload must not let round 2 run them.
#[test]
fn a_task_file_rewritten_by_the_agent_does_not_grow_its_allowlist() {
    let ws = Workspace::new();
    ws.write("task.md", "Do it.\n");
    let mock = MockLlm::start(vec![
        // Round 1, execution: grant itself more programs.
        call(
            "write_file",
            json!({ "path": "task.md", "content": "+++\nbash = [\"ls\", \"find\"]\n+++\nDo it.\n" }),
        ),
        final_answer("STATUS: INCOMPLETE\nNEXT STEPS:\n- more\n"),
        review("more to do", "", &["more"]),
        // Round 2, execution: use them.
        openai_calls(&[
            ("run_cmd", r#"{"command":"ls","args":["-a"]}"#),
            ("run_cmd", r#"{"command":"find","args":["."]}"#),
        ]),
        final_answer("STATUS: COMPLETE"),
    ]);
    let r = kiln_loop(&ws, &mock, &["--task", "task.md"]);
    assert_eq!(mock.recorded().len(), 5, "{}", r.stderr());
    let results = tool_contents(&mock, 4);
    assert_eq!(results.len(), 2, "{results:?}");
    for out in &results {
        assert!(
            out.contains("not allowed"),
            "a program listed by the agent itself ran: {out}"
        );
    }
}

/// A task's `bash` list becomes a sandbox grant; a glob there (`*`, `py*`, `[a-z]*`) would
/// grant the shell plugin every program matching it, far more than the name the host's
/// allowlist compares literally. Refused like a path.
#[test]
fn glob_patterns_in_the_task_bash_list_are_refused() {
    let ws = Workspace::new();
    let mock = MockLlm::start(vec![]);
    for list in [r#"["*"]"#, r#"["py*"]"#, r#"["[a-z]*"]"#, r#"["s?"]"#] {
        ws.write("task.md", &format!("+++\nbash = {list}\n+++\nDo it.\n"));
        let r = kiln_loop(&ws, &mock, &["--task", "task.md"]);
        assert_eq!(r.code(), 2, "{list} accepted: {}", r.stderr());
        assert!(r.stderr().contains("not a program name"), "{}", r.stderr());
    }
    assert!(mock.recorded().is_empty());
}

/// A repository that ships `.kiln/loop` as a link to one of its own directories: the
/// artifacts (run.toml, state.toml, ...) would be written into that directory, replacing
/// files there. The link is refused, never followed.
#[test]
fn the_artifacts_never_follow_a_planted_kiln_loop_link() {
    let ws = Workspace::new();
    ws.write("task.md", "Do it.\n");
    ws.write("src/run.toml", "precious = true\n");
    std::fs::create_dir_all(ws.root().join(".kiln")).unwrap();
    std::os::unix::fs::symlink("../src", ws.root().join(".kiln/loop")).unwrap();
    let mock = MockLlm::start(vec![final_answer("STATUS: COMPLETE")]);
    let r = kiln_loop(&ws, &mock, &["--task", "task.md"]);
    assert_ne!(r.code(), 0, "{}", r.stderr());
    assert_eq!(ws.read("src/run.toml"), "precious = true\n");
    assert!(!ws.root().join("src/state.toml").exists());
    assert!(!ws.root().join("src/execution.toml").exists());
    // The same with `.kiln` itself a link.
    let ws = Workspace::new();
    ws.write("task.md", "Do it.\n");
    std::fs::create_dir_all(ws.root().join("other/loop")).unwrap();
    std::os::unix::fs::symlink("other", ws.root().join(".kiln")).unwrap();
    let mock = MockLlm::start(vec![final_answer("STATUS: COMPLETE")]);
    let r = kiln_loop(&ws, &mock, &["--task", "task.md"]);
    assert_ne!(r.code(), 0, "{}", r.stderr());
    assert!(!ws.root().join("other/loop/state.toml").exists());
}

/// The fs plugin's `glob` matched `*` by plain backtracking: a pattern with many stars
/// against a long name takes exponential time, so one call burns its whole deadline.
#[test]
fn glob_with_many_stars_answers_quickly() {
    let ws = Workspace::new();
    ws.write(&format!("{}.txt", "a".repeat(60)), "x\n");
    ws.write("deep/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/z.txt", "x\n");
    let start = std::time::Instant::now();
    let stars = format!("{}b", "*a".repeat(25));
    let r = ws.kiln(
        &[
            "tool",
            "call",
            "glob",
            "--args",
            &json!({ "pattern": stars }).to_string(),
            "--json",
        ],
        &[],
    );
    assert!(
        r.stdout().contains("\"ok\":true"),
        "{}{}",
        r.stdout(),
        r.stderr()
    );
    let deep = format!("{}/b.txt", vec!["**"; 20].join("/"));
    let r = ws.kiln(
        &[
            "tool",
            "call",
            "glob",
            "--args",
            &json!({ "pattern": deep }).to_string(),
            "--json",
        ],
        &[],
    );
    assert!(
        r.stdout().contains("\"ok\":true"),
        "{}{}",
        r.stdout(),
        r.stderr()
    );
    assert!(
        start.elapsed() < std::time::Duration::from_secs(20),
        "glob took {:?}",
        start.elapsed()
    );
}

/// The reviewer's inspection programs are granted by kiln, not by the user, and Landlock lets
/// a program read anywhere: `head` of a file outside the workspace (absolute, `..`, through
/// a link in the workspace, or with `-f/path` attached) would put it in the model's context
/// and the store. Each is refused; inside the workspace they still work.
#[test]
fn the_reviewer_cannot_read_outside_the_workspace() {
    let ws = Workspace::new();
    ws.write("task.md", "Do it.\n");
    ws.write("inside.txt", "visible\n");
    let secret = ws.path().join("secret.txt");
    std::fs::write(&secret, "TOPSECRET\n").unwrap();
    std::os::unix::fs::symlink(&secret, ws.root().join("link.txt")).unwrap();
    std::os::unix::fs::symlink(ws.path(), ws.root().join("up")).unwrap();
    let abs = secret.to_str().unwrap().to_string();
    let parent = ws.path().to_str().unwrap().to_string();
    let calls: Vec<(String, String)> = vec![
        json!({"command":"head","args":[abs]}),
        json!({"command":"head ../secret.txt"}),
        json!({"command":"tail","args":["link.txt"]}),
        json!({"command":"grep","args":["-r","TOPSECRET",parent]}),
        json!({"command":"grep","args":[format!("-f{abs}"),"inside.txt"]}),
        json!({"command":"grep","args":[format!("--file={abs}"),"inside.txt"]}),
        json!({"command":"grep","args":["-R","TOPSECRET","."]}),
        json!({"command":"rg","args":["-L","TOPSECRET"]}),
        json!({"command":"find","args":["-L",".","-name","secret.txt"]}),
        json!({"command":"ls","args":["up"]}),
    ]
    .into_iter()
    .map(|a| ("run_cmd".to_string(), a.to_string()))
    .collect();
    let refs: Vec<(&str, &str)> = calls
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    let mock = MockLlm::start(vec![
        final_answer("STATUS: INCOMPLETE\nNEXT STEPS:\n- check it\n"),
        openai_calls(&refs),
        openai_calls(&[("run_cmd", r#"{"command":"head","args":["inside.txt"]}"#)]),
        review("checked", "", &[]),
    ]);
    let r = kiln_loop(&ws, &mock, &["--task", "task.md"]);
    assert_eq!(mock.recorded().len(), 4, "{}", r.stderr());
    let results = tool_contents(&mock, 2);
    assert_eq!(results.len(), refs.len(), "{results:?}");
    for (out, (_, args)) in results.iter().zip(&refs) {
        assert!(!out.contains("TOPSECRET"), "{args} read outside: {out}");
        assert!(out.contains("outside the workspace"), "{args}: {out}");
    }
    let last = tool_contents(&mock, 3);
    assert!(last.last().unwrap().contains("visible"), "{last:?}");
}

/// With an empty or relative entry in PATH (`PATH=:/usr/bin`), a granted name such as the
/// reviewer's `ls` was resolved against kiln's current directory, the workspace: a
/// repository shipping an executable `ls` had it run instead.
#[test]
fn a_relative_path_entry_does_not_run_the_workspace_s_own_program() {
    use std::os::unix::fs::PermissionsExt;
    let ws = Workspace::new();
    ws.write("task.md", "Do it.\n");
    let fake = ws.write("ls", "#!/bin/sh\necho PWNED\n");
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mock = MockLlm::start(vec![
        final_answer("STATUS: INCOMPLETE\nNEXT STEPS:\n- check it\n"),
        call("run_cmd", json!({ "command": "ls" })),
        review("checked", "", &[]),
    ]);
    let path = format!(":{}", kiln_env::env().var("PATH").unwrap_or_default());
    let base = format!("{}/v1", mock.url);
    let r = ws.kiln(
        &[
            "loop",
            "--base-url",
            &base,
            "--model",
            "m",
            "--json",
            "--task",
            "task.md",
        ],
        &[("PATH", &path)],
    );
    assert_eq!(mock.recorded().len(), 3, "{}", r.stderr());
    let out = tool_contents(&mock, 2);
    assert!(
        !out[0].contains("PWNED"),
        "the workspace's ls ran: {}",
        out[0]
    );
    assert!(out[0].contains("task.md"), "{}", out[0]);
}

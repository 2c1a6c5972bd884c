//! The plugin and tool commands as a user runs them.

use crate::support::{Workspace, wasm};
use serde_json::Value;

#[test]
fn version_and_plugin_list() {
    let ws = Workspace::new();
    let r = ws.kiln(&["--version"], &[]);
    r.expect_code(0);
    assert_eq!(
        r.stdout().trim(),
        format!("kiln {}", env!("CARGO_PKG_VERSION"))
    );
    let r = ws.kiln(&["plugin", "list", "--json"], &[]);
    r.expect_code(0);
    let rows: Vec<Value> = r
        .stdout()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let names: Vec<(&str, &str)> = rows
        .iter()
        .map(|v| (v["name"].as_str().unwrap(), v["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(
        names,
        [
            ("apply-patch", "edit-format"),
            ("ast-refactor", "tool"),
            ("cargo", "runner"),
            ("command", "runner"),
            ("fs", "tool"),
            ("go", "runner"),
            ("make", "runner"),
            ("node", "runner"),
            ("pytest", "runner"),
            ("search-replace", "edit-format"),
            ("shell", "tool"),
            ("tsc", "runner"),
            ("udiff", "edit-format"),
            ("whole", "edit-format")
        ]
    );
    assert!(
        rows.iter()
            .all(|v| v["source"] == "built-in" && v["version"] == "0.1.0")
    );
}

#[test]
fn inspect_shows_requested_granted_and_missing() {
    let ws = Workspace::new();
    let escape = wasm("kiln_test_escape");
    ws.write(
        "kiln.toml",
        "[plugins.escape]\nenv = [\"KILN_TEST_VISIBLE\"]\n",
    );
    let r = ws.kiln(
        &["plugin", "inspect", escape.to_str().unwrap(), "--json"],
        &[],
    );
    r.expect_code(0);
    let j = r.json();
    assert_eq!(j["world"], "kiln:plugin/tool-plugin");
    assert_eq!(j["contract"], "0.1.0");
    assert_eq!(
        j["requested"]["env"],
        serde_json::json!(["KILN_TEST_VISIBLE", "KILN_TEST_SECRET_KEY"])
    );
    assert_eq!(
        j["granted"]["env"],
        serde_json::json!(["KILN_TEST_VISIBLE"])
    );
    assert_eq!(
        j["missing"]["env"],
        serde_json::json!(["KILN_TEST_SECRET_KEY"])
    );
    assert_eq!(j["granted"]["fs"], serde_json::json!([]));

    let r = ws.kiln(&["plugin", "inspect", "fs", "--json"], &[]);
    r.expect_code(0);
    let j = r.json();
    let tools: Vec<&str> = j["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        tools,
        [
            "read_file",
            "list_dir",
            "glob",
            "read_files",
            "search_repo",
            "search"
        ]
    );
    assert_eq!(
        j["tools"][0]["schema"]["required"],
        serde_json::json!(["path"])
    );
    assert_eq!(
        j["granted"]["fs"],
        serde_json::json!([{ "path": ".", "access": "read" }])
    );

    let r = ws.kiln(&["plugin", "inspect", "nope"], &[]);
    r.expect_code(2);
    assert!(
        r.stderr().contains(
            "no plugin named `nope` (did you mean `node`?); plugins: apply-patch, ast-refactor, cargo, command, fs, go, make, node, pytest, search-replace, shell, tsc, udiff, whole"
        ),
        "{}",
        r.stderr()
    );
}

#[test]
fn plugin_check_accepts_conforming_components_and_rejects_others() {
    let ws = Workspace::new();
    for stem in [
        "kiln_plugin_command",
        "kiln_plugin_cargo",
        "kiln_plugin_whole",
        "kiln_plugin_search_replace",
        "kiln_plugin_udiff",
        "kiln_plugin_apply_patch",
        "kiln_plugin_fs",
        "kiln_plugin_shell",
        "kiln_test_escape",
    ] {
        let r = ws.kiln(&["plugin", "check", wasm(stem).to_str().unwrap()], &[]);
        r.expect_code(0);
        assert!(
            r.stdout().contains("conforms to kiln:plugin@0.1.0"),
            "{}",
            r.stdout()
        );
    }
    let r = ws.kiln(
        &[
            "plugin",
            "check",
            wasm("kiln-test-not-kiln").to_str().unwrap(),
        ],
        &[],
    );
    r.expect_code(2);
    assert!(
        r.stderr()
            .contains("does not implement a kiln plugin world"),
        "{}",
        r.stderr()
    );
    let r = ws.kiln(
        &[
            "plugin",
            "check",
            wasm("kiln_test_future_contract").to_str().unwrap(),
            "--json",
        ],
        &[],
    );
    r.expect_code(2);
    let reason = r.json()["reason"].as_str().unwrap().to_string();
    assert!(
        reason.contains("9.0.0") && reason.contains("0.1.0"),
        "{reason}"
    );
    let r = ws.kiln(&["plugin", "check", "missing.wasm"], &[]);
    r.expect_code(2);
    assert!(
        r.stderr().contains("cannot read plugin missing.wasm"),
        "{}",
        r.stderr()
    );
}

#[test]
fn fs_tool_reads_lists_and_searches_inside_the_workspace_only() {
    let ws = Workspace::new();
    ws.write("src/lib.rs", "fn alpha() {}\nfn beta() {}\n");
    ws.write("README.md", "alpha docs\n");
    std::fs::write(ws.path().join("secret.txt"), "alpha secret\n").unwrap();

    let r = ws.kiln(
        &[
            "tool",
            "call",
            "read_file",
            "--args",
            r#"{"path":"src/lib.rs"}"#,
            "--json",
        ],
        &[],
    );
    r.expect_code(0);
    assert_eq!(
        r.json()["result"]["content"],
        "fn alpha() {}\nfn beta() {}\n"
    );

    let r = ws.kiln(
        &["tool", "call", "fs.list_dir", "--args", "{}", "--json"],
        &[],
    );
    r.expect_code(0);
    assert_eq!(
        r.json()["result"]["entries"],
        serde_json::json!(["README.md", "src/"])
    );

    let r = ws.kiln(
        &[
            "tool",
            "call",
            "search",
            "--args",
            r#"{"pattern":"alpha"}"#,
            "--json",
        ],
        &[],
    );
    r.expect_code(0);
    let matches = r.json()["result"]["matches"].clone();
    let paths: Vec<&str> = matches
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["README.md", "src/lib.rs"]);

    let r = ws.kiln(
        &[
            "tool",
            "call",
            "read_file",
            "--args",
            r#"{"path":"../secret.txt"}"#,
            "--json",
        ],
        &[],
    );
    r.expect_code(1);
    assert!(crate::support::error_of(&r, "denied").contains("outside the workspace"));
    let r = ws.kiln(
        &[
            "tool",
            "call",
            "read_file",
            "--args",
            r#"{"path":"nope.rs"}"#,
            "--json",
        ],
        &[],
    );
    r.expect_code(1);
    crate::support::error_of(&r, "not-found");

    let r = ws.kiln(&["tool", "call", "read_file", "--args", "not json"], &[]);
    r.expect_code(2);
    assert!(r.stderr().contains("--args is not valid JSON"));
}

#[test]
fn bad_kiln_toml_names_the_file_and_field() {
    let ws = Workspace::new();
    ws.write("kiln.toml", "[plugins.fs]\nfss = [\".\"]\n");
    let r = ws.kiln(&["plugin", "list"], &[]);
    r.expect_code(2);
    assert!(
        r.stderr().contains("kiln.toml") && r.stderr().contains("fss"),
        "{}",
        r.stderr()
    );
}

#[test]
fn read_only_commands_leave_no_trace_and_tool_list_shows_the_host_tools() {
    let ws = crate::support::Workspace::new();
    let root = ws.root();
    for args in [
        &["history"][..],
        &["history", "--json"],
        &["plugin", "list"],
        &["tool", "list"],
        &["--help"],
    ] {
        let r = ws.kiln(args, &[]);
        r.expect_code(0);
    }
    let left: Vec<_> = std::fs::read_dir(&root).unwrap().flatten().collect();
    assert!(left.is_empty(), "read-only commands created {left:?}");
    let r = ws.kiln(&["history", "show", "1"], &[]);
    assert_eq!(r.code(), 2);
    assert!(r.stderr().contains("no loop 1"), "{}", r.stderr());

    let r = ws.kiln(&["tool", "list"], &[]);
    let lines: Vec<String> = r.stdout().lines().map(String::from).collect();
    let column = |l: &str| l.find(" plugin ").or_else(|| l.find(" host "));
    let first = column(&lines[0]).unwrap();
    for l in &lines {
        assert_eq!(column(l), Some(first), "columns are aligned: {l}");
    }
    for host_tool in [
        "write_patch",
        "evaluate_work",
        "final_answer",
        "compile_loop",
        "get_loops",
    ] {
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(host_tool) && l.contains("host (built-in)")),
            "{host_tool} missing: {}",
            r.stdout()
        );
    }
    let r = ws.kiln(&["tool", "list", "--json"], &[]);
    let entries: Vec<serde_json::Value> = r
        .stdout()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let wp = entries.iter().find(|e| e["name"] == "write_patch").unwrap();
    assert!(wp["plugin"].is_null());
    let rf = entries.iter().find(|e| e["name"] == "read_file").unwrap();
    assert_eq!(rf["plugin"], "fs");
}

#[test]
fn a_cold_check_compiles_only_its_runner() {
    let ws = crate::support::Workspace::new();
    ws.write("a.txt", "x\n");
    let cache = ws.path().join("cold-cache");
    let compiled = || -> Vec<String> {
        std::fs::read_dir(cache.join("components"))
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.ends_with(".cwasm"))
                    .collect()
            })
            .unwrap_or_default()
    };
    let cache_env = cache.to_str().unwrap();
    ws.kiln(
        &["check", "--cmd", "true", "--file", "a.txt"],
        &[("KILN_CACHE_DIR", cache_env)],
    )
    .expect_code(0);
    assert_eq!(
        compiled().len(),
        1,
        "only the command runner: {:?}",
        compiled()
    );
    // An edit compiles its format (and nothing else) on top.
    ws.kiln_stdin(
        &["edit", "parse", "--format", "udiff", "--files", "a.txt"],
        "--- a.txt\n+++ a.txt\n@@ -1 +1 @@\n-x\n+y\n",
    );
    let mut cmd = ws.command(&["edit", "parse", "--format", "udiff", "--files", "a.txt"]);
    cmd.env("KILN_CACHE_DIR", cache_env);
    let _ = cmd.output().unwrap();
    assert_eq!(compiled().len(), 2, "{:?}", compiled());
    // Listing compiles nothing: what the built-ins declare is embedded.
    ws.kiln(&["plugin", "list"], &[("KILN_CACHE_DIR", cache_env)])
        .expect_code(0);
    assert_eq!(compiled().len(), 2, "{:?}", compiled());
}

/// Issue 31 item 15: `-q` prints nothing on stderr when the work succeeds; results still go
/// to stdout.
#[test]
fn quiet_success_leaves_stderr_empty_and_prints_results_on_stdout() {
    use crate::mock_llm::{MockLlm, openai_text};
    let ws = Workspace::new();
    ws.write("a.txt", "x\n");
    let mock = MockLlm::start(vec![openai_text("all good here")]);
    let base = format!("{}/v1", mock.url);
    let key = [("OPENAI_API_KEY", "sk-q")];
    let runs = [
        vec!["-q", "check", "--cmd", "true", "--file", "a.txt"],
        vec![
            "-q",
            "fix",
            "--base-url",
            &base,
            "--model",
            "m",
            "--cmd",
            "true",
            "--file",
            "a.txt",
        ],
        vec![
            "-q",
            "agent",
            "--base-url",
            &base,
            "--model",
            "m",
            "--test-command",
            "true",
            "look around",
        ],
    ];
    for args in runs {
        let r = ws.kiln(&args, &key);
        r.expect_code(0);
        assert_eq!(r.stderr(), "", "{args:?} wrote on stderr");
        // `check` has no result to print but its exit status when it passes.
        if args[1] != "check" {
            assert!(!r.stdout().trim().is_empty(), "{args:?} printed no result");
        }
    }
}

/// The latest run in the workspace's history.
fn latest_run(ws: &Workspace) -> Value {
    let h = ws.kiln(&["history", "--json", "--limit", "1"], &[]);
    h.expect_code(0);
    serde_json::from_str(h.stdout().lines().next().expect("a run")).unwrap()
}

/// Wait until a process whose command line ends with `tail` runs (the check started).
pub(crate) fn wait_for_program(tail: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .any(|e| std::fs::read_to_string(e.path().join("cmdline")).is_ok_and(|c| c.ends_with(tail)))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "{tail:?} never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Issue 31 item 16: SIGTERM and SIGHUP in the middle of a run close it as `cancelled`, with
/// the exit status a shell gives for the signal (143, 129).
#[test]
fn sigterm_and_sighup_mid_run_record_the_run_as_cancelled() {
    use crate::mock_llm::MockLlm;
    let ws = Workspace::new();
    ws.write("a.txt", "x\n");
    let mock = MockLlm::start(vec![]);
    let base = format!("{}/v1", mock.url);
    for (n, (signal, code)) in [(libc::SIGTERM, 143), (libc::SIGHUP, 129)]
        .into_iter()
        .enumerate()
    {
        use std::os::unix::process::CommandExt;
        let sleep = format!("sleep 29.{n}1");
        let mut cmd = ws.command(&[
            "fix",
            "--base-url",
            &base,
            "--model",
            "m",
            "--cmd",
            &sleep,
            "--file",
            "a.txt",
        ]);
        cmd.env("OPENAI_API_KEY", "sk-t")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        // SAFETY: signal(2) is async-signal-safe. Whatever ran the tests (nohup), the child
        // starts with SIGHUP at its default.
        unsafe {
            cmd.pre_exec(|| {
                libc::signal(libc::SIGHUP, libc::SIG_DFL);
                Ok(())
            });
        }
        let child = cmd.spawn().unwrap();
        wait_for_program(&format!("sleep\x0029.{n}1\x00"));
        // SAFETY: signals the child this test spawned.
        unsafe { libc::kill(child.id() as i32, signal) };
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(code),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let row = latest_run(&ws);
        assert_eq!(row["stop_reason"], "cancelled", "{row}");
        assert_ne!(row["status"], "running", "{row}");
        assert_eq!(ws.read("a.txt"), "x\n");
    }
}

/// Issue 31 item 16: `kiln fix --json | head -1`: the reader goes away mid-run, and the run is
/// closed as `cancelled` (not left `running`), kiln exiting as for SIGPIPE (141).
#[test]
fn a_closed_stdout_mid_run_records_the_run_as_cancelled() {
    use crate::mock_llm::{MockLlm, Reply, openai_events};
    use std::io::BufRead;
    let ws = Workspace::new();
    ws.write("a.txt", "x\n");
    // The answer comes a second late, after the reader has gone.
    let mut parts: Vec<(std::time::Duration, String)> = openai_events(&[
        serde_json::json!({"choices":[{"index":0,"delta":{"content":"<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE\n"}}]}),
        serde_json::json!({"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}),
    ])
    .into_iter()
    .map(|p| (std::time::Duration::ZERO, p))
    .collect();
    parts[0].0 = std::time::Duration::from_millis(1500);
    parts.push((std::time::Duration::ZERO, "data: [DONE]\n\n".into()));
    let mock = MockLlm::start(vec![Reply::Stream(parts.clone()), Reply::Stream(parts)]);
    let base = format!("{}/v1", mock.url);
    let mut child = ws
        .command(&[
            "fix",
            "--base-url",
            &base,
            "--model",
            "m",
            "--cmd",
            "false",
            "--file",
            "a.txt",
            "--json",
        ])
        .env("OPENAI_API_KEY", "sk-p")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.contains("\"type\""), "{first}");
    // The reader is dropped here: the pipe is closed.
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(141), "{:?} {stderr}", out.status);
    let row = latest_run(&ws);
    assert_eq!(row["stop_reason"], "cancelled", "{row}");
    assert_ne!(row["status"], "running", "{row}");
    let a = ws.read("a.txt");
    assert!(a == "x\n" || a == "y\n", "{a:?}");
}

/// `kiln fix 2>&1 | head -1`: stdout and stderr are one pipe whose reader goes away after
/// the first line. Every later write, wherever kiln makes it, is dropped (none panics), and
/// the run is still recorded as `cancelled`.
#[test]
fn a_closed_pipe_on_both_outputs_mid_run_records_the_run_as_cancelled() {
    use crate::mock_llm::{MockLlm, Reply, openai_events};
    use std::io::BufRead;
    use std::os::fd::{FromRawFd, OwnedFd};
    let ws = Workspace::new();
    ws.write("a.txt", "x\n");
    let mut parts: Vec<(std::time::Duration, String)> = openai_events(&[
        serde_json::json!({"choices":[{"index":0,"delta":{"content":"<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE\n"}}]}),
        serde_json::json!({"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}),
    ])
    .into_iter()
    .map(|p| (std::time::Duration::ZERO, p))
    .collect();
    parts[0].0 = std::time::Duration::from_millis(1500);
    parts.push((std::time::Duration::ZERO, "data: [DONE]\n\n".into()));
    let mock = MockLlm::start(vec![Reply::Stream(parts.clone()), Reply::Stream(parts)]);
    let base = format!("{}/v1", mock.url);
    let mut fds = [0; 2];
    // SAFETY: a fresh pipe; both ends are owned below.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: the descriptors were just made and are owned once each.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let write2 = write.try_clone().unwrap();
    let mut child = ws
        .command(&[
            "fix",
            "--base-url",
            &base,
            "--model",
            "m",
            "--cmd",
            "false",
            "--file",
            "a.txt",
        ])
        .env("OPENAI_API_KEY", "sk-p")
        .stdout(write)
        .stderr(write2)
        .spawn()
        .unwrap();
    // The parent's copies of the write end are gone with the Command; read one line, then
    // close the read end.
    let mut first = String::new();
    std::io::BufReader::new(std::fs::File::from(read))
        .read_line(&mut first)
        .unwrap();
    assert!(!first.is_empty());
    let status = child.wait().unwrap();
    assert_eq!(
        status.code(),
        Some(141),
        "{status:?} (101 would be a panic)"
    );
    let row = latest_run(&ws);
    assert_eq!(row["stop_reason"], "cancelled", "{row}");
    let a = ws.read("a.txt");
    assert!(a == "x\n" || a == "y\n", "{a:?}");
}

/// Issue 31 item 20: a kiln started with SIGINT ignored (`kiln ... &` in a script) resets it
/// and still stops on Ctrl-C, here while it waits for a model server that never answers.
#[test]
fn a_kiln_started_ignoring_sigint_still_stops_on_it() {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    let ws = Workspace::new();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in listener.incoming().flatten() {
            held.push(s);
        }
    });
    let mut cmd = ws.command(&["llm", "check", "--base-url", &url, "--model", "m"]);
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    // SAFETY: signal(2) is async-signal-safe; the child starts with SIGINT ignored.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_IGN);
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_secs(1));
    // SAFETY: signals the child this test spawned.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(8);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("kiln ignored SIGINT");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let status = child.wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGINT), "{status:?}");
}

/// `kiln tool call` checks the arguments against the tool's JSON Schema before the call
/// (naming the place and what the schema wants), and a misspelt tool gets "did you mean".
#[test]
fn tool_call_checks_arguments_against_the_schema_and_suggests_tool_names() {
    let ws = Workspace::new();
    ws.write("a.txt", "alpha\n");

    let r = ws.kiln(
        &[
            "tool",
            "call",
            "read_file",
            "--args",
            r#"{"paths":"a.txt"}"#,
        ],
        &[],
    );
    r.expect_code(2);
    let err = r.stderr();
    assert!(
        err.contains("do not match the schema of `read_file`"),
        "{err}"
    );
    assert!(
        err.contains("the required field `path` is missing"),
        "{err}"
    );
    assert!(
        err.contains("unknown field `paths` (did you mean `path`?)"),
        "{err}"
    );

    let r = ws.kiln(
        &[
            "tool",
            "call",
            "read_files",
            "--args",
            r#"{"paths":"a.txt"}"#,
        ],
        &[],
    );
    r.expect_code(2);
    assert!(
        r.stderr().contains("$.paths: expected array, got string"),
        "{}",
        r.stderr()
    );

    // Valid arguments still reach the tool.
    let r = ws.kiln(
        &[
            "tool",
            "call",
            "read_files",
            "--args",
            r#"{"paths":["a.txt"]}"#,
            "--json",
        ],
        &[],
    );
    r.expect_code(0);
    assert_eq!(r.json()["result"]["files"][0]["content"], "alpha\n");

    let r = ws.kiln(&["tool", "call", "raed_file", "--args", "{}"], &[]);
    r.expect_code(2);
    assert!(
        r.stderr()
            .contains("no tool named `raed_file` (did you mean `read_file`?)"),
        "{}",
        r.stderr()
    );
}

/// `kiln tool call run_cmd` has the grants `kiln agent` has: the test command detected from
/// the project (here package.json's `npm test --silent`) may run, as the agent's banner says.
#[test]
fn tool_call_runs_the_test_command_the_agent_would_detect() {
    let ws = Workspace::new();
    ws.write(
        "package.json",
        r#"{"name":"t","version":"1.0.0","scripts":{"test":"node t.js"}}"#,
    );
    ws.write("t.js", "console.log('tests ran');\n");
    let r = ws.kiln(
        &[
            "tool",
            "call",
            "run_cmd",
            "--args",
            r#"{"command":"npm test --silent"}"#,
            "--json",
        ],
        &[],
    );
    let v = r.json();
    assert_ne!(v["error"]["kind"], "denied", "{v}");
    assert!(v.to_string().contains("tests ran"), "{v}\n{}", r.stderr());
    // Anything else stays refused, as for the agent.
    let r = ws.kiln(
        &[
            "tool",
            "call",
            "run_cmd",
            "--args",
            r#"{"command":"node t.js"}"#,
            "--json",
        ],
        &[],
    );
    r.expect_code(1);
    assert_eq!(r.json()["error"]["kind"], "denied", "{}", r.stdout());
}

/// `kiln tool call` is the agent's tool table from the command line: a tool is called by the
/// name `kiln tool list` and the agent give it (an MCP server's as `SERVER__tool`), the old
/// dotted names still work with a note on stderr, and the table's `apply_edit` writes through
/// the host's edit path while a built-in that needs a run says so.
#[test]
fn tool_call_takes_the_agents_names_and_the_old_ones_with_a_note() {
    let other = Workspace::new();
    other.write("b.txt", "only in the other workspace\n");
    let ws = Workspace::new();
    ws.write("a.txt", "alpha\n");
    ws.write(
        "kiln.toml",
        &format!(
            "[mcp.servers.other]\ncommand = {:?}\nargs = [\"-C\", {:?}, \"mcp\"]\nenv = [\"KILN_CACHE_DIR\", \"KILN_CACHE_KEY\", \"KILN_CONFIG\", \"KILN_YES\", \"XDG_STATE_HOME\"]\n",
            env!("CARGO_BIN_EXE_kiln"),
            other.root().to_str().unwrap()
        ),
    );
    let call =
        |tool: &str, args: &str| ws.kiln(&["tool", "call", tool, "--args", args, "--json"], &[]);

    // The agent's names: no note.
    let r = call("read_file", r#"{"path":"a.txt"}"#);
    r.expect_code(0);
    assert_eq!(r.json()["result"]["content"], "alpha\n");
    assert!(!r.stderr().contains("note:"), "{}", r.stderr());
    let r = call("other__read_file", r#"{"path":"b.txt"}"#);
    r.expect_code(0);
    assert!(
        r.json()["result"]
            .to_string()
            .contains("only in the other workspace"),
        "{}\n{}",
        r.stdout(),
        r.stderr()
    );
    assert_eq!(r.json()["mcp_server"], "other");
    assert!(!r.stderr().contains("note:"), "{}", r.stderr());

    // `PLUGIN__TOOL` works for a tool no other plugin shares, too.
    let r = call("fs__read_file", r#"{"path":"a.txt"}"#);
    r.expect_code(0);
    assert_eq!(r.json()["result"]["content"], "alpha\n");
    assert!(!r.stderr().contains("note:"), "{}", r.stderr());

    // The old names: the same call, and a note naming the new name.
    let r = call("fs.read_file", r#"{"path":"a.txt"}"#);
    r.expect_code(0);
    assert_eq!(r.json()["result"]["content"], "alpha\n");
    assert!(
        r.stderr()
            .contains("note: `fs.read_file` is the old name of `read_file`"),
        "{}",
        r.stderr()
    );
    let r = call("other.read_file", r#"{"path":"b.txt"}"#);
    r.expect_code(0);
    assert!(
        r.stderr()
            .contains("note: `other.read_file` is the old name of `other__read_file`"),
        "{}",
        r.stderr()
    );

    // apply_edit, as `kiln mcp` serves it: checked against its derived schema, then applied.
    let r = call("apply_edit", r#"{"reponse":"x"}"#);
    r.expect_code(2);
    assert!(
        r.stderr()
            .contains("the required field `response` is missing")
            && r.stderr().contains("did you mean `response`?"),
        "{}",
        r.stderr()
    );
    let edit = "<<<<<<< SEARCH\nalpha\n=======\nbeta\n>>>>>>> REPLACE\n";
    let args = serde_json::json!({"response": edit, "files": ["a.txt"]}).to_string();
    let r = call("apply_edit", &args);
    r.expect_code(0);
    assert_eq!(r.json()["result"]["written"], serde_json::json!(["a.txt"]));
    assert_eq!(ws.read("a.txt"), "beta\n");

    // A built-in that needs a model and a store is not run from here.
    let r = call("write_patch", r#"{"path":"a.txt","patch":"x"}"#);
    assert_eq!(r.code(), 2, "{}\n{}", r.stdout(), r.stderr());
    assert!(
        r.stderr()
            .contains("`write_patch` is a built-in tool that needs an agent run"),
        "{}",
        r.stderr()
    );
}

/// One run at a time per workspace from the first second: while a run's first check is still
/// running (before its loop row exists), a second `kiln fix` is refused before it runs its own
/// check, and so are `kiln undo` and `kiln edit apply`; the workspace is left as it was.
#[test]
fn a_run_in_its_first_check_holds_the_workspace_against_a_second_run_and_undo() {
    use crate::mock_llm::MockLlm;
    let ws = Workspace::new();
    ws.write("data.txt", "orig\n");
    let mock = MockLlm::start(vec![]);
    let base = format!("{}/v1", mock.url);
    let run = |cmd: &str| {
        vec![
            "fix".to_string(),
            "--base-url".into(),
            base.clone(),
            "--model".into(),
            "m".into(),
            "--max-iters".into(),
            "1".into(),
            "--shell".into(),
            "--cmd".into(),
            cmd.into(),
        ]
    };
    let first = run("sleep 29.71; exit 1");
    let first: Vec<&str> = first.iter().map(String::as_str).collect();
    let child = spawn_interruptible(&ws, &first);
    wait_for_program("sleep\x0029.71\x00");

    let second = run("echo second >> data.txt; exit 1");
    let second: Vec<&str> = second.iter().map(String::as_str).collect();
    let r = ws.kiln(&second, &[("OPENAI_API_KEY", "sk-t")]);
    r.expect_code(2);
    assert!(
        r.stderr()
            .contains("another kiln process is working on this workspace (pid "),
        "{}",
        r.stderr()
    );
    assert!(r.stderr().contains("`kiln fix`"), "{}", r.stderr());
    let u = ws.kiln(&["undo", "--dry-run"], &[]);
    u.expect_code(2);
    assert!(
        u.stderr().contains("another kiln process"),
        "{}",
        u.stderr()
    );
    let e = ws.kiln_stdin(
        &["edit", "apply", "--files", "data.txt"],
        "data.txt\n```\n<<<<<<< SEARCH\norig\n=======\nedited\n>>>>>>> REPLACE\n```\n",
    );
    e.expect_code(2);
    assert!(
        e.stderr().contains("another kiln process"),
        "{}",
        e.stderr()
    );
    assert_eq!(ws.read("data.txt"), "orig\n");

    // SAFETY: signals the child this test spawned.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The lock went with the first run: the workspace takes a run again.
    let again = run("true");
    let again: Vec<&str> = again.iter().map(String::as_str).collect();
    ws.kiln(&again, &[("OPENAI_API_KEY", "sk-t")])
        .expect_code(0);
    assert_eq!(ws.read("data.txt"), "orig\n");
}

/// Ctrl-C while a fix's first check runs cancels the run: the check's program is not started
/// a second time (it was: the loop began and ran its first check again).
#[test]
fn ctrl_c_in_the_first_check_does_not_start_the_check_again() {
    use crate::mock_llm::MockLlm;
    let ws = Workspace::new();
    let mock = MockLlm::start(vec![]);
    let base = format!("{}/v1", mock.url);
    let child = spawn_interruptible(
        &ws,
        &[
            "fix",
            "--base-url",
            &base,
            "--model",
            "m",
            "--shell",
            "--json",
            "--cmd",
            "echo started >> stamps.txt; sleep 29.61; exit 1",
        ],
    );
    wait_for_program("sleep\x0029.61\x00");
    // SAFETY: signals the child this test spawned.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    // Give a second start, had there been one, the time to write its line.
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert_eq!(ws.read("stamps.txt"), "started\n", "{err}");
    let started = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("\"type\":\"runner.started\""))
        .count();
    assert_eq!(started, 1, "{}", String::from_utf8_lossy(&out.stdout));
    assert_eq!(latest_run(&ws)["stop_reason"], "cancelled");
    assert!(mock.recorded().is_empty());
}

/// `kiln ARGS` in `ws` with a key, its outputs piped and SIGINT at its default whatever ran
/// the tests, for a test that interrupts it.
pub(crate) fn spawn_interruptible(ws: &Workspace, args: &[&str]) -> std::process::Child {
    use std::os::unix::process::CommandExt;
    let mut cmd = ws.command(args);
    cmd.env("OPENAI_API_KEY", "sk-t")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    // SAFETY: signal(2) is async-signal-safe; the child starts with SIGINT at its default.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            Ok(())
        });
    }
    cmd.spawn().unwrap()
}

/// A program call's temporary directory (`kiln-exec-*` under `TMPDIR`) goes with the call on
/// every path: a check that runs out of the plugin's deadline, and a `kiln check` or
/// `kiln tool call` ended by Ctrl-C or SIGTERM while its program runs (kiln died by the signal
/// and left the directory; it still ends by the signal).
#[test]
fn a_program_calls_temp_dir_goes_on_every_path() {
    use std::os::unix::process::ExitStatusExt;
    let ws = Workspace::new();
    let tmp = ws.path().join("tmpdir");
    std::fs::create_dir_all(&tmp).unwrap();
    let left = || std::fs::read_dir(&tmp).unwrap().count();
    ws.write("kiln.toml", "[plugins.command]\ntimeout_ms = 1500\n");
    let mut cmd = ws.command(&["check", "--cmd", "sleep 29.58"]);
    cmd.env("TMPDIR", &tmp);
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(left(), 0, "the deadline left the call's temp dir");
    std::fs::remove_file(ws.root().join("kiln.toml")).unwrap();

    ws.write(
        "kiln.toml",
        "[plugins.shell]\nexec = [{ program = \"sleep\", args = [\"*\"] }]\n",
    );
    let runs: [(&[&str], &str, i32); 3] = [
        (
            &["check", "--cmd", "sleep 29.59"],
            "sleep\x0029.59\x00",
            libc::SIGINT,
        ),
        (
            &["check", "--cmd", "sleep 29.57"],
            "sleep\x0029.57\x00",
            libc::SIGTERM,
        ),
        (
            &[
                "tool",
                "call",
                "run_cmd",
                "--args",
                r#"{"command":"sleep","args":["29.56"]}"#,
            ],
            "sleep\x0029.56\x00",
            libc::SIGINT,
        ),
    ];
    for (args, program, signal) in runs {
        let mut cmd = ws.command(args);
        cmd.env("TMPDIR", &tmp)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        wait_for_program(program);
        assert_eq!(left(), 1, "{args:?}: the call's temp dir is under TMPDIR");
        // SAFETY: signals the child this test spawned.
        unsafe { libc::kill(child.id() as i32, signal) };
        let status = child.wait().unwrap();
        assert_eq!(status.signal(), Some(signal), "{args:?}: {status:?}");
        assert_eq!(left(), 0, "{args:?}: the signal left the call's temp dir");
    }
}

/// `kiln tool call --json` answers on stdout with one JSON object whatever stops it: a usage
/// error of the command line (clap's), arguments that are not JSON or do not match the schema,
/// an unknown tool, all exit 2 with `{"ok": false, "error": {"kind": "usage", ...}}` (stdout
/// was empty), the message on stderr as before.
#[test]
fn tool_call_json_answers_usage_errors_with_a_json_object() {
    let ws = Workspace::new();
    ws.write("a.txt", "a\n");
    let cases: [(&[&str], Option<&str>, &str); 5] = [
        (
            &["tool", "call", "nope", "--json"],
            Some("nope"),
            "no tool named `nope`",
        ),
        (
            &["tool", "call", "read_file", "--args", "{bad", "--json"],
            Some("read_file"),
            "--args is not valid JSON",
        ),
        (
            &[
                "tool",
                "call",
                "read_file",
                "--args",
                r#"{"x":1}"#,
                "--json",
            ],
            Some("read_file"),
            "the required field `path` is missing",
        ),
        (
            &["tool", "call", "--json"],
            None,
            "the following required arguments were not provided",
        ),
        (
            &["tool", "call", "--json", "--bogus", "read_file"],
            Some("read_file"),
            "unexpected argument '--bogus' found",
        ),
    ];
    for (args, tool, message) in cases {
        let r = ws.kiln(args, &[]);
        r.expect_code(2);
        let stdout = r.stdout();
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(lines.len(), 1, "{args:?}: {}", r.stdout());
        let v: Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(v["ok"], false, "{v}");
        assert_eq!(v["error"]["kind"], "usage", "{v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(message),
            "{args:?}: {v}"
        );
        assert_eq!(v.get("tool").and_then(Value::as_str), tool, "{v}");
        assert!(r.stderr().contains(message), "{}", r.stderr());
    }
    // Without --json, stdout stays empty.
    let r = ws.kiln(&["tool", "call", "nope"], &[]);
    r.expect_code(2);
    assert_eq!(r.stdout(), "");
}

/// Messages that send the user to their configuration name its real path: under
/// `XDG_CONFIG_HOME` when set (they said `~/.config/kiln/config.toml` whatever it said), or
/// the `KILN_CONFIG` file.
#[test]
fn configuration_messages_name_the_real_user_config_path() {
    let ws = Workspace::new();
    ws.write("a.txt", "a\n");
    let xdg = ws.path().join("xdg");
    let want = xdg.join("kiln/config.toml").display().to_string();
    let run = |args: &[&str], kiln_config: Option<&str>| {
        let mut cmd = ws.command(args);
        cmd.env_remove("KILN_CONFIG").env("XDG_CONFIG_HOME", &xdg);
        if let Some(c) = kiln_config {
            cmd.env("KILN_CONFIG", c);
        }
        crate::support::Run(cmd.output().unwrap())
    };
    let r = run(&["fix", "--cmd", "false", "--file", "a.txt"], None);
    r.expect_code(2);
    assert!(
        r.stderr().contains("no model configured") && r.stderr().contains(&want),
        "{}",
        r.stderr()
    );
    assert!(!r.stderr().contains("~/.config"), "{}", r.stderr());
    let keyless = ["fix", "--model", "m", "--cmd", "false", "--file", "a.txt"];
    let r = run(&keyless, None);
    r.expect_code(2);
    assert!(
        r.stderr().contains("no API key") && r.stderr().contains(&want),
        "{}",
        r.stderr()
    );
    assert!(!r.stderr().contains("~/.config"), "{}", r.stderr());
    let own = ws.path().join("mine.toml");
    let r = run(&keyless, own.to_str());
    assert!(
        r.stderr().contains(&own.display().to_string()),
        "{}",
        r.stderr()
    );
}

//! `kiln agent`'s command line (the seed's "Agent Loop" options) against the mock LLM: short
//! flags and the positional task, `--test-args`, console and file logging with their
//! environment variables, the default test command, `--system-file`, a missing API key
//! reported up front, the cost of a run, and counts in the right grammatical number.

use crate::mock_llm::{MockLlm, openai_calls, openai_text};
use crate::support::{Run, Workspace, agent_result};
use serde_json::Value;

/// `kiln agent --base-url MOCK --model MODEL ARGS...` with `env`.
fn agent_env(
    ws: &Workspace,
    mock: &MockLlm,
    model: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> Run {
    let base = format!("{}/v1", mock.url);
    let mut all = vec!["agent", "--base-url", &base, "--model", model];
    all.extend_from_slice(args);
    ws.kiln(&all, env)
}

/// `kiln agent --base-url MOCK --model test-model ARGS...`, without `--json` unless ARGS has it.
fn agent_plain(ws: &Workspace, mock: &MockLlm, args: &[&str]) -> Run {
    agent_env(ws, mock, "test-model", args, &[])
}

fn tool_results(mock: &MockLlm, request: usize) -> Vec<String> {
    mock.recorded()[request].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or("").to_string())
        .collect()
}

fn system_prompt(mock: &MockLlm) -> String {
    let m = &mock.recorded()[0].body["messages"][0];
    assert_eq!(m["role"], "system", "{m}");
    m["content"].as_str().unwrap().to_string()
}

#[test]
fn short_flags_and_the_positional_task() {
    let ws = Workspace::new();
    ws.write("a.txt", "one\n");
    // -m: the turn cap; the task given as the positional argument.
    let replies = (0..3)
        .map(|i| openai_calls(&[("search_repo", &format!(r#"{{"pattern":"p{i}"}}"#))]))
        .collect();
    let mock = MockLlm::start(replies);
    let r = agent_plain(
        &ws,
        &mock,
        &["--json", "-m", "2", "find the positional task"],
    );
    r.expect_code(1);
    assert_eq!(agent_result(&r)["stop_reason"], "max_steps");
    assert_eq!(mock.recorded().len(), 2);
    assert!(
        mock.recorded()[0].body["messages"]
            .to_string()
            .contains("find the positional task")
    );

    // -p and -w.
    let w = |n: u32| {
        serde_json::json!({"path": "a.txt", "patch": format!("<<<<<<< SEARCH\n=======\nx{n}\n>>>>>>> REPLACE\n")}).to_string()
    };
    let mock = MockLlm::start(vec![
        openai_calls(&[("write_patch", &w(1))]),
        openai_calls(&[("write_patch", &w(2))]),
    ]);
    let r = agent_plain(&ws, &mock, &["--json", "-p", "x", "-w", "1"]);
    r.expect_code(1);
    assert_eq!(agent_result(&r)["stop_reason"], "max_writes");
    assert!(
        mock.recorded()[0].body["messages"]
            .to_string()
            .contains("\"x\"")
    );

    // -c.
    let mock = MockLlm::start(vec![openai_calls(&[
        ("run_cmd", r#"{"command":"true"}"#),
        ("run_cmd", r#"{"command":"true","args":[]}"#),
    ])]);
    let r = agent_plain(
        &ws,
        &mock,
        &["--json", "-p", "x", "-c", "1", "--test-command", "true"],
    );
    r.expect_code(1);
    assert_eq!(agent_result(&r)["stop_reason"], "max_commands");

    // The task once only.
    let r = ws.kiln(&["agent", "-p", "a", "b", "--model", "m"], &[]);
    r.expect_code(2);
    assert!(r.stderr().contains("cannot be used with"), "{}", r.stderr());
}

#[test]
fn test_args_are_added_to_the_test_command_and_nothing_else_runs() {
    let ws = Workspace::new();
    let mock = MockLlm::start(vec![
        openai_calls(&[
            ("run_cmd", r#"{"command":"python3 -c print(42)"}"#),
            ("run_cmd", r#"{"command":"python3 -V"}"#),
        ]),
        openai_text("done"),
    ]);
    let r = agent_plain(
        &ws,
        &mock,
        &[
            "-p",
            "x",
            "--sequential",
            "--test-command",
            "python3",
            "--test-args",
            "-c,print(42)",
        ],
    );
    r.expect_code(0);
    assert!(
        r.stderr().contains("test command `python3 -c print(42)`"),
        "{}",
        r.stderr()
    );
    let res = tool_results(&mock, 1);
    assert!(res[0].contains("42"), "{}", res[0]);
    assert!(res[1].starts_with("denied"), "{}", res[1]);

    // An argument the allowlist could not hold exactly is refused before anything runs.
    let r = ws.kiln(
        &[
            "agent",
            "-p",
            "x",
            "--model",
            "m",
            "--test-command",
            "pytest",
            "--test-args",
            "-k,test_*",
        ],
        &[],
    );
    r.expect_code(2);
    assert!(
        r.stderr().contains("--test-args: `test_*`"),
        "{}",
        r.stderr()
    );
}

#[test]
fn console_log_can_be_turned_off_by_flag_or_environment() {
    let ws = Workspace::new();
    let mock = MockLlm::start(vec![openai_text("the answer")]);
    let r = agent_plain(&ws, &mock, &["-p", "x"]);
    r.expect_code(0);
    assert!(r.stderr().contains("-- turn 1"), "{}", r.stderr());
    assert!(r.stderr().contains("kiln agent: model `test-model`"));
    assert_eq!(r.stdout().trim(), "the answer");

    for (args, env) in [
        (&["-p", "x", "--no-console-log"][..], &[][..]),
        (&["-p", "x"][..], &[("AGENT_CONSOLE_LOGGING", "false")][..]),
    ] {
        let mock = MockLlm::start(vec![openai_text("the answer")]);
        let r = agent_env(&ws, &mock, "test-model", args, env);
        r.expect_code(0);
        assert!(
            !r.stderr().contains("-- turn"),
            "{args:?} {env:?}: {}",
            r.stderr()
        );
        assert!(!r.stderr().contains("kiln agent: model"), "{}", r.stderr());
        // The answer and the final summary are still shown.
        assert_eq!(r.stdout().trim(), "the answer");
        assert!(
            r.stderr().contains("[complete] 1 turn, 0 tool calls"),
            "{}",
            r.stderr()
        );
    }
}

#[test]
fn file_log_goes_to_the_default_or_named_file() {
    let ws = Workspace::new();
    // --file-log: .kiln/logs/agent.log.
    let mock = MockLlm::start(vec![openai_text("logged answer")]);
    agent_plain(&ws, &mock, &["-p", "x", "--file-log", "--no-console-log"]).expect_code(0);
    let log = ws.read(".kiln/logs/agent.log");
    assert!(log.contains("-- turn 1"), "{log}");
    assert!(log.contains("logged answer"), "{log}");
    assert!(log.contains("[complete] 1 turn"), "{log}");
    // Lines are timestamped.
    let first = log.lines().next().unwrap();
    assert!(
        first.starts_with("20") && first.contains("Z kiln agent: model"),
        "{first}"
    );

    // --log-file implies --file-log; works with --json too.
    let mock = MockLlm::start(vec![openai_text("second")]);
    let r = agent_plain(
        &ws,
        &mock,
        &["-p", "x", "--json", "--log-file", "my-agent.log"],
    );
    r.expect_code(0);
    agent_result(&r);
    assert!(ws.read("my-agent.log").contains("-- turn 1"));

    // The environment: AGENT_FILE_LOGGING=true with AGENT_LOG_FILE.
    let mock = MockLlm::start(vec![openai_text("third")]);
    agent_env(
        &ws,
        &mock,
        "test-model",
        &["-p", "x"],
        &[
            ("AGENT_FILE_LOGGING", "true"),
            ("AGENT_LOG_FILE", "env.log"),
        ],
    )
    .expect_code(0);
    assert!(ws.read("env.log").contains("third"));
    // AGENT_LOG_FILE alone does not turn file logging on.
    let mock = MockLlm::start(vec![openai_text("fourth")]);
    agent_env(
        &ws,
        &mock,
        "test-model",
        &["-p", "x"],
        &[("AGENT_LOG_FILE", "off.log")],
    )
    .expect_code(0);
    assert!(!ws.root().join("off.log").exists());

    // A log file that is a symlink, or kiln.toml, is refused before anything runs.
    std::os::unix::fs::symlink(ws.path().join("outside.txt"), ws.root().join("link.log")).unwrap();
    let mock = MockLlm::start(vec![]);
    let r = agent_plain(&ws, &mock, &["-p", "x", "--log-file", "link.log"]);
    r.expect_code(2);
    assert!(r.stderr().contains("symbolic link"), "{}", r.stderr());
    assert!(!ws.path().join("outside.txt").exists());
    let r = agent_plain(&ws, &mock, &["-p", "x", "--log-file", "kiln.toml"]);
    r.expect_code(2);
    assert!(r.stderr().contains("kiln.toml"), "{}", r.stderr());
    assert!(mock.recorded().is_empty());
}

#[test]
fn a_default_test_command_is_detected_shown_and_allowed() {
    // Cargo.toml: `cargo test`, and only that.
    let ws = Workspace::new();
    ws.write("Cargo.toml", "[package]\nname = \"x\"\n");
    let mock = MockLlm::start(vec![
        openai_calls(&[("run_cmd", r#"{"command":"cargo build"}"#)]),
        openai_text("done"),
    ]);
    let r = agent_plain(&ws, &mock, &["-p", "x"]);
    r.expect_code(0);
    assert!(
        r.stderr()
            .contains("test command `cargo test` (detected from Cargo.toml)"),
        "{}",
        r.stderr()
    );
    let res = tool_results(&mock, 1);
    assert!(
        res[0].starts_with("denied") && res[0].contains("\"cargo\"") && res[0].contains("\"test\""),
        "{}",
        res[0]
    );

    // pyproject.toml: `pytest -q` is allowed (whether or not pytest is installed), other
    // arguments are not.
    let ws = Workspace::new();
    ws.write("pyproject.toml", "[project]\nname = \"x\"\n");
    let mock = MockLlm::start(vec![
        openai_calls(&[
            ("run_cmd", r#"{"command":"pytest -x"}"#),
            ("run_cmd", r#"{"command":"pytest -q"}"#),
        ]),
        openai_text("done"),
    ]);
    let r = agent_plain(&ws, &mock, &["-p", "x", "--sequential"]);
    r.expect_code(0);
    assert!(
        r.stderr()
            .contains("test command `pytest -q` (detected from pyproject.toml)"),
        "{}",
        r.stderr()
    );
    let res = tool_results(&mock, 1);
    assert!(res[0].starts_with("denied"), "{}", res[0]);
    assert!(!res[1].starts_with("denied"), "{}", res[1]);

    // An explicit --test-command wins; nothing found: none.
    let mock = MockLlm::start(vec![openai_text("done")]);
    let r = agent_plain(&ws, &mock, &["-p", "x", "--test-command", "python3 -V"]);
    assert!(
        r.stderr().contains("test command `python3 -V`;"),
        "{}",
        r.stderr()
    );
    let ws = Workspace::new();
    let mock = MockLlm::start(vec![openai_text("done")]);
    let r = agent_plain(&ws, &mock, &["-p", "x"]);
    assert!(r.stderr().contains("no test command"), "{}", r.stderr());
}

#[test]
fn system_file_replaces_the_system_prompt_and_system_is_appended() {
    let ws = Workspace::new();
    ws.write("sys.txt", "You are a terse robot.\n");
    let mock = MockLlm::start(vec![openai_text("ok")]);
    agent_plain(
        &ws,
        &mock,
        &[
            "-p",
            "x",
            "--system-file",
            "sys.txt",
            "--system",
            "Answer in French.",
        ],
    )
    .expect_code(0);
    let sys = system_prompt(&mock);
    assert!(sys.starts_with("You are a terse robot.\n"), "{sys}");
    assert!(sys.contains("Answer in French."), "{sys}");
    assert!(!sys.contains("careful coding agent"), "{sys}");

    let mock = MockLlm::start(vec![openai_text("ok")]);
    agent_plain(&ws, &mock, &["-p", "x", "--system", "Answer in French."]).expect_code(0);
    let sys = system_prompt(&mock);
    assert!(
        sys.contains("careful coding agent") && sys.contains("Answer in French."),
        "{sys}"
    );
}

#[test]
fn a_missing_api_key_is_reported_before_anything_runs() {
    let ws = Workspace::new();
    ws.write("main.c", "int main(void) { return 0; }\n");
    // The default base URL is OpenAI's; no key in the environment.
    let r = ws.kiln(&["agent", "-p", "x", "--model", "gpt-4o"], &[]);
    r.expect_code(2);
    assert!(r.stderr().contains("set OPENAI_API_KEY"), "{}", r.stderr());
    let r = ws.kiln(
        &[
            "agent",
            "-p",
            "x",
            "--provider",
            "anthropic",
            "--model",
            "claude-sonnet-4",
        ],
        &[],
    );
    r.expect_code(2);
    assert!(
        r.stderr().contains("set ANTHROPIC_API_KEY"),
        "{}",
        r.stderr()
    );
    // kiln fix: before the check runs (it would create `ran`).
    let r = ws.kiln(
        &[
            "fix",
            "--model",
            "gpt-4o",
            "--cmd",
            "touch ran",
            "--file",
            "main.c",
        ],
        &[],
    );
    r.expect_code(2);
    assert!(r.stderr().contains("set OPENAI_API_KEY"), "{}", r.stderr());
    assert!(!ws.root().join("ran").exists(), "the check ran");
    assert!(!ws.store_path().exists(), "a loop started");
    // A local server needs no key.
    let mock = MockLlm::start(vec![openai_text("fine")]);
    agent_plain(&ws, &mock, &["-p", "x"]).expect_code(0);
}

#[test]
fn the_cost_of_a_run_is_shown_and_in_the_json_result() {
    let ws = Workspace::new();
    // The mock reports 20 prompt tokens (8 cached) and 5 output tokens: gpt-4o costs
    // (12 * 2.50 + 8 * 1.25 + 5 * 10.00) / 1e6 = 0.00009 USD.
    let mock = MockLlm::start(vec![openai_text("done")]);
    let r = agent_plain(&ws, &mock, &["-p", "x", "--json"]);
    r.expect_code(0);
    assert_eq!(agent_result(&r)["cost_usd"], Value::Null, "unknown model");
    let mock = MockLlm::start(vec![openai_text("done")]);
    let r = agent_env(&ws, &mock, "gpt-4o", &["-p", "x", "--json"], &[]);
    r.expect_code(0);
    let cost = agent_result(&r)["cost_usd"].as_f64().unwrap();
    assert!((cost - 0.00009).abs() < 1e-12, "{cost}");
    let mock = MockLlm::start(vec![openai_text("done")]);
    let r = agent_env(&ws, &mock, "openai/gpt-4o-2024-08-06", &["-p", "x"], &[]);
    r.expect_code(0);
    assert!(r.stderr().contains(", cost $0.000090\n"), "{}", r.stderr());

    // [pricing] in kiln.toml: 12 * 1.0 + 8 * 0.5 + 5 * 4.0 = 36 per million.
    ws.write(
        "kiln.toml",
        "[pricing.\"my-model\"]\ninput = 1.0\ncached_input = 0.5\noutput = 4.0\n",
    );
    let mock = MockLlm::start(vec![openai_text("done")]);
    let r = agent_env(&ws, &mock, "my-model", &["-p", "x", "--json"], &[]);
    r.expect_code(0);
    let cost = agent_result(&r)["cost_usd"].as_f64().unwrap();
    assert!((cost - 0.000036).abs() < 1e-12, "{cost}");
    // An invalid price names the field.
    ws.write(
        "kiln.toml",
        "[pricing.\"my-model\"]\ninput = -1\noutput = 4.0\n",
    );
    let r = agent_env(&ws, &mock, "my-model", &["-p", "x"], &[]);
    r.expect_code(2);
    assert!(
        r.stderr().contains("pricing.\"my-model\".input"),
        "{}",
        r.stderr()
    );
}

#[test]
fn fix_shows_its_cost_and_counts_in_the_right_number() {
    let ws = Workspace::new();
    ws.write(
        "main.c",
        "#include <stdio.h>\n\nint main(void) {\n    int x = 1\n    printf(\"%d\\n\", x);\n    return 0;\n}\n",
    );
    let mock = MockLlm::start(vec![openai_text(
        "Fixed.\n\n<<<<<<< SEARCH\n    int x = 1\n=======\n    int x = 1;\n>>>>>>> REPLACE\n",
    )]);
    let base = format!("{}/v1", mock.url);
    let r = ws.kiln(
        &[
            "fix",
            "--base-url",
            &base,
            "--model",
            "gpt-4o-mini",
            "--cmd",
            "gcc -fsyntax-only {file}",
            "--file",
            "main.c",
        ],
        &[],
    );
    r.expect_code(0);
    let err = r.stderr();
    assert!(err.contains(", 1 error, "), "{err}");
    assert!(err.contains("success after 1 iteration\n"), "{err}");
    assert!(
        err.contains("[success] 1 iteration, tokens in 20 / out 5, cost $0.000005"),
        "{err}"
    );
    // Without --json, stdout holds a short result for a person, not a JSON document.
    let out = r.stdout();
    assert!(
        !out.trim_start().starts_with('{') && out.lines().count() <= 3,
        "{out}"
    );
}

#[test]
fn streamed_text_ends_its_line_before_the_next_status_line() {
    let ws = Workspace::new();
    ws.write("a.txt", "one\n");
    // Text without a trailing newline, then a tool call in the same answer.
    let mut parts = crate::mock_llm::openai_events(&[
        serde_json::json!({"choices":[{"index":0,"delta":{"content":"Let me look"}}]}),
        serde_json::json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"read_files","arguments":"{\"paths\":[\"a.txt\"]}"}}]}}]}),
        serde_json::json!({"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}),
    ]);
    parts.push("data: [DONE]\n\n".into());
    let mock = MockLlm::start(vec![
        crate::mock_llm::Reply::sse(parts),
        openai_text("all done"),
    ]);
    let r = agent_plain(&ws, &mock, &["-p", "x"]);
    r.expect_code(0);
    let err = r.stderr();
    assert!(err.contains("Let me look\n  → read_files"), "{err}");
    assert!(
        err.contains("all done\n[complete] 2 turns, 1 tool call,"),
        "{err}"
    );
}

#[test]
fn manual_mode_counts_malformed_answers_correctly() {
    let ws = Workspace::new();
    let mock = MockLlm::start(vec![
        openai_text("no"),
        openai_text("still no"),
        openai_text("nope"),
    ]);
    let r = agent_plain(&ws, &mock, &["-p", "x", "--manual"]);
    r.expect_code(2);
    let err = r.stderr();
    assert!(
        err.contains("malformed answer 3 in a row (at most 2 tolerated)"),
        "{err}"
    );
    assert!(!err.contains("attempt 3 of 2"), "{err}");
}

#[test]
fn agent_help_lists_its_own_options_first() {
    let ws = Workspace::new();
    let r = ws.kiln(&["agent", "--help"], &[]);
    r.expect_code(0);
    let help = r.stdout();
    let own = help.find("--max-steps").unwrap();
    let global = help.find("--workspace").unwrap();
    assert!(own < global, "{help}");
    for flag in [
        "-p, --prompt",
        "-m, --max-steps",
        "-w, --max-writes",
        "-c, --max-commands",
        "--test-args",
        "--no-console-log",
        "--file-log",
        "--log-file",
        "--system-file",
    ] {
        assert!(help.contains(flag), "{flag} missing:\n{help}");
    }
}

/// On a terminal (stdout and stderr both), the agent's final answer streamed on stderr is not
/// printed a second time on stdout; piped, stdout still carries it (it is the command's data).
#[test]
fn the_final_answer_is_printed_once_on_a_terminal() {
    let ws = Workspace::new();
    let answer = "The answer is forty-two-marker.";
    let mock = MockLlm::start(vec![openai_text(answer), openai_text(answer)]);
    let kiln = env!("CARGO_BIN_EXE_kiln");
    let line = format!(
        "{kiln} agent --base-url {}/v1 --model test-model 'what is it?'",
        mock.url
    );
    let mut env = ws.command(&[]);
    env.env("OPENAI_API_KEY", "sk-t").env("TERM", "dumb");
    let out = std::process::Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .current_dir(ws.root())
        .env_clear()
        .envs(env.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        shown.matches("forty-two-marker").count(),
        1,
        "printed once: {shown}"
    );
    assert!(shown.contains("[complete]"), "{shown}");

    // Piped: the answer is on stdout.
    let r = agent_plain(&ws, &mock, &["what is it?"]);
    r.expect_code(0);
    assert_eq!(r.stdout().trim(), answer, "{}", r.stderr());
}

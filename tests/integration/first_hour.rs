//! What a new user meets in the first hour, end to end: runs that must not claim success or
//! hang (a model that only chats in `kiln loop`, a Latin-1 target), usage errors refused
//! before a loop exists, unknown names answered with "did you mean", `-q`, Ctrl-C's exit
//! code, `.kiln/.gitignore`, a header naming another file in single-target mode, and
//! `kiln plugin new`'s warnings.

use crate::mock_llm::{MockLlm, openai_text};
use crate::support::{Run, Workspace, last_event};

fn loops(ws: &Workspace) -> Vec<kiln::store::LoopRow> {
    if !ws.store_path().exists() {
        return Vec::new();
    }
    ws.store().loops(100).unwrap()
}

fn fix(ws: &Workspace, mock: &MockLlm, args: &[&str]) -> Run {
    ws.kiln_model(&mock.url, "fix", args)
}

#[test]
fn a_loop_whose_model_only_chats_is_not_clean_and_the_parent_row_has_the_tokens() {
    let ws = Workspace::new();
    ws.write("task.md", "Write hello.txt.\n");
    let mock = MockLlm::start(vec![
        openai_text("I had a look around; this seems fine."),
        openai_text("Looks good to me."),
    ]);
    let r = ws.kiln_model(&mock.url, "loop", &["--task", "task.md", "--loops", "1"]);
    r.expect_code(1);
    let res = last_event(&r, "loop.run.result");
    assert_ne!(res["stop_reason"], "review_clean", "{res}");
    assert_eq!(res["success"], false, "{res}");
    let rows = loops(&ws);
    let parent = rows
        .iter()
        .find(|l| l.kind == "loop")
        .expect("the loop row");
    assert_ne!(parent.status, "running");
    // Two requests of 20 input tokens each (8 of them cached: the mock's usage), counted
    // on the parent row.
    assert_eq!(
        parent.tokens.input + parent.tokens.cached_input,
        40,
        "{:?}",
        parent.tokens
    );
    assert_eq!(parent.tokens.output, 10, "{:?}", parent.tokens);
}

#[test]
fn a_latin1_target_is_refused_before_the_model_is_asked_and_leaves_no_loop() {
    let ws = Workspace::new();
    std::fs::write(ws.root().join("notes.txt"), b"caf\xe9 cr\xe8me\n").unwrap();
    let mock = MockLlm::start(vec![openai_text("no")]);
    let r = fix(&ws, &mock, &["--cmd", "false", "--file", "notes.txt"]);
    r.expect_code(2);
    let err = r.stderr();
    assert!(
        err.contains("notes.txt is not UTF-8") && err.contains("Latin-1"),
        "{err}"
    );
    assert!(mock.recorded().is_empty(), "the model was asked");
    assert!(loops(&ws).is_empty(), "a loop row was left behind");
}

#[test]
fn usage_errors_are_refused_before_a_loop_exists() {
    let ws = Workspace::new();
    ws.write("a.txt", "x\n");
    let mock = MockLlm::start(vec![]);
    // The command runner without --cmd.
    let r = fix(&ws, &mock, &["--file", "a.txt"]);
    r.expect_code(2);
    assert!(r.stderr().contains("needs a command"), "{}", r.stderr());
    // The cargo runner with a misspelt mode.
    let r = fix(
        &ws,
        &mock,
        &["--runner", "cargo", "--mode", "tset", "--file", "a.txt"],
    );
    r.expect_code(2);
    assert!(r.stderr().contains("mode `tset`"), "{}", r.stderr());
    assert!(loops(&ws).is_empty(), "usage errors left loop rows");
    assert!(mock.recorded().is_empty());
}

#[test]
fn unknown_names_get_did_you_mean() {
    let ws = Workspace::new();
    ws.write("a.txt", "x\n");
    let r = ws.kiln(&["check", "--runner", "carg", "--file", "a.txt"], &[]);
    r.expect_code(2);
    let err = r.stderr();
    assert!(err.contains("did you mean `cargo`"), "{err}");
    assert!(
        err.contains("command") && err.contains("search-replace"),
        "{err}"
    );

    ws.write("kiln.toml", "[plugins.shel]\nenv = [\"X\"]\n");
    let r = ws.kiln(&["check", "--cmd", "true", "--file", "a.txt"], &[]);
    r.expect_code(0);
    assert!(
        r.stderr().contains("[plugins.shel]") && r.stderr().contains("did you mean `shell`"),
        "{}",
        r.stderr()
    );

    std::fs::remove_file(ws.root().join("kiln.toml")).unwrap();
    ws.write("task.md", "+++\n[tool]\nbash = [\"cat\"]\n+++\nDo it.\n");
    let mock = MockLlm::start(vec![]);
    let r = ws.kiln_model(&mock.url, "loop", &["--task", "task.md", "--loops", "1"]);
    assert!(
        r.stderr().contains("`tool` is not known") && r.stderr().contains("did you mean `tools`"),
        "{}",
        r.stderr()
    );
}

#[test]
fn quiet_runs_print_no_progress_lines() {
    let ws = Workspace::new();
    ws.write("a.txt", "x\n");
    let r = ws.kiln(&["-q", "check", "--cmd", "true", "--file", "a.txt"], &[]);
    r.expect_code(0);
    assert!(!r.stderr().contains("checking"), "{}", r.stderr());
    let mock = MockLlm::start(vec![]);
    let base = format!("{}/v1", mock.url);
    let fix = |quiet: bool| {
        let mut args = vec!["fix", "--base-url", &base, "--model", "m"];
        args.extend(["--cmd", "true", "--file", "a.txt"]);
        if quiet {
            args.insert(0, "-q");
        }
        ws.kiln(&args, &[("OPENAI_API_KEY", "sk-q")])
    };
    let r = fix(true);
    r.expect_code(0);
    assert!(!r.stderr().contains("runner:"), "{}", r.stderr());
    assert!(!r.stderr().contains("loop 1:"), "{}", r.stderr());
    // Without -q the same run shows its progress, and stdout is a short result, not JSON.
    let r = fix(false);
    assert!(r.stderr().contains("runner: passed"), "{}", r.stderr());
    assert!(!r.stdout().trim_start().starts_with('{'), "{}", r.stdout());
}

#[test]
fn ctrl_c_exits_130() {
    let ws = Workspace::new();
    ws.write("a.txt", "x\n");
    let mock = MockLlm::start(vec![]);
    let base = format!("{}/v1", mock.url);
    let child = ws
        .command(&[
            "fix",
            "--base-url",
            &base,
            "--model",
            "m",
            "--cmd",
            "sleep 29.25",
            "--file",
            "a.txt",
        ])
        .env("OPENAI_API_KEY", "sk-c")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The check is running once its program is.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        std::fs::read_to_string(e.path().join("cmdline"))
            .is_ok_and(|c| c.ends_with("sleep\x0029.25\x00"))
    }) {
        assert!(
            std::time::Instant::now() < deadline,
            "the check never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // SAFETY: signals the child this test spawned.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_kiln_dir_is_ignored_by_git() {
    let ws = Workspace::new();
    ws.write("a.txt", "x\n");
    let mock = MockLlm::start(vec![]);
    fix(&ws, &mock, &["--cmd", "true", "--file", "a.txt"]).expect_code(0);
    assert_eq!(
        std::fs::read_to_string(ws.root().join(".kiln/.gitignore"))
            .unwrap()
            .lines()
            .last(),
        Some("*")
    );
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(ws.root())
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .unwrap()
    };
    git(&["init", "-q"]);
    git(&["add", "-A"]);
    let listed = String::from_utf8_lossy(&git(&["ls-files", "--cached"]).stdout).into_owned();
    assert!(listed.contains("a.txt"), "{listed}");
    assert!(!listed.contains(".kiln"), "{listed}");
}

#[test]
fn a_header_naming_another_file_is_refused_in_single_target_mode() {
    let ws = Workspace::new();
    ws.write("a.py", "x = 1\n");
    ws.write("other.py", "y = 1\n");
    let mock = MockLlm::start(vec![openai_text(
        "<<< path=other.py >>>\n<<<<<<< SEARCH\nx = 1\n=======\nx = 2\n>>>>>>> REPLACE\n",
    )]);
    let r = fix(
        &ws,
        &mock,
        &["--cmd", "false", "--file", "a.py", "--max-iters", "1"],
    );
    r.expect_code(1);
    assert_eq!(
        ws.read("a.py"),
        "x = 1\n",
        "the edit was re-pointed to a.py"
    );
    assert_eq!(ws.read("other.py"), "y = 1\n");
    let failed: Vec<serde_json::Value> = r
        .stdout()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["type"] == "edit.failed")
        .collect();
    assert!(
        failed.iter().any(|e| e["error"]
            .as_str()
            .unwrap_or("")
            .contains("other.py is not a file this loop may change")),
        "{failed:?}\n{}",
        r.stdout()
    );
}

#[test]
fn plugin_new_warns_about_a_builtin_name_and_prints_the_install_step() {
    let ws = Workspace::new();
    let r = ws.kiln(
        &["plugin", "new", "--kind", "tool", "--lang", "js", "shell"],
        &[],
    );
    r.expect_code(0);
    assert!(
        r.stderr()
            .contains("`shell` is the name of a built-in plugin")
            && r.stderr().contains("replaces = \"shell\""),
        "{}",
        r.stderr()
    );
    let out = r.stdout();
    let setup = out.find("setup:  ").expect("a setup line");
    let build = out.find("build:  ").expect("a build line");
    assert!(setup < build && out.contains("npm install"), "{out}");
}

#[test]
fn a_target_too_big_for_the_format_names_the_setting_before_the_model_is_paid() {
    let ws = Workspace::new();
    let line = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde\n";
    ws.write("big.txt", &line.repeat(5 << 20 >> 6));
    let mock = MockLlm::start(vec![openai_text("no")]);
    let r = fix(
        &ws,
        &mock,
        &["--cmd", "false", "--file", "big.txt", "--format", "whole"],
    );
    r.expect_code(2);
    let err = r.stderr();
    assert!(
        err.contains("[plugins.whole]") && err.contains("output_bytes = 8388608"),
        "{err}"
    );
    assert!(mock.recorded().is_empty(), "the model was asked");
    assert!(loops(&ws).is_empty());
}

/// A fix run whose model answers with one edit to `main.c`; `NO_COLOR` and a terminal as set.
fn fix_on_terminal(ws: &Workspace, no_color: bool) -> String {
    ws.write("main.c", "int main(void) {\n    return 0\n}\n");
    let mock = MockLlm::start(vec![openai_text(
        "<<<<<<< SEARCH\n    return 0\n=======\n    return 0;\n>>>>>>> REPLACE\n",
    )]);
    let kiln = env!("CARGO_BIN_EXE_kiln");
    let line = format!(
        "{kiln} fix --base-url {}/v1 --model m --cmd 'gcc -fsyntax-only {{file}}' --file main.c",
        mock.url
    );
    // `script` gives kiln a terminal on stdout and stderr; the environment is the tests'
    // clean one.
    let mut env = ws.command(&[]);
    env.env("OPENAI_API_KEY", "sk-t").env("TERM", "dumb");
    if no_color {
        env.env("NO_COLOR", "1");
    }
    let out = std::process::Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .current_dir(ws.root())
        .env_clear()
        .envs(env.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_terminal_shows_the_first_diagnostics_and_a_colored_diff_unless_no_color() {
    let ws = Workspace::new();
    let shown = fix_on_terminal(&ws, false);
    assert!(shown.contains("main.c:2:"), "the first diagnostic: {shown}");
    assert!(
        shown.contains("\u{1b}[31m-    return 0\u{1b}[0m")
            && shown.contains("\u{1b}[32m+    return 0;\u{1b}[0m"),
        "{shown:?}"
    );
    let ws = Workspace::new();
    let plain = fix_on_terminal(&ws, true);
    assert!(plain.contains("+    return 0;"), "{plain}");
    assert!(!plain.contains("\u{1b}[3"), "{plain:?}");
    // Not a terminal: no colors either, and the diff is still shown.
    let ws = Workspace::new();
    ws.write("main.c", "int main(void) {\n    return 0\n}\n");
    let mock = MockLlm::start(vec![openai_text(
        "<<<<<<< SEARCH\n    return 0\n=======\n    return 0;\n>>>>>>> REPLACE\n",
    )]);
    let base = format!("{}/v1", mock.url);
    let r = ws.kiln(
        &[
            "fix",
            "--base-url",
            &base,
            "--model",
            "m",
            "--cmd",
            "gcc -fsyntax-only {file}",
            "--file",
            "main.c",
        ],
        &[("OPENAI_API_KEY", "sk-t")],
    );
    r.expect_code(0);
    assert!(r.stderr().contains("+    return 0;"), "{}", r.stderr());
    assert!(!r.stderr().contains('\u{1b}'), "{:?}", r.stderr());
}

#[test]
fn a_refused_edit_says_the_runner_was_not_run_again() {
    let ws = Workspace::new();
    ws.write("a.txt", "x\n");
    let mock = MockLlm::start(vec![openai_text(
        "<<<<<<< SEARCH\nnot in the file\n=======\ny\n>>>>>>> REPLACE\n",
    )]);
    let base = format!("{}/v1", mock.url);
    let r = ws.kiln(
        &[
            "fix",
            "--base-url",
            &base,
            "--model",
            "m",
            "--cmd",
            "false",
            "--file",
            "a.txt",
            "--max-iters",
            "1",
        ],
        &[("OPENAI_API_KEY", "sk-t")],
    );
    r.expect_code(1);
    assert!(
        r.stderr()
            .contains("[1] runner not re-run (no edit applied): still failed"),
        "{}",
        r.stderr()
    );
}

#[test]
fn a_read_only_workspace_gets_one_clear_message() {
    // A read-only mount in a mount namespace of its own (kiln's tests run as root, like its
    // PID-namespace tests).
    let ws = Workspace::new();
    let mnt = ws.path().join("ro");
    std::fs::create_dir(&mnt).unwrap();
    // The store is in kiln's state directory, so the fix loop gets as far as its log.
    let replay = ws.path().join("replay.jsonl");
    std::fs::write(&replay, "\"no change\"\n").unwrap();
    let kiln = env!("CARGO_BIN_EXE_kiln");
    let script = format!(
        "mount -t tmpfs tmpfs {m} && printf 'x = 1\\n' > {m}/a.py && mount -o remount,ro {m} && \
         printf '<<<<<<< SEARCH\\nx = 1\\n=======\\nx = 2\\n>>>>>>> REPLACE\\n' | {kiln} -C {m} edit apply --format search-replace --files a.py; echo \"exit $?\"; \
         {kiln} -C {m} check --cmd true --file a.py; echo \"exit $?\"; \
         {kiln} -C {m} fix --cmd false --file a.py --replay {r}; echo \"exit $?\"",
        m = mnt.display(),
        r = replay.display()
    );
    let mut cmd = ws.command(&[]);
    let out = std::process::Command::new("unshare")
        .args(["-m", "sh", "-c", &script])
        .env_clear()
        .envs(
            cmd.env("X", "1")
                .get_envs()
                .filter_map(|(k, v)| Some((k, v?))),
        )
        .output()
        .unwrap();
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(all.contains("exit 1"), "{all}");
    assert!(
        all.contains("(the file system refused it; the response itself was not judged)")
            && !all.contains("the response does not apply"),
        "{all}"
    );
    let fix = all
        .lines()
        .find(|l| l.contains("cannot create"))
        .expect(&all);
    assert_eq!(fix.matches("Read-only file system").count(), 1, "{all}");
    assert!(
        all.contains("the workspace is on a read-only file system"),
        "{all}"
    );
}

#[test]
fn a_streaming_request_answered_with_one_json_body_is_taken_as_it_is() {
    let ws = Workspace::new();
    ws.write("a.txt", "x\n");
    let mock = MockLlm::start(vec![crate::mock_llm::Reply::json(
        200,
        serde_json::json!({
            "choices": [{
                "message": {
                    "role": "assistant",
                    "content": "<<<<<<< SEARCH\nx\n=======\ny\n>>>>>>> REPLACE\n"
                },
                "finish_reason": "stop"
            }],
            "usage": { "prompt_tokens": 10, "completion_tokens": 5 }
        }),
    )]);
    let r = fix(&ws, &mock, &["--cmd", "grep -q y a.txt", "--file", "a.txt"]);
    r.expect_code(0);
    assert_eq!(ws.read("a.txt"), "y\n");
    assert_eq!(mock.recorded().len(), 1, "retried: {}", r.stdout());
    // The request did ask for a stream.
    assert_eq!(mock.recorded()[0].body["stream"], true);
}

#[test]
fn a_refused_connection_fails_at_once_naming_the_url() {
    let ws = Workspace::new();
    ws.write("a.txt", "x\n");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/v1");
    let r = ws.kiln(
        &[
            "fix",
            "--base-url",
            &url,
            "--model",
            "m",
            "--cmd",
            "false",
            "--file",
            "a.txt",
        ],
        &[("OPENAI_API_KEY", "sk-r")],
    );
    let err = r.stderr();
    assert!(
        err.contains(&format!("nothing answers at http://127.0.0.1:{port}/v1"))
            && err.contains("connection refused"),
        "{err}"
    );
    assert!(
        !err.contains("retry"),
        "a refused connection was retried: {err}"
    );
}

#[test]
fn a_cold_plugin_cache_says_it_is_compiling() {
    let ws = Workspace::new();
    ws.write("a.txt", "x\n");
    let cache = ws.path().join("cold-cache");
    let cache = cache.to_str().unwrap();
    let run = || {
        ws.kiln(
            &["check", "--cmd", "true", "--file", "a.txt"],
            &[("KILN_CACHE_DIR", cache)],
        )
    };
    let r = run();
    r.expect_code(0);
    assert!(
        r.stderr().contains(
            "kiln: compiling the built-in plugin `command` (first use; cached afterwards)"
        ),
        "{}",
        r.stderr()
    );
    let r = run();
    assert!(!r.stderr().contains("compiling"), "{}", r.stderr());
}

#[test]
fn a_search_replace_on_a_big_file_costs_the_edit_not_the_file() {
    // 24 MiB: six times the default output cap, and past what the default memory limit
    // allows the format to hold whole; the edit goes through a window around its one match.
    let ws = Workspace::new();
    let mut text = String::with_capacity(24 << 20);
    for i in 0..(24 << 20) / 32 {
        text.push_str(&format!("{{\"id\": {i:>10}, \"v\": \"xxxx\"}},\n"));
    }
    ws.write("gen.json", &text);
    let mock = MockLlm::start(vec![openai_text(
        "<<<<<<< SEARCH\n{\"id\":     400000, \"v\": \"xxxx\"},\n=======\n{\"id\":     400000, \"v\": \"done\"},\n>>>>>>> REPLACE\n",
    )]);
    let r = fix(
        &ws,
        &mock,
        &["--cmd", "grep -q done gen.json", "--file", "gen.json"],
    );
    r.expect_code(0);
    let after = std::fs::read_to_string(ws.root().join("gen.json")).unwrap();
    assert_eq!(after.len(), text.len());
    assert!(after.contains("{\"id\":     400000, \"v\": \"done\"},\n"));
    assert_eq!(after.matches("done").count(), 1);
}

/// `--runner carg` is answered with the runner's "did you mean" only: no warning about a
/// `[plugins.carg]` section, which no file has (the flag's consent made it). A real misspelt
/// section still gets its warning.
#[test]
fn a_misspelt_runner_flag_is_not_taken_for_a_misspelt_section() {
    let ws = Workspace::new();
    ws.write("a.txt", "x\n");
    let r = ws.kiln(&["check", "--runner", "carg", "--file", "a.txt"], &[]);
    r.expect_code(2);
    assert!(
        r.stderr().contains("did you mean `cargo`"),
        "{}",
        r.stderr()
    );
    assert!(!r.stderr().contains("[plugins.carg]"), "{}", r.stderr());
    ws.write("kiln.toml", "[plugins.shel]\nnet = false\n");
    let r = ws.kiln(&["check", "--cmd", "true", "--file", "a.txt"], &[]);
    r.expect_code(0);
    assert!(
        r.stderr().contains("[plugins.shel] names no plugin"),
        "{}",
        r.stderr()
    );
}

/// A check that runs out of `--timeout` while its runner still reads a flood of output is a
/// failing, timed-out check whose message names `--timeout` and `[fix] timeout` (the settings
/// that set its time); it named `[plugins.command] timeout_ms`, which `--timeout` overrides.
#[test]
fn a_check_out_of_time_names_the_setting_that_sets_its_time() {
    let ws = Workspace::new();
    ws.write(
        "flood.sh",
        "yes 'main.c:1:1: error: x' &\nyes 'main.c:1:1: error: y' >&2\n",
    );
    let r = ws.kiln(
        &["check", "--shell", "--cmd", "sh flood.sh", "--timeout", "1"],
        &[],
    );
    r.expect_code(1);
    assert!(!r.stderr().contains("timeout_ms"), "{}", r.stderr());
    if r.stderr().contains("ran out of time") {
        assert!(
            r.stderr().contains("after 1 s")
                && r.stderr().contains("--timeout SECONDS or `[fix] timeout`"),
            "{}",
            r.stderr()
        );
    } else {
        assert!(r.stderr().contains("timed out"), "{}", r.stderr());
    }
}

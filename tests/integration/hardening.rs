//! Issue 11, items 5, 7, 8 and 9: kiln's own store and logs never follow a planted symlink,
//! files that are not regular files are never opened for reading (nothing waits on a FIFO),
//! plugin names and what plugins print are kept honest, and messages say what works.

use crate::support::{Run, Workspace, error_of, sr, wasm};
use std::io::Write;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// Run `kiln` with `stdin`, failing the test (and killing kiln) if it takes more than `secs`:
/// a hang must fail, not stall CI.
fn kiln_within(ws: &Workspace, secs: u64, args: &[&str], stdin: &str) -> Run {
    let mut child = ws
        .command(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let mut input = child.stdin.take().unwrap();
    let stdin = stdin.to_string();
    std::thread::spawn(move || {
        let _ = input.write_all(stdin.as_bytes());
    });
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(out) => Run(out.unwrap()),
        Err(_) => {
            // SAFETY: sending a signal to the child this test started.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
            panic!("kiln {args:?} did not finish within {secs} s (blocked?)");
        }
    }
}

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success());
}

fn is_empty_dir(p: &Path) -> bool {
    std::fs::read_dir(p).unwrap().next().is_none()
}

// ---- 5. kiln's store -------------------------------------------------------------------

/// `kiln fix` with a replayed model answer and a check that fails, so the loop reaches the
/// point of writing its log.
fn fix_replay(ws: &Workspace) -> Run {
    ws.write("a.txt", "one\n");
    let replay = ws.path().join("replay.jsonl");
    std::fs::write(&replay, "\"no change\"\n").unwrap();
    ws.kiln(
        &[
            "fix",
            "--replay",
            replay.to_str().unwrap(),
            "--runner",
            "command",
            "--cmd",
            "false",
            "--file",
            "a.txt",
            "--max-iters",
            "1",
        ],
        &[],
    )
}

#[test]
fn a_symlinked_kiln_dir_is_refused_and_nothing_is_written_outside() {
    let ws = Workspace::new();
    let elsewhere = ws.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, ws.root().join(".kiln")).unwrap();

    // The store is not in `.kiln` (it is in kiln's state directory): history never opens it.
    let r = ws.kiln(&["history"], &[]);
    r.expect_code(0);
    let r = fix_replay(&ws);
    r.expect_code(2);
    assert!(r.stderr().contains("symbolic link"), "{}", r.stderr());
    assert!(is_empty_dir(&elsewhere), "kiln wrote outside the workspace");
}

#[test]
fn a_symlinked_logs_dir_is_refused_and_a_planted_database_is_ignored() {
    let ws = Workspace::new();
    let elsewhere = ws.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::create_dir(ws.root().join(".kiln")).unwrap();

    // The log directory planted as a link: the fix loop refuses before writing its log.
    let logs = ws.root().join(".kiln").join("logs");
    std::os::unix::fs::symlink(&elsewhere, &logs).unwrap();
    let r = fix_replay(&ws);
    r.expect_code(2);
    assert!(
        r.stderr()
            .contains(&format!("refusing to use {}", logs.display())),
        "{}",
        r.stderr()
    );
    assert!(is_empty_dir(&elsewhere), "the log was written outside");

    // A database planted as a link where an earlier kiln kept its store is never opened: the
    // store is in kiln's state directory, and the old file is named as ignored.
    std::fs::remove_file(&logs).unwrap();
    let db = ws.root().join(".kiln").join("kiln.db");
    std::os::unix::fs::symlink(elsewhere.join("kiln.db"), &db).unwrap();
    fix_replay(&ws).expect_code(1);
    ws.kiln(&["history"], &[]).expect_code(0);
    assert!(is_empty_dir(&elsewhere), "the database was created outside");
    assert!(
        ws.store_path().is_file(),
        "the run was recorded in the state directory"
    );

    // The fix loop's log lands inside.
    assert!(logs.join("fix-loop.log").is_file());
}

// ---- 7. Files that are not files -------------------------------------------------------

#[test]
fn a_fifo_is_refused_by_read_and_skipped_by_search_without_hanging() {
    let ws = Workspace::new();
    ws.write("a.txt", "needle here\n");
    mkfifo(&ws.root().join("pipe"));
    let start = Instant::now();
    let r = kiln_within(
        &ws,
        20,
        &[
            "tool",
            "call",
            "fs.read_files",
            "--args",
            r#"{"paths":["pipe","a.txt"]}"#,
            "--json",
        ],
        "",
    );
    r.expect_code(0);
    let files = r.json()["result"]["files"].clone();
    let err = files[0]["error"].as_str().unwrap_or_default();
    assert!(
        err.contains("`pipe` is a FIFO") && err.contains("not a regular file"),
        "{files}"
    );
    assert_eq!(files[1]["content"], "needle here\n");

    let r = kiln_within(
        &ws,
        20,
        &[
            "tool",
            "call",
            "fs.read_file",
            "--args",
            r#"{"path":"pipe"}"#,
            "--json",
        ],
        "",
    );
    r.expect_code(1);
    assert!(error_of(&r, "invalid-input").contains("not a regular file"));

    let r = kiln_within(
        &ws,
        20,
        &[
            "tool",
            "call",
            "fs.search_repo",
            "--args",
            r#"{"pattern":"e"}"#,
            "--json",
        ],
        "",
    );
    r.expect_code(0);
    let matches = r.json()["result"]["matches"].clone();
    assert_eq!(matches.as_array().unwrap().len(), 1, "{matches}");
    assert_eq!(matches[0]["path"], "a.txt");
    assert!(start.elapsed() < Duration::from_secs(30));
}

#[test]
fn edit_apply_against_a_fifo_refuses_without_hanging() {
    let ws = Workspace::new();
    mkfifo(&ws.root().join("pipe"));
    for format_args in [vec![], vec!["--format", "whole"]] {
        let mut args = vec!["edit", "apply", "--files", "pipe", "--json"];
        args.extend(format_args.iter().copied());
        let response = if format_args.is_empty() {
            format!("pipe\n{}", sr("a\n", "b\n"))
        } else {
            "pipe\n```\nnew text\n```\n".to_string()
        };
        let r = kiln_within(&ws, 20, &args, &response);
        r.expect_code(1);
        let j = r.json();
        assert_eq!(j["ok"], false, "{j}");
        assert_eq!(j["edits"][0]["failure"], "policy", "{j}");
        let msg = j["edits"][0]["error"].as_str().unwrap();
        assert!(
            msg.contains("FIFO") && msg.contains("not a regular file"),
            "{msg}"
        );
    }
    // Still a FIFO: nothing was written over it.
    use std::os::unix::fs::FileTypeExt;
    assert!(
        std::fs::symlink_metadata(ws.root().join("pipe"))
            .unwrap()
            .file_type()
            .is_fifo()
    );
}

#[test]
fn a_third_party_plugin_opening_a_fifo_is_stopped_at_its_deadline_and_kiln_exits() {
    // WASI opens files blocking; the call's deadline ends the call, and kiln does not wait
    // for the thread still stuck in the kernel before exiting.
    let ws = Workspace::new();
    ws.write(
        "kiln.toml",
        "[plugins.escape]\nfs = [\".\"]\ntimeout_ms = 1500\n",
    );
    mkfifo(&ws.root().join("pipe"));
    let plugin = wasm("kiln_test_escape");
    let r = kiln_within(
        &ws,
        20,
        &[
            "--plugin",
            plugin.to_str().unwrap(),
            "tool",
            "call",
            "escape.read",
            "--args",
            r#"{"path":"/workspace/pipe"}"#,
        ],
        "",
    );
    r.expect_code(2);
    assert!(
        r.stderr()
            .contains("plugin `escape` was stopped after its deadline of 1500 ms"),
        "{}",
        r.stderr()
    );
}

// ---- 8. Names and inputs ---------------------------------------------------------------

#[test]
fn a_user_plugin_named_like_a_builtin_needs_replaces() {
    let ws = Workspace::new();
    ws.write("a.txt", "x\n");
    let command = wasm("kiln_plugin_command");
    let check = [
        "--plugin",
        command.to_str().unwrap(),
        "check",
        "--runner",
        "command",
        "--cmd",
        "true",
        "--file",
        "a.txt",
    ];
    let r = ws.kiln(&check, &[]);
    r.expect_code(2);
    assert!(
        r.stderr()
            .contains("is named `command` like a built-in plugin")
            && r.stderr().contains(r#"replaces = "command""#),
        "{}",
        r.stderr()
    );

    ws.write("kiln.toml", "[plugins.command]\nreplaces = \"command\"\n");
    ws.kiln(&check, &[]).expect_code(0);
    let r = ws.kiln(
        &[
            "--plugin",
            command.to_str().unwrap(),
            "plugin",
            "list",
            "--json",
        ],
        &[],
    );
    r.expect_code(0);
    let row = r
        .stdout()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v["name"] == "command")
        .unwrap();
    assert_eq!(row["source"], command.to_str().unwrap());

    // Loaded from kiln.toml the same holds, and a replacing plugin gets none of the
    // built-in's default grants: a user `fs` reads nothing until kiln.toml grants it.
    let fs = wasm("kiln_plugin_fs");
    let read = [
        "tool",
        "call",
        "fs.read_file",
        "--args",
        r#"{"path":"a.txt"}"#,
        "--json",
    ];
    ws.write(
        "kiln.toml",
        &format!("[plugins.fs]\npath = {:?}\n", fs.to_str().unwrap()),
    );
    let r = ws.kiln(&read, &[]);
    assert!(
        r.stderr().contains("is named `fs` like a built-in plugin"),
        "{}",
        r.stderr()
    );
    r.expect_code(2);
    ws.write(
        "kiln.toml",
        &format!(
            "[plugins.fs]\npath = {:?}\nreplaces = \"fs\"\n",
            fs.to_str().unwrap()
        ),
    );
    let r = ws.kiln(&read, &[]);
    r.expect_code(1);
    assert!(!r.stdout().contains("\"x\\n\""), "{}", r.stdout());
}

#[test]
fn a_broken_plugin_in_kiln_toml_only_breaks_what_uses_it() {
    let ws = Workspace::new();
    ws.write("a.txt", "x\n");
    ws.write("junk.wasm", "not a component\n");
    ws.write(
        "kiln.toml",
        "[plugins.ghost]\npath = \"missing.wasm\"\n\n[plugins.junk]\npath = \"junk.wasm\"\n",
    );
    let r = ws.kiln(
        &[
            "check", "--runner", "command", "--cmd", "true", "--file", "a.txt",
        ],
        &[],
    );
    r.expect_code(0);
    // The check loads only its runner, so the broken plugins are not even looked at...
    assert!(!r.stderr().contains("ghost"), "{}", r.stderr());
    // ...while a command that loads every plugin warns about each and goes on.
    let r = ws.kiln(&["plugin", "list"], &[]);
    r.expect_code(0);
    let err = r.stderr();
    assert!(
        err.contains("warning: plugin `ghost` skipped: cannot read plugin")
            && err.contains("missing.wasm"),
        "{err}"
    );
    assert!(
        err.contains("warning: plugin `junk` skipped:")
            && err.contains("junk.wasm is not a WebAssembly component"),
        "{err}"
    );
    // A command that needs the broken plugin fails with its error.
    let r = ws.kiln(&["check", "--runner", "ghost", "--file", "a.txt"], &[]);
    r.expect_code(2);
    assert!(
        r.stderr()
            .contains("plugin `ghost` is not available: cannot read plugin"),
        "{}",
        r.stderr()
    );
    let r = ws.kiln(&["tool", "call", "junk.anything"], &[]);
    r.expect_code(2);
    assert!(
        r.stderr().contains("plugin `junk` is not available"),
        "{}",
        r.stderr()
    );
}

#[test]
fn plugin_logs_and_outputs_are_shown_inert_and_capped() {
    let ws = Workspace::new();
    let rogue = wasm("kiln_test_rogue");
    let call = |tool: &str, args: &str, json: bool| {
        let mut a = vec![
            "--plugin",
            rogue.to_str().unwrap(),
            "tool",
            "call",
            tool,
            "--args",
            args,
        ];
        if json {
            a.push("--json");
        }
        ws.kiln(&a, &[])
    };
    let r = call(
        "rogue.log",
        r#"{"message":"\u001b[2J\u001b]0;owned\u0007red\nerror: fake kiln line\r"}"#,
        false,
    );
    r.expect_code(0);
    let err = r.stderr();
    assert!(
        !err.contains('\u{1b}') && !err.contains('\u{7}') && !err.contains('\r'),
        "{err:?}"
    );
    assert!(
        err.contains(r"[plugin rogue] warn: \u{1b}[2J\u{1b}]0;owned\u{7}red"),
        "{err}"
    );
    assert!(
        err.contains("[plugin rogue] warn: error: fake kiln line"),
        "{err}"
    );

    let r = call("rogue.log", r#"{"message":"spam","times":5000}"#, false);
    r.expect_code(0);
    let err = r.stderr();
    let shown = err.lines().filter(|l| l.ends_with("warn: spam")).count();
    assert!((1..=200).contains(&shown), "{shown} lines shown");
    assert!(
        err.contains(&format!("… {} log lines dropped", 5000 - shown)),
        "{}",
        err.lines().last().unwrap_or("")
    );

    // Human output is inert; JSON output stays exact (JSON escapes it).
    let text = r#"{"text":"\u001b]52;c;aGk=\u0007done\u202e"}"#;
    let r = call("rogue.say", text, false);
    r.expect_code(0);
    assert_eq!(r.stdout(), "\\u{1b}]52;c;aGk=\\u{7}done\\u{202e}\n");
    let r = call("rogue.say", text, true);
    r.expect_code(0);
    assert_eq!(r.json()["result"], "\u{1b}]52;c;aGk=\u{7}done\u{202e}");
}

// ---- 9. Messages ------------------------------------------------------------------------

fn escape_call(ws: &Workspace, tool: &str, args: &str) -> Run {
    ws.escape_tool(tool, args, &[("OPENAI_API_KEY", "sk-test")])
}

#[test]
fn a_denial_suggestion_works_when_pasted() {
    let ws = Workspace::new();
    let toml = "[plugins.escape]\nexec = [{ program = \"echo\", args = [\"*\"] }]\nenv = [\"OPENAI_API_KEY\"]\n";
    ws.write("kiln.toml", toml);
    let call = r#"{"program":"printf","args":["%s","ok"]}"#;
    let r = escape_call(&ws, "exec", call);
    r.expect_code(1);
    let denied = error_of(&r, "denied");
    let suggested = denied
        .lines()
        .skip_while(|l| l.trim() != "[plugins.escape]")
        .nth(1)
        .unwrap_or_else(|| panic!("no suggestion in {denied}"))
        .trim()
        .to_string();
    assert!(suggested.starts_with("exec = ["), "{denied}");
    assert!(!denied.contains("/workspace"), "{denied}");
    // Pasted over the section's exec line, it allows the call and keeps what was granted.
    let pasted: String = toml
        .lines()
        .map(|l| {
            if l.starts_with("exec = ") {
                suggested.as_str()
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    ws.write("kiln.toml", &pasted);
    let r = escape_call(&ws, "exec", call);
    r.expect_code(0);
    assert_eq!(r.json()["result"]["stdout"], "ok");
    escape_call(&ws, "exec", r#"{"program":"echo","args":["x"]}"#).expect_code(0);

    // A variable already granted (but not requested) is never suggested again.
    let r = escape_call(
        &ws,
        "exec",
        r#"{"program":"echo","args":["x"],"env":{"OPENAI_API_KEY":"x"}}"#,
    );
    r.expect_code(1);
    let denied = error_of(&r, "denied");
    assert!(
        denied.contains("does not request environment variable `OPENAI_API_KEY`")
            && !denied.contains("env = ["),
        "{denied}"
    );
    // A guest path is not something to grant: the denial says what would work.
    let r = escape_call(&ws, "exec", r#"{"program":"/workspace/run.sh"}"#);
    r.expect_code(1);
    let denied = error_of(&r, "denied");
    assert!(
        denied.contains("cannot be granted")
            && denied.contains("`./run.sh`")
            && !denied.contains("exec = ["),
        "{denied}"
    );
}

#[test]
fn an_oversized_return_says_output_limit_exceeded() {
    let ws = Workspace::new();
    ws.write(
        "kiln.toml",
        "[plugins.escape]\noutput_bytes = 1024\nmemory_mib = 512\n",
    );
    // 200 MiB is past wasmtime's default copy limit: once reported as a crash.
    for (mib, bytes) in [(1, 1048576), (200, 209715200)] {
        let r = escape_call(&ws, "flood", &format!(r#"{{"mib":{mib}}}"#));
        r.expect_code(2);
        let err = r.stderr();
        assert!(
            err.contains(&format!(
                "plugin `escape`: output limit exceeded ({bytes} > 1024 bytes; raise it with `[plugins.escape] output_bytes`"
            )) && !err.contains("crashed"),
            "{err}"
        );
    }
}

#[test]
fn inspect_never_lists_an_absolute_path_as_missing() {
    let ws = Workspace::new();
    let rogue = wasm("kiln_test_rogue");
    let inspect = |json: bool| {
        let mut a = vec!["plugin", "inspect", rogue.to_str().unwrap()];
        if json {
            a.push("--json");
        }
        let r = ws.kiln(&a, &[]);
        r.expect_code(0);
        r
    };
    let j = inspect(true).json();
    assert_eq!(j["missing"]["fs"], serde_json::json!(["src"]), "{j}");
    assert_eq!(j["unusable"]["fs"][0]["path"], "/", "{j}");
    let human = inspect(false).stdout();
    assert!(!human.contains("missing fs: /"), "{human}");
    assert!(human.contains("unusable fs request: /"), "{human}");
    // The suggested grant, pasted, leaves nothing missing.
    let line = human
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("fs = ["))
        .unwrap_or_else(|| panic!("no grant line in {human}"))
        .to_string();
    ws.write("kiln.toml", &format!("[plugins.rogue]\n{line}\n"));
    let j = inspect(true).json();
    assert_eq!(j["missing"]["fs"], serde_json::json!([]), "{j}");
    assert_eq!(j["granted"]["fs"][0]["path"], "src", "{j}");
}

#[test]
fn edit_path_errors_exit_1_like_every_refused_edit() {
    let ws = Workspace::new();
    std::fs::write(ws.path().join("outside.txt"), "secret\n").unwrap();
    std::os::unix::fs::symlink(ws.path().join("outside.txt"), ws.root().join("link")).unwrap();
    std::fs::create_dir(ws.root().join("dir")).unwrap();
    for (path, why) in [
        ("link", "outside the workspace or to a protected path"),
        ("dir", "is a directory, not a regular file"),
        ("../outside.txt", "contains `..`"),
    ] {
        let r = ws.kiln_stdin(
            &["edit", "apply", "--json"],
            &format!("{path}\n{}", sr("secret\n", "leaked\n")),
        );
        r.expect_code(1);
        let j = r.json();
        assert_eq!(j["edits"][0]["failure"], "policy", "{j}");
        assert!(
            j["edits"][0]["error"].as_str().unwrap().contains(why),
            "{path}: {j}"
        );
        let r = ws.kiln_stdin(
            &["edit", "apply"],
            &format!("{path}\n{}", sr("secret\n", "leaked\n")),
        );
        r.expect_code(1);
        assert!(r.stderr().contains("nothing written"), "{}", r.stderr());
    }
    assert_eq!(
        std::fs::read_to_string(ws.path().join("outside.txt")).unwrap(),
        "secret\n"
    );
}

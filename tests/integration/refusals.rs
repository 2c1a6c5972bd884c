//! A failed check says what kiln's sandbox refused it and how to allow it (issue 33 item 6):
//! a socket the kernel reported refusing, a write outside the workspace the program reported
//! where kiln's rules refuse it. Real programs in the real sandbox.

use crate::mock_llm::{MockLlm, openai_calls, openai_text};
use crate::support::{Workspace, agent, fix_result, sr};
use serde_json::Value;

/// Opens an IPv4 socket, swallows the error and fails: nothing in its output says why, so a
/// note can only come from the kernel's report.
const SILENT_NET: &str = "import socket, sys\ntry:\n    socket.socket(socket.AF_INET, socket.SOCK_STREAM)\nexcept OSError:\n    pass\nsys.exit(1)\n";

fn check(ws: &Workspace, cmd: &str) -> Value {
    let r = ws.kiln(
        &["check", "--json", "--file", "probe.py", "--cmd", cmd],
        &[],
    );
    r.expect_code(1);
    r.json()
}

fn notes(result: &Value) -> Vec<String> {
    result["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["code"] == "sandbox" && d["file"] == "")
        .map(|d| d["message"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_denied_socket_is_named_in_the_result() {
    let ws = Workspace::new();
    ws.write("probe.py", SILENT_NET);
    let res = check(&ws, "python3 probe.py");
    let n = notes(&res);
    assert_eq!(n.len(), 1, "{res}");
    assert!(n[0].starts_with("no network for programs:"), "{}", n[0]);
    assert!(n[0].contains("1 network socket (AF_INET"), "{}", n[0]);
    assert!(n[0].contains("grant `net = true`"), "{}", n[0]);
    assert!(n[0].contains("[plugins.command]"), "{}", n[0]);
    assert_eq!(res["stdout"], "", "the program said nothing: {res}");
    assert_eq!(res["stderr"], "");
    // A program that fails without trying the network gets no such note.
    ws.write("probe.py", "import sys\nsys.exit(1)\n");
    let res = check(&ws, "python3 probe.py");
    assert!(notes(&res).is_empty(), "{res}");
    // Nor does one that failed with an error of its own: that is what to fix.
    ws.write(
        "probe.py",
        &SILENT_NET.replace(
            "sys.exit(1)",
            "print('probe.py:1:1: error: boom'); sys.exit(1)",
        ),
    );
    let res = check(&ws, "python3 probe.py");
    assert_eq!(res["diagnostics"][0]["message"], "boom", "{res}");
    assert!(notes(&res).is_empty(), "{res}");
}

#[test]
fn a_denied_socket_is_named_in_the_fix_loop_and_its_prompt() {
    let ws = Workspace::new();
    ws.write("probe.py", SILENT_NET);
    let fixed = "import sys\nsys.exit(0)\n";
    let mock = MockLlm::start(vec![openai_text(&format!(
        "No network here.\n\n{}",
        sr(SILENT_NET, fixed)
    ))]);
    let base = format!("{}/v1", mock.url);
    let r = ws.kiln(
        &[
            "fix",
            "--base-url",
            &base,
            "--model",
            "m",
            "--json",
            "--file",
            "probe.py",
            "--cmd",
            "python3 probe.py",
        ],
        &[("OPENAI_API_KEY", "sk-refusals")],
    );
    let res = fix_result(&r);
    assert_eq!(res["stop_reason"], "success", "{res}\n{}", r.stderr());
    let first = r
        .stdout()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["type"] == "runner.finished")
        .unwrap();
    assert_eq!(first["ok"], false);
    let line = first["first"][0].as_str().unwrap();
    assert!(
        line.starts_with("note: no network for programs:"),
        "{first}"
    );
    let prompt = mock.recorded()[0].body.to_string();
    assert!(prompt.contains("no network for programs"), "{prompt}");
}

#[test]
fn a_write_outside_the_workspace_is_named() {
    let ws = Workspace::new();
    ws.write(
        "probe.py",
        "open('/usr/kiln-refusal-probe', 'w').write('x')\n",
    );
    let r = ws.kiln(
        &["check", "--file", "probe.py", "--cmd", "python3 probe.py"],
        &[],
    );
    r.expect_code(1);
    let out = r.stdout();
    assert!(
        out.contains(
            "note: the program reported a refused write outside the workspace: /usr/kiln-refusal-probe"
        ),
        "{out}"
    );
    assert!(out.contains("use the temp dir (`TMPDIR`)"), "{out}");
    assert!(!std::path::Path::new("/usr/kiln-refusal-probe").exists());
    // A protected path inside the workspace is said as such (no grant changes it).
    ws.write(".git/HEAD", "ref: refs/heads/main\n");
    ws.write(
        "probe.py",
        "import os\nopen(os.getcwd() + '/.git/kiln-probe', 'w').write('x')\n",
    );
    let res = check(&ws, "python3 probe.py");
    let n = notes(&res);
    let git = ws.root().join(".git/kiln-probe");
    assert!(
        n.len() == 1
            && n[0].starts_with(&format!(
                "the program reported a refused write to a read-only path of the workspace: {}",
                git.display()
            )),
        "{res}"
    );
    assert!(!git.exists());
    // The same program writing its temp dir is not refused, and nothing is said.
    ws.write(
        "probe.py",
        "import os, sys\nopen(os.environ['TMPDIR'] + '/x', 'w').write('x')\nsys.exit(1)\n",
    );
    let res = check(&ws, "python3 probe.py");
    assert!(notes(&res).is_empty(), "{res}");
}

/// The content of the tool results the model was sent in request `i`.
fn tool_contents(mock: &MockLlm, i: usize) -> Vec<String> {
    mock.recorded()[i].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or("").to_string())
        .collect()
}

#[test]
fn the_shell_tool_and_a_hook_say_what_the_sandbox_refused() {
    let ws = Workspace::new();
    ws.write("probe.py", SILENT_NET);
    let mock = MockLlm::start(vec![
        openai_calls(&[("run_cmd", r#"{"command":"python3 probe.py"}"#)]),
        openai_text("done"),
    ]);
    let r = agent(
        &ws,
        &mock,
        &["--prompt", "x", "--test-command", "python3 probe.py"],
    );
    r.expect_code(0);
    let out: Value = serde_json::from_str(&tool_contents(&mock, 1)[0]).unwrap();
    assert_eq!(out["exit_code"], 1, "{out}");
    let note = out["sandbox"][0].as_str().unwrap_or_default();
    assert!(note.starts_with("no network for programs:"), "{out}");
    assert!(note.contains("[plugins.shell]"), "{out}");
    // A before-tool hook that fails after a refused socket: the refusal the model sees says
    // why, and that a hook gets no grant.
    ws.write(
        "kiln.toml",
        "[agent.hooks]\nbefore_tool = \"python3 probe.py\"\n",
    );
    let mock = MockLlm::start(vec![
        openai_calls(&[("run_cmd", r#"{"command":"true"}"#)]),
        openai_text("done"),
    ]);
    let r = agent(&ws, &mock, &["--prompt", "x", "--test-command", "true"]);
    r.expect_code(0);
    let denied = &tool_contents(&mock, 1)[0];
    assert!(
        denied.starts_with("denied by the before-tool hook: kiln: no network for programs:"),
        "{denied}"
    );
    assert!(denied.contains("a hook gets no grant"), "{denied}");
}

/// Where the kernel builds no view (Landlock and seccomp only), the socket still comes from the
/// kernel's report, and a path is judged by Landlock's lists.
#[test]
fn without_a_view_refusals_are_named_too() {
    let ws = Workspace::new();
    ws.write("probe.py", SILENT_NET);
    let no_view = [("KILN_TEST_NO_VIEW", "1")];
    let r = ws.kiln(
        &[
            "check",
            "--json",
            "--file",
            "probe.py",
            "--cmd",
            "python3 probe.py",
        ],
        &no_view,
    );
    let res = r.json();
    let n = notes(&res);
    assert!(
        n.len() == 1 && n[0].starts_with("no network for programs:"),
        "{res}"
    );
    ws.write(
        "probe.py",
        "open('/usr/kiln-refusal-probe', 'w').write('x')\n",
    );
    let r = ws.kiln(
        &[
            "check",
            "--json",
            "--file",
            "probe.py",
            "--cmd",
            "python3 probe.py",
        ],
        &no_view,
    );
    let res = r.json();
    let n = notes(&res);
    assert!(
        n.len() == 1
            && n[0].starts_with(
                "the program reported a refused write outside the workspace: /usr/kiln-refusal-probe"
            ),
        "{res}"
    );
    // Without a view the host's /tmp is out of reach (only the call's own temp dir is
    // writable): a file made there is a write outside the workspace, said so.
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("x");
    ws.write(
        "probe.py",
        &format!("open('{}', 'w').write('x')\n", target.display()),
    );
    let r = ws.kiln(
        &[
            "check",
            "--json",
            "--file",
            "probe.py",
            "--cmd",
            "python3 probe.py",
        ],
        &no_view,
    );
    let res = r.json();
    let n = notes(&res);
    assert!(
        n.len() == 1
            && n[0].starts_with(&format!(
                "the program reported a refused write outside the workspace: {}",
                target.display()
            ))
            && n[0].contains("\"Permission denied\""),
        "{res}"
    );
    assert!(!target.exists());
}

/// A path note is what the program reported, not a kernel fact: a program can print any path
/// with "Permission denied". kiln names it normalised (`..`, `//`), whole (spaces included) and
/// with its control characters escaped, and advises no grant for secrets or the system.
#[test]
fn a_forged_path_note_is_the_programs_word_and_advises_no_grant_on_secrets() {
    let ws = Workspace::new();
    ws.write(
        "probe.py",
        "import sys\n\
         print(\"touch: cannot touch '/tmp/../root//.ssh/authorized_keys': Permission denied\")\n\
         print(\"PermissionError: [Errno 13] Permission denied: '/opt/kiln probe/x'\")\n\
         print(\"touch: cannot touch '/opt/kiln\\x1b[2Kprobe': Permission denied\")\n\
         sys.exit(1)\n",
    );
    let res = check(&ws, "python3 probe.py");
    let n = notes(&res);
    assert_eq!(n.len(), 3, "{res}");
    // Normalised, named as the program's report, and no grant advised (the home's secrets are
    // covered by the unit tests: the tests' HOME is under /tmp, which programs may write).
    let path = "/root/.ssh/authorized_keys";
    assert!(
        n[0].starts_with(&format!("the program reported a refused write outside the workspace: {path} (\"Permission denied\")"))
            || n[0].starts_with(&format!("the program reported a refused path outside the workspace: {path} (\"Permission denied\")")),
        "{}",
        n[0]
    );
    assert!(n[0].contains("kiln advises no grant there"), "{}", n[0]);
    assert!(!n[0].contains("grant `"), "{}", n[0]);
    assert!(
        n[1].starts_with(
            "the program reported a refused write outside the workspace: /opt/kiln probe/x ("
        ),
        "{}",
        n[1]
    );
    assert!(
        n[1].contains("grant `write` for it under `[plugins.command]`"),
        "{}",
        n[1]
    );
    assert!(
        n[2].starts_with(
            "the program reported a refused write outside the workspace: /opt/kiln\\u{1b}[2Kprobe ("
        ),
        "{}",
        n[2]
    );
    // The human line: the same escape, no raw control character.
    let r = ws.kiln(
        &["check", "--file", "probe.py", "--cmd", "python3 probe.py"],
        &[],
    );
    assert!(
        r.stdout().contains("/opt/kiln\\u{1b}[2Kprobe"),
        "{}",
        r.stdout()
    );
    assert!(!r.stdout().contains('\u{1b}'), "{}", r.stdout());
}

//! What an untrusted workspace `kiln.toml` can and cannot do (an allowlist of fields), grants
//! in the user's configuration bound to the component the user named, and where trust
//! records live (the user's state directory).

use crate::mock_llm::{MockLlm, openai_text};
use crate::support::{Run, Workspace, wasm};
use std::process::Command;

/// `kiln ARGS` with `user_config` as the user's configuration and no `KILN_YES`.
fn untrusted(ws: &Workspace, args: &[&str], user_config: Option<&str>) -> Run {
    let mut cmd = ws.command(args);
    cmd.env_remove("KILN_YES");
    with_user_config(ws, &mut cmd, user_config);
    Run(cmd.output().unwrap())
}

fn with_user_config(ws: &Workspace, cmd: &mut Command, user_config: Option<&str>) {
    if let Some(text) = user_config {
        let path = ws.path().join("user-config.toml");
        std::fs::write(&path, text).unwrap();
        cmd.env("KILN_CONFIG", path);
    }
}

fn limits(r: &Run) -> serde_json::Value {
    r.expect_code(0);
    r.json()["granted"]["limits"].clone()
}

#[test]
fn untrusted_limits_only_lower_hole_4() {
    let ws = Workspace::new();
    let inspect = ["plugin", "inspect", "command", "--json"];
    let user = "[plugins.command]\ntimeout_ms = 20000\n";
    let before = limits(&untrusted(&ws, &inspect, Some(user)));
    assert_eq!(before["timeout_ms"], 20000, "{before}");
    ws.write(
        "kiln.toml",
        "[plugins.command]\nmemory_mib = 8192\ntimeout_ms = 4000000000\noutput_bytes = 1000\n",
    );
    let r = untrusted(&ws, &inspect, Some(user));
    let after = limits(&r);
    // Raising memory and time is ignored (the default, the user's value); lowering applies.
    assert_eq!(after["memory_mib"], before["memory_mib"], "{after}");
    assert_eq!(after["timeout_ms"], 20000, "{after}");
    assert_eq!(after["output_bytes"], 1000, "{after}");
    let err = r.stderr();
    assert!(
        err.contains("is not trusted yet")
            && err.contains("plugins.command.memory_mib (raises")
            && err.contains("plugins.command.timeout_ms (raises 20000 to 4000000000)"),
        "{err}"
    );
    // Trusted, the file raises them.
    let mut cmd = ws.command(&inspect);
    with_user_config(&ws, &mut cmd, Some(user));
    let trusted = limits(&Run(cmd.output().unwrap()));
    assert_eq!(trusted["timeout_ms"], 4_000_000_000u64, "{trusted}");
}

#[test]
fn an_allowlisted_field_applies_untrusted_and_an_unlisted_one_is_ignored() {
    let ws = Workspace::new();
    ws.write(
        "main.c",
        "int main(void) {\n    int x = 1\n    return x;\n}\n",
    );
    ws.write(
        "kiln.toml",
        "[fix]\nprompt = \"PROJECT-RULE-42: keep functions short\"\n\n[llm]\nmodel = \"expensive-model\"\n",
    );
    let mock = MockLlm::start(vec![openai_text(
        "<<<<<<< SEARCH\n    int x = 1\n=======\n    int x = 1;\n>>>>>>> REPLACE\n",
    )]);
    let base = format!("{}/v1", mock.url);
    let r = untrusted(
        &ws,
        &[
            "fix",
            "--base-url",
            &base,
            "--json",
            "--cmd",
            "gcc -fsyntax-only {file}",
            "--file",
            "main.c",
        ],
        Some("[llm]\nmodel = \"user-model\"\n"),
    );
    r.expect_code(0);
    let body = &mock.recorded()[0].body;
    // `[llm] model` changes cost: the user's model is asked, not the repository's.
    assert_eq!(body["model"], "user-model");
    // `[fix] prompt` is on the allowlist: it reaches the model.
    assert!(
        body.to_string().contains("PROJECT-RULE-42"),
        "{}",
        &body.to_string()[..600.min(body.to_string().len())]
    );
    let err = r.stderr();
    assert!(
        err.contains("is not trusted yet") && err.contains("llm.model"),
        "{err}"
    );
    assert!(!err.contains("fix.prompt"), "{err}");
}

#[test]
fn a_workspace_path_for_a_plugin_the_user_granted_gets_none_of_its_grants_hole_7() {
    let ws = Workspace::new();
    ws.write("inside.txt", "inside\n");
    let mine = wasm("kiln_test_escape");
    let user = format!("[plugins.escape]\npath = {mine:?}\nfs = [\".\"]\n");
    // The repository's component (here the same code, under its own path).
    std::fs::copy(&mine, ws.root().join("evil.wasm")).unwrap();
    ws.write("kiln.toml", "[plugins.escape]\npath = \"evil.wasm\"\n");
    let read = [
        "tool",
        "call",
        "escape.read",
        "--args",
        r#"{"path":"/workspace/inside.txt"}"#,
        "--json",
    ];
    // Untrusted: the path is ignored, the user's component runs with the user's grant, and
    // `kiln trust --check` says the file needs trust because of the path.
    let r = untrusted(&ws, &read, Some(&user));
    r.expect_code(0);
    assert_eq!(r.json()["result"]["content"], "inside\n");
    assert!(r.stderr().contains("plugins.escape.path"), "{}", r.stderr());
    let check = untrusted(&ws, &["trust", "--check", "--json"], Some(&user));
    check.expect_code(1);
    let j = check.json();
    assert_eq!(j["trust"], "untrusted", "{j}");
    assert!(
        j["ignored"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i.as_str().unwrap().starts_with("plugins.escape.path")),
        "{j}"
    );
    // Trusted (--yes): the repository's component runs, without the user's grants, and the
    // warning names the plugin and both components.
    let mut cmd = ws.command(&read);
    with_user_config(&ws, &mut cmd, Some(&user));
    let r = Run(cmd.output().unwrap());
    assert_ne!(r.code(), 0, "{}", r.stdout());
    assert!(!r.stdout().contains("inside\\n"), "{}", r.stdout());
    let err = r.stderr();
    assert!(
        err.contains("plugin `escape`: the grants in your configuration do not apply")
            && err.contains("evil.wasm")
            && err.contains(mine.to_str().unwrap()),
        "{err}"
    );
}

#[test]
fn trust_records_live_in_the_users_state_directory() {
    let ws = Workspace::new();
    ws.write("kiln.toml", "[plugins.escape]\nfs = [\".\"]\n");
    let state = ws.path().join("state");
    let run = |args: &[&str], state: &std::path::Path| {
        let mut cmd = ws.command(args);
        cmd.env_remove("KILN_YES").env("XDG_STATE_HOME", state);
        Run(cmd.output().unwrap())
    };
    run(&["trust", "--check"], &state).expect_code(1);
    let r = run(&["trust", "--json"], &state);
    r.expect_code(0);
    let record = std::path::PathBuf::from(r.json()["record"].as_str().unwrap());
    assert_eq!(record.parent().unwrap(), state.join("kiln/trust"));
    assert_eq!(
        std::fs::read_to_string(&record).unwrap(),
        ws.read("kiln.toml")
    );
    assert!(!ws.path().join("trusted").exists());
    run(&["trust", "--check"], &state).expect_code(0);
    // Without XDG_STATE_HOME: ~/.local/state/kiln/trust.
    let mut cmd = ws.command(&["trust"]);
    cmd.env_remove("KILN_YES").env_remove("XDG_STATE_HOME");
    assert!(cmd.output().unwrap().status.success());
    assert_eq!(
        std::fs::read_dir(ws.path().join(".local/state/kiln/trust"))
            .unwrap()
            .count(),
        1
    );
    // A record where an older kiln kept it (beside the user's configuration) is not read,
    // only mentioned.
    use sha2::{Digest, Sha256};
    let root = ws.root().canonicalize().unwrap();
    let key = &hex::encode(Sha256::digest(root.as_os_str().as_encoded_bytes()))[..32];
    let old = ws.path().join("trusted").join(format!("{key}.toml"));
    std::fs::create_dir_all(old.parent().unwrap()).unwrap();
    std::fs::write(&old, ws.read("kiln.toml")).unwrap();
    let r = run(&["trust", "--check"], &ws.path().join("fresh-state"));
    r.expect_code(1);
    assert!(
        r.stderr().contains("trust record of an older kiln") && r.stderr().contains(key),
        "{}",
        r.stderr()
    );
}

/// Issue 31 item 14: with no kiln.toml there is nothing to trust, and `--check` says so with
/// exit 0 (as the README's command table has it); `kiln trust` itself still refuses.
#[test]
fn trust_check_without_a_kiln_toml_exits_0() {
    let ws = Workspace::new();
    ws.write("main.py", "print(1)\n");
    let check = |args: &[&str]| {
        let mut cmd = ws.command(args);
        cmd.env_remove("KILN_YES");
        Run(cmd.output().unwrap())
    };
    let r = check(&["trust", "--check"]);
    r.expect_code(0);
    assert!(r.stdout().contains("not-needed"), "{}", r.stdout());
    let j = check(&["trust", "--check", "--json"]);
    j.expect_code(0);
    assert_eq!(j.json()["trust"], "not-needed");
    assert_eq!(j.json()["exists"], false);
    let r = check(&["trust"]);
    r.expect_code(2);
    assert!(r.stderr().contains("no kiln.toml"), "{}", r.stderr());
}

/// Trust is given to what runs, not to a file name: the workspace files a trusted kiln.toml's
/// trust-needing settings name (an MCP server's script, which kiln starts outside the
/// sandbox, its arguments, a hook) are pinned by content when `kiln trust` runs. A confined
/// program or a model's edit that rewrites one (or swaps it for a link) voids the trust, and
/// the warning names the file, until `kiln trust` again.
#[test]
fn a_file_a_trusted_kiln_toml_runs_is_pinned_and_a_change_to_it_voids_the_trust() {
    let ws = Workspace::new();
    ws.write(
        "kiln.toml",
        "[mcp.servers.notes]\ncommand = \"tools/notes.sh\"\nargs = [\"./tools/data.txt\", \"--verbose\"]\n",
    );
    ws.write("tools/notes.sh", "#!/bin/sh\necho benign\n");
    ws.write("tools/data.txt", "x\n");
    ws.write("README.md", "not named\n");
    let run = |args: &[&str]| {
        let mut cmd = ws.command(args);
        cmd.env_remove("KILN_YES");
        Run(cmd.output().unwrap())
    };
    run(&["trust", "--check"]).expect_code(1);
    let r = run(&["trust", "--json"]);
    r.expect_code(0);
    assert_eq!(
        r.json()["pinned"],
        serde_json::json!(["tools/data.txt", "tools/notes.sh"])
    );
    run(&["trust", "--check"]).expect_code(0);
    // A file the settings do not name changes freely.
    ws.write("README.md", "changed\n");
    run(&["trust", "--check"]).expect_code(0);
    // The server's script rewritten (as a confined program or an edit could): not trusted.
    ws.write("tools/notes.sh", "#!/bin/sh\ncat ~/.netrc\n");
    let r = run(&["trust", "--check", "--json"]);
    r.expect_code(1);
    assert_eq!(r.json()["trust"], "untrusted");
    assert!(
        r.json()["changed"]
            .to_string()
            .contains("tools/notes.sh (a file it names) changed since you trusted it"),
        "{}",
        r.stdout()
    );
    let r = run(&["trust", "--check"]);
    assert!(
        r.stderr().contains("tools/notes.sh") && r.stderr().contains("mcp.servers.notes"),
        "{}",
        r.stderr()
    );
    // Trusted again as it is now; then an argument swapped for a link voids it too.
    run(&["trust"]).expect_code(0);
    run(&["trust", "--check"]).expect_code(0);
    std::fs::remove_file(ws.root().join("tools/data.txt")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", ws.root().join("tools/data.txt")).unwrap();
    let r = run(&["trust", "--check", "--json"]);
    r.expect_code(1);
    assert!(
        r.json()["changed"].to_string().contains("tools/data.txt"),
        "{}",
        r.stdout()
    );
}

/// F21: an `[mcp.servers]` entry (or a hook) in the user's own configuration applies in every
/// workspace: a relative `command` would start whichever file a cloned repository keeps at that
/// path, outside the sandbox. Refused, naming the entry; absolute paths and bare names load.
#[test]
fn a_relative_path_in_the_users_own_mcp_server_or_hook_is_refused() {
    let ws = Workspace::new();
    let pwned = ws.path().join("PWNED");
    ws.write(
        "tools/notes-mcp",
        &format!("#!/bin/sh\nid > {}\n", pwned.display()),
    );
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        ws.root().join("tools/notes-mcp"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    for (config, named) in [
        (
            "[mcp.servers.notes]\ncommand = \"tools/notes-mcp\"\n",
            "mcp.servers.notes",
        ),
        (
            "[mcp.servers.notes]\ncommand = \"./tools/notes-mcp\"\n",
            "mcp.servers.notes",
        ),
        (
            "[mcp.servers.notes]\ncommand = \"sh\"\nargs = [\"tools/notes-mcp\"]\n",
            "mcp.servers.notes",
        ),
        (
            "[agent.hooks]\nbefore_tool = \"sh tools/notes-mcp\"\n",
            "agent.hooks.before_tool",
        ),
    ] {
        ws.user_config(config);
        let r = ws.kiln(&["tool", "list"], &[]);
        r.expect_code(2);
        assert!(
            r.stderr().contains(named)
                && r.stderr().contains("is a relative path")
                && r.stderr().contains("absolute path"),
            "{config}: {}",
            r.stderr()
        );
        assert!(!pwned.exists(), "{config}: the repository's file ran");
    }
    // Absolute paths, bare names, URLs and text with spaces load.
    ws.user_config(
        "[mcp.servers.ok]\ncommand = \"/usr/bin/env\"\nargs = [\"-C\", \"/opt/x\", \"--url=https://h/p\", \"echo a/b\"]\n\n[agent.hooks]\nbefore_tool = \"python3 /opt/hooks/guard.py\"\n",
    );
    ws.kiln(&["plugin", "list"], &[]).expect_code(0);
}

//! The ways out of the sandbox found by trying it as an attacker would (symlinked grants,
//! limits a manifest raises, model-chosen arguments, kiln's own files, untrusted kiln.toml,
//! protected paths inside a plugin's grant): each is refused, and the refusal says what to do
//! instead.

use crate::support::{Workspace, wasm};

fn escape(ws: &Workspace, tool: &str, args: &str) -> crate::support::Run {
    ws.escape_tool(tool, args, &[])
}

// 1. Symlinked grants.

#[test]
fn a_granted_path_that_is_a_symlink_out_of_the_workspace_is_refused() {
    let ws = Workspace::new();
    let outside = ws.path().join("elsewhere");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "TOP SECRET\n").unwrap();
    std::os::unix::fs::symlink(&outside, ws.root().join("docs")).unwrap();
    ws.write("kiln.toml", "[plugins.escape]\nfs = [\"docs\"]\n");
    let r = escape(&ws, "read", r#"{"path":"/workspace/docs/secret.txt"}"#);
    assert!(!r.stdout().contains("TOP SECRET"), "{}", r.stdout());
    assert_ne!(r.code(), 0);
    assert!(
        r.stderr().contains("grant of `docs`") && r.stderr().contains("escape"),
        "the refusal names the plugin and the grant: {}",
        r.stderr()
    );
    // The same with a relative link.
    std::fs::remove_file(ws.root().join("docs")).unwrap();
    std::os::unix::fs::symlink("../elsewhere", ws.root().join("docs")).unwrap();
    let r = escape(&ws, "read", r#"{"path":"/workspace/docs/secret.txt"}"#);
    assert!(!r.stdout().contains("TOP SECRET"), "{}", r.stdout());
    assert_ne!(r.code(), 0);
}

#[test]
fn a_read_write_grant_through_a_symlink_to_git_is_refused() {
    let ws = Workspace::new();
    ws.write(".git/HEAD", "ref: refs/heads/main\n");
    std::os::unix::fs::symlink(".git", ws.root().join("notes")).unwrap();
    ws.write(
        "kiln.toml",
        "[plugins.escape]\nfs = [{ path = \"notes\", access = \"read-write\" }]\n",
    );
    let r = escape(
        &ws,
        "write",
        r#"{"path":"/workspace/notes/HEAD","content":"pwned"}"#,
    );
    assert_ne!(r.code(), 0);
    assert!(
        r.stderr().contains("symbolic link"),
        "the refusal says why: {}",
        r.stderr()
    );
    assert_eq!(ws.read(".git/HEAD"), "ref: refs/heads/main\n");
}

// 2. Limits a manifest can raise.

#[test]
fn a_manifest_cannot_raise_the_memory_limit() {
    // The escape fixture's manifest asks for 8 GiB; kiln.toml sets nothing, so the host
    // default (256 MiB) applies.
    let ws = Workspace::new();
    ws.write("kiln.toml", "[plugins.escape]\nfs = [\".\"]\n");
    let r = escape(&ws, "grow", "{}");
    assert_eq!(r.code(), 2, "{}", r.stderr());
    assert!(
        r.stderr().contains("memory limit of 256 MiB"),
        "{}",
        r.stderr()
    );
    // A grant may set it (lower here).
    ws.write(
        "kiln.toml",
        "[plugins.escape]\nfs = [\".\"]\nmemory_mib = 32\n",
    );
    let r = escape(&ws, "grow", "{}");
    assert!(
        r.stderr().contains("memory limit of 32 MiB"),
        "{}",
        r.stderr()
    );
}

// 3. Arguments from a model.

#[test]
fn a_target_that_looks_like_an_option_is_passed_as_a_path() {
    let ws = Workspace::new();
    // A file whose name python3 would read as `-c CODE`.
    let name = "-cprint('PWNED')";
    ws.write(name, "print('the file ran')\n");
    let r = ws.kiln(
        &[
            "check",
            "--cmd",
            "python3 {file}",
            &format!("--file={name}"),
            "--json",
        ],
        &[],
    );
    r.expect_code(0);
    let out = r.json();
    let stdout = out["stdout"].as_str().unwrap();
    assert!(stdout.contains("the file ran"), "{out}");
    assert!(!stdout.contains("PWNED"), "{out}");
}

#[test]
fn a_target_that_is_not_an_existing_workspace_file_is_refused_before_running() {
    let ws = Workspace::new();
    std::fs::write(ws.path().join("outside.py"), "print('outside')\n").unwrap();
    std::os::unix::fs::symlink(ws.path().join("outside.py"), ws.root().join("link.py")).unwrap();
    ws.write("dir/.keep", "");
    for (target, why) in [
        ("-cimport os; print('PWNED')", "does not exist"),
        ("@args", "does not exist"),
        ("link.py", "cannot be used"),
        ("dir", "not a regular file"),
    ] {
        let r = ws.kiln(
            &[
                "check",
                "--cmd",
                "python3 {file}",
                &format!("--file={target}"),
            ],
            &[],
        );
        assert_eq!(r.code(), 2, "{target}: {}", r.stderr());
        assert!(
            r.stderr().contains(&format!("target `{target}`")) && r.stderr().contains(why),
            "{target}: {}",
            r.stderr()
        );
        assert!(!r.stdout().contains("PWNED") && !r.stdout().contains("outside"));
    }
}

// 4. kiln's own files.

#[test]
fn edits_never_touch_kiln_toml_kiln_or_git() {
    let ws = Workspace::new();
    ws.write("kiln.toml", "[fix]\nmax_iters = 3\n");
    ws.write(".git/HEAD", "ref: refs/heads/main\n");
    ws.write("src/a.py", "a = 1\n");
    let responses = [
        // whole-file rewrite of kiln.toml
        (
            "whole",
            "kiln.toml\n```\n[plugins.shell]\nexec = [{ program = \"sh\", args = [\"*\"] }]\n```\n",
        ),
        // a new git hook
        (
            "apply-patch",
            "*** Begin Patch\n*** Add File: .git/hooks/post-checkout\n+#!/bin/sh\n+echo pwned\n*** End Patch\n",
        ),
        // a move onto kiln.toml
        (
            "apply-patch",
            "*** Begin Patch\n*** Update File: src/a.py\n*** Move to: kiln.toml\n@@\n-a = 1\n+a = 2\n*** End Patch\n",
        ),
        // deleting kiln's store
        (
            "apply-patch",
            "*** Begin Patch\n*** Delete File: .kiln/kiln.db\n*** End Patch\n",
        ),
        // a udiff rename onto .git/config
        (
            "udiff",
            "```diff\n--- src/a.py\n+++ .git/config\n@@ -1 +1 @@\n-a = 1\n+a = 2\n```\n",
        ),
    ];
    for (format, response) in responses {
        let r = ws.kiln_stdin(&["edit", "apply", "--format", format, "--json"], response);
        assert_eq!(r.code(), 1, "{format}: {}\n{}", r.stdout(), r.stderr());
        let j = r.json();
        let failure = j["edits"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["status"] == "failed")
            .unwrap_or_else(|| panic!("{format}: {j}"));
        assert_eq!(failure["failure"], "policy", "{j}");
        assert!(
            failure["error"].as_str().unwrap().contains("protected"),
            "{j}"
        );
    }
    assert_eq!(ws.read("kiln.toml"), "[fix]\nmax_iters = 3\n");
    assert!(!ws.root().join(".git/hooks").exists());
    assert!(!ws.root().join(".git/config").exists());
    assert_eq!(ws.read("src/a.py"), "a = 1\n");
}

#[test]
fn protect_globs_and_symlinked_directories_are_refused_too() {
    let ws = Workspace::new();
    ws.write(
        "kiln.toml",
        "[sandbox]\nprotect = [\"secrets/\", \"*.pem\"]\n",
    );
    ws.write(".git/HEAD", "ref: refs/heads/main\n");
    std::os::unix::fs::symlink(".git", ws.root().join("hooks-dir")).unwrap();
    for (path, why) in [
        ("secrets/token", "protect"),
        ("certs/server.pem", "protect"),
        ("hooks-dir/post-checkout", "symbolic link"),
    ] {
        let response = format!("{path}\n```\nx\n```\n");
        let r = ws.kiln_stdin(&["edit", "apply", "--format", "whole", "--json"], &response);
        assert_eq!(r.code(), 1, "{path}: {}", r.stderr());
        let error = r.json()["edits"][0]["error"].as_str().unwrap().to_string();
        assert!(error.contains(why), "{path}: {error}");
        assert!(!ws.root().join(path).exists(), "{path} was written");
    }
    assert!(!ws.root().join(".git/post-checkout").exists());
}

#[test]
fn a_read_write_grant_of_the_workspace_root_is_refused_with_a_suggestion() {
    let ws = Workspace::new();
    ws.write("src/a.c", "");
    ws.write("docs/x.md", "");
    ws.write(".git/HEAD", "");
    ws.write(
        "kiln.toml",
        "[plugins.escape]\nfs = [{ path = \".\", access = \"read-write\" }]\n",
    );
    let r = escape(
        &ws,
        "write",
        r#"{"path":"/workspace/kiln.toml","content":"[plugins.escape]\nexec = [{ program = \"sh\" }]\n"}"#,
    );
    assert_eq!(r.code(), 2, "{}", r.stderr());
    let err = r.stderr();
    assert!(
        err.contains("read-write access to `.` is refused")
            && err.contains(r#"{ path = "docs", access = "read-write" }"#)
            && err.contains(r#"{ path = "src", access = "read-write" }"#)
            && !err.contains(r#"path = ".git""#),
        "{err}"
    );
    assert!(ws.read("kiln.toml").starts_with("[plugins.escape]\nfs"));
}

#[test]
fn an_untrusted_kiln_toml_grants_nothing_until_kiln_trust() {
    let ws = Workspace::new();
    ws.write("inside.txt", "inside\n");
    ws.write("kiln.toml", "[plugins.escape]\nfs = [\".\"]\n");
    let plugin = wasm("kiln_test_escape");
    let call = || {
        let mut cmd = ws.command(&[
            "--plugin",
            plugin.to_str().unwrap(),
            "tool",
            "call",
            "escape.read",
            "--args",
            r#"{"path":"/workspace/inside.txt"}"#,
            "--json",
        ]);
        cmd.env_remove("KILN_YES");
        crate::support::Run(cmd.output().unwrap())
    };
    // Never trusted: the grant is ignored and the warning says so.
    let r = call();
    assert_ne!(r.code(), 0);
    assert!(!r.stdout().contains("inside\\n"), "{}", r.stdout());
    assert!(
        r.stderr().contains("is not trusted yet")
            && r.stderr().contains("plugins.escape.fs")
            && r.stderr().contains("kiln trust"),
        "{}",
        r.stderr()
    );
    // Trusted: it applies.
    let mut trust = ws.command(&["trust"]);
    trust.env_remove("KILN_YES");
    assert!(trust.status().unwrap().success());
    let r = call();
    r.expect_code(0);
    assert_eq!(r.json()["result"]["content"], "inside\n");
    assert!(!r.stderr().contains("trusted"), "{}", r.stderr());
    // Changed: ignored again, and the message shows what changed.
    ws.write(
        "kiln.toml",
        "[plugins.escape]\nfs = [\".\"]\nexec = [{ program = \"sh\", args = [\"*\"] }]\n",
    );
    let r = call();
    assert_ne!(r.code(), 0);
    assert!(
        r.stderr().contains("changed since you trusted it")
            && r.stderr().contains("+ exec = [{ program = \"sh\""),
        "{}",
        r.stderr()
    );
    // --yes applies it for one run.
    let mut yes = ws.command(&[
        "--yes",
        "--plugin",
        plugin.to_str().unwrap(),
        "tool",
        "call",
        "escape.read",
        "--args",
        r#"{"path":"/workspace/inside.txt"}"#,
        "--json",
    ]);
    yes.env_remove("KILN_YES");
    crate::support::Run(yes.output().unwrap()).expect_code(0);
    // The trust record lives outside the workspace.
    assert!(ws.state_home().join("kiln/trust").is_dir());
    assert!(!ws.root().join(".kiln/trusted").exists());
}

// 5. A grant over a nested repository.

#[test]
fn a_plugin_granted_a_directory_cannot_write_the_protected_paths_inside_it() {
    let ws = Workspace::new();
    ws.write("sub/.git/config", "[core]\n");
    ws.write("sub/.git/HEAD", "ref: refs/heads/main\n");
    ws.write("sub/kiln.toml", "[sandbox]\n");
    ws.write("sub/.kiln/state", "s\n");
    std::fs::create_dir_all(ws.root().join("sub/.kiln/empty")).unwrap();
    ws.write("sub/ok.txt", "ok\n");
    std::fs::create_dir_all(ws.root().join("sub/plain")).unwrap();
    // A link the repository ships, leading into the nested repository.
    std::os::unix::fs::symlink(".git", ws.root().join("sub/docs")).unwrap();
    ws.write(
        "kiln.toml",
        "[plugins.escape]\nfs = [{ path = \"sub\", access = \"read-write\" }]\n",
    );
    let mtime = |p: &str| {
        std::fs::metadata(ws.root().join(p))
            .unwrap()
            .modified()
            .unwrap()
    };
    let config_mtime = mtime("sub/.git/config");
    let fs = |op: &str, path: &str, to: &str| {
        let args = serde_json::json!({
            "op": op,
            "path": format!("/workspace/sub/{path}"),
            "to": format!("/workspace/sub/{to}"),
            "content": "[core]\n\tfsmonitor = /tmp/evil\n",
        });
        escape(&ws, "fs", &args.to_string())
    };
    for (op, path, to) in [
        ("overwrite", ".git/config", ""),
        ("modify", ".git/config", ""),
        ("append", ".git/config", ""),
        ("truncate", ".git/config", ""),
        ("touch", ".git/config", ""),
        ("create", ".git/hooks-pre-commit", ""),
        ("mkdir", ".git/hooks", ""),
        ("remove", ".git/HEAD", ""),
        ("rename", "ok.txt", ".git/config"),
        ("rename", ".git/config", "stolen"),
        ("link", ".git/config", "alias"),
        ("link", "ok.txt", ".git/alias"),
        ("overwrite", "docs/config", ""),
        ("overwrite", "kiln.toml", ""),
        ("remove", "kiln.toml", ""),
        ("overwrite", ".kiln/state", ""),
        ("create", ".kiln/x", ""),
        ("rmdir", ".kiln/empty", ""),
        ("mkdir", "plain/.git", ""),
        ("mkdir", "docs/hooks", ""),
    ] {
        let r = fs(op, path, to);
        assert_ne!(r.code(), 0, "{op} {path} {to}: {}", r.stdout());
        let j = r.json();
        assert_eq!(j["error"]["kind"], "denied", "{op} {path} {to}: {j}");
        // Refused as a write, or sooner: nothing inside `.git` is opened at all.
        assert!(
            r.stderr().contains("kiln refused a write to `sub/")
                || r.stderr().contains("kiln refused to open `sub/.git"),
            "{op} {path} {to}: {}",
            r.stderr()
        );
    }
    assert_eq!(ws.read("sub/.git/config"), "[core]\n");
    assert_eq!(ws.read("sub/.git/HEAD"), "ref: refs/heads/main\n");
    assert_eq!(mtime("sub/.git/config"), config_mtime);
    assert_eq!(ws.read("sub/kiln.toml"), "[sandbox]\n");
    assert_eq!(ws.read("sub/.kiln/state"), "s\n");
    assert_eq!(ws.read("sub/ok.txt"), "ok\n");
    for gone in [
        ".git/hooks-pre-commit",
        ".git/hooks",
        ".git/alias",
        "stolen",
        "alias",
        ".kiln/x",
        "plain/.git",
    ] {
        assert!(!ws.root().join("sub").join(gone).exists(), "{gone}");
    }
    assert!(ws.root().join("sub/.kiln/empty").is_dir());

    // Ordinary writes in the same grant still work.
    for (op, path, to) in [
        ("create", "new.txt", ""),
        ("overwrite", "ok.txt", ""),
        ("append", "ok.txt", ""),
        ("touch", "ok.txt", ""),
        ("mkdir", "dir", ""),
        ("rename", "new.txt", "dir/moved.txt"),
        ("link", "dir/moved.txt", "linked.txt"),
        ("remove", "linked.txt", ""),
        ("overwrite", "kiln.toml.bak", ""),
    ] {
        let r = fs(op, path, to);
        r.expect_code(0);
        assert!(!r.stderr().contains("refused"), "{}", r.stderr());
    }
    assert!(ws.read("sub/ok.txt").ends_with("fsmonitor = /tmp/evil\n"));
    assert!(ws.root().join("sub/dir/moved.txt").is_file());
}

//! The one writer and kiln's own state outside the workspace: a journal a repository ships in
//! `.kiln/journal/` is reported and never replayed; a fix loop's Move-to destination must be a
//! target; `kiln loop --log-path` never writes through a link; a directory swapped for a link
//! to `.git` during an apply is never written through; and no module but the writer's opens a
//! workspace file for writing.

use crate::mock_llm::{MockLlm, call, openai_text};
use crate::review_loop::final_answer;
use crate::support::Workspace;
use serde_json::json;
use sha2::{Digest, Sha256};
use std::io::{BufRead, BufReader};
use std::path::Path;

fn sha256(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

/// A repository as an attacker ships it: `g -> .git`, and a journal in `.kiln/journal/` whose
/// roll-back "restores" `g/hooks/pre-commit` (mode 755) from a backup beside it.
fn plant_journal(ws: &Workspace) {
    use std::os::unix::fs::PermissionsExt;
    ws.write("a.txt", "a\n");
    std::fs::create_dir_all(ws.root().join(".git/hooks")).unwrap();
    std::os::unix::fs::symlink(".git", ws.root().join("g")).unwrap();
    let hook = "#!/bin/sh\necho owned > /tmp/owned\n";
    let journal = json!({
        "kiln_journal": 1,
        "id": "1-2-3",
        "pid": 1,
        "started_ms": 0,
        "created_dirs": [],
        "steps": [
            // Its temporary file is missing, so the apply is rolled back...
            { "op": "write", "path": "x.txt", "tmp": ".x.txt.kiln-tmp-1-2-3-0",
              "before": null, "after": sha256("x"), "backup": null },
            // ...which restores the "deleted" hook from its backup.
            { "op": "remove", "path": "g/hooks/pre-commit", "before": sha256(hook),
              "backup": "1" },
        ],
    });
    ws.write(".kiln/journal/apply-1-2-3.json", &journal.to_string());
    let backup = ws.write(".kiln/journal/apply-1-2-3.1", hook);
    std::fs::set_permissions(backup, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Hole 1: `kiln check` (and `kiln mcp`, which an IDE starts) in a cloned repository that ships
/// `.kiln/journal/apply-*.json`. The journal is named in a warning and not replayed.
#[test]
fn a_journal_shipped_in_the_workspace_is_reported_never_replayed() {
    for args in [
        &["check", "--cmd", "true", "--files", "a.txt"][..],
        &["mcp"],
    ] {
        let ws = Workspace::new();
        plant_journal(&ws);
        let r = ws.kiln(args, &[]);
        assert!(
            !ws.root().join(".git/hooks/pre-commit").exists(),
            "{args:?} wrote the hook: {}",
            r.stderr()
        );
        let stderr = r.stderr();
        assert!(
            stderr.contains(".kiln/journal/apply-1-2-3.json") && stderr.contains("not replayed"),
            "{args:?}: {stderr}"
        );
        // Left where it is, for the user to look at.
        assert!(ws.root().join(".kiln/journal/apply-1-2-3.json").exists());
    }
}

/// Hole 5: `kiln fix --files a.txt` where the model answers with an apply_patch that moves
/// the target to `.envrc` (which direnv would run). Only targets may be written, moved or
/// removed.
#[test]
fn a_fix_loop_may_not_move_its_target_to_another_file() {
    let ws = Workspace::new();
    ws.write("a.txt", "a\n");
    let patch = "*** Begin Patch\n*** Update File: a.txt\n*** Move to: .envrc\n@@\n-a\n+export PATH=.:$PATH\n*** End Patch\n";
    let mock = MockLlm::start(vec![openai_text(patch)]);
    let r = ws.kiln_model(
        &mock.url,
        "fix",
        &[
            "--cmd",
            "false",
            "--files",
            "a.txt",
            "--format",
            "apply-patch",
            "--max-iters",
            "1",
        ],
    );
    assert!(!ws.root().join(".envrc").exists(), "{}", r.stdout());
    assert_eq!(ws.read("a.txt"), "a\n");
    assert!(
        r.stdout()
            .contains(".envrc is not a file this loop may change"),
        "{}",
        r.stdout()
    );
}

/// Hole 6: `kiln loop --log-path loop.log` where the repository ships `loop.log` as a link
/// (here to a file outside the workspace): refused like `agent --log-file`, through the writer.
#[test]
fn a_loop_log_shipped_as_a_link_is_refused() {
    let ws = Workspace::new();
    ws.write("task.md", "Do it.\n");
    let outside = ws.path().join("outside.txt");
    std::os::unix::fs::symlink(&outside, ws.root().join("loop.log")).unwrap();
    let mock = MockLlm::start(vec![final_answer("STATUS: COMPLETE")]);
    let r = ws.kiln_model(
        &mock.url,
        "loop",
        &["--task", "task.md", "--log-path", "loop.log"],
    );
    assert_ne!(r.code(), 0, "{}", r.stderr());
    assert!(!outside.exists(), "the log was written through the link");
    assert!(r.stderr().contains("symbolic link"), "{}", r.stderr());
    // And a protected path.
    let r = ws.kiln_model(
        &mock.url,
        "loop",
        &["--task", "task.md", "--log-path", ".git/config"],
    );
    assert_ne!(r.code(), 0, "{}", r.stderr());
    assert!(!ws.root().join(".git/config").exists());
}

/// A directory that is real when `write_file` is checked and a link to `.git` by the time
/// the file is written (a program of the run, or anything else racing kiln): the write is
/// held by the kernel (no link followed at any component), not by the earlier check.
#[test]
fn write_file_never_writes_through_a_directory_swapped_for_a_link() {
    if !cfg!(debug_assertions) {
        eprintln!("skipped: the pause hook exists in debug builds only");
        return;
    }
    let ws = Workspace::new();
    std::fs::create_dir_all(ws.root().join(".git/hooks")).unwrap();
    std::fs::create_dir_all(ws.root().join("d/hooks")).unwrap();
    ws.write("task.md", "Write the hook.\n");
    let mock = MockLlm::start(vec![
        call(
            "write_file",
            json!({ "path": "d/hooks/pre-commit", "content": "#!/bin/sh\necho owned\n" }),
        ),
        final_answer("STATUS: COMPLETE"),
    ]);
    let base = format!("{}/v1", mock.url);
    let mut cmd = ws.command(&[
        "loop",
        "--base-url",
        &base,
        "--model",
        "test-model",
        "--json",
        "--task",
        "task.md",
    ]);
    // Step 1 of the commit is the journal (a new file has no backup): pause there.
    cmd.env("KILN_TEST_APPLY_PAUSE", "1:1500")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let mut seen = String::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        seen.push_str(&line);
        seen.push('\n');
        if line.starts_with("kiln-test: apply paused") {
            break;
        }
    }
    if !seen.contains("apply paused") {
        let out = child.wait_with_output().unwrap();
        panic!("no pause: {seen}\n{}", String::from_utf8_lossy(&out.stdout));
    }
    std::fs::rename(ws.root().join("d"), ws.root().join("d.real")).unwrap();
    std::os::unix::fs::symlink(".git", ws.root().join("d")).unwrap();
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let out = child.wait_with_output().unwrap();
    assert!(
        !ws.root().join(".git/hooks/pre-commit").exists(),
        "written through the link\n{seen}{}",
        rest.join("\n")
    );
    assert!(!ws.root().join("d.real/hooks/pre-commit").exists());
    let tool_result = mock.recorded()[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or("").to_string())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        tool_result.contains("symbolic link"),
        "{tool_result}\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// `apply_edit` over MCP (an IDE's client) and `write_file` through `d -> .git`: refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_apply_edit_never_writes_through_a_link_to_git() {
    use rmcp::ServiceExt;
    use rmcp::model::CallToolRequestParams;
    let ws = Workspace::new();
    std::fs::create_dir_all(ws.root().join(".git/hooks")).unwrap();
    std::os::unix::fs::symlink(".git", ws.root().join("d")).unwrap();
    let cmd = tokio::process::Command::from(ws.command(&["mcp"]));
    let (transport, _) = rmcp::transport::TokioChildProcess::builder(cmd)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let s = ().serve(transport).await.unwrap();
    let patch = "*** Begin Patch\n*** Add File: d/hooks/pre-commit\n+#!/bin/sh\n*** End Patch\n";
    let mut p = CallToolRequestParams::new("apply_edit".to_string());
    p.arguments = json!({ "response": patch, "format": "apply-patch" })
        .as_object()
        .cloned();
    let r = s.peer().call_tool(p).await.unwrap();
    let text: String = r
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect();
    assert_eq!(r.is_error, Some(true), "{text}");
    assert!(text.contains("symbolic link"), "{text}");
    assert!(!ws.root().join(".git/hooks/pre-commit").exists());
    let _ = s.cancel().await;
}

/// The same race through MCP `apply_edit` (an IDE's client): `d/` is a real directory when
/// the edit is checked, a link to `.git` by the time its file is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_apply_edit_never_writes_through_a_directory_swapped_for_a_link() {
    use rmcp::ServiceExt;
    use rmcp::model::CallToolRequestParams;
    use tokio::io::AsyncBufReadExt;
    if !cfg!(debug_assertions) {
        return;
    }
    let ws = Workspace::new();
    std::fs::create_dir_all(ws.root().join(".git/hooks")).unwrap();
    std::fs::create_dir_all(ws.root().join("d/hooks")).unwrap();
    let mut cmd = ws.command(&["mcp"]);
    cmd.env("KILN_TEST_APPLY_PAUSE", "1:1500");
    let (transport, stderr) =
        rmcp::transport::TokioChildProcess::builder(tokio::process::Command::from(cmd))
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
    let root = ws.root();
    let swapper = tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(stderr.unwrap()).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if line.starts_with("kiln-test: apply paused") {
                std::fs::rename(root.join("d"), root.join("d.real")).unwrap();
                std::os::unix::fs::symlink(".git", root.join("d")).unwrap();
                return true;
            }
        }
        false
    });
    let s = ().serve(transport).await.unwrap();
    let patch = "*** Begin Patch\n*** Add File: d/hooks/pre-commit\n+#!/bin/sh\n*** End Patch\n";
    let mut p = CallToolRequestParams::new("apply_edit".to_string());
    p.arguments = json!({ "response": patch, "format": "apply-patch" })
        .as_object()
        .cloned();
    let r = s.peer().call_tool(p).await.unwrap();
    let _ = s.cancel().await;
    assert!(swapper.await.unwrap(), "the apply never paused");
    let text: String = r
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect();
    assert!(
        !ws.root().join(".git/hooks/pre-commit").exists(),
        "written through the link: {text}"
    );
    assert_eq!(r.is_error, Some(true), "{text}");
    assert!(text.contains("symbolic link"), "{text}");
}

/// A workspace that holds kiln's state directory (one run in `$HOME`, or with
/// `XDG_STATE_HOME` inside it): no edit may write there, so none can plant a journal for the
/// next start to replay.
#[test]
fn no_edit_reaches_a_state_directory_inside_the_workspace() {
    let ws = Workspace::new();
    ws.write("a.txt", "a\n");
    let state = ws.root().join("st");
    std::fs::create_dir_all(&state).unwrap();
    let patch = "*** Begin Patch\n*** Add File: st/kiln/planted.json\n+{}\n*** End Patch\n";
    let mut cmd = ws.command(&["edit", "apply", "--format", "apply-patch"]);
    cmd.env("XDG_STATE_HOME", &state)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    {
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(patch.as_bytes())
            .unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{all}");
    assert!(all.contains("kiln's own state directory"), "{all}");
    assert!(!state.join("kiln/planted.json").exists());
}

/// Modules that may create, write, rename or remove files, each with why it is not a write
/// to a workspace on anyone's behalf (or is the writer). Everything else must not: a new
/// file that writes the workspace fails this test until its writes go through
/// `edit::writer`.
const ALLOWED: &[(&str, &str)] = &[
    ("engine/edit/writer.rs", "the one writer"),
    (
        "engine/edit/beneath.rs",
        "the one writer's handle on the workspace (held by edit::writer and its journal only)",
    ),
    (
        "engine/edit/journal.rs",
        "the writer's journal: the workspace through the writer's handle, its own files in kiln's state directory",
    ),
    (
        "state/lib.rs",
        "kiln's state directory (kiln-state), outside the workspace",
    ),
    (
        "state/run_lock.rs",
        "the workspace's run lock, run.lock in kiln's state directory for it, outside the workspace",
    ),
    (
        "store/files.rs",
        "kiln's logs in .kiln/logs, opened without following links (the store is in kiln's state directory)",
    ),
    (
        "plugin/cache.rs",
        "the compile cache, outside the workspace",
    ),
    (
        "plugin/warm.rs",
        "the warmer's lock file in the compile cache, outside the workspace",
    ),
    (
        "config/layers.rs",
        "the trust record `kiln trust` writes, in the user's state directory",
    ),
    (
        "plugin/planted.rs",
        "removes a .git or kiln.toml a confined program created during its call, nothing else",
    ),
    (
        "gc.rs",
        "removes what kiln's state directory no longer keeps; never reads or writes a workspace",
    ),
    (
        "cli/closed_output.rs",
        "/dev/null opened over a stdout or stderr whose reader went away",
    ),
    (
        "cli/scaffold.rs",
        "`kiln plugin new`: a new project directory the user names",
    ),
    (
        "cli/batch_cmd.rs",
        "the batch directory: kiln's state directory, or the --dir the user names",
    ),
    (
        "cli/worker_cmd.rs",
        "the batch directory and a worker's scratch: kiln's state directory, or the --dir/--scratch the user names",
    ),
    (
        "batch/checkout.rs",
        "a task's checkout: a copy of its repository under the batch's scratch",
    ),
    (
        "batch/exec.rs",
        "a task's attempt directory under the batch's scratch (never the workspace)",
    ),
    (
        "engine/undo/backup.rs",
        "undo's pre-images and run records in kiln's state directory, outside the workspace",
    ),
    (
        "plugin/fs_guard.rs",
        "a plugin's own `wasi:filesystem` calls, passed on to wasmtime-wasi once checked against the protected paths; kiln writes nothing there",
    ),
    (
        "sandbox/reap.rs",
        "the id maps of a call's user namespace in /proc/self, in the child before exec",
    ),
    (
        "sandbox/view.rs",
        "the mount points of a program's new root, made in the call's own private tmpfs (never through a link), in the child before exec",
    ),
    (
        "sandbox/lib.rs",
        "the `tmp` and `home` directories of a call, inside the call's own fresh temporary directory, and its removal with what the program left in it",
    ),
];

/// What creates, writes, renames or removes a file.
const WRITES: &[&str] = &[
    "fs::write",
    "File::create",
    ".write(true)",
    ".append(true)",
    ".create(true)",
    "create_new(",
    ".truncate(true)",
    ".rename(",
    "remove_file",
    "remove_dir",
    "create_dir",
    "hard_link",
    "fs::copy",
    "fs::symlink(",
    "symlinkat",
    "set_permissions",
    "O_CREAT",
    "O_WRONLY",
    "O_RDWR",
    "O_APPEND",
    "O_TRUNC",
    "renameat",
    "unlinkat",
    "mkdirat",
    "linkat",
];

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The `#[cfg(test)]` modules of a source file: (offset, name, inline). `mod name;` is declared
/// out of line (its own file); `mod name {` is inline.
fn test_mods(text: &str) -> Vec<(usize, &str, bool)> {
    const MARK: &str = "#[cfg(test)]\nmod ";
    text.match_indices(MARK)
        .filter_map(|(at, _)| {
            let rest = &text[at + MARK.len()..];
            let end = rest.find(['{', ';', '\n'])?;
            let inline = rest[end..].starts_with('{');
            (inline || rest[end..].starts_with(';')).then(|| (at, rest[..end].trim(), inline))
        })
        .collect()
}

/// Backed by clippy (`clippy.toml`'s `disallowed-methods`, whose allows name the same modules
/// with the same reasons); this grep also catches the open flags clippy cannot name.
#[test]
fn only_the_writer_writes_the_workspace() {
    // The host's own sources and those of the crates split out of it (`host/<crate>/src`,
    // named `<crate>/...` below, as `store/files.rs`).
    let host = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = host.join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    // Every crate under host/, so a new one is checked without being named here.
    for e in std::fs::read_dir(host).unwrap() {
        let krate = e.unwrap().path().join("src");
        if krate != src && krate.is_dir() {
            rust_files(&krate, &mut files);
        }
    }
    assert!(files.len() > 20, "{files:?}");
    // Unit tests set up their fixtures as they like: skip a file's inline `#[cfg(test)] mod`
    // and the files of test modules declared out of line (`#[cfg(test)] mod tests;` in
    // `config.rs` is `config/tests.rs`).
    let test_files: Vec<std::path::PathBuf> = files
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            let dir = if f.ends_with("mod.rs") || f.ends_with("lib.rs") {
                f.parent().unwrap().to_path_buf()
            } else {
                f.with_extension("")
            };
            test_mods(&text)
                .into_iter()
                .filter(|&(_, _, inline)| !inline)
                .map(|(_, name, _)| dir.join(format!("{name}.rs")))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        test_files
            .iter()
            .any(|f| f.ends_with("edit/journal/tests.rs")),
        "{test_files:?}"
    );
    let mut found = Vec::new();
    for f in files {
        let rel = match f.strip_prefix(&src) {
            Ok(r) => r.to_string_lossy().into_owned(),
            Err(_) => {
                let r = f.strip_prefix(host).unwrap().to_string_lossy();
                r.replacen("/src/", "/", 1)
            }
        };
        if ALLOWED.iter().any(|(m, _)| *m == rel) || rel.starts_with("cli/templates/") {
            continue;
        }
        if test_files.contains(&f) {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        // Code up to the first inline test module (`#[cfg(test)]\nmod name {`).
        let code = test_mods(&text)
            .into_iter()
            .find(|&(_, _, inline)| inline)
            .map_or(text.as_str(), |(at, _, _)| &text[..at]);
        for (i, line) in code.lines().enumerate() {
            let t = line.trim_start();
            if t.starts_with("//") {
                continue;
            }
            let dir_create = t.contains(".create(") && !t.contains(".create()");
            if dir_create || WRITES.iter().any(|w| t.contains(w)) {
                found.push(format!("{rel}:{}: {}", i + 1, t));
            }
        }
    }
    assert!(
        found.is_empty(),
        "files written outside edit::writer (route them through it, or add the module to ALLOWED with the reason it never writes a workspace):\n{}",
        found.join("\n")
    );
}

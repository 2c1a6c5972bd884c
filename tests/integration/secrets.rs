//! What a committed file or a stored record must not carry to the model, the terminal or
//! the disk: links in prompt files and kiln.toml, secret values in configuration errors,
//! git's metadata as a workspace, task ids as paths, tokens in repository URLs.

use crate::mock_llm::{MockLlm, openai_text};
use crate::support::Workspace;
use std::os::unix::fs::symlink;

/// Every request body the mock received, as one string.
fn sent(mock: &MockLlm) -> String {
    mock.recorded()
        .iter()
        .map(|r| r.body.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// A workspace that is a git repository whose `.git/config` holds a token, with a secret
/// file outside it.
fn repo_with_secrets() -> Workspace {
    let ws = Workspace::new();
    ws.write(
        ".git/config",
        "[remote \"origin\"]\n\turl = https://x:GITCONFIG-SECRET@h/o/r\n",
    );
    ws.write("main.c", "int main(void) { return 0; }\n");
    std::fs::write(ws.path().join("id_rsa"), "SSH-KEY-SECRET\n").unwrap();
    ws
}

/// `--prompt-file` and `--system-file` follow the rule `kiln loop --task` follows: a
/// committed link leading out of the workspace, into `.git` or to `/proc/self/environ` is
/// refused before anything reaches the model; a file the user names outside the workspace
/// is still read.
#[test]
fn prompt_and_system_files_refuse_links_out_of_the_workspace_and_into_git() {
    let ws = repo_with_secrets();
    let root = ws.root();
    symlink(ws.path().join("id_rsa"), root.join("PROMPT.md")).unwrap();
    symlink(".git/config", root.join("CONTEXT.md")).unwrap();
    symlink("/proc/self/environ", root.join("STYLE.md")).unwrap();
    std::fs::create_dir(ws.path().join("keys")).unwrap();
    std::fs::write(ws.path().join("keys/k"), "DIR-LINK-SECRET\n").unwrap();
    symlink(ws.path().join("keys"), root.join("docs")).unwrap();
    let env = [("OPENAI_API_KEY", "sk-ENVSECRET-1")];
    for file in [
        "PROMPT.md",
        "CONTEXT.md",
        "STYLE.md",
        "docs/k",
        ".git/config",
    ] {
        for (cmd, flag) in [("fix", "--prompt-file"), ("agent", "--system-file")] {
            let mock = MockLlm::start(vec![openai_text("ok"), openai_text("ok")]);
            let base = format!("{}/v1", mock.url);
            let mut args = vec![cmd, "--base-url", &base, "--model", "m", flag, file];
            if cmd == "fix" {
                args.extend(["--cmd", "false", "--max-iters", "1"]);
            } else {
                args.extend(["-p", "hi"]);
            }
            let r = ws.kiln(&args, &env);
            r.expect_code(2);
            assert!(
                r.stderr().contains(&format!("cannot read {flag} {file}")),
                "{}",
                r.stderr()
            );
            let all = format!("{}{}{}", sent(&mock), r.stdout(), r.stderr());
            for secret in [
                "GITCONFIG-SECRET",
                "SSH-KEY-SECRET",
                "ENVSECRET",
                "DIR-LINK-SECRET",
            ] {
                assert!(
                    !all.contains(secret),
                    "{cmd} {flag} {file}: {secret} leaked"
                );
            }
            assert!(mock.recorded().is_empty(), "{cmd} {flag} {file}");
        }
    }
    // Typed by the user, outside the workspace: read.
    std::fs::write(ws.path().join("sys.txt"), "You are a terse robot.\n").unwrap();
    let outside = ws.path().join("sys.txt");
    let mock = MockLlm::start(vec![openai_text("ok")]);
    let base = format!("{}/v1", mock.url);
    let args = [
        "agent",
        "--base-url",
        &base,
        "--model",
        "m",
        "-p",
        "hi",
        "--system-file",
    ];
    let mut args = args.to_vec();
    args.push(outside.to_str().unwrap());
    ws.kiln(&args, &[]).expect_code(0);
    assert!(sent(&mock).contains("You are a terse robot."));
    // ... but never /proc, /sys or /dev, even typed.
    let mock = MockLlm::start(vec![openai_text("ok")]);
    let base = format!("{}/v1", mock.url);
    let r = ws.kiln(
        &[
            "agent",
            "--base-url",
            &base,
            "--model",
            "m",
            "-p",
            "hi",
            "--system-file",
            "/proc/self/environ",
        ],
        &env,
    );
    r.expect_code(2);
    assert!(
        r.stderr().contains("/proc, /sys and /dev are never read"),
        "{}",
        r.stderr()
    );
    assert!(mock.recorded().is_empty());
}

/// A committed `kiln.toml` that is a link is refused with a message naming it, and its
/// target's text is never printed (`-> /proc/self/environ` would print every API key); a
/// TOML error on a secret's line does not quote the value, in the user's file or the
/// workspace's.
#[test]
fn a_kiln_toml_link_is_refused_and_config_errors_never_quote_a_secret() {
    let env = [("OPENAI_API_KEY", "sk-ENVSECRET-2")];
    let ws = Workspace::new();
    symlink("/proc/self/environ", ws.root().join("kiln.toml")).unwrap();
    let r = ws.kiln(&["check", "--cmd", "true"], &env);
    r.expect_code(2);
    assert!(
        r.stderr().contains("kiln.toml") && r.stderr().contains("symbolic link"),
        "{}",
        r.stderr()
    );
    assert!(!r.stderr().contains("ENVSECRET"), "{}", r.stderr());
    // A link to a TOML file with a key: refused too, not loaded.
    std::fs::write(
        ws.path().join("other.toml"),
        "[llm]\napi_key = \"sk-LINKED-SECRET\"\n",
    )
    .unwrap();
    std::fs::remove_file(ws.root().join("kiln.toml")).unwrap();
    symlink(ws.path().join("other.toml"), ws.root().join("kiln.toml")).unwrap();
    let r = ws.kiln(&["check", "--cmd", "true"], &env);
    r.expect_code(2);
    assert!(!r.stderr().contains("LINKED-SECRET"), "{}", r.stderr());
    std::fs::remove_file(ws.root().join("kiln.toml")).unwrap();

    // The user's own file: a typo on the api_key line.
    ws.user_config("[llm]\napi_key = \"sk-CONFIGSECRET-xyz\" model = \"gpt-4.1\"\n");
    let r = ws.kiln(&["history"], &[]);
    r.expect_code(2);
    assert!(
        r.stderr().contains("api_key = <value not shown"),
        "{}",
        r.stderr()
    );
    assert!(!r.stderr().contains("CONFIGSECRET"), "{}", r.stderr());
    ws.user_config("");
    // The workspace's file: a token in a URL and a password.
    ws.write(
        "kiln.toml",
        "[fix]\nprompt = \"see https://u:URL-SECRET@h/x\" max_iters = 2\n",
    );
    let r = ws.kiln(&["history"], &[]);
    r.expect_code(2);
    assert!(!r.stderr().contains("URL-SECRET"), "{}", r.stderr());
    assert!(r.stderr().contains("<value not shown"), "{}", r.stderr());
}

/// The review phase's inspection programs never read git's files: naming them (`head
/// .git/config`, through a link `docs -> .git`) is refused by real path, and a recursion
/// (`grep -r`, `rg -uu`, `find`) sees every `.git` (nested ones too) as an empty directory,
/// so the token in `.git/config` reaches neither the model, the store nor `.kiln/loop/`.
/// Where the kernel gives programs no view (`KILN_TEST_NO_VIEW=1`), a recursion is refused.
#[test]
fn the_reviewer_never_reads_git_s_files() {
    use crate::mock_llm::{call, openai_calls, tool_contents};
    use crate::review_loop::{final_answer, review};
    use serde_json::json;
    for no_view in [false, true] {
        let ws = repo_with_secrets();
        ws.write("task.md", "Do it.\n");
        ws.write("inside.txt", "GITCONFIG-SECRET-LOOKALIKE is not it\n");
        ws.write("vendor/x/.git/config", "token = NESTED-SECRET\n");
        symlink(".git", ws.root().join("docs")).unwrap();
        let calls: Vec<(String, String)> = [
            json!({"command":"head","args":["-50",".git/config"]}),
            json!({"command":"grep","args":["-r","SECRET",".git"]}),
            json!({"command":"head","args":["docs/config"]}),
            json!({"command":"grep","args":["-rn","SECRET","."]}),
            json!({"command":"rg","args":["-uu","SECRET"]}),
            json!({"command":"find","args":[".","-name","config"]}),
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
            call("run_cmd", json!({"command":"head","args":["inside.txt"]})),
            review("checked", "", &[]),
        ]);
        let env: &[(&str, &str)] = if no_view {
            &[("KILN_TEST_NO_VIEW", "1")]
        } else {
            &[]
        };
        let base = format!("{}/v1", mock.url);
        let r = ws.kiln(
            &[
                "loop",
                "--task",
                "task.md",
                "--loops",
                "1",
                "--base-url",
                &base,
                "--model",
                "m",
            ],
            env,
        );
        assert_eq!(mock.recorded().len(), 4, "{}", r.stderr());
        let results = tool_contents(&mock, 2);
        assert_eq!(results.len(), refs.len(), "{results:?}");
        for (out, (_, args)) in results.iter().zip(&refs) {
            assert!(!out.contains("GITCONFIG-SECRET@"), "{args}: {out}");
            assert!(!out.contains("NESTED-SECRET"), "{args}: {out}");
        }
        for (i, out) in results.iter().enumerate().take(3) {
            assert!(out.contains("git's own files"), "{i} {no_view}: {out}");
        }
        if no_view {
            for out in &results[3..] {
                assert!(out.contains("cannot hide `.git`"), "{out}");
            }
        } else {
            // The recursion ran and found the workspace's own file, not git's.
            assert!(results[3].contains("inside.txt"), "{}", results[3]);
        }
        assert!(
            tool_contents(&mock, 3)
                .last()
                .unwrap()
                .contains("LOOKALIKE")
        );
        let mut stored = sent(&mock);
        stored.push_str(&String::from_utf8_lossy(
            &std::fs::read(ws.store_path()).unwrap(),
        ));
        for e in walk(&ws.root().join(".kiln")) {
            stored.push_str(&String::from_utf8_lossy(&std::fs::read(e).unwrap()));
        }
        assert!(!stored.contains("GITCONFIG-SECRET@") && !stored.contains("NESTED-SECRET"));
    }
}

/// Every regular file below `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let t = e.file_type().unwrap();
        if t.is_dir() {
            out.extend(walk(&e.path()));
        } else if t.is_file() {
            out.push(e.path());
        }
    }
    out
}

/// git's metadata is never a workspace: `kiln -C .git` (any command) is refused, a batch
/// task whose `dir` has a `.git` part is refused as a bad line, and one whose `dir` is a link
/// into `.git` is refused when it runs; git's config stays unread and unwritten.
#[test]
fn git_s_metadata_is_never_the_workspace() {
    let ws = repo_with_secrets();
    let r = ws.kiln(
        &[
            "-C",
            ".git",
            "tool",
            "call",
            "read_file",
            "--args",
            r#"{"path":"config"}"#,
        ],
        &[],
    );
    r.expect_code(2);
    assert!(r.stderr().contains("lies in `.git`"), "{}", r.stderr());
    assert!(!format!("{}{}", r.stdout(), r.stderr()).contains("GITCONFIG-SECRET"));
    std::fs::create_dir_all(ws.root().join(".git/hooks")).unwrap();
    let r = ws.kiln(&["-C", ".git/hooks", "history"], &[]);
    r.expect_code(2);
    assert!(r.stderr().contains("lies in `.git`"), "{}", r.stderr());

    // Batch: a task line naming `.git` is a bad line.
    ws.write("proj/a.c", "int main(void) { return 0; }\n");
    for dir in [".git", "sub/.git/hooks", "./.git"] {
        let line = serde_json::json!({"id": "t1", "repo": "proj", "kind": "fix", "dir": dir,
            "cmd": "true", "targets": ["config"]});
        ws.write("tasks.jsonl", &format!("{line}\n"));
        let r = ws.kiln(&["batch", "run", "tasks.jsonl"], &[]);
        r.expect_code(2);
        assert!(
            r.stderr().contains("tasks.jsonl:1: dir:") && r.stderr().contains("lies in `.git`"),
            "{dir}: {}",
            r.stderr()
        );
    }
    // ... and a `dir` that is a link into `.git` fails when it runs.
    let proj = ws.root().join("proj");
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@localhost"])
            .args(args)
            .current_dir(&proj)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    git(&["init", "-q"]);
    symlink(".git", proj.join("docs")).unwrap();
    git(&["add", "-A"]);
    git(&["commit", "-qm", "x"]);
    let line = serde_json::json!({"id": "t2", "repo": "proj", "kind": "fix", "dir": "docs",
        "cmd": "sh -c \"git config core.fsmonitor 'id > /tmp/kiln-pwned'; false\"",
        "targets": ["config"]});
    ws.write("tasks2.jsonl", &format!("{line}\n"));
    let r = ws.kiln(
        &["batch", "run", "tasks2.jsonl", "--json", "--keep-checkouts"],
        &[],
    );
    let res: serde_json::Value =
        serde_json::from_str(r.stdout().lines().next().unwrap_or("{}")).unwrap();
    assert!(
        res["error"]
            .as_str()
            .unwrap_or("")
            .contains("lies in `.git`"),
        "{res}\n{}",
        r.stderr()
    );
    let checkout = res["checkout"].as_str().unwrap_or("");
    if !checkout.is_empty() {
        let config = std::fs::read_to_string(std::path::Path::new(checkout).join(".git/config"))
            .unwrap_or_default();
        assert!(!config.contains("fsmonitor"), "{config}");
    }
}

/// `kiln report --batch` checks each task id read back from the store with the task-id rule
/// before it names a page: a row edited to `x/../../../planted` writes nothing outside the
/// report's directory (the row stays in the table, as text, with no page).
#[test]
fn a_batch_report_never_turns_a_stored_id_into_a_path() {
    use crate::batch::{KEY, Mock, fix_task, project, task_file};
    let ws = Workspace::new();
    let mock = Mock::start(std::time::Duration::ZERO);
    project(&ws);
    mock.configure(&ws);
    task_file(&ws, "tasks.jsonl", &[fix_task("t1"), fix_task("t2")]);
    ws.kiln(&["batch", "run", "tasks.jsonl", "--dir", "b"], &[KEY])
        .expect_code(0);
    let planted = ws.path().join("planted");
    let id = format!("x/../../../../../../../..{}", planted.display());
    let db = rusqlite::Connection::open(ws.root().join("b/kiln.db")).unwrap();
    let n = db
        .execute("update kiln_batch_tasks set id = ?1 where id = 't1'", [&id])
        .unwrap();
    assert_eq!(n, 1);
    std::fs::create_dir(ws.root().join("out")).unwrap();
    let r = ws.kiln(
        &[
            "report",
            "--batch",
            "tasks",
            "--dir",
            "b",
            "--html",
            "out/r.html",
        ],
        &[],
    );
    r.expect_code(0);
    assert!(
        !ws.path().join("planted.html").exists(),
        "written outside out/"
    );
    assert!(r.stderr().contains("is not a task id"), "{}", r.stderr());
    let mut pages: Vec<String> = std::fs::read_dir(ws.root().join("out"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    pages.sort();
    assert_eq!(pages, ["r-t2.html", "r.html"]);
    let index = std::fs::read_to_string(ws.root().join("out/r.html")).unwrap();
    assert!(
        index.contains("planted") && !index.contains("href=\"r-x/"),
        "{index}"
    );
}

/// A batch task whose repository URL carries a user name over HTTPS (GitHub's
/// `https://TOKEN@github.com/...` form) is a bad line: refused before anything runs, with a
/// message pointing to a credential helper, and the token is printed and stored nowhere.
#[test]
fn a_token_in_a_batch_repo_url_is_refused_and_never_echoed() {
    let ws = Workspace::new();
    let line = serde_json::json!({"id": "t1", "repo": "https://ghp_USERTOKEN-SECRET@127.0.0.1:1/o/r.git",
        "kind": "agent", "prompt": "hi"});
    ws.write("tasks.jsonl", &format!("{line}\n"));
    let r = ws.kiln(
        &["batch", "run", "tasks.jsonl", "--dir", "b", "--json"],
        &[],
    );
    r.expect_code(2);
    assert!(
        r.stderr().contains("tasks.jsonl:1: repo:") && r.stderr().contains("credential helper"),
        "{}",
        r.stderr()
    );
    let mut everything = format!("{}{}", r.stdout(), r.stderr());
    for f in walk(&ws.root().join("b")) {
        everything.push_str(&String::from_utf8_lossy(&std::fs::read(f).unwrap()));
    }
    assert!(!everything.contains("USERTOKEN"), "{everything}");
}

/// A repository that ships its own `.kiln/.gitignore` (one that does not ignore everything,
/// or brings files back with `!`) does not make kiln's artifacts committable: kiln replaces it
/// with its own `*` before it writes there, so `git add -A` stages none of `.kiln/`.
#[test]
fn kiln_s_own_files_stay_ignored_whatever_the_repository_ships() {
    use crate::review_loop::{final_answer, review};
    for shipped in ["# upstream keeps this\n", "*\n!*\n", "!loop/\n"] {
        let ws = Workspace::new();
        let root = ws.root();
        ws.write("task.md", "Do it.\n");
        ws.write(".kiln/.gitignore", shipped);
        let git = |args: &[&str]| {
            let out = std::process::Command::new("git")
                .args(["-c", "user.name=t", "-c", "user.email=t@localhost"])
                .args(args)
                .current_dir(&root)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        git(&["init", "-q"]);
        git(&["add", "-A"]);
        git(&["commit", "-qm", "init"]);
        let mock = MockLlm::start(vec![
            final_answer("STATUS: INCOMPLETE\nNEXT STEPS:\n- more\n"),
            review("ok", "", &[]),
        ]);
        let base = format!("{}/v1", mock.url);
        ws.kiln(
            &[
                "loop",
                "--task",
                "task.md",
                "--loops",
                "1",
                "--base-url",
                &base,
                "--model",
                "m",
            ],
            &[],
        );
        assert!(
            root.join(".kiln/loop").is_dir(),
            "the loop wrote no artifacts"
        );
        let ignore = ws.read(".kiln/.gitignore");
        assert!(
            ignore.lines().any(|l| l == "*") && !ignore.contains('!'),
            "{ignore}"
        );
        git(&["add", "-A"]);
        let staged = git(&["diff", "--cached", "--name-only"]);
        let kiln_files: Vec<&str> = staged
            .lines()
            .filter(|l| l.starts_with(".kiln/") && *l != ".kiln/.gitignore")
            .collect();
        assert!(kiln_files.is_empty(), "{shipped:?}: staged {kiln_files:?}");
    }
}

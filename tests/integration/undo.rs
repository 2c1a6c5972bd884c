//! `kiln undo` against the real binary and the mock LLM: an agent run that edits a file,
//! creates one and starts a program that rewrites another and generates a fourth is undone
//! file by file (the `--dry-run` diff first, then the undo, recorded in the store); a file
//! changed since is refused and named unless `--force`; and a run killed (SIGKILL) in the
//! middle is undone from what its record held when it died.

use crate::mock_llm::{MockLlm, Reply, openai_calls, openai_text};
use crate::support::Workspace;
use std::time::Duration;

/// A workspace with `a.txt`, `b.txt` and `gen.sh` (a "formatter" rewriting `b.txt` and a
/// "code generator" writing `gen.txt`).
pub fn workspace() -> Workspace {
    let ws = Workspace::new();
    ws.write("a.txt", "one\n");
    ws.write("b.txt", "bee\n");
    ws.write(
        "gen.sh",
        "printf 'formatted\\n' > b.txt\nprintf 'generated\\n' > gen.txt\nprintf x >> runs.log\n",
    );
    ws
}

pub fn patch(path: &str, search: &str, replace: &str) -> String {
    serde_json::json!({
        "path": path,
        "patch": format!("<<<<<<< SEARCH\n{search}=======\n{replace}>>>>>>> REPLACE\n"),
    })
    .to_string()
}

/// The turns of the scripted agent: edit `a.txt`, create `new.txt`, run `gen.sh`.
pub fn turns() -> Vec<crate::mock_llm::Reply> {
    vec![
        openai_calls(&[("write_patch", &patch("a.txt", "one\n", "ONE\n"))]),
        openai_calls(&[("write_patch", &patch("new.txt", "", "new\n"))]),
        openai_calls(&[("run_cmd", r#"{"command":"sh gen.sh"}"#)]),
    ]
}

fn agent_args(mock: &MockLlm) -> Vec<String> {
    [
        "agent",
        "--base-url",
        &format!("{}/v1", mock.url),
        "--model",
        "test-model",
        "--json",
        "-p",
        "change things",
        "--test-command",
        "sh gen.sh",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn run_id(stdout: &str) -> i64 {
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find_map(|v| v["loop_id"].as_i64())
        .expect("a loop id in the events")
}

pub fn assert_changed(ws: &Workspace) {
    assert_eq!(ws.read("a.txt"), "ONE\n");
    assert_eq!(ws.read("new.txt"), "new\n");
    assert_eq!(ws.read("b.txt"), "formatted\n");
    assert_eq!(ws.read("gen.txt"), "generated\n");
}

pub fn assert_as_before(ws: &Workspace) {
    assert_eq!(ws.read("a.txt"), "one\n");
    assert_eq!(ws.read("b.txt"), "bee\n");
    assert!(!ws.path().join("new.txt").exists());
    assert!(!ws.path().join("gen.txt").exists());
    assert!(!ws.path().join("runs.log").exists());
}

#[test]
fn undo_puts_back_model_edits_created_files_and_program_changes() {
    let ws = workspace();
    let mut replies = turns();
    replies.push(openai_text("done"));
    let mock = MockLlm::start(replies);
    let args = agent_args(&mock);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let r = ws.kiln(&args, &[]);
    r.expect_code(0);
    let id = run_id(&r.stdout());
    assert_changed(&ws);

    // The dry run shows the diff and changes nothing.
    let d = ws.kiln(&["undo", "--dry-run"], &[]);
    d.expect_code(0);
    let diff = d.stdout();
    for line in ["-ONE", "+one", "-formatted", "+bee", "-new", "-generated"] {
        assert!(diff.lines().any(|l| l == line), "{line} in:\n{diff}");
    }
    assert!(!diff.contains("\u{1b}["), "no colors off a terminal");
    assert_changed(&ws);

    let u = ws.kiln(&["undo", &id.to_string(), "--json"], &[]);
    u.expect_code(0);
    assert_as_before(&ws);
    let v = u.json();
    assert_eq!(v["undone"].as_array().unwrap().len(), 5, "{v}");

    // Recorded in the store, and not done twice.
    let h = ws.kiln(&["history", "show", &id.to_string()], &[]);
    assert!(h.stdout().contains("undone: "), "{}", h.stdout());
    let again = ws.kiln(&["undo", &id.to_string()], &[]);
    again.expect_code(2);
    assert!(
        again.stderr().contains("undone already"),
        "{}",
        again.stderr()
    );
}

#[test]
fn files_changed_since_are_refused_and_named_unless_forced() {
    let ws = workspace();
    let mut replies = turns();
    replies.push(openai_text("done"));
    let mock = MockLlm::start(replies);
    let args = agent_args(&mock);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    ws.kiln(&args, &[]).expect_code(0);
    ws.write("a.txt", "ONE\nmine\n");

    let u = ws.kiln(&["undo"], &[]);
    u.expect_code(1);
    assert!(
        u.stderr().contains("changed since the run"),
        "{}",
        u.stderr()
    );
    assert!(u.stderr().contains("  a.txt"), "{}", u.stderr());
    assert_eq!(ws.read("b.txt"), "formatted\n", "nothing written");

    ws.kiln(&["undo", "--force"], &[]).expect_code(0);
    assert_as_before(&ws);
}

/// Start the scripted agent (with `extra` options) and SIGKILL it while it waits for its
/// fourth answer (after its three turns' changes), as a crash would; `later` are the replies
/// the mock gives after that.
pub fn killed_agent_run(
    ws: &Workspace,
    turns: Vec<Reply>,
    later: Vec<Reply>,
    extra: &[&str],
) -> (i64, MockLlm) {
    let mut replies = turns;
    // The fourth answer never comes in time.
    replies.push(Reply::Stream(vec![(
        Duration::from_secs(60),
        String::new(),
    )]));
    replies.extend(later);
    let mock = MockLlm::start(replies);
    let mut args = agent_args(&mock);
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let child = ws.spawn_kiln(&args);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while mock.recorded().len() < 4 {
        assert!(
            std::time::Instant::now() < deadline,
            "the agent never asked a 4th time"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    child.wait_with_output().unwrap();
    // Its stdout may have died in a buffer: the store has the run.
    let h = ws.kiln(&["history", "--json", "--limit", "1"], &[]);
    let row: serde_json::Value = serde_json::from_str(h.stdout().lines().next().unwrap()).unwrap();
    (row["id"].as_i64().unwrap(), mock)
}

#[test]
fn a_run_killed_in_the_middle_is_undone() {
    let ws = workspace();
    let (id, _mock) = killed_agent_run(&ws, turns(), vec![], &[]);
    assert_changed(&ws);
    let u = ws.kiln(&["undo", &id.to_string()], &[]);
    u.expect_code(0);
    assert!(u.stderr().contains("did not finish"), "{}", u.stderr());
    assert_as_before(&ws);
}

#[test]
fn undo_gives_back_the_recorded_mode_and_never_a_set_user_id_bit() {
    use std::os::unix::fs::PermissionsExt;
    let ws = Workspace::new();
    let tool = ws.write("bin/tool", "#!/bin/sh\necho tool\n");
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    // The run's program replaces the tracked executable with an empty file.
    ws.write("swap.sh", "rm -f bin/tool\n: > bin/tool\n");
    let mock = MockLlm::start(vec![
        openai_calls(&[("run_cmd", r#"{"command":"sh swap.sh"}"#)]),
        openai_text("done"),
    ]);
    let base = format!("{}/v1", mock.url);
    let r = ws.kiln(
        &[
            "agent",
            "--base-url",
            &base,
            "--model",
            "test-model",
            "--json",
            "-p",
            "swap the tool",
            "--test-command",
            "sh swap.sh",
        ],
        &[],
    );
    r.expect_code(0);
    assert_eq!(ws.read("bin/tool"), "", "{}", r.stdout());
    // As a `mknod(S_IFREG | 04700)` would leave it (set here: the program's seccomp filter
    // refuses a set-user-ID chmod).
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o4700)).unwrap();

    ws.kiln(&["undo"], &[]).expect_code(0);
    assert_eq!(ws.read("bin/tool"), "#!/bin/sh\necho tool\n");
    let mode = std::fs::metadata(&tool).unwrap().permissions().mode();
    assert_eq!(
        mode & 0o7777,
        0o755,
        "the mode recorded before the run, not {mode:o}"
    );
}

/// `kiln agent ... > out.jsonl 2> err.txt` in a git repository whose program leaves a
/// git-ignored build product: undo puts back the run's changes and leaves out both kiln's own
/// output files (found by device and inode of its stdout and stderr, whatever their names)
/// and what git ignores, without a word about either.
#[test]
fn undo_leaves_out_kilns_own_output_files_and_git_ignored_build_products() {
    let ws = workspace();
    let git = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(ws.root())
        .status()
        .unwrap();
    assert!(git.success());
    ws.write(".gitignore", "__pycache__/\n");
    ws.write(
        "gen.sh",
        "printf 'formatted\\n' > b.txt\nprintf 'generated\\n' > gen.txt\nprintf x >> runs.log\nmkdir -p __pycache__\nprintf '\\000\\377\\376' > __pycache__/m.cpython-312.pyc\n",
    );
    let mut replies = turns();
    replies.push(openai_text("done"));
    let mock = MockLlm::start(replies);
    let args = agent_args(&mock);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = std::fs::File::create(ws.root().join("out.jsonl")).unwrap();
    let err = std::fs::File::create(ws.root().join("err.txt")).unwrap();
    let status = ws.command(&args).stdout(out).stderr(err).status().unwrap();
    assert_eq!(status.code(), Some(0), "{}", ws.read("err.txt"));
    let printed = ws.read("out.jsonl");
    assert!(printed.contains("agent.result"), "{printed}");
    assert_changed(&ws);
    let pyc = ws.root().join("__pycache__/m.cpython-312.pyc");
    assert!(pyc.is_file());

    let d = ws.kiln(&["undo", "--dry-run", "--json"], &[]);
    d.expect_code(0);
    let paths: Vec<String> = d.json()["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap().to_string())
        .collect();
    for left_out in ["out.jsonl", "err.txt", "__pycache__/m.cpython-312.pyc"] {
        assert!(
            !paths.iter().any(|p| p == left_out),
            "{left_out} in {paths:?}"
        );
    }

    let u = ws.kiln(&["undo"], &[]);
    u.expect_code(0);
    assert!(!u.stderr().contains("pycache"), "{}", u.stderr());
    assert!(!u.stderr().contains("out.jsonl"), "{}", u.stderr());
    assert_as_before(&ws);
    assert_eq!(ws.read("out.jsonl"), printed, "kiln's own output is kept");
    assert!(pyc.is_file(), "the build product is left alone");
}

/// `kiln history` has a header, a start-date column, and marks a run `kiln undo` undid (and
/// `"undone": true` in its JSON row).
#[test]
fn history_has_a_header_a_date_column_and_marks_undone_runs() {
    let ws = workspace();
    let mut replies = turns();
    replies.push(openai_text("done"));
    let mock = MockLlm::start(replies);
    let args = agent_args(&mock);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    ws.kiln(&args, &[]).expect_code(0);

    let before = ws.kiln(&["history"], &[]);
    before.expect_code(0);
    let out = before.stdout();
    let mut lines = out.lines();
    let header = lines.next().unwrap();
    for col in ["ID", "KIND", "STATUS", "STARTED (UTC)"] {
        assert!(header.contains(col), "{col} in {header}");
    }
    let row = lines.next().unwrap();
    let is_date = |w: &str| {
        w.len() == 20
            && w.as_bytes()[4] == b'-'
            && w.as_bytes()[10] == b'T'
            && w.ends_with('Z')
            && w[..4].chars().all(|c| c.is_ascii_digit())
    };
    assert!(row.split_whitespace().any(is_date), "a date in {row}");
    assert!(!row.contains("undone"), "{row}");

    ws.kiln(&["undo"], &[]).expect_code(0);
    let after = ws.kiln(&["history"], &[]).stdout();
    let row = after.lines().nth(1).unwrap();
    assert!(row.contains("success (undone)"), "{row}");
    let j = ws.kiln(&["history", "--json"], &[]).stdout();
    let v: serde_json::Value = serde_json::from_str(j.lines().next().unwrap()).unwrap();
    assert_eq!(v["undone"], true, "{v}");
}

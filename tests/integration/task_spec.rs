//! Instructions from data carry no authority: a batch task line, a queue row and a run's
//! record (what `--resume` reads back) are typed records (`TaskSpec`), never command lines.
//! Each test plants what an attacker would (a log file, an endpoint, a file to read, a local
//! directory, `--yes`, a path-escaping id, an option in a run's record) and checks it is
//! refused by name and had no effect; and that a run's record holds no credential.

use crate::batch::{KEY, Mock, agent_task, fix_task, project, task_file};
use crate::mock_llm::{MockLlm, openai_calls};
use crate::support::Workspace;
use serde_json::{Value, json};
use std::time::Duration;

/// `kiln batch run t.jsonl` over `task`: refused (exit 2) before any task runs, the message
/// naming the file and `field`.
fn refused(ws: &Workspace, mock: &Mock, task: &Value, field: &str) {
    task_file(ws, "t.jsonl", std::slice::from_ref(task));
    let r = ws.kiln(&["batch", "run", "t.jsonl"], &[KEY]);
    r.expect_code(2);
    let err = r.stderr();
    assert!(
        err.contains("t.jsonl") && err.contains(&format!("{field}:")),
        "{task}: {err}"
    );
    assert_eq!(mock.requests(), 0, "{task}: a task ran");
}

/// A workspace with `proj/`, the mock as the workers' model.
fn setup() -> (Workspace, Mock) {
    let ws = Workspace::new();
    let mock = Mock::start(Duration::ZERO);
    project(&ws);
    mock.configure(&ws);
    (ws, mock)
}

/// Hole 3: `--log-file /abs` appended to any file the worker can write.
#[test]
fn a_task_line_cannot_choose_a_log_file() {
    let (ws, mock) = setup();
    let log = ws.path().join("worker-owned.log");
    let mut t = agent_task("a");
    t["log_file"] = log.to_str().unwrap().into();
    refused(&ws, &mock, &t, "log_file");
    let old = json!({"id": "a", "repo": "proj",
        "args": ["agent", "--log-file", log, "-p", "mark the notes done"]});
    refused(&ws, &mock, &old, "args");
    assert!(!log.exists(), "the task wrote the worker's file");
}

/// Hole 3: `--base-url http://elsewhere` sent the worker's API key there.
#[test]
fn a_task_line_cannot_choose_the_endpoint() {
    let (ws, mock) = setup();
    let elsewhere = MockLlm::start(vec![]);
    let url = format!("{}/v1", elsewhere.url);
    for field in ["base_url", "provider", "model", "api_key_env"] {
        let mut t = agent_task("a");
        t[field] = url.clone().into();
        refused(&ws, &mock, &t, field);
    }
    let old = json!({"id": "a", "repo": "proj",
        "args": ["agent", "--base-url", url, "-p", "mark the notes done"]});
    refused(&ws, &mock, &old, "args");
    assert!(elsewhere.recorded().is_empty(), "the key went elsewhere");
}

/// Hole 3: `--system-file /abs` put any file of the worker's into the prompt.
#[test]
fn a_task_line_cannot_choose_a_system_file() {
    let (ws, mock) = setup();
    let secret = ws.path().join("id_worker");
    std::fs::write(&secret, "WORKER-SECRET\n").unwrap();
    let mut t = agent_task("a");
    t["system_file"] = secret.to_str().unwrap().into();
    refused(&ws, &mock, &t, "system_file");
    let old = json!({"id": "a", "repo": "proj",
        "args": ["agent", "--system-file", secret, "-p", "mark the notes done"]});
    refused(&ws, &mock, &old, "args");
}

/// Hole 3: `--prompt-file /abs` put any file of the worker's into a fix's prompt; a target
/// outside the checkout is refused too.
#[test]
fn a_task_line_cannot_choose_a_prompt_file_or_a_target_outside() {
    let (ws, mock) = setup();
    let secret = ws.path().join("id_worker");
    std::fs::write(&secret, "WORKER-SECRET\n").unwrap();
    let mut t = fix_task("f");
    t["prompt_file"] = secret.to_str().unwrap().into();
    refused(&ws, &mock, &t, "prompt_file");
    let mut t = fix_task("f");
    t["targets"] = json!([secret]);
    refused(&ws, &mock, &t, "targets");
    t["targets"] = json!(["../../id_worker"]);
    refused(&ws, &mock, &t, "targets");
    let old = json!({"id": "f", "repo": "proj", "args": ["fix", "--prompt-file", secret,
        "--cmd", "gcc -fsyntax-only {file}", "--file", "main.c"]});
    refused(&ws, &mock, &old, "args");
}

/// Hole 3: a `repo` naming any local directory copied it into the checkout. A local run
/// takes directories below its task file only; a worker only those under its user's
/// `[batch] local_repos`.
#[test]
fn a_task_line_cannot_copy_a_local_directory_it_was_not_given() {
    let (ws, mock) = setup();
    let private = ws.path().join("private");
    std::fs::create_dir_all(&private).unwrap();
    std::fs::write(private.join("main.c"), "SECRET\n").unwrap();
    let mut t = fix_task("f");
    t["repo"] = private.to_str().unwrap().into();
    refused(&ws, &mock, &t, "repo");
    t["repo"] = "../private".into();
    refused(&ws, &mock, &t, "repo");
    t["repo"] = format!("file://{}", private.display()).into();
    refused(&ws, &mock, &t, "repo");
    // A hidden directory beside the task file is not a repository either.
    ws.write(".ssh/main.c", "KEY\n");
    t["repo"] = ".ssh".into();
    refused(&ws, &mock, &t, "repo");

    // Submitted for a worker, the path is judged by the worker's own configuration.
    t["repo"] = private.to_str().unwrap().into();
    task_file(&ws, "tasks.jsonl", &[t]);
    ws.kiln(&["batch", "submit", "tasks.jsonl", "--dir", "q"], &[])
        .expect_code(0);
    let w = ws.kiln(&["worker", "--once", "--poll", "0.2", "--dir", "q"], &[KEY]);
    w.expect_code(0);
    let r = &crate::batch::results_in(&ws, &["--dir", "q"])[0];
    assert_eq!(r["status"], "error", "{r}");
    assert!(
        r["error"].as_str().unwrap().contains("did not allow"),
        "{r}"
    );
    assert_eq!(mock.requests(), 0);
    let copied = walk(&ws.root().join("q/work")).any(|p| p.ends_with("main.c"));
    assert!(!copied, "the private directory was copied");
}

fn walk(dir: &std::path::Path) -> impl Iterator<Item = std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(p.clone());
            }
            out.push(p);
        }
    }
    out.into_iter()
}

/// Submit one agent task over `proj` to the queue `--dir q`, then edit its row with `edit`
/// (SQL run on `q/kiln.db`).
fn submit_and_edit(ws: &Workspace, edit: &str) {
    task_file(ws, "tasks.jsonl", &[agent_task("t")]);
    ws.kiln(&["batch", "submit", "tasks.jsonl", "--dir", "q"], &[])
        .expect_code(0);
    let db = rusqlite::Connection::open(ws.root().join("q/kiln.db")).unwrap();
    assert_eq!(db.execute(edit, []).unwrap(), 1);
}

/// `kiln worker --once` on `--dir q` without `KILN_YES` (the worker's own `--yes` is not
/// given): its stderr.
fn worker_without_yes(ws: &Workspace) -> String {
    let mut cmd = ws.command(&["worker", "--once", "--poll", "0.2", "--dir", "q"]);
    cmd.env_remove("KILN_YES").env(KEY.0, KEY.1);
    let out = crate::support::Run(cmd.output().unwrap());
    out.expect_code(0);
    out.stderr()
}

/// Hole 4: a queue row edited to carry `--yes` applied the checkout's untrusted kiln.toml,
/// whose `[mcp.servers]` command then ran unconfined on the worker. The row is checked again
/// when claimed: refused, ended `error`, nothing run.
#[test]
fn a_queue_row_edited_to_carry_yes_is_refused_at_claim() {
    let (ws, mock) = setup();
    let marker = ws.path().join("mcp-ran");
    ws.write(
        "proj/kiln.toml",
        &format!(
            "[mcp.servers.x]\ncommand = \"sh\"\nargs = [\"-c\", \"touch {}\"]\n",
            marker.display()
        ),
    );
    for (n, edit) in [
        "UPDATE kiln_batch_tasks SET spec = json_set(spec, '$.yes', json('true'))",
        "UPDATE kiln_batch_tasks SET spec = json_set(spec, '$.store', 'postgres://x@evil/db')",
        "UPDATE kiln_batch_tasks SET spec = json_object('id', 't', 'repo', json_extract(spec, '$.repo'), 'args', json('[\"agent\",\"--yes\",\"-p\",\"mark the notes done\"]'))",
    ]
    .iter()
    .enumerate()
    {
        let _ = std::fs::remove_dir_all(ws.root().join("q"));
        submit_and_edit(&ws, edit);
        let err = worker_without_yes(&ws);
        assert!(
            err.contains("tasks/t: refused when claimed"),
            "{n}: {err}"
        );
        let r = &crate::batch::results_in(&ws, &["--dir", "q"])[0];
        assert_eq!(r["status"], "error", "{n}: {r}");
        assert!(!marker.exists(), "{n}: the untrusted kiln.toml was applied");
        assert_eq!(mock.requests(), 0, "{n}: the task ran");
    }
}

/// Hole 4: a task id `../../x` put the checkout and its log outside the scratch directory.
/// Refused in a task file, and in a queue row edited to carry it.
#[test]
fn a_task_id_that_leaves_the_scratch_directory_is_refused() {
    let (ws, mock) = setup();
    let mut t = fix_task("f");
    t["id"] = "../../x".into();
    refused(&ws, &mock, &t, "id");
    submit_and_edit(
        &ws,
        "UPDATE kiln_batch_tasks SET id = '../../x', spec = json_set(spec, '$.id', '../../x')",
    );
    let err = worker_without_yes(&ws);
    assert!(err.contains("refused when claimed"), "{err}");
    assert!(err.contains("id:"), "{err}");
    // `<q>/work/tasks/../../x` would be `<q>/x`.
    assert!(
        !ws.root().join("q/x").exists(),
        "a checkout left the scratch directory"
    );
    assert_eq!(mock.requests(), 0);
}

/// An agent run in `ws` with `max_steps` that ends with exit `code` (stopped at its cap, or
/// by a model error), so it can be resumed; its id.
fn stopped_run(ws: &Workspace, mock: &MockLlm, max_steps: &str, code: i32) -> i64 {
    let base = format!("{}/v1", mock.url);
    let args = [
        "agent",
        "--base-url",
        &base,
        "--model",
        "m",
        "-m",
        max_steps,
        "-p",
        "look",
    ];
    ws.kiln(&args, &[]).expect_code(code);
    let h = ws.kiln(&["history", "--json", "--limit", "1"], &[]);
    let row: Value = serde_json::from_str(h.stdout().lines().next().unwrap()).unwrap();
    row["id"].as_i64().unwrap()
}

/// Holes 5: the record a resume reads is in the store, which the run's programs can write. A
/// program that rewrites it cannot choose an option: every field that is not a task's is
/// refused by name, and an old command-line record is not read at all.
#[test]
fn a_run_record_rewritten_in_the_store_chooses_no_option() {
    let ws = crate::undo::workspace();
    let mock = MockLlm::start(vec![openai_calls(&[("read_file", r#"{"path":"a.txt"}"#)])]);
    let id = stopped_run(&ws, &mock, "1", 1);
    let elsewhere = MockLlm::start(vec![]);
    let log = ws.path().join("chosen.log");
    let secret = ws.path().join("id_x");
    std::fs::write(&secret, "PRIVATE KEY\n").unwrap();
    let db = rusqlite::Connection::open(ws.store_path()).unwrap();
    let original: String = db
        .query_row(
            "SELECT payload FROM events WHERE loop_id = ?1 AND type = 'run.task'",
            [id],
            |r| r.get(0),
        )
        .unwrap();
    let base = format!("{}/v1", mock.url);
    for (field, value) in [
        ("log_file", json!(log)),
        ("base_url", json!(format!("{}/v1", elsewhere.url))),
        ("system_file", json!(secret)),
        ("prompt_file", json!(secret)),
        ("yes", json!(true)),
        ("plugin", json!("/tmp/evil.wasm")),
        ("store", json!("postgres://x@evil/db")),
        ("workspace", json!("/")),
    ] {
        let planted = {
            let mut v: Value = serde_json::from_str(&original).unwrap();
            v["task"][field] = value;
            v.to_string()
        };
        db.execute(
            "UPDATE events SET payload = ?2 WHERE loop_id = ?1 AND type = 'run.task'",
            rusqlite::params![id, planted],
        )
        .unwrap();
        let r = ws.kiln(
            &[
                "agent",
                "--resume",
                &id.to_string(),
                "--base-url",
                &base,
                "--model",
                "m",
            ],
            &[],
        );
        r.expect_code(2);
        assert!(
            r.stderr().contains("cannot be resumed") && r.stderr().contains(field),
            "{field}: {}",
            r.stderr()
        );
    }
    // A bound is a bound in the record too.
    let mut v: Value = serde_json::from_str(&original).unwrap();
    v["task"]["limits"]["max_steps"] = json!(1_000_000);
    db.execute(
        "UPDATE events SET payload = ?2 WHERE loop_id = ?1 AND type = 'run.task'",
        rusqlite::params![id, v.to_string()],
    )
    .unwrap();
    let r = ws.kiln(&["agent", "--resume", &id.to_string()], &[]);
    r.expect_code(2);
    assert!(r.stderr().contains("limits.max_steps"), "{}", r.stderr());
    // A command line recorded as kiln did before is never parsed.
    db.execute(
        "UPDATE events SET type = 'run.invocation', payload = ?2 WHERE loop_id = ?1 AND type = 'run.task'",
        rusqlite::params![
            id,
            json!({"type": "run.invocation", "argv": ["kiln", "agent", "--log-file", log, "-p", "look"]})
                .to_string()
        ],
    )
    .unwrap();
    let r = ws.kiln(&["agent", "--resume", &id.to_string()], &[]);
    r.expect_code(2);
    assert!(r.stderr().contains("older kiln"), "{}", r.stderr());
    assert!(!log.exists(), "a log file the store chose was written");
    assert!(
        elsewhere.recorded().is_empty(),
        "the endpoint the store chose was used"
    );
    assert_eq!(mock.recorded().len(), 1, "a refused resume asked the model");
}

/// A resume takes its model settings from the person resuming, as any run does: here another
/// server and model than the first part's, named on the resume's command line.
#[test]
fn a_resume_takes_the_model_settings_given_now() {
    let ws = crate::undo::workspace();
    // The first part's second request fails (a model error ends the run, resumable).
    let first = MockLlm::start(vec![
        openai_calls(&[("read_file", r#"{"path":"a.txt"}"#)]),
        crate::mock_llm::Reply::json(400, json!({"error": {"message": "gone"}})),
    ]);
    let id = stopped_run(&ws, &first, "5", 2);
    let now = MockLlm::start(vec![crate::mock_llm::openai_text("done")]);
    let base = format!("{}/v1", now.url);
    let r = ws.kiln(
        &[
            "agent",
            "--resume",
            &id.to_string(),
            "--base-url",
            &base,
            "--model",
            "other-model",
            "--json",
        ],
        &[],
    );
    r.expect_code(0);
    let asked = now.recorded();
    assert_eq!(asked.len(), 1, "{}", r.stderr());
    assert_eq!(asked[0].body["model"], "other-model");
    assert_eq!(
        first.recorded().len(),
        2,
        "the first server was asked again"
    );
}

/// Hole 6: `--base-url https://user:PASSWORD@host/v1` was stored with the run as typed. The
/// record holds no endpoint, the store nowhere holds the URL's password, and a URL's
/// `user:password@` in the record's texts is removed.
#[test]
fn a_run_record_holds_no_credentials() {
    let ws = crate::undo::workspace();
    let mock = MockLlm::start(vec![openai_calls(&[("read_file", r#"{"path":"a.txt"}"#)])]);
    let with_password = mock.url.replace("http://", "http://kiln:BASEURLPASSWORD@") + "/v1";
    ws.kiln(
        &[
            "agent",
            "--base-url",
            &with_password,
            "--model",
            "m",
            "-m",
            "1",
            "-p",
            "look",
            "--system",
            "mirror at https://bob:TEXTPASSWORD@example.com/x",
        ],
        &[],
    )
    .expect_code(1);
    assert_eq!(mock.recorded().len(), 1, "the run did not reach the model");
    let db_path = ws.store_path();
    let db = rusqlite::Connection::open(&db_path).unwrap();
    let payloads: Vec<String> = db
        .prepare("SELECT payload FROM events WHERE type IN ('run.task', 'run.invocation')")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(payloads.len(), 1, "{payloads:?}");
    let record: Value = serde_json::from_str(&payloads[0]).unwrap();
    assert_eq!(record["type"], "run.task", "{record}");
    assert!(!payloads[0].contains("PASSWORD"), "{record}");
    assert!(
        !payloads[0].contains(&mock.url),
        "an endpoint is recorded: {record}"
    );
    assert_eq!(
        record["task"]["system"], "mirror at https://example.com/x",
        "{record}"
    );
    drop(db);
    for file in ["kiln.db", "kiln.db-wal"] {
        let bytes = std::fs::read(ws.store_path().with_file_name(file)).unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            !text.contains("BASEURLPASSWORD"),
            "{file} holds the password"
        );
    }
}

//! `kiln batch` and `kiln worker` end to end: task files of fix and agent tasks against a
//! mock LLM that answers by model name (fix: a SEARCH/REPLACE fix; agent: a write_patch, then
//! final_answer once it has seen a tool result), run locally and by workers sharing a queue.

use crate::support::{Run, Workspace};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const BROKEN_C: &str = "#include <stdio.h>\n\nint main(void) {\n    int x = 1\n    printf(\"%d\\n\", x);\n    return 0;\n}\n";

/// A mock LLM that answers from the request alone, so tasks running at once in any order
/// get the right answer; counts requests.
pub struct Mock {
    pub url: String,
    pub count: Arc<AtomicUsize>,
}

fn sse(chunks: &[Value]) -> String {
    let mut s: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    s.push_str("data: [DONE]\n\n");
    s
}

fn usage() -> Value {
    json!({"choices":[],"usage":{"prompt_tokens":20,"completion_tokens":5}})
}

/// The answer to one request body: an agent's request offers `final_answer`; a task whose
/// prompt says `SLOW-TASK` is answered 3 s late.
fn answer(body: &Value, delay: Duration) -> String {
    let agent = body["tools"]
        .as_array()
        .is_some_and(|t| t.iter().any(|t| t["function"]["name"] == "final_answer"));
    let saw_tool = body["messages"]
        .as_array()
        .is_some_and(|m| m.iter().any(|m| m["role"] == "tool"));
    std::thread::sleep(delay);
    if body["messages"].to_string().contains("SLOW-TASK") {
        std::thread::sleep(Duration::from_secs(3));
    }
    if !agent {
        let text =
            "Fixed.\n\n<<<<<<< SEARCH\n    int x = 1\n=======\n    int x = 1;\n>>>>>>> REPLACE\n";
        return sse(&[
            json!({"choices":[{"index":0,"delta":{"role":"assistant","content":text}}]}),
            json!({"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}),
            usage(),
        ]);
    }
    let (name, args) = if saw_tool {
        ("final_answer", json!({"summary": "notes updated"}))
    } else {
        (
            "write_patch",
            json!({"path": "notes.txt", "patch": "<<<<<<< SEARCH\ntodo\n=======\ndone\n>>>>>>> REPLACE\n"}),
        )
    };
    sse(&[
        json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":name,"arguments":args.to_string()}}]}}]}),
        json!({"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}),
        usage(),
    ])
}

impl Mock {
    /// Start it; each answer waits `delay` first (to keep tasks running a while).
    pub fn start(delay: Duration) -> Mock {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        let count = Arc::new(AtomicUsize::new(0));
        let c = count.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { break };
                let c = c.clone();
                std::thread::spawn(move || {
                    let mut r = BufReader::new(stream.try_clone().unwrap());
                    let mut len = 0;
                    loop {
                        let mut line = String::new();
                        if r.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        let l = line.trim_end().to_ascii_lowercase();
                        if l.is_empty() {
                            break;
                        }
                        if let Some(v) = l.strip_prefix("content-length:") {
                            len = v.trim().parse().unwrap_or(0);
                        }
                    }
                    let mut body = vec![0; len];
                    if r.read_exact(&mut body).is_err() {
                        return;
                    }
                    c.fetch_add(1, Ordering::SeqCst);
                    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    let text = answer(&body, delay);
                    let _ = write!(
                        stream,
                        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{text}",
                        text.len()
                    );
                });
            }
        });
        Mock { url, count }
    }

    pub fn requests(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }

    /// The user's configuration of the workspace's kiln processes (the workers): this mock as
    /// the model, and local repositories allowed under the workspace. Tasks name neither.
    pub fn configure(&self, ws: &Workspace) {
        ws.user_config(&format!(
            "[llm]\nbase_url = \"{}\"\nmodel = \"mock\"\n\n[batch]\nlocal_repos = [\"{}\"]\n",
            self.url,
            ws.root().display()
        ));
    }
}

/// A plain project directory (`proj/`) with a broken C file and a notes file.
pub fn project(ws: &Workspace) {
    ws.write("proj/main.c", BROKEN_C);
    ws.write("proj/notes.txt", "todo\n");
}

/// A fix task and an agent task line over `proj`.
pub fn fix_task(id: &str) -> Value {
    json!({"id": id, "repo": "proj", "kind": "fix", "cmd": "gcc -fsyntax-only {file}",
        "targets": ["main.c"]})
}

pub fn agent_task(id: &str) -> Value {
    json!({"id": id, "repo": "proj", "kind": "agent", "prompt": "mark the notes done",
        "limits": {"max_steps": 4}})
}

/// Write `tasks` as a JSONL file in the workspace.
pub fn task_file(ws: &Workspace, name: &str, tasks: &[Value]) {
    let text: String = tasks.iter().map(|t| format!("{t}\n")).collect();
    ws.write(name, &text);
}

/// 20 tasks: 12 fix, 8 agent.
pub fn twenty() -> Vec<Value> {
    (0..20)
        .map(|i| {
            if i % 5 < 3 {
                fix_task(&format!("fix-{i}"))
            } else {
                agent_task(&format!("agent-{i}"))
            }
        })
        .collect()
}

pub fn lines(r: &Run) -> Vec<Value> {
    r.stdout()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

pub const KEY: (&str, &str) = ("OPENAI_API_KEY", "sk-batch-test");

/// Every result of a run of `twenty`: success at the first attempt, with the fix or the
/// agent's change in its diff, tokens, a loop id and an exit code of 0.
pub fn check_twenty(results: &[Value], attempts_ok: impl Fn(&str, i64) -> bool) {
    assert_eq!(results.len(), 20, "{results:?}");
    for r in results {
        let id = r["id"].as_str().unwrap();
        assert_eq!(r["status"], "success", "{r}");
        assert!(attempts_ok(id, r["attempts"].as_i64().unwrap()), "{r}");
        assert_eq!(r["exit_code"], 0, "{r}");
        assert!(r["loop_id"].as_i64().is_some(), "{r}");
        assert!(r["tokens"]["input"].as_u64().unwrap() >= 20, "{r}");
        assert!(r["duration_ms"].as_u64().is_some(), "{r}");
        let diff = r["diff"].as_str().unwrap();
        if id.starts_with("fix") {
            assert_eq!(r["stop_reason"], "success", "{r}");
            assert!(diff.contains("+    int x = 1;"), "{diff}");
        } else {
            assert!(diff.contains("-todo\n+done"), "{diff}");
        }
    }
}

#[test]
fn local_batch_of_twenty_runs_three_at_once_and_a_rerun_skips_them() {
    let ws = Workspace::new();
    let mock = Mock::start(Duration::from_millis(50));
    project(&ws);
    mock.configure(&ws);
    task_file(&ws, "tasks.jsonl", &twenty());
    let r = ws.kiln(
        &["batch", "run", "tasks.jsonl", "--jobs", "3", "--json"],
        &[KEY],
    );
    r.expect_code(0);
    check_twenty(&lines(&r), |_, a| a == 1);
    // 12 fix tasks ask once, 8 agents twice.
    assert_eq!(mock.requests(), 12 + 16);
    let err = r.stderr();
    assert!(err.contains("20 new, 0 already finished"), "{err}");
    assert!(err.contains("[20/20 done, 0 running, 0 failed"), "{err}");
    assert!(err.contains("ETA"), "{err}");
    // The source directory is untouched: every task ran in its own copy.
    assert_eq!(ws.read("proj/main.c"), BROKEN_C);

    let again = ws.kiln(&["batch", "run", "tasks.jsonl", "--jobs", "3"], &[KEY]);
    again.expect_code(0);
    assert!(
        again.stderr().contains("0 new, 20 already finished"),
        "{}",
        again.stderr()
    );
    assert_eq!(mock.requests(), 28, "a rerun asked the model again");

    let res = ws.kiln(&["batch", "results", "--json"], &[]);
    res.expect_code(0);
    check_twenty(&lines(&res), |_, a| a == 1);
    let st = ws.kiln(&["batch", "status", "tasks", "--json"], &[]);
    let st = st.json();
    assert_eq!(
        (st["success"].as_u64(), st["total"].as_u64()),
        (Some(20), Some(20))
    );
}

#[test]
fn bad_task_lines_are_refused_naming_line_and_field() {
    let ws = Workspace::new();
    ws.write(
        "bad.jsonl",
        "{\"id\":\"a\",\"repo\":\"proj\",\"kind\":\"fix\",\"cmd\":\"true\",\"targets\":[\"a.c\"]}\n{\"id\":\"b\",\"repo\":\"proj\",\"kind\":\"history\"}\n",
    );
    let r = ws.kiln(&["batch", "run", "bad.jsonl"], &[]);
    r.expect_code(2);
    assert!(r.stderr().contains("bad.jsonl:2: kind:"), "{}", r.stderr());
    ws.write(
        "bad2.jsonl",
        "{\"repo\":\"proj\",\"kind\":\"fix\",\"targets\":[\"a.c\"]}\n",
    );
    let r = ws.kiln(&["batch", "run", "bad2.jsonl"], &[]);
    r.expect_code(2);
    assert!(r.stderr().contains("bad2.jsonl:1: id:"), "{}", r.stderr());
    // The worker chooses the workspace, trust and the store: a task has no field for them,
    // and an old task line (a command line) is refused, naming the fields that replace it.
    for (n, extra) in [
        r#""workspace":"/tmp""#,
        r#""yes":true"#,
        r#""store":"sqlite:/tmp/x.db""#,
        r#""plugin":"/tmp/x.wasm""#,
        r#""args":["agent","-p","x","--yes"]"#,
    ]
    .iter()
    .enumerate()
    {
        ws.write(
            "bad3.jsonl",
            &format!(
                "{{\"id\":\"c{n}\",\"repo\":\"proj\",\"kind\":\"agent\",\"prompt\":\"x\",{extra}}}\n"
            ),
        );
        let r = ws.kiln(&["batch", "run", "bad3.jsonl"], &[]);
        r.expect_code(2);
        let field = extra.split('"').nth(1).unwrap();
        assert!(
            r.stderr().contains(&format!("bad3.jsonl:1: {field}:")),
            "{extra}: {}",
            r.stderr()
        );
    }
    let r = ws.kiln(&["batch", "run", "bad3.jsonl"], &[]);
    assert!(
        r.stderr()
            .contains("`kind` (fix, agent or loop), `targets`"),
        "{}",
        r.stderr()
    );
}

/// Wait until `f` holds, polling.
pub fn wait_until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The task ids of `batch_dir`'s tasks in state `status` (through `kiln batch results`).
pub fn ids_in(ws: &Workspace, extra: &[&str], status: &str) -> Vec<String> {
    let mut args = vec!["batch", "results", "--json"];
    args.extend_from_slice(extra);
    lines(&ws.kiln(&args, &[]))
        .into_iter()
        .filter(|r| r["status"] == status)
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn ctrl_c_kills_the_running_tasks_and_leaves_them_claimable() {
    let ws = Workspace::new();
    let mock = Mock::start(Duration::from_secs(30));
    project(&ws);
    mock.configure(&ws);
    task_file(
        &ws,
        "slow.jsonl",
        &(0..4)
            .map(|i| fix_task(&format!("t{i}")))
            .collect::<Vec<_>>(),
    );
    let mut cmd = ws.command(&["batch", "run", "slow.jsonl", "--jobs", "2"]);
    cmd.env(KEY.0, KEY.1)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().unwrap();
    wait_until("two model requests", Duration::from_secs(60), || {
        mock.requests() >= 2
    });
    // SAFETY: signalling the child we started.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let start = Instant::now();
    let out = Run(child.wait_with_output().unwrap());
    out.expect_code(130);
    assert!(start.elapsed() < Duration::from_secs(10), "slow to stop");
    assert!(out.stderr().contains("given back"), "{}", out.stderr());
    let queued = ids_in(&ws, &[], "queued");
    assert_eq!(queued.len(), 4, "{queued:?}");
    let res = lines(&ws.kiln(&["batch", "results", "--json"], &[]));
    assert!(res.iter().all(|r| r["attempts"] == 0), "{res:?}");
    // No task's kiln is left running.
    let ps = std::process::Command::new("pgrep")
        .args([
            "-f",
            &format!(
                "{}/kiln/workspaces/.*/batches/work",
                ws.state_home().display()
            ),
        ])
        .output()
        .unwrap();
    assert!(
        ps.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&ps.stdout)
    );
}

/// `kiln worker` with the queue flags `q`, exiting when nothing is left, with short leases.
pub fn spawn_worker(ws: &Workspace, q: &[&str], lease: &str) -> std::process::Child {
    let mut args = vec![
        "worker",
        "--once",
        "--lease",
        lease,
        "--heartbeat",
        "0.3",
        "--poll",
        "0.2",
    ];
    args.extend_from_slice(q);
    let mut cmd = ws.command(&args);
    cmd.env(KEY.0, KEY.1)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    cmd.spawn().unwrap()
}

/// The results of batch `tasks` in the queue `q`.
pub fn results_in(ws: &Workspace, q: &[&str]) -> Vec<Value> {
    let mut args = vec!["batch", "results", "tasks", "--json"];
    args.extend_from_slice(q);
    let r = ws.kiln(&args, &[]);
    r.expect_code(0);
    lines(&r)
}

/// The id of a task running on the worker with process id `pid`, once there is one.
pub fn task_running_on(ws: &Workspace, q: &[&str], pid: u32) -> String {
    let tag = format!(":{pid}:");
    let mut found = None;
    wait_until(
        "a task running on the worker",
        Duration::from_secs(60),
        || {
            found = results_in(ws, q)
                .into_iter()
                .find(|r| {
                    r["status"] == "running"
                        && r["worker"].as_str().is_some_and(|w| w.contains(&tag))
                })
                .map(|r| r["id"].as_str().unwrap().to_string());
            found.is_some()
        },
    );
    found.unwrap()
}

/// Wait for a child to exit (within a minute), returning its output.
pub fn finish(child: std::process::Child) -> Run {
    let pid = child.id() as i32;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(Duration::from_secs(90)) {
        Ok(out) => Run(out.unwrap()),
        Err(_) => {
            // SAFETY: killing the child we started, which did not exit in time.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("process {pid} did not exit");
        }
    }
}

/// 20 tasks, three workers, one SIGKILLed in the middle of a task: every task ends once,
/// with success; the killed worker's task shows attempts = 2.
pub fn fleet_survives_a_killed_worker(ws: &Workspace, q: &[&str], store: &str) -> String {
    let mock = Mock::start(Duration::from_millis(300));
    project(ws);
    mock.configure(ws);
    let mut tasks = twenty();
    // The first task is slow (3 s), so that its worker is surely killed in its middle.
    tasks[0]["prompt"] = "SLOW-TASK".into();
    task_file(ws, "tasks.jsonl", &tasks);
    let mut submit = vec!["batch", "submit", "tasks.jsonl"];
    submit.extend_from_slice(q);
    let r = ws.kiln(&submit, &[]);
    r.expect_code(0);
    assert_eq!(r.stdout().trim(), "tasks");
    let again = ws.kiln(&submit, &[]);
    assert!(
        again
            .stderr()
            .contains("0 tasks enqueued, 20 already there"),
        "{}",
        again.stderr()
    );

    let mut workers: Vec<_> = (0..3).map(|_| spawn_worker(ws, q, "2")).collect();
    // The victim is the worker holding the slow task.
    let killed = "fix-0".to_string();
    let mut holder = None;
    wait_until("the slow task running", Duration::from_secs(60), || {
        holder = results_in(ws, q)
            .into_iter()
            .find(|r| r["id"] == "fix-0" && r["status"] == "running")
            .and_then(|r| r["worker"].as_str().map(str::to_string));
        holder.is_some()
    });
    let holder = holder.unwrap();
    let at = workers
        .iter()
        .position(|w| holder.contains(&format!(":{}:", w.id())))
        .expect("the holder is one of ours");
    let mut victim = workers.remove(at);
    // Killed once its run is recorded (waiting on the model).
    wait_until(
        "the victim's run in the store",
        Duration::from_secs(30),
        || attempt_loops(&history(ws, store), &killed, 1) == 1,
    );
    victim.kill().unwrap();
    victim.wait().unwrap();
    let outs: Vec<Run> = workers.into_iter().map(finish).collect();
    let err: String = outs.iter().map(|o| o.stderr()).collect();
    for o in &outs {
        o.expect_code(0);
    }
    assert!(
        err.contains(&format!("claimed tasks/{killed} (attempt 2)")),
        "{err}"
    );
    let results = results_in(ws, q);
    check_twenty(&results, |id, a| a == if id == killed { 2 } else { 1 });
    let mut ids: Vec<&str> = results.iter().map(|r| r["id"].as_str().unwrap()).collect();
    ids.dedup();
    assert_eq!(ids.len(), 20);
    // Each task asked the model once per turn; only the killed attempt may have asked more.
    assert!((28..=30).contains(&mock.requests()), "{}", mock.requests());
    // Both attempts' runs are in the shared store: the killed one (left running by its dead
    // worker) and the one that finished; 20 finished runs in all, plus the killed one.
    let loops = history(ws, store);
    assert_eq!(
        (
            attempt_loops(&loops, &killed, 1),
            attempt_loops(&loops, &killed, 2)
        ),
        (1, 1),
        "{loops:?}"
    );
    assert_eq!(loops.len(), 21, "{loops:?}");
    // The dead worker's run does not stay `running`: attempt 2's claim closed it as
    // `cancelled`, "worker lost".
    let lost = loops
        .iter()
        .find(|l| {
            l["project"]
                .as_str()
                .unwrap_or("")
                .contains(&format!("/tasks/{killed}/attempt-1/"))
        })
        .unwrap();
    assert_eq!(lost["stop_reason"], "cancelled", "{lost}");
    assert!(
        lost["summary"]
            .as_str()
            .unwrap_or("")
            .contains("worker lost"),
        "{lost}"
    );
    killed
}

/// `kiln history --store STORE --json`: every loop.
pub fn history(ws: &Workspace, store: &str) -> Vec<Value> {
    let h = ws.kiln(
        &["history", "--store", store, "--json", "--limit", "100"],
        &[],
    );
    h.expect_code(0);
    lines(&h)
}

/// How many of `loops` ran in attempt `n` of task `id`.
pub fn attempt_loops(loops: &[Value], id: &str, n: u32) -> usize {
    let tag = format!("/tasks/{id}/attempt-{n}/");
    loops
        .iter()
        .filter(|l| l["project"].as_str().unwrap_or("").contains(&tag))
        .count()
}

/// A worker paused past its lease (presumed dead) comes back after another worker finished
/// its task: its late result is rejected, fenced by attempt, and it says so.
pub fn late_write_is_rejected(ws: &Workspace, q: &[&str]) {
    let mock = Mock::start(Duration::from_millis(1500));
    project(ws);
    mock.configure(ws);
    task_file(ws, "tasks.jsonl", &[fix_task("late")]);
    let mut submit = vec!["batch", "submit", "tasks.jsonl"];
    submit.extend_from_slice(q);
    ws.kiln(&submit, &[]).expect_code(0);
    let a = spawn_worker(ws, q, "1");
    let apid = a.id() as i32;
    task_running_on(ws, q, a.id());
    // SAFETY: pausing and resuming the worker we started.
    unsafe { libc::kill(apid, libc::SIGSTOP) };
    let b = finish(spawn_worker(ws, q, "1"));
    b.expect_code(0);
    assert!(
        b.stderr().contains("claimed tasks/late (attempt 2)"),
        "{}",
        b.stderr()
    );
    unsafe { libc::kill(apid, libc::SIGCONT) };
    let a = finish(a);
    a.expect_code(0);
    assert!(
        a.stderr().contains("tasks/late attempt 1:"),
        "{}",
        a.stderr()
    );
    assert!(a.stderr().contains("rejected"), "{}", a.stderr());
    let r = &results_in(ws, q)[0];
    assert_eq!(
        (r["status"].as_str(), r["attempts"].as_i64()),
        (Some("success"), Some(2)),
        "{r}"
    );
    assert!(
        !r["worker"].as_str().unwrap().contains(&format!(":{apid}:")),
        "{r}"
    );
}

#[test]
fn fleet_on_a_shared_sqlite_directory_survives_a_killed_worker() {
    let ws = Workspace::new();
    fleet_survives_a_killed_worker(&ws, &["--dir", "q"], "q/kiln.db");
}

#[test]
fn fleet_on_a_shared_sqlite_directory_rejects_a_late_write() {
    let ws = Workspace::new();
    late_write_is_rejected(&ws, &["--dir", "q"]);
}

#[test]
fn fleet_on_postgres_survives_a_killed_worker_and_history_shows_both_attempts() {
    let url = crate::pg::PgServer::shared().fresh_db();
    let ws = Workspace::new();
    let q = ["--store", url.as_str()];
    fleet_survives_a_killed_worker(&ws, &q, &url);
    // No password in anything kiln printed or stored as a result.
    let res = ws.kiln(&["batch", "results", "--store", &url, "--json"], &[]);
    assert!(!res.stdout().contains(crate::pg::PASSWORD));
}

#[test]
fn fleet_on_postgres_rejects_a_late_write() {
    let url = crate::pg::PgServer::shared().fresh_db();
    let ws = Workspace::new();
    late_write_is_rejected(&ws, &["--store", &url]);
}

#[test]
fn workers_ride_out_a_database_that_goes_away() {
    let server = crate::pg::PgServer::start();
    let url = server.fresh_db();
    let ws = Workspace::new();
    let q = ["--store", url.as_str()];
    let mock = Mock::start(Duration::from_millis(300));
    project(&ws);
    mock.configure(&ws);
    let tasks: Vec<Value> = (0..10).map(|i| fix_task(&format!("t{i}"))).collect();
    task_file(&ws, "tasks.jsonl", &tasks);
    ws.kiln(&["batch", "submit", "tasks.jsonl", "--store", &url], &[])
        .expect_code(0);
    let workers: Vec<_> = (0..2).map(|_| spawn_worker(&ws, &q, "4")).collect();
    wait_until("two tasks done", Duration::from_secs(60), || {
        results_in(&ws, &q)
            .iter()
            .filter(|r| r["status"] == "success")
            .count()
            >= 2
    });
    server.stop();
    std::thread::sleep(Duration::from_millis(1500));
    server.start_again();
    let outs: Vec<Run> = workers.into_iter().map(finish).collect();
    let err: String = outs.iter().map(|o| o.stderr()).collect();
    for o in &outs {
        o.expect_code(0);
    }
    assert!(err.contains("warning: store unreachable while"), "{err}");
    assert!(err.contains("retrying in"), "{err}");
    assert!(err.contains("store reachable again"), "{err}");
    assert!(!err.contains(crate::pg::PASSWORD), "{err}");
    let results = results_in(&ws, &q);
    assert_eq!(results.len(), 10);
    for r in &results {
        assert_eq!(r["status"], "success", "{r}");
    }
}

fn git(dir: &std::path::Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@localhost"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn a_git_task_runs_at_its_revision_in_its_subdirectory() {
    let ws = Workspace::new();
    let mock = Mock::start(Duration::ZERO);
    ws.write("repo/sub/main.c", BROKEN_C);
    let repo = ws.root().join("repo");
    git(&repo, &["init", "-q"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "broken"]);
    let rev = git(&repo, &["rev-parse", "HEAD"]);
    // A later commit the task must not see.
    ws.write("repo/sub/main.c", "int main(void) { return 0; }\n");
    git(&repo, &["commit", "-qam", "rewritten"]);
    mock.configure(&ws);
    let mut t = fix_task("g");
    t["repo"] = "repo".into();
    t["rev"] = rev.into();
    t["dir"] = "sub".into();
    task_file(&ws, "git.jsonl", &[t]);
    let r = ws.kiln(&["batch", "run", "git.jsonl", "--json"], &[KEY]);
    r.expect_code(0);
    let res = &lines(&r)[0];
    assert_eq!(res["status"], "success", "{res}");
    let diff = res["diff"].as_str().unwrap();
    assert!(
        diff.contains("+++ b/sub/main.c") && diff.contains("+    int x = 1;"),
        "{diff}"
    );
    // Issue 34: the finished task's checkout is gone, and so is kiln's state for it; its
    // log stays. With --keep-checkouts it is kept.
    assert_eq!(res["checkout"], "", "{res}");
    let checkouts = |ws: &Workspace| -> Vec<String> {
        let dir = ws.state_home().join("kiln/workspaces");
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| std::fs::read_to_string(e.path().join("workspace.json")).ok())
            .filter(|j| j.contains("/checkout"))
            .collect()
    };
    assert_eq!(checkouts(&ws), Vec::<String>::new());
    let r = ws.kiln(
        &[
            "batch",
            "run",
            "git.jsonl",
            "--batch",
            "kept",
            "--keep-checkouts",
            "--json",
        ],
        &[KEY],
    );
    r.expect_code(0);
    let kept = lines(&r)[0]["checkout"].as_str().unwrap().to_string();
    assert!(
        std::path::Path::new(&kept).join("sub/main.c").is_file(),
        "{kept}"
    );
    assert_eq!(checkouts(&ws).len(), 1);
}

#[test]
fn budgets_pass_to_each_task_and_a_spent_batch_budget_stops_claims() {
    let ws = Workspace::new();
    let mock = Mock::start(Duration::ZERO);
    project(&ws);
    mock.configure(&ws);
    let tasks: Vec<Value> = (0..5).map(|i| fix_task(&format!("t{i}"))).collect();
    task_file(&ws, "b.jsonl", &tasks);
    // Each fix asks once for 25 tokens: the batch's 50 are spent after two tasks.
    let r = ws.kiln(
        &[
            "batch",
            "run",
            "b.jsonl",
            "--jobs",
            "1",
            "--batch-max-tokens",
            "50",
            "--json",
        ],
        &[KEY],
    );
    r.expect_code(1);
    let res = lines(&r);
    let statuses: Vec<&str> = res.iter().map(|r| r["status"].as_str().unwrap()).collect();
    assert_eq!(
        statuses,
        ["success", "success", "queued", "queued", "queued"]
    );
    assert!(
        r.stderr()
            .contains("budget is spent: 3 tasks were not started"),
        "{}",
        r.stderr()
    );
    assert_eq!(mock.requests(), 2);
    // Status says the budget is spent and what will not run; --watch returns, since
    // nothing more can happen.
    let st = ws.kiln(&["batch", "status", "--watch"], &[]);
    st.expect_code(0);
    assert!(
        st.stdout()
            .contains("budget is spent: 3 queued tasks will not run"),
        "{}",
        st.stdout()
    );
    let st = ws.kiln(&["batch", "status", "--json"], &[]);
    assert_eq!(st.json()["budget_spent"], "tokens", "{}", st.stdout());
    // A per-task cap reaches each task: one token is too few for any request.
    task_file(&ws, "c.jsonl", &tasks[..2]);
    let r = ws.kiln(
        &["batch", "run", "c.jsonl", "--max-tokens", "1", "--json"],
        &[KEY],
    );
    r.expect_code(1);
    for t in lines(&r) {
        assert_eq!(
            (t["status"].as_str(), t["stop_reason"].as_str()),
            (Some("failed"), Some("budget")),
            "{t}"
        );
    }
    assert_eq!(mock.requests(), 2);
}

#[test]
fn status_without_a_batch_says_so_and_creates_nothing() {
    let ws = Workspace::new();
    for args in [&["batch", "status"][..], &["batch", "results", "--json"]] {
        let r = ws.kiln(args, &[]);
        r.expect_code(2);
        assert!(r.stderr().contains("no batch in"), "{}", r.stderr());
    }
    assert!(std::fs::read_dir(ws.root()).unwrap().next().is_none());
}

#[test]
fn a_task_whose_workers_keep_dying_ends_dead() {
    let ws = Workspace::new();
    let q = ["--dir", "q"];
    let mock = Mock::start(Duration::ZERO);
    project(&ws);
    mock.configure(&ws);
    let mut t = fix_task("doomed");
    t["prompt"] = "SLOW-TASK".into();
    task_file(&ws, "tasks.jsonl", &[t]);
    ws.kiln(&["batch", "submit", "tasks.jsonl", "--dir", "q"], &[])
        .expect_code(0);
    let mut a = spawn_worker(&ws, &q, "1");
    task_running_on(&ws, &q, a.id());
    a.kill().unwrap();
    a.wait().unwrap();
    let mut args = vec![
        "worker",
        "--once",
        "--lease",
        "1",
        "--poll",
        "0.2",
        "--max-attempts",
        "1",
    ];
    args.extend_from_slice(&q);
    let b = ws.kiln(&args, &[KEY]);
    b.expect_code(0);
    assert!(
        b.stderr()
            .contains("tasks/doomed is dead: its worker went away in each of its 1 attempt ("),
        "{}",
        b.stderr()
    );
    let r = &results_in(&ws, &q)[0];
    assert_eq!(
        (r["status"].as_str(), r["attempts"].as_i64()),
        (Some("dead"), Some(1)),
        "{r}"
    );
    assert!(mock.requests() <= 1);
}

/// The local batch directory lives in kiln's state directory: a repository that ships
/// `.kiln/batches` as a link (here to a directory standing for the user's home) gets nothing
/// written through it, and `kiln history --store` on the batch's store sees the runs.
#[test]
fn a_batch_directory_planted_in_the_workspace_is_never_used() {
    let ws = Workspace::new();
    let mock = Mock::start(Duration::ZERO);
    project(&ws);
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(ws.root().join(".kiln")).unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), ws.root().join(".kiln/batches")).unwrap();
    mock.configure(&ws);
    task_file(&ws, "t.jsonl", &[fix_task("f1")]);
    ws.kiln(&["batch", "run", "t.jsonl"], &[KEY]).expect_code(0);
    assert_eq!(
        std::fs::read_dir(elsewhere.path()).unwrap().count(),
        0,
        "written through the planted link"
    );
    let status = ws.kiln(&["batch", "status", "--json"], &[]);
    assert_eq!(
        status.json()["success"].as_u64(),
        Some(1),
        "{}",
        status.stdout()
    );
}

/// A task's programs may write its checkout's `.git/config` (here a clean filter, wired up by
/// `.gitattributes`); the diff kiln takes afterwards runs git confined to the checkout, so the
/// filter cannot touch anything outside it (on the worker's account, with its keys).
#[test]
fn the_diff_after_a_task_runs_git_confined_to_its_checkout() {
    let ws = Workspace::new();
    let mock = Mock::start(Duration::ZERO);
    project(&ws);
    let outside = tempfile::tempdir().unwrap();
    let marker = outside.path().join("pwned");
    ws.write(
        "proj/plant.sh",
        &format!(
            "printf '[filter \"x\"]\\n\\tclean = touch {m} && cat\\n' >> .git/config\nprintf '* filter=x\\n' > .gitattributes\necho changed >> notes.txt\nexit 0\n",
            m = marker.display()
        ),
    );
    mock.configure(&ws);
    let task = json!({"id": "plant", "repo": "proj", "kind": "fix", "cmd": "sh plant.sh {file}",
        "targets": ["main.c"]});
    task_file(&ws, "t.jsonl", &[task]);
    let r = ws.kiln(&["batch", "run", "t.jsonl", "--json"], &[KEY]);
    let results = lines(&r);
    assert_eq!(results.len(), 1, "{}\n{}", r.stdout(), r.stderr());
    assert!(
        !marker.exists(),
        "the repository's filter ran outside the checkout"
    );
}

/// A task's `dir` that the repository made a link (here to a directory standing for the
/// worker's own files) does not move the run out of its checkout.
#[test]
fn a_task_dir_that_is_a_link_out_of_the_checkout_is_refused() {
    let ws = Workspace::new();
    let mock = Mock::start(Duration::ZERO);
    project(&ws);
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("main.c"), BROKEN_C).unwrap();
    std::os::unix::fs::symlink(outside.path(), ws.root().join("proj/app")).unwrap();
    mock.configure(&ws);
    let mut task = fix_task("linked");
    task["dir"] = json!("app");
    task_file(&ws, "t.jsonl", &[task]);
    let r = ws.kiln(&["batch", "run", "t.jsonl", "--json"], &[KEY]);
    let results = lines(&r);
    assert_eq!(results.len(), 1, "{}\n{}", r.stdout(), r.stderr());
    assert_ne!(results[0]["status"], "success", "{:?}", results[0]);
    assert!(
        results[0]["error"]
            .as_str()
            .unwrap_or("")
            .contains("is not a directory of the checkout"),
        "{:?}",
        results[0]
    );
    assert_eq!(
        std::fs::read_to_string(outside.path().join("main.c")).unwrap(),
        BROKEN_C,
        "the run edited a file outside its checkout"
    );
}

/// Issue 31 item 11: a task that fails carries the reason from its run's result (the runner's
/// last error, the loop's summary), not the last progress line of the child's stderr; a local
/// repository with no commits is refused, saying so.
#[test]
fn a_failed_task_carries_its_reason_and_an_empty_repository_is_refused() {
    let ws = Workspace::new();
    let mock = Mock::start(Duration::ZERO);
    // The mock's fix (a SEARCH for `int x = 1`) does not fit this file: the loop cannot
    // mend it, and the compiler's complaint is the reason.
    ws.write(
        "stuck/main.c",
        "int main(void) {\n    return undeclared_thing;\n}\n",
    );
    ws.write("empty/main.c", BROKEN_C);
    git(&ws.root().join("empty"), &["init", "-q"]);
    mock.configure(&ws);
    let mut stuck = fix_task("stuck");
    stuck["repo"] = "stuck".into();
    stuck["limits"] = json!({"max_iters": 2});
    let mut empty = fix_task("empty");
    empty["repo"] = "empty".into();
    task_file(&ws, "t.jsonl", &[stuck, empty]);
    let r = ws.kiln(&["batch", "run", "t.jsonl", "--json"], &[KEY]);
    let results = lines(&r);
    assert_eq!(results.len(), 2, "{}\n{}", r.stdout(), r.stderr());
    let by_id = |id: &str| results.iter().find(|x| x["id"] == id).unwrap().clone();
    let stuck = by_id("stuck");
    assert_eq!(stuck["status"], "failed", "{stuck}");
    let why = stuck["error"].as_str().unwrap_or_default();
    assert!(why.contains("undeclared_thing"), "{stuck}");
    assert!(!why.contains("compiling"), "{stuck}");
    let empty = by_id("empty");
    assert_eq!(empty["status"], "error", "{empty}");
    assert!(
        empty["error"]
            .as_str()
            .unwrap_or_default()
            .contains("has no commits"),
        "{empty}"
    );
}

/// A tmpfs mounted for a test, unmounted when dropped.
struct Tmpfs(std::path::PathBuf);

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// Issue 35: a worker whose scratch is a full disk (a 256 KiB tmpfs) gives each task it
/// claims back with its attempts unchanged, backs off, and after three such checkouts in a
/// row stops claiming, exit 1, saying why; a healthy worker runs every task, and none ends
/// `error` because of the other's disk.
#[test]
fn a_worker_with_a_full_disk_gives_its_tasks_back_and_a_healthy_one_runs_them() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: mounting a small tmpfs needs root");
        return;
    }
    let ws = Workspace::new();
    let mock = Mock::start(Duration::ZERO);
    project(&ws);
    mock.configure(&ws);
    let tasks: Vec<Value> = (0..6).map(|i| fix_task(&format!("t{i}"))).collect();
    task_file(&ws, "tasks.jsonl", &tasks);
    ws.kiln(&["batch", "submit", "tasks.jsonl", "--dir", "q"], &[])
        .expect_code(0);
    let full = ws.path().join("full");
    std::fs::create_dir_all(&full).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=256k", "tmpfs"])
        .arg(&full)
        .status()
        .unwrap();
    if !mounted.success() {
        eprintln!("skipped: this machine refuses to mount a tmpfs");
        return;
    }
    let _unmount = Tmpfs(full.clone());
    let scratch = full.join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    // Fill the disk.
    let filler = vec![0u8; 16 * 1024];
    let mut f = std::fs::File::create(full.join("filler")).unwrap();
    while std::io::Write::write_all(&mut f, &filler).is_ok() {}
    drop(f);

    let broken_q = ["--dir", "q", "--scratch", scratch.to_str().unwrap()];
    let broken = spawn_worker(&ws, &broken_q, "4");
    // The broken worker has the queue to itself for a moment: it claims first.
    std::thread::sleep(Duration::from_millis(800));
    let healthy = spawn_worker(&ws, &["--dir", "q"], "4");
    let b = finish(broken);
    let h = finish(healthy);
    h.expect_code(0);
    b.expect_code(1);
    let err = b.stderr();
    assert!(
        err.contains("given back, attempts unchanged") && err.contains("stops claiming"),
        "{err}"
    );
    let results = results_in(&ws, &["--dir", "q"]);
    assert_eq!(results.len(), 6);
    for r in &results {
        assert_eq!(r["status"], "success", "{r}");
        assert_eq!(r["attempts"], 1, "a given-back attempt is not counted: {r}");
    }
}

/// Issue 35: a worker started while its database is down waits for it, retrying with backoff
/// and saying so, then runs the queue; `--connect-timeout` ends the wait (exit 2, naming it).
#[test]
fn a_worker_started_before_its_database_waits_for_it() {
    let server = crate::pg::PgServer::start();
    let url = server.fresh_db();
    let ws = Workspace::new();
    let q = ["--store", url.as_str()];
    let mock = Mock::start(Duration::ZERO);
    project(&ws);
    mock.configure(&ws);
    let tasks: Vec<Value> = (0..2).map(|i| fix_task(&format!("t{i}"))).collect();
    task_file(&ws, "tasks.jsonl", &tasks);
    ws.kiln(&["batch", "submit", "tasks.jsonl", "--store", &url], &[])
        .expect_code(0);
    server.stop();
    let worker = spawn_worker(&ws, &q, "4");
    std::thread::sleep(Duration::from_millis(1500));
    server.start_again();
    let out = finish(worker);
    out.expect_code(0);
    let err = out.stderr();
    assert!(
        err.contains("store unreachable at start-up") && err.contains("retrying in"),
        "{err}"
    );
    assert!(!err.contains(crate::pg::PASSWORD), "{err}");
    let results = results_in(&ws, &q);
    assert_eq!(results.len(), 2);
    assert!(
        results.iter().all(|r| r["status"] == "success"),
        "{results:?}"
    );

    server.stop();
    let r = ws.kiln(
        &[
            "worker",
            "--once",
            "--connect-timeout",
            "1",
            "--store",
            &url,
        ],
        &[KEY],
    );
    r.expect_code(2);
    assert!(r.stderr().contains("--connect-timeout"), "{}", r.stderr());
}

/// F18: a rerun after a task line was edited (same id, another spec) is refused, naming the
/// task and how to run it as written, instead of reporting the old line's result; an
/// unchanged rerun still skips the finished task, and a new batch id runs the edited line.
#[test]
fn a_rerun_of_an_edited_task_is_refused_instead_of_reporting_the_old_result() {
    let ws = Workspace::new();
    let mock = Mock::start(Duration::ZERO);
    ws.write("proj/main.c", "int main(void) { return 0; }\n");
    mock.configure(&ws);
    let mut task = fix_task("t1");
    task["cmd"] = "true".into();
    task_file(&ws, "t.jsonl", std::slice::from_ref(&task));
    let first = ws.kiln(&["batch", "run", "t.jsonl", "--json"], &[KEY]);
    first.expect_code(0);
    let again = ws.kiln(&["batch", "run", "t.jsonl"], &[KEY]);
    again.expect_code(0);
    assert!(
        again.stderr().contains("0 new, 1 already finished"),
        "{}",
        again.stderr()
    );
    task["cmd"] = "false".into();
    task["limits"] = json!({"max_iters": 1});
    task_file(&ws, "t.jsonl", std::slice::from_ref(&task));
    let edited = ws.kiln(&["batch", "run", "t.jsonl", "--json"], &[KEY]);
    edited.expect_code(2);
    let err = edited.stderr();
    assert!(
        err.contains("t1") && err.contains("another spec") && err.contains("--batch NEW"),
        "{err}"
    );
    assert!(lines(&edited).is_empty(), "{}", edited.stdout());
    let fresh = ws.kiln(
        &["batch", "run", "t.jsonl", "--batch", "edited", "--json"],
        &[KEY],
    );
    let results = lines(&fresh);
    assert_eq!(results.len(), 1, "{}\n{}", fresh.stdout(), fresh.stderr());
    assert_ne!(results[0]["status"], "success", "{}", results[0]);
}

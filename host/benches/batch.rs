//! Batch benchmarks. (1) Queue overhead per task: claim + 3 heartbeats + completion, median
//! over 200 tasks, on SQLite and (when PostgreSQL is installed) on a throwaway PostgreSQL.
//! (2) Wall time for 40 small fix tasks (gcc over one broken C file, a mock model on
//! 127.0.0.1 answering at once) run by 1, 2 and 4 `kiln worker` processes sharing a queue,
//! against the same tasks run one after another with plain `kiln fix`. Prints the figures.
//! Run with `cargo bench --bench batch`.
// Benchmarks set up their fixtures as they like (clippy.toml: only the writer writes, in kiln).
#![allow(clippy::disallowed_methods)]

#[path = "../../tests/integration/pg.rs"]
mod pg;

use kiln::batch::{Budgets, Queue, Task};
use kiln::task_spec::{Kind, TaskSpec};
#[path = "common/fix_mock.rs"]
mod fix_mock;
use fix_mock::{BROKEN_C, mock};
use serde_json::{Value, json};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// claim, three heartbeats and the completion of each of `n` tasks: medians of each part
/// and of the whole.
fn queue_overhead(mut q: Queue, label: &str, n: usize) {
    let tasks: Vec<Task> = (0..n)
        .map(|i| Task {
            id: format!("t{i}"),
            repo: ".".into(),
            rev: None,
            dir: None,
            spec: {
                let mut s = TaskSpec::new(Kind::Fix);
                s.targets = vec!["main.c".into()];
                s
            },
        })
        .collect();
    q.submit("bench", &tasks, &Budgets::default()).unwrap();
    let (mut claim, mut beat, mut done, mut total) = (vec![], vec![], vec![], vec![]);
    for _ in 0..n {
        let t0 = Instant::now();
        let c = q.claim(Some("bench"), "w", 60_000, 3).unwrap().0.unwrap();
        let t1 = Instant::now();
        for _ in 0..3 {
            assert!(q.heartbeat(&c, 60_000).unwrap());
        }
        let t2 = Instant::now();
        let r = json!({"status": "success", "diff": "x".repeat(2000)});
        q.complete(&c, "success", Some(0.001), 100, &r).unwrap();
        let t3 = Instant::now();
        claim.push(t1 - t0);
        beat.push((t2 - t1) / 3);
        done.push(t3 - t2);
        total.push(t3 - t0);
    }
    println!(
        "queue overhead per task ({label}, {n} tasks): median {:.2} ms (claim {:.2} ms, heartbeat {:.2} ms each, completion {:.2} ms)",
        ms(median(total)),
        ms(median(claim)),
        ms(median(beat)),
        ms(median(done))
    );
}

/// `kiln` in `dir` with a clean environment of its own.
fn kiln(home: &Path, dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kiln"));
    cmd.args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", kiln_env::env().var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("XDG_STATE_HOME", home.join("state"))
        .env(
            "KILN_CACHE_DIR",
            Path::new(env!("CARGO_TARGET_TMPDIR")).join("kiln-cache"),
        )
        .env("KILN_CONFIG", home.join("no-config.toml"))
        .env("KILN_YES", "1")
        .env("OPENAI_API_KEY", "sk-bench")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

fn fix_args(url: &str) -> Vec<String> {
    [
        "fix",
        "--base-url",
        url,
        "--model",
        "fixer",
        "--cmd",
        "gcc -fsyntax-only {file}",
        "--file",
        "main.c",
    ]
    .map(String::from)
    .to_vec()
}

/// 40 tasks one after another with plain `kiln fix`, each in a fresh copy of the project.
fn sequential(url: &str, n: usize) -> Duration {
    let home = tempfile::tempdir().unwrap();
    let args = fix_args(url);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let start = Instant::now();
    for i in 0..n {
        let dir = home.path().join(format!("p{i}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("main.c"), BROKEN_C).unwrap();
        let out = kiln(home.path(), &dir, &args).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    start.elapsed()
}

/// Submit 40 tasks to a shared queue (`q`: `--dir q` or `--store URL`) and run `workers`
/// `kiln worker --once` processes; wall time from submit to the last worker's exit.
fn fleet(url: &str, n: usize, workers: usize, q: &[&str]) -> Duration {
    let home = tempfile::tempdir().unwrap();
    let p = home.path();
    std::fs::create_dir_all(p.join("proj")).unwrap();
    std::fs::write(p.join("proj/main.c"), BROKEN_C).unwrap();
    // The workers' model and the local repositories they may copy are their user's
    // configuration; a task names neither.
    std::fs::write(
        p.join("no-config.toml"),
        format!(
            "[llm]\nbase_url = \"{url}\"\nmodel = \"fixer\"\n\n[batch]\nlocal_repos = [\"{}\"]\n",
            p.display()
        ),
    )
    .unwrap();
    let lines: String = (0..n)
        .map(|i| {
            format!(
                "{}\n",
                json!({"id": format!("t{i}"), "repo": "proj", "kind": "fix",
                    "cmd": "gcc -fsyntax-only {file}", "targets": ["main.c"]})
            )
        })
        .collect();
    std::fs::write(p.join("tasks.jsonl"), lines).unwrap();
    let start = Instant::now();
    let out = kiln(p, p, &[&["batch", "submit", "tasks.jsonl"][..], q].concat())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let children: Vec<_> = (0..workers)
        .map(|_| {
            kiln(
                p,
                p,
                &[&["worker", "--once", "--poll", "0.1"][..], q].concat(),
            )
            .spawn()
            .unwrap()
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let took = start.elapsed();
    let out = kiln(p, p, &[&["batch", "results", "--json"][..], q].concat())
        .output()
        .unwrap();
    let ok = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| serde_json::from_str::<Value>(l).is_ok_and(|v| v["status"] == "success"))
        .count();
    assert_eq!(ok, n, "not every task succeeded");
    took
}

fn main() {
    let d = tempfile::tempdir().unwrap();
    let file = kiln::store::StoreUrl::Sqlite(d.path().join("q.db"));
    let q = Queue::new(kiln::batch::db::open(&file).unwrap()).unwrap();
    queue_overhead(q, "SQLite", 200);
    let have_pg = Command::new("sh")
        .args([
            "-c",
            "ls /usr/lib/postgresql/*/bin/initdb || command -v initdb",
        ])
        .output()
        .is_ok_and(|o| o.status.success());
    let server = have_pg.then(pg::PgServer::start);
    if let Some(server) = &server {
        let url: kiln::store::StoreUrl = server.fresh_db().parse().unwrap();
        let q = Queue::new(kiln::batch::db::open(&url).unwrap()).unwrap();
        queue_overhead(q, "PostgreSQL on 127.0.0.1", 200);
    } else {
        println!("queue overhead per task (PostgreSQL): skipped, PostgreSQL is not installed");
    }
    let url = mock(Duration::ZERO);
    let n = 40;
    // Warm the compile cache first.
    sequential(&url, 1);
    let seq = sequential(&url, n);
    println!(
        "{n} fix tasks one after another with plain `kiln fix`: {:.2} s",
        seq.as_secs_f64()
    );
    let mut queues: Vec<(String, Vec<String>)> = vec![(
        "shared SQLite queue".into(),
        vec!["--dir".into(), "q".into()],
    )];
    if let Some(server) = &server {
        queues.push((
            "PostgreSQL".into(),
            vec!["--store".into(), server.fresh_db()],
        ));
    }
    for (label, q) in &queues {
        for w in [1, 2, 4] {
            if label == "PostgreSQL" {
                // A fresh database per run: the same batch id again would be a no-op.
                let db = server.as_ref().unwrap().fresh_db();
                let t = fleet(&url, n, w, &["--store", &db]);
                report(n, w, label, t, seq);
            } else {
                let q: Vec<&str> = q.iter().map(String::as_str).collect();
                report(n, w, label, fleet(&url, n, w, &q), seq);
            }
        }
    }
}

fn report(n: usize, w: usize, label: &str, t: Duration, seq: Duration) {
    println!(
        "{n} fix tasks with {w} `kiln worker` ({label}): {:.2} s ({:.2}x plain)",
        t.as_secs_f64(),
        seq.as_secs_f64() / t.as_secs_f64()
    );
}

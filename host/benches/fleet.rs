//! Fleet throughput: tasks per minute of `kiln batch run -j N`, of N `kiln worker`s sharing one
//! store (an SQLite `--dir`, and a throwaway PostgreSQL when one is installed), and of the plain
//! baseline `xargs -P N` running the same one-task `kiln fix` commands, for N = 1, 2, 4, 6.
//! Each task is a small fix (gcc over one broken C file) whose model is a mock over real HTTP on
//! 127.0.0.1 answering after a fixed latency. Prints the median of 3 runs of each and its
//! ratio to `xargs` at the same N.
//!
//! Run with `cargo bench --bench fleet` (release) or `cargo bench --bench fleet --profile dev`.
//! Settings (environment): `FLEET_TASKS` (default 24), `FLEET_LATENCY_MS` (default 500),
//! `FLEET_RUNS` (default 3), `FLEET_N` (default `1,2,4,6`), `FLEET_PG=0` to skip PostgreSQL.
// Benchmarks set up their fixtures as they like (clippy.toml: only the writer writes, in kiln).
#![allow(clippy::disallowed_methods)]

#[path = "../../tests/integration/pg.rs"]
mod pg;

#[path = "common/fix_mock.rs"]
mod fix_mock;
use fix_mock::{BROKEN_C, mock};
use serde_json::{Value, json};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BUILD: &str = "gcc -fsyntax-only {file}";

fn setting(name: &str, default: usize) -> usize {
    kiln_env::env()
        .var(name)
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A fresh home: the user's config (model endpoint, the local repositories a worker may copy),
/// the project every task fixes, and the task file.
struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    fn new(url: &str, tasks: usize) -> Home {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        std::fs::create_dir_all(p.join("proj")).unwrap();
        std::fs::write(p.join("proj/main.c"), BROKEN_C).unwrap();
        std::fs::write(
            p.join("config.toml"),
            format!(
                "[llm]\nbase_url = \"{url}\"\nmodel = \"fixer\"\n\n[batch]\nlocal_repos = [\"{}\"]\n",
                p.display()
            ),
        )
        .unwrap();
        let lines: String = (0..tasks)
            .map(|i| {
                format!(
                    "{}\n",
                    json!({"id": format!("t{i}"), "repo": "proj", "kind": "fix",
                        "cmd": BUILD, "targets": ["main.c"]})
                )
            })
            .collect();
        std::fs::write(p.join("tasks.jsonl"), lines).unwrap();
        Home { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `kiln ARGS` in this home with a clean environment of its own.
    fn kiln(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_kiln"));
        cmd.args(args);
        self.env(&mut cmd);
        cmd
    }

    /// This home's clean environment, directory and pipes for `cmd`.
    fn env(&self, cmd: &mut Command) {
        let home = self.path();
        cmd.current_dir(home)
            .env_clear()
            .env("PATH", kiln_env::env().var("PATH").unwrap_or_default())
            .env("HOME", home)
            .env("XDG_STATE_HOME", home.join("state"))
            .env("KILN_CACHE_DIR", cache_dir())
            .env("KILN_CONFIG", home.join("config.toml"))
            .env("KILN_YES", "1")
            .env("OPENAI_API_KEY", "sk-bench")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
    }

    /// Successful results of the batch in `q` (`--dir D` or `--store URL`).
    fn successes(&self, q: &[&str]) -> usize {
        let out = self
            .kiln(&[&["batch", "results", "tasks", "--json"][..], q].concat())
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| serde_json::from_str::<Value>(l).is_ok_and(|v| v["status"] == "success"))
            .count()
    }
}

fn cache_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("kiln-cache")
}

fn ok(out: std::process::Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `kiln batch run tasks.jsonl -j N`: wall time.
fn batch_run(url: &str, tasks: usize, n: usize) -> Duration {
    let home = Home::new(url, tasks);
    let jobs = n.to_string();
    let start = Instant::now();
    let out = home
        .kiln(&[
            "batch",
            "run",
            "tasks.jsonl",
            "-j",
            &jobs,
            "--dir",
            "b",
            "--poll",
            "0.1",
        ])
        .output()
        .unwrap();
    let took = start.elapsed();
    ok(out, "kiln batch run");
    assert_eq!(
        home.successes(&["--dir", "b"]),
        tasks,
        "batch run: not every task succeeded"
    );
    took
}

/// `kiln batch submit` to the store `q`, then N `kiln worker --once` on it: wall time from the
/// submit to the last worker's exit.
fn workers(url: &str, tasks: usize, n: usize, q: &[&str]) -> Duration {
    let home = Home::new(url, tasks);
    let start = Instant::now();
    ok(
        home.kiln(&[&["batch", "submit", "tasks.jsonl"][..], q].concat())
            .output()
            .unwrap(),
        "kiln batch submit",
    );
    let children: Vec<_> = (0..n)
        .map(|_| {
            home.kiln(&[&["worker", "--once", "--poll", "0.1"][..], q].concat())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        ok(c.wait_with_output().unwrap(), "kiln worker");
    }
    let took = start.elapsed();
    assert_eq!(
        home.successes(q),
        tasks,
        "workers: not every task succeeded"
    );
    took
}

/// The same tasks as one-task `kiln fix` commands, N at once by `xargs -P N`, each in its own
/// copy of the project (made before the clock starts): wall time.
fn xargs(url: &str, tasks: usize, n: usize) -> Duration {
    let home = Home::new(url, tasks);
    let p = home.path();
    let mut dirs = String::new();
    for i in 0..tasks {
        let d = p.join(format!("p{i}"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("main.c"), BROKEN_C).unwrap();
        dirs.push_str(&format!("{}\n", d.display()));
    }
    let script = format!(
        "cd \"$1\" && exec \"$0\" fix --cmd '{BUILD}' --file main.c >/dev/null 2>&1 </dev/null"
    );
    let mut xargs = Command::new("xargs");
    xargs
        .args(["-P", &n.to_string(), "-n", "1", "sh", "-c", &script])
        .arg(env!("CARGO_BIN_EXE_kiln"));
    home.env(&mut xargs);
    let mut child = xargs.stdin(Stdio::piped()).spawn().unwrap();
    let start = Instant::now();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(dirs.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let took = start.elapsed();
    ok(out, "xargs -P N kiln fix");
    for i in 0..tasks {
        let fixed = std::fs::read_to_string(p.join(format!("p{i}/main.c"))).unwrap();
        assert!(fixed.contains("int x = 1;"), "xargs: task {i} not fixed");
    }
    took
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn per_minute(tasks: usize, d: Duration) -> f64 {
    tasks as f64 * 60.0 / d.as_secs_f64()
}

fn main() {
    let tasks = setting("FLEET_TASKS", 24);
    let runs = setting("FLEET_RUNS", 3);
    let latency = Duration::from_millis(setting("FLEET_LATENCY_MS", 500) as u64);
    let ns: Vec<usize> = kiln_env::env()
        .var("FLEET_N")
        .unwrap_or("1,2,4,6")
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let have_pg = kiln_env::env().var("FLEET_PG") != Some("0")
        && Command::new("sh")
            .args([
                "-c",
                "ls /usr/lib/postgresql/*/bin/initdb || command -v initdb",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
    let server = have_pg.then(pg::PgServer::start);
    let url = mock(latency);
    // Warm the compile cache: every mode then loads the plugins from it.
    xargs(&url, 1, 1);
    let mut modes = vec![
        "xargs -P N kiln fix",
        "kiln batch run -j N",
        "N kiln worker, SQLite --dir",
    ];
    if server.is_some() {
        modes.push("N kiln worker, PostgreSQL");
    } else {
        println!("(PostgreSQL is not installed: its workers are skipped)");
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "{tasks} fix tasks, model latency {} ms, median of {runs} runs; load average at start: {}",
        latency.as_millis(),
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    // times[n][mode]: one wall time per run. Runs are interleaved (each round runs every mode
    // at every N once) so a change in the machine's load spreads over all of them.
    let mut times = vec![vec![Vec::new(); modes.len()]; ns.len()];
    for _ in 0..runs {
        for (i, &n) in ns.iter().enumerate() {
            for (m, mode) in modes.iter().enumerate() {
                let t = match *mode {
                    "xargs -P N kiln fix" => xargs(&url, tasks, n),
                    "kiln batch run -j N" => batch_run(&url, tasks, n),
                    "N kiln worker, SQLite --dir" => workers(&url, tasks, n, &["--dir", "q"]),
                    _ => {
                        // A fresh database per run: the same batch id again would be a no-op.
                        let db = server.as_ref().unwrap().fresh_db();
                        workers(&url, tasks, n, &["--store", &db])
                    }
                };
                times[i][m].push(t);
            }
        }
    }
    println!(
        "{:>2}  {:<30} {:>9} {:>11} {:>9}",
        "N", "", "median s", "tasks/min", "vs xargs"
    );
    for (i, &n) in ns.iter().enumerate() {
        let base = median(times[i][0].clone());
        for (m, mode) in modes.iter().enumerate() {
            let t = median(times[i][m].clone());
            println!(
                "{n:>2}  {mode:<30} {:>9.2} {:>11.1} {:>8.2}x",
                t.as_secs_f64(),
                per_minute(tasks, t),
                base.as_secs_f64() / t.as_secs_f64()
            );
        }
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "load average at the end: {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
}

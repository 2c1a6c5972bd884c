//! Start-up benchmark: wall time of the real `kiln` binary. Prints medians of:
//! - `kiln check --cmd true` over one file, cold (an empty compile cache: the command runner
//!   is compiled) and warm (the cache holds it);
//! - `kiln plugin list`, `kiln tool list` and the start of `kiln agent` (from its spawn to its
//!   first request to a mock model on 127.0.0.1) "right after a build", an empty cache, and
//!   with a warm one. The cold runs set `KILN_NO_WARMER=1`, so the figure is the command's own;
//!   one more row is `plugin list` on an empty cache with the background warmer started, the
//!   next run waiting for it to finish.
//!
//! `KILN_BENCH_BASELINE=/path/to/another/kiln` runs the same with that build too, under the
//! same load, for a before/after. Run with `cargo bench --bench startup`. Targets: cold check
//! ≤ 0.2 s (issue 15); plugin list and an agent's start < 200 ms on an empty cache (issue 34).
// Benchmarks set up their fixtures as they like (clippy.toml: only the writer writes, in kiln).
#![allow(clippy::disallowed_methods)]

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

struct Env {
    ws: tempfile::TempDir,
    state: tempfile::TempDir,
}

fn command(kiln: &Path, env: &Env, cache: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(kiln);
    cmd.args(args)
        .current_dir(env.ws.path())
        .env_clear()
        .env("PATH", kiln_env::env().var("PATH").unwrap_or_default())
        .env("HOME", env.ws.path())
        .env("XDG_STATE_HOME", env.state.path())
        .env("KILN_CACHE_DIR", cache)
        .env("KILN_CACHE_KEY", env.state.path().join("cache.key"))
        .env("KILN_CONFIG", env.ws.path().join("no-user-config.toml"))
        .env("KILN_NO_WARMER", "1");
    cmd
}

fn run(kiln: &Path, env: &Env, cache: &Path, args: &[&str]) -> Duration {
    let start = Instant::now();
    let out = command(kiln, env, cache, args).output().expect("run kiln");
    let took = start.elapsed();
    assert!(
        out.status.success(),
        "kiln {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    took
}

/// A mock model that answers every request with a short text, recording when the first
/// request of the current round arrived.
fn mock() -> (String, Arc<Mutex<Option<Instant>>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let first: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
    let seen = first.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { break };
            let seen = seen.clone();
            std::thread::spawn(move || {
                let mut r = BufReader::new(stream.try_clone().unwrap());
                let mut len = 0;
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    seen.lock().unwrap().get_or_insert_with(Instant::now);
                    let l = line.trim_end().to_ascii_lowercase();
                    if l.is_empty() {
                        break;
                    }
                    if let Some(v) = l.strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap_or(0);
                    }
                }
                let mut body = vec![0; len];
                let _ = r.read_exact(&mut body);
                let chunks = [
                    r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":"Nothing to do."}}]}"#,
                    r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
                    r#"{"choices":[],"usage":{"prompt_tokens":20,"completion_tokens":5}}"#,
                ];
                let mut sse: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
                sse.push_str("data: [DONE]\n\n");
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{sse}",
                    sse.len()
                );
            });
        }
    });
    (url, first)
}

/// From spawning `kiln agent` to its first request to the model.
fn agent_start(
    kiln: &Path,
    env: &Env,
    cache: &Path,
    url: &str,
    first: &Mutex<Option<Instant>>,
) -> Duration {
    *first.lock().unwrap() = None;
    let start = Instant::now();
    let out = command(
        kiln,
        env,
        cache,
        &[
            "agent",
            "--base-url",
            url,
            "--model",
            "m",
            "-p",
            "say hi",
            "--json",
        ],
    )
    .stdout(Stdio::null())
    .output()
    .expect("run kiln agent");
    assert!(
        out.status.success(),
        "kiln agent failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    first.lock().unwrap().expect("the agent asked the model") - start
}

fn entries(cache: &Path) -> usize {
    std::fs::read_dir(cache.join("components"))
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().ends_with(".cwasm"))
                .count()
        })
        .unwrap_or(0)
}

/// The medians of one build.
fn bench(kiln: &Path, warmer_row: bool) -> Vec<(String, Duration)> {
    let env = Env {
        ws: tempfile::tempdir().unwrap(),
        state: tempfile::tempdir().unwrap(),
    };
    std::fs::write(env.ws.path().join("a.txt"), "x\n").unwrap();
    let (url, first) = mock();
    let check = ["check", "--cmd", "true", "--file", "a.txt", "--json"];
    let runs = 7;
    let cold = |f: &dyn Fn(&Path) -> Duration, n: usize| -> Duration {
        median(
            (0..n)
                .map(|_| {
                    let cache = tempfile::tempdir().unwrap();
                    f(cache.path())
                })
                .collect(),
        )
    };
    let mut rows = vec![(
        "kiln check --cmd true (empty cache)".to_string(),
        cold(&|c| run(kiln, &env, c, &check), runs),
    )];
    let warm_cache = tempfile::tempdir().unwrap();
    let w = warm_cache.path();
    run(kiln, &env, w, &check);
    run(kiln, &env, w, &["plugin", "list"]);
    // What a lazy build has not compiled yet: every built-in, by hand (a build without the
    // warmer compiled them all for the list).
    let _ = command(kiln, &env, w, &["warm-cache"]).output();
    let warm = |f: &dyn Fn(&Path) -> Duration| median((0..runs).map(|_| f(w)).collect());
    rows.push((
        "kiln check --cmd true (warm cache)".into(),
        warm(&|c| run(kiln, &env, c, &check)),
    ));
    for (name, args) in [
        ("kiln plugin list", &["plugin", "list"][..]),
        ("kiln tool list", &["tool", "list"]),
    ] {
        rows.push((
            format!("{name} (empty cache)"),
            cold(&|c| run(kiln, &env, c, args), 5),
        ));
        rows.push((
            format!("{name} (warm cache)"),
            warm(&|c| run(kiln, &env, c, args)),
        ));
    }
    rows.push((
        "kiln agent, to its first request (empty cache)".into(),
        cold(&|c| agent_start(kiln, &env, c, &url, &first), 5),
    ));
    rows.push((
        "kiln agent, to its first request (warm cache)".into(),
        warm(&|c| agent_start(kiln, &env, c, &url, &first)),
    ));
    if warmer_row {
        // The warmer on: the list returns, the warmer compiles the built-ins in the
        // background (lowest priority); the next run starts once it is done.
        let took = cold(
            &|c| {
                let mut cmd = command(kiln, &env, c, &["plugin", "list"]);
                cmd.env_remove("KILN_NO_WARMER");
                let start = Instant::now();
                assert!(cmd.output().unwrap().status.success());
                let took = start.elapsed();
                let all = entries(w);
                let deadline = Instant::now() + Duration::from_secs(300);
                while (entries(c) < all || kiln::plugin::warm::try_lock(c).unwrap().is_none())
                    && Instant::now() < deadline
                {
                    std::thread::sleep(Duration::from_millis(100));
                }
                took
            },
            5,
        );
        rows.push((
            "kiln plugin list (empty cache, warmer started)".into(),
            took,
        ));
    }
    rows
}

fn main() {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let this = bench(Path::new(env!("CARGO_BIN_EXE_kiln")), true);
    let baseline = std::env::var_os("KILN_BENCH_BASELINE").map(|b| bench(Path::new(&b), false));
    print!("{:<52} {:>10}", "command (median)", "ms");
    if baseline.is_some() {
        print!(" {:>12}", "baseline ms");
    }
    println!();
    for (name, d) in &this {
        print!("{name:<52} {:>10.1}", ms(*d));
        if let Some(b) = &baseline
            && let Some((_, bd)) = b.iter().find(|(n, _)| n == name)
        {
            print!(" {:>12.1}", ms(*bd));
        }
        println!();
    }
}

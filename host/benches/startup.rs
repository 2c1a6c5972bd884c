//! Start-up benchmark: wall time of the real `kiln` binary for `kiln check --cmd true` over one
//! file, cold (an empty compile cache: the command runner is compiled) and warm (the cache
//! holds it), and of `kiln plugin list` cold (every built-in compiled, in parallel). Prints
//! medians. Run with `cargo bench --bench startup`. Target (issue 15): cold check ≤ 0.2 s.

use std::process::Command;
use std::time::{Duration, Instant};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn run(ws: &std::path::Path, cache: &std::path::Path, args: &[&str]) -> Duration {
    let start = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .current_dir(ws)
        .env_clear()
        .env("PATH", kiln_env::env().var("PATH").unwrap_or_default())
        .env("HOME", ws)
        .env("KILN_CACHE_DIR", cache)
        .env("KILN_CONFIG", ws.join("no-user-config.toml"))
        .output()
        .expect("run kiln");
    let took = start.elapsed();
    assert!(
        out.status.success(),
        "kiln {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    took
}

fn main() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("a.txt"), "x\n").unwrap();
    let check = ["check", "--cmd", "true", "--file", "a.txt", "--json"];
    let runs = 7;
    let cold: Vec<Duration> = (0..runs)
        .map(|_| {
            let cache = tempfile::tempdir().unwrap();
            run(ws.path(), cache.path(), &check)
        })
        .collect();
    let cache = tempfile::tempdir().unwrap();
    run(ws.path(), cache.path(), &check);
    let warm: Vec<Duration> = (0..runs)
        .map(|_| run(ws.path(), cache.path(), &check))
        .collect();
    let cold_list: Vec<Duration> = (0..3)
        .map(|_| {
            let cache = tempfile::tempdir().unwrap();
            run(ws.path(), cache.path(), &["plugin", "list"])
        })
        .collect();
    let warm_list: Vec<Duration> = (0..runs)
        .map(|_| run(ws.path(), cache.path(), &["plugin", "list"]))
        .collect();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!("{:<40} {:>10}", "command (median)", "ms");
    println!(
        "{:<40} {:>10.1}",
        "kiln check --cmd true (cold cache)",
        ms(median(cold))
    );
    println!(
        "{:<40} {:>10.1}",
        "kiln check --cmd true (warm cache)",
        ms(median(warm))
    );
    println!(
        "{:<40} {:>10.1}",
        "kiln plugin list (cold cache)",
        ms(median(cold_list))
    );
    println!(
        "{:<40} {:>10.1}",
        "kiln plugin list (warm cache)",
        ms(median(warm_list))
    );
}

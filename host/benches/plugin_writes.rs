//! Plugin file writes through `wasi:filesystem`, which kiln's guard of protected paths checks:
//! the median of a tool call that creates and writes a file in a read-write grant, of one that
//! overwrites an existing file, and of one that only reads (no check), each a fresh instance.
//! Run with `cargo bench --bench plugin_writes` (or `--profile dev` for a debug host).
// Benchmarks set up their fixtures as they like (clippy.toml: only the writer writes, in kiln).
#![allow(clippy::disallowed_methods)]

use kiln::config::Config;
use kiln::plugin::{Runtime, Source, builtin};
use std::path::Path;
use std::time::{Duration, Instant};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let rounds: usize = kiln_env::env()
        .var("KILN_BENCH_ROUNDS")
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let ws = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(ws.path().join("sub/.git")).unwrap();
    std::fs::write(ws.path().join("sub/existing.txt"), "x").unwrap();
    let grant = ws.path().join("grant.toml");
    std::fs::write(
        &grant,
        "[plugins.escape]\nfs = [{ path = \"sub\", access = \"read-write\" }]\n",
    )
    .unwrap();
    let mut config = Config::default();
    config.layer_file(&grant).unwrap();
    let path = Path::new(builtin::TEST_PLUGINS_DIR).join("kiln_test_escape.wasm");
    let bytes = std::fs::read(&path).unwrap();
    let runtime = Runtime::new(Some(cache.path().to_path_buf())).unwrap();
    let plugin = rt
        .block_on(runtime.load(&bytes, Source::File(path), ws.path(), &config))
        .unwrap();
    let call = |args: String| {
        let t = Instant::now();
        let out = rt.block_on(plugin.tool_call("fs", &args)).unwrap();
        let e = t.elapsed();
        out.unwrap();
        e
    };
    let read = |args: &str| {
        let t = Instant::now();
        rt.block_on(plugin.tool_call("read", args))
            .unwrap()
            .unwrap();
        t.elapsed()
    };
    // Warm up.
    for i in 0..50 {
        call(format!(
            r#"{{"op":"create","path":"/workspace/sub/w{i}","content":"hello"}}"#
        ));
    }
    let create = median(
        (0..rounds)
            .map(|i| {
                call(format!(
                    r#"{{"op":"create","path":"/workspace/sub/f{i}","content":"hello"}}"#
                ))
            })
            .collect(),
    );
    let overwrite = median(
        (0..rounds)
            .map(|_| {
                call(
                    r#"{"op":"overwrite","path":"/workspace/sub/existing.txt","content":"hello"}"#
                        .into(),
                )
            })
            .collect(),
    );
    let reading = median(
        (0..rounds)
            .map(|_| read(r#"{"path":"/workspace/sub/existing.txt"}"#))
            .collect(),
    );
    println!("plugin tool call, median of {rounds} (fresh instance each):");
    println!(
        "  create + write a new file   {:>8.1} µs",
        create.as_secs_f64() * 1e6
    );
    println!(
        "  overwrite an existing file  {:>8.1} µs",
        overwrite.as_secs_f64() * 1e6
    );
    println!(
        "  read a file (unchecked)     {:>8.1} µs",
        reading.as_secs_f64() * 1e6
    );
}

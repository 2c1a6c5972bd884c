//! Plugin runtime benchmark: for each built-in plugin, cold load (JIT compile), warm load
//! (from the on-disk cache), instantiate + trivial call, and memory per live instance. Warm
//! load is also split: `signed µs` is the cache lookup alone (read, HMAC check, deserialize
//! from memory), `mmap µs` wasmtime's `deserialize_file` of an unsigned artifact (what the
//! lookup was before entries were signed).
//! Prints medians. Run with `cargo bench --bench plugins`.
//! Targets (issue 2): warm load < 10 ms, instantiate + call < 100 µs.
// Benchmarks set up their fixtures as they like (clippy.toml: only the writer writes, in kiln).
#![allow(clippy::disallowed_methods)]

use kiln::config::Config;
use kiln::plugin::{Runtime, Source, builtin, cache};
use std::time::{Duration, Instant};
use wasmtime::component::Component;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn rss_kib() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    pages * 4
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let ws = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let key = cache.path().with_extension("key");
    let cached = || Runtime::with_cache(Some((cache.path().to_path_buf(), key.clone()))).unwrap();
    let config = Config::default();
    println!(
        "{:<12} {:>10} {:>12} {:>14} {:>12} {:>10} {:>16} {:>10}",
        "plugin",
        "size KiB",
        "cold ms",
        "warm µs",
        "signed µs",
        "mmap µs",
        "inst+call µs",
        "KiB/inst"
    );
    // Extra components to compare (e.g. plugins built from Python or JavaScript):
    // KILN_BENCH_PLUGINS=name=path.wasm:other=path2.wasm
    let extra: Vec<(String, Vec<u8>)> = kiln_env::env()
        .var("KILN_BENCH_PLUGINS")
        .unwrap_or_default()
        .split(':')
        .filter(|s| !s.is_empty())
        .map(|s| {
            let (name, path) = s.split_once('=').expect("name=path");
            (
                name.to_string(),
                std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}")),
            )
        })
        .collect();
    let all: Vec<(String, &[u8])> = builtin::BUILTINS
        .iter()
        .map(|(stem, bytes)| (stem.trim_start_matches("kiln_plugin_").to_string(), *bytes))
        .chain(extra.iter().map(|(n, b)| (n.clone(), b.as_slice())))
        .collect();
    for (stem, bytes) in all {
        let bytes: &[u8] = bytes;
        let cold_rounds = if bytes.len() > 4 << 20 { 2 } else { 5 };
        let cold = median(
            (0..cold_rounds)
                .map(|_| {
                    let r = Runtime::new(None).unwrap();
                    let t = Instant::now();
                    r.check_bytes(bytes, Source::Builtin).unwrap();
                    t.elapsed()
                })
                .collect(),
        );
        cached().check_bytes(bytes, Source::Builtin).unwrap();
        let runtime = cached();
        let warm = median(
            (0..30)
                .map(|_| {
                    let t = Instant::now();
                    let c = runtime.check_bytes(bytes, Source::Builtin).unwrap();
                    let e = t.elapsed();
                    assert!(c.info.from_cache);
                    e
                })
                .collect(),
        );
        let engine = runtime.engine();
        let entry = cache::entry_path(cache.path(), engine, bytes);
        let signer = cache::Signer::load(&key, cache.path()).unwrap();
        let signed = median(
            (0..30)
                .map(|_| {
                    let t = Instant::now();
                    let hit = cache::load(engine, &entry, &signer);
                    let e = t.elapsed();
                    assert!(matches!(hit, cache::Lookup::Hit(_)));
                    e
                })
                .collect(),
        );
        let raw = cache.path().join("unsigned.cwasm");
        std::fs::write(&raw, engine.precompile_component(bytes).unwrap()).unwrap();
        let mmap = median(
            (0..30)
                .map(|_| {
                    let t = Instant::now();
                    // SAFETY: an artifact this engine just compiled.
                    let c = unsafe { Component::deserialize_file(engine, &raw) }.unwrap();
                    let e = t.elapsed();
                    drop(c);
                    e
                })
                .collect(),
        );
        let plugin = rt
            .block_on(runtime.load(bytes, Source::Builtin, ws.path(), &config))
            .unwrap();
        let call = rt.block_on(async {
            let mut v = Vec::new();
            for _ in 0..500 {
                let t = Instant::now();
                plugin.get_manifest().await.unwrap();
                v.push(t.elapsed());
            }
            median(v)
        });
        let per_instance = rt.block_on(async {
            let before = rss_kib();
            let mut held = Vec::new();
            for _ in 0..200 {
                held.push(plugin.hold_instance().await.unwrap());
            }
            let after = rss_kib();
            drop(held);
            (after.saturating_sub(before)) / 200
        });
        println!(
            "{:<12} {:>10} {:>12.1} {:>14.0} {:>12.0} {:>10.0} {:>16.1} {:>10}",
            stem,
            bytes.len() / 1024,
            cold.as_secs_f64() * 1e3,
            warm.as_secs_f64() * 1e6,
            signed.as_secs_f64() * 1e6,
            mmap.as_secs_f64() * 1e6,
            call.as_secs_f64() * 1e6,
            per_instance
        );
    }
    let _ = std::fs::remove_file(&key);
}

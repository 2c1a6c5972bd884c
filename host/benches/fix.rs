//! Fix-loop benchmark: the host's own overhead per iteration (prompt building, edit parsing and
//! applying through the plugin, store writes, events), excluding the runner's process time and
//! the model's time (a replay answers instantly), and the peak memory of a 5-iteration loop.
//! Prints medians over several loops. Run with `cargo bench --bench fix`.
// Benchmarks set up their fixtures as they like (clippy.toml: only the writer writes, in kiln).
#![allow(clippy::disallowed_methods)]

use kiln::config::{Config, grant_runner_consent};
use kiln::engine::{self, Event, FixOptions, ModelSource, Replay};
use kiln::plugin::{PluginKind, Registry, Runtime};
use kiln::store::Store;
use std::collections::BTreeMap;
use std::time::Instant;

fn vm_hwm_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let runtime = Runtime::with_default_cache().unwrap();
    // The output changes every iteration (words, not digits: fingerprints fold digits), so the
    // loop does not stagnate before the fifth edit makes the check pass.
    let cmd = "sh -c \"grep VERSION_ main.c; grep -q VERSION_five main.c\"";
    let words = ["zero", "one", "two", "three", "four", "five"];
    let mut per_iteration_us = Vec::new();
    let mut runner_ms_total = Vec::new();
    for round in 0..7 {
        let dir = tempfile::tempdir().unwrap();
        let file: String = (0..200)
            .map(|i| format!("int value_{i} = {i}; /* line {i} */\n"))
            .collect::<String>()
            + "/* VERSION_zero */\n";
        std::fs::write(dir.path().join("main.c"), &file).unwrap();
        let replay_path = dir.path().join("replay.jsonl");
        let lines: String = (0..5)
            .map(|i| {
                let text = format!("<<<<<<< SEARCH\n/* VERSION_{} */\n=======\n/* VERSION_{} */\n>>>>>>> REPLACE\n", words[i], words[i + 1]);
                serde_json::to_string(&text).unwrap() + "\n"
            })
            .collect();
        std::fs::write(&replay_path, lines).unwrap();
        let mut config = Config::default();
        grant_runner_consent(&mut config, "command", Some(cmd), None).unwrap();
        let reg = rt
            .block_on(Registry::load(&runtime, dir.path(), &config))
            .unwrap();
        let runner = reg.get("command", Some(PluginKind::Runner)).unwrap();
        let format = reg
            .get("search-replace", Some(PluginKind::EditFormat))
            .unwrap();
        let mut store = Store::open(dir.path()).unwrap();
        let mut model = ModelSource::replay(Replay::from_jsonl(&replay_path).unwrap());
        let mut settings = BTreeMap::new();
        settings.insert("cmd".to_string(), cmd.to_string());
        let opts = FixOptions {
            targets: vec!["main.c".into()],
            max_iters: 5,
            runner_settings: settings,
            ..Default::default()
        };
        let (_tx, rx) = tokio::sync::watch::channel(false);
        let mut runner_ms = 0u64;
        let mut on_event = |e: &Event| {
            if let Event::RunnerFinished { duration_ms, .. } = e {
                runner_ms += duration_ms;
            }
        };
        let start = Instant::now();
        let outcome = rt
            .block_on(engine::run_fix(
                &opts,
                engine::fix::FixPlugins {
                    runner,
                    format,
                    tools: None,
                },
                engine::run::RunCtx {
                    workspace: dir.path(),
                    store: &mut store,
                    events: &mut on_event,
                    model: &mut model,
                    plugins: &reg,
                    cancel: rx,
                    task: None,
                    resumed: None,
                    undo: &kiln::undo::Recording::off(),
                },
            ))
            .unwrap();
        let total = start.elapsed();
        assert!(outcome.ok && outcome.iters == 5, "{outcome:?}");
        if round == 0 {
            continue; // warm-up: compile cache, page cache
        }
        let host_us = total.as_micros() as i64 - runner_ms as i64 * 1000;
        // 6 runner calls (initial check + 5 iterations) are excluded; overhead per iteration:
        per_iteration_us.push(host_us / 5);
        runner_ms_total.push(runner_ms);
    }
    per_iteration_us.sort();
    runner_ms_total.sort();
    let m = per_iteration_us[per_iteration_us.len() / 2];
    println!("fix loop, 5 iterations, replayed model, `command` runner running grep");
    println!(
        "host overhead per iteration (median of {}): {:.2} ms",
        per_iteration_us.len(),
        m as f64 / 1000.0
    );
    println!(
        "runner process time per loop (median): {} ms",
        runner_ms_total[runner_ms_total.len() / 2]
    );
    println!(
        "peak RSS of the process (VmHWM): {} MiB",
        vm_hwm_kib() / 1024
    );
}

//! Edit benchmark: parse + apply of a 100-block SEARCH/REPLACE response into a 1 MiB file,
//! through the built-in `search-replace` plugin and the host's edit path (as `kiln edit apply`
//! does, dry run so every round starts from the same file), once per matching tier.
//! Prints the median time per response and per block. Run with `cargo bench --bench edits`.
// Benchmarks set up their fixtures as they like (clippy.toml: only the writer writes, in kiln).
#![allow(clippy::disallowed_methods)]

use kiln::config::Config;
use kiln::edit::{self, ApplyOptions, Workspace};
use kiln::plugin::{PluginKind, Registry, Runtime};
use std::time::{Duration, Instant};

const BLOCKS: usize = 100;

fn file_lines() -> Vec<String> {
    // ~1 MiB of distinct lines, indented so the indentation tier has an offset to find.
    let mut lines = Vec::new();
    let mut size = 0;
    let mut i = 0;
    while size < 1 << 20 {
        let l = format!(
            "    let value_{i} = compute(\"item {i}\", {i}) - {};",
            i * 7
        );
        size += l.len() + 1;
        lines.push(l);
        i += 1;
    }
    lines
}

fn response(lines: &[String], tier: &str) -> String {
    let step = lines.len() / (BLOCKS + 1);
    let mut out = String::new();
    for b in 0..BLOCKS {
        let at = (b + 1) * step;
        let search: Vec<String> = lines[at..at + 3]
            .iter()
            .enumerate()
            .map(|(k, l)| match tier {
                "trailing-whitespace" => format!("{l}   "),
                "indentation" => l.trim_start().to_string(),
                "unicode" => l.replace('"', "\u{201C}").replace(" - ", " \u{2013} "),
                "line-numbers" => format!("{} | {l}", at + k + 1),
                _ => l.clone(),
            })
            .collect();
        out.push_str("<<<<<<< SEARCH\n");
        out.push_str(&search.join("\n"));
        out.push_str("\n=======\n");
        out.push_str(&format!("    let replaced_{b} = 0;\n>>>>>>> REPLACE\n"));
    }
    out
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let lines = file_lines();
    let lf = lines.join("\n") + "\n";
    std::fs::write(dir.path().join("big.rs"), &lf).unwrap();
    std::fs::write(dir.path().join("big_crlf.rs"), lf.replace('\n', "\r\n")).unwrap();
    let runtime = Runtime::with_default_cache().unwrap();
    let config = Config::default();
    let reg = rt
        .block_on(Registry::load(&runtime, dir.path(), &config))
        .unwrap();
    let format = reg
        .get("search-replace", Some(PluginKind::EditFormat))
        .unwrap();
    let ws = Workspace::open(dir.path()).unwrap();
    let opts = ApplyOptions {
        dry_run: true,
        ..Default::default()
    };
    println!(
        "file: {} KiB, {} lines; {BLOCKS} blocks per response",
        lf.len() / 1024,
        lines.len()
    );
    println!(
        "{:<22} {:>14} {:>14}",
        "tier", "response ms", "per block µs"
    );
    for tier in [
        "exact",
        "line-endings",
        "trailing-whitespace",
        "indentation",
        "unicode",
        "line-numbers",
    ] {
        let target = if tier == "line-endings" {
            "big_crlf.rs"
        } else {
            "big.rs"
        };
        let resp = response(&lines, tier);
        let mut times: Vec<Duration> = Vec::new();
        for _ in 0..5 {
            let t = Instant::now();
            let report = rt
                .block_on(edit::apply_response(
                    format,
                    &ws,
                    &resp,
                    &[target.to_string()],
                    &opts,
                ))
                .unwrap();
            times.push(t.elapsed());
            assert!(report.ok, "{tier}: {:?}", report.feedback());
            assert!(
                report.edits.iter().all(|e| e.tier.as_deref() == Some(tier)),
                "{tier}: {:?}",
                report.edits[0].tier
            );
        }
        times.sort();
        let m = times[times.len() / 2];
        println!(
            "{tier:<22} {:>14.1} {:>14.0}",
            m.as_secs_f64() * 1e3,
            m.as_secs_f64() * 1e6 / BLOCKS as f64
        );
    }
}

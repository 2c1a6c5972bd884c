//! Cost of the kernel-held boundaries per program run: the median wall time of `/bin/true`
//! (200 runs) and of `cargo check` on a tiny crate (a few runs, its source touched each time)
//! through kiln's confined exec path (`plugin::run_host_program`, the path of every program
//! kiln runs), with everything on (a view built for each call: mount, user, PID, IPC, UTS and
//! network namespaces and some forty mounts; Landlock as the second layer; seccomp) and without
//! the view (the debug hook `KILN_TEST_NO_VIEW`: Landlock read and write rules over the host's
//! files, seccomp and a PID namespace, as before issue 30). The hook works in debug builds only,
//! so run it with `cargo bench --bench confine --profile dev` (dependencies are optimised in
//! that profile too).
// Benchmarks set up their fixtures as they like (clippy.toml: only the writer writes, in kiln).
#![allow(clippy::disallowed_methods)]

use std::path::Path;
use std::time::{Duration, Instant};

const TRUE_RUNS: usize = 200;
const CARGO_RUNS: usize = 9;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

async fn once(words: &[&str], ws: &Path) -> Duration {
    let start = Instant::now();
    let f =
        kiln::plugin::run_host_program(words, None, ws, Duration::from_secs(120), 1 << 20, false)
            .await
            .expect("run");
    let took = start.elapsed();
    assert_eq!(
        f.exit_code,
        Some(0),
        "{words:?}: {}",
        String::from_utf8_lossy(&f.stderr)
    );
    took
}

/// Measure in this process and print `label true_ms cargo_ms`.
fn measure(label: &str) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let ws = tempfile::tempdir().unwrap();
        let ws = ws.path();
        for _ in 0..10 {
            once(&["true"], ws).await;
        }
        let mut t = Vec::new();
        for _ in 0..TRUE_RUNS {
            t.push(once(&["true"], ws).await);
        }
        std::fs::write(
            ws.join("Cargo.toml"),
            "[package]\nname = \"tiny\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
        )
        .unwrap();
        std::fs::create_dir_all(ws.join("src")).unwrap();
        std::fs::write(ws.join("src/lib.rs"), "pub fn f() {}\n").unwrap();
        let check = ["cargo", "check", "--offline", "--quiet"];
        once(&check, ws).await;
        let mut c = Vec::new();
        for i in 0..CARGO_RUNS {
            std::fs::write(
                ws.join("src/lib.rs"),
                format!("pub fn f() -> u32 {{ {i} }}\n"),
            )
            .unwrap();
            c.push(once(&check, ws).await);
        }
        println!("{label} {:.3} {:.1}", ms(median(t)), ms(median(c)));
    });
}

fn main() {
    if let Some(child) = kiln_env::env().var("KILN_BENCH_CHILD") {
        measure(child);
        return;
    }
    // Each configuration in a process of its own: the mechanisms are detected once per process.
    let run = |label: &str, off: bool| -> String {
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.env("KILN_BENCH_CHILD", label);
        if off {
            cmd.env("KILN_TEST_NO_VIEW", "1");
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let before = run("before", true);
    let after = run("after", false);
    let parse = |s: &str| -> (f64, f64) {
        let f: Vec<f64> = s
            .split_whitespace()
            .skip(1)
            .map(|x| x.parse().unwrap())
            .collect();
        (f[0], f[1])
    };
    let (bt, bc) = parse(&before);
    let (at, ac) = parse(&after);
    println!("per program run, median (before: no view, Landlock + seccomp + PID namespace):");
    println!(
        "  /bin/true ({TRUE_RUNS} runs)        before {bt:7.3} ms   after {at:7.3} ms   ({:+.3} ms)",
        at - bt
    );
    println!(
        "  cargo check, tiny crate ({CARGO_RUNS} runs) before {bc:7.1} ms   after {ac:7.1} ms   ({:+.1} ms)",
        ac - bc
    );
    if !cfg!(debug_assertions) {
        println!(
            "  note: a release build ignores the debug hooks, so both rows have everything on; run with --profile dev"
        );
    }
}

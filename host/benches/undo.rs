//! Undo benchmark (issue 34): the median cost of one undo checkpoint (after one file changed)
//! on a 50-file and on a 50,000-file workspace (about 4 KB a file: 200 MB; a git repository,
//! every file committed), and the median wall
//! time of a one-iteration `kiln fix` (the real binary, a `--replay` answer, a `grep` check)
//! on both. Run with `cargo bench --bench undo --profile dev` (not part of the test suite).
// Benchmarks set up their fixtures as they like (clippy.toml: only the writer writes, in kiln).
#![allow(clippy::disallowed_methods)]

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// A workspace of `n` files of about 4 KB, 100 to a directory, plus `t.txt` (the fix target).
fn workspace(n: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let body: String = (0..64)
        .map(|i| format!("line {i:>3} of a file that is here to be walked\n"))
        .collect();
    for i in 0..n {
        let d = dir.path().join(format!("d{:04}", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&d).unwrap();
        }
        std::fs::write(d.join(format!("f{i}.txt")), format!("{i}\n{body}")).unwrap();
    }
    std::fs::write(dir.path().join("t.txt"), "BROKEN\n").unwrap();
    // A git repository with every file committed, as a project kiln runs in: undo takes the
    // pre-images of its clean tracked files from git's objects.
    for args in [
        &["init", "-q", "."][..],
        &["add", "-A"],
        &[
            "-c",
            "user.name=b",
            "-c",
            "user.email=b@b",
            "commit",
            "-q",
            "-m",
            "init",
        ],
    ] {
        let ok = Command::new("git")
            .args(args)
            .current_dir(dir.path())
            .status()
            .expect("run git")
            .success();
        assert!(ok, "git {args:?}");
    }
    // Files written in the last 2 s are "racy" (their stat cannot vouch for them, and undo
    // reads them again at every run): a workspace's files are older than that.
    std::thread::sleep(Duration::from_millis(2500));
    dir
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Median checkpoint time on `root` (one file rewritten before each).
fn checkpoints(root: &Path, id: i64) -> (Duration, Duration) {
    let rec = kiln::undo::Recording::on();
    let start = Instant::now();
    kiln::undo::begin(&rec, root, id);
    let begin = start.elapsed();
    let mut times = Vec::new();
    for k in 0..15 {
        std::fs::write(root.join("d0000/f1.txt"), format!("changed {k}\n")).unwrap();
        let t = Instant::now();
        kiln::undo::checkpoint(&rec);
        times.push(t.elapsed());
    }
    kiln::undo::finish(&rec, id);
    (begin, median(times))
}

/// Wall time of one-iteration `kiln fix` runs of the binary `bin` on `root` (its state in
/// `state`): the first, and the median of 5 more.
fn fixes(bin: &Path, root: &Path, state: &Path) -> (Duration, Duration) {
    let replay = root.join("fix.replay.jsonl");
    let answer = "<<<<<<< SEARCH\nBROKEN\n=======\nFIXED\n>>>>>>> REPLACE\n";
    std::fs::write(
        &replay,
        format!("{}\n", serde_json::json!({ "text": answer })),
    )
    .unwrap();
    let mut times = Vec::new();
    for _ in 0..6 {
        std::fs::write(root.join("t.txt"), "BROKEN\n").unwrap();
        let t = Instant::now();
        let out = Command::new(bin)
            .args([
                "fix",
                "--cmd",
                "grep -q FIXED t.txt",
                "--file",
                "t.txt",
                "--max-iters",
                "1",
                "--replay",
            ])
            .arg(&replay)
            .current_dir(root)
            .env_clear()
            .env("PATH", kiln_env::env().var("PATH").unwrap_or_default())
            .env("HOME", state)
            .env("XDG_STATE_HOME", state)
            .env("KILN_CONFIG", state.join("no-user-config.toml"))
            .env("KILN_YES", "1")
            .output()
            .expect("run kiln");
        times.push(t.elapsed());
        assert!(
            out.status.success(),
            "kiln fix failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let first = times.remove(0);
    (first, median(times))
}

/// `KILN_BENCH_BASELINE=/path/to/kiln` (another build, say main's before a change) runs the
/// `kiln fix` part with it too, on the same workspaces, for a before/after under the same load.
fn main() {
    let state = tempfile::tempdir().unwrap();
    // SAFETY: set before any other thread exists.
    unsafe { std::env::set_var("XDG_STATE_HOME", state.path()) };
    let ours = std::path::PathBuf::from(env!("CARGO_BIN_EXE_kiln"));
    let baseline = kiln_env::env()
        .var_os("KILN_BENCH_BASELINE")
        .map(std::path::PathBuf::from);
    println!(
        "files    begin ms  checkpoint ms  fix first ms  fix median ms  (baseline: first, median)"
    );
    for (i, n) in [50usize, 50_000].into_iter().enumerate() {
        let ws = workspace(n);
        // The first begin copies the workspace; the second is a later run's.
        checkpoints(ws.path(), 1000 * i as i64 + 1);
        let (begin, cp) = checkpoints(ws.path(), 1000 * i as i64 + 2);
        let home = tempfile::tempdir().unwrap();
        let (first, fix) = fixes(&ours, ws.path(), home.path());
        let base = baseline.as_ref().map(|b| {
            let home = tempfile::tempdir().unwrap();
            let (f, m) = fixes(b, ws.path(), home.path());
            format!("  ({:.0}, {:.0})", ms(f), ms(m))
        });
        println!(
            "{n:>6} {:>10.1} {:>14.2} {:>13.0} {:>14.0}{}",
            ms(begin),
            ms(cp),
            ms(first),
            ms(fix),
            base.unwrap_or_default()
        );
    }
}

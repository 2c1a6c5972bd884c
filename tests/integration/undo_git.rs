//! Undo's pre-images from git's objects (issue 34): in a git repository a tracked file whose
//! content is the blob git's index names is not copied into kiln's state directory, and
//! `kiln undo` reads it back from git; a file changed since the index (dirty) or untracked is
//! still copied; a blob git no longer has is named and undo exits 1; and a hostile
//! `.git/config` makes kiln's git run nothing.

use crate::support::Workspace;
use std::path::{Path, PathBuf};
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "core.fsmonitor=false",
        ])
        .args(args)
        .current_dir(dir)
        .env_remove("GIT_DIR")
        .env_remove("GIT_INDEX_FILE")
        .env_remove("GIT_WORK_TREE")
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

fn sha256(text: &str) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// A git repository holding `t.txt` (the fix target), `gen.sh` (the check, which also
/// rewrites `a.txt`, `b.txt` and `c.txt`, and `a.txt` and `b.txt`, committed; then `b.txt` is
/// changed (dirty) and `c.txt` written (untracked).
fn repo() -> Workspace {
    let ws = Workspace::new();
    ws.write("t.txt", "BROKEN\n");
    ws.write(
        "gen.sh",
        "printf 'A2\\n' > a.txt\nprintf 'B3\\n' > b.txt\nprintf 'C2\\n' > c.txt\ngrep -q FIXED t.txt\n",
    );
    ws.write("a.txt", "A1\n");
    ws.write("b.txt", "B1\n");
    for i in 0..20 {
        ws.write(&format!("src/m{i}.txt"), &format!("module {i}\n"));
    }
    git(&ws.root(), &["init", "-q"]);
    git(&ws.root(), &["add", "-A"]);
    git(&ws.root(), &["commit", "-q", "-m", "init"]);
    ws.write("b.txt", "B2 dirty\n");
    ws.write("c.txt", "C1 untracked\n");
    ws
}

/// One `kiln fix` iteration: its check (`gen.sh`) rewrites `a.txt`, `b.txt` and `c.txt`, the
/// replayed answer fixes `t.txt`.
fn fix(ws: &Workspace) {
    let replay = ws.path().join("fix.replay.jsonl");
    let answer = "<<<<<<< SEARCH\nBROKEN\n=======\nFIXED\n>>>>>>> REPLACE\n";
    std::fs::write(
        &replay,
        format!("{}\n", serde_json::json!({ "text": answer })),
    )
    .unwrap();
    let r = ws.kiln(
        &[
            "fix",
            "--cmd",
            "sh gen.sh",
            "--file",
            "t.txt",
            "--max-iters",
            "1",
            "--replay",
            replay.to_str().unwrap(),
        ],
        &[],
    );
    r.expect_code(0);
    assert_eq!(ws.read("t.txt"), "FIXED\n");
    assert_eq!(ws.read("a.txt"), "A2\n");
}

fn objects(ws: &Workspace) -> Vec<String> {
    let dir = ws.store_path().parent().unwrap().join("undo/objects");
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The loose object file of the blob `HEAD:rel`.
fn loose_object(ws: &Workspace, rel: &str) -> PathBuf {
    let oid = git(&ws.root(), &["rev-parse", &format!("HEAD:{rel}")]);
    let oid = oid.trim();
    ws.root()
        .join(".git/objects")
        .join(&oid[..2])
        .join(&oid[2..])
}

#[test]
fn clean_tracked_files_are_not_copied_and_undo_brings_them_back_from_git() {
    let ws = repo();
    fix(&ws);
    // Only the dirty and the untracked file's content were copied: none of the 23 clean
    // tracked files (t.txt, gen.sh, a.txt, src/*).
    let mut want = vec![sha256("B2 dirty\n"), sha256("C1 untracked\n")];
    want.sort();
    assert_eq!(objects(&ws), want);
    // They are named, by their SHA-256, with git's blob id.
    let blobs: std::collections::BTreeMap<String, String> = serde_json::from_slice(
        &std::fs::read(ws.store_path().parent().unwrap().join("undo/blobs.json")).unwrap(),
    )
    .unwrap();
    let oid = git(&ws.root(), &["rev-parse", "HEAD:a.txt"]);
    assert_eq!(blobs.get(&sha256("A1\n")), Some(&oid.trim().to_string()));
    assert!(!blobs.contains_key(&sha256("B2 dirty\n")));

    let u = ws.kiln(&["undo", "--json"], &[]);
    u.expect_code(0);
    assert_eq!(
        u.json()["undone"].as_array().unwrap().len(),
        4,
        "{}",
        u.stdout()
    );
    assert_eq!(ws.read("t.txt"), "BROKEN\n");
    assert_eq!(ws.read("a.txt"), "A1\n");
    assert_eq!(ws.read("b.txt"), "B2 dirty\n");
    assert_eq!(ws.read("c.txt"), "C1 untracked\n");

    // A second run finds the same files in the stat cache and still copies nothing new.
    fix(&ws);
    assert_eq!(objects(&ws), want);
    ws.kiln(&["undo"], &[]).expect_code(0);
    assert_eq!(ws.read("t.txt"), "BROKEN\n");
    assert_eq!(ws.read("a.txt"), "A1\n");
}

#[test]
fn a_blob_git_no_longer_has_is_named_and_undo_exits_1() {
    let ws = repo();
    fix(&ws);
    // What a `git gc --prune=now` after a reset does to a blob nothing reaches any more.
    let gone = loose_object(&ws, "a.txt");
    std::fs::remove_file(&gone).unwrap();
    let u = ws.kiln(&["undo"], &[]);
    u.expect_code(1);
    let err = u.stderr();
    assert!(err.contains("a.txt"), "{err}");
    assert!(err.contains("no longer has"), "{err}");
    // The rest went back.
    assert_eq!(ws.read("t.txt"), "BROKEN\n");
    assert_eq!(ws.read("b.txt"), "B2 dirty\n");
    assert_eq!(ws.read("a.txt"), "A2\n");
}

/// The run's programs cannot take git's objects from under undo: the sandbox mounts `.git`
/// read-only, so a check that tries to delete them and the index deletes nothing.
#[test]
fn a_runs_programs_cannot_remove_gits_objects() {
    let ws = repo();
    let blob = loose_object(&ws, "a.txt");
    ws.write(
        "gen.sh",
        "printf 'A2\\n' > a.txt\nrm -rf .git/objects .git/index 2>/dev/null\nprintf x > .git/index 2>/dev/null\ngrep -q FIXED t.txt\n",
    );
    git(&ws.root(), &["commit", "-q", "-a", "-m", "gen"]);
    fix(&ws);
    assert!(blob.is_file(), "a program of the run removed a git object");
    ws.kiln(&["undo"], &[]).expect_code(0);
    assert_eq!(ws.read("a.txt"), "A1\n");
}

/// A `.git/config` of the repository's own that would start programs (`core.fsmonitor`, run
/// by `git ls-files` itself; a filter and an external diff) runs nothing kiln's git does.
#[test]
fn a_hostile_git_config_runs_nothing() {
    let ws = repo();
    let pwned = ws.path().join("pwned");
    let cmd = format!("touch {}; true", pwned.display());
    for (key, value) in [
        ("core.fsmonitor", cmd.as_str()),
        ("filter.x.clean", cmd.as_str()),
        ("filter.x.smudge", cmd.as_str()),
        ("diff.external", cmd.as_str()),
        ("core.pager", cmd.as_str()),
    ] {
        git(&ws.root(), &["config", key, value]);
    }
    ws.write(".gitattributes", "* filter=x\n");
    fix(&ws);
    assert!(!pwned.exists(), "kiln's git ran the repository's program");
    // Clean tracked files still came from git's objects, and go back.
    assert!(!objects(&ws).contains(&sha256("A1\n")));
    ws.kiln(&["undo"], &[]).expect_code(0);
    assert_eq!(ws.read("a.txt"), "A1\n");
    assert!(!pwned.exists(), "kiln's git ran the repository's program");
}

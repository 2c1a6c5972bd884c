//! Issue 34 item 1: undo is exact. A `kiln fix` whose check formats the target and creates
//! files is undone whole, its first check included; a run killed while its check runs, or
//! between writing an edit and recording it, is undone from its start-of-run list and
//! pre-images; `kiln undo` says how many files it put back only when they are; and a run on
//! a 20,000-file workspace, in which a program and an edit each changed files, is undone file
//! for file.

use crate::support::{Run, Workspace};
use std::time::{Duration, Instant};

/// The replayed answer: `x = 1` becomes `x = 1  # FIXED` (the check passes then).
pub fn replay(ws: &Workspace) -> String {
    let answer = "<<<<<<< SEARCH\nx = 1\n=======\nx = 1  # FIXED\n>>>>>>> REPLACE\n";
    let path = ws.path().join("replay.jsonl");
    std::fs::write(
        &path,
        format!("{}\n", serde_json::json!({ "text": answer })),
    )
    .unwrap();
    path.to_string_lossy().into_owned()
}

pub fn fix_args(replay: &str) -> Vec<String> {
    [
        "fix",
        "--replay",
        replay,
        "--runner",
        "command",
        "--cmd",
        "sh check.sh",
        "--file",
        "t.py",
        "--max-iters",
        "1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// `t.py` unformatted (`x=1`) and `check.sh`, a check that "formats" it (`x = 1`), writes
/// `gen/out.txt`, appends to `build.log`, runs `extra`, and passes once `t.py` says FIXED.
pub fn workspace(extra: &str) -> Workspace {
    let ws = Workspace::new();
    ws.write("t.py", "x=1\n");
    ws.write(
        "check.sh",
        &format!(
            "sed 's/x=1/x = 1/' t.py > t.tmp && cat t.tmp > t.py && rm t.tmp\nmkdir -p gen\nprintf 'out\\n' > gen/out.txt\nprintf 'built\\n' >> build.log\n{extra}\ngrep -q FIXED t.py\n"
        ),
    );
    ws
}

fn assert_as_before(ws: &Workspace) {
    assert_eq!(ws.read("t.py"), "x=1\n");
    for f in ["gen/out.txt", "build.log", "started"] {
        assert!(!ws.root().join(f).exists(), "{f} left behind");
    }
}

pub fn kiln(ws: &Workspace, args: &[String]) -> Run {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    ws.kiln(&args, &[])
}

/// The first check (run before the loop's row exists) formats `t.py` and creates two files:
/// undo puts all three back, and says so.
#[test]
fn undo_covers_the_first_check_of_a_fix() {
    let ws = workspace("");
    let r = kiln(&ws, &fix_args(&replay(&ws)));
    r.expect_code(0);
    assert_eq!(ws.read("t.py"), "x = 1  # FIXED\n");
    assert!(ws.root().join("gen/out.txt").exists());

    // The report shows what the check's programs changed, beside the model's diff.
    let h = ws.kiln(&["history", "--json", "--limit", "1"], &[]);
    let row: serde_json::Value = serde_json::from_str(h.stdout().lines().next().unwrap()).unwrap();
    let id = row["id"].as_i64().unwrap().to_string();
    let page = ws.path().join("report.html");
    ws.kiln(&["report", &id, "--html", page.to_str().unwrap()], &[])
        .expect_code(0);
    let html = std::fs::read_to_string(&page).unwrap();
    let at = html
        .find("id=\"program-changes\"")
        .expect("a section of program changes");
    let (model, programs) = html.split_at(at);
    assert!(model.contains("x = 1  # FIXED"), "the model's diff");
    for line in [
        "build.log: created",
        "gen/out.txt: created",
        "+built",
        "+out",
    ] {
        assert!(programs.contains(line), "{line} in {programs}");
    }

    let u = ws.kiln(&["undo"], &[]);
    u.expect_code(0);
    assert_as_before(&ws);
    assert!(
        u.stderr().contains("3 files put back"),
        "t.py, gen/out.txt and build.log: {}",
        u.stderr()
    );
}

/// Without change notification (the debug hook `KILN_TEST_NO_INOTIFY`, as where inotify is
/// missing or its watch limit is reached) every checkpoint walks the workspace: the same run,
/// nested new directories included, is undone the same.
#[test]
fn without_notification_checkpoints_walk_and_undo_is_the_same() {
    let ws = workspace("mkdir -p deep/er && printf 'x\\n' > deep/er/f.txt");
    let args = fix_args(&replay(&ws));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    ws.kiln(&args, &[("KILN_TEST_NO_INOTIFY", "1")])
        .expect_code(0);
    assert!(ws.root().join("deep/er/f.txt").exists());

    let u = ws.kiln(&["undo"], &[]);
    u.expect_code(0);
    assert!(u.stderr().contains("4 files put back"), "{}", u.stderr());
    assert_as_before(&ws);
    assert!(!ws.root().join("deep/er/f.txt").exists());
}

/// Start `kiln fix` with `env`, wait until `ready` holds (checked every 20 ms), then SIGKILL
/// it, as a crash would.
fn kill_when(ws: &Workspace, env: &[(&str, &str)], ready: impl Fn(&Workspace) -> bool) {
    let args = fix_args(&replay(ws));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut cmd = ws.command(&args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ready(ws) {
        assert!(Instant::now() < deadline, "the run never got there");
        assert!(child.try_wait().unwrap().is_none(), "the run ended first");
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    child.wait().unwrap();
}

/// Killed while its second check runs (after the model's edit): the check had formatted
/// `t.py` again and created files. Those are the run's own changes, not someone else's:
/// undo puts every file back and deletes what the run created.
#[test]
fn a_run_killed_while_its_check_runs_is_undone_whole() {
    // The second check (t.py says FIXED) also rewrites t.py, creates `started` and waits.
    let ws = workspace(
        "if grep -q FIXED t.py; then printf 'x = 1  # FIXED, formatted\\n' > t.py; : > started; sleep 30; fi",
    );
    kill_when(&ws, &[], |ws| ws.root().join("started").exists());
    assert_eq!(ws.read("t.py"), "x = 1  # FIXED, formatted\n");

    let u = ws.kiln(&["undo"], &[]);
    u.expect_code(0);
    assert!(!u.stderr().contains("changed since"), "{}", u.stderr());
    assert_as_before(&ws);
}

/// Killed during its first check, before the run has a row in the history: `kiln undo` puts
/// back what that check changed, from the snapshot taken before it.
#[test]
fn a_fix_killed_during_its_first_check_is_undone() {
    let ws = workspace("if [ ! -e started ]; then : > started; sleep 30; fi");
    kill_when(&ws, &[], |ws| ws.root().join("started").exists());
    assert_eq!(ws.read("t.py"), "x = 1\n");
    assert!(ws.root().join("gen/out.txt").exists());

    let u = ws.kiln(&["undo"], &[]);
    u.expect_code(0);
    assert!(
        u.stderr().contains("killed before it had an id"),
        "{}",
        u.stderr()
    );
    assert_as_before(&ws);
    // Undone once: what is left is no run at all.
    ws.kiln(&["undo"], &[]).expect_code(2);
}

/// Killed right after the writer committed the model's edit, before the run recorded it
/// (the journal's test hook stops the process there): undo still puts `t.py` back.
#[test]
fn a_run_killed_between_writing_an_edit_and_recording_it_is_undone() {
    let ws = workspace("");
    // The commit of one file: backup, journal, temporary file, rename, directory fsync,
    // journal removed (step 6: the edit is in place, the run has not looked yet).
    let log = ws.path().join("kiln.err");
    let err = std::fs::File::create(&log).unwrap();
    let args = fix_args(&replay(&ws));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut child = ws
        .command(&args)
        .env("KILN_TEST_APPLY_PAUSE", "6")
        .stdout(std::process::Stdio::null())
        .stderr(err)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("apply paused after step 6") {
            assert!(text.contains("journal"), "{text}");
            break;
        }
        assert!(Instant::now() < deadline, "never paused: {text}");
        assert!(child.try_wait().unwrap().is_none(), "ended first: {text}");
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    child.wait().unwrap();
    assert_eq!(ws.read("t.py"), "x = 1  # FIXED\n");

    let u = ws.kiln(&["undo"], &[]);
    u.expect_code(0);
    assert!(!u.stderr().contains("0 files put back"), "{}", u.stderr());
    assert_as_before(&ws);
}

/// A run on 20,000 files in which the check changes, creates and deletes files in several
/// directories, creates nested directories and renames one, and the model edits `t.py`:
/// after undo every file holds what it held before, and no other file exists.
#[test]
fn undo_restores_every_file_of_a_20000_file_workspace() {
    let ws = workspace(
        "printf 'changed\\n' > d007/f712.txt\nprintf 'changed\\n' >> d199/f19950.txt\nrm -f d100/f10000.txt\nmkdir -p d050/new\nprintf 'new\\n' > d050/new/n.txt\nprintf 'new\\n' > d003/n.txt\n[ -d d150 ] && mv d150 d150moved\nmkdir -p gen2/a/b && printf 'deep\\n' > gen2/a/b/c.txt",
    );
    let root = ws.root();
    let mut before = std::collections::BTreeMap::new();
    for i in 0..20_000 {
        let d = root.join(format!("d{:03}", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&d).unwrap();
        }
        let rel = format!("d{:03}/f{i}.txt", i / 100);
        let text = format!("file {i}\n");
        std::fs::write(root.join(&rel), &text).unwrap();
        before.insert(rel, text);
    }
    before.insert("t.py".into(), "x=1\n".into());
    before.insert("check.sh".into(), ws.read("check.sh"));

    kiln(&ws, &fix_args(&replay(&ws))).expect_code(0);
    assert_eq!(ws.read("d007/f712.txt"), "changed\n");
    assert!(!root.join("d100/f10000.txt").exists());

    let u = ws.kiln(&["undo"], &[]);
    u.expect_code(0);
    let mut now = std::collections::BTreeMap::new();
    for e in walk(&root) {
        let rel = e
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        now.insert(rel, std::fs::read_to_string(&e).unwrap());
    }
    assert_eq!(now.len(), before.len(), "{}", u.stderr());
    assert!(now == before, "a file differs after undo: {}", u.stderr());
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.file_name().is_some_and(|n| n == ".kiln") {
            continue; // kiln's own logs
        }
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// A file undo cannot put back (its content before the run is not text, which kiln's writer
/// does not write) makes undo exit 1 naming it; the count covers only the files put back.
#[test]
fn undo_exits_1_naming_what_it_could_not_put_back() {
    let ws = workspace("printf 'rewritten\\n' > blob.bin");
    std::fs::write(ws.root().join("blob.bin"), [0xffu8, 0xfe, 0x00, 0x01]).unwrap();
    kiln(&ws, &fix_args(&replay(&ws))).expect_code(0);

    let u = ws.kiln(&["undo"], &[]);
    u.expect_code(1);
    assert!(u.stderr().contains("blob.bin"), "{}", u.stderr());
    assert!(u.stderr().contains("3 files put back"), "{}", u.stderr());
    assert_eq!(ws.read("t.py"), "x=1\n");
}

/// A run's program that swaps a directory for a link out of the workspace (`d -> outside`):
/// undo's preview and the report say what changed without reading through the link, so
/// nothing outside the workspace is shown.
#[test]
fn a_directory_swapped_for_a_link_out_is_never_read_through() {
    let outside = {
        let ws = Workspace::new();
        std::fs::create_dir_all(ws.path().join("outside")).unwrap();
        ws
    };
    let out = outside.path().join("outside");
    std::fs::write(out.join("secret.txt"), "HOST SECRET\n").unwrap();
    let ws = workspace(&format!(
        "if grep -q FIXED t.py; then mv d dold; ln -s {} d; fi",
        out.display()
    ));
    ws.write("d/secret.txt", "mine\n");
    kiln(&ws, &fix_args(&replay(&ws))).expect_code(0);
    assert!(
        ws.root()
            .join("d")
            .symlink_metadata()
            .unwrap()
            .file_type()
            .is_symlink()
    );
    let preview = ws.kiln(&["undo", "--dry-run"], &[]);
    let shown = format!("{}{}", preview.stdout(), preview.stderr());
    assert!(!shown.contains("HOST SECRET"), "{shown}");
    let page = ws.path().join("report.html");
    ws.kiln(&["report", "1", "--html", page.to_str().unwrap()], &[]);
    let html = std::fs::read_to_string(&page).unwrap_or_default();
    assert!(!html.contains("HOST SECRET"), "{html}");
}

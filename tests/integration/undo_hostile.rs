//! Undo against a hostile repository: the programs a `kiln fix` runs (its check) make a sparse
//! file of a gigabyte, grow a file past the bound, create links out of the workspace and FIFOs,
//! swap a directory and a file for links out, and name files with newlines and very long
//! paths. `kiln fix`, `kiln undo` (and its `--dry-run`) and `kiln report` then never read a
//! file whole past 16 MiB (their peak memory says so), delete what the run created whatever its
//! type without following it, put back the rest and name what they could not (exit 1, the
//! dry-run too), `--force` replacing the links, and print every path on one line.

use crate::support::Workspace;
use crate::undo_exact::{fix_args, kiln, replay, workspace};
use std::path::Path;

/// Run kiln with `args` in `ws`: its exit code, its stderr and its peak resident memory in
/// MiB (`wait4`'s `ru_maxrss`).
#[allow(clippy::zombie_processes)] // reaped by `wait4` below, for its resource usage
fn measured(ws: &Workspace, args: &[&str]) -> (i32, String, u64) {
    let err = ws.path().join("measured.err");
    let child = ws
        .command(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value; wait4 fills it for our own child.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waiting for our own child, into buffers we own.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    assert_eq!(r, pid);
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    let stderr = std::fs::read_to_string(&err).unwrap();
    let rss = ru.ru_maxrss as u64 / 1024;
    eprintln!("kiln {}: peak memory {rss} MiB", args.join(" "));
    (code, stderr, rss)
}

fn args(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn is_link(p: &Path) -> bool {
    p.symlink_metadata()
        .is_ok_and(|m| m.file_type().is_symlink())
}

/// Peak memory allowed to a kiln process here: far below the 1 GiB file, far above kiln's own.
const MAX_RSS_MIB: u64 = 400;

/// A check makes `big.dat`, sparse, of 1 GiB, and grows `grown.txt` (there before the run) to
/// 40 MiB. The run's end, undo's dry-run, the report and undo never read them (peak memory);
/// both are named with their size; undo deletes `big.dat` and puts `grown.txt` back.
#[test]
fn a_huge_file_a_program_made_is_never_read_and_undo_still_deletes_it() {
    let ws = workspace("truncate -s 1G big.dat\ntruncate -s 40M grown.txt");
    ws.write("grown.txt", "small\n");
    let fix = fix_args(&replay(&ws));
    let (code, err, rss) = measured(&ws, &args(&fix));
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        std::fs::metadata(ws.root().join("big.dat")).unwrap().len(),
        1 << 30
    );
    assert!(rss < MAX_RSS_MIB, "kiln fix peaked at {rss} MiB: {err}");

    let (code, err, rss) = measured(&ws, &["undo", "--dry-run"]);
    assert_eq!(code, 0, "{err}");
    assert!(rss < MAX_RSS_MIB, "the dry-run peaked at {rss} MiB");
    for says in [
        "big.dat: would delete (the run created it)",
        "too large to keep/compare: big.dat, 1073741824 bytes",
        "grown.txt: would restore",
        "too large to keep/compare: grown.txt, 41943040 bytes",
    ] {
        assert!(err.contains(says), "{says} in {err}");
    }

    let page = ws.path().join("report.html");
    let (code, err, rss) = measured(&ws, &["report", "1", "--html", page.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(rss < MAX_RSS_MIB, "the report peaked at {rss} MiB");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains("big.dat: created (too large to keep/compare: 1073741824 bytes)"),
        "{html}"
    );

    let (code, err, rss) = measured(&ws, &["undo"]);
    assert_eq!(code, 0, "{err}");
    assert!(rss < MAX_RSS_MIB, "undo peaked at {rss} MiB");
    assert!(!ws.root().join("big.dat").exists(), "{err}");
    assert_eq!(ws.read("grown.txt"), "small\n");
    assert_eq!(ws.read("t.py"), "x=1\n");
    assert!(
        err.contains("big.dat: deleted (the run created it)"),
        "{err}"
    );
}

/// A check creates a link out of the workspace, a dangling one, one in a new directory, a
/// FIFO and a binary file (which the journal, text only, cannot hold): undo deletes each (never following it: the file outside stays), names it with what
/// it is, and exits 0.
#[test]
fn links_and_fifos_a_run_created_are_deleted_and_named() {
    let outside = Workspace::new();
    let target = outside.write("target.txt", "OUTSIDE\n");
    let ws = workspace(&format!(
        "ln -sf {} link.txt\nln -sf /nonexistent/kiln dangling\nmkdir -p sub && ln -sf ../t.py sub/l\n[ -p pipe ] || mkfifo pipe\nprintf '\\377\\376' > blob.bin",
        target.display()
    ));
    kiln(&ws, &fix_args(&replay(&ws))).expect_code(0);
    let root = ws.root();
    for p in ["link.txt", "dangling", "sub/l"] {
        assert!(is_link(&root.join(p)), "{p}");
    }
    let u = ws.kiln(&["undo"], &[]);
    u.expect_code(0);
    for p in ["link.txt", "dangling", "sub/l", "pipe", "blob.bin"] {
        assert!(root.join(p).symlink_metadata().is_err(), "{p} left");
    }
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "OUTSIDE\n");
    assert_eq!(ws.read("t.py"), "x=1\n");
    for says in [
        "link.txt: deleted (the run created it) (a symbolic link)",
        "dangling: deleted (the run created it) (a symbolic link)",
        "sub/l: deleted (the run created it) (a symbolic link)",
        "pipe: deleted (the run created it) (a FIFO)",
    ] {
        assert!(u.stderr().contains(says), "{says} in {}", u.stderr());
    }
}

/// A workspace whose second check swaps `d/` and `keep.txt` for links out of it (to a
/// directory and a file holding "HOST SECRET"), after a run.
fn swapped() -> (Workspace, Workspace) {
    let outside = Workspace::new();
    let out = outside.root();
    outside.write("secret.txt", "HOST SECRET\n");
    let ws = workspace(&format!(
        "if grep -q FIXED t.py && [ ! -L d ]; then mv d dold; ln -s {o} d; mv keep.txt keep.old; ln -s {o}/secret.txt keep.txt; fi",
        o = out.display()
    ));
    ws.write("d/secret.txt", "mine\n");
    ws.write("keep.txt", "keep\n");
    kiln(&ws, &fix_args(&replay(&ws))).expect_code(0);
    assert!(is_link(&ws.root().join("d")) && is_link(&ws.root().join("keep.txt")));
    (ws, outside)
}

fn assert_outside_untouched(outside: &Workspace) {
    assert_eq!(outside.read("secret.txt"), "HOST SECRET\n");
    let names: Vec<_> = std::fs::read_dir(outside.root())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
}

/// A directory and a file swapped for links behave the same: undo (and its dry-run) exits
/// 1, puts the rest back and names both, leaving the links; nothing outside is read or
/// written.
#[test]
fn a_directory_or_a_file_swapped_for_a_link_is_named_and_the_rest_put_back() {
    let (ws, outside) = swapped();
    let dry = ws.kiln(&["undo", "--dry-run"], &[]);
    dry.expect_code(1);
    assert!(!dry.stdout().contains("HOST SECRET"), "{}", dry.stdout());
    ws.kiln(&["undo", "--dry-run", "--force"], &[])
        .expect_code(0);

    let u = ws.kiln(&["undo"], &[]);
    u.expect_code(1);
    let err = u.stderr();
    for says in [
        "d/secret.txt: cannot be put back without --force: d, on its way, is a symbolic link now",
        "keep.txt: cannot be put back without --force (a symbolic link): it is a symbolic link now",
    ] {
        assert!(err.contains(says), "{says} in {err}");
    }
    assert_eq!(ws.read("t.py"), "x=1\n");
    // What the swap moved aside is the run's creation: deleted.
    assert!(!ws.root().join("dold/secret.txt").exists() && !ws.root().join("keep.old").exists());
    assert!(is_link(&ws.root().join("d")) && is_link(&ws.root().join("keep.txt")));
    assert!(!err.contains("HOST SECRET"));
    assert_outside_untouched(&outside);
    // Not marked undone: undo runs again, here with --force, and puts the rest back.
    assert!(err.contains("is not marked undone"), "{err}");
    let again = ws.kiln(&["undo", "--force"], &[]);
    again.expect_code(0);
    assert_eq!(ws.read("keep.txt"), "keep\n");
    assert_eq!(ws.read("d/secret.txt"), "mine\n");
    assert_eq!(ws.read("t.py"), "x=1\n");
    assert_outside_untouched(&outside);
}

/// `--force` replaces both links (never following them) by the directory and the file
/// recorded, and exits 0.
#[test]
fn force_replaces_the_links_by_what_was_there() {
    let (ws, outside) = swapped();
    let u = ws.kiln(&["undo", "--force"], &[]);
    u.expect_code(0);
    let root = ws.root();
    assert!(root.join("d").symlink_metadata().unwrap().is_dir());
    assert_eq!(ws.read("d/secret.txt"), "mine\n");
    assert!(!is_link(&root.join("keep.txt")));
    assert_eq!(ws.read("keep.txt"), "keep\n");
    assert_eq!(ws.read("t.py"), "x=1\n");
    assert_outside_untouched(&outside);
}

/// A file named with a newline cannot forge a line of undo's output, and a very long path is
/// cut in the middle there; the JSON keeps both whole.
#[test]
fn paths_are_printed_on_one_line_and_long_ones_capped() {
    let long = format!("{}/{}/f.txt", "l".repeat(250), "m".repeat(250));
    let ws = workspace(&format!(
        "printf x > \"$(printf 'evil\\nerror: forged')\"\nmkdir -p {d} && printf y > {long}",
        d = long.trim_end_matches("/f.txt")
    ));
    kiln(&ws, &fix_args(&replay(&ws))).expect_code(0);
    assert!(ws.root().join("evil\nerror: forged").exists());

    let dry = ws.kiln(&["undo", "--dry-run"], &[]);
    dry.expect_code(0);
    let out = format!("{}{}", dry.stdout(), dry.stderr());
    assert!(
        !out.lines().any(|l| l.starts_with("error: forged")),
        "{out}"
    );
    assert!(out.contains("evil\\u{a}error: forged"), "{out}");
    assert!(!out.contains(&long), "{out}");
    let shown = out.lines().find(|l| l.contains("lll")).unwrap();
    assert!(
        shown.contains('…') && shown.chars().count() < 300,
        "{shown}"
    );

    let json = ws.kiln(&["undo", "--dry-run", "--json"], &[]).json();
    let paths: Vec<&str> = json["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["path"].as_str())
        .collect();
    assert!(paths.contains(&"evil\nerror: forged"), "{paths:?}");
    assert!(paths.contains(&long.as_str()), "{paths:?}");

    let page = ws.path().join("report.html");
    ws.kiln(&["report", "1", "--html", page.to_str().unwrap()], &[])
        .expect_code(0);
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("evil\\u{a}error: forged: created"), "{html}");
    assert!(!html.contains(&long), "capped in the report too");

    let u = ws.kiln(&["undo"], &[]);
    u.expect_code(0);
    assert!(!u.stderr().lines().any(|l| l.starts_with("error: forged")));
    assert!(!ws.root().join("evil\nerror: forged").exists());
    assert!(!ws.root().join(&long).exists());
}

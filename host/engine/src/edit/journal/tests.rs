//! Tests of the edit journal: a commit stopped at any step recovers to old or new; roll-back,
//! stale and damaged files, links.

use super::*;

/// A workspace and its journal directory (kiln's state directory, elsewhere).
struct W {
    b: Beneath,
    state: Dir,
    state_dir: tempfile::TempDir,
}

fn ws() -> (tempfile::TempDir, W) {
    let t = tempfile::tempdir().unwrap();
    let state_dir = tempfile::tempdir().unwrap();
    let state = Dir::open_ambient_dir(state_dir.path(), cap_std::ambient_authority()).unwrap();
    let b = Beneath::open(t.path()).unwrap();
    (
        t,
        W {
            b,
            state,
            state_dir,
        },
    )
}

fn h(s: &str) -> String {
    sha256(s.as_bytes())
}

fn write_step(path: &str, before: Option<&str>, after: &str) -> Step {
    Step::Write {
        path: path.into(),
        tmp: temp_path(path, "1-2-3", 0),
        before: before.map(h),
        after: h(after),
        backup: before.map(|_| "0".into()),
    }
}

#[test]
fn temp_names_are_recognised() {
    assert!(is_temp_name(".a.rs.kiln-tmp-123"));
    assert!(is_temp_name(".a.rs.kiln-tmp-1-2-3-0"));
    assert!(!is_temp_name("a.rs.kiln-tmp-1"));
    assert!(!is_temp_name("..kiln-tmp-1"));
    assert!(!is_temp_name(".a.rs"));
    assert_eq!(
        temp_path("src/a.rs", "9-8-7", 2),
        "src/.a.rs.kiln-tmp-9-8-7-2"
    );
    assert_eq!(temp_path("a.rs", "x", 0), ".a.rs.kiln-tmp-x-0");
}

#[test]
fn forward_when_every_write_is_done_or_ready() {
    let steps = vec![
        write_step("a", Some("a0"), "a1"),
        write_step("b", Some("b0"), "b1"),
        Step::Remove {
            path: "c".into(),
            before: Some(h("c0")),
            backup: Some("2".into()),
        },
    ];
    let f = |s: &str| Seen::File(h(s));
    // Nothing renamed yet, every temporary file whole.
    assert_eq!(
        decide(
            &steps,
            &[f("a0"), f("b0"), f("c0")],
            &[f("a1"), f("b1"), Seen::Absent]
        ),
        Direction::Forward
    );
    // Half renamed.
    assert_eq!(
        decide(
            &steps,
            &[f("a1"), f("b0"), f("c0")],
            &[Seen::Absent, f("b1"), Seen::Absent]
        ),
        Direction::Forward
    );
    // All renamed, the removal pending or done.
    assert_eq!(
        decide(
            &steps,
            &[f("a1"), f("b1"), Seen::Absent],
            &[Seen::Absent, Seen::Absent, Seen::Absent]
        ),
        Direction::Forward
    );
}

#[test]
fn back_when_a_temporary_file_is_missing_or_torn() {
    let steps = vec![
        write_step("a", Some("a0"), "a1"),
        write_step("b", None, "b1"),
    ];
    let f = |s: &str| Seen::File(h(s));
    // Killed while writing the second temporary file.
    assert_eq!(
        decide(&steps, &[f("a0"), Seen::Absent], &[f("a1"), f("b")]),
        Direction::Back
    );
    // Before any temporary file.
    assert_eq!(
        decide(
            &steps,
            &[f("a0"), Seen::Absent],
            &[Seen::Absent, Seen::Absent]
        ),
        Direction::Back
    );
    // One renamed, the other's temporary file lost: undo the first.
    assert_eq!(
        decide(
            &steps,
            &[f("a1"), Seen::Absent],
            &[Seen::Absent, Seen::Absent]
        ),
        Direction::Back
    );
    // A temporary file that is a symbolic link is not whole.
    assert_eq!(
        decide(
            &steps,
            &[f("a1"), Seen::Absent],
            &[Seen::Absent, Seen::Other]
        ),
        Direction::Back
    );
}

/// A two-file apply, a new file in a new directory, a deletion and a move.
fn scenario(root: &Path) -> Vec<(&'static str, Option<&'static str>, Option<&'static str>)> {
    let files = vec![
        ("a.txt", Some("a old\n"), Some("a new\n")),
        ("sub/b.txt", Some("b old\n"), Some("b new\n")),
        ("new/dir/c.txt", None, Some("c new\n")),
        ("gone.txt", Some("gone\n"), None),
        ("moved-from.txt", Some("moving\n"), None),
        ("moved-to.txt", None, Some("moving, edited\n")),
    ];
    for (p, old, _) in &files {
        if let Some(old) = old {
            let full = root.join(p);
            std::fs::create_dir_all(full.parent().unwrap()).unwrap();
            std::fs::write(full, old).unwrap();
        }
    }
    files
}

fn changes<'a>(
    files: &'a [(&'static str, Option<&'static str>, Option<&'static str>)],
) -> Vec<Change<'a>> {
    let mut out: Vec<Change<'a>> = files
        .iter()
        .filter_map(|(p, old, new)| {
            new.map(|text| Change::Write {
                path: p,
                text,
                before: *old,
                mode: None,
            })
        })
        .collect();
    out.extend(
        files
            .iter()
            .filter(|(_, _, new)| new.is_none())
            .map(|(p, old, _)| Change::Remove {
                path: p,
                before: *old,
            }),
    );
    out
}

fn state(root: &Path, files: &[(&str, Option<&str>, Option<&str>)], new: bool) -> bool {
    files.iter().all(|(p, old, newc)| {
        let want = if new { newc } else { old };
        std::fs::read_to_string(root.join(p)).ok().as_deref() == *want
    })
}

fn leftovers(root: &Path, w: &W) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf(), w.state_dir.path().to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else if is_temp_name(&name) || (name.starts_with("apply-") || name.ends_with(".part"))
            {
                out.push(e.path().display().to_string());
            }
        }
    }
    out
}

#[test]
fn a_commit_stopped_at_every_step_is_recovered_to_old_or_new() {
    // Count the steps of an uninterrupted commit.
    let (t, d) = ws();
    let files = scenario(t.path());
    let mut names = Vec::new();
    commit_with(&d.b, &d.state, &changes(&files), &mut |what| {
        names.push(what.to_string());
        true
    })
    .unwrap();
    let total = names.len();
    let journal_at = names.iter().position(|n| n == "journal written").unwrap();
    assert!(state(t.path(), &files, true));
    assert!(
        leftovers(t.path(), &d).is_empty(),
        "{:?}",
        leftovers(t.path(), &d)
    );
    assert!(!t.path().join("new/dir").exists() || t.path().join("new/dir/c.txt").exists());
    assert!(total >= 14, "{total} steps");
    let mut forward = 0;
    for stop in 0..total {
        let (t, d) = ws();
        let files = scenario(t.path());
        let mut n = 0;
        let r = commit_with(&d.b, &d.state, &changes(&files), &mut |_| {
            n += 1;
            n <= stop
        });
        assert!(is_simulated(&r.unwrap_err()), "stop {stop}");
        let report = recover(&d.b, Some(&d.state)).unwrap();
        if stop < journal_at || stop == total - 1 {
            // Stopped before the journal existed (only backups, removed quietly), or
            // after it was removed: nothing to tell.
            assert!(report.recovered.is_empty(), "{report:?}");
            assert!(state(t.path(), &files, stop == total - 1), "stop {stop}");
            assert!(
                leftovers(t.path(), &d).is_empty(),
                "{:?}",
                leftovers(t.path(), &d)
            );
            continue;
        }
        assert_eq!(report.recovered.len(), 1, "stop {stop}");
        let rec = &report.recovered[0];
        assert!(rec.errors.is_empty() && rec.skipped.is_empty(), "{rec:?}");
        match rec.direction {
            Direction::Forward => {
                forward += 1;
                assert!(state(t.path(), &files, true), "stop {stop}: not all new");
            }
            Direction::Back => {
                assert!(state(t.path(), &files, false), "stop {stop}: not all old");
                assert!(!t.path().join("new").exists(), "stop {stop}: new/ left");
            }
        }
        assert!(
            leftovers(t.path(), &d).is_empty(),
            "stop {stop}: {:?}",
            leftovers(t.path(), &d)
        );
        // A second recovery has nothing to do.
        assert!(recover(&d.b, Some(&d.state)).unwrap().is_empty());
    }
    // Stopped after the journal and before the last temporary file: back; later: forward.
    assert!(forward > 0 && forward < total);
}

#[test]
fn copied_backups_restore_too() {
    NO_LINKS.store(true, Ordering::Relaxed);
    let (t, d) = ws();
    let files = scenario(t.path());
    let _ = commit_with(&d.b, &d.state, &changes(&files), &mut |what| {
        !what.starts_with("renamed")
    });
    NO_LINKS.store(false, Ordering::Relaxed);
    // The backup of a.txt is a copy, not a second name of the old file.
    let backup = std::fs::read_dir(d.state_dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".0"))
        .unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(backup).unwrap().nlink(), 1);
    // Lose b's temporary file: back, from the copies.
    let tmp_b = find_temps(&d.b, Some(Path::new("sub")));
    std::fs::remove_file(t.path().join(&tmp_b[0])).unwrap();
    let report = recover(&d.b, Some(&d.state)).unwrap();
    assert_eq!(report.recovered[0].direction, Direction::Back);
    assert!(state(t.path(), &files, false));
    assert!(leftovers(t.path(), &d).is_empty());
}

#[test]
fn stale_temporary_files_beside_written_files_are_removed_by_the_apply() {
    let (t, d) = ws();
    std::fs::create_dir_all(t.path().join("src")).unwrap();
    std::fs::write(t.path().join("src/a.rs"), "old").unwrap();
    std::fs::write(t.path().join("src/.a.rs.kiln-tmp-777"), "partial").unwrap();
    commit_with(
        &d.b,
        &d.state,
        &[Change::Write {
            path: "src/a.rs",
            text: "new",
            before: Some("old"),
            mode: None,
        }],
        &mut |_| true,
    )
    .unwrap();
    assert_eq!(
        std::fs::read_to_string(t.path().join("src/a.rs")).unwrap(),
        "new"
    );
    assert!(
        leftovers(t.path(), &d).is_empty(),
        "{:?}",
        leftovers(t.path(), &d)
    );
}

#[test]
fn an_interrupted_recovery_is_finished_by_the_next() {
    // Stop the commit after the first rename, then run the roll-forward twice.
    let (t, d) = ws();
    let files = scenario(t.path());
    let mut n = 0;
    let _ = commit_with(&d.b, &d.state, &changes(&files), &mut |what| {
        n += 1;
        !what.starts_with("renamed")
    });
    let state_d = d.state.try_clone().unwrap();
    let name = state_d
        .entries()
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .find(|n| n.ends_with(".json"))
        .unwrap();
    let j: Journal = serde_json::from_slice(&state_d.read(&name).unwrap()).unwrap();
    // A partial roll-forward: only the second file.
    if let Step::Write { tmp, path, .. } = &j.steps[1] {
        d.b.rename(tmp, path).unwrap();
    }
    let report = recover(&d.b, Some(&d.state)).unwrap();
    assert_eq!(report.recovered[0].direction, Direction::Forward);
    assert!(state(t.path(), &files, true));
    assert!(leftovers(t.path(), &d).is_empty());
}

#[test]
fn roll_back_restores_from_the_backups_and_spares_later_changes() {
    let (t, d) = ws();
    let files = scenario(t.path());
    // Stop after the first rename, then lose the second temporary file: back.
    let _ = commit_with(&d.b, &d.state, &changes(&files), &mut |what| {
        !what.starts_with("renamed")
    });
    let tmp_b = find_temps(&d.b, Some(Path::new("sub")));
    assert_eq!(tmp_b.len(), 1);
    std::fs::remove_file(t.path().join(&tmp_b[0])).unwrap();
    assert_eq!(
        std::fs::read_to_string(t.path().join("a.txt")).unwrap(),
        "a new\n"
    );
    // The user edits a file the apply had not reached yet... and one it had not either.
    std::fs::write(t.path().join("gone.txt"), "user's\n").unwrap();
    let report = recover(&d.b, Some(&d.state)).unwrap();
    let rec = &report.recovered[0];
    assert_eq!(rec.direction, Direction::Back);
    assert_eq!(
        std::fs::read_to_string(t.path().join("a.txt")).unwrap(),
        "a old\n"
    );
    assert_eq!(
        std::fs::read_to_string(t.path().join("sub/b.txt")).unwrap(),
        "b old\n"
    );
    assert!(!t.path().join("new/dir/c.txt").exists());
    assert_eq!(
        std::fs::read_to_string(t.path().join("gone.txt")).unwrap(),
        "user's\n"
    );
    assert_eq!(rec.skipped.len(), 1, "{rec:?}");
    assert_eq!(rec.skipped[0].path, "gone.txt");
    assert!(
        rec.files
            .iter()
            .any(|f| f.path == "a.txt" && f.outcome == "restored")
    );
    let msg = report.messages().join("\n");
    assert!(
        msg.contains("rolled back") && msg.contains("a.txt (restored)"),
        "{msg}"
    );
    assert!(
        leftovers(t.path(), &d).is_empty(),
        "{:?}",
        leftovers(t.path(), &d)
    );
}

#[test]
fn stale_temporary_files_are_removed_and_others_kept() {
    let (t, d) = ws();
    std::fs::write(t.path().join(".a.rs.kiln-tmp-4242"), "x").unwrap();
    std::fs::write(t.path().join("a.rs"), "keep").unwrap();
    std::fs::write(t.path().join(".hidden"), "keep").unwrap();
    let report = recover(&d.b, Some(&d.state)).unwrap();
    assert_eq!(
        report.removed_temps,
        vec![".a.rs.kiln-tmp-4242".to_string()]
    );
    assert!(t.path().join("a.rs").exists() && t.path().join(".hidden").exists());
    // Nothing to do: nothing is created.
    let (t, d) = ws();
    assert!(recover(&d.b, Some(&d.state)).unwrap().is_empty());
    assert!(!t.path().join(".kiln").exists());
}

#[test]
fn nothing_is_written_through_a_link_in_the_workspace() {
    let (t, d) = ws();
    std::fs::create_dir_all(t.path().join(".git/hooks")).unwrap();
    std::os::unix::fs::symlink(".git", t.path().join("g")).unwrap();
    let err = commit_with(
        &d.b,
        &d.state,
        &[Change::Write {
            path: "g/hooks/pre-commit",
            text: "#!/bin/sh\necho owned\n",
            before: None,
            mode: None,
        }],
        &mut |_| true,
    )
    .unwrap_err();
    assert!(err.to_string().contains("symbolic link"), "{err}");
    assert!(!t.path().join(".git/hooks/pre-commit").exists());
    // A journal naming a path through the link: its roll-back does not restore through it.
    let j = Journal {
        kiln_journal: VERSION,
        id: "1-2-3".into(),
        pid: 1,
        started_ms: 0,
        created_dirs: vec![],
        // A write whose temporary file is missing: rolled back, which would restore the
        // "deleted" hook from its backup.
        steps: vec![
            write_step("a", None, "x"),
            Step::Remove {
                path: "g/hooks/pre-commit".into(),
                before: Some(h("evil")),
                backup: Some("1".into()),
            },
        ],
    };
    let sp = d.state_dir.path();
    std::fs::write(sp.join("apply-1-2-3.json"), serde_json::to_vec(&j).unwrap()).unwrap();
    std::fs::write(sp.join("apply-1-2-3.1"), "evil").unwrap();
    let report = recover(&d.b, Some(&d.state)).unwrap();
    assert!(
        !t.path().join(".git/hooks/pre-commit").exists(),
        "{report:?}"
    );
}

#[test]
fn a_path_changed_twice_is_refused_before_anything_is_written() {
    let (t, d) = ws();
    let err = commit_with(
        &d.b,
        &d.state,
        &[
            Change::Write {
                path: "x",
                text: "1",
                before: None,
                mode: None,
            },
            Change::Write {
                path: "./x",
                text: "2",
                before: None,
                mode: None,
            },
        ],
        &mut |_| true,
    )
    .unwrap_err();
    assert!(err.to_string().contains("changed twice"), "{err}");
    assert!(!t.path().join("x").exists() && !t.path().join(".kiln").exists());
}

#[test]
fn a_damaged_journal_is_set_aside() {
    let (_t, d) = ws();
    let sp = d.state_dir.path().to_path_buf();
    std::fs::write(sp.join("apply-1-2-3.json"), "{").unwrap();
    // A journal naming a protected path is damaged too.
    let j = Journal {
        kiln_journal: VERSION,
        id: "4-5-6".into(),
        pid: 1,
        started_ms: 0,
        created_dirs: vec![],
        steps: vec![Step::Remove {
            path: ".git/config".into(),
            before: None,
            backup: None,
        }],
    };
    std::fs::write(sp.join("apply-4-5-6.json"), serde_json::to_vec(&j).unwrap()).unwrap();
    let report = recover(&d.b, Some(&d.state)).unwrap();
    assert_eq!(report.damaged.len(), 2);
    assert!(sp.join("apply-1-2-3.json.damaged").exists());
    assert!(recover(&d.b, Some(&d.state)).unwrap().is_empty());
}

#[test]
fn written_files_never_carry_set_user_id_set_group_id_or_sticky_bits() {
    use std::os::unix::fs::PermissionsExt;
    let (t, d) = ws();
    let mode_of = |p: &str| {
        std::fs::metadata(t.path().join(p))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    };
    for (name, m) in [("suid", 0o4755), ("sgid", 0o2750), ("sticky", 0o1644)] {
        std::fs::write(t.path().join(name), "old").unwrap();
        std::fs::set_permissions(t.path().join(name), std::fs::Permissions::from_mode(m)).unwrap();
    }
    let change = |path, mode| Change::Write {
        path,
        text: "new",
        before: Some("old"),
        mode,
    };
    commit_with(
        &d.b,
        &d.state,
        &[
            change("suid", None),
            change("sgid", None),
            change("sticky", Some(0o4711)),
        ],
        &mut |_| true,
    )
    .unwrap();
    // The replaced file's bits are kept, a given mode is used: both only within 0o777.
    assert_eq!(mode_of("suid"), 0o755);
    assert_eq!(mode_of("sgid"), 0o750);
    assert_eq!(mode_of("sticky"), 0o711);
}

#[test]
fn a_roll_back_never_puts_back_a_set_user_id_bit() {
    use std::os::unix::fs::PermissionsExt;
    let (t, d) = ws();
    let files = scenario(t.path());
    let a = t.path().join("a.txt");
    std::fs::set_permissions(&a, std::fs::Permissions::from_mode(0o4755)).unwrap();
    // Stopped after the first rename with the second temporary file lost: rolled back, a.txt
    // from its backup (a hard link to the file as it was, set-user-ID bit and all).
    let _ = commit_with(&d.b, &d.state, &changes(&files), &mut |what| {
        !what.starts_with("renamed")
    });
    let tmp_b = find_temps(&d.b, Some(Path::new("sub")));
    std::fs::remove_file(t.path().join(&tmp_b[0])).unwrap();
    let report = recover(&d.b, Some(&d.state)).unwrap();
    assert_eq!(report.recovered[0].direction, Direction::Back);
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "a old\n");
    let mode = std::fs::metadata(&a).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o755, "{mode:o}");
}

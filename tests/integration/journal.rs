//! Crash-atomic applies: a real `kiln fix` (and `kiln edit apply` for deletions and moves)
//! stopped with SIGKILL at every step of its commit, through the debug-build hook
//! `KILN_TEST_APPLY_PAUSE=N` (the process stops right after the Nth step: each backup,
//! journal written, each temporary file, each rename, each directory fsync, each removal,
//! journal removed), plus kills at random times on 4 MiB files. After each kill the next command must
//! leave every file as an uninterrupted run would have at one of its stable points (all old
//! or all new), say which way it went, and leave no temporary file or journal behind.

use crate::mock_llm::{MockLlm, openai_text};
use crate::support::{Run, Workspace};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How a paused or finished child ended up.
enum Stopped {
    /// Stopped at the pause hook (the marker line), then killed with SIGKILL.
    Killed(String),
    /// Ran to its end without reaching the pause.
    Finished(Run),
}

/// Run `cmd` (stdin closed unless `stdin` is given) until it prints the pause marker, then
/// SIGKILL it; or until it exits on its own.
fn run_to_pause(mut cmd: Command, stdin: Option<&str>) -> Stopped {
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    if let Some(text) = stdin {
        use std::io::Write;
        let mut pipe = child.stdin.take().unwrap();
        pipe.write_all(text.as_bytes()).unwrap();
    }
    let (tx, rx) = mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            all.push_str(&line);
            all.push('\n');
            if line.starts_with("kiln-test: apply paused") {
                let _ = tx.send(line);
            }
        }
        all
    });
    match rx.recv_timeout(Duration::from_secs(120)) {
        Ok(marker) => {
            kill9(&mut child);
            let _ = reader.join();
            Stopped::Killed(marker)
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            let stderr = reader.join().unwrap();
            let mut out = child.wait_with_output().unwrap();
            out.stderr = stderr.into_bytes();
            Stopped::Finished(Run(out))
        }
        Err(mpsc::RecvTimeoutError::Timeout) => {
            kill9(&mut child);
            panic!("kiln neither paused nor finished in 120 s");
        }
    }
}

fn kill9(child: &mut Child) {
    // Child::kill sends SIGKILL on Unix.
    child.kill().unwrap();
    child.wait().unwrap();
}

/// Every `.NAME.kiln-tmp-*` file and every journal file left in the workspace `root`, and
/// every journal file or backup left in kiln's state directory beside it.
fn leftovers(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let state = root.parent().unwrap().join("state");
    let mut stack = vec![root.to_path_buf(), state];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            let rel = e
                .path()
                .strip_prefix(root)
                .unwrap_or(&e.path())
                .display()
                .to_string();
            if e.file_type().unwrap().is_dir() {
                if rel.starts_with(".kiln/journal/apply-") {
                    out.push(rel.clone());
                }
                stack.push(e.path());
            } else if name.contains(".kiln-tmp-") || name.starts_with("apply-") {
                out.push(rel);
            }
        }
    }
    out.sort();
    out
}

/// A workspace file's content, `None` when absent.
fn content(ws: &Workspace, rel: &str) -> Option<String> {
    std::fs::read_to_string(ws.root().join(rel)).ok()
}

/// Which of `states` (each a list of (path, content)) the workspace is in.
fn which_state(ws: &Workspace, states: &[Vec<(&str, Option<String>)>]) -> Option<usize> {
    states.iter().position(|s| {
        s.iter()
            .all(|(path, want)| content(ws, path).as_deref() == want.as_deref())
    })
}

/// The next command after a kill: recovery runs first. Returns its stderr.
fn next_start(ws: &Workspace, files: &[&str]) -> String {
    let mut args = vec!["check", "--cmd", "true", "--files"];
    args.extend_from_slice(files);
    let r = ws.kiln(&args, &[]);
    r.expect_code(0);
    r.stderr()
}

fn lines(prefix: &str, n: usize) -> String {
    (0..n).map(|i| format!("{prefix} line {i}\n")).collect()
}

fn sr_two(a_from: &str, a_to: &str, b_from: &str, b_to: &str) -> String {
    format!(
        "Both files.\n\n<<< path=a.txt >>>\n<<<<<<< SEARCH\n{a_from}=======\n{a_to}>>>>>>> REPLACE\n<<< path=b.txt >>>\n<<<<<<< SEARCH\n{b_from}=======\n{b_to}>>>>>>> REPLACE\n"
    )
}

fn fix_command(ws: &Workspace, mock: &MockLlm, max_iters: &str) -> Command {
    let base = format!("{}/v1", mock.url);
    let mut cmd = ws.command(&[
        "fix",
        "--base-url",
        &base,
        "--model",
        "m",
        "--json",
        "--cmd",
        "false",
        "--files",
        "a.txt",
        "b.txt",
        "--max-iters",
        max_iters,
    ]);
    cmd.env("OPENAI_API_KEY", "sk-journal-test");
    cmd
}

/// Sweep the pause hook over every step of `start`'s apply: kill there, then check the next
/// start. Returns (kill points, torn states seen before recovery, rolled forward, rolled back).
fn sweep(
    setup: &dyn Fn(&Workspace),
    start: &dyn Fn(&Workspace, u32) -> Stopped,
    states: &[Vec<(&str, Option<String>)>],
    files: &[&str],
) -> (u32, u32, u32, u32) {
    let (mut points, mut torn, mut forward, mut back) = (0, 0, 0, 0);
    for n in 1.. {
        let ws = Workspace::new();
        setup(&ws);
        let marker = match start(&ws, n) {
            Stopped::Finished(r) => {
                // Past the last step: the apply ran to its end.
                assert!(n > 5, "the apply has only {} steps: {}", n - 1, r.stderr());
                assert_eq!(which_state(&ws, states), Some(states.len() - 1));
                assert_eq!(leftovers(&ws.root()), Vec::<String>::new());
                break;
            }
            Stopped::Killed(m) => m,
        };
        points += 1;
        if which_state(&ws, states).is_none() {
            torn += 1;
        }
        let stderr = next_start(&ws, files);
        let state = which_state(&ws, states);
        assert!(
            state.is_some(),
            "after {marker}: the files are in no state an uninterrupted run passes through\nstderr: {stderr}\n{:?}",
            files
                .iter()
                .map(|f| (f, content(&ws, f)))
                .collect::<Vec<_>>()
        );
        if stderr.contains("rolled forward") {
            forward += 1;
            assert_eq!(state, Some(states.len() - 1), "{marker}: {stderr}");
        } else if stderr.contains("rolled back") {
            back += 1;
            assert_eq!(state, Some(0), "{marker}: {stderr}");
        } else if marker.contains("backed up") {
            // Killed before the journal existed: nothing had changed (the backups made so
            // far are removed quietly).
            assert_eq!(state, Some(0), "{marker}: {stderr}");
        } else {
            // Killed once the journal was gone: the apply had finished.
            assert!(marker.contains("journal removed"), "{marker}: {stderr}");
            assert_eq!(state, Some(states.len() - 1));
        }
        assert_eq!(
            leftovers(&ws.root()),
            Vec::<String>::new(),
            "{marker}: {stderr}"
        );
        // The store stays readable and a new command runs.
        ws.kiln(&["history", "--json"], &[]).expect_code(0);
    }
    (points, torn, forward, back)
}

#[test]
fn kiln_fix_killed_at_every_step_of_a_two_file_apply_is_all_or_nothing() {
    if !cfg!(debug_assertions) {
        eprintln!("skipped: the pause hook exists in debug builds only");
        return;
    }
    let (a0, b0) = (lines("a", 50), lines("b", 50));
    let a1 = a0.replace("a line 10\n", "a line ten\n");
    let b1 = b0.replace("b line 20\n", "b line twenty\n");
    let reply = sr_two(
        "a line 10\n",
        "a line ten\n",
        "b line 20\n",
        "b line twenty\n",
    );
    let states = vec![
        vec![("a.txt", Some(a0.clone())), ("b.txt", Some(b0.clone()))],
        vec![("a.txt", Some(a1.clone())), ("b.txt", Some(b1.clone()))],
    ];
    let setup = |ws: &Workspace| {
        ws.write("a.txt", &a0);
        ws.write("b.txt", &b0);
    };
    let start = |ws: &Workspace, n: u32| {
        let mock = MockLlm::start(vec![openai_text(&reply)]);
        let mut cmd = fix_command(ws, &mock, "1");
        cmd.env("KILN_TEST_APPLY_PAUSE", n.to_string());
        run_to_pause(cmd, None)
    };
    let (points, torn, forward, back) = sweep(&setup, &start, &states, &["a.txt", "b.txt"]);
    eprintln!(
        "kiln fix, two files: {points} kill points, {torn} torn before recovery, {forward} rolled forward, {back} rolled back"
    );
    assert!(points >= 9, "{points}");
    // Between the first and the second rename the pair is torn on disk; recovery mends it.
    assert!(torn >= 1 && forward >= 1 && back >= 1);
}

#[test]
fn deletions_moves_and_new_files_take_part_in_the_journal() {
    if !cfg!(debug_assertions) {
        eprintln!("skipped: the pause hook exists in debug builds only");
        return;
    }
    let a0 = "def a():\n    return 1\n";
    let b0 = "def b():\n    return 2\n";
    let d0 = "obsolete = True\n";
    let patch = "*** Begin Patch\n*** Update File: a.py\n@@ def a():\n-    return 1\n+    return 10\n*** Update File: b.py\n*** Move to: moved/b2.py\n@@ def b():\n-    return 2\n+    return 20\n*** Delete File: d.py\n*** Add File: new/e.py\n+e = 5\n*** End Patch\n";
    let states = vec![
        vec![
            ("a.py", Some(a0.to_string())),
            ("b.py", Some(b0.to_string())),
            ("moved/b2.py", None),
            ("d.py", Some(d0.to_string())),
            ("new/e.py", None),
        ],
        vec![
            ("a.py", Some(a0.replace("return 1", "return 10"))),
            ("b.py", None),
            ("moved/b2.py", Some(b0.replace("return 2", "return 20"))),
            ("d.py", None),
            ("new/e.py", Some("e = 5\n".to_string())),
        ],
    ];
    let setup = |ws: &Workspace| {
        ws.write("a.py", a0);
        ws.write("b.py", b0);
        ws.write("d.py", d0);
    };
    let start = |ws: &Workspace, n: u32| {
        let mut cmd = ws.command(&["edit", "apply", "--format", "apply-patch", "--json"]);
        cmd.env("KILN_TEST_APPLY_PAUSE", n.to_string());
        run_to_pause(cmd, Some(patch))
    };
    let (points, torn, forward, back) = sweep(&setup, &start, &states, &["a.py"]);
    eprintln!(
        "kiln edit apply, update + move + delete + add: {points} kill points, {torn} torn before recovery, {forward} rolled forward, {back} rolled back"
    );
    assert!(points >= 14, "{points}");
    assert!(torn >= 1 && forward >= 1 && back >= 1);
}

#[test]
fn a_rolled_back_apply_leaves_no_new_directory() {
    if !cfg!(debug_assertions) {
        return;
    }
    let ws = Workspace::new();
    ws.write("a.py", "a = 1\n");
    // Stopped after the first of two temporary files (journal, backup, directories, a.py's
    // temporary file): the second is missing, so the apply is rolled back.
    let patch = "*** Begin Patch\n*** Update File: a.py\n@@\n-a = 1\n+a = 2\n*** Add File: deep/er/e.py\n+e = 5\n*** End Patch\n";
    let mut cmd = ws.command(&["edit", "apply", "--format", "apply-patch"]);
    cmd.env("KILN_TEST_APPLY_PAUSE", "3");
    let Stopped::Killed(marker) = run_to_pause(cmd, Some(patch)) else {
        panic!("did not pause");
    };
    assert!(marker.contains("wrote and fsync'd"), "{marker}");
    assert!(ws.root().join("deep/er").is_dir());
    let stderr = next_start(&ws, &["a.py"]);
    assert!(stderr.contains("rolled back"), "{stderr}");
    assert!(!ws.root().join("deep").exists());
    assert_eq!(ws.read("a.py"), "a = 1\n");
}

#[test]
fn the_next_start_says_what_it_recovered() {
    if !cfg!(debug_assertions) {
        return;
    }
    let ws = Workspace::new();
    ws.write("a.txt", "a\n");
    ws.write("b.txt", "b\n");
    let reply = sr_two("a\n", "A\n", "b\n", "B\n");
    // Step 6: journal, 2 backups, 2 temporary files, first rename: torn on disk.
    let mut cmd = ws.command(&["edit", "apply", "--files", "a.txt", "b.txt"]);
    cmd.env("KILN_TEST_APPLY_PAUSE", "6");
    let Stopped::Killed(marker) = run_to_pause(cmd, Some(&reply)) else {
        panic!("did not pause");
    };
    assert!(marker.contains("renamed"), "{marker}");
    assert_eq!(
        (ws.read("a.txt"), ws.read("b.txt")),
        ("A\n".into(), "b\n".into())
    );
    // The journal of the interrupted apply is in kiln's state directory, not the workspace.
    assert!(!ws.root().join(".kiln/journal").exists());
    let files = state_journals(&ws);
    let journals = files
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "json"));
    // The journal and a backup of each of the two files.
    assert_eq!((journals.count(), files.len()), (1, 3), "{files:?}");
    // Read-only commands leave it alone.
    ws.kiln(&["history"], &[]).expect_code(0);
    assert_eq!(ws.read("b.txt"), "b\n");
    let stderr = next_start(&ws, &["a.txt"]);
    assert!(
        stderr.contains("rolled forward: a.txt (new content), b.txt (new content)"),
        "{stderr}"
    );
    assert_eq!(
        (ws.read("a.txt"), ws.read("b.txt")),
        ("A\n".into(), "B\n".into())
    );
    assert!(state_journals(&ws).is_empty());
    // Said once.
    let stderr = next_start(&ws, &["a.txt"]);
    assert!(!stderr.contains("rolled"), "{stderr}");
}

#[test]
fn stale_temporary_files_of_a_killed_run_are_removed_at_start() {
    let ws = Workspace::new();
    ws.write("a.txt", "a\n");
    // As an older kiln killed mid-write left them.
    ws.write(".a.txt.kiln-tmp-4242", "partial");
    ws.write(".keep-me", "not kiln's");
    let stderr = next_start(&ws, &["a.txt"]);
    assert!(
        stderr.contains(
            "removed 1 stale temporary file(s) of an interrupted edit: .a.txt.kiln-tmp-4242"
        ),
        "{stderr}"
    );
    assert!(!ws.root().join(".a.txt.kiln-tmp-4242").exists());
    assert!(ws.root().join(".keep-me").exists());
    // Read-only commands create nothing, even then.
    let ws = Workspace::new();
    ws.write(".a.txt.kiln-tmp-4242", "partial");
    ws.kiln(&["history"], &[]);
    assert!(ws.root().join(".a.txt.kiln-tmp-4242").exists());
}

#[test]
fn a_symlinked_kiln_directory_redirects_nothing() {
    let ws = Workspace::new();
    ws.write("a.txt", "a\n");
    let elsewhere = ws.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, ws.root().join(".kiln")).unwrap();
    let r = ws.kiln_stdin(
        &["edit", "apply", "--files", "a.txt"],
        "<<<<<<< SEARCH\na\n=======\nA\n>>>>>>> REPLACE\n",
    );
    // The journal lives in kiln's state directory: the apply is whole, and nothing reaches
    // the directory `.kiln` points to.
    r.expect_code(0);
    assert_eq!(ws.read("a.txt"), "A\n");
    assert!(std::fs::read_dir(&elsewhere).unwrap().next().is_none());
    assert!(state_journals(&ws).is_empty());
}

/// The journal files (`apply-*`) in kiln's state directory for any workspace.
fn state_journals(ws: &Workspace) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let Ok(spaces) = std::fs::read_dir(ws.state_home().join("kiln/workspaces")) else {
        return out;
    };
    for s in spaces {
        let j = s.unwrap().path().join("journal");
        for e in std::fs::read_dir(j).into_iter().flatten() {
            let p = e.unwrap().path();
            if p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("apply-")
            {
                out.push(p);
            }
        }
    }
    out
}

#[test]
fn ctrl_c_during_the_commit_finishes_the_apply_before_exiting() {
    if !cfg!(debug_assertions) {
        return;
    }
    // `kiln edit apply` (no loop to cancel): exits 130, but only after the last rename.
    let ws = Workspace::new();
    ws.write("a.txt", "a\n");
    ws.write("b.txt", "b\n");
    let reply = sr_two("a\n", "A\n", "b\n", "B\n");
    let mut cmd = ws.command(&["edit", "apply", "--files", "a.txt", "b.txt"]);
    // Pause 1.5 s after the first rename, then go on.
    cmd.env("KILN_TEST_APPLY_PAUSE", "6:1500")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    {
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(reply.as_bytes())
            .unwrap();
    }
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let marker = loop {
        let l = lines.next().unwrap().unwrap();
        if l.starts_with("kiln-test:") {
            break l;
        }
    };
    assert!(marker.contains("paused after step 6"), "{marker}");
    // SAFETY: sending SIGINT to the child we spawned.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let status = child.wait().unwrap();
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert_eq!(status.code(), Some(130), "{rest:?}");
    assert_eq!(
        (ws.read("a.txt"), ws.read("b.txt")),
        ("A\n".into(), "B\n".into())
    );
    assert_eq!(leftovers(&ws.root()), Vec::<String>::new());

    // `kiln fix`: the loop is cancelled once the apply is complete.
    let ws = Workspace::new();
    ws.write("a.txt", "a\n");
    ws.write("b.txt", "b\n");
    let mock = MockLlm::start(vec![openai_text(&reply)]);
    let mut cmd = fix_command(&ws, &mock, "3");
    cmd.env("KILN_TEST_APPLY_PAUSE", "6:1500")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let marker = loop {
        let l = lines.next().unwrap().unwrap();
        if l.starts_with("kiln-test:") {
            break l;
        }
    };
    assert!(marker.contains("paused after step 6"), "{marker}");
    // SAFETY: sending SIGINT to the child we spawned.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let out = child.wait_with_output().unwrap();
    let last: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(last["failure_reason"], "cancelled", "{last}");
    assert_eq!(
        (ws.read("a.txt"), ws.read("b.txt")),
        ("A\n".into(), "B\n".into())
    );
    assert_eq!(leftovers(&ws.root()), Vec::<String>::new());
}

#[test]
fn random_kills_of_a_fix_loop_over_two_large_files() {
    // Two files of almost 4 MiB (a plugin's output cap is 4 MiB), three iterations each
    // editing both (v0 -> v1 -> v2 -> v3), killed at random moments; every outcome is one
    // version in both files.
    const MIB4: usize = (4 << 20) - (64 << 10);
    let body = |tag: &str| {
        let mut s = String::with_capacity(MIB4 + 100);
        let mut i = 0;
        while s.len() < MIB4 {
            s.push_str(&format!(
                "{tag} filler line {i:08} ................................\n"
            ));
            i += 1;
        }
        s
    };
    let (a_body, b_body) = (body("a"), body("b"));
    let version = |v: u32| {
        (
            format!("a version {v}\n{a_body}"),
            format!("b version {v}\n{b_body}"),
        )
    };
    let replies = || {
        (0..3)
            .map(|v| {
                openai_text(&sr_two(
                    &format!("a version {v}\n"),
                    &format!("a version {}\n", v + 1),
                    &format!("b version {v}\n"),
                    &format!("b version {}\n", v + 1),
                ))
            })
            .collect::<Vec<_>>()
    };
    let setup = |ws: &Workspace| {
        let (a, b) = version(0);
        ws.write("a.txt", &a);
        ws.write("b.txt", &b);
    };
    let versions: Vec<(String, String)> = (0..=3).map(version).collect();
    let which = |ws: &Workspace| {
        let (a, b) = (content(ws, "a.txt"), content(ws, "b.txt"));
        versions
            .iter()
            .position(|(va, vb)| a.as_deref() == Some(va) && b.as_deref() == Some(vb))
    };
    // An uninterrupted run, timed.
    let ws = Workspace::new();
    setup(&ws);
    let mock = MockLlm::start(replies());
    let started = Instant::now();
    let out = fix_command(&ws, &mock, "3").output().unwrap();
    let full = started.elapsed();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .unwrap_or("")
    );
    assert_eq!(which(&ws), Some(3));
    // Kill at pseudo-random moments within that time.
    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64
        | 1;
    let runs = 16;
    let mut outcomes = [0u32; 4];
    let (mut torn, mut recovered) = (0, 0);
    for _ in 0..runs {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        // The first quarter is start-up: no apply runs there.
        let at = full.mul_f64(0.25 + 0.75 * (seed % 1000) as f64 / 1000.0);
        let ws = Workspace::new();
        setup(&ws);
        let mock = MockLlm::start(replies());
        let mut child = fix_command(&ws, &mock, "3")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(at);
        kill9(&mut child);
        if which(&ws).is_none() {
            torn += 1;
        }
        let stderr = next_start(&ws, &["a.txt", "b.txt"]);
        if stderr.contains("rolled") {
            recovered += 1;
        }
        let v =
            which(&ws).unwrap_or_else(|| panic!("killed at {at:?}: torn after recovery; {stderr}"));
        outcomes[v] += 1;
        assert_eq!(
            leftovers(&ws.root()),
            Vec::<String>::new(),
            "killed at {at:?}"
        );
    }
    eprintln!(
        "random kills: {runs} runs over {full:?}, outcomes by version {outcomes:?}, {recovered} inside a commit, {torn} torn before recovery"
    );
}

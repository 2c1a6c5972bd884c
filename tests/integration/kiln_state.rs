//! Issue 30, items 3 and 7: nothing kiln trusts lives where a program or plugin can write
//! (the store is in kiln's state directory, grants over kiln's own directories are refused,
//! compiled plugins are loaded only when their signature checks), and the history tools answer
//! for this project only.

use crate::mock_llm::{MockLlm, openai_calls, openai_text, tool_contents};
use crate::support::{Run, Workspace, runtime_with_cache, sr};
use kiln::plugin::Source;
use std::path::Path;

/// `kiln fix` with a replayed answer and `--cmd sh wreck.sh`, a check that runs `script`.
fn fix_running(ws: &Workspace, script: &str) -> Run {
    ws.write("a.txt", "one\n");
    ws.write("wreck.sh", script);
    let replay = ws.path().join("replay.jsonl");
    std::fs::write(&replay, "\"no change\"\n").unwrap();
    ws.kiln(
        &[
            "fix",
            "--replay",
            replay.to_str().unwrap(),
            "--runner",
            "command",
            "--cmd",
            "sh wreck.sh",
            "--file",
            "a.txt",
            "--max-iters",
            "1",
        ],
        &[],
    )
}

/// Hole 5: a program the run starts rewrites `.kiln/kiln.db` (and tries the real store): the
/// record a later `kiln history` and `kiln report` read is kiln's, intact, and the store file
/// is outside the workspace.
#[test]
fn a_program_cannot_rewrite_the_record_a_later_history_reads() {
    let ws = Workspace::new();
    let store = ws.store_path();
    let script = format!(
        "mkdir -p .kiln\nprintf 'not a database' > .kiln/kiln.db\nprintf 'not a database' > '{}'\nprintf 'not a database' > '{}-wal'\nexit 1\n",
        store.display(),
        store.display()
    );
    fix_running(&ws, &script).expect_code(1);
    // Where the store used to be is read-only in the program's view now (`.kiln`), and the
    // store itself is outside it.
    assert!(
        std::fs::read(ws.root().join(".kiln/kiln.db")).map_or(true, |b| b != b"not a database"),
        "the program wrote .kiln/kiln.db"
    );
    assert!(!store.starts_with(ws.root()), "{}", store.display());
    assert!(
        store.is_file(),
        "the run was recorded in {}",
        store.display()
    );

    let r = ws.kiln(&["history", "--json"], &[]);
    r.expect_code(0);
    let row: serde_json::Value = serde_json::from_str(r.stdout().lines().next().unwrap()).unwrap();
    assert_eq!(
        (&row["kind"], &row["runner"], &row["status"], &row["iters"]),
        (
            &serde_json::json!("fix"),
            &serde_json::json!("command"),
            &serde_json::json!("failed"),
            &serde_json::json!(1)
        ),
        "{row}"
    );
    let id = row["id"].as_i64().unwrap();
    let detail = ws.kiln(&["history", "show", &id.to_string(), "--json"], &[]);
    detail.expect_code(0);
    assert_eq!(detail.json()["id"], id);
    assert!(!detail.json()["iterations"].as_array().unwrap().is_empty());
    ws.kiln(&["report", &id.to_string(), "--html", "r.html"], &[])
        .expect_code(0);
    let project = ws.store().loop_detail(id).unwrap().row.project;
    assert_eq!(
        Path::new(&project),
        ws.root().canonicalize().unwrap(),
        "recorded under the workspace's canonical path"
    );
}

/// The first run in a workspace an earlier kiln used says, once, that its `.kiln/kiln.db` is
/// ignored; its runs are not read.
#[test]
fn an_old_store_in_the_workspace_is_named_and_ignored() {
    let ws = Workspace::new();
    // An old store holding a planted run (what a program could have left there).
    {
        let old = ws.root().join(".kiln");
        std::fs::create_dir_all(&old).unwrap();
        let mut s = kiln::store::Store::open_file(
            &old.join("kiln.db"),
            &ws.root().canonicalize().unwrap().to_string_lossy(),
        )
        .unwrap();
        s.begin_loop(&kiln::store::NewLoop {
            kind: kiln::store::RunKind::Agent,
            runner: "planted".into(),
            targets: vec![],
            format: "planted".into(),
            model: "planted".into(),
            max_iters: 1,
            parent: None,
        })
        .unwrap();
    }
    let r = ws.kiln(&["history", "--json"], &[]);
    r.expect_code(0);
    assert!(r.stdout().trim().is_empty(), "{}", r.stdout());
    assert!(
        r.stderr()
            .contains(".kiln/kiln.db from an earlier kiln is ignored"),
        "{}",
        r.stderr()
    );
    let first = fix_running(&ws, "exit 1\n");
    assert!(
        first.stderr().contains("is ignored"),
        "the run that makes the new store says so: {}",
        first.stderr()
    );
    let second = fix_running(&ws, "exit 1\n");
    assert!(
        !second.stderr().contains("is ignored"),
        "{}",
        second.stderr()
    );
    let rows = ws.store().loops(10).unwrap();
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|r| r.runner == "command"), "{rows:?}");
}

/// Hole 7 (and the state directory): a grant that is, is inside or contains kiln's
/// configuration, state or cache directory is refused, naming the grant and the directory.
#[test]
fn grants_covering_kiln_dirs_are_refused_naming_the_overlap() {
    let ws = Workspace::new();
    let cache = crate::support::shared_cache();
    let state = ws.state_home().join("kiln");
    let home = ws.path().to_path_buf();
    let cases = [
        // `~` holds kiln's configuration (and here its state) directory.
        (
            r#"write = ["~"]"#.to_string(),
            "contains",
            home.join(".config/kiln"),
        ),
        (
            format!("write = [{:?}]", cache.parent().unwrap()),
            "contains",
            cache.clone(),
        ),
        (
            format!("write = [{:?}]", cache.join("components")),
            "is inside",
            cache.clone(),
        ),
        (
            format!("read = [{:?}]", state.join("workspaces")),
            "is inside",
            state.clone(),
        ),
        (format!("read = [{:?}]", state), "is", state.clone()),
        (
            r#"write = ["~/.config"]"#.to_string(),
            "contains",
            home.join(".config/kiln"),
        ),
    ];
    for (line, relation, dir) in cases {
        ws.write(
            "kiln.toml",
            &format!("[plugins.escape]\nfs = [\".\"]\n{line}\n"),
        );
        let r = ws.escape_tool("exec", r#"{"program":"true","args":[]}"#, &[]);
        r.expect_code(2);
        let grant = line.split('[').nth(1).unwrap().trim_end_matches(']');
        let err = r.stderr();
        assert!(
            err.contains("is refused")
                && err.contains(grant.trim_matches('"'))
                && err.contains(&format!("it {relation} "))
                && err.contains(&dir.display().to_string()),
            "{line}: {err}"
        );
    }
    // `~/.cache` contains the default compile cache, `~/.cache/kiln`.
    ws.write(
        "kiln.toml",
        "[plugins.escape]\nfs = [\".\"]\nwrite = [\"~/.cache\"]\n",
    );
    let own_cache = tempfile::tempdir().unwrap();
    let mut cmd = ws.command(&[
        "--plugin",
        crate::support::wasm("kiln_test_escape").to_str().unwrap(),
        "tool",
        "call",
        "escape.exec",
        "--args",
        r#"{"program":"true","args":[]}"#,
    ]);
    cmd.env_remove("KILN_CACHE_DIR")
        .env("KILN_CACHE_KEY", own_cache.path().join("key"));
    let r = Run(cmd.output().unwrap());
    r.expect_code(2);
    assert!(
        r.stderr().contains("`write = [\"~/.cache\"]`")
            && r.stderr().contains("contains kiln's compile cache")
            && r.stderr()
                .contains(&home.join(".cache/kiln").display().to_string()),
        "{}",
        r.stderr()
    );
    // A directory beside kiln's is fine.
    std::fs::create_dir_all(home.join(".cache/tool")).unwrap();
    ws.write(
        "kiln.toml",
        "[plugins.escape]\nfs = [\".\"]\nexec = [{ program = \"true\", args = [\"*\"] }]\nwrite = [\"~/.cache/tool\"]\n",
    );
    ws.escape_tool("exec", r#"{"program":"true","args":[]}"#, &[])
        .expect_code(0);
}

/// The one cache entry in `dir` (a fresh cache that compiled one component).
fn only_entry(dir: &Path) -> std::path::PathBuf {
    let entries: Vec<_> = std::fs::read_dir(dir.join("components"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    entries[0].clone()
}

/// Hole 7: a cache entry kiln did not sign (a valid wasmtime artifact written by someone
/// else, another component's signed entry, a changed byte) is never loaded: it is replaced by
/// a fresh compile.
#[test]
fn a_tampered_compiled_plugin_is_recompiled_not_loaded() {
    let t = tempfile::tempdir().unwrap();
    let (cache, key) = (t.path().join("cache"), t.path().join("state/cache.key"));
    let fs = std::fs::read(crate::support::wasm("kiln_plugin_fs")).unwrap();
    let other = std::fs::read(crate::support::wasm("kiln_plugin_search_replace")).unwrap();
    let load = |bytes: &[u8]| {
        let rt = runtime_with_cache(&cache, &key);
        rt.check_bytes(bytes, Source::Builtin)
            .unwrap()
            .info
            .from_cache
    };
    assert!(!load(&fs), "a fresh cache compiles");
    let entry = only_entry(&cache);
    let signed = std::fs::read(&entry).unwrap();
    assert!(signed.starts_with(b"kilnmac1"));
    assert!(load(&fs), "a signed entry is loaded");
    let key_mode = {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(&key).unwrap().permissions().mode() & 0o777
    };
    assert_eq!(key_mode, 0o600);

    // What someone without the key can write: wasmtime's own artifact of the same component.
    let raw = runtime_with_cache(&cache, &key)
        .engine()
        .precompile_component(&fs)
        .unwrap();
    // Another component's entry, signed by this kiln, under this component's name.
    assert!(!load(&other));
    let other_entry = std::fs::read_dir(cache.join("components"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| *p != entry)
        .unwrap();
    let swapped = std::fs::read(&other_entry).unwrap();
    let mut flipped = signed.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 1;
    for (what, bytes) in [
        ("an unsigned artifact", raw),
        ("another component's signed entry", swapped),
        ("a changed byte", flipped),
        ("the signature alone", signed[..40].to_vec()),
    ] {
        std::fs::write(&entry, &bytes).unwrap();
        assert!(!load(&fs), "{what} was loaded");
        let now = std::fs::read(&entry).unwrap();
        assert_ne!(now, bytes, "{what} was left in place");
        assert!(
            now.starts_with(b"kilnmac1"),
            "{what}: not replaced by a signed entry"
        );
        assert!(load(&fs), "{what}: the fresh entry loads");
    }

    // Signed with another key (another user's cache, or a key file replaced): recompiled.
    let t2 = tempfile::tempdir().unwrap();
    let rt = runtime_with_cache(&cache, &t2.path().join("key"));
    assert!(
        !rt.check_bytes(&fs, Source::Builtin)
            .unwrap()
            .info
            .from_cache
    );
}

/// Through the CLI: a cached runner replaced by an unsigned artifact is not run; kiln
/// compiles it again, runs it correctly and replaces the entry.
#[test]
fn kiln_replaces_a_tampered_runner_and_still_runs_it() {
    let ws = Workspace::new();
    ws.write("a.txt", "x\n");
    let own = tempfile::tempdir().unwrap();
    let cache = own.path().join("cache");
    let check = |ws: &Workspace| {
        let mut cmd = ws.command(&["check", "--cmd", "true", "--file", "a.txt", "--json"]);
        cmd.env("KILN_CACHE_DIR", &cache)
            .env("KILN_CACHE_KEY", own.path().join("key"));
        let r = Run(cmd.output().unwrap());
        r.expect_code(0);
    };
    check(&ws);
    let entries: Vec<_> = std::fs::read_dir(cache.join("components"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(!entries.is_empty());
    let engine = kiln::plugin::Runtime::new(None).unwrap();
    let mut tampered = Vec::new();
    for e in &entries {
        // Each entry replaced by a valid, unsigned artifact of a do-nothing component.
        let raw = engine
            .engine()
            .precompile_component(&wat::parse_str("(component)").unwrap())
            .unwrap();
        std::fs::write(e, &raw).unwrap();
        tampered.push(raw);
    }
    check(&ws);
    for (e, raw) in entries.iter().zip(&tampered) {
        let now = std::fs::read(e).unwrap();
        assert_ne!(
            &now,
            raw,
            "{} still holds the planted artifact",
            e.display()
        );
        assert!(now.starts_with(b"kilnmac1"), "{}", e.display());
    }
}

/// Hole 13: on a store shared by two workspaces, `get_loop_detail` of the other workspace's
/// run answers exactly as for an id that does not exist.
#[test]
fn get_loop_detail_of_another_workspaces_run_is_not_found() {
    let shared = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", shared.path().join("shared.db").display());
    let (a, b) = (Workspace::new(), Workspace::new());
    let mock = MockLlm::start(vec![openai_text("done")]);
    let r = a.kiln(
        &[
            "agent",
            "--base-url",
            &format!("{}/v1", mock.url),
            "--model",
            "test-model",
            "--json",
            "-p",
            "secret plan of A",
        ],
        &[("KILN_STORE", &url)],
    );
    r.expect_code(0);
    let theirs = kiln::store::Store::open_file(&shared.path().join("shared.db"), "x")
        .unwrap()
        .all_loops(1)
        .unwrap()[0]
        .id;
    let missing = theirs + 1000;
    let mock = MockLlm::start(vec![
        openai_calls(&[
            ("get_loop_detail", &format!(r#"{{"id":{theirs}}}"#)),
            ("get_loop_detail", &format!(r#"{{"id":{missing}}}"#)),
            ("get_loops", "{}"),
        ]),
        openai_text("done"),
    ]);
    let r = b.kiln(
        &[
            "agent",
            "--base-url",
            &format!("{}/v1", mock.url),
            "--model",
            "test-model",
            "--json",
            "-p",
            "look at history",
        ],
        &[("KILN_STORE", &url)],
    );
    r.expect_code(0);
    let results = tool_contents(&mock, 1);
    assert_eq!(results.len(), 3, "{results:?}");
    let as_missing = |s: &str, id: i64| s.replace(&id.to_string(), "ID");
    assert_eq!(
        as_missing(&results[0], theirs),
        as_missing(&results[1], missing),
        "{results:?}"
    );
    assert!(results[0].contains("no loop with id"), "{results:?}");
    assert!(
        !results[2].contains(&format!("\"id\":{theirs}")) && !results.concat().contains("secret"),
        "{results:?}"
    );
}

/// The undo directory of the workspace `ws` in kiln's state directory.
fn undo_dir(ws: &Workspace) -> std::path::PathBuf {
    ws.store_path().parent().unwrap().join("undo")
}

/// The pre-image of `text`, as undo stores it.
fn object_of(ws: &Workspace, text: &str) -> std::path::PathBuf {
    use sha2::{Digest, Sha256};
    undo_dir(ws)
        .join("objects")
        .join(hex::encode(Sha256::digest(text.as_bytes())))
}

/// Issue 34: each run prunes its workspace's undo history to `[gc] keep_runs` (here 2) and
/// the pre-images no kept run needs, the latest run can still be undone, and `kiln gc`
/// removes (after a `--dry-run` that removes nothing) the state of a workspace that no longer
/// exists, and a workspace's kiln.toml's `[gc]` is ignored.
#[test]
fn runs_prune_their_undo_history_and_gc_removes_a_deleted_workspaces_state() {
    let ws = Workspace::new();
    ws.user_config("[gc]\nkeep_runs = 2\n");
    ws.write("check.sh", "grep -q ok x.txt\n");
    let answers = ws.path().join("answers.jsonl");
    for i in 1..=4 {
        // A change of the user's between runs: each run starts from another text.
        ws.write("x.txt", &format!("v{i}\n"));
        std::fs::write(
            &answers,
            format!("{}\n", serde_json::json!(sr(&format!("v{i}\n"), "ok\n"))),
        )
        .unwrap();
        ws.kiln(
            &[
                "fix",
                "--cmd",
                "sh check.sh",
                "--file",
                "x.txt",
                "--replay",
                answers.to_str().unwrap(),
            ],
            &[],
        )
        .expect_code(0);
        assert_eq!(ws.read("x.txt"), "ok\n");
    }
    let mut records: Vec<String> = std::fs::read_dir(undo_dir(&ws).join("runs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    records.sort();
    assert_eq!(
        records,
        ["3.json", "3.start.json", "4.json", "4.start.json"],
        "the two newest runs are kept"
    );
    for gone in ["v1\n", "v2\n"] {
        assert!(
            !object_of(&ws, gone).exists(),
            "{gone:?} is needed by no kept run"
        );
    }
    for kept in ["v3\n", "v4\n"] {
        assert!(
            object_of(&ws, kept).exists(),
            "{kept:?} is a kept run's pre-image"
        );
    }
    let undo = ws.kiln(&["undo"], &[]);
    undo.expect_code(0);
    assert_eq!(ws.read("x.txt"), "v4\n", "{}", undo.stderr());

    // A second workspace, run once, then deleted.
    let other = Workspace::new();
    other.write("check.sh", "true\n");
    other.write("y.txt", "y\n");
    let state_home = ws.state_home();
    other
        .kiln(
            &[
                "fix",
                "--cmd",
                "sh check.sh",
                "--file",
                "y.txt",
                "--replay",
                answers.to_str().unwrap(),
            ],
            &[("XDG_STATE_HOME", state_home.to_str().unwrap())],
        )
        .expect_code(0);
    let other_state = other.store_path_under(&state_home);
    let other_state = other_state.parent().unwrap().to_path_buf();
    assert!(other_state.is_dir());
    std::fs::remove_dir_all(other.root()).unwrap();

    let dry = ws.kiln(&["gc", "--dry-run", "--json"], &[]);
    dry.expect_code(0);
    let report = dry.json();
    let listed: Vec<&str> = report["workspaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["state"].as_str().unwrap())
        .collect();
    assert_eq!(listed, [other_state.to_str().unwrap()], "{report}");
    assert!(report["freed_bytes"].as_u64().unwrap() > 0);
    assert!(other_state.is_dir(), "a dry run removes nothing");

    let done = ws.kiln(&["gc"], &[]);
    done.expect_code(0);
    assert!(
        done.stdout().contains("no longer exists"),
        "{}",
        done.stdout()
    );
    assert!(!other_state.exists());
    assert!(ws.store_path().is_file(), "a live workspace's state stays");

    ws.write("kiln.toml", "[gc]\nkeep_runs = 1000\n");
    let ignored = ws.kiln(&["gc", "--dry-run"], &[]);
    ignored.expect_code(0);
    assert!(
        ignored
            .stderr()
            .contains("sets [gc], which a workspace kiln.toml may not set: ignored"),
        "{}",
        ignored.stderr()
    );
}

/// A repository's kiln.toml setting `[gc]`, `[batch]` or `[store]` (sections only the user's
/// own configuration may set) does not lock its user out: every command warns that the section
/// is ignored, naming the real path of the user's configuration, and runs; `kiln undo` puts
/// back a run and `kiln trust` trusts the file, while the user's own `[gc]` still holds.
#[test]
fn a_repository_setting_user_only_sections_is_warned_and_ignored_not_refused() {
    let ws = Workspace::new();
    ws.user_config("[gc]\nkeep_runs = 1\n");
    ws.write("check.sh", "grep -q ok x.txt\n");
    let answers = ws.path().join("answers.jsonl");
    let run = |i: usize| {
        ws.write("x.txt", &format!("v{i}\n"));
        std::fs::write(
            &answers,
            format!("{}\n", serde_json::json!(sr(&format!("v{i}\n"), "ok\n"))),
        )
        .unwrap();
        let r = ws.kiln(
            &[
                "fix",
                "--cmd",
                "sh check.sh",
                "--file",
                "x.txt",
                "--replay",
                answers.to_str().unwrap(),
            ],
            &[],
        );
        r.expect_code(0);
        r
    };
    run(1);
    ws.write(
        "kiln.toml",
        "[gc]\nkeep_runs = 1000\n\n[batch]\nlocal_repos = [\"/\"]\n\n[store]\nurl = \"postgres://u:s3cret@127.0.0.1:9/x\"\n",
    );
    let r = run(2);
    let user_config = ws.path().join("no-user-config.toml");
    for section in ["gc", "batch", "store"] {
        assert!(
            r.stderr().contains(&format!(
                "sets [{section}], which a workspace kiln.toml may not set: ignored"
            )),
            "{}",
            r.stderr()
        );
    }
    assert!(
        r.stderr().contains(&user_config.display().to_string()),
        "{}",
        r.stderr()
    );
    assert!(!r.stderr().contains("s3cret"), "{}", r.stderr());
    // The user's keep_runs = 1 held, not the repository's 1000: one run's undo record.
    let mut records: Vec<String> = std::fs::read_dir(undo_dir(&ws).join("runs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    records.sort();
    assert_eq!(records, ["2.json", "2.start.json"]);
    for args in [
        &["undo"][..],
        &["trust"],
        &["trust", "--check"],
        &["history"],
    ] {
        let r = ws.kiln(args, &[("KILN_YES", "0")]);
        r.expect_code(0);
        assert!(r.stderr().contains("sets [gc]"), "{args:?}: {}", r.stderr());
    }
    assert_eq!(ws.read("x.txt"), "v2\n");
}

/// F10: run from `~` (or with `-C ~`, or in a directory holding kiln's state), the workspace
/// would hold the user's keys and kiln's own configuration, state and cache key, readable and
/// writable by every program kiln runs. Refused, saying to run inside a project; and the
/// `.kiln` an earlier kiln left in `~` does not make `~` the workspace of a directory below.
#[test]
fn home_and_a_directory_holding_kilns_own_dirs_are_refused_as_workspaces() {
    let ws = Workspace::new();
    let home = ws.path().canonicalize().unwrap().join("home");
    let config = home.join(".config/kiln/config.toml");
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    let user_config = "[llm]\napi_key = \"sk-F10-CONFIG-KEY\"\n";
    std::fs::write(&config, user_config).unwrap();
    // The default XDG layout under this HOME: kiln's dirs are inside it.
    let run = |cwd: &Path, args: &[&str]| {
        let mut cmd = ws.command(args);
        cmd.current_dir(cwd)
            .env("HOME", &home)
            .env_remove("XDG_STATE_HOME")
            .env_remove("KILN_CONFIG");
        Run(cmd.output().unwrap())
    };
    let payload = "cat .config/kiln/config.toml; printf '[mcp.servers.x]\\ncommand = \"/bin/true\"\\n' >> .config/kiln/config.toml";
    for (cwd, args) in [
        (&home, vec!["check", "--shell", "--cmd", payload]),
        (
            &ws.root(),
            vec![
                "-C",
                home.to_str().unwrap(),
                "check",
                "--shell",
                "--cmd",
                payload,
            ],
        ),
        (
            &home,
            vec![
                "tool",
                "call",
                "read_file",
                "--args",
                r#"{"path":".config/kiln/config.toml"}"#,
            ],
        ),
    ] {
        let r = run(cwd, &args);
        r.expect_code(2);
        assert!(
            r.stderr().contains("is your home directory")
                && r.stderr().contains("run kiln inside a project"),
            "{}",
            r.stderr()
        );
        assert!(!r.stdout().contains("sk-F10"), "{}", r.stdout());
    }
    assert_eq!(std::fs::read_to_string(&config).unwrap(), user_config);
    assert!(!home.join(".kiln").exists(), "nothing was created in ~");
    // A project below `~` with no marker of its own, with a `.kiln` in `~`: its own directory
    // is the workspace, not `~`.
    std::fs::create_dir(home.join(".kiln")).unwrap();
    let proj = home.join("Downloads/proj");
    std::fs::create_dir_all(&proj).unwrap();
    let r = run(&proj, &["check", "--cmd", "pwd", "--json"]);
    r.expect_code(0);
    assert_eq!(
        r.json()["stdout"].as_str().unwrap().trim(),
        proj.to_str().unwrap()
    );
    // A workspace that holds kiln's state directory (not `~`): refused, naming it.
    std::fs::create_dir_all(home.join(".local/state/kiln")).unwrap();
    let r = run(&home.join(".local"), &["-C", ".", "check", "--cmd", "pwd"]);
    r.expect_code(2);
    assert!(
        r.stderr().contains("contains kiln's state directory"),
        "{}",
        r.stderr()
    );
    // Commands that run nothing there still work from `~`.
    run(&home, &["plugin", "list"]).expect_code(0);
}

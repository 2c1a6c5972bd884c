//! A test of the history tools over the store, on both backends (an SQLite file and a fresh
//! database of the throwaway PostgreSQL cluster of `tests/integration/pg.rs`). It lives here,
//! not in kiln-store, because the history tools are the engine's.

use crate::store::{IterationRow, NewLoop, RunKind, Store, StoreError, StoreUrl};

#[path = "../../../../../tests/integration/pg.rs"]
mod pg;

/// A database of one backend, opened as a store for any project.
enum Db {
    Sqlite(tempfile::TempDir),
    Pg(String),
}

impl Db {
    fn open(&self, project: &str) -> Store {
        let url: StoreUrl = match self {
            Db::Sqlite(dir) => StoreUrl::Sqlite(dir.path().join("k.db")),
            Db::Pg(url) => url.parse().unwrap(),
        };
        Store::open_project(&url, project).unwrap()
    }

    fn name(&self) -> &'static str {
        match self {
            Db::Sqlite(_) => "sqlite",
            Db::Pg(_) => "postgres",
        }
    }
}

fn backends() -> [Db; 2] {
    [
        Db::Sqlite(tempfile::tempdir().unwrap()),
        Db::Pg(pg::PgServer::shared().fresh_db()),
    ]
}

fn new_loop(kind: RunKind) -> NewLoop {
    NewLoop {
        kind,
        runner: "r".into(),
        targets: vec!["a.rs".into()],
        format: "f".into(),
        model: "m".into(),
        max_iters: 5,
        parent: None,
    }
}

fn sample_iteration() -> IterationRow {
    IterationRow {
        n: 1,
        exit_code: 101,
        stdout: "x".into(),
        diagnostics: serde_json::json!([{"line": 3}]),
        fingerprint: "fp".into(),
        llm_summary: Some("did it".into()),
        ..Default::default()
    }
}

fn sample_edit() -> kiln_protocol::edit::EditResult {
    kiln_protocol::edit::EditResult {
        path: "a.rs".into(),
        kind: "replace",
        status: "applied",
        tier: Some("exact".into()),
        failure: None,
        error: None,
        new_path: None,
    }
}

/// Issue 30, hole 13: in a shared store, another workspace's run is "not found" to this
/// project's history tools and replays, exactly like an id that does not exist; only the
/// user's own `kiln history ID` / `kiln report` read any project's.
#[test]
fn another_projects_run_is_not_found_like_a_missing_one() {
    use kiln_protocol::outcome::ToolOutcome;
    for db in backends() {
        let b = db.name();
        let mut a = db.open("/ws/a");
        let mut other = db.open("/ws/b");
        let la = a.begin_loop(&new_loop(RunKind::Fix)).unwrap();
        a.record_iteration(la, &sample_iteration(), &[sample_edit()])
            .unwrap();
        let lb = other.begin_loop(&new_loop(RunKind::Fix)).unwrap();
        let missing = lb + 1000;
        let not_found = |s: &Store, id: i64| match crate::engine::history::loop_detail(s, id) {
            ToolOutcome::Failed(text) => text.replace(&id.to_string(), "ID"),
            other => panic!("{b}: get_loop_detail({id}) answered {other:?}"),
        };
        assert_eq!(not_found(&other, la), not_found(&other, missing), "{b}");
        assert!(
            matches!(other.loop_detail(la), Err(StoreError::NoLoop(id)) if id == la),
            "{b}"
        );
        // Its own run, and the user's own look at any project's, still answer.
        assert!(
            matches!(
                crate::engine::history::loop_detail(&a, la),
                ToolOutcome::Ok(_)
            ),
            "{b}"
        );
        assert_eq!(
            other.any_loop_detail(la).unwrap().row.project,
            "/ws/a",
            "{b}"
        );
        let listed: Vec<i64> = match crate::engine::history::loops(&other, 0) {
            ToolOutcome::Ok(text) => serde_json::from_str::<Vec<serde_json::Value>>(&text)
                .unwrap()
                .iter()
                .map(|r| r["id"].as_i64().unwrap())
                .collect(),
            o => panic!("{b}: {o:?}"),
        };
        assert_eq!(
            listed,
            [lb],
            "{b}: get_loops lists this project's runs only"
        );
    }
}

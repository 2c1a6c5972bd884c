//! The store's tests, each run against both backends: an SQLite file and a fresh database of
//! a throwaway PostgreSQL cluster (one per test binary, `tests/integration/pg.rs`).

use super::*;
use conn::Conn;
use kiln_protocol::chat::{ChatResponse, Usage};

use super::test_pg as pg;

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

/// Run `sql` (an UPDATE with one `id` parameter, written `?1`) on either backend's connection.
fn raw_update(s: &mut Store, sql: &str, id: i64) {
    s.conn().execute(sql, &[id.into()]).unwrap();
}

#[test]
fn cap_keeps_head_and_tail_and_says_so() {
    let t = "a".repeat(1000) + &"z".repeat(1000);
    let c = cap_text(&t, 400);
    assert!(c.starts_with("aaa") && c.ends_with("zzz"));
    assert!(c.contains("bytes omitted"));
    assert_eq!(cap_text("short", 400), "short");
    let e = StoreError::Overlap {
        id: 3,
        pid: 42,
        started: now_ms() - 90_000,
    }
    .to_string();
    assert!(e.contains(" UTC, 1 min ago)"), "{e}");
}

#[test]
fn run_kinds_round_trip_by_name() {
    for k in RunKind::ALL {
        assert_eq!(RunKind::parse(k.as_str()), Some(k));
        assert_eq!(serde_json::to_value(k).unwrap(), k.as_str());
    }
    assert_eq!(RunKind::parse("review"), None);
    assert!(RunKind::LoopExecute == "loop-execute");
}

fn sample_iteration() -> IterationRow {
    IterationRow {
        n: 1,
        exit_code: 101,
        stdout: "x".repeat(MAX_STORED_TEXT + 10),
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

fn sample_response() -> ChatResponse {
    ChatResponse {
        text: "answer".into(),
        usage: Usage {
            input: 10,
            cached_input: 2,
            cache_write: 1,
            output: 5,
            reasoning: 1,
        },
        ..Default::default()
    }
}

/// Every write and read, on both backends: a loop with an iteration and its edits, an LLM
/// call (tokens summed), events, tool calls, its end, and the detail read back.
#[test]
fn a_loop_is_recorded_and_read_back_the_same_on_both_backends() {
    for db in backends() {
        let b = db.name();
        let mut s = db.open("/ws/a");
        let id = s.begin_loop(&new_loop(RunKind::Agent)).unwrap();
        s.record_iteration(id, &sample_iteration(), &[sample_edit()])
            .unwrap();
        let resp = sample_response();
        s.record_llm_call(id, 1, "m", Ok(&resp)).unwrap();
        s.record_llm_call(id, 1, "m", Ok(&resp)).unwrap();
        s.record_llm_call(id, 2, "m", Err("timed out")).unwrap();
        s.record_event(id, 0, "loop_started", &serde_json::json!({"a": 1}))
            .unwrap();
        s.record_event(id, 1, "loop_ended", &serde_json::json!({}))
            .unwrap();
        s.record_tool_call(id, 1, "c1", "read_file", "{}", "text", false, 3)
            .unwrap();
        s.record_tool_call(id, 2, "c2", "run_cmd", "{}", "denied", true, 4)
            .unwrap();
        s.set_iters(id, 2).unwrap();
        s.finish_loop(
            id,
            LoopStatus::Success,
            StopReason::Complete,
            "done",
            Some("e"),
        )
        .unwrap();
        let d = s.loop_detail(id).unwrap();
        let r = &d.row;
        assert_eq!(
            (r.kind, r.status.as_str()),
            (RunKind::Agent, "success"),
            "{b}"
        );
        assert_eq!(r.stop_reason.as_deref(), Some("complete"), "{b}");
        assert_eq!((r.iters, r.project.as_str()), (2, "/ws/a"), "{b}");
        assert_eq!(r.host.as_deref(), Some(host_name().as_str()), "{b}");
        assert_eq!(r.targets, ["a.rs"], "{b}");
        assert_eq!(
            (r.tokens.input, r.tokens.output, r.tokens.reasoning),
            (20, 10, 2),
            "{b}"
        );
        assert!(
            r.ended_at.is_some() && r.last_error.as_deref() == Some("e"),
            "{b}"
        );
        assert_eq!(d.iterations.len(), 1, "{b}");
        assert!(
            d.iterations[0].stdout.contains("bytes omitted"),
            "{b}: capped"
        );
        assert_eq!(d.iterations[0].diagnostics[0]["line"], 3, "{b}");
        assert_eq!(d.edits[0].tier.as_deref(), Some("exact"), "{b}");
        assert_eq!(d.llm_calls.len(), 3, "{b}");
        assert_eq!(d.llm_calls[2].error.as_deref(), Some("timed out"), "{b}");
        assert_eq!(s.event_count(id).unwrap(), 2, "{b}");
        let calls = s.tool_calls(id).unwrap();
        assert_eq!((calls.len(), calls[1].is_error), (2, true), "{b}");
        s.set_loop_tokens(id, &Usage::default()).unwrap();
        assert_eq!(s.loops(5).unwrap()[0].tokens.input, 0, "{b}");
        assert!(
            matches!(s.loop_detail(id + 100), Err(StoreError::NoLoop(_))),
            "{b}"
        );
    }
}

#[test]
fn projects_share_a_database_and_each_sees_its_own() {
    for db in backends() {
        let b = db.name();
        let mut a = db.open("/ws/a");
        let mut other = db.open("/ws/b");
        let la = a.begin_loop(&new_loop(RunKind::Fix)).unwrap();
        // Another workspace's running loop is no overlap.
        let lb = other.begin_loop(&new_loop(RunKind::Fix)).unwrap();
        let sid = other.begin_session(&new_loop(RunKind::Mcp)).unwrap();
        other
            .close_session(sid, 4, "MCP session: 4 tool call(s)")
            .unwrap();
        assert_eq!(a.loops(10).unwrap().len(), 1, "{b}");
        let all = a.all_loops(10).unwrap();
        let ids: Vec<i64> = all.iter().map(|r| r.id).collect();
        assert_eq!(ids, [sid, lb, la], "{b}: newest first, every project");
        let session = &all[0];
        assert_eq!(
            (session.kind, session.status.as_str(), session.iters),
            (RunKind::Mcp, "closed", 4),
            "{b}"
        );
        assert!(a.is_shared(), "{b}");
    }
}

#[test]
fn a_live_loop_blocks_a_second_and_a_crashed_one_is_closed() {
    for db in backends() {
        let b = db.name();
        let mut s = db.open("p");
        let first = s.begin_loop(&new_loop(RunKind::Fix)).unwrap();
        let e = s.begin_loop(&new_loop(RunKind::Fix)).unwrap_err();
        assert!(
            matches!(e, StoreError::Overlap { id, .. } if id == first),
            "{b}: {e}"
        );
        // Its child (an agent's compile_loop) is not an overlap.
        let child = NewLoop {
            parent: Some(first),
            ..new_loop(RunKind::Fix)
        };
        let nested = s.begin_loop(&child).unwrap();
        s.finish_loop(nested, LoopStatus::Failed, StopReason::MaxIters, "", None)
            .unwrap();
        // Pretend the first belonged to a process that is gone.
        raw_update(
            &mut s,
            "UPDATE loops SET pid = 999999999 WHERE id = ?1",
            first,
        );
        let second = s.begin_loop(&new_loop(RunKind::Fix)).unwrap();
        let rows = s.loops(10).unwrap();
        let row = |id| rows.iter().find(|r| r.id == id).unwrap();
        assert_eq!(row(first).status, "failed", "{b}");
        assert_eq!(row(first).last_error.as_deref(), Some(CRASHED), "{b}");
        assert_eq!(row(second).status, "running", "{b}");
        // A running loop of another machine is neither an overlap nor closed.
        raw_update(
            &mut s,
            "UPDATE loops SET host = 'elsewhere' WHERE id = ?1",
            second,
        );
        let third = s.begin_loop(&new_loop(RunKind::Fix)).unwrap();
        assert_eq!(s.loop_detail(second).unwrap().row.status, "running", "{b}");
        assert!(third > second, "{b}");
    }
}

#[test]
fn an_unknown_kind_is_an_error_naming_the_loop() {
    for db in backends() {
        let mut s = db.open("p");
        let id = s.begin_session(&new_loop(RunKind::Mcp)).unwrap();
        raw_update(&mut s, "UPDATE loops SET kind = 'future' WHERE id = ?1", id);
        let e = s.loop_detail(id).unwrap_err().to_string();
        assert!(
            e.contains("kind `future`") && e.contains(&id.to_string()),
            "{e}"
        );
    }
}

#[test]
fn schema_is_versioned_and_a_newer_one_is_refused() {
    for db in backends() {
        let b = db.name();
        let mut s = db.open("p");
        assert_eq!(s.schema_version().unwrap(), SCHEMA_VERSION, "{b}");
        s.conn().set_schema_version(99).unwrap();
        drop(s);
        let url: StoreUrl = match &db {
            Db::Sqlite(dir) => StoreUrl::Sqlite(dir.path().join("k.db")),
            Db::Pg(u) => u.parse().unwrap(),
        };
        let e = Store::open_project(&url, "p").err().unwrap();
        assert!(
            matches!(e, StoreError::TooNew { found: 99, .. }),
            "{b}: {e}"
        );
    }
}

#[test]
fn older_databases_are_migrated_forward() {
    // SQLite at version 1 (before tool calls and hosts).
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("k.db");
    let mut conn = sqlite::SqliteConn::open(&db, std::time::Duration::from_secs(1)).unwrap();
    conn.batch(&schema::render(&conn, schema::STEPS[0].1))
        .unwrap();
    conn.execute(
        "INSERT INTO loops (kind, project, runner, targets, format, model, status, max_iters, pid, started_at) VALUES ('fix', 'p', 'r', '[]', 'f', 'm', 'success', 5, 1, 0)",
        &[],
    )
    .unwrap();
    conn.set_schema_version(1).unwrap();
    drop(conn);
    let s = Store::open_file(&db, "p").unwrap();
    assert!(s.tool_calls(1).unwrap().is_empty(), "the v2 table exists");
    assert_eq!(s.loops(5).unwrap()[0].host, None, "an old row has no host");
    assert_eq!(s.schema_version().unwrap(), SCHEMA_VERSION);
    // PostgreSQL at version 2.
    let url = pg::PgServer::shared().fresh_db();
    let pg_url = match url.parse::<StoreUrl>().unwrap() {
        StoreUrl::Postgres(u) => u,
        other => panic!("{other}"),
    };
    let mut conn = super::postgres::PgConn::connect(&pg_url).unwrap();
    conn.batch(
        "CREATE TABLE kiln_schema (version BIGINT NOT NULL); INSERT INTO kiln_schema VALUES (2);",
    )
    .unwrap();
    for (n, step) in schema::STEPS {
        if n <= 2 {
            conn.batch(&schema::render(&conn, step)).unwrap();
        }
    }
    drop(conn);
    let mut s = Store::open_project(&StoreUrl::Postgres(pg_url), "p").unwrap();
    assert_eq!(s.schema_version().unwrap(), SCHEMA_VERSION);
    let id = s.begin_loop(&new_loop(RunKind::Fix)).unwrap();
    assert!(s.loop_detail(id).unwrap().row.host.is_some(), "v3 column");
}

/// A server that goes away makes calls fail as unreachable (naming the store, never the
/// password); once it is back, the next call reconnects by itself.
#[test]
fn a_lost_server_is_unreachable_then_reconnected() {
    let server = pg::PgServer::start();
    let url = server.fresh_db();
    let mut s = Store::open_project(&url.parse().unwrap(), "p").unwrap();
    let id = s.begin_loop(&new_loop(RunKind::Fix)).unwrap();
    server.stop();
    let e = s.set_iters(id, 1).unwrap_err();
    assert!(e.is_unreachable(), "{e:?}");
    let again = s.set_iters(id, 1).unwrap_err();
    assert!(again.is_unreachable(), "{again:?}");
    let text = format!("{e} {again} {e:?}");
    assert!(text.contains("kiln:***@127.0.0.1"), "{text}");
    assert!(!text.contains(pg::PASSWORD), "{text}");
    let refused = Store::open_project(&url.parse().unwrap(), "p")
        .err()
        .unwrap();
    assert!(refused.is_unreachable(), "{refused}");
    assert!(!refused.to_string().contains(pg::PASSWORD), "{refused}");
    server.start_again();
    s.set_iters(id, 3).unwrap();
    assert_eq!(s.loop_detail(id).unwrap().row.iters, 3);
}

/// A store used from inside kiln's tokio runtime (as the loops do) works: the PostgreSQL
/// client's own runtime runs off it.
#[test]
fn postgres_works_from_inside_a_tokio_runtime() {
    let url = pg::PgServer::shared().fresh_db();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .build()
        .unwrap();
    rt.block_on(async {
        let mut s = Store::open_project(&url.parse().unwrap(), "p").unwrap();
        let id = s.begin_loop(&new_loop(RunKind::Fix)).unwrap();
        s.finish_loop(id, LoopStatus::Blocked, StopReason::Blocked, "b", None)
            .unwrap();
        assert_eq!(s.loops(1).unwrap()[0].status, "blocked");
        drop(s);
    });
}

#[test]
fn a_wrong_password_is_an_error_without_the_password() {
    let server = pg::PgServer::shared();
    let url = server
        .url("postgres")
        .replace(pg::PASSWORD, "not-the-one-42");
    let e = Store::open_project(&url.parse().unwrap(), "p")
        .err()
        .unwrap();
    let text = format!("{e} {e:?}");
    assert!(text.contains("password authentication failed"), "{text}");
    assert!(
        !e.is_unreachable(),
        "a wrong password is no reason to retry: {text}"
    );
    assert!(!text.contains("not-the-one-42"), "{text}");
}

/// Every table's columns (name, type, nullability, default, key) and every index, one line
/// each: what a database's schema is, to compare two.
fn schema_of(s: &mut Store) -> Vec<String> {
    const SQLITE: &str = "SELECT m.name || ' ' || p.name || ' ' || p.type || ' ' || p.\"notnull\" || ' ' || COALESCE(p.dflt_value, '-') || ' ' || p.pk FROM sqlite_master m JOIN pragma_table_info(m.name) p WHERE m.type = 'table' UNION ALL SELECT 'index ' || name || ' ' || tbl_name FROM sqlite_master WHERE type = 'index' ORDER BY 1";
    const PG: &str = "SELECT table_name || ' ' || column_name || ' ' || data_type || ' ' || is_nullable || ' ' || COALESCE(column_default, '-') || ' ' || is_identity FROM information_schema.columns WHERE table_schema = 'public' UNION ALL SELECT 'index ' || indexname || ' ' || tablename FROM pg_indexes WHERE schemaname = 'public' ORDER BY 1";
    let sql = if s.describe().starts_with("postgres") {
        PG
    } else {
        SQLITE
    };
    let rows = s.conn().query(sql, &[]).unwrap();
    rows.iter().map(|r| rows::text(&r[0])).collect()
}

/// A database written by kiln before its SQL was written once (schema version 3: the
/// fixtures are that schema's DDL, as both backends ran it, and a run's rows) opens: the old
/// run reads back as written, a new run is recorded after it, and its schema is the one a
/// new database gets.
#[test]
fn a_database_of_the_old_schema_opens_reads_and_records() {
    for (old, fresh) in backends().into_iter().zip(backends()) {
        let b = old.name();
        match &old {
            Db::Sqlite(dir) => rusqlite::Connection::open(dir.path().join("k.db"))
                .unwrap()
                .execute_batch(include_str!("fixtures/v3_sqlite.sql"))
                .unwrap(),
            Db::Pg(url) => {
                let StoreUrl::Postgres(pg_url) = url.parse().unwrap() else {
                    panic!("{url}")
                };
                super::postgres::PgConn::connect(&pg_url)
                    .unwrap()
                    .batch(include_str!("fixtures/v3_postgres.sql"))
                    .unwrap()
            }
        }
        let mut s = old.open("/ws/old");
        assert_eq!(s.schema_version().unwrap(), 3, "{b}");
        let d = s.loop_detail(1).unwrap();
        let r = &d.row;
        assert_eq!(
            (r.kind, r.status.as_str(), r.host.as_deref(), r.iters),
            (RunKind::Agent, "success", Some("oldhost"), 1),
            "{b}"
        );
        assert_eq!((r.tokens.input, r.tokens.output), (7, 3), "{b}");
        assert_eq!(r.targets, ["a.rs"], "{b}");
        let it = &d.iterations[0];
        assert!(it.ok && it.diagnostics[0]["line"] == 3, "{b}: {it:?}");
        assert_eq!(d.edits[0].tier.as_deref(), Some("exact"), "{b}");
        assert_eq!(d.llm_calls[0].tokens.cached_input, 1, "{b}");
        let events = s.events(1, None).unwrap();
        assert_eq!(events[0].1, "loop_started", "{b}");
        assert_eq!(events[0].2["a"], 1, "{b}");
        assert!(s.tool_calls(1).unwrap()[0].is_error, "{b}");
        let id = s.begin_loop(&new_loop(RunKind::Fix)).unwrap();
        assert_eq!(id, 2, "{b}: after the old run");
        s.record_iteration(id, &sample_iteration(), &[sample_edit()])
            .unwrap();
        s.record_llm_call(id, 1, "m", Ok(&sample_response()))
            .unwrap();
        s.finish_loop(id, LoopStatus::Failed, StopReason::MaxIters, "x", None)
            .unwrap();
        let d = s.loop_detail(id).unwrap();
        assert_eq!((d.row.iters, d.row.tokens.input), (1, 10), "{b}");
        assert_eq!(s.loops(5).unwrap().len(), 2, "{b}");
        let mut new = fresh.open("/ws/new");
        assert_eq!(schema_of(&mut s), schema_of(&mut new), "{b}");
        assert!(schema_of(&mut s).len() > 60, "{b}");
    }
}

/// A transaction whose connection is lost is gone: the next statement fails as unreachable
/// instead of running on a fresh connection outside it (where it would commit alone), and
/// the connection is made again for the call after.
#[test]
fn a_statement_after_a_lost_connection_inside_a_transaction_is_not_made_alone() {
    let server = pg::PgServer::start();
    let url = server.fresh_db();
    let StoreUrl::Postgres(pg_url) = url.parse().unwrap() else {
        panic!("{url}")
    };
    let mut c = postgres::PgConn::connect(&pg_url).unwrap();
    c.batch("CREATE TABLE t (n BIGINT)").unwrap();
    c.begin().unwrap();
    c.execute("INSERT INTO t VALUES (?1)", &[1i64.into()])
        .unwrap();
    server.stop();
    server.start_again();
    let e = c
        .execute("INSERT INTO t VALUES (?1)", &[2i64.into()])
        .unwrap_err();
    assert!(e.is_unreachable(), "{e:?}");
    c.rollback();
    let rows = c.query("SELECT COUNT(*) FROM t", &[]).unwrap();
    assert_eq!(rows[0][0].int(), Some(0));
    // A transaction begun on a connection the restart closed is begun on a fresh one.
    server.stop();
    server.start_again();
    conn::transaction(&mut c, |c| c.execute("INSERT INTO t VALUES (3)", &[])).unwrap();
    assert_eq!(
        c.query("SELECT n FROM t", &[]).unwrap(),
        [[conn::Val::Int(3)]]
    );
}

#[test]
fn urls_parse_to_backends_and_never_show_the_password() {
    let u: StoreUrl = "postgres://kiln:s%40cret@db.example:5433/runs?sslmode=disable"
        .parse()
        .unwrap();
    let StoreUrl::Postgres(pg) = &u else {
        panic!("{u}")
    };
    assert_eq!(
        u.to_string(),
        "postgres://kiln:***@db.example:5433/runs?sslmode=disable"
    );
    assert!(!format!("{u:?}").contains("cret"));
    assert_eq!(
        pg.scrub("password s@cret or s%40cret"),
        "password *** or ***"
    );
    let q: StoreUrl = "postgresql://h/db?user=k&password=hunter2".parse().unwrap();
    assert_eq!(q.to_string(), "postgresql://h/db?user=k&password=***");
    assert_eq!(
        "sqlite:/tmp/k.db".parse::<StoreUrl>().unwrap(),
        StoreUrl::Sqlite("/tmp/k.db".into())
    );
    assert_eq!(
        "runs.db".parse::<StoreUrl>().unwrap(),
        StoreUrl::Sqlite("runs.db".into())
    );
    let e = "mysql://u:pw@h/db"
        .parse::<StoreUrl>()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("unknown scheme `mysql`") && !e.contains("pw@"),
        "{e}"
    );
}

#[test]
fn tls_modes_are_refused_rather_than_connecting_in_clear() {
    for mode in ["require", "verify-ca", "verify-full"] {
        let e = format!("postgres://u:topsecret@h/db?sslmode={mode}")
            .parse::<StoreUrl>()
            .unwrap_err()
            .to_string();
        assert!(e.contains("no TLS"), "{e}");
        assert!(!e.contains("topsecret"), "{e}");
    }
    let e = "postgres://u:pw@/db".parse::<StoreUrl>().unwrap_err();
    assert!(e.to_string().contains("no host"), "{e}");
}

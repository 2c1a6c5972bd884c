//! The SQLite backend: one database file (WAL, foreign keys on, a 5 s busy timeout), the
//! default store of a workspace. The file and its companions are refused when they are
//! symlinks or not regular files; the schema version lives in `PRAGMA user_version`.

use super::backend::{Backend, Begin, CRASHED, End, Raw, Running, check_running};
use super::conn::{ColumnType, Conn, Val};
use super::error::StoreError;
use super::rows::{EditRow, IterationRow, LlmCallRow, LoopRow, ToolCallRow, with_kind};
use super::schema::{
    EDIT_COLUMNS, ITERATION_COLUMNS, LLM_CALL_COLUMNS, LOOP_COLUMNS, SCHEMA_VERSION, SQLITE_STEPS,
    TOOL_CALL_COLUMNS,
};
use kiln_protocol::chat::Usage;
use rusqlite::{Connection, OptionalExtension, params};
use std::path::{Path, PathBuf};

/// An SQLite store file.
pub struct Sqlite {
    conn: Connection,
    path: PathBuf,
}

impl Sqlite {
    /// Open (creating and migrating) a database file. The file and SQLite's companions
    /// (`-wal`, `-shm`, `-journal`) must be regular files or absent, and no symlink is
    /// followed on the way.
    pub fn open(path: &Path) -> Result<Sqlite, StoreError> {
        let sql = |source| StoreError::Sql {
            path: path.to_path_buf(),
            source,
        };
        let mut real = path.to_path_buf();
        if let (Some(parent), Some(name)) = (path.parent(), path.file_name()) {
            let parent = if parent.as_os_str().is_empty() {
                Path::new(".")
            } else {
                parent
            };
            if let Ok(p) = parent.canonicalize() {
                real = p.join(name);
            }
        }
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut f = real.clone().into_os_string();
            f.push(suffix);
            super::files::refuse_unreal(Path::new(&f), false)?;
        }
        let flags = rusqlite::OpenFlags::default() | rusqlite::OpenFlags::SQLITE_OPEN_NOFOLLOW;
        let conn = Connection::open_with_flags(&real, flags).map_err(sql)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(sql)?;
        for (pragma, value) in [
            ("journal_mode", "WAL"),
            ("synchronous", "NORMAL"),
            ("foreign_keys", "ON"),
        ] {
            conn.pragma_update(None, pragma, value).map_err(sql)?;
        }
        let mut store = Sqlite {
            conn,
            path: path.to_path_buf(),
        };
        store.migrate()?;
        Ok(store)
    }

    fn err(&self, source: rusqlite::Error) -> StoreError {
        StoreError::Sql {
            path: self.path.clone(),
            source,
        }
    }

    fn migrate(&mut self) -> Result<(), StoreError> {
        let path = self.path.clone();
        let sql = |source| StoreError::Sql {
            path: path.clone(),
            source,
        };
        // The version is read inside a write transaction (`IMMEDIATE` takes the write lock
        // first), so processes opening a new store at once migrate it once, one after another.
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(sql)?;
        let version: i64 = tx
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(sql)?;
        if version > SCHEMA_VERSION {
            return Err(StoreError::TooNew {
                store: self.path.display().to_string(),
                found: version,
                supported: SCHEMA_VERSION,
            });
        }
        if version == SCHEMA_VERSION {
            return Ok(());
        }
        for (n, step) in SQLITE_STEPS {
            if version < n {
                tx.execute_batch(step).map_err(sql)?;
            }
        }
        tx.pragma_update(None, "user_version", SCHEMA_VERSION)
            .map_err(sql)?;
        tx.commit().map_err(sql)
    }

    fn exec(&self, q: &str, p: impl rusqlite::Params) -> Result<(), StoreError> {
        self.conn.execute(q, p).map(|_| ()).map_err(|e| self.err(e))
    }

    fn all<T>(
        &self,
        q: &str,
        id: i64,
        f: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    ) -> Result<Vec<T>, StoreError> {
        let mut st = self.conn.prepare(q).map_err(|e| self.err(e))?;
        let rows = st.query_map(params![id], f).map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }
}

fn usage(r: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<Usage> {
    let n = |i: usize| r.get::<_, i64>(at + i).map(|v| v as u64);
    Ok(Usage {
        input: n(0)?,
        cached_input: n(1)?,
        cache_write: n(2)?,
        output: n(3)?,
        reasoning: n(4)?,
    })
}

/// A [`LoopRow`] (kind still as stored) from the [`LOOP_COLUMNS`].
fn loop_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<(LoopRow, String)> {
    let targets: String = r.get(5)?;
    let row = LoopRow {
        id: r.get(0)?,
        kind: super::rows::RunKind::Fix,
        project: r.get(2)?,
        host: r.get(3)?,
        runner: r.get(4)?,
        targets: serde_json::from_str(&targets).unwrap_or_default(),
        format: r.get(6)?,
        model: r.get(7)?,
        status: r.get(8)?,
        stop_reason: r.get(9)?,
        max_iters: r.get(10)?,
        iters: r.get(11)?,
        summary: r.get(12)?,
        last_error: r.get(13)?,
        started_at: r.get(14)?,
        ended_at: r.get(15)?,
        tokens: usage(r, 16)?,
    };
    Ok((row, r.get(1)?))
}

fn iteration_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<IterationRow> {
    let d: String = r.get(5)?;
    Ok(IterationRow {
        n: r.get(0)?,
        exit_code: r.get(1)?,
        ok: r.get(2)?,
        stdout: r.get(3)?,
        stderr: r.get(4)?,
        diagnostics: serde_json::from_str(&d).unwrap_or_default(),
        fingerprint: r.get(6)?,
        llm_summary: r.get(7)?,
        runner_ms: r.get(8)?,
        llm_ms: r.get(9)?,
        tokens_input: r.get(10)?,
        tokens_output: r.get(11)?,
        edits_applied: r.get(12)?,
    })
}

impl Backend for Sqlite {
    fn describe(&self) -> String {
        self.path.display().to_string()
    }

    fn begin(&mut self, b: &Begin<'_>) -> Result<i64, StoreError> {
        let path = self.path.clone();
        let sql = |source| StoreError::Sql {
            path: path.clone(),
            source,
        };
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(sql)?;
        if b.status == "running" {
            let found: Vec<Running> = {
                let mut st = tx.prepare("SELECT id, pid, started_at FROM loops WHERE project = ?1 AND status = 'running' AND (host IS NULL OR host = ?2)").map_err(sql)?;
                st.query_map(params![b.project, b.host], |r| {
                    Ok(Running {
                        id: r.get(0)?,
                        pid: r.get(1)?,
                        started: r.get(2)?,
                    })
                })
                .map_err(sql)?
                .collect::<Result<_, _>>()
                .map_err(sql)?
            };
            for id in check_running(&found, b.new.parent)? {
                tx.execute(
                    "UPDATE loops SET status = 'failed', stop_reason = 'error', last_error = ?3, ended_at = ?2 WHERE id = ?1",
                    params![id, b.at, CRASHED],
                )
                .map_err(sql)?;
            }
        }
        let n = b.new;
        tx.execute(
            "INSERT INTO loops (kind, project, host, runner, targets, format, model, status, max_iters, pid, started_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            params![n.kind.as_str(), b.project, b.host, n.runner, serde_json::to_string(&n.targets).unwrap_or_default(), n.format, n.model, b.status, n.max_iters, b.pid, b.at],
        )
        .map_err(sql)?;
        let id = tx.last_insert_rowid();
        tx.commit().map_err(sql)?;
        Ok(id)
    }

    fn record_iteration(
        &mut self,
        loop_id: i64,
        it: &IterationRow,
        edits: &[EditRow],
        at: i64,
    ) -> Result<(), StoreError> {
        let path = self.path.clone();
        let sql = |source| StoreError::Sql {
            path: path.clone(),
            source,
        };
        let tx = self.conn.transaction().map_err(sql)?;
        tx.execute(
            &format!("INSERT INTO iterations (loop_id, {ITERATION_COLUMNS}, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)"),
            params![
                loop_id, it.n, it.exit_code, it.ok, it.stdout, it.stderr, it.diagnostics.to_string(), it.fingerprint,
                it.llm_summary, it.runner_ms, it.llm_ms, it.tokens_input, it.tokens_output, it.edits_applied, at
            ],
        )
        .map_err(sql)?;
        for e in edits {
            tx.execute(
                &format!("INSERT INTO edits (loop_id, {EDIT_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"),
                params![loop_id, e.iteration, e.path, e.kind, e.status, e.tier, e.failure, e.error],
            )
            .map_err(sql)?;
        }
        tx.execute(
            "UPDATE loops SET iters = MAX(iters, ?2) WHERE id = ?1",
            params![loop_id, it.n],
        )
        .map_err(sql)?;
        tx.commit().map_err(sql)
    }

    fn record_llm_call(&mut self, loop_id: i64, c: &LlmCallRow, at: i64) -> Result<(), StoreError> {
        let path = self.path.clone();
        let sql = |source| StoreError::Sql {
            path: path.clone(),
            source,
        };
        let u = c.tokens;
        let tx = self.conn.transaction().map_err(sql)?;
        tx.execute(
            &format!("INSERT INTO llm_calls (loop_id, {LLM_CALL_COLUMNS}, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)"),
            params![loop_id, c.iteration, c.model, c.latency_ms, u.input as i64, u.cached_input as i64, u.cache_write as i64, u.output as i64, u.reasoning as i64, c.response, c.tool_calls.to_string(), c.error, at],
        )
        .map_err(sql)?;
        tx.execute(
            "UPDATE loops SET tokens_input = tokens_input + ?2, tokens_cached_input = tokens_cached_input + ?3, tokens_cache_write = tokens_cache_write + ?4,
             tokens_output = tokens_output + ?5, tokens_reasoning = tokens_reasoning + ?6 WHERE id = ?1",
            params![loop_id, u.input as i64, u.cached_input as i64, u.cache_write as i64, u.output as i64, u.reasoning as i64],
        )
        .map_err(sql)?;
        tx.commit().map_err(sql)
    }

    fn record_event(
        &mut self,
        loop_id: i64,
        seq: i64,
        kind: &str,
        payload: &str,
        at: i64,
    ) -> Result<(), StoreError> {
        self.exec(
            "INSERT INTO events (loop_id, seq, type, payload, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![loop_id, seq, kind, payload, at],
        )
    }

    fn record_tool_call(
        &mut self,
        loop_id: i64,
        call_id: &str,
        c: &ToolCallRow,
        at: i64,
    ) -> Result<(), StoreError> {
        self.exec(
            "INSERT INTO tool_calls (loop_id, turn, call_id, name, arguments, result, is_error, duration_ms, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            params![loop_id, c.turn, call_id, c.name, c.arguments, c.result, c.is_error, c.duration_ms, at],
        )
    }

    fn finish(&mut self, loop_id: i64, end: &End<'_>) -> Result<(), StoreError> {
        self.exec(
            "UPDATE loops SET status = ?2, stop_reason = ?3, summary = ?4, last_error = ?5, ended_at = ?6 WHERE id = ?1",
            params![loop_id, end.status, end.stop_reason, end.summary, end.last_error, end.at],
        )
    }

    fn set_iters(&mut self, loop_id: i64, iters: i64) -> Result<(), StoreError> {
        self.exec(
            "UPDATE loops SET iters = ?2 WHERE id = ?1",
            params![loop_id, iters],
        )
    }

    fn set_tokens(&mut self, loop_id: i64, u: &Usage) -> Result<(), StoreError> {
        self.exec(
            "UPDATE loops SET tokens_input = ?2, tokens_cached_input = ?3, tokens_cache_write = ?4, tokens_output = ?5, tokens_reasoning = ?6 WHERE id = ?1",
            params![loop_id, u.input as i64, u.cached_input as i64, u.cache_write as i64, u.output as i64, u.reasoning as i64],
        )
    }

    fn loops(&self, project: Option<&str>, limit: usize) -> Result<Vec<LoopRow>, StoreError> {
        let q = format!(
            "SELECT {LOOP_COLUMNS} FROM loops WHERE ?1 IS NULL OR project = ?1 ORDER BY id DESC LIMIT ?2"
        );
        let mut st = self.conn.prepare(&q).map_err(|e| self.err(e))?;
        let rows = st
            .query_map(params![project, limit as i64], loop_row)
            .map_err(|e| self.err(e))?;
        let rows: Vec<(LoopRow, String)> =
            rows.collect::<Result<_, _>>().map_err(|e| self.err(e))?;
        rows.into_iter().map(|(r, k)| with_kind(r, &k)).collect()
    }

    fn loop_row(&self, id: i64) -> Result<Option<LoopRow>, StoreError> {
        let q = format!("SELECT {LOOP_COLUMNS} FROM loops WHERE id = ?1");
        let found = self
            .conn
            .query_row(&q, params![id], loop_row)
            .optional()
            .map_err(|e| self.err(e))?;
        found.map(|(r, k)| with_kind(r, &k)).transpose()
    }

    fn iterations(&self, id: i64) -> Result<Vec<IterationRow>, StoreError> {
        let q = format!("SELECT {ITERATION_COLUMNS} FROM iterations WHERE loop_id = ?1 ORDER BY n");
        self.all(&q, id, iteration_row)
    }

    fn edits(&self, id: i64) -> Result<Vec<EditRow>, StoreError> {
        let q = format!("SELECT {EDIT_COLUMNS} FROM edits WHERE loop_id = ?1 ORDER BY id");
        self.all(&q, id, |r| {
            Ok(EditRow {
                iteration: r.get(0)?,
                path: r.get(1)?,
                kind: r.get(2)?,
                status: r.get(3)?,
                tier: r.get(4)?,
                failure: r.get(5)?,
                error: r.get(6)?,
            })
        })
    }

    fn llm_calls(&self, id: i64) -> Result<Vec<LlmCallRow>, StoreError> {
        let q = format!("SELECT {LLM_CALL_COLUMNS} FROM llm_calls WHERE loop_id = ?1 ORDER BY id");
        self.all(&q, id, |r| {
            let calls: String = r.get(9)?;
            Ok(LlmCallRow {
                iteration: r.get(0)?,
                model: r.get(1)?,
                latency_ms: r.get(2)?,
                tokens: usage(r, 3)?,
                response: r.get(8)?,
                tool_calls: serde_json::from_str(&calls).unwrap_or_default(),
                error: r.get(10)?,
            })
        })
    }

    fn tool_calls(&self, id: i64) -> Result<Vec<ToolCallRow>, StoreError> {
        let q =
            format!("SELECT {TOOL_CALL_COLUMNS} FROM tool_calls WHERE loop_id = ?1 ORDER BY id");
        self.all(&q, id, |r| {
            Ok(ToolCallRow {
                turn: r.get(0)?,
                name: r.get(1)?,
                arguments: r.get(2)?,
                result: r.get(3)?,
                is_error: r.get(4)?,
                duration_ms: r.get(5)?,
            })
        })
    }

    fn event_count(&self, id: i64) -> Result<i64, StoreError> {
        self.conn
            .query_row(
                "SELECT COUNT(*) FROM events WHERE loop_id = ?1",
                params![id],
                |r| r.get(0),
            )
            .map_err(|e| self.err(e))
    }

    fn events(
        &self,
        id: i64,
        kind: Option<&str>,
    ) -> Result<Vec<(i64, String, String)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT seq, type, payload FROM events WHERE loop_id = ?1 AND (?2 IS NULL OR type = ?2) ORDER BY seq, id",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params![id, kind], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }

    fn schema_version(&self) -> Result<i64, StoreError> {
        self.conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(|e| self.err(e))
    }

    fn raw(&mut self) -> Raw<'_> {
        Raw::Sqlite(&mut self.conn)
    }
}
/// An SQLite database file.
pub struct SqliteConn {
    conn: Connection,
    path: PathBuf,
}

impl SqliteConn {
    /// Open (creating) a database file, waiting up to `busy` for another writer. The file
    /// and SQLite's companions (`-wal`, `-shm`, `-journal`) must be regular files or absent,
    /// and no symlink is followed on the way.
    pub fn open(path: &Path, busy: std::time::Duration) -> Result<SqliteConn, StoreError> {
        let sql = |source| StoreError::Sql {
            path: path.to_path_buf(),
            source,
        };
        let mut real = path.to_path_buf();
        if let (Some(parent), Some(name)) = (path.parent(), path.file_name()) {
            let parent = if parent.as_os_str().is_empty() {
                Path::new(".")
            } else {
                parent
            };
            if let Ok(p) = parent.canonicalize() {
                real = p.join(name);
            }
        }
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut f = real.clone().into_os_string();
            f.push(suffix);
            super::files::refuse_unreal(Path::new(&f), false)?;
        }
        let flags = rusqlite::OpenFlags::default() | rusqlite::OpenFlags::SQLITE_OPEN_NOFOLLOW;
        let conn = Connection::open_with_flags(&real, flags).map_err(sql)?;
        conn.busy_timeout(busy).map_err(sql)?;
        for (pragma, value) in [
            ("journal_mode", "WAL"),
            ("synchronous", "NORMAL"),
            ("foreign_keys", "ON"),
        ] {
            conn.pragma_update(None, pragma, value).map_err(sql)?;
        }
        Ok(SqliteConn {
            conn,
            path: path.to_path_buf(),
        })
    }

    fn err(&self, source: rusqlite::Error) -> StoreError {
        StoreError::Sql {
            path: self.path.clone(),
            source,
        }
    }
}

impl rusqlite::ToSql for Val {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, ValueRef};
        Ok(ToSqlOutput::Borrowed(match self {
            Val::Null => ValueRef::Null,
            Val::Int(i) => ValueRef::Integer(*i),
            Val::Real(f) => ValueRef::Real(*f),
            Val::Text(s) => ValueRef::Text(s.as_bytes()),
        }))
    }
}

fn from_sqlite(v: rusqlite::types::ValueRef<'_>) -> Val {
    use rusqlite::types::ValueRef;
    match v {
        ValueRef::Null => Val::Null,
        ValueRef::Integer(i) => Val::Int(i),
        ValueRef::Real(f) => Val::Real(f),
        ValueRef::Text(t) | ValueRef::Blob(t) => Val::Text(String::from_utf8_lossy(t).into()),
    }
}

impl Conn for SqliteConn {
    fn describe(&self) -> String {
        self.path.display().to_string()
    }

    fn execute(&mut self, sql: &str, params: &[Val]) -> Result<u64, StoreError> {
        self.conn
            .execute(sql, rusqlite::params_from_iter(params.iter()))
            .map(|n| n as u64)
            .map_err(|e| self.err(e))
    }

    fn query(&mut self, sql: &str, params: &[Val]) -> Result<Vec<Vec<Val>>, StoreError> {
        let path = self.path.clone();
        let err = |source| StoreError::Sql {
            path: path.clone(),
            source,
        };
        let mut st = self.conn.prepare(sql).map_err(err)?;
        let n = st.column_count();
        let mut rows = st
            .query(rusqlite::params_from_iter(params.iter()))
            .map_err(err)?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().map_err(err)? {
            let mut r = Vec::with_capacity(n);
            for i in 0..n {
                r.push(from_sqlite(row.get_ref(i).map_err(err)?));
            }
            out.push(r);
        }
        Ok(out)
    }

    fn batch(&mut self, sql: &str) -> Result<(), StoreError> {
        self.conn.execute_batch(sql).map_err(|e| self.err(e))
    }

    fn begin(&mut self) -> Result<(), StoreError> {
        self.batch("BEGIN IMMEDIATE")
    }

    fn commit(&mut self) -> Result<(), StoreError> {
        self.batch("COMMIT")
    }

    fn rollback(&mut self) {
        let _ = self.batch("ROLLBACK");
    }

    fn lock(&mut self, _key: &Val) -> Result<(), StoreError> {
        Ok(())
    }

    fn skip_locked(&self) -> &'static str {
        ""
    }

    fn column_type(&self, t: ColumnType) -> &'static str {
        match t {
            ColumnType::Id => "INTEGER PRIMARY KEY",
            ColumnType::Int | ColumnType::Bool => "INTEGER",
        }
    }

    fn schema_version(&mut self) -> Result<i64, StoreError> {
        self.conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(|e| self.err(e))
    }

    fn set_schema_version(&mut self, v: i64) -> Result<(), StoreError> {
        self.conn
            .pragma_update(None, "user_version", v)
            .map_err(|e| self.err(e))
    }
}

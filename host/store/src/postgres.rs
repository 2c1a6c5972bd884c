//! The PostgreSQL backend: a database many workspaces and machines share (`--store
//! postgres://…`). The synchronous `postgres` client drives its own small tokio runtime and
//! must not be called on a thread inside kiln's; [`PgConn`] runs every call (and the client's
//! drop) on a scoped thread of its own when it is on such a thread. A connection that is gone
//! turns into [`StoreError::Unreachable`] and the next call reconnects. Messages never carry
//! the URL's password ([`PgUrl::scrub`]).

use super::backend::{Backend, Begin, CRASHED, End, Raw, Running, check_running};
use super::error::StoreError;
use super::location::PgUrl;
use super::rows::{EditRow, IterationRow, LlmCallRow, LoopRow, ToolCallRow, with_kind};
use super::schema::{
    EDIT_COLUMNS, ITERATION_COLUMNS, LLM_CALL_COLUMNS, LOOP_COLUMNS, PG_STEPS, SCHEMA_VERSION,
    TOOL_CALL_COLUMNS,
};
use ::postgres::{Client, Row};
use kiln_protocol::chat::Usage;
use std::sync::Mutex;

pub use super::pg_conn::PgConn;

/// The advisory lock key that serialises schema migrations (`kiln` in ASCII).
const MIGRATION_LOCK: i64 = 0x6b69_6c6e;

/// A PostgreSQL store.
pub struct Postgres {
    conn: Mutex<PgConn>,
}

impl Postgres {
    /// Connect to `url` and migrate its schema forward (under an advisory lock, so workers
    /// starting together migrate once).
    pub fn open(url: &PgUrl) -> Result<Postgres, StoreError> {
        let mut conn = PgConn::connect(url)?;
        let found = conn.with(migrate)?;
        if found > SCHEMA_VERSION {
            return Err(StoreError::TooNew {
                store: conn.describe(),
                found,
                supported: SCHEMA_VERSION,
            });
        }
        Ok(Postgres {
            conn: Mutex::new(conn),
        })
    }

    fn with<R: Send>(
        &self,
        f: impl Fn(&mut Client) -> Result<R, ::postgres::Error> + Send,
    ) -> Result<R, StoreError> {
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        conn.with(f)
    }

    fn exec(
        &self,
        q: &str,
        p: &[&(dyn ::postgres::types::ToSql + Sync)],
    ) -> Result<(), StoreError> {
        self.with(|c| c.execute(q, p).map(|_| ()))
    }

    fn all<T: Send>(
        &self,
        q: &str,
        id: i64,
        f: impl Fn(&Row) -> Result<T, ::postgres::Error> + Send + Sync,
    ) -> Result<Vec<T>, StoreError> {
        self.with(|c| c.query(q, &[&id])?.iter().map(&f).collect())
    }
}

/// Bring the schema to [`SCHEMA_VERSION`]; returns the version found (newer: untouched).
fn migrate(c: &mut Client) -> Result<i64, ::postgres::Error> {
    let mut tx = c.transaction()?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])?;
    tx.batch_execute("CREATE TABLE IF NOT EXISTS kiln_schema (version BIGINT NOT NULL)")?;
    let found: i64 = match tx.query_opt("SELECT version FROM kiln_schema", &[])? {
        Some(r) => r.try_get(0)?,
        None => {
            tx.execute("INSERT INTO kiln_schema (version) VALUES (0)", &[])?;
            0
        }
    };
    if found > SCHEMA_VERSION {
        return Ok(found);
    }
    for (n, step) in PG_STEPS {
        if found < n {
            tx.batch_execute(step)?;
        }
    }
    tx.execute("UPDATE kiln_schema SET version = $1", &[&SCHEMA_VERSION])?;
    tx.commit()?;
    Ok(found)
}

fn usage(r: &Row, at: usize) -> Result<Usage, ::postgres::Error> {
    let n = |i: usize| r.try_get::<_, i64>(at + i).map(|v| v as u64);
    Ok(Usage {
        input: n(0)?,
        cached_input: n(1)?,
        cache_write: n(2)?,
        output: n(3)?,
        reasoning: n(4)?,
    })
}

/// A [`LoopRow`] (kind still as stored) from the [`LOOP_COLUMNS`].
fn loop_row(r: &Row) -> Result<(LoopRow, String), ::postgres::Error> {
    let targets: String = r.try_get(5)?;
    let row = LoopRow {
        id: r.try_get(0)?,
        kind: super::rows::RunKind::Fix,
        project: r.try_get(2)?,
        host: r.try_get(3)?,
        runner: r.try_get(4)?,
        targets: serde_json::from_str(&targets).unwrap_or_default(),
        format: r.try_get(6)?,
        model: r.try_get(7)?,
        status: r.try_get(8)?,
        stop_reason: r.try_get(9)?,
        max_iters: r.try_get(10)?,
        iters: r.try_get(11)?,
        summary: r.try_get(12)?,
        last_error: r.try_get(13)?,
        started_at: r.try_get(14)?,
        ended_at: r.try_get(15)?,
        tokens: usage(r, 16)?,
    };
    Ok((row, r.try_get(1)?))
}

fn iteration_row(r: &Row) -> Result<IterationRow, ::postgres::Error> {
    let d: String = r.try_get(5)?;
    Ok(IterationRow {
        n: r.try_get(0)?,
        exit_code: r.try_get(1)?,
        ok: r.try_get(2)?,
        stdout: r.try_get(3)?,
        stderr: r.try_get(4)?,
        diagnostics: serde_json::from_str(&d).unwrap_or_default(),
        fingerprint: r.try_get(6)?,
        llm_summary: r.try_get(7)?,
        runner_ms: r.try_get(8)?,
        llm_ms: r.try_get(9)?,
        tokens_input: r.try_get(10)?,
        tokens_output: r.try_get(11)?,
        edits_applied: r.try_get(12)?,
    })
}

/// `begin` inside its transaction: the overlap check (under a per-project advisory lock) and
/// the insert. An overlap comes back as `Ok(Err(..))` so the transaction rolls back.
fn begin_tx(
    tx: &mut ::postgres::Transaction<'_>,
    b: &Begin<'_>,
) -> Result<Result<i64, StoreError>, ::postgres::Error> {
    if b.status == "running" {
        tx.execute("SELECT pg_advisory_xact_lock(hashtext($1))", &[&b.project])?;
        let found: Vec<Running> = tx
            .query(
                "SELECT id, pid, started_at FROM loops WHERE project = $1 AND status = 'running' AND (host IS NULL OR host = $2)",
                &[&b.project, &b.host],
            )?
            .iter()
            .map(|r| {
                Ok(Running {
                    id: r.try_get(0)?,
                    pid: r.try_get(1)?,
                    started: r.try_get(2)?,
                })
            })
            .collect::<Result<_, ::postgres::Error>>()?;
        let crashed = match check_running(&found, b.new.parent) {
            Ok(c) => c,
            Err(e) => return Ok(Err(e)),
        };
        for id in crashed {
            tx.execute(
                "UPDATE loops SET status = 'failed', stop_reason = 'error', last_error = $3, ended_at = $2 WHERE id = $1",
                &[&id, &b.at, &CRASHED],
            )?;
        }
    }
    let n = b.new;
    let targets = serde_json::to_string(&n.targets).unwrap_or_default();
    let row = tx.query_one(
        "INSERT INTO loops (kind, project, host, runner, targets, format, model, status, max_iters, pid, started_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING id",
        &[&n.kind.as_str(), &b.project, &b.host, &n.runner, &targets, &n.format, &n.model, &b.status, &n.max_iters, &b.pid, &b.at],
    )?;
    Ok(Ok(row.try_get(0)?))
}

impl Backend for Postgres {
    fn describe(&self) -> String {
        self.conn
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .describe()
    }

    fn begin(&mut self, b: &Begin<'_>) -> Result<i64, StoreError> {
        self.with(|c| {
            let mut tx = c.transaction()?;
            let id = begin_tx(&mut tx, b)?;
            if id.is_ok() {
                tx.commit()?;
            }
            Ok(id)
        })?
    }

    fn record_iteration(
        &mut self,
        loop_id: i64,
        it: &IterationRow,
        edits: &[EditRow],
        at: i64,
    ) -> Result<(), StoreError> {
        let diagnostics = it.diagnostics.to_string();
        self.with(|c| {
            let mut tx = c.transaction()?;
            tx.execute(
                &format!("INSERT INTO iterations (loop_id, {ITERATION_COLUMNS}, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)"),
                &[&loop_id, &it.n, &it.exit_code, &it.ok, &it.stdout, &it.stderr, &diagnostics, &it.fingerprint,
                  &it.llm_summary, &it.runner_ms, &it.llm_ms, &it.tokens_input, &it.tokens_output, &it.edits_applied, &at],
            )?;
            for e in edits {
                tx.execute(
                    &format!("INSERT INTO edits (loop_id, {EDIT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"),
                    &[&loop_id, &e.iteration, &e.path, &e.kind, &e.status, &e.tier, &e.failure, &e.error],
                )?;
            }
            tx.execute(
                "UPDATE loops SET iters = GREATEST(iters, $2) WHERE id = $1",
                &[&loop_id, &it.n],
            )?;
            tx.commit()
        })
    }

    fn record_llm_call(&mut self, loop_id: i64, c: &LlmCallRow, at: i64) -> Result<(), StoreError> {
        let u = c.tokens;
        let t = [
            u.input,
            u.cached_input,
            u.cache_write,
            u.output,
            u.reasoning,
        ]
        .map(|v| v as i64);
        let calls = c.tool_calls.to_string();
        self.with(|cl| {
            let mut tx = cl.transaction()?;
            tx.execute(
                &format!("INSERT INTO llm_calls (loop_id, {LLM_CALL_COLUMNS}, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)"),
                &[&loop_id, &c.iteration, &c.model, &c.latency_ms, &t[0], &t[1], &t[2], &t[3], &t[4], &c.response, &calls, &c.error, &at],
            )?;
            tx.execute(
                "UPDATE loops SET tokens_input = tokens_input + $2, tokens_cached_input = tokens_cached_input + $3, tokens_cache_write = tokens_cache_write + $4,
                 tokens_output = tokens_output + $5, tokens_reasoning = tokens_reasoning + $6 WHERE id = $1",
                &[&loop_id, &t[0], &t[1], &t[2], &t[3], &t[4]],
            )?;
            tx.commit()
        })
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
            "INSERT INTO events (loop_id, seq, type, payload, created_at) VALUES ($1, $2, $3, $4, $5)",
            &[&loop_id, &seq, &kind, &payload, &at],
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
            "INSERT INTO tool_calls (loop_id, turn, call_id, name, arguments, result, is_error, duration_ms, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            &[&loop_id, &c.turn, &call_id, &c.name, &c.arguments, &c.result, &c.is_error, &c.duration_ms, &at],
        )
    }

    fn finish(&mut self, loop_id: i64, end: &End<'_>) -> Result<(), StoreError> {
        self.exec(
            "UPDATE loops SET status = $2, stop_reason = $3, summary = $4, last_error = $5, ended_at = $6 WHERE id = $1",
            &[&loop_id, &end.status, &end.stop_reason, &end.summary, &end.last_error, &end.at],
        )
    }

    fn set_iters(&mut self, loop_id: i64, iters: i64) -> Result<(), StoreError> {
        self.exec(
            "UPDATE loops SET iters = $2 WHERE id = $1",
            &[&loop_id, &iters],
        )
    }

    fn set_tokens(&mut self, loop_id: i64, u: &Usage) -> Result<(), StoreError> {
        let t = [
            u.input,
            u.cached_input,
            u.cache_write,
            u.output,
            u.reasoning,
        ]
        .map(|v| v as i64);
        self.exec(
            "UPDATE loops SET tokens_input = $2, tokens_cached_input = $3, tokens_cache_write = $4, tokens_output = $5, tokens_reasoning = $6 WHERE id = $1",
            &[&loop_id, &t[0], &t[1], &t[2], &t[3], &t[4]],
        )
    }

    fn loops(&self, project: Option<&str>, limit: usize) -> Result<Vec<LoopRow>, StoreError> {
        let q = format!(
            "SELECT {LOOP_COLUMNS} FROM loops WHERE $1::TEXT IS NULL OR project = $1 ORDER BY id DESC LIMIT $2"
        );
        let limit = limit as i64;
        let rows = self.with(|c| {
            c.query(&q, &[&project, &limit])?
                .iter()
                .map(loop_row)
                .collect()
        })?;
        let rows: Vec<(LoopRow, String)> = rows;
        rows.into_iter().map(|(r, k)| with_kind(r, &k)).collect()
    }

    fn loop_row(&self, id: i64) -> Result<Option<LoopRow>, StoreError> {
        let q = format!("SELECT {LOOP_COLUMNS} FROM loops WHERE id = $1");
        let found = self.with(|c| c.query_opt(&q, &[&id])?.as_ref().map(loop_row).transpose())?;
        found.map(|(r, k)| with_kind(r, &k)).transpose()
    }

    fn iterations(&self, id: i64) -> Result<Vec<IterationRow>, StoreError> {
        let q = format!("SELECT {ITERATION_COLUMNS} FROM iterations WHERE loop_id = $1 ORDER BY n");
        self.all(&q, id, iteration_row)
    }

    fn edits(&self, id: i64) -> Result<Vec<EditRow>, StoreError> {
        let q = format!("SELECT {EDIT_COLUMNS} FROM edits WHERE loop_id = $1 ORDER BY id");
        self.all(&q, id, |r| {
            Ok(EditRow {
                iteration: r.try_get(0)?,
                path: r.try_get(1)?,
                kind: r.try_get(2)?,
                status: r.try_get(3)?,
                tier: r.try_get(4)?,
                failure: r.try_get(5)?,
                error: r.try_get(6)?,
            })
        })
    }

    fn llm_calls(&self, id: i64) -> Result<Vec<LlmCallRow>, StoreError> {
        let q = format!("SELECT {LLM_CALL_COLUMNS} FROM llm_calls WHERE loop_id = $1 ORDER BY id");
        self.all(&q, id, |r| {
            let calls: String = r.try_get(9)?;
            Ok(LlmCallRow {
                iteration: r.try_get(0)?,
                model: r.try_get(1)?,
                latency_ms: r.try_get(2)?,
                tokens: usage(r, 3)?,
                response: r.try_get(8)?,
                tool_calls: serde_json::from_str(&calls).unwrap_or_default(),
                error: r.try_get(10)?,
            })
        })
    }

    fn tool_calls(&self, id: i64) -> Result<Vec<ToolCallRow>, StoreError> {
        let q =
            format!("SELECT {TOOL_CALL_COLUMNS} FROM tool_calls WHERE loop_id = $1 ORDER BY id");
        self.all(&q, id, |r| {
            Ok(ToolCallRow {
                turn: r.try_get(0)?,
                name: r.try_get(1)?,
                arguments: r.try_get(2)?,
                result: r.try_get(3)?,
                is_error: r.try_get(4)?,
                duration_ms: r.try_get(5)?,
            })
        })
    }

    fn event_count(&self, id: i64) -> Result<i64, StoreError> {
        self.with(|c| {
            c.query_one("SELECT COUNT(*) FROM events WHERE loop_id = $1", &[&id])?
                .try_get(0)
        })
    }

    fn events(
        &self,
        id: i64,
        kind: Option<&str>,
    ) -> Result<Vec<(i64, String, String)>, StoreError> {
        self.with(|c| {
            c.query(
                "SELECT seq, type, payload FROM events WHERE loop_id = $1 AND ($2::TEXT IS NULL OR type = $2) ORDER BY seq, id",
                &[&id, &kind],
            )?
            .iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
            .collect()
        })
    }

    fn schema_version(&self) -> Result<i64, StoreError> {
        self.with(|c| {
            c.query_one("SELECT version FROM kiln_schema", &[])?
                .try_get(0)
        })
    }

    fn raw(&mut self) -> Raw<'_> {
        Raw::Postgres(self.conn.get_mut().unwrap_or_else(|p| p.into_inner()))
    }
}

//! kiln-store: persistence of loops, iterations, edits, LLM calls, tool calls and events, in
//! an SQLite file (the default: `kiln.db` in kiln's state directory for the workspace,
//! outside it, [`Store::open`]; WAL; [`sqlite`]) or a PostgreSQL database that many workspaces
//! and machines share ([`postgres`]). The SQL is written once, over one connection
//! abstraction ([`conn::Conn`]: `?N` placeholders, plain values) that the batch queue uses
//! too; what differs between the engines sits in the few `Conn` methods each engine's file
//! implements. [`Store`] is the type the rest of kiln uses: it adds the project, the clock,
//! caps and the run-kind and status types. The schema carries a version and is migrated
//! forward on open ([`schema`]). Writes are transactional; very large outputs are stored
//! capped (head and tail kept, with a marker saying how much was cut), never dropped silently.
//!
//! It depends on `kiln-protocol` (statuses, stop reasons, usage, edit results) and `kiln-state`
//! (where a workspace's own store lives) only. It must never import the engine, the LLM
//! transport, the plugin runtime, edits or the CLI: they record into the store, not the
//! other way round.
// Unit tests set up their fixtures as they like; only the writer writes a workspace (clippy.toml).
#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod conn;
mod error;
mod files;
mod location;
mod overlap;
pub mod postgres;
mod rows;
pub mod schema;
pub mod sqlite;

pub use error::StoreError;
pub use files::{KILN_GITIGNORE, ignores_everything, open_log};
pub use location::PgUrl;
pub use overlap::{CRASHED, Running, check_running, host_name};
pub use rows::{
    EditRow, IterationRow, LlmCallRow, LoopDetail, LoopRow, NewLoop, RunKind, ToolCallRow,
    with_kind,
};
pub use schema::SCHEMA_VERSION;

use conn::{Conn, Val, transaction};
use schema::{EDIT_COLUMNS, ITERATION_COLUMNS, LLM_CALL_COLUMNS, LOOP_COLUMNS, TOOL_CALL_COLUMNS};
use std::sync::{Mutex, MutexGuard};

use kiln_protocol::clock::now_ms;
use kiln_protocol::outcome::{LoopStatus, StopReason};
use std::path::{Path, PathBuf};

/// Where a store is: `--store`, `KILN_STORE` or the user's `[store] url`, parsed into one
/// of the engines kiln has (each a `Conn` in its own file, opened by [`StoreUrl::open`]).
#[derive(Clone, PartialEq, Eq)]
pub enum StoreUrl {
    /// An SQLite file: `sqlite:PATH`, `sqlite://PATH` or a plain path.
    Sqlite(PathBuf),
    /// A PostgreSQL database: `postgres://…` or `postgresql://…`.
    Postgres(PgUrl),
}

impl std::str::FromStr for StoreUrl {
    type Err = StoreError;

    fn from_str(s: &str) -> Result<StoreUrl, StoreError> {
        let s = s.trim();
        if s.starts_with("postgres://") || s.starts_with("postgresql://") {
            return location::PgUrl::parse(s).map(StoreUrl::Postgres);
        }
        if let Some(rest) = s.strip_prefix("sqlite:") {
            let path = rest.strip_prefix("//").unwrap_or(rest);
            return non_empty(path, s).map(StoreUrl::Sqlite);
        }
        if let Some((scheme, _)) = s.split_once("://") {
            return Err(StoreError::BadUrl {
                url: location::redact(s).0,
                why: format!(
                    "unknown scheme `{scheme}`; use postgres://USER@HOST/DB, sqlite:PATH or a file path"
                ),
            });
        }
        non_empty(s, s).map(StoreUrl::Sqlite)
    }
}

fn non_empty(path: &str, whole: &str) -> Result<PathBuf, StoreError> {
    if path.is_empty() {
        return Err(StoreError::BadUrl {
            url: whole.to_string(),
            why: "no file named; use sqlite:PATH".into(),
        });
    }
    Ok(PathBuf::from(path))
}

impl std::fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreUrl::Sqlite(p) => write!(f, "sqlite:{}", p.display()),
            StoreUrl::Postgres(u) => u.fmt(f),
        }
    }
}

impl std::fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StoreUrl({self})")
    }
}

impl StoreUrl {
    /// Open the database (an SQLite file waits up to `busy` for another writer).
    pub fn open(&self, busy: std::time::Duration) -> Result<Box<dyn Conn>, StoreError> {
        Ok(match self {
            StoreUrl::Sqlite(path) => Box::new(sqlite::SqliteConn::open(path, busy)?),
            StoreUrl::Postgres(pg) => Box::new(postgres::PgConn::connect(pg)?),
        })
    }

    /// The same store, a relative file path made absolute (to hand to a process elsewhere).
    pub fn absolute(&self) -> std::io::Result<StoreUrl> {
        Ok(match self {
            StoreUrl::Sqlite(path) => StoreUrl::Sqlite(std::path::absolute(path)?),
            other => other.clone(),
        })
    }

    /// The URL, any password included: only for handing the store to a child kiln (through
    /// its environment), never for showing.
    pub fn secret_url(&self) -> String {
        match self {
            StoreUrl::Postgres(pg) => pg.secret_url().to_string(),
            other => other.to_string(),
        }
    }
}

/// The file name of a workspace's own store in its state directory.
pub const STORE_FILE: &str = "kiln.db";

/// Where the store of the workspace at `workspace` is, or will be: [`STORE_FILE`] in kiln's
/// state directory for it, `$XDG_STATE_HOME/kiln/workspaces/<key>/` (else
/// `~/.local/state/kiln/...`; the key is [`kiln_state::Identity::key`]).
pub fn default_path(workspace: &Path) -> Result<std::path::PathBuf, StoreError> {
    let id = kiln_state::Identity::of(workspace)?;
    Ok(kiln_state::base()?
        .join("workspaces")
        .join(id.key())
        .join(STORE_FILE))
}

/// Whether the workspace's own store exists (reading history creates nothing).
pub fn default_exists(workspace: &Path) -> bool {
    default_path(workspace).is_ok_and(|p| std::fs::symlink_metadata(p).is_ok())
}

/// The store file an earlier kiln kept inside the workspace, which kiln no longer reads.
pub const LEGACY_STORE: &str = ".kiln/kiln.db";

/// The one-line notice for a workspace still holding [`LEGACY_STORE`]: it is ignored (a
/// program kiln ran could have rewritten it), and where runs are recorded now.
pub fn legacy_notice(root: &Path, now: &Path) -> Option<String> {
    std::fs::symlink_metadata(root.join(LEGACY_STORE))
        .ok()
        .map(|_| {
            format!(
                "{LEGACY_STORE} from an earlier kiln is ignored (programs kiln ran could rewrite it); runs are now recorded in {}; to look at the old runs, `kiln history --store sqlite:{LEGACY_STORE}` (untrusted) or delete it",
                now.display()
            )
        })
}

/// `workspace`, canonical (no link in it can redirect the store or change the project).
fn canonical(workspace: &Path) -> Result<std::path::PathBuf, StoreError> {
    workspace.canonicalize().map_err(|source| StoreError::Dir {
        path: workspace.to_path_buf(),
        source,
    })
}

/// Largest text stored per output column.
pub const MAX_STORED_TEXT: usize = 256 * 1024;

/// Keep `text` under `max` bytes: head and tail with a marker in between.
pub fn cap_text(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let head_len = max / 4;
    let tail_len = max - head_len;
    let h = text.floor_char_boundary(head_len);
    let t = text.ceil_char_boundary(text.len() - tail_len);
    format!(
        "{}\n[... kiln: {} bytes omitted ...]\n{}",
        &text[..h],
        t - h,
        &text[t..]
    )
}

/// How long an SQLite store waits for another writer.
const BUSY: std::time::Duration = std::time::Duration::from_secs(5);

/// The store: a connection plus the project (workspace) its runs belong to.
pub struct Store {
    conn: Mutex<Box<dyn Conn>>,
    project: String,
    host: String,
    shared: bool,
}

impl Store {
    /// Open (creating and migrating) the workspace's own store: [`STORE_FILE`] in kiln's state
    /// directory for the workspace ([`default_path`]), outside the workspace, so no program
    /// kiln runs there can rewrite the record a later `kiln history`, `report`, `undo` or
    /// `--resume` reads. A `.kiln/kiln.db` an earlier kiln left in the workspace is never read
    /// (programs could write it); the open that creates the new store says so once.
    pub fn open(workspace: &Path) -> Result<Store, StoreError> {
        let root = canonical(workspace)?;
        let state =
            kiln_state::WorkspaceState::open(&root, true)?.ok_or_else(|| StoreError::Dir {
                path: root.clone(),
                source: std::io::ErrorKind::NotFound.into(),
            })?;
        let path = state.path().join(STORE_FILE);
        let fresh = std::fs::symlink_metadata(&path).is_err();
        let store = Store::open_file(&path, &root.to_string_lossy())?;
        if fresh && let Some(notice) = legacy_notice(&root, &path) {
            eprintln!("kiln: note: {notice}");
        }
        Ok(store)
    }

    /// Open a database file for a project. The file and SQLite's companions (`-wal`, `-shm`,
    /// `-journal`) must be regular files or absent, and no symlink is followed on the way.
    pub fn open_file(path: &Path, project: &str) -> Result<Store, StoreError> {
        let conn = sqlite::SqliteConn::open(path, BUSY)?;
        Store::with_conn(Box::new(conn), project, false)
    }

    /// Open the store `url` names for the runs of `workspace`: its own store ([`Store::open`])
    /// when `url` is `None`; else the SQLite file or PostgreSQL database named (a shared
    /// store), recording under the workspace's canonical path.
    pub fn open_url(url: Option<&StoreUrl>, workspace: &Path) -> Result<Store, StoreError> {
        match url {
            None => Store::open(workspace),
            Some(url) => Store::open_project(url, &canonical(workspace)?.to_string_lossy()),
        }
    }

    /// Open the shared store `url` names, recording runs under `project`.
    pub fn open_project(url: &StoreUrl, project: &str) -> Result<Store, StoreError> {
        Store::with_conn(url.open(BUSY)?, project, true)
    }

    /// A store over any connection (its schema migrated forward first), for `project`.
    /// `shared`: the database holds other workspaces' runs too (`kiln history` then lists
    /// every project).
    pub fn with_conn(
        mut conn: Box<dyn Conn>,
        project: &str,
        shared: bool,
    ) -> Result<Store, StoreError> {
        schema::migrate(conn.as_mut())?;
        Ok(Store {
            conn: Mutex::new(conn),
            project: project.to_string(),
            host: host_name(),
            shared,
        })
    }

    fn db(&self) -> MutexGuard<'_, Box<dyn Conn>> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The database, for messages (a path, or a URL without its password).
    pub fn describe(&self) -> String {
        self.db().describe()
    }

    /// The project (workspace) this store records runs for.
    pub fn project(&self) -> &str {
        &self.project
    }

    /// The database holds other workspaces' runs too (a `--store` URL).
    pub fn is_shared(&self) -> bool {
        self.shared
    }

    /// The connection itself.
    pub fn conn(&mut self) -> &mut dyn Conn {
        self.conn
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
    }

    /// The schema version of the database.
    pub fn schema_version(&self) -> Result<i64, StoreError> {
        self.db().schema_version()
    }

    /// Insert a loop row with `status`. For `running`, first look at the project's running
    /// loops on this host (under the project's lock) and let [`check_running`] refuse
    /// (overlap) or close (crashed) them, atomically.
    fn begin_row(&mut self, new: &NewLoop, status: &'static str) -> Result<i64, StoreError> {
        let (project, host, at) = (self.project.as_str(), self.host.as_str(), now_ms());
        transaction(self.db().as_mut(), |c| {
            if status == "running" {
                c.lock(&project.into())?;
                let found: Vec<Running> = c
                    .query(
                        "SELECT id, pid, started_at FROM loops WHERE project = ?1 AND status = 'running' AND (host IS NULL OR host = ?2)",
                        &[project.into(), host.into()],
                    )?
                    .iter()
                    .map(|r| Running {
                        id: rows::int(&r[0]),
                        pid: rows::int(&r[1]),
                        started: rows::int(&r[2]),
                    })
                    .collect();
                for id in check_running(&found, new.parent)? {
                    c.execute(
                        "UPDATE loops SET status = 'failed', stop_reason = 'error', last_error = ?3, ended_at = ?2 WHERE id = ?1",
                        &[id.into(), at.into(), CRASHED.into()],
                    )?;
                }
            }
            let targets = serde_json::to_string(&new.targets).unwrap_or_default();
            let id = c.query(
                "INSERT INTO loops (kind, project, host, runner, targets, format, model, status, max_iters, pid, started_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) RETURNING id",
                &[new.kind.as_str().into(), project.into(), host.into(), (&new.runner).into(), targets.into(), (&new.format).into(),
                  (&new.model).into(), status.into(), new.max_iters.into(), i64::from(std::process::id()).into(), at.into()],
            )?;
            Ok(id.first().map_or(0, |r| rows::int(&r[0])))
        })
    }

    /// Start a loop, refusing when another live loop runs on this workspace (on this machine).
    /// A `running` loop whose process is gone (a crash) is closed as `failed`/`error` first.
    pub fn begin_loop(&mut self, new: &NewLoop) -> Result<i64, StoreError> {
        self.begin_row(new, "running")
    }

    /// Start a session that records tool calls made on behalf of another program (a `kiln mcp`
    /// connection): status `serving` until [`Store::close_session`]. It is not a loop, so it
    /// neither waits for running loops nor makes a later loop wait.
    pub fn begin_session(&mut self, new: &NewLoop) -> Result<i64, StoreError> {
        self.begin_row(new, "serving")
    }

    /// Record one iteration with its edits, in one transaction.
    pub fn record_iteration(
        &mut self,
        loop_id: i64,
        it: &IterationRow,
        edits: &[kiln_protocol::edit::EditResult],
    ) -> Result<(), StoreError> {
        let mut capped = it.clone();
        capped.stdout = cap_text(&it.stdout, MAX_STORED_TEXT);
        capped.stderr = cap_text(&it.stderr, MAX_STORED_TEXT);
        let at = now_ms();
        let it = capped;
        transaction(self.db().as_mut(), |c| {
            c.execute(
                &format!("INSERT INTO iterations (loop_id, {ITERATION_COLUMNS}, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)"),
                &[loop_id.into(), it.n.into(), it.exit_code.into(), it.ok.into(), (&it.stdout).into(), (&it.stderr).into(),
                  it.diagnostics.to_string().into(), (&it.fingerprint).into(), it.llm_summary.as_deref().into(), it.runner_ms.into(),
                  it.llm_ms.into(), it.tokens_input.into(), it.tokens_output.into(), it.edits_applied.into(), at.into()],
            )?;
            for e in edits {
                let error = e.error.as_deref().map(|s| cap_text(s, MAX_STORED_TEXT));
                c.execute(
                    &format!("INSERT INTO edits (loop_id, {EDIT_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"),
                    &[loop_id.into(), it.n.into(), (&e.path).into(), e.kind.into(), e.status.into(), e.tier.as_deref().into(),
                      e.failure.into(), error.into()],
                )?;
            }
            c.execute(
                "UPDATE loops SET iters = CASE WHEN iters < ?2 THEN ?2 ELSE iters END WHERE id = ?1",
                &[loop_id.into(), it.n.into()],
            )
        })
        .map(drop)
    }

    /// Set a loop's token totals to `u` (a loop whose model calls are recorded under its
    /// nested runs: the execute/review loop's row carries the sum of its rounds).
    pub fn set_loop_tokens(
        &mut self,
        loop_id: i64,
        u: &kiln_protocol::chat::Usage,
    ) -> Result<(), StoreError> {
        let t = rows::usage_vals(u);
        self.exec(
            "UPDATE loops SET tokens_input = ?2, tokens_cached_input = ?3, tokens_cache_write = ?4, tokens_output = ?5, tokens_reasoning = ?6 WHERE id = ?1",
            &[loop_id.into(), t[0].clone(), t[1].clone(), t[2].clone(), t[3].clone(), t[4].clone()],
        )
    }

    /// Run one statement.
    fn exec(&self, sql: &str, params: &[Val]) -> Result<(), StoreError> {
        self.db().execute(sql, params).map(drop)
    }

    /// Record one LLM call and add its tokens to the loop's totals.
    pub fn record_llm_call(
        &mut self,
        loop_id: i64,
        iteration: i64,
        model: &str,
        r: Result<&kiln_protocol::chat::ChatResponse, &str>,
    ) -> Result<(), StoreError> {
        let row = match r {
            Ok(resp) => LlmCallRow {
                iteration,
                model: model.to_string(),
                latency_ms: resp.latency.as_millis() as i64,
                tokens: resp.usage,
                response: cap_text(&resp.text, MAX_STORED_TEXT),
                tool_calls: serde_json::to_value(&resp.tool_calls).unwrap_or_default(),
                error: None,
            },
            Err(e) => LlmCallRow {
                iteration,
                model: model.to_string(),
                latency_ms: 0,
                tokens: kiln_protocol::chat::Usage::default(),
                response: String::new(),
                tool_calls: serde_json::json!([]),
                error: Some(e.to_string()),
            },
        };
        let (at, t) = (now_ms(), rows::usage_vals(&row.tokens));
        transaction(self.db().as_mut(), |c| {
            let mut p = vec![loop_id.into(), row.iteration.into(), (&row.model).into(), row.latency_ms.into()];
            p.extend(t.iter().cloned());
            p.extend([(&row.response).into(), row.tool_calls.to_string().into(), row.error.as_deref().into(), at.into()]);
            c.execute(
                &format!("INSERT INTO llm_calls (loop_id, {LLM_CALL_COLUMNS}, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)"),
                &p,
            )?;
            c.execute(
                "UPDATE loops SET tokens_input = tokens_input + ?2, tokens_cached_input = tokens_cached_input + ?3, tokens_cache_write = tokens_cache_write + ?4,
                 tokens_output = tokens_output + ?5, tokens_reasoning = tokens_reasoning + ?6 WHERE id = ?1",
                &[loop_id.into(), t[0].clone(), t[1].clone(), t[2].clone(), t[3].clone(), t[4].clone()],
            )
        })
        .map(drop)
    }

    /// Record an event.
    pub fn record_event(
        &mut self,
        loop_id: i64,
        seq: u64,
        kind: &str,
        payload: &serde_json::Value,
    ) -> Result<(), StoreError> {
        self.exec(
            "INSERT INTO events (loop_id, seq, type, payload, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
            &[loop_id.into(), (seq as i64).into(), kind.into(), payload.to_string().into(), now_ms().into()],
        )
    }

    /// A loop's stored events in order, each `(seq, type, payload)`; only those of type
    /// `kind` when given.
    pub fn events(
        &self,
        loop_id: i64,
        kind: Option<&str>,
    ) -> Result<Vec<(i64, String, serde_json::Value)>, StoreError> {
        Ok(self
            .db()
            .query(
                "SELECT seq, type, payload FROM events WHERE loop_id = ?1 AND (CAST(?2 AS TEXT) IS NULL OR type = CAST(?2 AS TEXT)) ORDER BY seq, id",
                &[loop_id.into(), kind.into()],
            )?
            .iter()
            .map(|r| {
                let v = r[2].text().and_then(|p| serde_json::from_str(p).ok());
                (rows::int(&r[0]), rows::text(&r[1]), v.unwrap_or(serde_json::Value::Null))
            })
            .collect())
    }

    /// Close a loop with its status and stop reason.
    pub fn finish_loop(
        &mut self,
        loop_id: i64,
        status: LoopStatus,
        reason: StopReason,
        summary: &str,
        last_error: Option<&str>,
    ) -> Result<(), StoreError> {
        self.finish_row(
            loop_id,
            status.as_str(),
            reason.as_str(),
            summary,
            last_error,
        )
    }

    /// Close a session started with [`Store::begin_session`] (status and reason `closed`),
    /// with the number of calls it served.
    pub fn close_session(
        &mut self,
        loop_id: i64,
        calls: i64,
        summary: &str,
    ) -> Result<(), StoreError> {
        self.set_iters(loop_id, calls)?;
        self.finish_row(loop_id, "closed", "closed", summary, None)
    }

    fn finish_row(
        &mut self,
        loop_id: i64,
        status: &str,
        stop_reason: &str,
        summary: &str,
        last_error: Option<&str>,
    ) -> Result<(), StoreError> {
        let last_error = last_error.map(|s| cap_text(s, MAX_STORED_TEXT));
        self.exec(
            "UPDATE loops SET status = ?2, stop_reason = ?3, summary = ?4, last_error = ?5, ended_at = ?6 WHERE id = ?1",
            &[loop_id.into(), status.into(), stop_reason.into(), summary.into(), last_error.into(), now_ms().into()],
        )
    }

    /// The most recent loops of this project, newest first.
    pub fn loops(&self, limit: usize) -> Result<Vec<LoopRow>, StoreError> {
        self.loops_of(Some(&self.project), limit)
    }

    /// The most recent loops of every project in the database, newest first.
    pub fn all_loops(&self, limit: usize) -> Result<Vec<LoopRow>, StoreError> {
        self.loops_of(None, limit)
    }

    fn loops_of(&self, project: Option<&str>, limit: usize) -> Result<Vec<LoopRow>, StoreError> {
        self.db()
            .query(
                &format!("SELECT {LOOP_COLUMNS} FROM loops WHERE CAST(?1 AS TEXT) IS NULL OR project = CAST(?1 AS TEXT) ORDER BY id DESC LIMIT ?2"),
                &[project.into(), (limit as i64).into()],
            )?
            .iter()
            .map(|r| rows::loop_row(r))
            .collect()
    }

    fn find_loop(&self, id: i64) -> Result<Option<LoopRow>, StoreError> {
        let found = self.db().query(
            &format!("SELECT {LOOP_COLUMNS} FROM loops WHERE id = ?1"),
            &[id.into()],
        )?;
        found.first().map(|r| rows::loop_row(r)).transpose()
    }

    /// The rows of `table` (its `columns`) of loop `id`, in order, each made by `f`.
    fn rows_of<T>(
        &self,
        columns: &str,
        table: &str,
        order: &str,
        id: i64,
        f: impl Fn(&[Val]) -> T,
    ) -> Result<Vec<T>, StoreError> {
        let q = format!("SELECT {columns} FROM {table} WHERE loop_id = ?1 ORDER BY {order}");
        Ok(self
            .db()
            .query(&q, &[id.into()])?
            .iter()
            .map(|r| f(r))
            .collect())
    }

    /// One loop's row (any project's).
    pub fn loop_row(&self, id: i64) -> Result<LoopRow, StoreError> {
        self.find_loop(id)?.ok_or(StoreError::NoLoop(id))
    }

    /// One loop of this project with its iterations, edits and LLM calls. A run of another
    /// workspace in a shared store is [`StoreError::NoLoop`], exactly like a missing id: what
    /// the model's history tools, `--resume` and replays read is this project's only.
    pub fn loop_detail(&self, id: i64) -> Result<LoopDetail, StoreError> {
        match self.find_loop(id)? {
            Some(row) if row.project == self.project => self.detail_of(row),
            _ => Err(StoreError::NoLoop(id)),
        }
    }

    /// One loop of any project in the database, for the user's own `kiln history ID` and
    /// `kiln report` (a shared store's listing shows every project's runs). Never for
    /// anything a model or a program asks.
    pub fn any_loop_detail(&self, id: i64) -> Result<LoopDetail, StoreError> {
        let row = self.find_loop(id)?.ok_or(StoreError::NoLoop(id))?;
        self.detail_of(row)
    }

    fn detail_of(&self, row: LoopRow) -> Result<LoopDetail, StoreError> {
        let id = row.id;
        Ok(LoopDetail {
            row,
            iterations: self.rows_of(
                ITERATION_COLUMNS,
                "iterations",
                "n",
                id,
                rows::iteration_row,
            )?,
            edits: self.rows_of(EDIT_COLUMNS, "edits", "id", id, rows::edit_row)?,
            llm_calls: self.rows_of(LLM_CALL_COLUMNS, "llm_calls", "id", id, rows::llm_call_row)?,
        })
    }

    /// Record one agent tool call.
    #[allow(clippy::too_many_arguments)]
    pub fn record_tool_call(
        &mut self,
        loop_id: i64,
        turn: i64,
        call_id: &str,
        name: &str,
        arguments: &str,
        result: &str,
        is_error: bool,
        duration_ms: i64,
    ) -> Result<(), StoreError> {
        self.exec(
            "INSERT INTO tool_calls (loop_id, turn, call_id, name, arguments, result, is_error, duration_ms, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            &[loop_id.into(), turn.into(), call_id.into(), name.into(), cap_text(arguments, MAX_STORED_TEXT).into(),
              cap_text(result, MAX_STORED_TEXT).into(), is_error.into(), duration_ms.into(), now_ms().into()],
        )
    }

    /// An agent run's tool calls, in order.
    pub fn tool_calls(&self, loop_id: i64) -> Result<Vec<ToolCallRow>, StoreError> {
        self.rows_of(
            TOOL_CALL_COLUMNS,
            "tool_calls",
            "id",
            loop_id,
            rows::tool_call_row,
        )
    }

    /// Set a loop's iteration count (agent turns).
    pub fn set_iters(&mut self, loop_id: i64, iters: i64) -> Result<(), StoreError> {
        self.exec(
            "UPDATE loops SET iters = ?2 WHERE id = ?1",
            &[loop_id.into(), iters.into()],
        )
    }

    /// Number of events recorded for a loop.
    pub fn event_count(&self, loop_id: i64) -> Result<i64, StoreError> {
        let rows = self.db().query(
            "SELECT COUNT(*) FROM events WHERE loop_id = ?1",
            &[loop_id.into()],
        )?;
        Ok(rows.first().map_or(0, |r| rows::int(&r[0])))
    }
}

/// The throwaway PostgreSQL of the host's unit tests: the integration tests' harness, one
/// cluster per test binary (`test_pg::PgServer::shared().fresh_db()`).
#[cfg(test)]
#[path = "../../../tests/integration/pg.rs"]
pub(crate) mod test_pg;

#[cfg(test)]
mod tests;

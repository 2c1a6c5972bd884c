//! Persistence of loops, iterations, edits, LLM calls, tool calls and events, behind one
//! [`Backend`] trait with two implementations: an SQLite file in the workspace (the default,
//! `.kiln/kiln.db`, WAL; [`sqlite`]) and a PostgreSQL database that many workspaces and
//! machines share ([`postgres`]). [`Store`] is the type the rest of kiln uses: it adds the
//! project, the clock, caps and the run-kind and status types on top of a backend. Both schemas
//! carry a version and are migrated forward on open ([`schema`]). Writes are transactional;
//! very large outputs are stored capped (head and tail kept, with a marker saying how much was
//! cut), never dropped silently.

mod files;
mod location;
pub mod postgres;
pub mod schema;
pub mod sqlite;

pub use files::open_log;
pub use location::{PgUrl, StoreUrl};
pub use schema::SCHEMA_VERSION;

use crate::clock::{human_time, now_ms};
use crate::engine::outcome::{LoopStatus, StopReason};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Largest text stored per output column.
pub const MAX_STORED_TEXT: usize = 256 * 1024;

/// Store errors name the database (a file, or a URL without its password).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite failed.
    #[error("database {path}: {source}")]
    Sql {
        /// The database file.
        path: PathBuf,
        /// SQLite's error.
        source: rusqlite::Error,
    },
    /// PostgreSQL answered with an error.
    #[error("database {store}: {message}")]
    Postgres {
        /// The URL, password redacted.
        store: String,
        /// The server's or client's message (with any password removed).
        message: String,
    },
    /// The database server cannot be reached (refused, closed, shutting down): the call did
    /// nothing durable; a later call reconnects.
    #[error("the store {store} is unreachable: {message}")]
    Unreachable {
        /// The URL, password redacted.
        store: String,
        /// Why (with any password removed).
        message: String,
    },
    /// `--store`, `KILN_STORE` or `[store] url` is not a store kiln can use.
    #[error("store URL {url}: {why}")]
    BadUrl {
        /// The URL as given, password redacted.
        url: String,
        /// What is wrong and how to fix it.
        why: String,
    },
    /// The `.kiln` directory could not be created.
    #[error("cannot create {path}: {source}")]
    Dir {
        /// The directory.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// Another loop is running on this workspace.
    #[error(
        "loop {id} is already running on this workspace (pid {pid}, started {}); wait for it or stop it first",
        human_time(*started, now_ms())
    )]
    Overlap {
        /// The running loop's id.
        id: i64,
        /// The process running it.
        pid: i64,
        /// When it started (unix ms).
        started: i64,
    },
    /// The database was written by a newer kiln.
    #[error(
        "database {store} has schema version {found}, newer than this kiln's {supported}; upgrade kiln"
    )]
    TooNew {
        /// The database (file or redacted URL).
        store: String,
        /// The version found in the database.
        found: i64,
        /// The newest version this kiln knows.
        supported: i64,
    },
    /// No such loop.
    #[error("no loop with id {0} in this store; see `kiln history`")]
    NoLoop(i64),
    /// A row names a run kind this kiln does not know (a newer kiln wrote it).
    #[error("loop {id} has kind `{kind}`, unknown to this kiln; upgrade kiln")]
    UnknownKind {
        /// The loop.
        id: i64,
        /// The kind as stored.
        kind: String,
    },
    /// kiln's own state would be written through a symlink (or into something that is not a
    /// directory or regular file), possibly outside the workspace.
    #[error(
        "refusing to use {path}: {why}; kiln keeps its state only in a real `.kiln` directory inside the workspace (remove it and run again)"
    )]
    NotReal {
        /// The path at fault.
        path: PathBuf,
        /// What it is instead.
        why: &'static str,
    },
    /// A log file could not be opened or written.
    #[error("cannot open log {path}: {source}")]
    Log {
        /// The log file.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
}

impl StoreError {
    /// The database could not be reached: retrying later may succeed.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, StoreError::Unreachable { .. })
    }
}

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

/// What started a recorded run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunKind {
    /// `kiln fix` (or an agent's or MCP client's `compile_loop`).
    Fix,
    /// `kiln agent`.
    Agent,
    /// `kiln loop`: the execute/review loop as a whole.
    Loop,
    /// One execution round of `kiln loop`.
    LoopExecute,
    /// One review round of `kiln loop`.
    LoopReview,
    /// A `kiln mcp` connection (a session, not a loop).
    Mcp,
}

impl RunKind {
    /// Every kind, in the order above.
    pub const ALL: [RunKind; 6] = [
        RunKind::Fix,
        RunKind::Agent,
        RunKind::Loop,
        RunKind::LoopExecute,
        RunKind::LoopReview,
        RunKind::Mcp,
    ];

    /// The name stored in the `kind` column.
    pub fn as_str(self) -> &'static str {
        match self {
            RunKind::Fix => "fix",
            RunKind::Agent => "agent",
            RunKind::Loop => "loop",
            RunKind::LoopExecute => "loop-execute",
            RunKind::LoopReview => "loop-review",
            RunKind::Mcp => "mcp",
        }
    }

    /// The kind a stored name stands for.
    pub fn parse(name: &str) -> Option<RunKind> {
        RunKind::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// Runs that call tools (their `kiln history show` lists tool calls).
    pub fn calls_tools(self) -> bool {
        !matches!(self, RunKind::Fix | RunKind::Loop)
    }
}

impl std::fmt::Display for RunKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

impl PartialEq<&str> for RunKind {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// A loop as listed by `kiln history`.
#[derive(Debug, Clone, Serialize)]
pub struct LoopRow {
    /// The loop's id (unique in its store).
    pub id: i64,
    /// What started it.
    pub kind: RunKind,
    /// The workspace it ran in (many share one PostgreSQL store).
    pub project: String,
    /// The machine it ran on (absent for rows written before schema version 3).
    pub host: Option<String>,
    /// Runner plugin.
    pub runner: String,
    /// Target files.
    pub targets: Vec<String>,
    /// Edit format.
    pub format: String,
    /// Model (or `replay`).
    pub model: String,
    /// `running`, `success`, `failed`, `blocked`; `serving` / `closed` for MCP sessions.
    pub status: String,
    /// Why it ended.
    pub stop_reason: Option<String>,
    /// Iteration ceiling.
    pub max_iters: i64,
    /// Iterations run.
    pub iters: i64,
    /// One-line summary.
    pub summary: Option<String>,
    /// Last error text.
    pub last_error: Option<String>,
    /// Start, unix ms.
    pub started_at: i64,
    /// End, unix ms.
    pub ended_at: Option<i64>,
    /// Token totals by class.
    pub tokens: crate::llm::Usage,
}

/// An iteration row.
#[derive(Debug, Clone, Serialize, Default)]
pub struct IterationRow {
    /// 0 is the initial run, before any LLM call.
    pub n: i64,
    /// Runner exit code.
    pub exit_code: i64,
    /// Runner verdict.
    pub ok: bool,
    /// Captured stdout (capped).
    pub stdout: String,
    /// Captured stderr (capped).
    pub stderr: String,
    /// Diagnostics as JSON.
    pub diagnostics: serde_json::Value,
    /// Normalised error fingerprint.
    pub fingerprint: String,
    /// What the LLM said it did (first lines of its answer).
    pub llm_summary: Option<String>,
    /// Runner time, ms.
    pub runner_ms: i64,
    /// LLM time, ms.
    pub llm_ms: i64,
    /// Input tokens of this iteration's LLM calls.
    pub tokens_input: i64,
    /// Output tokens of this iteration's LLM calls.
    pub tokens_output: i64,
    /// Edits applied.
    pub edits_applied: i64,
}

/// An edit row.
#[derive(Debug, Clone, Serialize)]
pub struct EditRow {
    /// The iteration that proposed it.
    pub iteration: i64,
    /// Workspace-relative path.
    pub path: String,
    /// `replace`, `create`, `rewrite`, `delete`, `rename`.
    pub kind: String,
    /// `applied`, `already_applied`, `failed`, `not_applied`.
    pub status: String,
    /// The matching tier, when a search located it.
    pub tier: Option<String>,
    /// Failure class (`no_match`, `ambiguous`, ...).
    pub failure: Option<String>,
    /// The message the LLM was shown.
    pub error: Option<String>,
}

/// An LLM call row.
#[derive(Debug, Clone, Serialize)]
pub struct LlmCallRow {
    /// The iteration (or turn) it belongs to.
    pub iteration: i64,
    /// Model name.
    pub model: String,
    /// Latency, ms.
    pub latency_ms: i64,
    /// Token usage by class.
    pub tokens: crate::llm::Usage,
    /// The raw answer text.
    pub response: String,
    /// Tool calls as JSON.
    pub tool_calls: serde_json::Value,
    /// Error, if the call failed.
    pub error: Option<String>,
}

/// Everything about one loop.
#[derive(Debug, Clone, Serialize)]
pub struct LoopDetail {
    /// The loop.
    #[serde(flatten)]
    pub row: LoopRow,
    /// Its iterations.
    pub iterations: Vec<IterationRow>,
    /// Its edits.
    pub edits: Vec<EditRow>,
    /// Its LLM calls.
    pub llm_calls: Vec<LlmCallRow>,
}

/// What a new loop is.
#[derive(Debug, Clone)]
pub struct NewLoop {
    /// What starts it.
    pub kind: RunKind,
    /// Runner plugin.
    pub runner: String,
    /// Target files.
    pub targets: Vec<String>,
    /// Edit format.
    pub format: String,
    /// Model (or `replay`).
    pub model: String,
    /// Iteration ceiling.
    pub max_iters: i64,
    /// The loop that starts this one (an agent's `compile_loop`): not an overlap.
    pub parent: Option<i64>,
}

/// A recorded agent tool call.
#[derive(Debug, Clone, Serialize)]
pub struct ToolCallRow {
    /// Turn.
    pub turn: i64,
    /// Tool name.
    pub name: String,
    /// Arguments (JSON text).
    pub arguments: String,
    /// Full result text (store-capped).
    pub result: String,
    /// The call failed.
    pub is_error: bool,
    /// Duration, ms.
    pub duration_ms: i64,
}

/// A row to open in `loops` (what [`Backend::begin`] inserts).
#[derive(Debug, Clone)]
pub struct Begin<'a> {
    /// The project (workspace) it runs in.
    pub project: &'a str,
    /// This machine's name.
    pub host: &'a str,
    /// The loop.
    pub new: &'a NewLoop,
    /// `running` (a loop: checked for overlap) or `serving` (an MCP session: not checked).
    pub status: &'static str,
    /// This process.
    pub pid: i64,
    /// Now, unix ms.
    pub at: i64,
}

/// How a loop ends (what [`Backend::finish`] writes).
#[derive(Debug, Clone)]
pub struct End<'a> {
    /// `success`, `failed`, `blocked`, or `closed` for a session.
    pub status: &'a str,
    /// The stop reason's wire name.
    pub stop_reason: &'a str,
    /// One-line summary.
    pub summary: &'a str,
    /// Last error text (capped).
    pub last_error: Option<String>,
    /// Now, unix ms.
    pub at: i64,
}

/// A running loop of the same project and host that [`Backend::begin`] found.
#[derive(Debug, Clone, Copy)]
pub struct Running {
    /// Its id.
    pub id: i64,
    /// Its process.
    pub pid: i64,
    /// Its start, unix ms.
    pub started: i64,
}

/// What the store stores a loop's rows in: SQLite or PostgreSQL. Every method is one
/// transaction. Texts are already capped; times are given (the backend reads no clock).
pub trait Backend: Send {
    /// The database for messages: a file path, or a URL without its password.
    fn describe(&self) -> String;
    /// Insert a loop. For `running`, first look at the project's running loops on this host
    /// and let [`check_running`] refuse (overlap) or close (crashed) them, atomically.
    fn begin(&mut self, b: &Begin<'_>) -> Result<i64, StoreError>;
    /// Insert one iteration and its edits; raise the loop's `iters` to `it.n`.
    fn record_iteration(
        &mut self,
        loop_id: i64,
        it: &IterationRow,
        edits: &[EditRow],
        at: i64,
    ) -> Result<(), StoreError>;
    /// Insert one LLM call and add its tokens to the loop's totals.
    fn record_llm_call(&mut self, loop_id: i64, c: &LlmCallRow, at: i64) -> Result<(), StoreError>;
    /// Insert one event.
    fn record_event(
        &mut self,
        loop_id: i64,
        seq: i64,
        kind: &str,
        payload: &str,
        at: i64,
    ) -> Result<(), StoreError>;
    /// Insert one tool call.
    fn record_tool_call(
        &mut self,
        loop_id: i64,
        call_id: &str,
        c: &ToolCallRow,
        at: i64,
    ) -> Result<(), StoreError>;
    /// Close a loop.
    fn finish(&mut self, loop_id: i64, end: &End<'_>) -> Result<(), StoreError>;
    /// Set a loop's iteration count.
    fn set_iters(&mut self, loop_id: i64, iters: i64) -> Result<(), StoreError>;
    /// Set a loop's token totals.
    fn set_tokens(&mut self, loop_id: i64, u: &crate::llm::Usage) -> Result<(), StoreError>;
    /// The newest loops (of `project`, or of every project), newest first.
    fn loops(&self, project: Option<&str>, limit: usize) -> Result<Vec<LoopRow>, StoreError>;
    /// One loop.
    fn loop_row(&self, id: i64) -> Result<Option<LoopRow>, StoreError>;
    /// A loop's iterations, by number.
    fn iterations(&self, id: i64) -> Result<Vec<IterationRow>, StoreError>;
    /// A loop's edits, in order.
    fn edits(&self, id: i64) -> Result<Vec<EditRow>, StoreError>;
    /// A loop's LLM calls, in order.
    fn llm_calls(&self, id: i64) -> Result<Vec<LlmCallRow>, StoreError>;
    /// A loop's tool calls, in order.
    fn tool_calls(&self, id: i64) -> Result<Vec<ToolCallRow>, StoreError>;
    /// How many events a loop has.
    fn event_count(&self, id: i64) -> Result<i64, StoreError>;
    /// The schema version the database is at.
    fn schema_version(&self) -> Result<i64, StoreError>;
    /// The connection itself, for tables other parts of kiln keep in the same database (the
    /// batch queue). Its schema is theirs to version.
    fn raw(&mut self) -> Raw<'_>;
}

/// A backend's own connection (see [`Backend::raw`]).
pub enum Raw<'a> {
    /// The SQLite connection.
    Sqlite(&'a mut rusqlite::Connection),
    /// The PostgreSQL connection (reconnecting, with typed errors).
    Postgres(&'a mut postgres::PgConn),
}

/// Decide about the running loops [`Backend::begin`] found (same project, same host): an
/// error when one's process is alive (and it is not `parent`), else the ids to close as
/// crashed.
pub fn check_running(found: &[Running], parent: Option<i64>) -> Result<Vec<i64>, StoreError> {
    let mut crashed = Vec::new();
    for r in found {
        if Some(r.id) == parent {
            continue;
        }
        if pid_alive(r.pid) {
            return Err(StoreError::Overlap {
                id: r.id,
                pid: r.pid,
                started: r.started,
            });
        }
        crashed.push(r.id);
    }
    Ok(crashed)
}

/// `row` with its kind set from the stored name (an unknown name is an error naming the loop).
pub fn with_kind(mut row: LoopRow, kind: &str) -> Result<LoopRow, StoreError> {
    row.kind = RunKind::parse(kind).ok_or_else(|| StoreError::UnknownKind {
        id: row.id,
        kind: kind.to_string(),
    })?;
    Ok(row)
}

/// What a crashed loop's `last_error` says.
pub const CRASHED: &str = "the process running this loop ended without finishing it";

fn pid_alive(pid: i64) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    pid > 0 && unsafe { libc::kill(pid as i32, 0) } == 0
}

/// This machine's name (`gethostname`), or `localhost` when it has none.
pub fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; the name is NUL-terminated when it fits.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    match std::str::from_utf8(&buf[..end]) {
        Ok(s) if rc == 0 && !s.is_empty() => s.to_string(),
        _ => "localhost".to_string(),
    }
}

/// The store: a backend plus the project (workspace) its runs belong to.
pub struct Store {
    backend: Box<dyn Backend>,
    project: String,
    host: String,
    shared: bool,
}

impl Store {
    /// Open (creating and migrating) `<workspace>/.kiln/kiln.db`. A `.kiln` or database file
    /// that is a symlink is refused (the store must not be redirected outside the workspace).
    pub fn open(workspace: &Path) -> Result<Store, StoreError> {
        let dir = files::kiln_dir(workspace)?;
        Store::open_file(&dir.join("kiln.db"), &workspace.to_string_lossy())
    }

    /// Open a database file for a project. The file and SQLite's companions (`-wal`, `-shm`,
    /// `-journal`) must be regular files or absent, and no symlink is followed on the way.
    pub fn open_file(path: &Path, project: &str) -> Result<Store, StoreError> {
        let backend = sqlite::Sqlite::open(path)?;
        Ok(Store::with_backend(Box::new(backend), project, false))
    }

    /// Open the store `url` names for the runs of `workspace`: its own `.kiln/kiln.db` when
    /// `url` is `None`; else the SQLite file or PostgreSQL database named (a shared store).
    pub fn open_url(url: Option<&StoreUrl>, workspace: &Path) -> Result<Store, StoreError> {
        match url {
            None => Store::open(workspace),
            Some(url) => Store::open_project(url, &workspace.to_string_lossy()),
        }
    }

    /// Open the shared store `url` names, recording runs under `project`.
    pub fn open_project(url: &StoreUrl, project: &str) -> Result<Store, StoreError> {
        let backend: Box<dyn Backend> = match url {
            StoreUrl::Sqlite(path) => Box::new(sqlite::Sqlite::open(path)?),
            StoreUrl::Postgres(pg) => Box::new(postgres::Postgres::open(pg)?),
        };
        Ok(Store::with_backend(backend, project, true))
    }

    /// A store over any backend, for `project`. `shared`: the database holds other
    /// workspaces' runs too (`kiln history` then lists every project).
    pub fn with_backend(backend: Box<dyn Backend>, project: &str, shared: bool) -> Store {
        Store {
            backend,
            project: project.to_string(),
            host: host_name(),
            shared,
        }
    }

    /// The database, for messages (a path, or a URL without its password).
    pub fn describe(&self) -> String {
        self.backend.describe()
    }

    /// The project (workspace) this store records runs for.
    pub fn project(&self) -> &str {
        &self.project
    }

    /// The database holds other workspaces' runs too (a `--store` URL).
    pub fn is_shared(&self) -> bool {
        self.shared
    }

    /// The backend itself (for tables of other parts of kiln, through [`Backend::raw`]).
    pub fn backend(&mut self) -> &mut dyn Backend {
        self.backend.as_mut()
    }

    /// The schema version of the database.
    pub fn schema_version(&self) -> Result<i64, StoreError> {
        self.backend.schema_version()
    }

    fn begin_row(&mut self, new: &NewLoop, status: &'static str) -> Result<i64, StoreError> {
        self.backend.begin(&Begin {
            project: &self.project,
            host: &self.host,
            new,
            status,
            pid: std::process::id() as i64,
            at: now_ms(),
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
        edits: &[crate::edit::EditResult],
    ) -> Result<(), StoreError> {
        let mut capped = it.clone();
        capped.stdout = cap_text(&it.stdout, MAX_STORED_TEXT);
        capped.stderr = cap_text(&it.stderr, MAX_STORED_TEXT);
        let rows: Vec<EditRow> = edits
            .iter()
            .map(|e| EditRow {
                iteration: it.n,
                path: e.path.clone(),
                kind: e.kind.to_string(),
                status: e.status.to_string(),
                tier: e.tier.clone(),
                failure: e.failure.map(str::to_string),
                error: e.error.as_deref().map(|s| cap_text(s, MAX_STORED_TEXT)),
            })
            .collect();
        self.backend
            .record_iteration(loop_id, &capped, &rows, now_ms())
    }

    /// Set a loop's token totals to `u` (a loop whose model calls are recorded under its
    /// nested runs: the execute/review loop's row carries the sum of its rounds).
    pub fn set_loop_tokens(
        &mut self,
        loop_id: i64,
        u: &crate::llm::Usage,
    ) -> Result<(), StoreError> {
        self.backend.set_tokens(loop_id, u)
    }

    /// Record one LLM call and add its tokens to the loop's totals.
    pub fn record_llm_call(
        &mut self,
        loop_id: i64,
        iteration: i64,
        model: &str,
        r: Result<&crate::llm::ChatResponse, &str>,
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
                tokens: crate::llm::Usage::default(),
                response: String::new(),
                tool_calls: serde_json::json!([]),
                error: Some(e.to_string()),
            },
        };
        self.backend.record_llm_call(loop_id, &row, now_ms())
    }

    /// Record an event.
    pub fn record_event(
        &mut self,
        loop_id: i64,
        seq: u64,
        kind: &str,
        payload: &serde_json::Value,
    ) -> Result<(), StoreError> {
        self.backend
            .record_event(loop_id, seq as i64, kind, &payload.to_string(), now_ms())
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
        self.backend.set_iters(loop_id, calls)?;
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
        self.backend.finish(
            loop_id,
            &End {
                status,
                stop_reason,
                summary,
                last_error: last_error.map(|s| cap_text(s, MAX_STORED_TEXT)),
                at: now_ms(),
            },
        )
    }

    /// The most recent loops of this project, newest first.
    pub fn loops(&self, limit: usize) -> Result<Vec<LoopRow>, StoreError> {
        self.backend.loops(Some(&self.project), limit)
    }

    /// The most recent loops of every project in the database, newest first.
    pub fn all_loops(&self, limit: usize) -> Result<Vec<LoopRow>, StoreError> {
        self.backend.loops(None, limit)
    }

    /// One loop with its iterations, edits and LLM calls.
    pub fn loop_detail(&self, id: i64) -> Result<LoopDetail, StoreError> {
        let row = self.backend.loop_row(id)?.ok_or(StoreError::NoLoop(id))?;
        Ok(LoopDetail {
            row,
            iterations: self.backend.iterations(id)?,
            edits: self.backend.edits(id)?,
            llm_calls: self.backend.llm_calls(id)?,
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
        let row = ToolCallRow {
            turn,
            name: name.to_string(),
            arguments: cap_text(arguments, MAX_STORED_TEXT),
            result: cap_text(result, MAX_STORED_TEXT),
            is_error,
            duration_ms,
        };
        self.backend
            .record_tool_call(loop_id, call_id, &row, now_ms())
    }

    /// An agent run's tool calls, in order.
    pub fn tool_calls(&self, loop_id: i64) -> Result<Vec<ToolCallRow>, StoreError> {
        self.backend.tool_calls(loop_id)
    }

    /// Set a loop's iteration count (agent turns).
    pub fn set_iters(&mut self, loop_id: i64, iters: i64) -> Result<(), StoreError> {
        self.backend.set_iters(loop_id, iters)
    }

    /// Number of events recorded for a loop.
    pub fn event_count(&self, loop_id: i64) -> Result<i64, StoreError> {
        self.backend.event_count(loop_id)
    }
}

#[cfg(test)]
mod tests;

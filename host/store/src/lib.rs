//! kiln-store: persistence of loops, iterations, edits, LLM calls, tool calls and events, behind one
//! [`Backend`] trait with two implementations: an SQLite file (the default: `kiln.db` in kiln's
//! state directory for the workspace, outside it, [`Store::open`]; WAL; [`sqlite`]) and a PostgreSQL database that many workspaces and
//! machines share ([`postgres`]). [`Store`] is the type the rest of kiln uses: it adds the
//! project, the clock, caps and the run-kind and status types on top of a backend. Both schemas
//! carry a version and are migrated forward on open ([`schema`]). Writes are transactional;
//! very large outputs are stored capped (head and tail kept, with a marker saying how much was
//! cut), never dropped silently.
//!
//! It depends on `kiln-protocol` (statuses, stop reasons, usage, edit results) and `kiln-state`
//! (where a workspace's own store lives) only. It must never import the engine, the LLM
//! transport, the plugin runtime, edits or the CLI: they record into the store, not the
//! other way round.

mod backend;
pub mod conn;
mod error;
mod files;
mod location;
pub mod pg_conn;
pub mod postgres;
mod rows;
pub mod schema;
pub mod sqlite;

pub use backend::{Backend, Begin, CRASHED, End, Raw, Running, check_running, host_name};
pub use error::StoreError;
pub use files::open_log;
pub use location::{PgUrl, StoreUrl};
pub use rows::{
    EditRow, IterationRow, LlmCallRow, LoopDetail, LoopRow, NewLoop, RunKind, ToolCallRow,
    with_kind,
};
pub use schema::SCHEMA_VERSION;

use kiln_protocol::clock::now_ms;
use kiln_protocol::outcome::{LoopStatus, StopReason};
use std::path::Path;

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

/// The store: a backend plus the project (workspace) its runs belong to.
pub struct Store {
    backend: Box<dyn Backend>,
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
        let backend = sqlite::Sqlite::open(path)?;
        Ok(Store::with_backend(Box::new(backend), project, false))
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
        edits: &[kiln_protocol::edit::EditResult],
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
        u: &kiln_protocol::chat::Usage,
    ) -> Result<(), StoreError> {
        self.backend.set_tokens(loop_id, u)
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

    /// A loop's stored events in order, each `(seq, type, payload)`; only those of type
    /// `kind` when given.
    pub fn events(
        &self,
        loop_id: i64,
        kind: Option<&str>,
    ) -> Result<Vec<(i64, String, serde_json::Value)>, StoreError> {
        Ok(self
            .backend
            .events(loop_id, kind)?
            .into_iter()
            .map(|(seq, ty, payload)| {
                let v = serde_json::from_str(&payload).unwrap_or(serde_json::Value::Null);
                (seq, ty, v)
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

    /// One loop's row (any project's).
    pub fn loop_row(&self, id: i64) -> Result<LoopRow, StoreError> {
        self.backend.loop_row(id)?.ok_or(StoreError::NoLoop(id))
    }

    /// One loop of this project with its iterations, edits and LLM calls. A run of another
    /// workspace in a shared store is [`StoreError::NoLoop`], exactly like a missing id: what
    /// the model's history tools, `--resume` and replays read is this project's only.
    pub fn loop_detail(&self, id: i64) -> Result<LoopDetail, StoreError> {
        match self.backend.loop_row(id)? {
            Some(row) if row.project == self.project => self.detail_of(row),
            _ => Err(StoreError::NoLoop(id)),
        }
    }

    /// One loop of any project in the database, for the user's own `kiln history ID` and
    /// `kiln report` (a shared store's listing shows every project's runs). Never for
    /// anything a model or a program asks.
    pub fn any_loop_detail(&self, id: i64) -> Result<LoopDetail, StoreError> {
        let row = self.backend.loop_row(id)?.ok_or(StoreError::NoLoop(id))?;
        self.detail_of(row)
    }

    fn detail_of(&self, row: LoopRow) -> Result<LoopDetail, StoreError> {
        let id = row.id;
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

/// The throwaway PostgreSQL of the host's unit tests: the integration tests' harness, one
/// cluster per test binary (`test_pg::PgServer::shared().fresh_db()`).
#[cfg(test)]
#[path = "../../../tests/integration/pg.rs"]
pub(crate) mod test_pg;

#[cfg(test)]
mod tests;

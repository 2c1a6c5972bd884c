//! The [`Backend`] trait both databases implement, the values it passes, and the overlap
//! rule of a new loop that both apply inside their transaction.

use super::error::StoreError;
use super::rows::{EditRow, IterationRow, LlmCallRow, LoopRow, NewLoop, ToolCallRow};

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
    fn set_tokens(
        &mut self,
        loop_id: i64,
        u: &kiln_protocol::chat::Usage,
    ) -> Result<(), StoreError>;
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
    /// A loop's stored events in order, `(seq, type, payload JSON text)`; only those of type
    /// `kind` when given.
    fn events(&self, id: i64, kind: Option<&str>)
    -> Result<Vec<(i64, String, String)>, StoreError>;
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
    Postgres(&'a mut super::pg_conn::PgConn),
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

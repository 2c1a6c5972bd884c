//! The store's schema: one list of numbered migration steps for every engine. A step names
//! the engine-specific column types as `{id}` (the table's key, assigned on insert), `{int}`
//! and `{bool}`; [`Conn::column_type`] spells them. A database records the version it is at
//! (where is the engine's: [`Conn::schema_version`]) and is migrated forward on open, in one
//! transaction under a lock; a database at a newer version than [`SCHEMA_VERSION`] is refused.

use super::conn::{ColumnType, Conn, transaction};
use super::error::StoreError;

/// The current schema version.
pub const SCHEMA_VERSION: i64 = 3;

/// Version 1: loops, iterations, edits, LLM calls, events.
const V1: &str = "
CREATE TABLE loops (
    id {id},
    kind TEXT NOT NULL,
    project TEXT NOT NULL,
    runner TEXT NOT NULL,
    targets TEXT NOT NULL,
    format TEXT NOT NULL,
    model TEXT NOT NULL,
    status TEXT NOT NULL,
    stop_reason TEXT,
    max_iters {int} NOT NULL,
    iters {int} NOT NULL DEFAULT 0,
    summary TEXT,
    last_error TEXT,
    pid {int} NOT NULL,
    started_at {int} NOT NULL,
    ended_at {int},
    tokens_input {int} NOT NULL DEFAULT 0,
    tokens_cached_input {int} NOT NULL DEFAULT 0,
    tokens_cache_write {int} NOT NULL DEFAULT 0,
    tokens_output {int} NOT NULL DEFAULT 0,
    tokens_reasoning {int} NOT NULL DEFAULT 0
);
CREATE INDEX loops_status ON loops(project, status);
CREATE TABLE iterations (
    id {id},
    loop_id {int} NOT NULL REFERENCES loops(id),
    n {int} NOT NULL,
    exit_code {int} NOT NULL,
    ok {bool} NOT NULL,
    stdout TEXT NOT NULL,
    stderr TEXT NOT NULL,
    diagnostics TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    llm_summary TEXT,
    runner_ms {int} NOT NULL,
    llm_ms {int} NOT NULL,
    tokens_input {int} NOT NULL,
    tokens_output {int} NOT NULL,
    edits_applied {int} NOT NULL,
    created_at {int} NOT NULL
);
CREATE TABLE edits (
    id {id},
    loop_id {int} NOT NULL REFERENCES loops(id),
    iteration {int} NOT NULL,
    path TEXT NOT NULL,
    kind TEXT NOT NULL,
    status TEXT NOT NULL,
    tier TEXT,
    failure TEXT,
    error TEXT
);
CREATE TABLE llm_calls (
    id {id},
    loop_id {int} NOT NULL REFERENCES loops(id),
    iteration {int} NOT NULL,
    model TEXT NOT NULL,
    latency_ms {int} NOT NULL,
    tokens_input {int} NOT NULL,
    tokens_cached_input {int} NOT NULL,
    tokens_cache_write {int} NOT NULL,
    tokens_output {int} NOT NULL,
    tokens_reasoning {int} NOT NULL,
    response TEXT NOT NULL,
    tool_calls TEXT NOT NULL,
    error TEXT,
    created_at {int} NOT NULL
);
CREATE TABLE events (
    id {id},
    loop_id {int} NOT NULL REFERENCES loops(id),
    seq {int} NOT NULL,
    type TEXT NOT NULL,
    payload TEXT NOT NULL,
    created_at {int} NOT NULL
);
";

/// Version 2: agent tool calls, with their full (up to the store cap) results.
const V2: &str = "
CREATE TABLE tool_calls (
    id {id},
    loop_id {int} NOT NULL REFERENCES loops(id),
    turn {int} NOT NULL,
    call_id TEXT NOT NULL,
    name TEXT NOT NULL,
    arguments TEXT NOT NULL,
    result TEXT NOT NULL,
    is_error {bool} NOT NULL,
    duration_ms {int} NOT NULL,
    created_at {int} NOT NULL
);
";

/// Version 3: the machine each loop ran on (a shared store holds many), and indexes for
/// reading one loop's rows.
const V3: &str = "
ALTER TABLE loops ADD COLUMN host TEXT;
CREATE INDEX iterations_loop ON iterations(loop_id);
CREATE INDEX edits_loop ON edits(loop_id);
CREATE INDEX llm_calls_loop ON llm_calls(loop_id);
CREATE INDEX events_loop ON events(loop_id);
CREATE INDEX tool_calls_loop ON tool_calls(loop_id);
";

/// The steps: `(version, SQL)`, applied in order when the database is older.
pub const STEPS: [(i64, &str); 3] = [(1, V1), (2, V2), (3, V3)];

/// The lock that serialises migrations (`kiln` in ASCII; processes opening a new store at
/// once migrate it once, one after another).
const MIGRATION_LOCK: i64 = 0x6b69_6c6e;

/// `step` in `conn`'s column types.
pub fn render(conn: &dyn Conn, step: &str) -> String {
    step.replace("{id}", conn.column_type(ColumnType::Id))
        .replace("{int}", conn.column_type(ColumnType::Int))
        .replace("{bool}", conn.column_type(ColumnType::Bool))
}

/// Bring the database to [`SCHEMA_VERSION`]; a newer one is [`StoreError::TooNew`].
pub(crate) fn migrate(conn: &mut dyn Conn) -> Result<(), StoreError> {
    transaction(conn, |c| {
        c.lock(&MIGRATION_LOCK.into())?;
        let found = c.schema_version()?;
        if found > SCHEMA_VERSION {
            return Err(StoreError::TooNew {
                store: c.describe(),
                found,
                supported: SCHEMA_VERSION,
            });
        }
        if found == SCHEMA_VERSION {
            return Ok(());
        }
        for (n, step) in STEPS {
            if found < n {
                c.batch(&render(c, step))?;
            }
        }
        c.set_schema_version(SCHEMA_VERSION)
    })
}

/// The columns of `loops` that [`LoopRow`](super::LoopRow) reads, in its order.
pub const LOOP_COLUMNS: &str = "id, kind, project, host, runner, targets, format, model, status, stop_reason, max_iters, iters, summary, last_error, started_at, ended_at, tokens_input, tokens_cached_input, tokens_cache_write, tokens_output, tokens_reasoning";

/// The columns of `iterations` that [`IterationRow`](super::IterationRow) reads.
pub const ITERATION_COLUMNS: &str = "n, exit_code, ok, stdout, stderr, diagnostics, fingerprint, llm_summary, runner_ms, llm_ms, tokens_input, tokens_output, edits_applied";

/// The columns of `edits` that [`EditRow`](super::EditRow) reads.
pub const EDIT_COLUMNS: &str = "iteration, path, kind, status, tier, failure, error";

/// The columns of `llm_calls` that [`LlmCallRow`](super::LlmCallRow) reads.
pub const LLM_CALL_COLUMNS: &str = "iteration, model, latency_ms, tokens_input, tokens_cached_input, tokens_cache_write, tokens_output, tokens_reasoning, response, tool_calls, error";

/// The columns of `tool_calls` that [`ToolCallRow`](super::ToolCallRow) reads.
pub const TOOL_CALL_COLUMNS: &str = "turn, name, arguments, result, is_error, duration_ms";

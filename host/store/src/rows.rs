//! What the store records and returns: the run kinds and the rows of loops, iterations,
//! edits, LLM calls and tool calls, the same for every engine, and how each is read from a
//! row of [`Val`]s.

use super::conn::Val;
use super::error::StoreError;
use kiln_protocol::chat::Usage;
use serde::Serialize;

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
    pub tokens: kiln_protocol::chat::Usage,
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
    pub tokens: kiln_protocol::chat::Usage,
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

/// `row` with its kind set from the stored name (an unknown name is an error naming the loop).
pub fn with_kind(mut row: LoopRow, kind: &str) -> Result<LoopRow, StoreError> {
    row.kind = RunKind::parse(kind).ok_or_else(|| StoreError::UnknownKind {
        id: row.id,
        kind: kind.to_string(),
    })?;
    Ok(row)
}

/// An integer column (0 when NULL).
pub(crate) fn int(v: &Val) -> i64 {
    v.int().unwrap_or(0)
}

/// A text column (empty when NULL).
pub(crate) fn text(v: &Val) -> String {
    v.text().unwrap_or_default().to_string()
}

fn opt_text(v: &Val) -> Option<String> {
    v.text().map(str::to_string)
}

fn json(v: &Val) -> serde_json::Value {
    v.text()
        .and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or_default()
}

/// A [`Usage`] from its five columns, in the store's order.
fn usage(r: &[Val]) -> Usage {
    let n = |i: usize| int(&r[i]) as u64;
    Usage {
        input: n(0),
        cached_input: n(1),
        cache_write: n(2),
        output: n(3),
        reasoning: n(4),
    }
}

/// A [`Usage`] as the values of its five columns.
pub(crate) fn usage_vals(u: &Usage) -> [Val; 5] {
    [
        u.input,
        u.cached_input,
        u.cache_write,
        u.output,
        u.reasoning,
    ]
    .map(Val::from)
}

/// A [`LoopRow`] from the `LOOP_COLUMNS` (an unknown kind is an error naming the loop).
pub(crate) fn loop_row(r: &[Val]) -> Result<LoopRow, StoreError> {
    let row = LoopRow {
        id: int(&r[0]),
        kind: RunKind::Fix,
        project: text(&r[2]),
        host: opt_text(&r[3]),
        runner: text(&r[4]),
        targets: serde_json::from_value(json(&r[5])).unwrap_or_default(),
        format: text(&r[6]),
        model: text(&r[7]),
        status: text(&r[8]),
        stop_reason: opt_text(&r[9]),
        max_iters: int(&r[10]),
        iters: int(&r[11]),
        summary: opt_text(&r[12]),
        last_error: opt_text(&r[13]),
        started_at: int(&r[14]),
        ended_at: r[15].int(),
        tokens: usage(&r[16..]),
    };
    with_kind(row, &text(&r[1]))
}

/// An [`IterationRow`] from the `ITERATION_COLUMNS`.
pub(crate) fn iteration_row(r: &[Val]) -> IterationRow {
    IterationRow {
        n: int(&r[0]),
        exit_code: int(&r[1]),
        ok: int(&r[2]) != 0,
        stdout: text(&r[3]),
        stderr: text(&r[4]),
        diagnostics: json(&r[5]),
        fingerprint: text(&r[6]),
        llm_summary: opt_text(&r[7]),
        runner_ms: int(&r[8]),
        llm_ms: int(&r[9]),
        tokens_input: int(&r[10]),
        tokens_output: int(&r[11]),
        edits_applied: int(&r[12]),
    }
}

/// An [`EditRow`] from the `EDIT_COLUMNS`.
pub(crate) fn edit_row(r: &[Val]) -> EditRow {
    EditRow {
        iteration: int(&r[0]),
        path: text(&r[1]),
        kind: text(&r[2]),
        status: text(&r[3]),
        tier: opt_text(&r[4]),
        failure: opt_text(&r[5]),
        error: opt_text(&r[6]),
    }
}

/// An [`LlmCallRow`] from the `LLM_CALL_COLUMNS`.
pub(crate) fn llm_call_row(r: &[Val]) -> LlmCallRow {
    LlmCallRow {
        iteration: int(&r[0]),
        model: text(&r[1]),
        latency_ms: int(&r[2]),
        tokens: usage(&r[3..]),
        response: text(&r[8]),
        tool_calls: json(&r[9]),
        error: opt_text(&r[10]),
    }
}

/// A [`ToolCallRow`] from the `TOOL_CALL_COLUMNS`.
pub(crate) fn tool_call_row(r: &[Val]) -> ToolCallRow {
    ToolCallRow {
        turn: int(&r[0]),
        name: text(&r[1]),
        arguments: text(&r[2]),
        result: text(&r[3]),
        is_error: int(&r[4]) != 0,
        duration_ms: int(&r[5]),
    }
}

//! How a loop ends: typed stop reasons and statuses (serialised as the strings the store, the
//! events and the JSON results use) and each loop's result shape. Events and loops both read
//! these; nothing here depends on a loop.

use crate::chat::{Message, Usage};
use serde::{Deserialize, Serialize};

/// Why a loop stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// fix: the check passes.
    Success,
    /// fix: the iteration ceiling was reached.
    MaxIters,
    /// fix: the same failure keeps coming back.
    Stagnation,
    /// fix: several iterations in a row applied no edit.
    NoEditsApplied,
    /// The model stopped the loop, a policy refused an edit, or a reviewer named a blocker.
    Blocked,
    /// The user pressed Ctrl-C.
    Cancelled,
    /// The model, a plugin or the transport failed.
    Error,
    /// agent / loop: the model finished the task.
    Complete,
    /// agent: the turn cap.
    MaxSteps,
    /// agent: the write cap.
    MaxWrites,
    /// agent: the command cap.
    MaxCommands,
    /// agent: the same call with nothing changed in between.
    RepeatedCall,
    /// agent: the conversation no longer fits the model's context.
    ContextExceeded,
    /// loop: the reviewer found nothing pending.
    ReviewClean,
    /// loop: the round limit.
    MaxLoops,
    /// The next model request would pass `--max-cost` / `--max-tokens` (`[budget]`).
    Budget,
    /// fix: a check ran out of time (the runner's deadline, `--timeout`); the model is not
    /// asked to fix a failure it was never shown.
    Timeout,
}

impl StopReason {
    /// The wire name (`max_iters`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Success => "success",
            StopReason::MaxIters => "max_iters",
            StopReason::Stagnation => "stagnation",
            StopReason::NoEditsApplied => "no_edits_applied",
            StopReason::Blocked => "blocked",
            StopReason::Cancelled => "cancelled",
            StopReason::Error => "error",
            StopReason::Complete => "complete",
            StopReason::MaxSteps => "max_steps",
            StopReason::MaxWrites => "max_writes",
            StopReason::MaxCommands => "max_commands",
            StopReason::RepeatedCall => "repeated_call",
            StopReason::ContextExceeded => "context_exceeded",
            StopReason::ReviewClean => "review_clean",
            StopReason::MaxLoops => "max_loops",
            StopReason::Budget => "budget",
            StopReason::Timeout => "timeout",
        }
    }

    /// The loop's lifecycle status after this stop.
    pub fn status(self) -> LoopStatus {
        match self {
            StopReason::Success | StopReason::Complete | StopReason::ReviewClean => {
                LoopStatus::Success
            }
            StopReason::Blocked => LoopStatus::Blocked,
            _ => LoopStatus::Failed,
        }
    }

    /// The loop reached its goal.
    pub fn is_success(self) -> bool {
        self.status() == LoopStatus::Success
    }
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A loop's lifecycle: `running → success | failed | blocked`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoopStatus {
    /// Started and not finished.
    Running,
    /// Reached its goal.
    Success,
    /// Stopped without reaching it.
    Failed,
    /// Stopped by the model, a policy or a reviewer.
    Blocked,
}

impl LoopStatus {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            LoopStatus::Running => "running",
            LoopStatus::Success => "success",
            LoopStatus::Failed => "failed",
            LoopStatus::Blocked => "blocked",
        }
    }
}

impl std::fmt::Display for LoopStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The fix loop's result: the shape `compile_loop` returns to an agent or an MCP client,
/// plus the loop's id and status.
#[derive(Debug, Clone, Serialize)]
pub struct FixOutcome {
    /// The check passes at the end.
    pub ok: bool,
    /// Iterations used (0: the check already passed).
    pub iters: u32,
    /// One line for a person or an agent.
    pub summary: String,
    /// Single-file mode: absolute path of the edited file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub artifact_path: Option<String>,
    /// Multi-file mode: absolute paths of the files written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub modified_files: Option<Vec<String>>,
    /// On failure: `max_iters`, `stagnation`, `no_edits_applied`, `blocked`, `cancelled`, `error`, `budget`.
    pub failure_reason: Option<StopReason>,
    /// On failure: the last error output.
    pub last_error: Option<String>,
    /// The last iteration: its check's exit code and output tails, and the model's summary
    /// (seed 001's `lastIteration`). `None` only when no check ran.
    #[serde(rename = "lastIteration")]
    pub last_iteration: Option<LastIteration>,
    /// Loop id in the store.
    pub loop_id: i64,
    /// `success`, `failed`, `blocked`.
    pub status: LoopStatus,
    /// The stop reason (also `success`).
    pub stop_reason: StopReason,
    /// Files the model changed that decide success: the check's own files (with
    /// `--allow-check-edits`, or named as targets) and files of tests, workspace-relative.
    /// Not empty: the summary says so too, as a success its own edits may have decided.
    pub check_changed: Vec<String>,
    /// Tokens of every model request the loop made.
    #[serde(skip)]
    pub usage: Usage,
}

/// A fix loop's last iteration, as its result reports it (seed 001's `lastIteration`).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct LastIteration {
    /// The iteration (0: the first check, before the model was asked).
    pub iteration: u32,
    /// The check's exit code after the iteration's edits.
    pub exit_code: i32,
    /// The tail of the check's standard output.
    pub stdout: String,
    /// The tail of the check's standard error.
    pub stderr: String,
    /// What the model answered in this iteration (its start), or why it stopped the loop;
    /// `None` for iteration 0 or an iteration the model did not answer.
    pub summary: Option<String>,
    /// The check's first diagnostics, as `kiln check --json` prints them (with `test`, the
    /// failing test's name, on a test failure).
    pub diagnostics: Vec<serde_json::Value>,
}

/// How one tool call ended, as the model is told: its text, and whether it worked, failed,
/// or was refused before it could have any effect (by a hook, the host's command policy,
/// the sandbox or the edit policy).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolOutcome {
    /// The call did its job; the text is its result.
    Ok(String),
    /// The call ran (or tried to) and failed; the text says why.
    Failed(String),
    /// The call was refused and had no effect; the text says by whom and why.
    Refused(String),
}

impl ToolOutcome {
    /// The text the model is shown.
    pub fn text(&self) -> &str {
        match self {
            ToolOutcome::Ok(t) | ToolOutcome::Failed(t) | ToolOutcome::Refused(t) => t,
        }
    }

    /// The text, consumed.
    pub fn into_text(self) -> String {
        match self {
            ToolOutcome::Ok(t) | ToolOutcome::Failed(t) | ToolOutcome::Refused(t) => t,
        }
    }

    /// Failed or refused: the model sees the result as an error.
    pub fn is_error(&self) -> bool {
        !matches!(self, ToolOutcome::Ok(_))
    }

    /// The outcome without its text.
    pub fn status(&self) -> CallStatus {
        match self {
            ToolOutcome::Ok(_) => CallStatus::Ok,
            ToolOutcome::Failed(_) => CallStatus::Failed,
            ToolOutcome::Refused(_) => CallStatus::Refused,
        }
    }

    /// `Ok` or `Failed` from a result text and an error flag (tools whose callee reports
    /// no refusals of its own).
    pub fn from_flag(text: String, is_error: bool) -> ToolOutcome {
        if is_error {
            ToolOutcome::Failed(text)
        } else {
            ToolOutcome::Ok(text)
        }
    }
}

/// How one tool call ended, without its text (see [`ToolOutcome`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CallStatus {
    /// It did its job.
    #[default]
    Ok,
    /// It failed.
    Failed,
    /// It was refused and had no effect.
    Refused,
}

/// The `STATUS:` line of an execution report in the execute/review loop (serialised as
/// `COMPLETE` / `INCOMPLETE`, as the report writes it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum ReportStatus {
    /// The execution agent says the task is done (the loop ends without a review).
    Complete,
    /// Work remains (a review follows).
    Incomplete,
}

/// One tool call as made.
#[derive(Debug, Clone, Serialize)]
pub struct ToolCallRecord {
    /// The agent turn (1-based) in which the call was made.
    pub turn: u32,
    /// The tool's name as the model called it.
    pub name: String,
    /// Arguments (JSON text).
    pub arguments: String,
    /// It succeeded.
    pub ok: bool,
    /// How it ended (refusals are told apart from failures by type, for the reviewer).
    #[serde(skip)]
    pub status: CallStatus,
    /// The start of what the model was shown (the store has the whole text).
    #[serde(skip)]
    pub output: String,
}

/// The agent's result.
#[derive(Debug, Clone, Serialize)]
pub struct AgentResult {
    /// Final content: the final answer, or the model's last text (also when a cap stopped
    /// the run: `max_steps` keeps what the model last said).
    pub content: String,
    /// What failed, when the run ended on a failure of the model, a tool or the transport
    /// (`error`, `context_exceeded`); `null` otherwise (seed 004's `error`).
    pub error: Option<String>,
    /// The whole conversation.
    pub messages: Vec<Message>,
    /// Every tool call made.
    pub tool_calls: Vec<ToolCallRecord>,
    /// Usage by class, over every model request of the run (reviewers and nested loops
    /// included).
    pub usage: Usage,
    /// Turns taken.
    pub turns: u32,
    /// Why it stopped.
    pub stop_reason: StopReason,
    /// True only for `complete`.
    pub success: bool,
    /// Run id in the store.
    pub loop_id: i64,
    /// Workspace files this run wrote or deleted (workspace-relative, in order of first write).
    pub changed_files: Vec<String>,
}

/// What the harness verified about one execution phase (from its structured result, not
/// from logs).
#[derive(Debug, Clone, Default, Serialize)]
pub struct LoopSummary {
    /// Round (1-based).
    pub round: u32,
    /// Files created or overwritten whole (write_file).
    pub files_written: Vec<String>,
    /// Files changed by edits (write_patch and other writes).
    pub files_edited: Vec<String>,
    /// Files read.
    pub files_read: Vec<String>,
    /// Commands run, with whether they succeeded.
    pub commands_run: Vec<CommandRun>,
    /// Errors the phase's tools returned (not refusals).
    pub errors: Vec<String>,
    /// Calls refused by the sandbox, a hook or the allowlist: attempted, no effect.
    pub refused: Vec<String>,
    /// Tokens of the phase.
    pub tokens: Usage,
    /// The phase's stop reason.
    pub stop_reason: Option<StopReason>,
    /// `STATUS:` of the execution report, when it has one.
    pub status: Option<ReportStatus>,
}

/// One command an execution phase ran.
#[derive(Debug, Clone, Serialize)]
pub struct CommandRun {
    /// The command line.
    pub command: String,
    /// Exit code, when the program ran.
    pub exit_code: Option<i64>,
}

/// The loop's result.
#[derive(Debug, Clone, Serialize)]
pub struct LoopRunResult {
    /// The loop's run id in the store.
    pub run_id: i64,
    /// Why it stopped.
    pub stop_reason: StopReason,
    /// `complete` or `review_clean`.
    pub success: bool,
    /// Rounds finished.
    pub loops_completed: u32,
    /// The last execution report or review summary.
    pub summary: String,
    /// Items still pending.
    pub pending: Vec<String>,
    /// The reviewer's blocker, if any.
    pub blocker: String,
    /// Tokens of every request of the run.
    pub usage: Usage,
    /// What each round's execution did.
    pub rounds: Vec<LoopSummary>,
}

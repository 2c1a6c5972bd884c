//! The typed event stream every loop emits: numbered, timestamped, rendered for a person or as
//! one JSON object per line (the person's rendering is `cli::render`). The JSON form is
//! `{"seq", "ts_ms", "type", ...fields}`; `type` is one of the names below (`loop.started`,
//! `runner.finished`, ...).
//!
//! Everything that watches a run observes these typed values, never their names: the store
//! recorder (`run::record`), the person's rendering (`cli::render`, `cli::event_log`), the JSON
//! lines (`cli::common::EventSink`), MCP progress (`cli::mcp_cmd`) and a loop's phase log.

use serde::Serialize;
use serde_json::Value;

/// One event.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type")]
pub enum Event {
    /// A loop began.
    #[serde(rename = "loop.started")]
    LoopStarted {
        /// Loop id.
        loop_id: i64,
        /// The runner plugin that checks the targets.
        runner: String,
        /// The edit format the model answers in.
        format: String,
        /// The model's label (or the replay it comes from).
        model: String,
        /// The files the loop may change, workspace-relative.
        targets: Vec<String>,
        /// The iteration ceiling.
        max_iters: u32,
    },
    /// The runner starts a check (sent before it runs, so a long build shows at once; the
    /// first check's comes before `loop.started`, which waits for it).
    #[serde(rename = "runner.started")]
    RunnerStarted {
        /// Iteration (0: before any fix).
        iteration: u32,
        /// The runner plugin.
        runner: String,
        /// The command it runs, when it is the `command` runner's `cmd`.
        #[serde(skip_serializing_if = "Option::is_none")]
        command: Option<String>,
        /// The target files; empty: the whole project.
        targets: Vec<String>,
    },
    /// A check is still running (sent at 10 s, 30 s, 60 s, then every minute).
    #[serde(rename = "runner.progress")]
    RunnerProgress {
        /// Iteration (0: before any fix).
        iteration: u32,
        /// Seconds since the check started.
        elapsed_s: u64,
    },
    /// The runner finished a check.
    #[serde(rename = "runner.finished")]
    RunnerFinished {
        /// Iteration (0: before any fix).
        iteration: u32,
        /// The check passed.
        ok: bool,
        /// Exit code.
        exit_code: i32,
        /// Error diagnostics.
        errors: usize,
        /// Run time.
        duration_ms: u64,
        /// False when no edit applied, so the runner was not run again and this is the
        /// previous result.
        fresh: bool,
        /// The first few diagnostics, one line each (`file:line:col: severity: message`).
        first: Vec<String>,
        /// The failing tests the diagnostics name (each once, in order; see
        /// `kiln_plugin::test_name`).
        failed_tests: Vec<String>,
        /// When the check failed and no diagnostic was parsed: the last lines of its output
        /// (stdout, then stderr), so a person sees what failed; empty otherwise.
        tail: Vec<String>,
    },
    /// A request went to the model.
    #[serde(rename = "llm.request")]
    LlmRequest {
        /// The fix loop's iteration (1-based; 0: the first check).
        iteration: u32,
        /// Prompt size in characters.
        prompt_chars: usize,
    },
    /// The model answered.
    #[serde(rename = "llm.response")]
    LlmResponse {
        /// The fix loop's iteration (1-based; 0: the first check).
        iteration: u32,
        /// Time from request to the end of the answer, in ms.
        latency_ms: u64,
        /// Input tokens.
        input_tokens: u64,
        /// Output tokens.
        output_tokens: u64,
        /// Tool calls made.
        tool_calls: Vec<String>,
    },
    /// An edit was applied (or already was).
    #[serde(rename = "edit.applied")]
    EditApplied {
        /// The fix loop's iteration (1-based; 0: the first check).
        iteration: u32,
        /// The file, workspace-relative.
        path: String,
        /// `applied` or `already_applied`.
        status: String,
        /// The matching tier that located the edit, when a search did.
        tier: Option<String>,
    },
    /// An edit was refused (nothing of that response was written).
    #[serde(rename = "edit.failed")]
    EditFailed {
        /// The fix loop's iteration (1-based; 0: the first check).
        iteration: u32,
        /// The file, workspace-relative.
        path: String,
        /// Failure class.
        failure: String,
        /// Message given to the model.
        error: String,
    },
    /// What an applied response changed in one file, as a unified diff.
    #[serde(rename = "edit.diff")]
    EditDiff {
        /// The fix loop's iteration (1-based; 0: the first check).
        iteration: u32,
        /// The file, workspace-relative.
        path: String,
        /// The unified diff (`---`/`+++` headers, `@@` hunks, 3 lines of context).
        diff: String,
    },
    /// An iteration ended.
    #[serde(rename = "loop.iteration")]
    LoopIteration {
        /// Loop id.
        loop_id: i64,
        /// The fix loop's iteration (1-based; 0: the first check).
        iteration: u32,
        /// Runner verdict after the edits.
        ok: bool,
        /// Edits applied.
        edits_applied: usize,
    },
    /// The loop succeeded.
    #[serde(rename = "loop.succeeded")]
    LoopSucceeded {
        /// Loop id.
        loop_id: i64,
        /// Iterations used.
        iters: u32,
    },
    /// The loop ended without success.
    #[serde(rename = "loop.failed")]
    LoopFailed {
        /// Loop id.
        loop_id: i64,
        /// Stop reason.
        reason: String,
        /// Last error.
        last_error: Option<String>,
    },
    /// The loop was blocked (stop tool or policy).
    #[serde(rename = "loop.blocked")]
    LoopBlocked {
        /// Loop id.
        loop_id: i64,
        /// Why the loop was blocked (the model's reason or the refused edit).
        reason: String,
    },
    /// The final result, in the compile_loop return shape.
    #[serde(rename = "loop.result")]
    LoopResult(kiln_protocol::outcome::FixOutcome),
    /// An agent turn began.
    #[serde(rename = "turn.start")]
    TurnStart {
        /// Turn number (1-based).
        turn: u32,
    },
    /// An agent turn ended.
    #[serde(rename = "turn.end")]
    TurnEnd {
        /// The agent turn (1-based).
        turn: u32,
        /// Tools called in it.
        tool_calls: Vec<String>,
    },
    /// A model request failed and is asked again (a 5xx, or a stream that broke off, stalled
    /// or sent a malformed chunk); text streamed by the failed attempt is void.
    #[serde(rename = "llm.retry")]
    LlmRetry {
        /// The retry about to start (1 = the first).
        attempt: u32,
        /// Why the last attempt failed.
        reason: String,
        /// Streamed text of the failed attempt must be discarded.
        discard: bool,
    },
    /// Streamed model text.
    #[serde(rename = "text.delta")]
    TextDelta {
        /// The text.
        text: String,
    },
    /// A tool call started.
    #[serde(rename = "tool.start")]
    ToolStart {
        /// The agent turn (1-based).
        turn: u32,
        /// Call id.
        id: String,
        /// The tool's name as the model called it.
        name: String,
        /// Arguments (JSON text).
        arguments: String,
    },
    /// A tool call ended.
    #[serde(rename = "tool.end")]
    ToolEnd {
        /// The agent turn (1-based).
        turn: u32,
        /// Call id.
        id: String,
        /// The tool's name as the model called it.
        name: String,
        /// It succeeded.
        ok: bool,
        /// Wall time of the call, in ms.
        duration_ms: u64,
        /// First line of the result (or error).
        preview: String,
    },
    /// A recoverable problem the agent was told about (parse error, context compaction).
    #[serde(rename = "agent.notice")]
    AgentNotice {
        /// What happened.
        message: String,
    },
    /// A round of the execute/review loop began.
    #[serde(rename = "round.start")]
    RoundStart {
        /// Round (1-based).
        round: u32,
        /// Round limit.
        loops: u32,
    },
    /// A phase of a round began (`execution` or `review`).
    #[serde(rename = "phase.start")]
    PhaseStart {
        /// The round (1-based).
        round: u32,
        /// `execution` or `review`.
        phase: String,
    },
    /// The reviewer submitted its verdict.
    #[serde(rename = "review.submitted")]
    ReviewSubmitted {
        /// The round (1-based).
        round: u32,
        /// What actually happened.
        summary: String,
        /// Something only a person can resolve; empty when none.
        blocker: String,
        /// Items still to do.
        pending: Vec<String>,
    },
    /// A round ended.
    #[serde(rename = "round.end")]
    RoundEnd {
        /// The round (1-based).
        round: u32,
        /// Items carried into the next round.
        pending: Vec<String>,
        /// The reviewer's blocker (empty: none).
        blocker: String,
    },
    /// The execute/review loop's result.
    #[serde(rename = "loop.run.result")]
    LoopRunResult(Box<kiln_protocol::outcome::LoopRunResult>),
    /// A failure that ended (or will end) the run: the model, a plugin, the store.
    #[serde(rename = "error")]
    Error {
        /// What failed.
        message: String,
    },
    /// The agent's final result.
    #[serde(rename = "agent.result")]
    AgentResult(kiln_protocol::outcome::AgentResult),
}

impl Event {
    /// The `llm.retry` event of a [`crate::llm::Delta::Retry`].
    pub fn from_retry(d: &crate::llm::Delta) -> Option<Event> {
        match d {
            crate::llm::Delta::Retry {
                attempt,
                reason,
                discard,
            } => Some(Event::LlmRetry {
                attempt: *attempt,
                reason: reason.clone(),
                discard: *discard,
            }),
            _ => None,
        }
    }

    /// The `type` name.
    pub fn name(&self) -> &'static str {
        match self {
            Event::LoopStarted { .. } => "loop.started",
            Event::RunnerStarted { .. } => "runner.started",
            Event::RunnerProgress { .. } => "runner.progress",
            Event::RunnerFinished { .. } => "runner.finished",
            Event::LlmRequest { .. } => "llm.request",
            Event::LlmResponse { .. } => "llm.response",
            Event::EditApplied { .. } => "edit.applied",
            Event::EditFailed { .. } => "edit.failed",
            Event::EditDiff { .. } => "edit.diff",
            Event::LoopIteration { .. } => "loop.iteration",
            Event::LoopSucceeded { .. } => "loop.succeeded",
            Event::LoopFailed { .. } => "loop.failed",
            Event::LoopBlocked { .. } => "loop.blocked",
            Event::LoopResult(_) => "loop.result",
            Event::TurnStart { .. } => "turn.start",
            Event::TurnEnd { .. } => "turn.end",
            Event::LlmRetry { .. } => "llm.retry",
            Event::TextDelta { .. } => "text.delta",
            Event::ToolStart { .. } => "tool.start",
            Event::ToolEnd { .. } => "tool.end",
            Event::AgentNotice { .. } => "agent.notice",
            Event::Error { .. } => "error",
            Event::RoundStart { .. } => "round.start",
            Event::PhaseStart { .. } => "phase.start",
            Event::ReviewSubmitted { .. } => "review.submitted",
            Event::RoundEnd { .. } => "round.end",
            Event::LoopRunResult(_) => "loop.run.result",
            Event::AgentResult(_) => "agent.result",
        }
    }

    /// The JSON line form with `seq` and `ts_ms`.
    pub fn to_json(&self, seq: u64, ts_ms: i64) -> Value {
        let mut v = serde_json::to_value(self).unwrap_or(Value::Null);
        if let Value::Object(m) = &mut v {
            m.insert("seq".into(), seq.into());
            m.insert("ts_ms".into(), ts_ms.into());
            if !m.contains_key("type") {
                m.insert("type".into(), self.name().into());
            }
        }
        v
    }
}

/// The last `max` non-blank lines of a run's output (stdout, then stderr), each cut to 300
/// characters: what a person is shown when a failing check yielded no diagnostic.
pub(crate) fn output_tail(stdout: &str, stderr: &str, max: usize) -> Vec<String> {
    let lines: Vec<&str> = stdout
        .lines()
        .chain(stderr.lines())
        .map(str::trim_end)
        .filter(|l| !l.trim().is_empty())
        .collect();
    lines[lines.len().saturating_sub(max)..]
        .iter()
        .map(|l| match l.char_indices().nth(300) {
            Some((i, _)) => format!("{}…", &l[..i]),
            None => l.to_string(),
        })
        .collect()
}

#[cfg(test)]
mod tail_tests {
    #[test]
    fn the_tail_is_the_last_non_blank_lines_of_stdout_then_stderr() {
        let t = super::output_tail("a\n\nb\n", "c\n\n", 2);
        assert_eq!(t, ["b", "c"]);
        assert!(super::output_tail("", "", 5).is_empty());
    }
}

//! The typed event stream every loop emits: numbered, timestamped, rendered for a person or as
//! one JSON object per line. The JSON form is `{"seq", "ts_ms", "type", ...fields}`; `type` is
//! one of the names below (`loop.started`, `runner.finished`, ...).

use crate::terminal::count;
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
        /// Runner.
        runner: String,
        /// Format.
        format: String,
        /// Model.
        model: String,
        /// Targets.
        targets: Vec<String>,
        /// Ceiling.
        max_iters: u32,
    },
    /// The runner finished a check.
    #[serde(rename = "runner.finished")]
    RunnerFinished {
        /// Iteration (0: before any fix).
        iteration: u32,
        /// Verdict.
        ok: bool,
        /// Exit code.
        exit_code: i32,
        /// Error diagnostics.
        errors: usize,
        /// Run time.
        duration_ms: u64,
    },
    /// A request went to the model.
    #[serde(rename = "llm.request")]
    LlmRequest {
        /// Iteration.
        iteration: u32,
        /// Prompt size in characters.
        prompt_chars: usize,
    },
    /// The model answered.
    #[serde(rename = "llm.response")]
    LlmResponse {
        /// Iteration.
        iteration: u32,
        /// Latency.
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
        /// Iteration.
        iteration: u32,
        /// Path.
        path: String,
        /// `applied` or `already_applied`.
        status: String,
        /// Tier.
        tier: Option<String>,
    },
    /// An edit was refused (nothing of that response was written).
    #[serde(rename = "edit.failed")]
    EditFailed {
        /// Iteration.
        iteration: u32,
        /// Path.
        path: String,
        /// Failure class.
        failure: String,
        /// Message given to the model.
        error: String,
    },
    /// An iteration ended.
    #[serde(rename = "loop.iteration")]
    LoopIteration {
        /// Loop id.
        loop_id: i64,
        /// Iteration.
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
        /// Why.
        reason: String,
    },
    /// The final result, in the compile_loop return shape.
    #[serde(rename = "loop.result")]
    LoopResult(super::fix::FixOutcome),
    /// An agent turn began.
    #[serde(rename = "turn.start")]
    TurnStart {
        /// Turn number (1-based).
        turn: u32,
    },
    /// An agent turn ended.
    #[serde(rename = "turn.end")]
    TurnEnd {
        /// Turn.
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
        /// Turn.
        turn: u32,
        /// Call id.
        id: String,
        /// Tool.
        name: String,
        /// Arguments (JSON text).
        arguments: String,
    },
    /// A tool call ended.
    #[serde(rename = "tool.end")]
    ToolEnd {
        /// Turn.
        turn: u32,
        /// Call id.
        id: String,
        /// Tool.
        name: String,
        /// It succeeded.
        ok: bool,
        /// Duration.
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
    /// The agent's final result.
    #[serde(rename = "agent.result")]
    AgentResult(super::agent::AgentResult),
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
            Event::RunnerFinished { .. } => "runner.finished",
            Event::LlmRequest { .. } => "llm.request",
            Event::LlmResponse { .. } => "llm.response",
            Event::EditApplied { .. } => "edit.applied",
            Event::EditFailed { .. } => "edit.failed",
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

    /// One line for a person, with any control characters or escape sequences from plugins,
    /// programs or the model rendered visibly.
    pub fn human(&self) -> Option<String> {
        self.human_raw()
            .map(|l| crate::terminal::printable(&l).into_owned())
    }

    fn human_raw(&self) -> Option<String> {
        Some(match self {
            Event::LoopStarted {
                loop_id,
                runner,
                format,
                model,
                targets,
                max_iters,
            } => {
                format!(
                    "loop {loop_id}: fixing {} with runner `{runner}`, format `{format}`, model `{model}` (at most {})",
                    targets.join(", "),
                    count(*max_iters as usize, "iteration", "iterations")
                )
            }
            Event::RunnerFinished {
                iteration,
                ok,
                exit_code,
                errors,
                duration_ms,
            } => format!(
                "[{iteration}] runner: {} (exit {exit_code}, {}, {duration_ms} ms)",
                if *ok { "passed" } else { "failed" },
                count(*errors, "error", "errors")
            ),
            Event::LlmRequest {
                iteration,
                prompt_chars,
            } => format!("[{iteration}] asking the model ({prompt_chars} chars)…"),
            Event::LlmResponse {
                iteration,
                latency_ms,
                input_tokens,
                output_tokens,
                tool_calls,
            } => format!(
                "[{iteration}] model answered in {latency_ms} ms ({input_tokens} in / {output_tokens} out tokens){}",
                if tool_calls.is_empty() {
                    String::new()
                } else {
                    format!(", called {}", tool_calls.join(", "))
                }
            ),
            Event::EditApplied {
                iteration,
                path,
                status,
                tier,
            } => {
                format!(
                    "[{iteration}] {status} {path}{}",
                    tier.as_deref()
                        .map(|t| format!(" (tier {t})"))
                        .unwrap_or_default()
                )
            }
            Event::EditFailed {
                iteration,
                path,
                failure,
                error,
            } => {
                format!(
                    "[{iteration}] edit refused ({failure}) {path}: {}",
                    error.lines().next().unwrap_or("")
                )
            }
            Event::LoopIteration { .. } => return None,
            Event::LoopSucceeded { loop_id, iters } => {
                format!(
                    "loop {loop_id}: success after {}",
                    count(*iters as usize, "iteration", "iterations")
                )
            }
            Event::LoopFailed {
                loop_id, reason, ..
            } => format!("loop {loop_id}: stopped: {reason}"),
            Event::LoopBlocked { loop_id, reason } => format!("loop {loop_id}: blocked: {reason}"),
            Event::LoopResult(_)
            | Event::AgentResult(_)
            | Event::TurnEnd { .. }
            | Event::TextDelta { .. } => return None,
            Event::TurnStart { turn } => format!("-- turn {turn}"),
            Event::ToolStart {
                name, arguments, ..
            } => format!(
                "  → {name} {}",
                arguments.chars().take(120).collect::<String>()
            ),
            Event::ToolEnd {
                name,
                ok,
                duration_ms,
                preview,
                ..
            } => {
                format!(
                    "  {} {name} ({duration_ms} ms) {}",
                    if *ok { "✓" } else { "✗" },
                    preview.chars().take(160).collect::<String>()
                )
            }
            Event::AgentNotice { message } => format!("  ! {message}"),
            Event::LlmRetry {
                attempt,
                reason,
                discard,
            } => format!(
                "  ! model request failed ({reason}); retry {attempt}{}",
                if *discard {
                    ", the partial answer above is discarded"
                } else {
                    ""
                }
            ),
        })
    }
}

//! Events for a person: one line per event (or none), with control characters and escape
//! sequences from plugins, programs or the model rendered visibly. The JSON form is the
//! engine's (`Event::to_json`).

use crate::engine::Event;
use crate::terminal::count;

/// An event as a person reads it (the engine's events know nothing of people).
pub trait Human {
    /// One line for a person, with any control characters or escape sequences from plugins,
    /// programs or the model rendered visibly.
    fn human(&self) -> Option<String>;
}

impl Human for Event {
    fn human(&self) -> Option<String> {
        Lines(self)
            .human_raw()
            .map(|l| crate::terminal::printable(&l).into_owned())
    }
}

/// The per-family renderings of one event.
struct Lines<'e>(&'e Event);

impl Lines<'_> {
    fn human_raw(&self) -> Option<String> {
        self.fix_line()
            .or_else(|| self.model_line())
            .or_else(|| self.edit_line())
            .or_else(|| self.agent_line())
            .or_else(|| self.loop_line())
    }

    /// The fix loop's events.
    fn fix_line(&self) -> Option<String> {
        Some(match self.0 {
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
                    if targets.is_empty() {
                        "the project".to_string()
                    } else {
                        targets.join(", ")
                    },
                    count(*max_iters as usize, "iteration", "iterations")
                )
            }
            Event::RunnerStarted {
                iteration,
                runner,
                command,
                targets,
            } => {
                let what = match command {
                    Some(c) => format!("`{c}`"),
                    None => format!("runner `{runner}`"),
                };
                let on = if targets.is_empty() {
                    "the project".to_string()
                } else {
                    targets.join(", ")
                };
                format!("[{iteration}] checking {on}: {what}…")
            }
            Event::RunnerProgress {
                iteration,
                elapsed_s,
            } => format!("[{iteration}] still checking… {elapsed_s} s"),
            Event::RunnerFinished {
                iteration,
                ok,
                exit_code,
                errors,
                duration_ms,
                fresh,
                first,
                failed_tests,
                tail,
            } => {
                let verdict = if *ok { "passed" } else { "failed" };
                let mut s = if *fresh {
                    format!(
                        "[{iteration}] runner: {verdict} (exit {exit_code}, {}, {duration_ms} ms)",
                        count(*errors, "error", "errors")
                    )
                } else {
                    format!(
                        "[{iteration}] runner not re-run (no edit applied): still {verdict} (exit {exit_code}, {})",
                        count(*errors, "error", "errors")
                    )
                };
                if !*ok && *fresh {
                    for d in first {
                        s.push_str(&format!("\n      {d}"));
                    }
                    if !failed_tests.is_empty() {
                        s.push_str(&format!(
                            "\n      failing {}: {}",
                            if failed_tests.len() == 1 {
                                "test"
                            } else {
                                "tests"
                            },
                            failed_tests.join(", ")
                        ));
                    }
                    if !tail.is_empty() {
                        s.push_str("\n      no diagnostic parsed; the output ends:");
                        for l in tail {
                            s.push_str(&format!("\n      | {l}"));
                        }
                    }
                }
                s
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
            _ => return None,
        })
    }

    /// A request to the model and its answer.
    fn model_line(&self) -> Option<String> {
        Some(match self.0 {
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
            _ => return None,
        })
    }

    /// An edit applied, refused or shown as a diff.
    fn edit_line(&self) -> Option<String> {
        Some(match self.0 {
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
            Event::EditDiff { diff, .. } => diff.trim_end().to_string(),
            _ => return None,
        })
    }

    /// The agent's events (and those every loop shares).
    fn agent_line(&self) -> Option<String> {
        Some(match self.0 {
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
            Event::Error { message } => format!("error: {message}"),
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

            _ => return None,
        })
    }

    /// The execute/review loop's events.
    fn loop_line(&self) -> Option<String> {
        Some(match self.0 {
            Event::RoundStart { round, loops } => format!("== round {round} of {loops}"),
            Event::PhaseStart { round, phase } => format!("-- round {round}: {phase} phase"),
            Event::ReviewSubmitted {
                summary,
                blocker,
                pending,
                ..
            } => {
                let mut s = format!("  review: {}", summary.lines().next().unwrap_or(""));
                if !blocker.is_empty() {
                    s.push_str(&format!("\n  blocker: {blocker}"));
                }
                for p in pending {
                    s.push_str(&format!("\n  pending: {p}"));
                }
                s
            }
            Event::RoundEnd { .. } | Event::LoopRunResult(_) => return None,
            _ => return None,
        })
    }
}

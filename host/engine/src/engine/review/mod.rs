//! The execute/review loop: bounded rounds over a task file. Each round an execution agent
//! works (read, glob, search, write_file, write_patch, an allowlisted run_cmd) and reports
//! `STATUS: COMPLETE|INCOMPLETE`; when incomplete, a fresh review agent with narrower tools (no
//! writes, a read-only command list) reports through `submit_review` what is pending and
//! whether something blocks. Pending items and the blocker are carried into the next round (a
//! blocker ends the run only with `stop_on_blocker`). Artifacts under
//! `.kiln/loop/` are written atomically, so a killed run leaves them readable.
//! Stop reasons: `complete`, `review_clean`, `blocked`, `max_loops`, `error`, `cancelled`, `budget`.
//!
//! This file drives the rounds; `task` reads the task file, `prompt` says what each phase is
//! told and offered, `report` reads what the phases report, `artifacts` writes `.kiln/loop/`.

mod artifacts;
mod prompt;
mod report;
mod task;

use super::agent::{AgentError, AgentOptions, run_agent};
use super::events::Event;
use super::run::{Run, RunCtx};
use crate::edit::Workspace;
use crate::store::NewLoop;
pub use artifacts::{ARTIFACT_DIR, ArtifactError};
use artifacts::{Artifacts, Limits, RunToml, State};
use kiln_protocol::outcome::{AgentResult, ReportStatus, StopReason};
pub use kiln_protocol::outcome::{CommandRun, LoopRunResult, LoopSummary};
use prompt::{execution_options, execution_task, review_budget, review_options, review_task};
use report::submitted_review;
pub use report::{PendingItem, ReviewOutput, extract_pending_items, extract_status, summarize};
use serde_json::Value;
pub use task::{Task, TaskError, TaskFileError, load_task, parse_task};

/// Programs the review phase's `run_cmd` may run (the policy lives in
/// `engine::command_policy`).
pub use super::command_policy::REVIEW_COMMANDS;

/// What to run.
#[derive(Debug, Clone)]
pub struct LoopOptions {
    /// The task file, workspace-relative.
    pub task_file: String,
    /// Round limit (default 5).
    pub loops: u32,
    /// Turn budget of each execution phase (default 30); the review gets max(6, half).
    pub iterations: u32,
    /// Settings both phases share (hooks, protected paths, timeouts, format); tools, system
    /// prompt, caps and kind are set per phase.
    pub agent: AgentOptions,
    /// Programs granted to `run_cmd` by the configuration (kiln.toml, --test-command); the
    /// task's `bash` list is added to them for the execution phase.
    pub granted_commands: Vec<String>,
    /// A path (besides `.kiln/loop/`) to which every event is appended as a JSON line.
    pub log_path: Option<std::path::PathBuf>,
    /// End the run as `blocked` when a reviewer names a blocker (`--stop-on-blocker`). By
    /// default a blocker only keeps the run from ending early: the next round is shown it.
    pub stop_on_blocker: bool,
}

/// Errors that keep the loop from starting or that the host cannot recover from.
#[derive(Debug, thiserror::Error)]
pub enum LoopError {
    /// The task file is missing, outside the workspace or malformed.
    #[error(transparent)]
    Task(#[from] TaskFileError),
    /// An artifact could not be written.
    #[error(transparent)]
    Artifact(#[from] ArtifactError),
    /// A phase failed in the host.
    #[error(transparent)]
    Agent(#[from] AgentError),
    /// The store, a plugin or the workspace failed.
    #[error(transparent)]
    Host(#[from] super::error::HostError),
}

super::error::from_host_errors!(LoopError);

/// Run the loop to its end.
pub async fn run_loop(opts: &LoopOptions, ctx: RunCtx<'_>) -> Result<LoopRunResult, LoopError> {
    let workspace = ctx.workspace;
    let ws = Workspace::open(workspace)?;
    let task = load_task(&ws, &opts.task_file)?;
    let artifacts = Artifacts::open(workspace)?;
    let new = NewLoop {
        kind: crate::store::RunKind::Loop,
        runner: "-".into(),
        targets: vec![opts.task_file.clone()],
        format: opts.agent.default_format.clone(),
        model: ctx.model.label(),
        max_iters: opts.loops as i64,
        parent: None,
    };
    // Opened before the run's row exists, and through the one writer when it lies in the
    // workspace: a `loop.log` the repository ships as a link is refused, not followed, and
    // leaves no run behind.
    let phase_log = match &opts.log_path {
        Some(p) => Some(crate::edit::writer::open_log(workspace, p, &opts.agent.protected)?.1),
        None => None,
    };
    let mut run = Run::begin(ctx, &new)?;
    let mut state = LoopState {
        opts,
        artifacts,
        task,
        rounds: Vec::new(),
        pending: Vec::new(),
        blocker: String::new(),
        summary: String::new(),
        loops_completed: 0,
        phase_log: None,
        at: (1, "execution"),
    };
    state.phase_log = phase_log;
    let stop = state.drive(&mut run).await;
    state.finish(&mut run, stop)
}

struct LoopState<'o> {
    opts: &'o LoopOptions,
    artifacts: Artifacts,
    task: Task,
    rounds: Vec<LoopSummary>,
    pending: Vec<String>,
    blocker: String,
    summary: String,
    loops_completed: u32,
    phase_log: Option<std::fs::File>,
    /// The round and phase running now.
    at: (u32, &'static str),
}

/// Which agent a phase is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Execution,
    Review,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Execution => "execution",
            Phase::Review => "review",
        }
    }
}

impl LoopState<'_> {
    async fn drive(&mut self, run: &mut Run<'_>) -> Result<StopReason, LoopError> {
        self.write_run(run, false)?;
        for round in 1..=self.opts.loops {
            if round > 1 {
                self.reload_task(run)?;
            }
            run.emit(Event::RoundStart {
                round,
                loops: self.opts.loops,
            });
            let exec = self.phase(run, round, Phase::Execution).await?;
            let summary = summarize(round, &exec);
            self.rounds.push(summary.clone());
            self.summary = exec.content.clone();
            match exec.stop_reason {
                StopReason::Cancelled | StopReason::Error | StopReason::Budget => {
                    self.loops_completed = round - 1;
                    return Ok(exec.stop_reason);
                }
                _ => {}
            }
            if summary.status == Some(ReportStatus::Complete) {
                self.pending.clear();
                self.end_round(run, round)?;
                return Ok(StopReason::Complete);
            }
            self.pending = extract_pending_items(&exec.content);
            let review = self.phase(run, round, Phase::Review).await?;
            match review.stop_reason {
                StopReason::Cancelled | StopReason::Error | StopReason::Budget => {
                    self.loops_completed = round - 1;
                    return Ok(review.stop_reason);
                }
                _ => {}
            }
            let (verdict, submitted) = self.record_review(run, round, &review)?;
            self.end_round(run, round)?;
            let blocked = !verdict.blocker.trim().is_empty();
            if blocked && self.opts.stop_on_blocker {
                return Ok(StopReason::Blocked);
            }
            // Clean only on a submitted review with nothing pending and no blocker: a reviewer
            // that never called submit_review (a model that only chats) proves nothing, and a
            // blocker keeps the run going (seed 003), shown to the next round.
            if submitted
                && !blocked
                && verdict.pending.is_empty()
                && review.stop_reason == StopReason::Complete
            {
                return Ok(StopReason::ReviewClean);
            }
        }
        Ok(StopReason::MaxLoops)
    }

    fn end_round(&mut self, run: &mut Run<'_>, round: u32) -> Result<(), LoopError> {
        self.loops_completed = round;
        let _ = run.store.set_iters(run.id, round as i64);
        run.emit(Event::RoundEnd {
            round,
            pending: self.pending.clone(),
            blocker: self.blocker.clone(),
        });
        self.write_run(run, false)
    }

    /// Re-read the task file when it changed since the last round. Only its text is taken:
    /// the `bash` list stays the one the run started with (the user's consent), since the
    /// execution agent can write the task file itself.
    fn reload_task(&mut self, run: &mut Run<'_>) -> Result<(), LoopError> {
        let ws = Workspace::open(run.workspace)?;
        let mut task = load_task(&ws, &self.opts.task_file)?;
        if task.fingerprint != self.task.fingerprint {
            let added: Vec<&String> = task
                .bash
                .iter()
                .filter(|b| !self.task.bash.contains(b))
                .collect();
            let mut message = format!("the task file {} changed; reloaded", self.opts.task_file);
            if !added.is_empty() {
                message.push_str(&format!(
                    " (programs listed since the run started are not allowed: {})",
                    added
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            run.emit(Event::AgentNotice { message });
            task.bash = self.task.bash.clone();
            self.task = task;
        }
        Ok(())
    }

    /// One phase: a fresh agent with the phase's tools, prompt and budget, whose events are
    /// forwarded live and kept for the phase's TOML log.
    async fn phase(
        &mut self,
        run: &mut Run<'_>,
        round: u32,
        phase: Phase,
    ) -> Result<AgentResult, LoopError> {
        self.at = (round, phase.name());
        self.write_state(run, round, phase.name())?;
        run.emit(Event::PhaseStart {
            round,
            phase: phase.name().into(),
        });
        let (task, opts) = match phase {
            Phase::Execution => (
                execution_task(
                    round,
                    self.opts.loops,
                    &self.opts.task_file,
                    &self.task,
                    &self.rounds,
                    &self.pending,
                    &self.blocker,
                ),
                execution_options(
                    &self.opts.agent,
                    self.opts.iterations,
                    &self.opts.granted_commands,
                    &self.task,
                    run.id,
                ),
            ),
            Phase::Review => {
                let last = self.rounds.last().cloned().unwrap_or_default();
                (
                    review_task(round, &last, &self.summary, &self.task),
                    review_options(&self.opts.agent, self.opts.iterations, run.id),
                )
            }
        };
        let mut events: Vec<Value> = Vec::new();
        let result = {
            let phase_log = &mut self.phase_log;
            let parts = run.split();
            let outer = parts.events;
            let mut seq = 0u64;
            let mut sink = |e: &Event| {
                seq += 1;
                if !matches!(e, Event::TextDelta { .. }) {
                    let v = e.to_json(seq, crate::clock::now_ms());
                    if let Some(f) = phase_log {
                        use std::io::Write;
                        let _ = writeln!(f, "{v}");
                    }
                    events.push(v);
                }
                outer(e);
            };
            let ctx = RunCtx {
                events: &mut sink,
                ..parts
            };
            run_agent(&task, Vec::new(), &opts, ctx).await
        };
        self.artifacts
            .write_events(&format!("{}.toml", phase.name()), &events)?;
        Ok(result?)
    }

    /// Read the reviewer's `submit_review` and write review_output.toml; says whether a
    /// review was submitted at all.
    fn record_review(
        &mut self,
        run: &mut Run<'_>,
        round: u32,
        review: &AgentResult,
    ) -> Result<(ReviewOutput, bool), LoopError> {
        let submitted = submitted_review(review);
        let is_submitted = submitted.is_some();
        let verdict = match submitted {
            Some(v) => ReviewOutput {
                round,
                summary: v.summary,
                blocker: v.blocker,
                pending: v
                    .pending
                    .into_iter()
                    .map(|item| PendingItem { item })
                    .collect(),
            },
            // No review submitted (the budget ran out, or the model only chatted): what the
            // execution left stays pending, and the round is not clean.
            None => ReviewOutput {
                round,
                summary: format!(
                    "the reviewer did not submit a review (it stopped: {}); nothing was verified",
                    review.stop_reason
                ),
                blocker: String::new(),
                pending: self
                    .pending
                    .iter()
                    .map(|p| PendingItem { item: p.clone() })
                    .collect(),
            },
        };
        self.artifacts.write_toml("review_output.toml", &verdict)?;
        self.pending = verdict.pending.iter().map(|p| p.item.clone()).collect();
        self.blocker = verdict.blocker.clone();
        if !verdict.summary.is_empty() {
            self.summary = verdict.summary.clone();
        }
        run.emit(Event::ReviewSubmitted {
            round,
            summary: verdict.summary.clone(),
            blocker: verdict.blocker.clone(),
            pending: self.pending.clone(),
        });
        Ok((verdict, is_submitted))
    }

    /// state.toml: where the run is (`phase`: `execution`, `review`, `done`, `cancelled`;
    /// a cancelled run also says which phase it stopped in).
    fn write_state(&self, run: &Run<'_>, round: u32, phase: &str) -> Result<(), LoopError> {
        self.artifacts.write_toml(
            "state.toml",
            &State {
                run_id: run.id,
                loop_index: round,
                phase,
                stopped_in: (phase == "cancelled").then_some(self.at.1),
                workspace: run.workspace.display().to_string(),
                task_file: &self.opts.task_file,
                updated_at: crate::clock::now_ms(),
            },
        )?;
        Ok(())
    }

    /// run.toml: the model, the limits, the rounds finished and the tokens so far.
    fn write_run(&self, run: &Run<'_>, finished: bool) -> Result<(), LoopError> {
        self.artifacts.write_toml(
            "run.toml",
            &RunToml {
                run_id: run.id,
                model: run.model.label(),
                task_file: &self.opts.task_file,
                loops_completed: self.loops_completed,
                finished,
                limits: Limits {
                    loops: self.opts.loops,
                    iterations: self.opts.iterations,
                    review_iterations: review_budget(self.opts.iterations),
                },
                tokens: run.usage().into(),
            },
        )?;
        Ok(())
    }

    fn finish(
        mut self,
        run: &mut Run<'_>,
        stop: Result<StopReason, LoopError>,
    ) -> Result<LoopRunResult, LoopError> {
        // The parent row carries the rounds' tokens (their calls are recorded under them).
        let _ = run.store.set_loop_tokens(run.id, &run.usage());
        let reason = match stop {
            Ok(r) => r,
            Err(e) => {
                // An error still closes the row and emits the result, so no run is left
                // `running` and `--json` always ends with `loop.result`.
                let message = e.to_string();
                run.emit(Event::Error {
                    message: message.clone(),
                });
                let _ = run.store.set_iters(run.id, self.loops_completed as i64);
                let _ = run.finish(StopReason::Error, &message, Some(&message));
                let _ = self.write_run(run, true);
                self.summary = message;
                run.emit(Event::LoopRunResult(Box::new(
                    self.result(run, StopReason::Error),
                )));
                return Err(e);
            }
        };
        if reason == StopReason::Blocked && !self.blocker.is_empty() {
            self.summary = format!("blocked: {}", self.blocker);
        }
        let _ = run.store.set_iters(run.id, self.loops_completed as i64);
        run.finish(
            reason,
            &self.summary,
            (!reason.is_success()).then_some(self.summary.as_str()),
        )?;
        let (round, phase) = if reason == StopReason::Cancelled {
            (self.at.0, "cancelled")
        } else {
            (self.loops_completed, "done")
        };
        self.write_state(run, round, phase)?;
        self.write_run(run, true)?;
        let result = self.result(run, reason);
        run.emit(Event::LoopRunResult(Box::new(result.clone())));
        Ok(result)
    }

    fn result(&self, run: &Run<'_>, reason: StopReason) -> LoopRunResult {
        LoopRunResult {
            run_id: run.id,
            stop_reason: reason,
            success: reason.is_success(),
            loops_completed: self.loops_completed,
            summary: self.summary.clone(),
            pending: self.pending.clone(),
            blocker: self.blocker.clone(),
            usage: run.usage(),
            rounds: self.rounds.clone(),
        }
    }
}

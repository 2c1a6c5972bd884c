//! The fix loop (seeds 000 and 001): run the runner; on failure build a prompt (project prompt,
//! last attempt, diagnostics first, output capped keeping the tail, the targets' text, the edit
//! format's instructions), ask the model, apply its edits atomically, record the iteration, and
//! repeat until success or a stop reason: `success`, `max_iters`, `stagnation`,
//! `no_edits_applied`, `blocked`, `cancelled`, `error`.

use super::events::Event;
use super::history;
use super::model::ModelSource;
use super::outcome::{FixOutcome, LoopStatus, StopReason};
use super::run::{AskError, Run, RunDeps, cancelled};
use crate::edit::{self, ApplyOptions, Workspace};
use crate::llm::{ChatRequest, Message, ToolDef};
use crate::plugin::{Plugin, PluginCallError, PluginError, RunResult, Severity};
use crate::store::{IterationRow, NewLoop, Store};
use serde_json::json;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

/// Consecutive identical failures (after an applied edit) that count as stagnation.
pub const STAGNATION_WINDOW: usize = 3;
/// Consecutive iterations without an applied edit that stop the loop.
pub const NO_EDITS_WINDOW: u32 = 3;
/// Diagnostics a person is shown of a failed check (all of them go to the model).
const FIRST_DIAGNOSTICS: usize = 3;
/// Rounds of history tool calls allowed within one iteration.
const MAX_TOOL_ROUNDS: usize = 3;

/// What to fix and how.
#[derive(Debug, Clone)]
pub struct FixOptions {
    /// Workspace-relative target files.
    pub targets: Vec<String>,
    /// Iteration ceiling (default 5).
    pub max_iters: u32,
    /// Extra system prompt text.
    pub system: Option<String>,
    /// Language hint.
    pub lang: Option<String>,
    /// The project's prompt (task description).
    pub prompt: Option<String>,
    /// Runner settings (`cmd`, `mode`, ...).
    pub runner_settings: BTreeMap<String, String>,
    /// Characters of runner output shown to the model (the tail is kept).
    pub output_budget: usize,
    /// The loop that started this one (an agent), exempt from the overlap guard.
    pub parent: Option<i64>,
    /// Files longer than this many lines are shown as windows around the diagnostics.
    pub window_threshold: usize,
    /// The format rewrites whole files (then files are always shown whole).
    pub whole_file_format: bool,
    /// Paths no edit may touch (`[sandbox] protect` on top of kiln's own files).
    pub protected: crate::path::Protected,
}

impl Default for FixOptions {
    fn default() -> Self {
        FixOptions {
            targets: Vec::new(),
            max_iters: 5,
            system: None,
            lang: None,
            prompt: None,
            runner_settings: BTreeMap::new(),
            output_budget: 8 * 1024,
            parent: None,
            window_threshold: 600,
            whole_file_format: false,
            protected: crate::path::Protected::default(),
        }
    }
}

/// Errors that prevent a loop from starting (bad input, a running loop, the store).
#[derive(Debug, thiserror::Error)]
pub enum FixError {
    /// Invalid options.
    #[error("{0}")]
    Usage(String),
    /// Store failure or overlap.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    /// A plugin failed while describing itself.
    #[error(transparent)]
    Plugin(#[from] crate::plugin::PluginError),
    /// The workspace could not be opened.
    #[error(transparent)]
    Edit(#[from] crate::edit::EditError),
}

/// The `compile_loop` tool definition (seed 000 schema) an agent can be given.
pub fn compile_loop_tool() -> ToolDef {
    ToolDef {
        name: "compile_loop".into(),
        description: "Run an autonomous compile-and-fix loop on target files until the build/check passes or a stop reason is reached. Give either target_file or target_files, not both.".into(),
        parameters: json!({
            "type": "object",
            "properties": {
                "spec": { "type": "string", "description": "What the code should do / what to fix" },
                "target_file": { "type": "string", "description": "One file to fix (workspace-relative)" },
                "target_files": { "type": "array", "items": { "type": "string" }, "minItems": 1, "description": "Several files to fix (multi-file formats only)" },
                "lang": { "type": "string", "description": "Language hint" }
            },
            "required": ["spec"],
            "additionalProperties": false
        }),
    }
}

/// The target files of a `compile_loop` call (`target_file` or `target_files`, not both).
pub fn compile_loop_targets(args: &serde_json::Value) -> Result<Vec<String>, String> {
    match (args.get("target_file"), args.get("target_files")) {
        (Some(_), Some(_)) => Err("give target_file or target_files, not both".into()),
        (Some(f), None) => Ok(f.as_str().map(|s| vec![s.to_string()]).unwrap_or_default()),
        (None, Some(fs)) => Ok(fs
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|x| x.as_str().map(String::from))
            .collect()),
        (None, None) => Err("target_file or target_files is required".into()),
    }
}

/// Stop-tool and history tools offered to the model inside the loop.
fn loop_tools() -> Vec<ToolDef> {
    let mut tools = vec![ToolDef {
        name: "loop_stop".into(),
        description: "Stop the fix loop when the task cannot be completed by editing the given files (missing information, the failure is elsewhere). Give the reason.".into(),
        parameters: json!({ "type": "object", "properties": { "reason": { "type": "string" } }, "required": ["reason"] }),
    }];
    tools.extend(history::tool_defs());
    tools
}

/// Normalised fingerprint of a failure: digits of timings and addresses folded, whitespace
/// collapsed, progress lines dropped.
pub fn fingerprint(r: &RunResult) -> String {
    if r.ok {
        return "ok".into();
    }
    let mut norm = String::new();
    for line in r.stderr.lines().chain(r.stdout.lines()) {
        let l = line.trim();
        if l.is_empty()
            || l.starts_with("Compiling ")
            || l.starts_with("Finished ")
            || l.starts_with("Running ")
            || l.starts_with("Checking ")
        {
            continue;
        }
        let mut prev_digit = false;
        for c in l.chars() {
            if c.is_ascii_digit() {
                if !prev_digit {
                    norm.push('#');
                }
                prev_digit = true;
            } else {
                prev_digit = false;
                norm.push(c);
            }
        }
        norm.push('\n');
    }
    // Keep line numbers of diagnostics, which do distinguish failures.
    for d in &r.diagnostics {
        norm.push_str(&format!("{}:{}:{}\n", d.file, d.line, d.message));
    }
    hex::encode(&Sha256::digest(norm.as_bytes())[..8])
}

/// What the model was told about the previous iteration.
struct Attempt {
    summary: String,
    feedback: Option<String>,
}

/// Everything the loop needs besides its options.
pub struct FixDeps<'a> {
    /// Workspace root.
    pub workspace: &'a Path,
    /// Runner plugin.
    pub runner: &'a Plugin,
    /// Edit-format plugin.
    pub format: &'a Plugin,
    /// The model.
    pub model: &'a mut ModelSource,
    /// The store.
    pub store: &'a mut Store,
    /// Set to true to cancel (Ctrl-C).
    pub cancel: tokio::sync::watch::Receiver<bool>,
    /// Event sink.
    pub on_event: &'a mut (dyn FnMut(&Event) + Send),
}

/// How an iteration ended the loop: the reason and a line for a person.
type Stop = (StopReason, String);

/// A check's result and how long it took (ms).
type Checked = (RunResult, u64);

/// The model's answer to one iteration's prompt.
struct Answer {
    text: String,
    /// Fingerprints of the target text the prompt showed (the stale check's reference).
    shown: BTreeMap<String, String>,
    llm_ms: i64,
    usage: crate::llm::Usage,
}

/// The fix loop's own state; the run core does the rest.
struct Fix<'o> {
    opts: &'o FixOptions,
    ws: Workspace,
    runner: &'o Plugin,
    format: &'o Plugin,
    instructions: String,
    modified: Vec<String>,
    fingerprints: Vec<String>,
    applied_any: bool,
    no_edit_streak: u32,
    last: Option<Attempt>,
    iteration: u32,
    last_error: Option<String>,
    /// The first check, run before the loop existed (see [`first_check`]).
    first: Option<FirstCheck>,
}

/// The runner's answer to the first check, and how long it took (ms).
type FirstCheck = (Result<Result<RunResult, PluginCallError>, PluginError>, u64);

/// Run the first check before the loop exists, so a runner that refuses its settings as
/// invalid (`--cmd` missing, `--mode tset`) is a usage error and leaves no loop row in the
/// history. `None` when Ctrl-C came first (the loop then starts and stops as cancelled).
async fn first_check(
    opts: &FixOptions,
    runner: &Plugin,
    cancel: &tokio::sync::watch::Receiver<bool>,
) -> Result<Option<FirstCheck>, FixError> {
    let start = Instant::now();
    let mut cancel = cancel.clone();
    let r = tokio::select! {
        r = runner.runner_run(&opts.targets, &opts.runner_settings) => r,
        _ = cancelled(&mut cancel) => return Ok(None),
    };
    if let Ok(Err(PluginCallError::InvalidInput(m))) = &r {
        return Err(FixError::Usage(format!(
            "runner `{}`: {}",
            runner.name,
            crate::terminal::printable(m)
        )));
    }
    Ok(Some((r, start.elapsed().as_millis() as u64)))
}

/// Run the fix loop to its end. Errors are returned only when the loop cannot start; every
/// end after that (including failures of the model or a plugin) is an outcome with a reason.
pub async fn run_fix(opts: &FixOptions, deps: FixDeps<'_>) -> Result<FixOutcome, FixError> {
    let FixDeps {
        workspace,
        runner,
        format,
        model,
        store,
        cancel,
        on_event,
    } = deps;
    if opts.targets.is_empty() {
        return Err(FixError::Usage(
            "no target files: give --file F or --files F...".into(),
        ));
    }
    let ws = Workspace::open(workspace)?;
    ws.target_arguments(&opts.targets)
        .map_err(FixError::Usage)?;
    let info = format.format_describe().await?;
    if opts.targets.len() > 1 && !info.multi_file {
        return Err(FixError::Usage(format!(
            "several targets need a multi-file edit format, but `{}` edits one file at a time; use --format search-replace (or udiff, whole, apply-patch)",
            format.name
        )));
    }
    let log = crate::store::open_log(workspace, "fix-loop.log")?;
    let instructions = format.format_instructions(opts.targets.len() > 1).await?;
    refuse_non_text(&ws, &opts.targets)?;
    // A format that returns whole files must fit each target in its limits; the others edit
    // a big file through a window around each change (`edit::window`).
    if opts.whole_file_format || format.name == "whole" {
        refuse_over_limits(&ws, &opts.targets, format)?;
    }
    let first = first_check(opts, runner, &cancel).await?;
    let new = NewLoop {
        kind: crate::store::RunKind::Fix,
        runner: runner.name.clone(),
        targets: opts.targets.clone(),
        format: format.name.clone(),
        model: model.label(),
        max_iters: opts.max_iters as i64,
        parent: opts.parent,
    };
    let deps = RunDeps {
        workspace,
        model,
        store,
        cancel,
        on_event,
    };
    let mut run = Run::begin(deps, &new)?;
    run.log_answers(log);
    run.emit(Event::LoopStarted {
        loop_id: run.id,
        runner: runner.name.clone(),
        format: format.name.clone(),
        model: run.model.label(),
        targets: opts.targets.clone(),
        max_iters: opts.max_iters,
    });
    let mut fix = Fix {
        opts,
        ws,
        runner,
        format,
        instructions,
        modified: Vec::new(),
        fingerprints: Vec::new(),
        applied_any: false,
        no_edit_streak: 0,
        last: None,
        iteration: 0,
        last_error: None,
        first,
    };
    // Every end, an error included, finishes the loop's row and emits its result.
    let (reason, summary) = match fix.drive(&mut run).await {
        Ok(stop) => stop,
        Err(e) => {
            fix.last_error = Some(e.to_string());
            (StopReason::Error, e.to_string())
        }
    };
    fix.finish(&mut run, reason, &summary)
}

/// Refuse, before the model is asked, a target that exists but is not UTF-8 text, naming the
/// file and what it most likely is.
fn refuse_non_text(ws: &Workspace, targets: &[String]) -> Result<(), FixError> {
    for t in targets {
        if let Err(e @ edit::EditError::NotText { .. }) = ws.read(t) {
            return Err(FixError::Usage(e.to_string()));
        }
    }
    Ok(())
}

/// Refuse, before the model is asked, a target a whole-file format could not return: its
/// new text must fit the format's output cap, and its working copies its memory limit (about
/// four times the file: the text in, its lines, the text out). The message names the setting.
fn refuse_over_limits(ws: &Workspace, targets: &[String], format: &Plugin) -> Result<(), FixError> {
    let limits = format.effective.limits;
    let name = &format.name;
    for t in targets {
        let Some(size) = ws.size(t) else {
            continue;
        };
        let (field, needed, have) = if size > u64::from(limits.output_bytes) {
            (
                "output_bytes",
                size.next_power_of_two(),
                u64::from(limits.output_bytes),
            )
        } else if size.saturating_mul(4) > u64::from(limits.memory_mib) << 20 {
            (
                "memory_mib",
                (size.saturating_mul(4) >> 20).next_power_of_two() * 2,
                u64::from(limits.memory_mib),
            )
        } else {
            continue;
        };
        return Err(FixError::Usage(format!(
            "{t} is {size} bytes, too big for the edit format `{name}` ({field} = {have}); nothing was sent to the model. Raise it in your user config or a trusted kiln.toml:\n  [plugins.{name}]\n  {field} = {needed}"
        )));
    }
    Ok(())
}

/// A unified diff of one file (3 lines of context).
fn unified_diff(path: &str, old: &str, new: &str) -> String {
    similar::TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{path}"), &format!("b/{path}"))
        .to_string()
}

impl Fix<'_> {
    /// Check, then ask–apply–check until a stop.
    async fn drive(&mut self, run: &mut Run<'_>) -> Result<Stop, FixError> {
        let mut result = match self.check(run).await {
            Ok(r) => r,
            Err(stop) => return Ok(stop),
        };
        self.record_check(run, &result, true);
        loop {
            if result.0.ok {
                let it = self.iteration;
                return Ok((
                    StopReason::Success,
                    if it == 0 {
                        "the check already passes".into()
                    } else {
                        format!("fixed in {it} iteration(s)")
                    },
                ));
            }
            self.last_error = Some(failure_text(&result.0));
            if self.iteration >= self.opts.max_iters {
                return Ok((
                    StopReason::MaxIters,
                    format!("still failing after {} iteration(s)", self.iteration),
                ));
            }
            self.iteration += 1;
            let answer = match self.ask(run, &result.0).await? {
                Ok(a) => a,
                Err(stop) => {
                    // The iteration ended without an answer to apply: it still gets its row.
                    self.record_iteration(run, &result, None, 0, &[]);
                    return Ok(stop);
                }
            };
            match self.iterate(run, answer, result).await? {
                Ok(next) => result = next,
                Err(stop) => return Ok(stop),
            }
        }
    }

    /// Apply one answer, re-check when something changed, record the iteration, and say
    /// whether the loop goes on (with the new result).
    async fn iterate(
        &mut self,
        run: &mut Run<'_>,
        answer: Answer,
        mut result: Checked,
    ) -> Result<Result<Checked, Stop>, FixError> {
        let report = match self.apply(run, &answer).await {
            Ok(r) => r,
            Err(e) => {
                self.last_error = Some(e.to_string());
                return Ok(Err((
                    StopReason::Error,
                    format!("applying the edits failed: {e}"),
                )));
            }
        };
        if let Some(p) = report.edits.iter().find(|e| e.failure == Some("policy")) {
            let msg = p.error.clone().unwrap_or_default();
            self.record_iteration(run, &result, Some(&answer), 0, &report.edits);
            return Ok(Err((
                StopReason::Blocked,
                format!("an edit was refused by policy: {msg}"),
            )));
        }
        let applied = if report.ok { report.applied_count() } else { 0 };
        self.remember(&report, &answer.text, applied);
        if applied > 0 {
            result = match self.check(run).await {
                Ok(r) => r,
                Err(stop) => return Ok(Err(stop)),
            };
        }
        self.record_check(run, &result, applied > 0);
        self.record_iteration(run, &result, Some(&answer), applied, &report.edits);
        if result.0.ok {
            return Ok(Ok(result));
        }
        if applied > 0 {
            self.fingerprints.push(fingerprint(&result.0));
        }
        if self.no_edit_streak >= NO_EDITS_WINDOW {
            return Ok(Err((
                StopReason::NoEditsApplied,
                format!("{NO_EDITS_WINDOW} consecutive iterations applied no edit"),
            )));
        }
        if self.applied_any && stagnated(&self.fingerprints) {
            return Ok(Err((
                StopReason::Stagnation,
                "the same failure keeps coming back".into(),
            )));
        }
        Ok(Ok(result))
    }

    /// Run the runner under cancellation.
    async fn check(&mut self, run: &mut Run<'_>) -> Result<Checked, Stop> {
        let (r, ms) = match self.first.take() {
            Some(first) => first,
            None => {
                let start = Instant::now();
                let mut cancel = run.cancel_signal();
                let fut = self
                    .runner
                    .runner_run(&self.opts.targets, &self.opts.runner_settings);
                tokio::select! {
                    r = fut => (r, start.elapsed().as_millis() as u64),
                    _ = cancelled(&mut cancel) => {
                        return Err((StopReason::Cancelled, "cancelled by the user".into()))
                    }
                }
            }
        };
        let e = match r {
            Ok(Ok(r)) => return Ok((r, ms)),
            Ok(Err(e)) => format!(
                "runner `{}`: {}",
                self.runner.name,
                crate::plugin::describe_call_error(&e)
            ),
            Err(e) => e.to_string(),
        };
        self.last_error = Some(e.clone());
        Err((StopReason::Error, e))
    }

    /// Store the iteration's row (with its edits) and emit `loop.iteration`; a store that
    /// cannot take the row only loses it.
    fn record_iteration(
        &self,
        run: &mut Run<'_>,
        result: &Checked,
        answer: Option<&Answer>,
        applied: usize,
        edits: &[edit::EditResult],
    ) {
        let row = iteration_row(self.iteration, result, answer, applied);
        let _ = run.store.record_iteration(run.id, &row, edits);
        run.emit(Event::LoopIteration {
            loop_id: run.id,
            iteration: self.iteration,
            ok: result.0.ok,
            edits_applied: applied,
        });
    }

    /// Emit `runner.finished` (and store iteration 0, which has no LLM call).
    fn record_check(&self, run: &mut Run<'_>, result: &Checked, fresh: bool) {
        let r = &result.0;
        if self.iteration == 0 {
            let _ = run
                .store
                .record_iteration(run.id, &iteration_row(0, result, None, 0), &[]);
        }
        run.emit(Event::RunnerFinished {
            iteration: self.iteration,
            ok: r.ok,
            exit_code: r.exit_code,
            errors: r
                .diagnostics
                .iter()
                .filter(|d| matches!(d.severity, Severity::Error))
                .count(),
            duration_ms: r.duration_ms,
            fresh,
            first: r
                .diagnostics
                .iter()
                .take(FIRST_DIAGNOSTICS)
                .map(crate::plugin::diagnostic_line)
                .collect(),
        });
    }

    /// Build the prompt and ask the model, answering its history-tool calls (a few rounds);
    /// `loop_stop` ends the loop as blocked.
    async fn ask(
        &mut self,
        run: &mut Run<'_>,
        failure: &RunResult,
    ) -> Result<Result<Answer, Stop>, FixError> {
        let iteration = self.iteration;
        // `shown`: fingerprints of exactly the text the prompt shows; an edit against a file
        // changed since (by the user, while the model was thinking) is refused as stale.
        let insist = self.no_edit_streak + 1 >= NO_EDITS_WINDOW;
        let (prompt, shown) = build_prompt(
            self.opts,
            &self.ws,
            failure,
            self.last.as_ref(),
            insist,
            &self.opts.targets,
        )?;
        let mut req = ChatRequest {
            system: Some(build_system(self.opts, &self.instructions)),
            messages: vec![Message::User {
                text: prompt.clone(),
            }],
            tools: loop_tools(),
            max_tokens: None,
        };
        let start = Instant::now();
        let mut usage = crate::llm::Usage::default();
        for round in 0.. {
            run.emit(Event::LlmRequest {
                iteration,
                prompt_chars: prompt.len(),
            });
            let resp = match run.ask(iteration, &req, false).await {
                Ok(r) => r,
                Err(AskError::Cancelled) => {
                    return Ok(Err((StopReason::Cancelled, "cancelled by the user".into())));
                }
                Err(AskError::Model(e)) => {
                    self.last_error = Some(e.to_string());
                    return Ok(Err((
                        StopReason::Error,
                        format!("the model call failed: {e}"),
                    )));
                }
                Err(AskError::Budget(e)) => {
                    return Ok(Err((StopReason::Budget, e.to_string())));
                }
            };
            usage += resp.usage;
            run.emit(Event::LlmResponse {
                iteration,
                latency_ms: resp.latency.as_millis() as u64,
                input_tokens: resp.usage.input + resp.usage.cached_input,
                output_tokens: resp.usage.output,
                tool_calls: resp.tool_calls.iter().map(|c| c.name.clone()).collect(),
            });
            if let Some(stop) = resp.tool_calls.iter().find(|c| c.name == "loop_stop") {
                let reason = serde_json::from_str::<serde_json::Value>(&stop.arguments)
                    .ok()
                    .and_then(|v| v["reason"].as_str().map(String::from))
                    .unwrap_or_else(|| "no reason given".into());
                return Ok(Err((
                    StopReason::Blocked,
                    format!("the model stopped the loop: {reason}"),
                )));
            }
            let history_calls: Vec<_> = resp
                .tool_calls
                .iter()
                .filter(|c| c.name == "get_loops" || c.name == "get_loop_detail")
                .collect();
            if history_calls.is_empty() || !resp.text.trim().is_empty() || round >= MAX_TOOL_ROUNDS
            {
                return Ok(Ok(Answer {
                    text: resp.text,
                    shown,
                    llm_ms: start.elapsed().as_millis() as i64,
                    usage,
                }));
            }
            let mut results = Vec::new();
            for call in history_calls {
                let (content, is_error) =
                    history::answer(run.store, run.id, &call.name, &call.arguments);
                results.push(Message::ToolResult {
                    id: call.id.clone(),
                    content,
                    is_error,
                });
            }
            req.messages.push(Message::Assistant {
                text: resp.text.clone(),
                tool_calls: resp.tool_calls.clone(),
            });
            req.messages.extend(results);
        }
        unreachable!("the rounds end by returning")
    }

    /// Apply the answer's edits (stale-checked against what the prompt showed) and emit one
    /// event per edit or parse error.
    async fn apply(
        &mut self,
        run: &mut Run<'_>,
        answer: &Answer,
    ) -> Result<edit::EditReport, edit::EditError> {
        let iteration = self.iteration;
        // The targets as they were, for the diff a person is shown of what changed.
        let before: BTreeMap<&str, Option<String>> = self
            .opts
            .targets
            .iter()
            .map(|t| (t.as_str(), self.ws.read(t).ok().flatten()))
            .collect();
        let options = ApplyOptions {
            dry_run: false,
            shown: answer.shown.clone(),
            protected: self.opts.protected.clone(),
        };
        let report = edit::apply_response(
            self.format,
            &self.ws,
            &answer.text,
            &self.opts.targets,
            &options,
        )
        .await?;
        for p in &report.parse_errors {
            let at = if p.line > 0 {
                format!("line {}: ", p.line)
            } else {
                String::new()
            };
            run.emit(Event::EditFailed {
                iteration,
                path: String::new(),
                failure: "parse".into(),
                error: format!("{at}{}", p.message),
            });
        }
        for e in &report.edits {
            match (e.status, &e.error) {
                ("applied" | "already_applied", _) => run.emit(Event::EditApplied {
                    iteration,
                    path: e.path.clone(),
                    status: e.status.into(),
                    tier: e.tier.clone(),
                }),
                (_, Some(err)) => run.emit(Event::EditFailed {
                    iteration,
                    path: e.path.clone(),
                    failure: e.failure.unwrap_or("not_applied").into(),
                    error: err.clone(),
                }),
                _ => {}
            }
        }
        for path in report.written.iter().chain(&report.deleted) {
            let old = before
                .get(path.as_str())
                .cloned()
                .flatten()
                .unwrap_or_default();
            let new = self.ws.read(path).ok().flatten().unwrap_or_default();
            if old != new {
                run.emit(Event::EditDiff {
                    iteration,
                    path: path.clone(),
                    diff: unified_diff(path, &old, &new),
                });
            }
        }
        Ok(report)
    }

    /// Keep what the next prompt says about this attempt, and the streaks.
    fn remember(&mut self, report: &edit::EditReport, answer: &str, applied: usize) {
        for w in report.written.iter().chain(report.deleted.iter()) {
            if !self.modified.contains(w) {
                self.modified.push(w.clone());
            }
        }
        let summary_line = answer
            .lines()
            .find(|l| !l.trim().is_empty() && !l.starts_with("<<<") && !l.starts_with("```"))
            .unwrap_or("")
            .chars()
            .take(200)
            .collect::<String>();
        let iteration = self.iteration;
        self.last = Some(Attempt {
            summary: if applied > 0 {
                format!(
                    "Iteration {iteration}: applied {applied} edit(s) to {}. {summary_line}",
                    report.written.join(", ")
                )
            } else {
                format!("Iteration {iteration}: no edit was applied.")
            },
            feedback: report.feedback(),
        });
        if applied > 0 {
            self.applied_any = true;
            self.no_edit_streak = 0;
        } else {
            self.no_edit_streak += 1;
        }
    }

    /// Close the run: store, events, and the compile_loop result shape.
    fn finish(
        &mut self,
        run: &mut Run<'_>,
        reason: StopReason,
        summary: &str,
    ) -> Result<FixOutcome, FixError> {
        let status = reason.status();
        let last_error = if status == LoopStatus::Success {
            None
        } else {
            self.last_error.take()
        };
        run.finish(reason, summary, last_error.as_deref())?;
        if reason == StopReason::Error {
            run.emit(Event::Error {
                message: summary.to_string(),
            });
        }
        let (loop_id, iters) = (run.id, self.iteration);
        run.emit(match status {
            LoopStatus::Success => Event::LoopSucceeded { loop_id, iters },
            LoopStatus::Blocked => Event::LoopBlocked {
                loop_id,
                reason: summary.to_string(),
            },
            _ => Event::LoopFailed {
                loop_id,
                reason: reason.as_str().to_string(),
                last_error: last_error.clone(),
            },
        });
        let abs = |p: &String| run.workspace.join(p).to_string_lossy().into_owned();
        let single = self.opts.targets.len() == 1;
        let ok = status == LoopStatus::Success;
        let outcome = FixOutcome {
            ok,
            iters,
            summary: summary.to_string(),
            artifact_path: single.then(|| abs(&self.opts.targets[0])),
            modified_files: (!single).then(|| self.modified.iter().map(abs).collect()),
            failure_reason: (!ok).then_some(reason),
            last_error,
            loop_id,
            status,
            stop_reason: reason,
            usage: run.usage(),
        };
        run.emit(Event::LoopResult(outcome.clone()));
        Ok(outcome)
    }
}

fn stagnated(f: &[String]) -> bool {
    let n = f.len();
    if n >= STAGNATION_WINDOW && f[n - STAGNATION_WINDOW..].iter().all(|x| *x == f[n - 1]) {
        return true;
    }
    n >= 4 && f[n - 1] == f[n - 3] && f[n - 2] == f[n - 4] && f[n - 1] != f[n - 2]
}

fn iteration_row(
    n: u32,
    result: &Checked,
    answer: Option<&Answer>,
    applied: usize,
) -> IterationRow {
    let r = &result.0;
    let usage = answer.map(|a| a.usage).unwrap_or_default();
    IterationRow {
        n: n as i64,
        exit_code: r.exit_code as i64,
        ok: r.ok,
        stdout: r.stdout.clone(),
        stderr: r.stderr.clone(),
        diagnostics: serde_json::Value::Array(
            r.diagnostics
                .iter()
                .map(crate::plugin::diagnostic_json)
                .collect(),
        ),
        fingerprint: fingerprint(r),
        llm_summary: answer.map(|a| a.text.chars().take(500).collect()),
        runner_ms: result.1 as i64,
        llm_ms: answer.map(|a| a.llm_ms).unwrap_or(0),
        tokens_input: (usage.input + usage.cached_input) as i64,
        tokens_output: usage.output as i64,
        edits_applied: applied as i64,
    }
}

fn failure_text(r: &RunResult) -> String {
    let mut s = String::new();
    for d in r
        .diagnostics
        .iter()
        .filter(|d| matches!(d.severity, Severity::Error))
        .take(5)
    {
        s.push_str(&format!(
            "{}:{}:{}: {}\n",
            d.file, d.line, d.column, d.message
        ));
    }
    if s.is_empty() {
        s = history::tail(&format!("{}{}", r.stderr, r.stdout), 2000);
    }
    s.trim_end().to_string()
}

fn build_system(opts: &FixOptions, instructions: &str) -> String {
    let lang = opts.lang.as_deref().unwrap_or("the");
    let mut s = format!(
        "You are an expert programmer fixing {lang} code so that its build or check passes.\n\
         Change only what is needed to fix the failure. Never edit files other than the ones you are given.\n\
         If the failure cannot be fixed by editing these files (missing information, the problem is elsewhere), call the `loop_stop` tool with the reason instead of guessing.\n"
    );
    if let Some(extra) = &opts.system {
        s.push('\n');
        s.push_str(extra);
        s.push('\n');
    }
    s.push_str("\n## Edit format\n");
    s.push_str(instructions);
    s
}

fn build_prompt(
    opts: &FixOptions,
    ws: &Workspace,
    r: &RunResult,
    last: Option<&Attempt>,
    insist: bool,
    targets: &[String],
) -> Result<(String, BTreeMap<String, String>), FixError> {
    let mut p = String::new();
    let mut shown = BTreeMap::new();
    if let Some(task) = &opts.prompt {
        p.push_str("## Task\n");
        p.push_str(task.trim());
        p.push_str("\n\n");
    }
    p.push_str(&format!("Files you may change: {}\n\n", targets.join(", ")));
    if let Some(a) = last {
        p.push_str("## Last attempt\n");
        p.push_str(&a.summary);
        p.push('\n');
        if let Some(fb) = &a.feedback {
            p.push_str("Your edits could not be applied:\n");
            p.push_str(fb);
            p.push('\n');
        }
        p.push('\n');
    }
    p.push_str(&format!("## Current failure (exit code {})\n", r.exit_code));
    if !r.diagnostics.is_empty() {
        p.push_str("Diagnostics:\n");
        for d in r.diagnostics.iter().take(50) {
            let code = d
                .code
                .as_deref()
                .map(|c| format!("[{c}]"))
                .unwrap_or_default();
            p.push_str(&format!(
                "- {}:{}:{}: {}{code}: {}\n",
                d.file,
                d.line,
                d.column,
                crate::plugin::severity_name(d.severity),
                d.message
            ));
        }
    }
    let output = format!("{}{}", r.stderr, r.stdout);
    if !output.trim().is_empty() {
        p.push_str("Output:\n```\n");
        p.push_str(history::tail(output.trim_end(), opts.output_budget).as_str());
        p.push_str("\n```\n");
    }
    p.push_str("\n## Current files\n");
    for t in targets {
        match ws.read(t)? {
            Some(text) => {
                shown.insert(t.clone(), edit::fingerprint(&text));
                let lines = text.lines().count();
                if lines > opts.window_threshold && !opts.whole_file_format {
                    let at: Vec<u32> = r
                        .diagnostics
                        .iter()
                        .filter(|d| d.file.trim_start_matches("./") == t)
                        .map(|d| d.line)
                        .collect();
                    p.push_str(&format!("{t} ({lines} lines; only the parts around the diagnostics are shown)\n```\n{}```\n\n", window(&text, &at, WINDOW_RADIUS)));
                } else {
                    p.push_str(&format!(
                        "{t}\n```\n{}{}```\n\n",
                        text,
                        if text.ends_with('\n') { "" } else { "\n" }
                    ));
                }
            }
            None => p.push_str(&format!("{t} does not exist yet.\n\n")),
        }
    }
    if insist {
        p.push_str(
            "IMPORTANT: your previous answers applied no edit. Reply with at least one edit block, in exactly the format described, whose search text is copied exactly from the current files above, so that it applies.\n",
        );
    }
    Ok((p, shown))
}

/// Lines shown on each side of a diagnostic when a file is windowed.
const WINDOW_RADIUS: usize = 40;

/// The parts of `text` within `radius` lines of the given 1-based lines (the head of the file
/// when there are none), with markers for what is left out. Lines are shown verbatim so that
/// SEARCH text copied from them matches.
fn window(text: &str, at: &[u32], radius: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut keep = vec![false; lines.len()];
    let centers: Vec<usize> = if at.is_empty() {
        vec![radius]
    } else {
        at.iter().map(|l| (*l as usize).saturating_sub(1)).collect()
    };
    for c in centers {
        for k in keep
            .iter_mut()
            .take((c + radius + 1).min(lines.len()))
            .skip(c.saturating_sub(radius))
        {
            *k = true;
        }
    }
    let mut out = String::new();
    let mut skipped = 0;
    for (i, line) in lines.iter().enumerate() {
        if keep[i] {
            if skipped > 0 {
                out.push_str(&format!("[... {skipped} lines not shown ...]\n"));
                skipped = 0;
            }
            out.push_str(line);
            out.push('\n');
        } else {
            skipped += 1;
        }
    }
    if skipped > 0 {
        out.push_str(&format!("[... {skipped} lines not shown ...]\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_files_are_windowed_around_diagnostics() {
        let text: String = (1..=1000).map(|i| format!("line {i}\n")).collect();
        let w = window(&text, &[500], 2);
        assert_eq!(
            w,
            "[... 497 lines not shown ...]\nline 498\nline 499\nline 500\nline 501\nline 502\n[... 498 lines not shown ...]\n"
        );
        // Without diagnostics in the file, its head is shown.
        assert!(
            window(&text, &[], 2).starts_with(
                "line 1\nline 2\nline 3\nline 4\nline 5\n[... 995 lines not shown ...]"
            )
        );
    }

    #[test]
    fn stagnation_rules() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert!(!stagnated(&s(&["a", "a"])));
        assert!(stagnated(&s(&["b", "a", "a", "a"])));
        assert!(stagnated(&s(&["a", "b", "a", "b"])));
        assert!(!stagnated(&s(&["a", "b", "c", "d"])));
    }
}

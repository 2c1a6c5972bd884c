//! The fix loop (seeds 000 and 001): run the runner; on failure build a prompt (project prompt,
//! last attempt, diagnostics first, output capped keeping the tail, the targets' text, the edit
//! format's instructions), ask the model, apply its edits atomically, record the iteration, and
//! repeat until success or a stop reason: `success`, `max_iters`, `stagnation`,
//! `no_edits_applied`, `blocked`, `cancelled`, `error`.

use super::events::Event;
use super::model::ModelSource;
use crate::edit::{self, ApplyOptions, Workspace};
use crate::llm::{ChatRequest, Message, ToolDef};
use crate::plugin::{Plugin, RunResult, Severity};
use crate::store::{IterationRow, NewLoop, Store};
use serde::Serialize;
use serde_json::json;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

/// Consecutive identical failures (after an applied edit) that count as stagnation.
pub const STAGNATION_WINDOW: usize = 3;
/// Consecutive iterations without an applied edit that stop the loop.
pub const NO_EDITS_WINDOW: u32 = 3;
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

/// The result, in the compile_loop return shape (seed 000) plus the loop's id and status.
#[derive(Debug, Clone, Serialize)]
pub struct FixOutcome {
    /// Success.
    pub ok: bool,
    /// Iterations used.
    pub iters: u32,
    /// One line for a person or an agent.
    pub summary: String,
    /// Single-file mode: absolute path of the edited file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub artifact_path: Option<String>,
    /// Multi-file mode: absolute paths of the files written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub modified_files: Option<Vec<String>>,
    /// On failure: `max_iters`, `stagnation`, `no_edits_applied`, `blocked`, `cancelled`, `error`.
    pub failure_reason: Option<String>,
    /// On failure: the last error output.
    pub last_error: Option<String>,
    /// Loop id in the store.
    pub loop_id: i64,
    /// `success`, `failed`, `blocked`.
    pub status: String,
    /// The stop reason (also `success`).
    pub stop_reason: String,
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

/// Stop-tool and history tools offered to the model inside the loop.
fn loop_tools() -> Vec<ToolDef> {
    let mut tools = vec![ToolDef {
        name: "loop_stop".into(),
        description: "Stop the fix loop when the task cannot be completed by editing the given files (missing information, the failure is elsewhere). Give the reason.".into(),
        parameters: json!({ "type": "object", "properties": { "reason": { "type": "string" } }, "required": ["reason"] }),
    }];
    tools.extend(history_tool_defs());
    tools
}

/// `get_loops` and `get_loop_detail`: earlier loops and agent runs of this project, offered to
/// the fix loop's model and to the agent; answered by [`history_tool`].
pub(crate) fn history_tool_defs() -> Vec<ToolDef> {
    vec![
        ToolDef {
            name: "get_loops".into(),
            description: "List earlier fix loops and agent runs on this project (id, kind, status, stop reason, summary).".into(),
            parameters: json!({ "type": "object", "properties": {} }),
        },
        ToolDef {
            name: "get_loop_detail".into(),
            description: "Show one earlier loop: its iterations, errors and edits.".into(),
            parameters: json!({ "type": "object", "properties": { "id": { "type": "integer" } }, "required": ["id"] }),
        },
    ]
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

fn tail(s: &str, budget: usize) -> String {
    if s.len() <= budget {
        return s.to_string();
    }
    let start = s.ceil_char_boundary(s.len() - budget);
    format!("[... {} earlier bytes omitted ...]\n{}", start, &s[start..])
}

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

/// Resolves once `rx` says the run is cancelled (Ctrl-C).
pub(crate) async fn cancelled(rx: &mut tokio::sync::watch::Receiver<bool>) {
    loop {
        if *rx.borrow() {
            return;
        }
        if rx.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
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
        mut cancel,
        on_event,
    } = deps;
    if opts.targets.is_empty() {
        return Err(FixError::Usage(
            "no target files: give --file F or --files F...".into(),
        ));
    }
    let ws = Workspace::open(workspace)?;
    crate::path::target_arguments(ws.dir(), &opts.targets).map_err(FixError::Usage)?;
    let info = format.format_describe().await?;
    if opts.targets.len() > 1 && !info.multi_file {
        return Err(FixError::Usage(format!(
            "several targets need a multi-file edit format, but `{}` edits one file at a time; use --format search-replace (or udiff, whole, apply-patch)",
            format.name
        )));
    }
    let mut log = crate::store::open_log(workspace, "fix-loop.log")?;
    let multi = opts.targets.len() > 1;
    let instructions = format.format_instructions(multi).await?;
    let loop_id = store.begin_loop(&NewLoop {
        kind: "fix".into(),
        runner: runner.name.clone(),
        targets: opts.targets.clone(),
        format: format.name.clone(),
        model: model.label(),
        max_iters: opts.max_iters as i64,
        parent: opts.parent,
    })?;
    let mut seq = 0u64;
    let mut emit = |store: &mut Store, e: Event| {
        seq += 1;
        let v = e.to_json(seq, crate::store::now_ms());
        let _ = store.record_event(loop_id, seq, e.name(), &v);
        on_event(&e);
    };
    emit(
        store,
        Event::LoopStarted {
            loop_id,
            runner: runner.name.clone(),
            format: format.name.clone(),
            model: model.label(),
            targets: opts.targets.clone(),
            max_iters: opts.max_iters,
        },
    );

    let mut modified: Vec<String> = Vec::new();
    let mut fingerprints: Vec<String> = Vec::new();
    let mut applied_any = false;
    let mut no_edit_streak = 0u32;
    let mut last: Option<Attempt> = None;
    let mut iteration = 0u32;
    let mut last_error: Option<String> = None;

    // Iteration 0: the initial check.
    let mut result = match run_runner(runner, opts, &mut cancel).await {
        Step::Done(r) => r,
        Step::Cancelled => {
            return finish(
                store,
                &mut emit,
                loop_id,
                opts,
                workspace,
                0,
                "cancelled",
                "cancelled by the user",
                None,
                &modified,
            );
        }
        Step::Failed(e) => {
            return finish(
                store,
                &mut emit,
                loop_id,
                opts,
                workspace,
                0,
                "error",
                &e,
                Some(e.clone()),
                &modified,
            );
        }
    };
    record_run(store, &mut emit, loop_id, 0, &result);

    let (reason, summary): (&str, String) = loop {
        if result.0.ok {
            break (
                "success",
                if iteration == 0 {
                    "the check already passes".into()
                } else {
                    format!("fixed in {iteration} iteration(s)")
                },
            );
        }
        last_error = Some(failure_text(&result.0));
        if iteration >= opts.max_iters {
            break (
                "max_iters",
                format!("still failing after {iteration} iteration(s)"),
            );
        }
        iteration += 1;
        // Ask the model.
        // `shown`: fingerprints of exactly the text the prompt shows; an edit against a file
        // changed since (by the user, while the model was thinking) is refused as stale.
        let (prompt, shown) = build_prompt(
            opts,
            &ws,
            &result.0,
            last.as_ref(),
            no_edit_streak + 1 >= NO_EDITS_WINDOW,
            &opts.targets,
        )?;
        let system = build_system(opts, &instructions);
        let mut messages = vec![Message::User {
            text: prompt.clone(),
        }];
        let llm_start = Instant::now();
        let mut usage = crate::llm::Usage::default();
        let mut stop_reason_tool: Option<String> = None;
        let mut answer = String::new();
        let mut rounds = 0;
        let llm_outcome: Result<(), String> = loop {
            let req = ChatRequest {
                system: Some(system.clone()),
                messages: messages.clone(),
                tools: loop_tools(),
                max_tokens: None,
            };
            emit(
                store,
                Event::LlmRequest {
                    iteration,
                    prompt_chars: prompt.len(),
                },
            );
            let mut retries: Vec<Event> = Vec::new();
            let mut sink = |d: crate::llm::Delta| retries.extend(Event::from_retry(&d));
            let resp = tokio::select! {
                r = model.complete_streaming(&req, &mut sink) => r,
                _ = cancelled(&mut cancel) => break Err("cancelled".into()),
            };
            for e in retries {
                emit(store, e);
            }
            let resp = match resp {
                Ok(r) => r,
                Err(e) => {
                    let _ = store.record_llm_call(
                        loop_id,
                        iteration as i64,
                        &model.label(),
                        Err(&e.to_string()),
                    );
                    break Err(e.to_string());
                }
            };
            usage += resp.usage;
            let _ = store.record_llm_call(loop_id, iteration as i64, &model.label(), Ok(&resp));
            append_log(&mut log, loop_id, iteration, &resp.text);
            emit(
                store,
                Event::LlmResponse {
                    iteration,
                    latency_ms: resp.latency.as_millis() as u64,
                    input_tokens: resp.usage.input + resp.usage.cached_input,
                    output_tokens: resp.usage.output,
                    tool_calls: resp.tool_calls.iter().map(|c| c.name.clone()).collect(),
                },
            );
            if let Some(stop) = resp.tool_calls.iter().find(|c| c.name == "loop_stop") {
                let reason = serde_json::from_str::<serde_json::Value>(&stop.arguments)
                    .ok()
                    .and_then(|v| v["reason"].as_str().map(String::from))
                    .unwrap_or_else(|| "no reason given".into());
                stop_reason_tool = Some(reason);
                break Ok(());
            }
            let history_calls: Vec<_> = resp
                .tool_calls
                .iter()
                .filter(|c| c.name == "get_loops" || c.name == "get_loop_detail")
                .cloned()
                .collect();
            if !history_calls.is_empty() && resp.text.trim().is_empty() && rounds < MAX_TOOL_ROUNDS
            {
                rounds += 1;
                messages.push(Message::Assistant {
                    text: resp.text.clone(),
                    tool_calls: resp.tool_calls.clone(),
                });
                for call in &history_calls {
                    let (content, is_error) =
                        history_tool(store, loop_id, &call.name, &call.arguments);
                    messages.push(Message::ToolResult {
                        id: call.id.clone(),
                        content,
                        is_error,
                    });
                }
                continue;
            }
            answer = resp.text;
            break Ok(());
        };
        let llm_ms = llm_start.elapsed().as_millis() as i64;
        match llm_outcome {
            Err(e) if e == "cancelled" => break ("cancelled", "cancelled by the user".into()),
            Err(e) => {
                last_error = Some(e.clone());
                break ("error", format!("the model call failed: {e}"));
            }
            Ok(()) => {}
        }
        if let Some(reason) = stop_reason_tool {
            break ("blocked", format!("the model stopped the loop: {reason}"));
        }
        // Apply.
        let report = match edit::apply_response(
            format,
            &ws,
            &answer,
            &opts.targets,
            &ApplyOptions {
                dry_run: false,
                shown,
                protected: opts.protected.clone(),
            },
        )
        .await
        {
            Ok(r) => r,
            Err(e) => {
                last_error = Some(e.to_string());
                break ("error", format!("applying the edits failed: {e}"));
            }
        };
        for p in &report.parse_errors {
            let at = if p.line > 0 {
                format!("line {}: ", p.line)
            } else {
                String::new()
            };
            emit(
                store,
                Event::EditFailed {
                    iteration,
                    path: String::new(),
                    failure: "parse".into(),
                    error: format!("{at}{}", p.message),
                },
            );
        }
        for e in &report.edits {
            match e.status {
                "applied" | "already_applied" => emit(
                    store,
                    Event::EditApplied {
                        iteration,
                        path: e.path.clone(),
                        status: e.status.into(),
                        tier: e.tier.clone(),
                    },
                ),
                _ => {
                    if let Some(err) = &e.error {
                        emit(
                            store,
                            Event::EditFailed {
                                iteration,
                                path: e.path.clone(),
                                failure: e.failure.unwrap_or("not_applied").into(),
                                error: err.clone(),
                            },
                        )
                    }
                }
            }
        }
        if let Some(p) = report.edits.iter().find(|e| e.failure == Some("policy")) {
            let msg = p.error.clone().unwrap_or_default();
            store.record_iteration(
                loop_id,
                &iteration_row(iteration as i64, &result, Some(&answer), llm_ms, usage, 0),
                &report.edits,
            )?;
            break ("blocked", format!("an edit was refused by policy: {msg}"));
        }
        let applied = if report.ok { report.applied_count() } else { 0 };
        for w in report.written.iter().chain(report.deleted.iter()) {
            if !modified.contains(w) {
                modified.push(w.clone());
            }
        }
        let summary_line = answer
            .lines()
            .find(|l| !l.trim().is_empty() && !l.starts_with("<<<") && !l.starts_with("```"))
            .unwrap_or("")
            .chars()
            .take(200)
            .collect::<String>();
        last = Some(Attempt {
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
            applied_any = true;
            no_edit_streak = 0;
            // Re-check.
            result = match run_runner(runner, opts, &mut cancel).await {
                Step::Done(r) => r,
                Step::Cancelled => break ("cancelled", "cancelled by the user".into()),
                Step::Failed(e) => {
                    last_error = Some(e.clone());
                    break ("error", e);
                }
            };
        } else {
            no_edit_streak += 1;
        }
        let fp = fingerprint(&result.0);
        record_run(store, &mut emit, loop_id, iteration, &result);
        let _ = store.record_iteration(
            loop_id,
            &iteration_row(
                iteration as i64,
                &result,
                Some(&summary_line),
                llm_ms,
                usage,
                applied,
            ),
            &report.edits,
        );
        emit(
            store,
            Event::LoopIteration {
                loop_id,
                iteration,
                ok: result.0.ok,
                edits_applied: applied,
            },
        );
        if result.0.ok {
            continue;
        }
        if applied > 0 {
            fingerprints.push(fp);
        }
        if no_edit_streak >= NO_EDITS_WINDOW {
            break (
                "no_edits_applied",
                format!("{NO_EDITS_WINDOW} consecutive iterations applied no edit"),
            );
        }
        if applied_any && stagnated(&fingerprints) {
            break ("stagnation", "the same failure keeps coming back".into());
        }
    };
    let error = if reason == "success" {
        None
    } else {
        last_error
    };
    finish(
        store, &mut emit, loop_id, opts, workspace, iteration, reason, &summary, error, &modified,
    )
}

fn stagnated(f: &[String]) -> bool {
    let n = f.len();
    if n >= STAGNATION_WINDOW && f[n - STAGNATION_WINDOW..].iter().all(|x| *x == f[n - 1]) {
        return true;
    }
    n >= 4 && f[n - 1] == f[n - 3] && f[n - 2] == f[n - 4] && f[n - 1] != f[n - 2]
}

enum Step {
    Done((RunResult, u64)),
    Cancelled,
    Failed(String),
}

async fn run_runner(
    runner: &Plugin,
    opts: &FixOptions,
    cancel: &mut tokio::sync::watch::Receiver<bool>,
) -> Step {
    let start = Instant::now();
    let fut = runner.runner_run(&opts.targets, &opts.runner_settings);
    tokio::select! {
        r = fut => match r {
            Ok(Ok(r)) => Step::Done((r, start.elapsed().as_millis() as u64)),
            Ok(Err(e)) => Step::Failed(format!("runner `{}`: {}", runner.name, crate::plugin::describe_call_error(&e))),
            Err(e) => Step::Failed(e.to_string()),
        },
        _ = cancelled(cancel) => Step::Cancelled,
    }
}

/// Emit `runner.finished` (and store iteration 0, which has no LLM call).
fn record_run(
    store: &mut Store,
    emit: &mut impl FnMut(&mut Store, Event),
    loop_id: i64,
    iteration: u32,
    result: &(RunResult, u64),
) {
    let r = &result.0;
    if iteration == 0 {
        let _ = store.record_iteration(
            loop_id,
            &iteration_row(0, result, None, 0, Default::default(), 0),
            &[],
        );
    }
    emit(
        store,
        Event::RunnerFinished {
            iteration,
            ok: r.ok,
            exit_code: r.exit_code,
            errors: r
                .diagnostics
                .iter()
                .filter(|d| matches!(d.severity, Severity::Error))
                .count(),
            duration_ms: r.duration_ms,
        },
    );
}

fn iteration_row(
    n: i64,
    result: &(RunResult, u64),
    summary: Option<&str>,
    llm_ms: i64,
    usage: crate::llm::Usage,
    applied: usize,
) -> IterationRow {
    let r = &result.0;
    IterationRow {
        n,
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
        llm_summary: summary.map(|s| s.chars().take(500).collect()),
        runner_ms: result.1 as i64,
        llm_ms,
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
        s = tail(&format!("{}{}", r.stderr, r.stdout), 2000);
    }
    s.trim_end().to_string()
}

/// Answer a history tool call (`current` is left out of `get_loops`); `(text, is_error)`.
pub(crate) fn history_tool(store: &Store, current: i64, name: &str, args: &str) -> (String, bool) {
    match name {
        "get_loops" => match store.loops(20) {
            Ok(rows) => {
                let v: Vec<_> = rows
                    .iter()
                    .filter(|r| r.id != current)
                    .map(|r| json!({ "id": r.id, "kind": r.kind, "status": r.status, "stop_reason": r.stop_reason, "targets": r.targets, "iters": r.iters, "summary": r.summary }))
                    .collect();
                (serde_json::to_string(&v).unwrap_or_default(), false)
            }
            Err(e) => (e.to_string(), true),
        },
        _ => {
            let id = serde_json::from_str::<serde_json::Value>(args)
                .ok()
                .and_then(|v| v["id"].as_i64());
            let Some(id) = id else {
                return ("`id` (integer) is required".into(), true);
            };
            match store.loop_detail(id) {
                Ok(d) => {
                    let its: Vec<_> = d
                        .iterations
                        .iter()
                        .map(|i| json!({ "n": i.n, "ok": i.ok, "exit_code": i.exit_code, "diagnostics": i.diagnostics, "summary": i.llm_summary, "stderr_tail": tail(&i.stderr, 1500) }))
                        .collect();
                    let edits: Vec<_> = d.edits.iter().map(|e| json!({ "iteration": e.iteration, "path": e.path, "status": e.status, "error": e.error })).collect();
                    (json!({ "id": id, "status": d.row.status, "stop_reason": d.row.stop_reason, "iterations": its, "edits": edits }).to_string(), false)
                }
                Err(e) => (e.to_string(), true),
            }
        }
    }
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
        p.push_str(tail(output.trim_end(), opts.output_budget).as_str());
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

fn append_log(log: &mut std::fs::File, loop_id: i64, iteration: u32, text: &str) {
    use std::io::Write;
    // A log that cannot be written only loses the log.
    let _ = writeln!(
        log,
        "=== loop {loop_id} iteration {iteration} at {} ===\n{text}",
        crate::store::now_ms()
    );
}

#[allow(clippy::too_many_arguments)]
fn finish(
    store: &mut Store,
    emit: &mut impl FnMut(&mut Store, Event),
    loop_id: i64,
    opts: &FixOptions,
    workspace: &Path,
    iters: u32,
    reason: &str,
    summary: &str,
    last_error: Option<String>,
    modified: &[String],
) -> Result<FixOutcome, FixError> {
    let status = match reason {
        "success" => "success",
        "blocked" => "blocked",
        _ => "failed",
    };
    store.finish_loop(loop_id, status, reason, summary, last_error.as_deref())?;
    match status {
        "success" => emit(store, Event::LoopSucceeded { loop_id, iters }),
        "blocked" => emit(
            store,
            Event::LoopBlocked {
                loop_id,
                reason: summary.to_string(),
            },
        ),
        _ => emit(
            store,
            Event::LoopFailed {
                loop_id,
                reason: reason.to_string(),
                last_error: last_error.clone(),
            },
        ),
    }
    let abs = |p: &String| workspace.join(p).to_string_lossy().into_owned();
    let single = opts.targets.len() == 1;
    let outcome = FixOutcome {
        ok: status == "success",
        iters,
        summary: summary.to_string(),
        artifact_path: single.then(|| abs(&opts.targets[0])),
        modified_files: (!single).then(|| modified.iter().map(abs).collect()),
        failure_reason: (status != "success").then(|| reason.to_string()),
        last_error: if status == "success" {
            None
        } else {
            last_error
        },
        loop_id,
        status: status.to_string(),
        stop_reason: reason.to_string(),
    };
    emit(store, Event::LoopResult(outcome.clone()));
    Ok(outcome)
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

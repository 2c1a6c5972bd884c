//! The fix loop: run the runner; on failure build a prompt (project prompt,
//! last attempt, diagnostics first, output capped keeping the tail, the targets' text, the edit
//! format's instructions), ask the model, apply its edits atomically, record the iteration, and
//! repeat until success or a stop reason: `success`, `max_iters`, `stagnation`,
//! `no_edits_applied`, `blocked`, `timeout`, `cancelled`, `error`.
//!
//! Without targets (project mode) the prompt shows the code around the diagnostics of the
//! first files they name, the model may first look around with read-only tools (a bounded
//! number of rounds), and its answer may change any file that is not protected, up to a
//! number of files.

use super::defaults::WHOLE_FORMAT;
use super::events::Event;
pub use super::fix_options::{FixError, FixOptions, FixPlugins};
use super::history;
use super::run::{AskError, Run, RunCtx, cancelled};
use super::tool_names::{GET_LOOP_DETAIL, GET_LOOPS, LIST_DIR, LOOP_STOP, READ_FILES, SEARCH_REPO};
use super::tools::loop_stop::LoopStopArgs;
use super::tools::{Changes, Imp, ToolSettings, Toolbox, Turn};
use crate::edit::{self, ApplyOptions, Workspace};
use crate::llm::{ChatRequest, Message, ToolDef};
use crate::plugin::{Plugin, PluginCallError, PluginError, RunResult, Severity};
use crate::store::{IterationRow, NewLoop};
use kiln_protocol::outcome::{FixOutcome, LastIteration, LoopStatus, StopReason};
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
/// Lines of output shown to a person when a failing check yielded no diagnostic.
const OUTPUT_TAIL_LINES: usize = 12;
/// Rounds of history tool calls allowed within one iteration (target mode).
const MAX_TOOL_ROUNDS: usize = 3;
/// Files named by the diagnostics whose code a project-mode prompt shows.
const PROJECT_FILES_SHOWN: usize = 5;
/// The most a project-mode prompt shows of one such file (its windows), in bytes.
const PROJECT_SHOWN_BYTES: usize = 64 * 1024;
/// The fix loop's own tools, in the order the model is shown them: the stop, then the
/// history tools (the first only, on a round past the last).
const FIX_TOOLS: &[&str] = &[LOOP_STOP, GET_LOOPS, GET_LOOP_DETAIL];
/// The read-only tools the model may use in project mode to look around before it answers.
pub const PROJECT_TOOLS: &[&str] = &[READ_FILES, SEARCH_REPO, LIST_DIR];
/// Deadline of one project-mode tool call.
const PROJECT_TOOL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The fix loop's view of the tool table: [`FIX_TOOLS`] and, in project mode with tool
/// rounds, `plugin`'s look-around tools ([`PROJECT_TOOLS`]), each under its deadline, the
/// programs they start writing nowhere.
async fn fix_tools<'r>(
    registry: &'r crate::plugin::Registry,
    plugin: Option<&Plugin>,
) -> Result<(Toolbox<'r>, ToolSettings), FixError> {
    let settings = ToolSettings {
        timeout: PROJECT_TOOL_TIMEOUT,
        program_writes: crate::plugin::confine::Writes::Nowhere,
        ..Default::default()
    };
    let reads = plugin.map(|p| (p, PROJECT_TOOLS));
    let table = Toolbox::view(registry, &settings, FIX_TOOLS, reads).await?;
    Ok((table, settings))
}

/// Characters of one project-mode tool result shown to the model (the head is kept).
const TOOL_RESULT_CHARS: usize = 48 * 1024;

/// Normalised fingerprint of a failure: what varies between two runs of the same failure
/// (durations, hexadecimal addresses, temporary paths, timestamps) folded, whitespace trimmed,
/// progress lines dropped. Every other number is kept: "got 41" and "got 40" are two
/// failures, and a loop that moves from one to the other is making progress.
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
        norm.push_str(&fold_volatile(l));
        norm.push('\n');
    }
    for d in &r.diagnostics {
        norm.push_str(&format!("{}:{}:{}\n", d.file, d.line, d.message));
    }
    hex::encode(&Sha256::digest(norm.as_bytes())[..8])
}

/// Directories whose next component is a name made up per run (`/tmp/.tmpA1b2C3/...`).
const TEMP_DIRS: &[&str] = &[
    "/tmp/",
    "/var/tmp/",
    "/var/folders/",
    "/private/var/folders/",
];

/// Units a duration is written in (`0.52s`, `12 ms`, `(0.00s)`).
const DURATION_UNITS: &[&str] = &[
    "seconds", "second", "secs", "sec", "minutes", "mins", "min", "ms", "us", "µs", "ns", "s",
];

/// One line of output with what differs between two identical runs folded to `#`: durations,
/// hexadecimal addresses, the per-run component of a temporary path, dates and times.
fn fold_volatile(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    let mut prev: Option<char> = None;
    while let Some(c) = rest.chars().next() {
        let boundary = !prev.is_some_and(|p| p.is_alphanumeric() || p == '_' || p == '.');
        if boundary && let Some(n) = volatile_at(rest, &out) {
            // A temporary path keeps its directory: `/tmp/#`.
            if let Some(dir) = TEMP_DIRS.iter().find(|d| rest.starts_with(**d)) {
                out.push_str(dir);
            }
            out.push('#');
            prev = rest[..n].chars().last();
            rest = &rest[n..];
            continue;
        }
        if boundary && c.is_ascii_digit() {
            // A number that is none of the above is kept whole (so `41s` in `x41s` is not a
            // duration and `541` is not folded from its middle).
            let n = rest
                .find(|ch: char| !(ch.is_ascii_digit() || ch == '.'))
                .unwrap_or(rest.len());
            out.push_str(&rest[..n]);
            prev = rest[..n].chars().last();
            rest = &rest[n..];
            continue;
        }
        out.push(c);
        prev = Some(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// The length of the volatile token `s` starts with, if it starts with one. `before` is the
/// line folded so far (a number after `duration_ms` is a duration).
fn volatile_at(s: &str, before: &str) -> Option<usize> {
    let b = s.as_bytes();
    let digits = |from: usize| {
        b[from.min(b.len())..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count()
    };
    // 0x7ffd5c2a: an address.
    if s.starts_with("0x") || s.starts_with("0X") {
        let n = b[2..].iter().take_while(|c| c.is_ascii_hexdigit()).count();
        if n > 0 {
            return Some(2 + n);
        }
    }
    // /tmp/<made-up name>: the directory is kept, the name folded.
    for dir in TEMP_DIRS {
        if let Some(after) = s.strip_prefix(dir) {
            let n = after
                .find(|ch: char| !(ch.is_alphanumeric() || matches!(ch, '.' | '_' | '-')))
                .unwrap_or(after.len());
            if n > 0 {
                return Some(dir.len() + n);
            }
        }
    }
    let int = digits(0);
    if int == 0 {
        return None;
    }
    // 2024-05-01, 2024-05-01T12:30:05.123Z: a date (with its time).
    if int == 4
        && b.get(4) == Some(&b'-')
        && digits(5) == 2
        && b.get(7) == Some(&b'-')
        && digits(8) == 2
    {
        let mut n = 10;
        let time = matches!(b.get(n), Some(b'T' | b' '))
            .then(|| clock_at(&s[n + 1..]))
            .flatten();
        if let Some(t) = time {
            n += 1 + t;
            if b.get(n) == Some(&b'Z') {
                n += 1;
            } else if matches!(b.get(n), Some(b'+' | b'-')) && digits(n + 1) == 2 {
                n += 3;
                if b.get(n) == Some(&b':') && digits(n + 1) == 2 {
                    n += 3;
                } else if digits(n) == 2 {
                    n += 2;
                }
            }
        }
        return Some(n);
    }
    // 12:30:05(.123): a time of day.
    if let Some(n) = clock_at(s) {
        return Some(n);
    }
    // 0.52s, 12 ms, 3.0 seconds: a duration; so is the number after `duration_ms`.
    let mut n = int;
    if b.get(n) == Some(&b'.') && digits(n + 1) > 0 {
        n += 1 + digits(n + 1);
    }
    let trimmed = before.trim_end_matches([' ', ':', '=']);
    if trimmed.ends_with("duration_ms") || trimmed.ends_with("duration") {
        return Some(n);
    }
    let unit_from = if b.get(n) == Some(&b' ') { n + 1 } else { n };
    for unit in DURATION_UNITS {
        if let Some(after) = s[unit_from..].strip_prefix(unit)
            && !after.starts_with(|ch: char| ch.is_alphanumeric() || ch == '_')
        {
            return Some(unit_from + unit.len());
        }
    }
    None
}

/// The length of an `HH:MM:SS` (with optional fraction) at the start of `s`.
fn clock_at(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    let digits = |from: usize| {
        b[from.min(b.len())..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count()
    };
    let h = digits(0);
    if !(1..=2).contains(&h)
        || b.get(h) != Some(&b':')
        || digits(h + 1) != 2
        || b.get(h + 3) != Some(&b':')
        || digits(h + 4) != 2
    {
        return None;
    }
    let mut n = h + 6;
    if b.get(n) == Some(&b'.') && digits(n + 1) > 0 {
        n += 1 + digits(n + 1);
    }
    Some(n)
}

/// What the model was told about the previous iteration.
struct Attempt {
    summary: String,
    feedback: Option<String>,
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
    /// The last iteration recorded, for the result.
    last_iteration: Option<LastIteration>,
    /// The model's answer that called `loop_stop`, kept as its iteration's summary.
    stopped: Option<Answer>,
    /// The first check, run before the loop existed (see [`first_check`]).
    first: Option<FirstCheck>,
    /// The tools offered: the fix loop's view of the tool table.
    tools: Toolbox<'o>,
    /// How they run.
    tool_settings: ToolSettings,
    /// Project mode: the look-around tools are offered.
    look: bool,
    /// What decides success (the check's files, the failing tests): refused to the model
    /// unless `allow_check_edits`, and reported when changed.
    guard: edit::CheckGuard,
    /// Files the model changed that decide success (its check's files, tests), in order.
    check_changed: Vec<String>,
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
    on_event: &mut (dyn FnMut(&Event) + Send),
) -> Result<Option<FirstCheck>, FixError> {
    let start = Instant::now();
    let fut = runner.runner_run(&opts.targets, &opts.runner_settings);
    let Some(r) = with_progress(fut, cancel.clone(), |elapsed_s| {
        on_event(&Event::RunnerProgress {
            iteration: 0,
            elapsed_s,
        })
    })
    .await
    else {
        return Ok(None);
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

/// When a running check is said to be still running: seconds after its start.
fn progress_after(n: usize) -> u64 {
    match n {
        0 => 10,
        1 => 30,
        k => 60 * (k as u64 - 1),
    }
}

/// Await `fut` unless `cancel` comes first (`None`), calling `tick` with the seconds elapsed
/// at 10 s, 30 s, 60 s and then every minute while it runs.
async fn with_progress<F: std::future::Future>(
    fut: F,
    mut cancel: tokio::sync::watch::Receiver<bool>,
    mut tick: impl FnMut(u64),
) -> Option<F::Output> {
    if *cancel.borrow() {
        return None;
    }
    let start = tokio::time::Instant::now();
    tokio::pin!(fut);
    let mut n = 0;
    loop {
        let at = start + std::time::Duration::from_secs(progress_after(n));
        tokio::select! {
            r = &mut fut => return Some(r),
            _ = cancelled(&mut cancel) => return None,
            _ = tokio::time::sleep_until(at) => {
                tick(progress_after(n));
                n += 1;
            }
        }
    }
}

/// `runner.started` for a check of `iteration`.
fn runner_started(opts: &FixOptions, runner: &Plugin, iteration: u32) -> Event {
    Event::RunnerStarted {
        iteration,
        runner: runner.name.clone(),
        command: opts.runner_settings.get("cmd").cloned(),
        targets: opts.targets.clone(),
    }
}

/// Everything checked before the loop's row exists: the targets, the format's fit, the
/// first check. Returns the format's instructions, the answers' log and the first check.
async fn precheck(
    opts: &FixOptions,
    ws: &Workspace,
    runner: &Plugin,
    format: &Plugin,
    cancel: &tokio::sync::watch::Receiver<bool>,
    on_event: &mut (dyn FnMut(&Event) + Send),
) -> Result<(String, std::fs::File, Option<FirstCheck>), FixError> {
    ws.target_arguments(&opts.targets)
        .map_err(|e| FixError::Usage(e.to_string()))?;
    let info = format.format_describe().await?;
    if opts.multi() && !info.multi_file {
        return Err(FixError::Usage(format!(
            "{} need a multi-file edit format, but `{}` edits one file at a time; use --format search-replace (or udiff, whole, apply-patch)",
            if opts.project() {
                "project mode (no --file) and its answers"
            } else {
                "several targets"
            },
            format.name
        )));
    }
    let log = crate::store::open_log(ws.root(), "fix-loop.log")?;
    let instructions = format.format_instructions(opts.multi()).await?;
    refuse_non_text(ws, &opts.targets)?;
    // A format that returns whole files must fit each target in its limits; the others edit
    // a big file through a window around each change (`edit::window`).
    if format.name == WHOLE_FORMAT {
        refuse_over_limits(ws, &opts.targets, format)?;
    }
    // Said before the runner runs (the loop's row and `loop.started` wait for its answer).
    on_event(&runner_started(opts, runner, 0));
    let first = first_check(opts, runner, cancel, on_event).await?;
    Ok((instructions, log, first))
}

/// Run the fix loop to its end. Errors are returned only when the loop cannot start; every
/// end after that (including failures of the model or a plugin) is an outcome with a reason.
pub async fn run_fix(
    opts: &FixOptions,
    plugins: FixPlugins<'_>,
    ctx: RunCtx<'_>,
) -> Result<FixOutcome, FixError> {
    let FixPlugins {
        runner,
        format,
        tools,
    } = plugins;
    let ws = Workspace::open(ctx.workspace)?;
    let guard = super::check_files::guard_for(
        &runner.name,
        &opts.runner_settings,
        ws.root(),
        &opts.targets,
    );
    let look = tools.filter(|_| opts.project() && opts.tool_rounds > 0);
    let (tools, tool_settings) = fix_tools(ctx.plugins, look).await?;
    // Undo's snapshot precedes everything the run does, its first check included.
    let undo = ctx.undo;
    crate::undo::prepare(undo, ctx.workspace);
    let (instructions, log, first) = precheck(opts, &ws, runner, format, &ctx.cancel, ctx.events)
        .await
        .inspect_err(|_| crate::undo::abandon(undo))?;
    let new = NewLoop {
        kind: crate::store::RunKind::Fix,
        runner: runner.name.clone(),
        targets: opts.targets.clone(),
        format: format.name.clone(),
        model: ctx.model.label(),
        max_iters: opts.max_iters as i64,
        parent: opts.parent,
    };
    let mut run = Run::begin(ctx, &new).inspect_err(|_| crate::undo::abandon(undo))?;
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
        last_iteration: None,
        stopped: None,
        first,
        tools,
        tool_settings,
        look: look.is_some(),
        guard,
        check_changed: Vec::new(),
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

/// [`run_fix`] boxed, as `compile_loop` is given it (a [`RunFix`](super::tools::fix_host::RunFix)).
pub fn run_fix_boxed<'a>(
    opts: &'a FixOptions,
    plugins: FixPlugins<'a>,
    ctx: RunCtx<'a>,
) -> futures_util::future::BoxFuture<'a, Result<FixOutcome, FixError>> {
    Box::pin(run_fix(opts, plugins, ctx))
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
                    // The iteration ended without an answer to apply: it still gets its row,
                    // with the model's answer when it stopped the loop.
                    let stopped = self.stopped.take();
                    self.record_iteration(run, &result, stopped.as_ref(), 0, &[]);
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
        let report = match self.apply(run, &answer, &result.0).await {
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
        // Refused for changing what decides success: the model is told, the loop goes on.
        let refused = report
            .edits
            .iter()
            .find(|e| e.failure == Some("check"))
            .and_then(|e| e.error.clone());
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
        // Whatever stops the loop now, its last error is this iteration's.
        self.last_error = Some(failure_text(&result.0));
        if applied > 0 {
            self.fingerprints.push(fingerprint(&result.0));
        }
        if self.no_edit_streak >= NO_EDITS_WINDOW {
            let why = match refused {
                Some(m) => format!(" (the last answer was refused: {m})"),
                None => String::new(),
            };
            return Ok(Err((
                StopReason::NoEditsApplied,
                format!("{NO_EDITS_WINDOW} consecutive iterations applied no edit{why}"),
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
                // Cancelled already (Ctrl-C during the first check): the runner is not
                // started again.
                if run.is_cancelled() {
                    return Err((StopReason::Cancelled, "cancelled by the user".into()));
                }
                let iteration = self.iteration;
                run.emit(runner_started(self.opts, self.runner, iteration));
                let start = Instant::now();
                let cancel = run.cancel_signal();
                let fut = self
                    .runner
                    .runner_run(&self.opts.targets, &self.opts.runner_settings);
                let tick = |elapsed_s| {
                    run.emit(Event::RunnerProgress {
                        iteration,
                        elapsed_s,
                    })
                };
                match with_progress(fut, cancel, tick).await {
                    Some(r) => (r, start.elapsed().as_millis() as u64),
                    None => {
                        return Err((StopReason::Cancelled, "cancelled by the user".into()));
                    }
                }
            }
        };
        let e = match r {
            Ok(Ok(r)) if r.timed_out => {
                self.last_error = Some(failure_text(&r));
                return Err(self.timed_out());
            }
            Ok(Ok(r)) => return Ok((r, ms)),
            Err(PluginError::Deadline { .. }) => return Err(self.timed_out()),
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

    /// The stop of a check that ran out of time: said as such, naming the setting; the model
    /// is not asked about it.
    fn timed_out(&mut self) -> Stop {
        let limit = match self.opts.timeout_s {
            Some(s) => format!(" after {s} s"),
            None => String::new(),
        };
        let msg = format!(
            "the check (runner `{}`) ran out of time{limit} and was stopped; the model was not asked. Give it longer with --timeout SECONDS or `[fix] timeout` in your user config or a trusted kiln.toml",
            self.runner.name
        );
        if self.last_error.is_none() {
            self.last_error = Some(msg.clone());
        }
        (StopReason::Timeout, msg)
    }

    /// Store the iteration's row (with its edits) and emit `loop.iteration`; a store that
    /// cannot take the row only loses it.
    fn record_iteration(
        &mut self,
        run: &mut Run<'_>,
        result: &Checked,
        answer: Option<&Answer>,
        applied: usize,
        edits: &[edit::EditResult],
    ) {
        let row = iteration_row(self.iteration, result, answer, applied);
        self.last_iteration = Some(last_iteration(&row));
        let _ = run.store.record_iteration(run.id, &row, edits);
        run.emit(Event::LoopIteration {
            loop_id: run.id,
            iteration: self.iteration,
            ok: result.0.ok,
            edits_applied: applied,
        });
    }

    /// Emit `runner.finished` (and store iteration 0, which has no LLM call).
    fn record_check(&mut self, run: &mut Run<'_>, result: &Checked, fresh: bool) {
        let r = &result.0;
        if self.iteration == 0 {
            let row = iteration_row(0, result, None, 0);
            self.last_iteration = Some(last_iteration(&row));
            let _ = run.store.record_iteration(run.id, &row, &[]);
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
            failed_tests: failed_tests(&r.diagnostics),
            // kiln's sandbox notes are no diagnostic of the tool: the output still shows.
            tail: if r.ok
                || r.diagnostics
                    .iter()
                    .any(|d| !crate::plugin::is_sandbox_note(d))
            {
                Vec::new()
            } else {
                super::events::output_tail(&r.stdout, &r.stderr, OUTPUT_TAIL_LINES)
            },
        });
    }

    /// Build the prompt and ask the model, answering its history-tool calls (a few rounds);
    /// `loop_stop` ends the loop as blocked.
    async fn ask(
        &mut self,
        run: &mut Run<'_>,
        failure: &RunResult,
    ) -> Result<Result<Answer, Stop>, FixError> {
        // `shown`: fingerprints of exactly the text the prompt shows; an edit against a file
        // changed since (by the user, while the model was thinking) is refused as stale.
        let insist = self.no_edit_streak + 1 >= NO_EDITS_WINDOW;
        let whole = self.format.name == WHOLE_FORMAT;
        let (prompt, shown) = build_prompt(
            self.opts,
            &self.ws,
            failure,
            self.last.as_ref(),
            insist,
            whole,
        )?;
        let mut req = ChatRequest {
            system: Some(build_system(
                self.opts,
                &self.instructions,
                &self.look_names(),
            )),
            messages: vec![Message::User {
                text: prompt.clone(),
            }],
            tools: self.offered_tools(true),
            max_tokens: None,
        };
        let start = Instant::now();
        let mut usage = crate::llm::Usage::default();
        // Project mode: `tool_rounds` rounds of look-around; then the model must answer.
        let rounds = match self.look {
            true => self.opts.tool_rounds,
            false => MAX_TOOL_ROUNDS,
        };
        for round in 0.. {
            let resp = match self.ask_once(run, &req, prompt.len()).await {
                Ok(r) => r,
                Err(stop) => return Ok(Err(stop)),
            };
            usage += resp.usage;
            if let Some(stop) = resp.tool_calls.iter().find(|c| c.name == LOOP_STOP) {
                let reason = LoopStopArgs::reason_of(&stop.arguments);
                // The iteration's summary: why the model stopped, and what it said.
                let said = resp.text.trim();
                self.stopped = Some(Answer {
                    text: if said.is_empty() {
                        format!("loop_stop: {reason}")
                    } else {
                        format!("loop_stop: {reason}\n\n{said}")
                    },
                    shown: BTreeMap::new(),
                    llm_ms: start.elapsed().as_millis() as i64,
                    usage,
                });
                return Ok(Err((
                    StopReason::Blocked,
                    format!("the model stopped the loop: {reason}"),
                )));
            }
            // Every call but `loop_stop` (read above) gets its result, a call of a tool not in
            // the table an error naming the tools there: a request that leaves a call of the
            // answer before it unanswered is refused by the APIs.
            let calls: Vec<_> = resp
                .tool_calls
                .iter()
                .filter(|c| c.name != LOOP_STOP)
                .collect();
            if calls.is_empty() || !resp.text.trim().is_empty() || round >= rounds {
                return Ok(Ok(Answer {
                    text: resp.text,
                    shown,
                    llm_ms: start.elapsed().as_millis() as i64,
                    usage,
                }));
            }
            let last_round = round + 1 >= rounds;
            let mut results: Vec<Message> = Vec::new();
            let made = calls.len();
            for (k, call) in calls.into_iter().enumerate() {
                // Past the per-turn cap a call is answered without running (as the agent's).
                let out = if k < crate::engine::tools::MAX_CALLS_PER_TURN {
                    self.call_tool(run, call).await
                } else {
                    crate::engine::tools::over_cap(made)
                };
                let is_error = out.is_error();
                let mut content = out.into_text();
                if last_round {
                    content.push_str(
                        "\n\n(That was your last round of tool calls in this iteration: answer now with your edits.)",
                    );
                }
                results.push(Message::ToolResult {
                    id: call.id.clone(),
                    is_error,
                    content,
                });
            }
            if last_round {
                req.tools = self.offered_tools(false);
            }
            req.messages.push(Message::Assistant {
                text: resp.text.clone(),
                tool_calls: resp.tool_calls.clone(),
            });
            req.messages.extend(results);
        }
        unreachable!("the rounds end by returning")
    }

    /// The tools offered in a request: `loop_stop`, and while `look` the history tools and,
    /// in project mode, the read-only look-around tools.
    fn offered_tools(&self, look: bool) -> Vec<ToolDef> {
        let mut tools = self.tools.defs();
        if !look {
            tools.retain(|t| t.name == LOOP_STOP);
        }
        tools
    }

    /// The names the look-around tools are offered under, in [`PROJECT_TOOLS`]' order (none
    /// when they are not offered).
    fn look_names(&self) -> Vec<&str> {
        PROJECT_TOOLS
            .iter()
            .filter_map(|&own| {
                self.tools.tools.iter().find_map(|t| match &t.imp {
                    Imp::Plugin(_, n) if n == own => Some(t.def.name.as_str()),
                    _ => None,
                })
            })
            .collect()
    }

    /// Answer one call through the tool table. A look-around call (a plugin's: it only reads;
    /// the programs it could start write nowhere) is shown with `tool.start`/`tool.end`
    /// events and its result cut to its head.
    async fn call_tool(
        &self,
        run: &mut Run<'_>,
        call: &crate::llm::ToolCall,
    ) -> crate::protocol::outcome::ToolOutcome {
        let turn = Turn {
            turn: self.iteration,
            settings: &self.tool_settings,
            ws: &self.ws,
        };
        let mut changed = Changes::default();
        // A look-around call, or a call of a tool the table lacks, is shown as it is answered.
        let look = self
            .tools
            .get(&call.name)
            .is_none_or(|t| matches!(t.imp, Imp::Plugin(..)));
        if !look {
            return self.tools.call(run, &turn, call, &mut changed).await;
        }
        let turn_no = self.iteration;
        run.emit(Event::ToolStart {
            turn: turn_no,
            id: call.id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.clone(),
        });
        let start = Instant::now();
        let out = self.tools.call(run, &turn, call, &mut changed).await;
        let out = match out {
            crate::protocol::outcome::ToolOutcome::Ok(t) if t.len() > TOOL_RESULT_CHARS => {
                let mut cut = TOOL_RESULT_CHARS;
                while !t.is_char_boundary(cut) {
                    cut -= 1;
                }
                crate::protocol::outcome::ToolOutcome::Ok(format!(
                    "{}\n[... cut at {TOOL_RESULT_CHARS} characters ...]",
                    &t[..cut]
                ))
            }
            o => o,
        };
        let preview = match &out {
            crate::protocol::outcome::ToolOutcome::Ok(t)
            | crate::protocol::outcome::ToolOutcome::Failed(t)
            | crate::protocol::outcome::ToolOutcome::Refused(t) => {
                t.lines().next().unwrap_or("").chars().take(200).collect()
            }
        };
        run.emit(Event::ToolEnd {
            turn: turn_no,
            id: call.id.clone(),
            name: call.name.clone(),
            ok: !out.is_error(),
            duration_ms: start.elapsed().as_millis() as u64,
            preview,
        });
        out
    }

    /// One model request of an iteration, with its `llm.request` and `llm.response` events;
    /// a cancellation, a failed call or the budget ends the loop.
    async fn ask_once(
        &mut self,
        run: &mut Run<'_>,
        req: &ChatRequest,
        prompt_chars: usize,
    ) -> Result<crate::llm::ChatResponse, Stop> {
        let iteration = self.iteration;
        run.emit(Event::LlmRequest {
            iteration,
            prompt_chars,
        });
        let resp = match run.ask(iteration, req, true).await {
            Ok(r) => r,
            Err(AskError::Cancelled) => {
                return Err((StopReason::Cancelled, "cancelled by the user".into()));
            }
            Err(AskError::Model(e)) => {
                self.last_error = Some(e.to_string());
                return Err((StopReason::Error, format!("the model call failed: {e}")));
            }
            Err(AskError::Budget(e)) => return Err((StopReason::Budget, e.to_string())),
        };
        run.emit(Event::LlmResponse {
            iteration,
            latency_ms: resp.latency.as_millis() as u64,
            input_tokens: resp.usage.prompt(),
            output_tokens: resp.usage.output,
            tool_calls: resp.tool_calls.iter().map(|c| c.name.clone()).collect(),
        });
        Ok(resp)
    }

    /// Apply the answer's edits (stale-checked against what the prompt showed) and emit one
    /// event per edit or parse error.
    async fn apply(
        &mut self,
        run: &mut Run<'_>,
        answer: &Answer,
        failure: &RunResult,
    ) -> Result<edit::EditReport, edit::EditError> {
        let iteration = self.iteration;
        // The tests this check fails may not be deleted nor removed from their files.
        let failing = failure
            .diagnostics
            .iter()
            .filter_map(|d| crate::plugin::test_name(d).map(|n| (d.file.clone(), n.to_string())));
        self.guard.set_failing(self.ws.root(), failing);
        let options = ApplyOptions {
            dry_run: false,
            shown: answer.shown.clone(),
            protected: self.opts.protected.clone(),
            max_files: self.opts.project().then_some(self.opts.max_files),
            guard: match self.opts.allow_check_edits {
                true => edit::CheckGuard::default(),
                false => self.guard.clone(),
            },
        };
        let mut report = edit::EditReport::default();
        let edits = match edit::parse(self.format, &answer.text, &self.opts.targets).await? {
            Ok(e) => e,
            Err(problems) => {
                report.parse_errors = problems;
                Vec::new()
            }
        };
        // The files as they were, for the diff a person is shown of what changed: the
        // targets, or in project mode the files the answer names.
        let before: BTreeMap<String, Option<String>> = self
            .opts
            .targets
            .iter()
            .chain(edits.iter().map(|e| &e.path))
            .map(|t| (t.clone(), self.ws.read(t).ok().flatten()))
            .collect();
        // Project mode: the model picks the files; one that undo keeps no copy of (a
        // git-ignored `.env`, a file over the backup limit) would be changed for good, and a
        // new one git's rules at the run's start ignore would outlive undo: refused as a
        // protected path is.
        let mut options = options;
        if self.opts.project() {
            for e in &edits {
                if !crate::undo::keeps(run.undo(), self.ws.root(), &e.path) {
                    options
                        .protected
                        .also(&e.path, crate::undo::NOT_KEPT.into());
                }
            }
        }
        if report.parse_errors.is_empty() {
            report = edit::apply_edits(
                self.format,
                &self.ws,
                edits,
                &self.opts.targets,
                &options,
                report,
            )
            .await?;
        }
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
            if self.guard.decides_success(w) && !self.check_changed.contains(w) {
                self.check_changed.push(w.clone());
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
        // A success the model's own changes to the check or its tests may have decided says
        // so, in the summary every caller shows and in `check_changed`.
        let summary = match status == LoopStatus::Success && !self.check_changed.is_empty() {
            true => format!(
                "{summary} (the model changed what the check runs: {}; review them)",
                self.check_changed.join(", ")
            ),
            false => summary.to_string(),
        };
        let summary = summary.as_str();
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
        let single = !self.opts.multi_file && self.opts.targets.len() == 1;
        let ok = status == LoopStatus::Success;
        let outcome = FixOutcome {
            ok,
            iters,
            summary: summary.to_string(),
            artifact_path: single.then(|| abs(&self.opts.targets[0])),
            modified_files: (!single).then(|| self.modified.iter().map(abs).collect()),
            failure_reason: (!ok).then_some(reason),
            last_error,
            last_iteration: self.last_iteration.clone(),
            loop_id,
            status,
            stop_reason: reason,
            check_changed: self.check_changed.clone(),
            usage: run.usage(),
        };
        run.emit(Event::LoopResult(outcome.clone()));
        Ok(outcome)
    }
}

/// The same failure [`STAGNATION_WINDOW`] times in a row (seed 000's rule).
fn stagnated(f: &[String]) -> bool {
    let n = f.len();
    n >= STAGNATION_WINDOW && f[n - STAGNATION_WINDOW..].iter().all(|x| *x == f[n - 1])
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
        tokens_input: usage.prompt() as i64,
        tokens_output: usage.output as i64,
        edits_applied: applied as i64,
    }
}

/// Characters of each output stream a result's `lastIteration` keeps (the tail).
const LAST_OUTPUT_TAIL: usize = 2000;

/// The result's view of an iteration's row.
fn last_iteration(row: &IterationRow) -> LastIteration {
    LastIteration {
        iteration: row.n as u32,
        exit_code: row.exit_code as i32,
        stdout: history::tail(&row.stdout, LAST_OUTPUT_TAIL),
        stderr: history::tail(&row.stderr, LAST_OUTPUT_TAIL),
        summary: row.llm_summary.clone(),
        diagnostics: match &row.diagnostics {
            serde_json::Value::Array(a) => a.iter().take(LAST_DIAGNOSTICS).cloned().collect(),
            _ => Vec::new(),
        },
    }
}

/// Diagnostics a result's `lastIteration` keeps (the first).
const LAST_DIAGNOSTICS: usize = 50;

/// The failing tests `diagnostics` name, each once, in order.
fn failed_tests(diagnostics: &[crate::plugin::Diagnostic]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for name in diagnostics.iter().filter_map(crate::plugin::test_name) {
        if !out.iter().any(|n| n == name) {
            out.push(name.to_string());
        }
    }
    out
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

/// The system prompt; `look`: the names of the read-only look-around tools offered.
fn build_system(opts: &FixOptions, instructions: &str, look: &[&str]) -> String {
    let lang = opts.lang.as_deref().unwrap_or("the");
    let mut s = if opts.project() {
        format!(
            "You are an expert programmer fixing {lang} code of a project so that its build or check passes.\n\
             Change only what is needed to fix the failure. You may change any file of the workspace except kiln's and git's own (`.git/`, `.kiln/`, `kiln.toml`) and protected paths, at most {} files per answer; name each file in the multi-file format.\n{}\
             If the failure cannot be fixed by editing the project's files (missing information, a missing dependency), call the `loop_stop` tool with the reason instead of guessing.\n",
            opts.max_files,
            if !look.is_empty() {
                let names: Vec<String> = look.iter().map(|n| format!("`{n}`")).collect();
                format!(
                    "Before you answer you may look around with the read-only tools ({}), for at most {} rounds of calls.\n",
                    names.join(", "),
                    opts.tool_rounds
                )
            } else {
                String::new()
            }
        )
    } else {
        format!(
            "You are an expert programmer fixing {lang} code so that its build or check passes.\n\
             Change only what is needed to fix the failure. Never edit files other than the ones you are given.\n\
             If the failure cannot be fixed by editing these files (missing information, the problem is elsewhere), call the `loop_stop` tool with the reason instead of guessing.\n"
        )
    };
    if !opts.allow_check_edits {
        s.push_str("Never make the check pass by weakening it: an edit that changes what the check runs (its build or test configuration, such as a Makefile, package.json or conftest.py) or that deletes or removes a failing test is refused. Fix the code the check exercises.\n");
    }
    if let Some(extra) = &opts.system {
        s.push('\n');
        s.push_str(extra);
        s.push('\n');
    }
    s.push_str("\n## Edit format\n");
    s.push_str(instructions);
    s
}

/// The iteration's prompt: the task, the last attempt, the failure, the current files (a
/// long file as windows around its diagnostics, unless the format answers with whole files),
/// and the fingerprints of exactly the file text shown.
fn build_prompt(
    opts: &FixOptions,
    ws: &Workspace,
    r: &RunResult,
    last: Option<&Attempt>,
    insist: bool,
    whole: bool,
) -> Result<(String, BTreeMap<String, String>), FixError> {
    let mut p = String::new();
    if let Some(task) = &opts.prompt {
        p.push_str("## Task\n");
        p.push_str(task.trim());
        p.push_str("\n\n");
    }
    if opts.project() {
        p.push_str(&format!(
            "Files you may change: any file of the workspace that is not protected, at most {} per answer.\n\n",
            opts.max_files
        ));
    } else {
        p.push_str(&format!(
            "Files you may change: {}\n\n",
            opts.targets.join(", ")
        ));
    }
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
    p.push_str(&failure_section(r, opts.output_budget));
    let shown = if opts.project() {
        // The files the diagnostics name first, each as the code around its diagnostics.
        let files = diagnostic_files(ws, r, &opts.protected);
        if !files.is_empty() {
            p.push_str("\n## Files named by the diagnostics\n");
        }
        let threshold = (!whole).then_some(2 * WINDOW_RADIUS + 1);
        files_section(&mut p, ws, r, &files, threshold, Some(PROJECT_SHOWN_BYTES))?
    } else {
        p.push_str("\n## Current files\n");
        let threshold = (!whole).then_some(opts.window_threshold);
        files_section(&mut p, ws, r, &opts.targets, threshold, None)?
    };
    if insist {
        p.push_str(
            "IMPORTANT: your previous answers applied no edit. Reply with at least one edit block, in exactly the format described, whose search text is copied exactly from the current files above, so that it applies.\n",
        );
    }
    Ok((p, shown))
}

/// The failure as the model is shown it: exit code, diagnostics, the output's tail.
fn failure_section(r: &RunResult, output_budget: usize) -> String {
    let mut p = format!("## Current failure (exit code {})\n", r.exit_code);
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
        p.push_str(history::tail(output.trim_end(), output_budget).as_str());
        p.push_str("\n```\n");
    }
    p
}

/// The first [`PROJECT_FILES_SHOWN`] workspace files the diagnostics name, in their order,
/// as workspace-relative paths: existing text files, not protected; absolute paths inside
/// the workspace made relative, the others left out.
fn diagnostic_files(
    ws: &Workspace,
    r: &RunResult,
    protected: &crate::path::Protected,
) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for d in &r.diagnostics {
        if out.len() >= PROJECT_FILES_SHOWN {
            break;
        }
        let f = d.file.trim();
        let rel = match Path::new(f).strip_prefix(ws.root()) {
            Ok(rel) => rel.to_string_lossy().into_owned(),
            Err(_) if Path::new(f).is_absolute() => continue,
            Err(_) => f.trim_start_matches("./").to_string(),
        };
        if rel.is_empty()
            || out.contains(&rel)
            || crate::path::check_relative(&rel).is_err()
            || protected.why(&rel).is_some()
            || !matches!(ws.read(&rel), Ok(Some(_)))
        {
            continue;
        }
        out.push(rel);
    }
    out
}

/// Append the targets' text to `p` (a file over `window_threshold` lines as windows around
/// its diagnostics; `None`: always whole) and return the fingerprints of what was shown.
fn files_section(
    p: &mut String,
    ws: &Workspace,
    r: &RunResult,
    targets: &[String],
    window_threshold: Option<usize>,
    max_bytes: Option<usize>,
) -> Result<BTreeMap<String, String>, FixError> {
    let mut shown = BTreeMap::new();
    for t in targets {
        let Some(text) = ws.read(t)? else {
            p.push_str(&format!("{t} does not exist yet.\n\n"));
            continue;
        };
        let start = p.len();
        let lines = text.lines().count();
        if window_threshold.is_some_and(|n| lines > n) {
            let at: Vec<u32> = r
                .diagnostics
                .iter()
                .filter(|d| {
                    let f = d.file.trim_start_matches("./");
                    f == t
                        || Path::new(f)
                            .strip_prefix(ws.root())
                            .is_ok_and(|rel| rel == Path::new(t))
                })
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
        // A file whose shown part is still too long (a minified bundle is one long line) is
        // named, not shown: the model reads what it needs of it with its tools.
        if let Some(max) = max_bytes
            && p.len() - start > max
        {
            p.truncate(start);
            p.push_str(&format!(
                "{t} ({} bytes, {lines} lines: too long to show here; read the parts you need with the tools)\n\n",
                text.len()
            ));
            continue;
        }
        shown.insert(t.clone(), edit::fingerprint(&text));
    }
    Ok(shown)
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
    fn a_running_check_is_said_at_10_30_60_s_then_every_minute() {
        let at: Vec<u64> = (0..5).map(progress_after).collect();
        assert_eq!(at, [10, 30, 60, 120, 180]);
    }

    #[test]
    fn stagnation_rules() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert!(!stagnated(&s(&["a", "a"])));
        assert!(stagnated(&s(&["b", "a", "a", "a"])));
        assert!(!stagnated(&s(&["a", "b", "a", "b"])));
        assert!(!stagnated(&s(&["a", "b", "c", "d"])));
    }

    fn failing(stderr: &str) -> RunResult {
        RunResult {
            ok: false,
            exit_code: 1,
            stdout: String::new(),
            stderr: stderr.into(),
            duration_ms: 0,
            diagnostics: Vec::new(),
            truncated: false,
            timed_out: false,
        }
    }

    #[test]
    fn fingerprints_keep_numbers_and_fold_what_varies_between_runs() {
        let fp = |s: &str| fingerprint(&failing(s));
        // Progress: different numbers are different failures.
        assert_ne!(fp("AssertionError: got 41"), fp("AssertionError: got 40"));
        assert_ne!(fp("main.c:6:5: error"), fp("main.c:7:5: error"));
        // What differs between two identical runs is folded.
        for (a, b) in [
            (
                "test result: FAILED. finished in 0.52s",
                "test result: FAILED. finished in 1.07s",
            ),
            ("--- FAIL: TestX (0.00s)", "--- FAIL: TestX (0.13s)"),
            ("took 12 ms", "took 340 ms"),
            ("# duration_ms 12.345", "# duration_ms 9.1"),
            ("segfault at 0x7ffd5c2a10", "segfault at 0x7ffe00000b"),
            (
                "cannot open /tmp/.tmpA1b2C3/out.txt",
                "cannot open /tmp/.tmpZz9Yy8/out.txt",
            ),
            (
                "[2024-05-01T12:30:05.123Z] failed",
                "[2025-01-09T03:04:59.9Z] failed",
            ),
            ("12:30:05 ERROR boom", "03:04:59 ERROR boom"),
        ] {
            assert_eq!(fp(a), fp(b), "{a} / {b}");
        }
        assert_eq!(fold_volatile("x41s got 41 in 0.5s"), "x41s got 41 in #");
        assert_eq!(fold_volatile("at /tmp/abc-1/f.py:3"), "at /tmp/#/f.py:3");
    }
}

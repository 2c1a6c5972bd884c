//! The execute/review loop (seed 003): bounded rounds over a task file. Each round an
//! execution agent works (read, glob, search, write_file, write_patch, an allowlisted
//! run_cmd) and reports `STATUS: COMPLETE|INCOMPLETE`; when incomplete, a fresh review agent
//! with narrower tools (no writes, a read-only command list) reports through `submit_review`
//! what is pending and whether something blocks. Pending items are carried into the next
//! round. Artifacts under `.kiln/loop/` (run.toml, state.toml, execution.toml, review.toml,
//! review_output.toml) are written atomically, so a killed run leaves them readable.
//! Stop reasons: `complete`, `review_clean`, `blocked`, `max_loops`, `error`, `cancelled`, `budget`.

use super::agent::{AgentDeps, AgentError, AgentOptions, run_agent};
use super::events::Event;
use super::model::ModelSource;
use super::outcome::{AgentResult, StopReason};
pub use super::outcome::{CommandRun, LoopRunResult, LoopSummary};
use super::run::{Run, RunDeps};
use crate::edit::Workspace;
use crate::plugin::Registry;
use crate::store::{NewLoop, Store};
use serde::Serialize;
use serde_json::Value;
use std::path::Path;

/// Programs the review phase's `run_cmd` may run (seed 003), with arguments that could run
/// another program or write refused.
pub const REVIEW_COMMANDS: [&str; 10] = [
    "ls", "stat", "pwd", "find", "grep", "head", "tail", "which", "env", "rg",
];

/// Where the artifacts live, workspace-relative.
pub const ARTIFACT_DIR: &str = ".kiln/loop";

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
}

/// What the loop borrows.
pub struct LoopDeps<'a> {
    /// Workspace root.
    pub workspace: &'a Path,
    /// Loaded plugins.
    pub registry: &'a Registry,
    /// The model.
    pub model: &'a mut ModelSource,
    /// The store.
    pub store: &'a mut Store,
    /// Cancellation.
    pub cancel: tokio::sync::watch::Receiver<bool>,
    /// Events.
    pub on_event: &'a mut (dyn FnMut(&Event) + Send),
}

/// Errors that keep the loop from starting or that the host cannot recover from.
#[derive(Debug, thiserror::Error)]
pub enum LoopError {
    /// The task file is missing, outside the workspace or malformed.
    #[error("task file {path}: {why}")]
    Task {
        /// As given.
        path: String,
        /// What is wrong.
        why: String,
    },
    /// An artifact could not be written.
    #[error("cannot write {path}: {source}")]
    Artifact {
        /// Workspace-relative path.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A phase failed in the host.
    #[error(transparent)]
    Agent(#[from] AgentError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    /// The workspace could not be opened.
    #[error(transparent)]
    Edit(#[from] crate::edit::EditError),
}

/// The task file as loaded.
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    /// The task text (front matter removed).
    pub text: String,
    /// Programs its metadata adds to the execution allowlist (`[tools] bash = [...]`); fixed
    /// when the run starts (a reload keeps them).
    pub bash: Vec<String>,
    /// Front matter kiln does not know (ignored), one message each, with the closest name.
    pub warnings: Vec<String>,
    fingerprint: String,
}

/// The front matter kiln reads: `[tools] bash = [...]`, or a top-level `bash`.
const FRONT_MATTER_KEYS: [&str; 2] = ["tools", "bash"];

/// Messages for the front matter keys kiln does not know.
fn unknown_front_matter(v: &toml::Table) -> Vec<String> {
    let mut out = Vec::new();
    for (k, val) in v {
        if !FRONT_MATTER_KEYS.contains(&k.as_str()) {
            out.push(format!(
                "task front matter: `{k}` is not known and is ignored{}",
                crate::suggest::hint(k, FRONT_MATTER_KEYS)
            ));
        } else if let (true, Some(t)) = (k == "tools", val.as_table()) {
            for tk in t.keys().filter(|tk| *tk != "bash") {
                out.push(format!(
                    "task front matter: `tools.{tk}` is not known and is ignored{}",
                    crate::suggest::hint(tk, ["bash"])
                ));
            }
        }
    }
    out
}

/// Split TOML front matter (`+++` or `---` fences) from the task text and read
/// `[tools] bash` (or a top-level `bash`).
pub fn parse_task(text: &str) -> Result<Task, String> {
    let trimmed = text.trim_start_matches('\u{feff}');
    let fence = ["+++", "---"]
        .into_iter()
        .find(|f| trimmed.lines().next().map(str::trim_end) == Some(*f));
    let (meta, body) = match fence {
        None => (None, trimmed.to_string()),
        Some(f) => {
            let rest = &trimmed[trimmed.find('\n').map(|i| i + 1).unwrap_or(trimmed.len())..];
            let mut offset = 0;
            let mut end = None;
            for line in rest.split_inclusive('\n') {
                if line.trim_end() == f {
                    end = Some((offset, offset + line.len()));
                    break;
                }
                offset += line.len();
            }
            let (a, b) = end.ok_or(format!("the front matter opened by `{f}` is not closed"))?;
            (Some(&rest[..a]), rest[b..].to_string())
        }
    };
    let mut bash = Vec::new();
    let mut warnings = Vec::new();
    if let Some(meta) = meta {
        let v: toml::Table = toml::from_str(meta).map_err(|e| format!("front matter: {e}"))?;
        warnings = unknown_front_matter(&v);
        let list = v
            .get("tools")
            .and_then(|t| t.get("bash"))
            .or_else(|| v.get("bash"));
        if let Some(list) = list {
            let arr = list
                .as_array()
                .ok_or("front matter: `bash` must be a list of program names")?;
            for p in arr {
                let p = p
                    .as_str()
                    .ok_or("front matter: `bash` must be a list of program names")?;
                // A glob would become a sandbox grant of every program matching it.
                if p.is_empty()
                    || p.contains('/')
                    || p.starts_with('-')
                    || p.contains(char::is_whitespace)
                    || p.contains(['*', '?', '[', ']'])
                {
                    return Err(format!(
                        "front matter: `{p}` in `bash` is not a program name (no paths, spaces, globs or leading `-`)"
                    ));
                }
                bash.push(p.to_string());
            }
        }
    }
    Ok(Task {
        fingerprint: crate::edit::fingerprint(text),
        text: body.trim().to_string(),
        bash,
        warnings,
    })
}

/// Read the task file through the workspace handle (never outside it, never a FIFO).
pub fn load_task(ws: &Workspace, rel: &str) -> Result<Task, LoopError> {
    let err = |why: String| LoopError::Task {
        path: rel.to_string(),
        why,
    };
    crate::path::check_relative(rel)
        .map_err(|w| err(format!("{w}; it must lie inside the workspace")))?;
    match ws.read(rel) {
        Ok(Some(text)) => parse_task(&text).map_err(err),
        Ok(None) => Err(err("does not exist".into())),
        Err(e) => Err(err(e.to_string())),
    }
}

/// The reviewer's verdict, as written to review_output.toml.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct ReviewOutput {
    /// Round.
    #[serde(rename = "loop")]
    pub round: u32,
    /// What actually happened.
    pub summary: String,
    /// Something only a person can resolve; empty when none.
    pub blocker: String,
    /// Items still to do.
    pub pending: Vec<PendingItem>,
}

/// A pending item (`[[pending]] item = "..."`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PendingItem {
    /// What remains.
    pub item: String,
}

/// `STATUS: COMPLETE|INCOMPLETE` in an execution report (markdown emphasis tolerated).
pub fn extract_status(report: &str) -> Option<String> {
    report.lines().find_map(|l| {
        let l = l
            .trim()
            .trim_matches(|c| c == '*' || c == '#' || c == '_' || c == ' ');
        let rest = l
            .strip_prefix("STATUS:")
            .or_else(|| l.strip_prefix("Status:"))?;
        let word: String = rest
            .trim()
            .trim_matches(|c| c == '*' || c == '_' || c == '`')
            .chars()
            .take_while(|c| c.is_ascii_alphabetic())
            .collect();
        let word = word.to_ascii_uppercase();
        (word == "COMPLETE" || word == "INCOMPLETE").then_some(word)
    })
}

/// The items listed under `NEXT STEPS:` (bullets or numbers, up to a blank line or the next
/// heading).
pub fn extract_pending_items(report: &str) -> Vec<String> {
    let mut items = Vec::new();
    let mut inside = false;
    for line in report.lines() {
        let t = line.trim();
        let bare = t.trim_matches(|c| c == '*' || c == '#' || c == '_').trim();
        if bare.to_ascii_uppercase().starts_with("NEXT STEPS:") {
            inside = true;
            let after = bare["NEXT STEPS:".len()..].trim();
            if !after.is_empty() {
                items.push(after.to_string());
            }
            continue;
        }
        if !inside {
            continue;
        }
        if t.is_empty() {
            if !items.is_empty() {
                break;
            }
            continue;
        }
        let item = t
            .strip_prefix("- ")
            .or_else(|| t.strip_prefix("* "))
            .or_else(|| {
                let digits = t.find(|c: char| !c.is_ascii_digit())?;
                (digits > 0).then(|| t[digits..].trim_start_matches(['.', ')']).trim_start())
            });
        match item {
            Some(i) if !i.is_empty() => items.push(i.to_string()),
            _ => break,
        }
    }
    items
}

const SYSTEM_POLICY: &str = "You are working in a repository to complete a task, in bounded sessions.\n\
Rules:\n\
- Never fabricate file contents, command output or test results: determine the state of the work with the tools, not by assumption.\n\
- Stay inside the workspace: use paths relative to its root.\n\
- Batch independent reads early (read_files, glob, search); prefer doing the work directly over repeated exploration.\n\
- Validate after every meaningful change with run_cmd when a check is available.\n\
- Use write_patch for targeted changes and write_file for new files or whole rewrites.\n";

fn execution_policy() -> String {
    format!(
        "{SYSTEM_POLICY}\nComplete as much of the task as you can in this session. When done, call final_answer with a report that contains:\n\
STATUS: COMPLETE or STATUS: INCOMPLETE\n\
the plan you followed,\n\
the exact output of the checks you ran,\n\
and, when incomplete, a section `NEXT STEPS:` listing what remains, one item per line starting with `- `.\n"
    )
}

fn review_policy() -> String {
    format!(
        "{SYSTEM_POLICY}\nYou are the reviewer of another agent's session. You cannot change files. Check the work with the tools (read, glob, search, and run_cmd limited to ls, stat, pwd, find, grep, head, tail, which, env, rg). Calls that were refused had no effect and are unverified. Then call submit_review with: a summary of what actually happened, a blocker (only something a person must resolve; otherwise empty) and the pending items still to do (empty when the task is complete).\n"
    )
}

/// The execution prompt: the task in round 1; in later rounds, the loop context.
fn execution_task(
    round: u32,
    opts: &LoopOptions,
    task: &Task,
    rounds: &[LoopSummary],
    pending: &[String],
) -> String {
    let mut p = format!(
        "Round {round} of at most {}. The task file is {} (its content is below; do not re-read it).\n\n## Task\n{}\n",
        opts.loops, opts.task_file, task.text
    );
    if round > 1 {
        p.push_str("\n## Progress so far (verified by the harness)\nDo not re-read the task file or re-glob the workspace just for orientation.\n");
        let all = |f: fn(&LoopSummary) -> &Vec<String>| {
            let mut v: Vec<String> = Vec::new();
            for r in rounds {
                for x in f(r) {
                    if !v.contains(x) {
                        v.push(x.clone());
                    }
                }
            }
            v
        };
        let created = all(|r| &r.files_written);
        let edited = all(|r| &r.files_edited);
        p.push_str(&format!(
            "- rounds completed: {}\n- files created: {}\n- files edited: {}\n",
            rounds.len(),
            list_or_none(&created),
            list_or_none(&edited)
        ));
        if let Some(last) = rounds.last() {
            let cmds: Vec<String> = last
                .commands_run
                .iter()
                .map(|c| match c.exit_code {
                    Some(code) => format!("`{}` (exit {code})", c.command),
                    None => format!("`{}`", c.command),
                })
                .collect();
            p.push_str(&format!(
                "- last round's commands: {}\n- last round's errors: {}\n",
                list_or_none(&cmds),
                list_or_none(&last.errors)
            ));
        }
    }
    if !pending.is_empty() {
        p.push_str("\n## Pending items\n");
        for i in pending {
            p.push_str(&format!("- {i}\n"));
        }
    }
    p
}

fn list_or_none(v: &[String]) -> String {
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

/// The review prompt: verified actions, refused calls, the execution report.
fn review_task(round: u32, summary: &LoopSummary, report: &str, task: &Task) -> String {
    let mut p = format!(
        "Review round {round} of the task below.\n\n## Task\n{}\n\n## Verified actions (computed by the harness)\n",
        task.text
    );
    p.push_str(&format!(
        "- files created: {}\n- files edited: {}\n- files read: {}\n",
        list_or_none(&summary.files_written),
        list_or_none(&summary.files_edited),
        list_or_none(&summary.files_read)
    ));
    for c in &summary.commands_run {
        p.push_str(&format!(
            "- ran `{}`{}\n",
            c.command,
            c.exit_code
                .map(|e| format!(" (exit {e})"))
                .unwrap_or_default()
        ));
    }
    p.push_str("\n## Refused calls (attempted, no effect, unverified)\n");
    if summary.refused.is_empty() {
        p.push_str("none\n");
    }
    for r in &summary.refused {
        p.push_str(&format!("- {r}\n"));
    }
    p.push_str(&format!(
        "\n## The execution agent's report\n{}\n\nCall submit_review when done.\n",
        if report.trim().is_empty() {
            "(no report)"
        } else {
            report.trim()
        }
    ));
    p
}

/// Build the harness's summary of a phase from its structured result.
pub fn summarize(round: u32, r: &AgentResult) -> LoopSummary {
    let mut s = LoopSummary {
        round,
        tokens: r.usage,
        stop_reason: Some(r.stop_reason),
        status: extract_status(&r.content),
        ..Default::default()
    };
    let push = |v: &mut Vec<String>, x: &str| {
        if !x.is_empty() && !v.iter().any(|y| y == x) {
            v.push(x.to_string());
        }
    };
    for c in &r.tool_calls {
        let args: Value = serde_json::from_str(&c.arguments).unwrap_or(Value::Null);
        let refused = !c.ok && is_refusal(&c.output);
        if refused {
            s.refused.push(format!(
                "{} {}: {}",
                c.name,
                c.arguments.chars().take(200).collect::<String>(),
                c.output.lines().next().unwrap_or("")
            ));
            continue;
        }
        match c.name.as_str() {
            "write_file" if c.ok => push(&mut s.files_written, args["path"].as_str().unwrap_or("")),
            "write_patch" | "ast_refactor" if c.ok => {
                push(&mut s.files_edited, args["path"].as_str().unwrap_or(""))
            }
            "read_file" if c.ok => push(&mut s.files_read, args["path"].as_str().unwrap_or("")),
            "read_files" if c.ok => {
                for p in args["paths"].as_array().into_iter().flatten() {
                    push(&mut s.files_read, p.as_str().unwrap_or(""));
                }
            }
            "run_cmd" => {
                let mut command = args["command"].as_str().unwrap_or("").to_string();
                for a in args["args"].as_array().into_iter().flatten() {
                    command.push(' ');
                    command.push_str(a.as_str().unwrap_or(""));
                }
                let exit_code = serde_json::from_str::<Value>(&c.output)
                    .ok()
                    .and_then(|v| v["exit_code"].as_i64());
                s.commands_run.push(CommandRun { command, exit_code });
            }
            _ => {}
        }
        if !c.ok {
            s.errors.push(format!(
                "{}: {}",
                c.name,
                c.output
                    .lines()
                    .next()
                    .unwrap_or("")
                    .chars()
                    .take(300)
                    .collect::<String>()
            ));
        }
    }
    s
}

fn is_refusal(output: &str) -> bool {
    let o = output.to_ascii_lowercase();
    [
        "denied",
        "refused",
        "not allowed",
        "not granted",
        "protected",
        "inside the workspace",
        "outside the workspace",
        "symbolic link",
    ]
    .iter()
    .any(|w| o.contains(w))
}

/// Run the loop to its end.
pub async fn run_loop(opts: &LoopOptions, deps: LoopDeps<'_>) -> Result<LoopRunResult, LoopError> {
    let LoopDeps {
        workspace,
        registry,
        model,
        store,
        cancel,
        on_event,
    } = deps;
    let ws = Workspace::open(workspace)?;
    let task = load_task(&ws, &opts.task_file)?;
    let artifacts = Artifacts::open(workspace)?;
    let new = NewLoop {
        kind: crate::store::RunKind::Loop,
        runner: "-".into(),
        targets: vec![opts.task_file.clone()],
        format: opts.agent.default_format.clone(),
        model: model.label(),
        max_iters: opts.loops as i64,
        parent: None,
    };
    let deps = RunDeps {
        workspace,
        model,
        store,
        cancel,
        on_event,
    };
    // Opened before the run's row exists, and through the one writer when it lies in the
    // workspace: a `loop.log` the repository ships as a link is refused, not followed, and
    // leaves no run behind.
    let phase_log = match &opts.log_path {
        Some(p) => Some(crate::edit::writer::open_log(workspace, p, &opts.agent.protected)?.1),
        None => None,
    };
    let mut run = Run::begin(deps, &new)?;
    let mut state = LoopState {
        opts,
        registry,
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

struct LoopState<'o, 'r> {
    opts: &'o LoopOptions,
    registry: &'r Registry,
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

impl LoopState<'_, '_> {
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
            if summary.status.as_deref() == Some("COMPLETE") {
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
            if !verdict.blocker.trim().is_empty() {
                return Ok(StopReason::Blocked);
            }
            // Clean only on a submitted review with nothing pending: a reviewer that never
            // called submit_review (a model that only chats) proves nothing.
            if submitted && verdict.pending.is_empty() && review.stop_reason == StopReason::Complete
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
                execution_task(round, self.opts, &self.task, &self.rounds, &self.pending),
                self.execution_options(run.id),
            ),
            Phase::Review => {
                let last = self.rounds.last().cloned().unwrap_or_default();
                (
                    review_task(round, &last, &self.summary, &self.task),
                    self.review_options(run.id),
                )
            }
        };
        let mut events: Vec<Value> = Vec::new();
        let result = {
            let phase_log = &mut self.phase_log;
            let parts = run.split();
            let outer = parts.on_event;
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
            let deps = AgentDeps {
                workspace: parts.workspace,
                registry: self.registry,
                model: parts.model,
                store: parts.store,
                cancel: parts.cancel,
                on_event: &mut sink,
            };
            run_agent(&task, Vec::new(), &opts, deps).await
        };
        self.artifacts
            .write_events(&format!("{}.toml", phase.name()), &events)?;
        Ok(result?)
    }

    fn execution_options(&self, parent: i64) -> AgentOptions {
        let mut allow = self.opts.granted_commands.clone();
        for b in &self.task.bash {
            if !allow.contains(b) {
                allow.push(b.clone());
            }
        }
        AgentOptions {
            max_steps: self.opts.iterations,
            max_writes: self.opts.iterations.max(self.opts.agent.max_writes),
            max_commands: self.opts.iterations.max(self.opts.agent.max_commands),
            system_prompt: Some(execution_policy()),
            only_tools: Some(
                [
                    "read_file",
                    "read_files",
                    "list_dir",
                    "glob",
                    "search",
                    "search_repo",
                    "write_file",
                    "write_patch",
                    "run_cmd",
                    "final_answer",
                ]
                .map(String::from)
                .to_vec(),
            ),
            command_allowlist: Some(allow),
            kind: crate::store::RunKind::LoopExecute,
            parent: Some(parent),
            ..self.opts.agent.clone()
        }
    }

    fn review_options(&self, parent: i64) -> AgentOptions {
        let budget = (self.opts.iterations / 2).max(6);
        AgentOptions {
            max_steps: budget,
            max_writes: 0,
            max_commands: budget,
            system_prompt: Some(review_policy()),
            only_tools: Some(
                [
                    "read_file",
                    "read_files",
                    "list_dir",
                    "glob",
                    "search",
                    "search_repo",
                    "run_cmd",
                    "submit_review",
                ]
                .map(String::from)
                .to_vec(),
            ),
            command_allowlist: Some(REVIEW_COMMANDS.map(String::from).to_vec()),
            // The kernel holds what the argument checks only defend: the review writes nowhere.
            program_writes: crate::plugin::confine::Writes::Nowhere,
            kind: crate::store::RunKind::LoopReview,
            parent: Some(parent),
            ..self.opts.agent.clone()
        }
    }

    /// Read the reviewer's `submit_review` and write review_output.toml; says whether a
    /// review was submitted at all.
    fn record_review(
        &mut self,
        run: &mut Run<'_>,
        round: u32,
        review: &AgentResult,
    ) -> Result<(ReviewOutput, bool), LoopError> {
        let verdict = match submitted_review(review) {
            Some(v) => ReviewOutput {
                round,
                summary: v["summary"].as_str().unwrap_or("").to_string(),
                blocker: v["blocker"].as_str().unwrap_or("").to_string(),
                pending: v["pending"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|p| p.as_str())
                    .filter(|p| !p.trim().is_empty())
                    .map(|p| PendingItem {
                        item: p.to_string(),
                    })
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
        let submitted = submitted_review(review).is_some();
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
        Ok((verdict, submitted))
    }

    /// state.toml: where the run is (`phase`: `execution`, `review`, `done`, `cancelled`;
    /// a cancelled run also says which phase it stopped in).
    fn write_state(&self, run: &Run<'_>, round: u32, phase: &str) -> Result<(), LoopError> {
        #[derive(Serialize)]
        struct State<'a> {
            run_id: i64,
            loop_index: u32,
            phase: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            stopped_in: Option<&'a str>,
            workspace: String,
            task_file: &'a str,
            updated_at: i64,
        }
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
        )
    }

    fn write_run(&self, run: &Run<'_>, finished: bool) -> Result<(), LoopError> {
        #[derive(Serialize)]
        struct Limits {
            loops: u32,
            iterations: u32,
            review_iterations: u32,
        }
        #[derive(Serialize)]
        struct Tokens {
            input: u64,
            cached_input: u64,
            output: u64,
            reasoning: u64,
        }
        #[derive(Serialize)]
        struct RunToml<'a> {
            run_id: i64,
            model: String,
            task_file: &'a str,
            loops_completed: u32,
            finished: bool,
            limits: Limits,
            tokens: Tokens,
        }
        let u = run.usage();
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
                    review_iterations: (self.opts.iterations / 2).max(6),
                },
                tokens: Tokens {
                    input: u.input + u.cached_input,
                    cached_input: u.cached_input,
                    output: u.output,
                    reasoning: u.reasoning,
                },
            },
        )
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

/// The arguments of the reviewer's last `submit_review` call, if it made one.
fn submitted_review(review: &AgentResult) -> Option<Value> {
    review
        .tool_calls
        .iter()
        .rev()
        .find(|c| c.name == "submit_review")
        .and_then(|c| serde_json::from_str::<Value>(&c.arguments).ok())
}

/// `.kiln/loop/`, written through the workspace's one writer (its privileged artifact
/// write: no link followed at any component); each file is written to a temporary name and
/// renamed, so a reader never sees half a file.
struct Artifacts {
    ws: Workspace,
}

impl Artifacts {
    fn open(workspace: &Path) -> Result<Artifacts, LoopError> {
        Ok(Artifacts {
            ws: Workspace::open(workspace)?,
        })
    }

    fn write(&self, name: &str, text: &str) -> Result<(), LoopError> {
        let rel = ARTIFACT_DIR
            .strip_prefix(".kiln/")
            .expect("the artifacts live in .kiln/");
        let protected = crate::path::Protected::default();
        self.ws
            .writer(&protected, &[])
            .write_artifact(&format!("{rel}/{name}"), text)
            .map_err(|e| LoopError::Artifact {
                path: format!("{ARTIFACT_DIR}/{name}"),
                source: std::io::Error::other(e.to_string()),
            })
    }

    fn write_toml<T: Serialize>(&self, name: &str, value: &T) -> Result<(), LoopError> {
        let text = toml::to_string(value).map_err(|e| LoopError::Artifact {
            path: format!("{ARTIFACT_DIR}/{name}"),
            source: std::io::Error::other(e),
        })?;
        self.write(name, &text)
    }

    /// A phase's events as `[[event]]` tables (JSON nulls left out, which TOML cannot say).
    fn write_events(&self, name: &str, events: &[Value]) -> Result<(), LoopError> {
        let list: Vec<toml::Value> = events.iter().filter_map(json_to_toml).collect();
        let mut table = toml::Table::new();
        table.insert("event".into(), toml::Value::Array(list));
        self.write_toml(name, &table)
    }
}

fn json_to_toml(v: &Value) -> Option<toml::Value> {
    Some(match v {
        Value::Null => return None,
        Value::Bool(b) => toml::Value::Boolean(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => toml::Value::Integer(i),
            None => toml::Value::Float(n.as_f64().unwrap_or(0.0)),
        },
        Value::String(s) => toml::Value::String(s.clone()),
        Value::Array(a) => toml::Value::Array(a.iter().filter_map(json_to_toml).collect()),
        Value::Object(o) => toml::Value::Table(
            o.iter()
                .filter_map(|(k, v)| json_to_toml(v).map(|t| (k.clone(), t)))
                .collect(),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_and_next_steps_are_parsed() {
        let r = "Plan: x\n**STATUS: INCOMPLETE**\nChecks:\n```\nok\n```\nNEXT STEPS:\n- write tests\n2. update docs\n\ntrailing";
        assert_eq!(extract_status(r).as_deref(), Some("INCOMPLETE"));
        assert_eq!(extract_pending_items(r), ["write tests", "update docs"]);
        assert_eq!(
            extract_status("STATUS: COMPLETE").as_deref(),
            Some("COMPLETE")
        );
        assert_eq!(extract_status("no status here"), None);
        assert!(extract_pending_items("STATUS: COMPLETE").is_empty());
    }

    #[test]
    fn an_artifact_never_writes_through_a_planted_link() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("precious.txt"), "precious\n").unwrap();
        let a = Artifacts::open(dir.path()).unwrap();
        std::fs::create_dir_all(dir.path().join(ARTIFACT_DIR)).unwrap();
        let planted = dir.path().join(format!(
            ".kiln/loop/.state.toml.kiln-tmp-{}",
            std::process::id()
        ));
        std::os::unix::fs::symlink(dir.path().join("precious.txt"), &planted).unwrap();
        // The final name as a link, too: replaced, not followed.
        std::os::unix::fs::symlink(
            dir.path().join("precious.txt"),
            dir.path().join(".kiln/loop/run.toml"),
        )
        .unwrap();
        a.write("state.toml", "phase = \"done\"\n").unwrap();
        a.write("run.toml", "run_id = 1\n").unwrap();
        let read = |p: &str| std::fs::read_to_string(dir.path().join(p)).unwrap();
        assert_eq!(read("precious.txt"), "precious\n");
        assert_eq!(read(".kiln/loop/state.toml"), "phase = \"done\"\n");
        assert_eq!(read(".kiln/loop/run.toml"), "run_id = 1\n");
        assert!(!planted.exists());
    }

    #[test]
    fn front_matter_extends_the_allowlist_and_is_validated() {
        let t =
            parse_task("+++\n[tools]\nbash = [\"python3\", \"rg\"]\n+++\nDo the thing.\n").unwrap();
        assert_eq!(t.bash, ["python3", "rg"]);
        assert_eq!(t.text, "Do the thing.");
        let t = parse_task("---\nbash = [\"make\"]\n---\nBuild.\n").unwrap();
        assert_eq!(t.bash, ["make"]);
        assert!(parse_task("+++\nbash = [\"/bin/sh\"]\n+++\nx").is_err());
        assert!(
            parse_task("+++\nbash = [\"x\"]\n")
                .unwrap_err()
                .contains("not closed")
        );
        assert_eq!(parse_task("just text").unwrap().text, "just text");
    }
}

//! The agent loop: THINK (send messages and tool schemas), ACT (run the
//! tool calls: read-only ones in parallel, writes and commands in order, each under a timeout
//! and the before/after hooks), OBSERVE (append results), until the model answers without a
//! tool call or calls `final_answer`, or a cap is reached. Every end has a stop reason:
//! `complete`, `max_steps`, `max_writes`, `max_commands`, `repeated_call`, `context_exceeded`,
//! `error`, `cancelled`. A manual mode serves models without native tool calling: the model
//! answers with one JSON decision, and a malformed one is fed back (a bounded number of times).

use super::defaults::DEFAULT_FORMAT;
use super::error::{HostError, from_host_errors};
use super::events::Event;
use super::run::{AskError, Run, RunCtx};
use super::tool_names::{FINAL_ANSWER, SUBMIT_REVIEW};
use super::tools::{
    CallResult, Changes, FinalAnswerArgs, Kind, ToolSettings, Toolbox, Turn, cap, run_hook,
};
use crate::config::Hooks;
use crate::llm::{ChatRequest, LlmError, Message, ToolCall, ToolDef};
use crate::store::NewLoop;
use kiln_protocol::outcome::{AgentResult, StopReason, ToolCallRecord};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

/// How an agent run is bounded, prompted and offered its tools.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// The most turns (model requests that may call tools) the run takes.
    pub max_steps: u32,
    /// The most calls of writing tools (`write_patch`, `write_file`, `compile_loop`, ...).
    pub max_writes: u32,
    /// The most calls of tools that run programs (`run_cmd`, MCP tools that may write).
    pub max_commands: u32,
    /// Identical calls allowed before `repeated_call`.
    pub max_repeats: u32,
    /// Run every call in order (no parallel read-only calls).
    pub sequential: bool,
    /// How long one tool call may take before it is reported as timed out.
    pub tool_timeout: Duration,
    /// JSON-decision mode for models without tool calling.
    pub manual: bool,
    /// Malformed manual answers tolerated in a row.
    pub max_parse_retries: u32,
    /// Conversation size (characters) at which it is compacted.
    pub context_chars: usize,
    /// Tool result size shown to the model (the full text goes to the store).
    pub result_cap: usize,
    /// Text appended to the system prompt (`--system`).
    pub system: Option<String>,
    /// Commands run around model and tool calls (`[agent.hooks]`).
    pub hooks: Hooks,
    /// Default edit format of `write_patch`.
    pub default_format: String,
    /// `compile_loop`'s runner command (the `command` runner), if any.
    pub compile_cmd: Option<String>,
    /// Paths no edit may touch (`[sandbox] protect` on top of kiln's own files).
    pub protected: crate::path::Protected,
    /// Tools of MCP servers (`[mcp.servers]`), offered as `SERVER__tool`; they run outside
    /// the sandbox. Read-only ones (by the server's hint) count as reads, the others against
    /// the command cap.
    pub external: crate::mcp::ExternalTools,
    /// Replaces kiln's own system prompt (`--system` text is still appended).
    pub system_prompt: Option<String>,
    /// Offer only these tools (`write_file` and `submit_review` only when named here).
    pub only_tools: Option<Vec<String>>,
    /// Programs `run_cmd` may run in this run, checked by the host on top of the grant.
    pub command_allowlist: Option<Vec<String>>,
    /// Where the programs `run_cmd` starts may write (the review phase: nowhere), enforced by
    /// the kernel whatever the host's argument checks let through.
    pub program_writes: crate::plugin::confine::Writes,
    /// Refuse to run hooks the kernel cannot fully confine (`[sandbox] require_confinement`).
    pub require_confinement: bool,
    /// The run's kind in the store (`agent`, `loop-execute`, `loop-review`).
    pub kind: crate::store::RunKind,
    /// The run that started this one (exempt from the overlap guard).
    pub parent: Option<i64>,
}

impl AgentOptions {
    /// How this run's tools are offered and run.
    pub fn tool_settings(&self) -> ToolSettings {
        ToolSettings {
            sequential: self.sequential,
            timeout: self.tool_timeout,
            hooks: self.hooks.clone(),
            default_format: self.default_format.clone(),
            compile_cmd: self.compile_cmd.clone(),
            protected: self.protected.clone(),
            external: self.external.clone(),
            only: self.only_tools.clone(),
            command_allowlist: self.command_allowlist.clone(),
            program_writes: self.program_writes,
            require_confinement: self.require_confinement,
            fix_loop: Some(super::fix::run_fix_boxed),
        }
    }
}

impl Default for AgentOptions {
    fn default() -> Self {
        AgentOptions {
            max_steps: 20,
            max_writes: 10,
            max_commands: 20,
            max_repeats: 3,
            sequential: false,
            tool_timeout: Duration::from_secs(30),
            manual: false,
            max_parse_retries: 2,
            context_chars: 400_000,
            result_cap: 16 * 1024,
            system: None,
            hooks: Hooks::default(),
            default_format: DEFAULT_FORMAT.into(),
            compile_cmd: None,
            protected: crate::path::Protected::default(),
            external: crate::mcp::ExternalTools::default(),
            system_prompt: None,
            only_tools: None,
            command_allowlist: None,
            program_writes: crate::plugin::confine::Writes::default(),
            require_confinement: false,
            kind: crate::store::RunKind::Agent,
            parent: None,
        }
    }
}

/// Host errors: never swallowed into a result.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The store, a plugin (describing its tools) or the workspace failed.
    #[error(transparent)]
    Host(#[from] HostError),
}

from_host_errors!(AgentError);

fn chars(messages: &[Message]) -> usize {
    messages
        .iter()
        .map(|m| match m {
            Message::User { text } => text.len(),
            Message::Assistant { text, tool_calls } => {
                text.len()
                    + tool_calls
                        .iter()
                        .map(|c| c.arguments.len() + c.name.len())
                        .sum::<usize>()
            }
            Message::ToolResult { content, .. } => content.len(),
        })
        .sum()
}

/// Compact the conversation: first elide old tool results, then (if still too large, or
/// `force`) replace the middle with a summary, keeping the task and the recent turns.
fn compact(messages: &mut Vec<Message>, limit: usize, force: bool) -> Option<String> {
    const KEEP: usize = 6;
    let before = chars(messages);
    let n = messages.len();
    let mut elided = 0;
    for m in messages.iter_mut().take(n.saturating_sub(KEEP)) {
        if let Message::ToolResult { content, .. } = m
            && content.len() > 200
        {
            *content = format!(
                "[elided by kiln to save context: {} chars; call the tool again if you need it]",
                content.len()
            );
            elided += 1;
        }
    }
    if (chars(messages) > limit || force) && messages.len() > KEEP + 2 {
        let mut start = messages.len() - KEEP;
        while start > 1 && matches!(messages[start], Message::ToolResult { .. }) {
            start -= 1;
        }
        if start > 1 {
            let middle: Vec<Message> = messages.drain(1..start).collect();
            let mut summary = String::from("Summary of earlier work (compacted by kiln):\n");
            for m in &middle {
                match m {
                    Message::Assistant { text, tool_calls } => {
                        if !text.trim().is_empty() {
                            summary.push_str(&format!(
                                "- you said: {}\n",
                                text.lines()
                                    .next()
                                    .unwrap_or("")
                                    .chars()
                                    .take(200)
                                    .collect::<String>()
                            ));
                        }
                        for c in tool_calls {
                            summary.push_str(&format!(
                                "- you called {} {}\n",
                                c.name,
                                c.arguments.chars().take(200).collect::<String>()
                            ));
                        }
                    }
                    Message::User { text } => summary.push_str(&format!(
                        "- user: {}\n",
                        text.chars().take(200).collect::<String>()
                    )),
                    Message::ToolResult { .. } => {}
                }
            }
            messages.insert(1, Message::User { text: summary });
        }
    }
    // Still too large (the recent results are big): elide all but the newest result.
    if chars(messages) > limit {
        let n = messages.len();
        for m in messages.iter_mut().take(n.saturating_sub(2)) {
            if let Message::ToolResult { content, .. } = m
                && content.len() > 200
            {
                *content = format!(
                    "[elided by kiln to save context: {} chars; call the tool again if you need it]",
                    content.len()
                );
                elided += 1;
            }
        }
    }
    let after = chars(messages);
    (after < before).then(|| {
        format!("context compacted: {before} → {after} characters ({elided} tool results elided)")
    })
}

fn canonical(args: &str) -> String {
    serde_json::from_str::<Value>(args)
        .map(|v| v.to_string())
        .unwrap_or_else(|_| args.to_string())
}

fn manual_system(tools: &[ToolDef]) -> String {
    let mut s = String::from(
        "You cannot call tools natively. Answer EVERY turn with exactly one JSON object and nothing else:\n\
         {\"tool\": \"<tool name>\", \"arguments\": { ... }}   to call a tool, or\n\
         {\"final_answer\": \"<summary of what you did>\"}   when the task is done.\n\nTools:\n",
    );
    for t in tools {
        s.push_str(&format!(
            "- {}: {} Arguments schema: {}\n",
            t.name, t.description, t.parameters
        ));
    }
    s
}

/// A manual-mode answer: a tool call or the final answer.
#[derive(Debug)]
enum Decision {
    /// Call a tool (the call's id is set by the turn).
    Call(ToolCall),
    /// The task is done: the summary.
    Final(String),
}

/// Why a manual-mode answer is not a decision (fed back to the model).
#[derive(Debug, thiserror::Error)]
enum DecisionError {
    /// No `{...}` in the answer.
    #[error("no JSON object found")]
    NoObject,
    /// The object does not parse.
    #[error("not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// The object names no tool and no final answer.
    #[error("the object has neither `tool` nor `final_answer`")]
    Neither,
}

/// Parse a manual-mode decision.
fn parse_decision(text: &str) -> Result<Decision, DecisionError> {
    let start = text.find('{').ok_or(DecisionError::NoObject)?;
    let end = text.rfind('}').ok_or(DecisionError::NoObject)?;
    let v: Value = serde_json::from_str(text.get(start..=end).ok_or(DecisionError::NoObject)?)?;
    if let Some(summary) = v.get(FINAL_ANSWER) {
        return Ok(Decision::Final(
            summary
                .as_str()
                .map(String::from)
                .unwrap_or_else(|| summary.to_string()),
        ));
    }
    let name = v
        .get("tool")
        .and_then(Value::as_str)
        .ok_or(DecisionError::Neither)?;
    let args = v.get("arguments").cloned().unwrap_or(json!({}));
    Ok(Decision::Call(ToolCall {
        id: String::new(),
        name: name.to_string(),
        arguments: args.to_string(),
    }))
}

/// Run the agent on `task`, continuing `history` (interactive mode keeps the conversation).
pub async fn run_agent(
    task: &str,
    history: Vec<Message>,
    opts: &AgentOptions,
    ctx: RunCtx<'_>,
) -> Result<AgentResult, AgentError> {
    let ws = crate::edit::Workspace::open(ctx.workspace)?;
    let settings = opts.tool_settings();
    let registry = ctx.plugins;
    let toolbox = Toolbox::new(registry, &settings).await?;
    let system = system_prompt(opts, &toolbox);
    let new = NewLoop {
        kind: opts.kind,
        runner: "-".into(),
        targets: vec![],
        format: opts.default_format.clone(),
        model: ctx.model.label(),
        max_iters: opts.max_steps as i64,
        parent: opts.parent,
    };
    let mut run = Run::begin(ctx, &new)?;
    let mut messages = history;
    messages.push(Message::User {
        text: task.to_string(),
    });
    let mut agent = Agent {
        opts,
        settings,
        toolbox,
        ws,
        system,
        messages,
        records: Vec::new(),
        seen: BTreeMap::new(),
        writes: 0,
        commands: 0,
        parse_failures: 0,
        compacted_for_overflow: false,
        turn: 0,
        turn_open: false,
        content: String::new(),
        error: None,
        cap_note: None,
        changes: Changes::default(),
    };
    let stop = agent.drive(&mut run).await;
    // Every turn that started ends, also one a cap, an error or Ctrl-C stopped.
    if agent.turn_open {
        agent.end_turn(&mut run, vec![]);
    }
    agent.finish(&mut run, stop)
}

fn system_prompt(opts: &AgentOptions, toolbox: &Toolbox<'_>) -> String {
    let mut system = match &opts.system_prompt {
        Some(own) => format!("{}\n", own.trim_end()),
        None => String::from(
            "You are a careful coding agent working in a repository. Use the tools to read code before changing it, make focused changes with write_patch, run checks with run_cmd when available, and call final_answer with a summary when the task is done. Paths are relative to the workspace root.\n",
        ),
    };
    if let Some(extra) = &opts.system {
        system.push_str(extra);
        system.push('\n');
    }
    if opts.manual {
        system.push('\n');
        system.push_str(&manual_system(&toolbox.defs()));
    }
    system
}

/// What the THINK step produced.
enum Think {
    /// The model's answer.
    Answer(crate::llm::ChatResponse),
    /// The context was compacted after an overflow: ask again in the same turn.
    Again,
    /// The run ends.
    Stop(StopReason),
}

/// The agent's own state; the run core and the toolbox do the rest.
struct Agent<'o, 'r> {
    opts: &'o AgentOptions,
    settings: ToolSettings,
    toolbox: Toolbox<'r>,
    /// The workspace, opened once for the run's calls.
    ws: crate::edit::Workspace,
    system: String,
    messages: Vec<Message>,
    records: Vec<ToolCallRecord>,
    /// Per call (name + canonical arguments): the write count when it was last made, and how
    /// many times in a row it was made with nothing written in between.
    seen: BTreeMap<String, (u64, u32)>,
    writes: u32,
    commands: u32,
    parse_failures: u32,
    compacted_for_overflow: bool,
    turn: u32,
    /// A `turn.start` was emitted and its `turn.end` not yet.
    turn_open: bool,
    content: String,
    /// What failed, when the run ends on a failure (the result's `error`).
    error: Option<String>,
    /// Why a cap stopped the run, when `content` keeps the model's last text instead.
    cap_note: Option<String>,
    changes: Changes,
}

/// The text of the model's last answer that said something.
fn last_assistant_text(messages: &[Message]) -> String {
    messages
        .iter()
        .rev()
        .find_map(|m| match m {
            Message::Assistant { text, .. } if !text.trim().is_empty() => Some(text.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

impl Agent<'_, '_> {
    /// THINK, ACT, OBSERVE until a stop.
    async fn drive(&mut self, run: &mut Run<'_>) -> Result<StopReason, AgentError> {
        loop {
            if self.turn >= self.opts.max_steps {
                // The result keeps what the model last said; the cap is the run's error line.
                self.content = last_assistant_text(&self.messages);
                self.cap_note = Some(format!(
                    "the step cap ({}) was reached",
                    self.opts.max_steps
                ));
                return Ok(StopReason::MaxSteps);
            }
            self.turn += 1;
            let turn = self.turn;
            run.emit(Event::TurnStart { turn });
            self.turn_open = true;
            // A retry after a context overflow is the same turn: no second `turn.start`.
            let resp = loop {
                match self.think(run).await {
                    Think::Answer(r) => break r,
                    Think::Again => continue,
                    Think::Stop(reason) => return Ok(reason),
                }
            };
            let calls = match self.decide(run, &resp) {
                Ok(calls) => calls,
                Err(Some(reason)) => return Ok(reason),
                Err(None) => continue,
            };
            if let Some(reason) = self.admit(run, &calls) {
                return Ok(reason);
            }
            let t = Turn {
                turn,
                settings: &self.settings,
                ws: &self.ws,
            };
            let Some(results) =
                super::tools::replayed::act(&self.toolbox, run, &t, &calls, &mut self.changes)
                    .await?
            else {
                return Ok(StopReason::Cancelled);
            };
            self.observe(run, &calls, results);
        }
    }

    /// Compact when the conversation is large, run the before-LLM hook (which may rewrite the
    /// messages), ask the model, run the after-LLM hook.
    async fn think(&mut self, run: &mut Run<'_>) -> Think {
        let turn = self.turn;
        if chars(&self.messages) > self.opts.context_chars
            && let Some(note) = compact(&mut self.messages, self.opts.context_chars, false)
        {
            run.emit(Event::AgentNotice { message: note });
        }
        if let Some(h) = &self.opts.hooks.before_llm {
            let input = json!({ "turn": turn, "messages": self.messages });
            let hook = run_hook(h, &input, run.workspace, self.opts.require_confinement).await;
            let ok = hook.ok;
            let rewritten = serde_json::from_str::<Value>(hook.stdout.trim())
                .ok()
                .and_then(|v| v.get("messages").cloned())
                .map(serde_json::from_value::<Vec<Message>>);
            match rewritten {
                Some(Ok(m)) if ok && !m.is_empty() => self.messages = m,
                Some(Err(e)) => run.emit(Event::AgentNotice {
                    message: format!("the before-LLM hook's messages were ignored: {e}"),
                }),
                _ => {}
            }
        }
        let req = ChatRequest {
            system: Some(self.system.clone()),
            messages: self.messages.clone(),
            tools: if self.opts.manual {
                vec![]
            } else {
                self.toolbox.defs()
            },
            max_tokens: None,
        };
        let resp = match run.ask(turn, &req, true).await {
            Ok(r) => r,
            Err(AskError::Cancelled) => return Think::Stop(StopReason::Cancelled),
            Err(AskError::Budget(e)) => {
                self.content = e.to_string();
                return Think::Stop(StopReason::Budget);
            }
            Err(AskError::Model(LlmError::ContextOverflow { message })) => {
                return self.overflowed(run, message);
            }
            Err(AskError::Model(e)) => {
                self.content = e.to_string();
                self.error = Some(format!("the model call failed: {e}"));
                run.emit(Event::Error {
                    message: format!("the model call failed: {e}"),
                });
                return Think::Stop(StopReason::Error);
            }
        };
        if let Some(h) = &self.opts.hooks.after_llm {
            let input = json!({ "turn": turn, "text": resp.text, "tool_calls": resp.tool_calls, "usage": resp.usage });
            run_hook(h, &input, run.workspace, self.opts.require_confinement).await;
        }
        Think::Answer(resp)
    }

    /// The context overflowed: compact once and ask again, else stop.
    fn overflowed(&mut self, run: &mut Run<'_>, message: String) -> Think {
        if self.compacted_for_overflow {
            self.error = Some(format!(
                "the model's context overflowed again after compaction: {message}"
            ));
            self.content = message;
            return Think::Stop(StopReason::ContextExceeded);
        }
        self.compacted_for_overflow = true;
        let note = compact(&mut self.messages, self.opts.context_chars / 2, true)
            .unwrap_or_else(|| "context compacted".into());
        run.emit(Event::AgentNotice {
            message: format!("the model's context overflowed ({message}); {note}"),
        });
        Think::Again
    }

    /// The calls of this turn (native, or one manual decision). `Err(Some)`: the run ends;
    /// `Err(None)`: the turn ends without calls (a malformed manual answer was fed back).
    fn decide(
        &mut self,
        run: &mut Run<'_>,
        resp: &crate::llm::ChatResponse,
    ) -> Result<Vec<ToolCall>, Option<StopReason>> {
        let turn = self.turn;
        let calls = if self.opts.manual {
            self.messages.push(Message::Assistant {
                text: resp.text.clone(),
                tool_calls: vec![],
            });
            match parse_decision(&resp.text) {
                Ok(Decision::Call(mut call)) => {
                    self.parse_failures = 0;
                    call.id = format!("manual_{turn}");
                    vec![call]
                }
                Ok(Decision::Final(summary)) => {
                    self.content = summary;
                    self.end_turn(run, vec![FINAL_ANSWER.into()]);
                    return Err(Some(StopReason::Complete));
                }
                Err(why) => return Err(self.malformed(run, why.to_string())),
            }
        } else {
            self.messages.push(Message::Assistant {
                text: resp.text.clone(),
                tool_calls: resp.tool_calls.clone(),
            });
            resp.tool_calls.clone()
        };
        if calls.is_empty() {
            self.content = resp.text.clone();
            self.end_turn(run, vec![]);
            return Err(Some(StopReason::Complete));
        }
        Ok(calls)
    }

    /// A manual answer that is not a decision: fed back, up to the tolerated count.
    fn malformed(&mut self, run: &mut Run<'_>, why: String) -> Option<StopReason> {
        self.parse_failures += 1;
        let (n, max) = (self.parse_failures, self.opts.max_parse_retries);
        run.emit(Event::AgentNotice {
            message: format!(
                "unparseable decision ({why}); malformed answer {n} in a row (at most {max} tolerated)"
            ),
        });
        if n > max {
            self.content = format!(
                "the model did not answer with a valid JSON decision {n} times in a row: {why}"
            );
            self.error = Some(self.content.clone());
            return Some(StopReason::Error);
        }
        self.messages.push(Message::User {
            text: format!("Your answer could not be used: {why}. Reply with exactly one JSON object: {{\"tool\": ..., \"arguments\": {{...}}}} or {{\"final_answer\": \"...\"}}."),
        });
        self.end_turn(run, vec![]);
        None
    }

    fn end_turn(&mut self, run: &mut Run<'_>, tool_calls: Vec<String>) {
        self.turn_open = false;
        run.emit(Event::TurnEnd {
            turn: self.turn,
            tool_calls,
        });
    }

    /// The final answer (or review), caps and repeats, checked before anything of the turn
    /// runs. An identical call is a repeat only when nothing was written since it was made.
    fn admit(&mut self, run: &mut Run<'_>, calls: &[ToolCall]) -> Option<StopReason> {
        let names: Vec<String> = calls.iter().map(|c| c.name.clone()).collect();
        for c in calls {
            if c.name == FINAL_ANSWER || c.name == SUBMIT_REVIEW {
                self.content = if c.name == FINAL_ANSWER {
                    serde_json::from_str::<FinalAnswerArgs>(&c.arguments)
                        .unwrap_or_default()
                        .summary
                } else {
                    serde_json::from_str::<Value>(&c.arguments)
                        .unwrap_or(Value::Null)
                        .to_string()
                };
                self.records.push(ToolCallRecord {
                    turn: self.turn,
                    name: c.name.clone(),
                    arguments: c.arguments.clone(),
                    ok: true,
                    status: Default::default(),
                    output: String::new(),
                });
                self.end_turn(run, names);
                return Some(StopReason::Complete);
            }
            let key = format!("{}:{}", c.name, canonical(&c.arguments));
            let epoch = self.changes.writes;
            let entry = self.seen.entry(key).or_insert((epoch, 0));
            if entry.0 != epoch {
                *entry = (epoch, 0);
            }
            entry.1 += 1;
            if entry.1 > self.opts.max_repeats {
                self.content = format!(
                    "the same call ({} {}) was repeated {} times with nothing written in between",
                    c.name, c.arguments, entry.1
                );
                self.end_turn(run, names);
                return Some(StopReason::RepeatedCall);
            }
            match self.toolbox.kind(&c.name) {
                Some(Kind::Write) => {
                    self.writes += 1;
                    if self.writes > self.opts.max_writes {
                        self.content =
                            format!("the write cap ({}) was reached", self.opts.max_writes);
                        self.end_turn(run, names);
                        return Some(StopReason::MaxWrites);
                    }
                }
                Some(Kind::Exec) => {
                    self.commands += 1;
                    if self.commands > self.opts.max_commands {
                        self.content =
                            format!("the command cap ({}) was reached", self.opts.max_commands);
                        self.end_turn(run, names);
                        return Some(StopReason::MaxCommands);
                    }
                }
                _ => {}
            }
        }
        None
    }

    /// Append the results to the conversation (capped; the store has the whole text).
    fn observe(&mut self, run: &mut Run<'_>, calls: &[ToolCall], results: Vec<CallResult>) {
        for (c, r) in calls.iter().zip(results) {
            let (text, is_error) = (r.outcome.text(), r.outcome.is_error());
            self.records.push(ToolCallRecord {
                turn: self.turn,
                name: c.name.clone(),
                arguments: c.arguments.clone(),
                ok: !is_error,
                status: r.outcome.status(),
                output: text.chars().take(2000).collect(),
            });
            let shown = cap(text, self.opts.result_cap);
            self.messages.push(if self.opts.manual {
                Message::User {
                    text: format!(
                        "Result of {} ({}):\n{shown}",
                        c.name,
                        if is_error { "error" } else { "ok" }
                    ),
                }
            } else {
                Message::ToolResult {
                    id: c.id.clone(),
                    content: shown,
                    is_error,
                }
            });
        }
        self.end_turn(run, calls.iter().map(|c| c.name.clone()).collect());
    }

    /// Close the run (also after a host error, which is then returned).
    fn finish(
        self,
        run: &mut Run<'_>,
        stop: Result<StopReason, AgentError>,
    ) -> Result<AgentResult, AgentError> {
        let turn = self.turn;
        let _ = run.store.set_iters(run.id, turn as i64);
        let reason = match stop {
            Ok(r) => r,
            Err(e) => {
                let message = e.to_string();
                run.emit(Event::Error {
                    message: message.clone(),
                });
                let _ = run.finish(StopReason::Error, &message, Some(&message));
                return Err(e);
            }
        };
        let success = reason.is_success();
        // The stored summary is the content, or why a cap stopped a run that said nothing;
        // the stored error says why it did not succeed.
        let cap_note = self.cap_note.as_deref();
        let summary = match cap_note {
            Some(note) if self.content.trim().is_empty() => note,
            _ => self.content.as_str(),
        };
        let why = self
            .error
            .as_deref()
            .or(cap_note)
            .unwrap_or(self.content.as_str());
        run.finish(reason, summary, (!success).then_some(why))?;
        let error = if reason == StopReason::Error && self.error.is_none() {
            Some(self.content.clone())
        } else {
            self.error
        };
        let result = AgentResult {
            content: self.content,
            error,
            messages: self.messages,
            tool_calls: self.records,
            usage: run.usage(),
            turns: turn,
            stop_reason: reason,
            success,
            loop_id: run.id,
            changed_files: self.changes.files,
        };
        run.emit(Event::AgentResult(result.clone()));
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_parse_or_explain() {
        let Decision::Call(c) =
            parse_decision("ok: {\"tool\": \"read_files\", \"arguments\": {\"paths\": [\"a\"]}}")
                .unwrap()
        else {
            panic!("a call")
        };
        assert_eq!(
            (c.name.as_str(), c.arguments.as_str()),
            ("read_files", r#"{"paths":["a"]}"#)
        );
        assert!(matches!(
            parse_decision(r#"{"final_answer": "done"}"#).unwrap(),
            Decision::Final(s) if s == "done"
        ));
        assert!(parse_decision("I will read the file").is_err());
        assert!(parse_decision("{\"tool\": ").is_err());
        assert!(
            parse_decision("{\"action\": 1}")
                .unwrap_err()
                .to_string()
                .contains("neither")
        );
    }

    #[test]
    fn compaction_elides_then_summarises_keeping_task_and_recent_turns() {
        let mut m = vec![Message::User {
            text: "TASK".into(),
        }];
        for i in 0..10 {
            m.push(Message::Assistant {
                text: String::new(),
                tool_calls: vec![ToolCall {
                    id: format!("c{i}"),
                    name: "read_files".into(),
                    arguments: "{}".into(),
                }],
            });
            m.push(Message::ToolResult {
                id: format!("c{i}"),
                content: "x".repeat(1000),
                is_error: false,
            });
        }
        let note = compact(&mut m, 100_000, false).unwrap();
        assert!(note.contains("tool results elided"));
        assert!(matches!(
            &m[1],
            Message::ToolResult { .. } | Message::Assistant { .. }
        ));
        compact(&mut m, 10, true);
        assert!(matches!(&m[0], Message::User { text } if text == "TASK"));
        assert!(
            matches!(&m[1], Message::User { text } if text.starts_with("Summary of earlier work"))
        );
        assert!(
            !matches!(&m[2], Message::ToolResult { .. }),
            "the kept tail never starts with an orphan tool result"
        );
    }
}

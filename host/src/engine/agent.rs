//! The agent loop (seeds 002 and 004): THINK (send messages and tool schemas), ACT (run the
//! tool calls: read-only ones in parallel, writes and commands in order, each under a timeout
//! and the before/after hooks), OBSERVE (append results), until the model answers without a
//! tool call or calls `final_answer`, or a cap is reached. Every end has a stop reason:
//! `complete`, `max_steps`, `max_writes`, `max_commands`, `repeated_call`, `context_exceeded`,
//! `error`, `cancelled`. A manual mode serves models without native tool calling: the model
//! answers with one JSON decision, and a malformed one is fed back (a bounded number of times).

use super::events::Event;
use super::fix::{
    FixDeps, FixOptions, cancelled, compile_loop_tool, history_tool, history_tool_defs, run_fix,
};
use super::model::ModelSource;
use crate::edit::{self, ApplyOptions, Workspace};
use crate::llm::{ChatRequest, LlmError, Message, ToolCall, ToolDef, Usage};
use crate::plugin::{Plugin, PluginKind, Registry};
use crate::store::{NewLoop, Store};
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// Hook commands (`[agent.hooks]` in kiln.toml). Each gets a JSON object on stdin.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Hooks {
    /// Before each tool call: `{"tool","arguments"}` in; `{"decision":"allow"|"deny","reason",
    /// "arguments"}` out (rewritten arguments optional). A non-zero exit denies.
    pub before_tool: Option<String>,
    /// After each tool call: `{"tool","arguments","result","is_error"}` in.
    pub after_tool: Option<String>,
    /// Before each model call: `{"turn","messages"}` in (count of messages).
    pub before_llm: Option<String>,
    /// After each model call: `{"turn","text","tool_calls"}` in.
    pub after_llm: Option<String>,
}

/// Options.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// Turn cap.
    pub max_steps: u32,
    /// `write_patch` cap.
    pub max_writes: u32,
    /// `run_cmd` cap.
    pub max_commands: u32,
    /// Identical calls allowed before `repeated_call`.
    pub max_repeats: u32,
    /// Run every call in order (no parallel read-only calls).
    pub sequential: bool,
    /// Per-tool timeout.
    pub tool_timeout: Duration,
    /// JSON-decision mode for models without tool calling.
    pub manual: bool,
    /// Malformed manual answers tolerated in a row.
    pub max_parse_retries: u32,
    /// Conversation size (characters) at which it is compacted.
    pub context_chars: usize,
    /// Tool result size shown to the model (the full text goes to the store).
    pub result_cap: usize,
    /// Extra system prompt.
    pub system: Option<String>,
    /// Hooks.
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
            default_format: "search-replace".into(),
            compile_cmd: None,
            protected: crate::path::Protected::default(),
            external: crate::mcp::ExternalTools::default(),
        }
    }
}

/// One tool call as made.
#[derive(Debug, Clone, Serialize)]
pub struct ToolCallRecord {
    /// Turn.
    pub turn: u32,
    /// Tool.
    pub name: String,
    /// Arguments (JSON text).
    pub arguments: String,
    /// It succeeded.
    pub ok: bool,
}

/// The result (seed 004).
#[derive(Debug, Clone, Serialize)]
pub struct AgentResult {
    /// Final content (the final answer or the last text).
    pub content: String,
    /// The whole conversation.
    pub messages: Vec<Message>,
    /// Every tool call made.
    pub tool_calls: Vec<ToolCallRecord>,
    /// Usage by class.
    pub usage: Usage,
    /// Turns taken.
    pub turns: u32,
    /// Why it stopped.
    pub stop_reason: String,
    /// True only for `complete`.
    pub success: bool,
    /// Run id in the store.
    pub loop_id: i64,
}

/// What the loop needs.
pub struct AgentDeps<'a> {
    /// Workspace root.
    pub workspace: &'a Path,
    /// Loaded plugins (tool plugins, edit formats, runners).
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

/// Host errors: never swallowed into a result.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    /// A plugin failed to describe its tools.
    #[error(transparent)]
    Plugin(#[from] crate::plugin::PluginError),
    /// The workspace could not be opened.
    #[error(transparent)]
    Edit(#[from] crate::edit::EditError),
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Read,
    Write,
    Command,
    Other,
}

enum Imp<'a> {
    Plugin(&'a Plugin, String),
    AstRefactor(&'a Plugin),
    WritePatch,
    EvaluateWork,
    FinalAnswer,
    CompileLoop,
    History,
    External(std::sync::Arc<crate::mcp::ExternalServer>, String),
}

struct AgentTool<'a> {
    def: ToolDef,
    kind: Kind,
    imp: Imp<'a>,
}

/// One tool as the agent offers it to the model.
#[derive(Debug, Clone, Serialize)]
pub struct ToolEntry {
    /// The name the model calls (namespaced `plugin__tool` on a collision).
    pub name: String,
    /// The plugin that implements it; `None` for the host's built-in tools.
    pub plugin: Option<String>,
    /// Description shown to the model.
    pub description: String,
    /// It only reads (may run in parallel with other reads).
    pub read_only: bool,
    /// The MCP server that implements it (`[mcp.servers.NAME]`): external, not sandboxed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mcp_server: Option<String>,
}

/// Every tool an agent would be offered with `registry` (plugin tools and the host's
/// built-ins, `compile_loop` included), for `kiln tool list`.
pub async fn tool_catalog(registry: &Registry) -> Result<Vec<ToolEntry>, AgentError> {
    tool_catalog_with(registry, &crate::mcp::ExternalTools::default()).await
}

/// [`tool_catalog`] plus the tools of running MCP servers.
pub async fn tool_catalog_with(
    registry: &Registry,
    external: &crate::mcp::ExternalTools,
) -> Result<Vec<ToolEntry>, AgentError> {
    let opts = AgentOptions {
        compile_cmd: Some(String::new()),
        external: external.clone(),
        ..Default::default()
    };
    Ok(tools(registry, &opts)
        .await?
        .into_iter()
        .map(|t| ToolEntry {
            name: t.def.name,
            plugin: match &t.imp {
                Imp::Plugin(p, _) | Imp::AstRefactor(p) => Some(p.name.clone()),
                _ => None,
            },
            description: t.def.description,
            read_only: matches!(t.kind, Kind::Read),
            mcp_server: match &t.imp {
                Imp::External(s, _) => Some(s.name.clone()),
                _ => None,
            },
        })
        .collect())
}

/// One tool of a tool plugin, named as the agent offers it.
pub struct PluginTool<'a> {
    /// Name, description and argument schema as the model sees them (`plugin__tool` on a
    /// collision).
    pub def: ToolDef,
    /// The plugin.
    pub plugin: &'a Plugin,
    /// The plugin's own name for the tool.
    pub tool: String,
    /// It only reads.
    pub read_only: bool,
}

/// The tool plugins' tools exactly as an agent is offered them (for `kiln mcp`).
pub async fn plugin_tools(registry: &Registry) -> Result<Vec<PluginTool<'_>>, AgentError> {
    let opts = AgentOptions {
        compile_cmd: Some(String::new()),
        ..Default::default()
    };
    Ok(tools(registry, &opts)
        .await?
        .into_iter()
        .filter_map(|t| match t.imp {
            Imp::Plugin(plugin, tool) => Some(PluginTool {
                def: t.def,
                plugin,
                tool,
                read_only: t.kind == Kind::Read,
            }),
            _ => None,
        })
        .collect())
}

async fn tools<'a>(
    registry: &'a Registry,
    opts: &AgentOptions,
) -> Result<Vec<AgentTool<'a>>, AgentError> {
    let mut out: Vec<AgentTool<'a>> = Vec::new();
    let mut plugin_tools = Vec::new();
    for p in registry.all().iter().filter(|p| p.kind == PluginKind::Tool) {
        for t in p.tool_list().await? {
            plugin_tools.push((p, t));
        }
    }
    let builtin_names = [
        "write_patch",
        "evaluate_work",
        "final_answer",
        "compile_loop",
        "get_loops",
        "get_loop_detail",
    ];
    for (p, t) in &plugin_tools {
        let collides = plugin_tools
            .iter()
            .filter(|(_, o)| o.name == t.name)
            .count()
            > 1
            || builtin_names.contains(&t.name.as_str());
        let name = if collides {
            format!("{}__{}", p.name, t.name)
        } else {
            t.name.clone()
        };
        let kind = if t.name == "run_cmd" {
            Kind::Command
        } else if t.read_only {
            Kind::Read
        } else {
            Kind::Other
        };
        let schema = serde_json::from_str(&t.schema).unwrap_or_else(|_| json!({"type": "object"}));
        // The host applies what the ast-refactor plugin computes (edit::refactor): a write.
        let (kind, imp) = if p.name == edit::refactor::PLUGIN && t.name == edit::refactor::TOOL {
            (Kind::Write, Imp::AstRefactor(p))
        } else {
            (kind, Imp::Plugin(p, t.name.clone()))
        };
        out.push(AgentTool {
            def: ToolDef {
                name,
                description: t.description.clone(),
                parameters: schema,
            },
            kind,
            imp,
        });
    }
    let b =
        |name: &str, description: &str, parameters: Value, kind: Kind, imp: Imp<'a>| AgentTool {
            def: ToolDef {
                name: name.into(),
                description: description.into(),
                parameters,
            },
            kind,
            imp,
        };
    out.push(b(
        "write_patch",
        &format!("Change a file of the workspace: `patch` in the named edit format (default {}). Applied atomically; refused edits say exactly why.", opts.default_format),
        json!({"type":"object","properties":{"path":{"type":"string"},"patch":{"type":"string"},"format":{"type":"string","enum":["search-replace","udiff","whole","apply-patch"]}},"required":["path","patch"],"additionalProperties":false}),
        Kind::Write,
        Imp::WritePatch,
    ));
    out.push(b(
        "evaluate_work",
        "Ask a separate reviewer for structured feedback (score 0-10, strengths, improvements, suggestions) on files or on the work so far.",
        json!({"type":"object","properties":{"paths":{"type":"array","items":{"type":"string"}},"criteria":{"type":"string"}},"additionalProperties":false}),
        Kind::Other,
        Imp::EvaluateWork,
    ));
    out.push(b(
        "final_answer",
        "Finish the task: give a summary of what was done.",
        json!({"type":"object","properties":{"summary":{"type":"string"}},"required":["summary"],"additionalProperties":false}),
        Kind::Other,
        Imp::FinalAnswer,
    ));
    if opts.compile_cmd.is_some() {
        let t = compile_loop_tool();
        out.push(AgentTool {
            def: t,
            kind: Kind::Write,
            imp: Imp::CompileLoop,
        });
    }
    for def in history_tool_defs() {
        out.push(AgentTool {
            def,
            kind: Kind::Read,
            imp: Imp::History,
        });
    }
    for (server, t) in opts.external.tools() {
        if out.iter().any(|o| o.def.name == t.name) {
            continue;
        }
        out.push(AgentTool {
            def: ToolDef {
                name: t.name.clone(),
                description: t.description.clone(),
                parameters: t.parameters.clone(),
            },
            kind: if t.read_only {
                Kind::Read
            } else {
                Kind::Command
            },
            imp: Imp::External(server.clone(), t.tool.clone()),
        });
    }
    Ok(out)
}

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

fn cap(text: &str, n: usize) -> String {
    if text.len() <= n {
        return text.to_string();
    }
    let end = text.floor_char_boundary(n);
    format!(
        "{}\n[... kiln: result cut at {n} of {} bytes; the full text is in the store ...]",
        &text[..end],
        text.len()
    )
}

/// Run a hook command with `input` on stdin; returns (exit ok, stdout, stderr).
async fn run_hook(cmd: &str, input: &Value, workspace: &Path) -> (bool, String, String) {
    let mut words = cmd.split_whitespace();
    let Some(program) = words.next() else {
        return (true, String::new(), String::new());
    };
    let child = tokio::process::Command::new(program)
        .args(words)
        .current_dir(workspace)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn();
    let Ok(mut child) = child else {
        return (
            false,
            String::new(),
            format!("hook `{cmd}` could not be started"),
        );
    };
    if let Some(mut stdin) = child.stdin.take() {
        use tokio::io::AsyncWriteExt;
        let _ = stdin.write_all(input.to_string().as_bytes()).await;
    }
    match tokio::time::timeout(Duration::from_secs(30), child.wait_with_output()).await {
        Ok(Ok(out)) => (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ),
        _ => (
            false,
            String::new(),
            format!("hook `{cmd}` did not finish in 30 s"),
        ),
    }
}

fn manual_system(tools: &[AgentTool<'_>]) -> String {
    let mut s = String::from(
        "You cannot call tools natively. Answer EVERY turn with exactly one JSON object and nothing else:\n\
         {\"tool\": \"<tool name>\", \"arguments\": { ... }}   to call a tool, or\n\
         {\"final_answer\": \"<summary of what you did>\"}   when the task is done.\n\nTools:\n",
    );
    for t in tools {
        s.push_str(&format!(
            "- {}: {} Arguments schema: {}\n",
            t.def.name, t.def.description, t.def.parameters
        ));
    }
    s
}

/// Parse a manual-mode decision.
fn parse_decision(text: &str) -> Result<Result<ToolCall, String>, String> {
    let start = text.find('{').ok_or("no JSON object found")?;
    let end = text.rfind('}').ok_or("no JSON object found")?;
    let v: Value =
        serde_json::from_str(&text[start..=end]).map_err(|e| format!("not valid JSON: {e}"))?;
    if let Some(summary) = v.get("final_answer") {
        return Ok(Err(summary
            .as_str()
            .map(String::from)
            .unwrap_or_else(|| summary.to_string())));
    }
    let name = v
        .get("tool")
        .and_then(Value::as_str)
        .ok_or("the object has neither `tool` nor `final_answer`")?;
    let args = v.get("arguments").cloned().unwrap_or(json!({}));
    Ok(Ok(ToolCall {
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
    deps: AgentDeps<'_>,
) -> Result<AgentResult, AgentError> {
    let AgentDeps {
        workspace,
        registry,
        model,
        store,
        mut cancel,
        on_event,
    } = deps;
    let tools = tools(registry, opts).await?;
    let ws = Workspace::open(workspace)?;
    let loop_id = store.begin_loop(&NewLoop {
        kind: "agent".into(),
        runner: "-".into(),
        targets: vec![],
        format: opts.default_format.clone(),
        model: model.label(),
        max_iters: opts.max_steps as i64,
        parent: None,
    })?;
    // Events are numbered here; text deltas go straight to the caller while the model streams
    // (they are not stored: the full text is, with the LLM call).
    let seq = std::sync::atomic::AtomicU64::new(0);
    let on_event = std::sync::Mutex::new(on_event);
    let emit = |store: &mut Store, e: Event| {
        let n = seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        let _ = store.record_event(loop_id, n, e.name(), &e.to_json(n, crate::store::now_ms()));
        (on_event.lock().expect("event sink lock"))(&e);
    };
    let mut system = String::from(
        "You are a careful coding agent working in a repository. Use the tools to read code before changing it, make focused changes with write_patch, run checks with run_cmd when available, and call final_answer with a summary when the task is done. Paths are relative to the workspace root.\n",
    );
    if let Some(extra) = &opts.system {
        system.push_str(extra);
        system.push('\n');
    }
    if opts.manual {
        system.push('\n');
        system.push_str(&manual_system(&tools));
    }
    let mut messages = history;
    messages.push(Message::User {
        text: task.to_string(),
    });
    let mut usage = Usage::default();
    let mut records: Vec<ToolCallRecord> = Vec::new();
    let mut seen: BTreeMap<String, u32> = BTreeMap::new();
    let (mut writes, mut commands, mut parse_failures) = (0u32, 0u32, 0u32);
    let mut compacted_for_overflow = false;
    let mut turn = 0u32;
    let mut content = String::new();
    let stop: String = 'run: loop {
        if turn >= opts.max_steps {
            break "max_steps".into();
        }
        turn += 1;
        emit(store, Event::TurnStart { turn });
        if chars(&messages) > opts.context_chars
            && let Some(note) = compact(&mut messages, opts.context_chars, false)
        {
            emit(store, Event::AgentNotice { message: note });
        }
        if let Some(h) = &opts.hooks.before_llm {
            run_hook(
                h,
                &json!({ "turn": turn, "messages": messages.len() }),
                workspace,
            )
            .await;
        }
        let req = ChatRequest {
            system: Some(system.clone()),
            messages: messages.clone(),
            tools: if opts.manual {
                vec![]
            } else {
                tools.iter().map(|t| t.def.clone()).collect()
            },
            max_tokens: None,
        };
        // Retries are shown as they happen and stored once the request is over.
        let mut retries: Vec<(u64, Event)> = Vec::new();
        let mut sink = |d: crate::llm::Delta| {
            let n = seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            let e = match d {
                crate::llm::Delta::Text(text) => Event::TextDelta { text },
                other => match Event::from_retry(&other) {
                    Some(e) => e,
                    None => return,
                },
            };
            (on_event.lock().expect("event sink lock"))(&e);
            if matches!(e, Event::LlmRetry { .. }) {
                retries.push((n, e));
            }
        };
        let resp = tokio::select! {
            r = model.complete_streaming(&req, &mut sink) => r,
            _ = cancelled(&mut cancel) => break 'run "cancelled".into(),
        };
        for (n, e) in retries {
            let _ = store.record_event(loop_id, n, e.name(), &e.to_json(n, crate::store::now_ms()));
        }
        let resp = match resp {
            Ok(r) => r,
            Err(LlmError::ContextOverflow { message }) => {
                let _ = store.record_llm_call(loop_id, turn as i64, &model.label(), Err(&message));
                if compacted_for_overflow {
                    content = message;
                    break "context_exceeded".into();
                }
                compacted_for_overflow = true;
                let note = compact(&mut messages, opts.context_chars / 2, true)
                    .unwrap_or_else(|| "context compacted".into());
                emit(
                    store,
                    Event::AgentNotice {
                        message: format!("the model's context overflowed ({message}); {note}"),
                    },
                );
                turn -= 1;
                continue;
            }
            Err(e) => {
                let _ = store.record_llm_call(
                    loop_id,
                    turn as i64,
                    &model.label(),
                    Err(&e.to_string()),
                );
                content = e.to_string();
                break "error".into();
            }
        };
        usage += resp.usage;
        store.record_llm_call(loop_id, turn as i64, &model.label(), Ok(&resp))?;
        if let Some(h) = &opts.hooks.after_llm {
            run_hook(
                h,
                &json!({ "turn": turn, "text": resp.text, "tool_calls": resp.tool_calls }),
                workspace,
            )
            .await;
        }
        // The calls of this turn (native, or one manual decision).
        let calls: Vec<ToolCall> = if opts.manual {
            match parse_decision(&resp.text) {
                Ok(Ok(mut call)) => {
                    parse_failures = 0;
                    call.id = format!("manual_{turn}");
                    messages.push(Message::Assistant {
                        text: resp.text.clone(),
                        tool_calls: vec![],
                    });
                    vec![call]
                }
                Ok(Err(summary)) => {
                    messages.push(Message::Assistant {
                        text: resp.text.clone(),
                        tool_calls: vec![],
                    });
                    content = summary;
                    emit(
                        store,
                        Event::TurnEnd {
                            turn,
                            tool_calls: vec!["final_answer".into()],
                        },
                    );
                    break "complete".into();
                }
                Err(why) => {
                    parse_failures += 1;
                    messages.push(Message::Assistant {
                        text: resp.text.clone(),
                        tool_calls: vec![],
                    });
                    emit(
                        store,
                        Event::AgentNotice {
                            message: format!(
                                "unparseable decision ({why}); attempt {parse_failures} of {}",
                                opts.max_parse_retries
                            ),
                        },
                    );
                    if parse_failures > opts.max_parse_retries {
                        content = format!(
                            "the model did not answer with a valid JSON decision {parse_failures} times in a row: {why}"
                        );
                        break "error".into();
                    }
                    messages.push(Message::User {
                        text: format!("Your answer could not be used: {why}. Reply with exactly one JSON object: {{\"tool\": ..., \"arguments\": {{...}}}} or {{\"final_answer\": \"...\"}}."),
                    });
                    emit(
                        store,
                        Event::TurnEnd {
                            turn,
                            tool_calls: vec![],
                        },
                    );
                    continue;
                }
            }
        } else {
            messages.push(Message::Assistant {
                text: resp.text.clone(),
                tool_calls: resp.tool_calls.clone(),
            });
            resp.tool_calls.clone()
        };
        if calls.is_empty() {
            content = resp.text.clone();
            emit(
                store,
                Event::TurnEnd {
                    turn,
                    tool_calls: vec![],
                },
            );
            break "complete".into();
        }
        // Caps and the final answer, checked before anything runs.
        for c in &calls {
            if c.name == "final_answer" {
                content = serde_json::from_str::<Value>(&c.arguments)
                    .ok()
                    .and_then(|v| v["summary"].as_str().map(String::from))
                    .unwrap_or_default();
                records.push(ToolCallRecord {
                    turn,
                    name: c.name.clone(),
                    arguments: c.arguments.clone(),
                    ok: true,
                });
                emit(
                    store,
                    Event::TurnEnd {
                        turn,
                        tool_calls: calls.iter().map(|c| c.name.clone()).collect(),
                    },
                );
                break 'run "complete".into();
            }
            let key = format!("{}:{}", c.name, canonical(&c.arguments));
            let count = seen.entry(key).or_insert(0);
            *count += 1;
            if *count > opts.max_repeats {
                content = format!(
                    "the same call ({} {}) was repeated {} times",
                    c.name, c.arguments, *count
                );
                break 'run "repeated_call".into();
            }
            match tools.iter().find(|t| t.def.name == c.name).map(|t| t.kind) {
                Some(Kind::Write) => {
                    writes += 1;
                    if writes > opts.max_writes {
                        content = format!("the write cap ({}) was reached", opts.max_writes);
                        break 'run "max_writes".into();
                    }
                }
                Some(Kind::Command) => {
                    commands += 1;
                    if commands > opts.max_commands {
                        content = format!("the command cap ({}) was reached", opts.max_commands);
                        break 'run "max_commands".into();
                    }
                }
                _ => {}
            }
        }
        // ACT: consecutive read-only plugin calls together, everything else in order.
        let mut results: Vec<(String, bool, u64)> = Vec::with_capacity(calls.len());
        let mut i = 0;
        while i < calls.len() {
            let parallel_end = if opts.sequential {
                i + 1
            } else {
                let mut j = i;
                while j < calls.len()
                    && tools.iter().any(|t| {
                        t.def.name == calls[j].name
                            && t.kind == Kind::Read
                            && matches!(t.imp, Imp::Plugin(..))
                    })
                {
                    j += 1;
                }
                j.max(i + 1)
            };
            if parallel_end - i > 1 {
                let futs: Vec<_> = calls[i..parallel_end]
                    .iter()
                    .map(|c| {
                        let tool = tools.iter().find(|t| t.def.name == c.name);
                        let args = c.arguments.clone();
                        async move {
                            let start = Instant::now();
                            let (r, e) = match tool.map(|t| &t.imp) {
                                Some(Imp::Plugin(p, name)) => {
                                    plugin_call(p, name, &args, opts.tool_timeout).await
                                }
                                _ => ("unknown tool".into(), true),
                            };
                            (r, e, start.elapsed().as_millis() as u64)
                        }
                    })
                    .collect();
                for c in &calls[i..parallel_end] {
                    emit(
                        store,
                        Event::ToolStart {
                            turn,
                            id: c.id.clone(),
                            name: c.name.clone(),
                            arguments: c.arguments.clone(),
                        },
                    );
                }
                let outs = tokio::select! {
                    o = futures_util::future::join_all(futs) => o,
                    _ = cancelled(&mut cancel) => break 'run "cancelled".into(),
                };
                results.extend(outs);
            } else {
                let c = &calls[i];
                emit(
                    store,
                    Event::ToolStart {
                        turn,
                        id: c.id.clone(),
                        name: c.name.clone(),
                        arguments: c.arguments.clone(),
                    },
                );
                let start = Instant::now();
                let mut args = c.arguments.clone();
                let mut denied = None;
                if let Some(h) = &opts.hooks.before_tool {
                    let input = json!({ "tool": c.name, "arguments": serde_json::from_str::<Value>(&args).unwrap_or(Value::Null) });
                    let (ok, out, err) = run_hook(h, &input, workspace).await;
                    let decision: Value = serde_json::from_str(out.trim()).unwrap_or(Value::Null);
                    if !ok || decision["decision"] == "deny" {
                        let reason = decision["reason"]
                            .as_str()
                            .map(String::from)
                            .unwrap_or_else(|| err.trim().to_string());
                        denied = Some(format!(
                            "denied by the before-tool hook: {}",
                            if reason.is_empty() {
                                "no reason given".into()
                            } else {
                                reason
                            }
                        ));
                    } else if let Some(new_args) =
                        decision.get("arguments").filter(|a| a.is_object())
                    {
                        args = new_args.to_string();
                    }
                }
                let (r, e) = match denied {
                    Some(reason) => (reason, true),
                    None => {
                        let tool = tools.iter().find(|t| t.def.name == c.name);
                        let fut = execute(
                            tool,
                            &args,
                            opts,
                            workspace,
                            registry,
                            &ws,
                            model,
                            store,
                            loop_id,
                            on_event_noop(),
                        );
                        tokio::select! {
                            r = fut => r?,
                            _ = cancelled(&mut cancel) => break 'run "cancelled".into(),
                        }
                    }
                };
                results.push((r, e, start.elapsed().as_millis() as u64));
            }
            i = parallel_end;
        }
        // OBSERVE.
        for (c, (result, is_error, ms)) in calls.iter().zip(results) {
            if let Some(h) = &opts.hooks.after_tool {
                run_hook(h, &json!({ "tool": c.name, "arguments": c.arguments, "result": result, "is_error": is_error }), workspace).await;
            }
            store.record_tool_call(
                loop_id,
                turn as i64,
                &c.id,
                &c.name,
                &c.arguments,
                &result,
                is_error,
                ms as i64,
            )?;
            emit(
                store,
                Event::ToolEnd {
                    turn,
                    id: c.id.clone(),
                    name: c.name.clone(),
                    ok: !is_error,
                    duration_ms: ms,
                    preview: result
                        .lines()
                        .next()
                        .unwrap_or("")
                        .chars()
                        .take(200)
                        .collect(),
                },
            );
            records.push(ToolCallRecord {
                turn,
                name: c.name.clone(),
                arguments: c.arguments.clone(),
                ok: !is_error,
            });
            let shown = cap(&result, opts.result_cap);
            if opts.manual {
                messages.push(Message::User {
                    text: format!(
                        "Result of {} ({}):\n{shown}",
                        c.name,
                        if is_error { "error" } else { "ok" }
                    ),
                });
            } else {
                messages.push(Message::ToolResult {
                    id: c.id.clone(),
                    content: shown,
                    is_error,
                });
            }
        }
        emit(
            store,
            Event::TurnEnd {
                turn,
                tool_calls: calls.iter().map(|c| c.name.clone()).collect(),
            },
        );
    };
    let success = stop == "complete";
    store.set_iters(loop_id, turn as i64)?;
    let status = if success { "success" } else { "failed" };
    store.finish_loop(
        loop_id,
        status,
        &stop,
        &content.chars().take(500).collect::<String>(),
        (!success).then_some(content.as_str()),
    )?;
    let result = AgentResult {
        content,
        messages,
        tool_calls: records,
        usage,
        turns: turn,
        stop_reason: stop,
        success,
        loop_id,
    };
    emit(store, Event::AgentResult(result.clone()));
    Ok(result)
}

fn on_event_noop() -> impl FnMut(&Event) + Send {
    |_e: &Event| {}
}

/// One plugin tool call under a deadline, as a tool result `(text, is_error)` (the agent and
/// `kiln mcp`).
pub(crate) async fn plugin_call(
    p: &Plugin,
    name: &str,
    args: &str,
    timeout: Duration,
) -> (String, bool) {
    match tokio::time::timeout(timeout, p.tool_call(name, args)).await {
        Err(_) => (
            format!("tool `{name}` timed out after {} s", timeout.as_secs_f64()),
            true,
        ),
        Ok(Ok(Ok(out))) => (out, false),
        Ok(Ok(Err(e))) => (crate::plugin::describe_call_error(&e), true),
        // A plugin bug (trap, deadline, memory): reported to the model, which can go on.
        Ok(Err(e)) => (e.to_string(), true),
    }
}

#[allow(clippy::too_many_arguments)]
async fn execute(
    tool: Option<&AgentTool<'_>>,
    args: &str,
    opts: &AgentOptions,
    workspace: &Path,
    registry: &Registry,
    ws: &Workspace,
    model: &mut ModelSource,
    store: &mut Store,
    loop_id: i64,
    mut nested_events: impl FnMut(&Event) + Send,
) -> Result<(String, bool), AgentError> {
    let Some(tool) = tool else {
        return Ok((
            "unknown tool; call one of the tools you were given".into(),
            true,
        ));
    };
    let v: Value = match serde_json::from_str(args) {
        Ok(v) => v,
        Err(e) => return Ok((format!("arguments are not valid JSON: {e}"), true)),
    };
    let timeout = opts.tool_timeout;
    Ok(match &tool.imp {
        Imp::Plugin(p, name) => plugin_call(p, name, args, timeout).await,
        Imp::AstRefactor(p) => {
            edit::refactor::ast_refactor_tool(p, ws, args, &opts.protected, timeout).await
        }
        Imp::FinalAnswer => ("done".into(), false),
        Imp::WritePatch => {
            let (Some(path), Some(patch)) = (v["path"].as_str(), v["patch"].as_str()) else {
                return Ok(("`path` and `patch` are required".into(), true));
            };
            let fmt_name = v["format"].as_str().unwrap_or(&opts.default_format);
            let format = match registry.get(fmt_name, Some(PluginKind::EditFormat)) {
                Ok(f) => f,
                Err(e) => return Ok((e.to_string(), true)),
            };
            let apply = ApplyOptions {
                protected: opts.protected.clone(),
                ..Default::default()
            };
            edit::apply_as_tool_result(
                "write_patch",
                format,
                ws,
                patch,
                &[path.to_string()],
                &apply,
                timeout,
            )
            .await
        }
        Imp::EvaluateWork => {
            let mut material = String::new();
            for p in v["paths"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                match ws.read(p) {
                    Ok(Some(t)) => {
                        material.push_str(&format!("{p}\n```\n{}\n```\n", cap(&t, 32 * 1024)))
                    }
                    _ => material.push_str(&format!("{p}: (cannot be read)\n")),
                }
            }
            let criteria = v["criteria"]
                .as_str()
                .unwrap_or("correctness, clarity, completeness");
            let req = ChatRequest {
                system: Some("You are a strict code reviewer. Reply with one JSON object only: {\"score\": 0-10, \"strengths\": [..], \"improvements\": [..], \"suggestions\": [..]}.".into()),
                messages: vec![Message::User { text: format!("Criteria: {criteria}\n\n{material}") }],
                tools: vec![],
                max_tokens: None,
            };
            match tokio::time::timeout(timeout, model.complete(&req)).await {
                Err(_) => ("evaluate_work timed out".into(), true),
                Ok(Err(e)) => (format!("the reviewer call failed: {e}"), true),
                Ok(Ok(r)) => {
                    let _ = store.record_llm_call(loop_id, -1, &model.label(), Ok(&r));
                    let text = r.text.trim();
                    let json_part = text
                        .find('{')
                        .and_then(|s| text.rfind('}').map(|e| &text[s..=e]));
                    match json_part.and_then(|j| serde_json::from_str::<Value>(j).ok()) {
                        Some(fb) if fb.get("score").is_some() => (fb.to_string(), false),
                        _ => (json!({ "feedback": text }).to_string(), false),
                    }
                }
            }
        }
        Imp::CompileLoop => {
            let targets: Vec<String> = match (v.get("target_file"), v.get("target_files")) {
                (Some(_), Some(_)) => {
                    return Ok(("give target_file or target_files, not both".into(), true));
                }
                (Some(f), None) => f.as_str().map(|s| vec![s.to_string()]).unwrap_or_default(),
                (None, Some(fs)) => fs
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|x| x.as_str().map(String::from))
                    .collect(),
                (None, None) => {
                    return Ok(("target_file or target_files is required".into(), true));
                }
            };
            let runner = match registry.get("command", Some(PluginKind::Runner)) {
                Ok(r) => r,
                Err(e) => return Ok((e.to_string(), true)),
            };
            let format = match registry.get(&opts.default_format, Some(PluginKind::EditFormat)) {
                Ok(f) => f,
                Err(e) => return Ok((e.to_string(), true)),
            };
            let mut settings = BTreeMap::new();
            settings.insert(
                "cmd".to_string(),
                opts.compile_cmd.clone().unwrap_or_default(),
            );
            let fix = FixOptions {
                targets,
                prompt: v["spec"].as_str().map(String::from),
                lang: v["lang"].as_str().map(String::from),
                runner_settings: settings,
                parent: Some(loop_id),
                protected: opts.protected.clone(),
                ..Default::default()
            };
            let (_tx, rx) = tokio::sync::watch::channel(false);
            let deps = FixDeps {
                workspace,
                runner,
                format,
                model,
                store,
                cancel: rx,
                on_event: &mut nested_events,
            };
            match run_fix(&fix, deps).await {
                Ok(outcome) => (
                    serde_json::to_string(&outcome).unwrap_or_default(),
                    !outcome.ok,
                ),
                Err(e) => (e.to_string(), true),
            }
        }
        Imp::History => history_tool(store, loop_id, &tool.def.name, args),
        Imp::External(server, name) => {
            match tokio::time::timeout(timeout, server.call(name, &v)).await {
                Ok(r) => r,
                Err(_) => (
                    format!(
                        "tool `{}` timed out after {} s",
                        tool.def.name,
                        timeout.as_secs_f64()
                    ),
                    true,
                ),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_parse_or_explain() {
        let c =
            parse_decision("ok: {\"tool\": \"read_files\", \"arguments\": {\"paths\": [\"a\"]}}")
                .unwrap()
                .unwrap();
        assert_eq!(
            (c.name.as_str(), c.arguments.as_str()),
            ("read_files", r#"{"paths":["a"]}"#)
        );
        assert_eq!(
            parse_decision(r#"{"final_answer": "done"}"#)
                .unwrap()
                .unwrap_err(),
            "done"
        );
        assert!(parse_decision("I will read the file").is_err());
        assert!(parse_decision("{\"tool\": ").is_err());
        assert!(
            parse_decision("{\"action\": 1}")
                .unwrap_err()
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

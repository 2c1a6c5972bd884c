//! Tool dispatch shared by every tool-using loop: the table of tools a model is offered (tool
//! plugins, the host's built-ins, MCP servers' tools), the before/after hooks (run for every
//! call, batches included), read-only calls in parallel, per-call timeouts, cancellation, and
//! the record of each call in the store and the event stream.

use super::events::Event;
use super::fix::{FixDeps, FixOptions, compile_loop_tool, run_fix};
use super::history;
use super::run::{Run, cancelled};
use crate::config::Hooks;
use crate::edit::{self, ApplyOptions, Workspace};
use crate::llm::{ChatRequest, Message, ToolCall, ToolDef};
use crate::plugin::{Plugin, PluginError, PluginKind, Registry};
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// What a call may do, for caps, repeats and parallelism.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Only reads (may run in parallel with other reads).
    Read,
    /// Changes the workspace through the host's edit path (counts against the write cap).
    Write,
    /// Runs a program (counts against the command cap).
    Command,
    /// Anything else (a reviewer call, the final answer).
    Other,
}

/// Who implements a tool.
pub(crate) enum Imp<'a> {
    Plugin(&'a Plugin, String),
    /// `ast_refactor`: the ast-refactor plugin computes, the host applies (edit::refactor).
    AstRefactor(&'a Plugin),
    WritePatch,
    WriteFile,
    GeneratePatch,
    EvaluateWork,
    FinalAnswer,
    SubmitReview,
    CompileLoop,
    History,
    External(std::sync::Arc<crate::mcp::ExternalServer>, String),
}

/// One tool as offered.
pub(crate) struct Tool<'a> {
    pub def: ToolDef,
    pub kind: Kind,
    pub imp: Imp<'a>,
}

/// The host's built-in tools, by name (a plugin tool with one of these names is namespaced).
const BUILTINS: [&str; 9] = [
    "write_patch",
    "generate_patch",
    "write_file",
    "evaluate_work",
    "final_answer",
    "submit_review",
    "compile_loop",
    "get_loops",
    "get_loop_detail",
];

/// Built-ins offered only to a loop that names them (`ToolSettings::only`).
const OPT_IN: [&str; 2] = ["write_file", "submit_review"];

/// How tools are offered and run.
#[derive(Debug, Clone)]
pub struct ToolSettings {
    /// Run every call in order (no parallel read-only calls).
    pub sequential: bool,
    /// Per-tool timeout.
    pub timeout: Duration,
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
    /// Offer only these tools (by name); `write_file` and `submit_review` are offered only
    /// when named here.
    pub only: Option<Vec<String>>,
    /// Programs `run_cmd` may run in this loop, checked by the host before the plugin's own
    /// grant (the review phase's narrow list); `None`: the grant alone decides.
    pub command_allowlist: Option<Vec<String>>,
    /// Where the programs `run_cmd` starts may write (the review phase: nowhere).
    pub program_writes: crate::plugin::confine::Writes,
    /// Refuse to run hooks the kernel cannot fully confine (`[sandbox] require_confinement`).
    pub require_confinement: bool,
}

impl Default for ToolSettings {
    fn default() -> Self {
        ToolSettings {
            sequential: false,
            timeout: Duration::from_secs(30),
            hooks: Hooks::default(),
            default_format: "search-replace".into(),
            compile_cmd: None,
            protected: crate::path::Protected::default(),
            external: crate::mcp::ExternalTools::default(),
            only: None,
            command_allowlist: None,
            program_writes: crate::plugin::confine::Writes::default(),
            require_confinement: false,
        }
    }
}

/// One tool as the agent offers it to the model (for `kiln tool list`).
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
pub async fn tool_catalog(registry: &Registry) -> Result<Vec<ToolEntry>, PluginError> {
    tool_catalog_with(registry, &crate::mcp::ExternalTools::default()).await
}

/// [`tool_catalog`] plus the tools of running MCP servers.
pub async fn tool_catalog_with(
    registry: &Registry,
    external: &crate::mcp::ExternalTools,
) -> Result<Vec<ToolEntry>, PluginError> {
    let settings = ToolSettings {
        compile_cmd: Some(String::new()),
        external: external.clone(),
        ..Default::default()
    };
    Ok(Toolbox::new(registry, &settings)
        .await?
        .tools
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
pub async fn plugin_tools(registry: &Registry) -> Result<Vec<PluginTool<'_>>, PluginError> {
    Ok(Toolbox::new(registry, &ToolSettings::default())
        .await?
        .tools
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

/// One call's result as the model sees it (before capping) and how long it took.
#[derive(Debug, Clone)]
pub(crate) struct CallResult {
    pub text: String,
    pub is_error: bool,
    pub ms: u64,
}

/// The tools of one run.
pub(crate) struct Toolbox<'r> {
    pub tools: Vec<Tool<'r>>,
    registry: &'r Registry,
}

fn builtin<'a>(
    name: &str,
    description: &str,
    parameters: Value,
    kind: Kind,
    imp: Imp<'a>,
) -> Tool<'a> {
    Tool {
        def: ToolDef {
            name: name.into(),
            description: description.into(),
            parameters,
        },
        kind,
        imp,
    }
}

impl<'r> Toolbox<'r> {
    /// The table: plugin tools (namespaced on a collision), the built-ins, MCP tools.
    pub async fn new(registry: &'r Registry, s: &ToolSettings) -> Result<Self, PluginError> {
        let mut tools = Self::plugin_table(registry).await?;
        tools.extend(Self::builtins(s));
        for (server, t) in s.external.tools() {
            if tools.iter().any(|o| o.def.name == t.name) {
                continue;
            }
            tools.push(Tool {
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
        match &s.only {
            Some(only) => tools.retain(|t| only.contains(&t.def.name)),
            None => tools.retain(|t| !OPT_IN.contains(&t.def.name.as_str())),
        }
        Ok(Toolbox { tools, registry })
    }

    async fn plugin_table(registry: &'r Registry) -> Result<Vec<Tool<'r>>, PluginError> {
        let mut plugin_tools = Vec::new();
        for p in registry.all().iter().filter(|p| p.kind == PluginKind::Tool) {
            for t in p.tool_list().await? {
                plugin_tools.push((p, t));
            }
        }
        let mut out = Vec::new();
        for (p, t) in &plugin_tools {
            let collides = plugin_tools
                .iter()
                .filter(|(_, o)| o.name == t.name)
                .count()
                > 1
                || BUILTINS.contains(&t.name.as_str());
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
            let schema =
                serde_json::from_str(&t.schema).unwrap_or_else(|_| json!({"type": "object"}));
            let (kind, imp) = if p.name == edit::refactor::PLUGIN && t.name == edit::refactor::TOOL
            {
                (Kind::Write, Imp::AstRefactor(p))
            } else {
                (kind, Imp::Plugin(p, t.name.clone()))
            };
            out.push(Tool {
                def: ToolDef {
                    name,
                    description: t.description.clone(),
                    parameters: schema,
                },
                kind,
                imp,
            });
        }
        Ok(out)
    }

    fn builtins(s: &ToolSettings) -> Vec<Tool<'r>> {
        let mut out = vec![
            builtin(
                "write_patch",
                &format!(
                    "Change a file of the workspace: `patch` in the named edit format (default {}). Applied atomically; refused edits say exactly why.",
                    s.default_format
                ),
                json!({"type":"object","properties":{"path":{"type":"string"},"patch":{"type":"string"},"format":{"type":"string","enum":["search-replace","udiff","whole","apply-patch"]}},"required":["path","patch"],"additionalProperties":false}),
                Kind::Write,
                Imp::WritePatch,
            ),
            builtin(
                "generate_patch",
                "Have a separate model call write the change: it is shown the files and the instruction and answers with an edit, which kiln checks (one failed attempt is fed back) and then applies (`apply`, default true) or returns unapplied.",
                json!({"type":"object","properties":{"instruction":{"type":"string"},"paths":{"type":"array","items":{"type":"string"},"minItems":1},"format":{"type":"string","enum":["search-replace","udiff","whole","apply-patch"]},"apply":{"type":"boolean"}},"required":["instruction","paths"],"additionalProperties":false}),
                Kind::Write,
                Imp::GeneratePatch,
            ),
            builtin(
                "write_file",
                "Create a file of the workspace, or overwrite it whole, with `content`. Written atomically; protected paths (kiln.toml, .kiln/, .git/) are refused.",
                json!({"type":"object","properties":{"path":{"type":"string"},"content":{"type":"string"}},"required":["path","content"],"additionalProperties":false}),
                Kind::Write,
                Imp::WriteFile,
            ),
            builtin(
                "evaluate_work",
                "Ask a separate reviewer for structured feedback (score 0-10, strengths, improvements, suggestions) on files (default: the files changed in this run) or on the work so far.",
                json!({"type":"object","properties":{"paths":{"type":"array","items":{"type":"string"}},"criteria":{"type":"string"}},"additionalProperties":false}),
                Kind::Other,
                Imp::EvaluateWork,
            ),
            builtin(
                "final_answer",
                "Finish the task: give a summary of what was done.",
                json!({"type":"object","properties":{"summary":{"type":"string"}},"required":["summary"],"additionalProperties":false}),
                Kind::Other,
                Imp::FinalAnswer,
            ),
            builtin(
                "submit_review",
                "Finish the review: a summary of the state of the work, a blocker (empty when none: something only a person can resolve) and the items still pending (empty when the task is done).",
                json!({"type":"object","properties":{"summary":{"type":"string"},"blocker":{"type":"string"},"pending":{"type":"array","items":{"type":"string"}}},"required":["summary","blocker","pending"],"additionalProperties":false}),
                Kind::Other,
                Imp::SubmitReview,
            ),
        ];
        if s.compile_cmd.is_some() {
            out.push(Tool {
                def: compile_loop_tool(),
                kind: Kind::Write,
                imp: Imp::CompileLoop,
            });
        }
        for def in history::tool_defs() {
            out.push(Tool {
                def,
                kind: Kind::Read,
                imp: Imp::History,
            });
        }
        out
    }

    /// The schemas offered to the model.
    pub fn defs(&self) -> Vec<ToolDef> {
        self.tools.iter().map(|t| t.def.clone()).collect()
    }

    /// A tool by the name the model calls.
    pub fn get(&self, name: &str) -> Option<&Tool<'r>> {
        self.tools.iter().find(|t| t.def.name == name)
    }

    /// The call's kind (`None` for a tool that does not exist).
    pub fn kind(&self, name: &str) -> Option<Kind> {
        self.get(name).map(|t| t.kind)
    }

    fn parallel_ok(&self, name: &str) -> bool {
        self.get(name)
            .is_some_and(|t| t.kind == Kind::Read && matches!(t.imp, Imp::Plugin(..)))
    }

    /// Run one turn's calls: the before-tool hook for each (it may deny or rewrite), then
    /// consecutive read-only plugin calls together and everything else in order, then the
    /// after-tool hook, a row in the store and a `tool.end` event for each. `None`: the run
    /// was cancelled.
    pub async fn act(
        &self,
        run: &mut Run<'_>,
        turn: u32,
        calls: &[ToolCall],
        s: &ToolSettings,
        ws: &Workspace,
        changed: &mut Changes,
    ) -> Result<Option<Vec<CallResult>>, crate::store::StoreError> {
        let mut results: Vec<CallResult> = Vec::with_capacity(calls.len());
        let mut i = 0;
        while i < calls.len() {
            let mut end = i + 1;
            if !s.sequential {
                while end < calls.len()
                    && self.parallel_ok(&calls[i].name)
                    && self.parallel_ok(&calls[end].name)
                {
                    end += 1;
                }
            }
            let mut prepared = Vec::new();
            for c in &calls[i..end] {
                run.emit(Event::ToolStart {
                    turn,
                    id: c.id.clone(),
                    name: c.name.clone(),
                    arguments: c.arguments.clone(),
                });
                prepared.push(before_tool(s, run.workspace, c).await);
            }
            let outs = if end - i > 1 {
                let mut cancel = run.cancel_signal();
                let futs = calls[i..end]
                    .iter()
                    .zip(&prepared)
                    .map(|(c, p)| async move {
                        let start = Instant::now();
                        let (text, is_error) = match p {
                            Err(denied) => (denied.clone(), true),
                            Ok(args) => match self.get(&c.name).map(|t| &t.imp) {
                                Some(Imp::Plugin(p, name)) => {
                                    plugin_call(p, name, args, s.timeout).await
                                }
                                _ => ("unknown tool".into(), true),
                            },
                        };
                        CallResult {
                            text,
                            is_error,
                            ms: start.elapsed().as_millis() as u64,
                        }
                    });
                tokio::select! {
                    o = futures_util::future::join_all(futs) => o,
                    _ = cancelled(&mut cancel) => return Ok(None),
                }
            } else {
                let start = Instant::now();
                let (text, is_error) = match &prepared[0] {
                    Err(denied) => (denied.clone(), true),
                    Ok(args) => {
                        let mut cancel = run.cancel_signal();
                        let tool = self.get(&calls[i].name);
                        tokio::select! {
                            r = self.execute(tool, args, s, ws, run, changed) => r,
                            _ = cancelled(&mut cancel) => return Ok(None),
                        }
                    }
                };
                vec![CallResult {
                    text,
                    is_error,
                    ms: start.elapsed().as_millis() as u64,
                }]
            };
            for (c, out) in calls[i..end].iter().zip(outs) {
                self.observe(run, turn, c, &out, s).await?;
                results.push(out);
            }
            i = end;
        }
        Ok(Some(results))
    }

    /// The after-tool hook, the store row and the `tool.end` event of one call.
    async fn observe(
        &self,
        run: &mut Run<'_>,
        turn: u32,
        c: &ToolCall,
        out: &CallResult,
        s: &ToolSettings,
    ) -> Result<(), crate::store::StoreError> {
        if let Some(h) = &s.hooks.after_tool {
            let input = json!({ "tool": c.name, "arguments": c.arguments, "result": out.text, "is_error": out.is_error });
            run_hook(h, &input, run.workspace, s.require_confinement).await;
        }
        run.store.record_tool_call(
            run.id,
            turn as i64,
            &c.id,
            &c.name,
            &c.arguments,
            &out.text,
            out.is_error,
            out.ms as i64,
        )?;
        run.emit(Event::ToolEnd {
            turn,
            id: c.id.clone(),
            name: c.name.clone(),
            ok: !out.is_error,
            duration_ms: out.ms,
            preview: out
                .text
                .lines()
                .next()
                .unwrap_or("")
                .chars()
                .take(200)
                .collect(),
        });
        Ok(())
    }

    /// Run one call (not a parallel read): `(text, is_error)`. Files it changed are added to
    /// `changed`.
    async fn execute(
        &self,
        tool: Option<&Tool<'_>>,
        args: &str,
        s: &ToolSettings,
        ws: &Workspace,
        run: &mut Run<'_>,
        changed: &mut Changes,
    ) -> (String, bool) {
        let Some(tool) = tool else {
            return (
                "unknown tool; call one of the tools you were given".into(),
                true,
            );
        };
        let v: Value = match serde_json::from_str(args) {
            Ok(v) => v,
            Err(e) => return (format!("arguments are not valid JSON: {e}"), true),
        };
        match &tool.imp {
            Imp::Plugin(p, name) => {
                if name == "run_cmd"
                    && let Some(denied) = command_refused(s, &v, run.workspace)
                {
                    return (denied, true);
                }
                plugin_call_writing(p, name, args, s.timeout, s.program_writes).await
            }
            Imp::AstRefactor(p) => {
                let (text, is_error, written) =
                    edit::refactor::ast_refactor_tool(p, ws, args, &s.protected, s.timeout).await;
                note_changed(changed, written);
                (text, is_error)
            }
            Imp::FinalAnswer | Imp::SubmitReview => ("done".into(), false),
            Imp::WritePatch => self.write_patch(&v, s, ws, changed).await,
            Imp::WriteFile => self.write_file(&v, s, ws, changed).await,
            Imp::GeneratePatch => self.generate_patch(&v, s, ws, run, changed).await,
            Imp::EvaluateWork => evaluate_work(&v, s, ws, run, changed).await,
            Imp::CompileLoop => self.compile_loop(&v, s, run, changed).await,
            Imp::History => history::answer(run.store, run.id, &tool.def.name, args),
            Imp::External(server, name) => {
                match tokio::time::timeout(s.timeout, server.call(name, &v)).await {
                    Ok(r) => r,
                    Err(_) => (
                        format!(
                            "tool `{}` timed out after {} s",
                            tool.def.name,
                            s.timeout.as_secs_f64()
                        ),
                        true,
                    ),
                }
            }
        }
    }

    async fn write_patch(
        &self,
        v: &Value,
        s: &ToolSettings,
        ws: &Workspace,
        changed: &mut Changes,
    ) -> (String, bool) {
        let (Some(path), Some(patch)) = (v["path"].as_str(), v["patch"].as_str()) else {
            return ("`path` and `patch` are required".into(), true);
        };
        let fmt_name = v["format"].as_str().unwrap_or(&s.default_format);
        let format = match self.registry.get(fmt_name, Some(PluginKind::EditFormat)) {
            Ok(f) => f,
            Err(e) => return (e.to_string(), true),
        };
        let apply = ApplyOptions {
            protected: s.protected.clone(),
            ..Default::default()
        };
        let (text, is_error, written) = edit::apply_as_tool_result(
            "write_patch",
            format,
            ws,
            patch,
            &[path.to_string()],
            &apply,
            s.timeout,
        )
        .await;
        note_changed(changed, written);
        (text, is_error)
    }

    /// A separate model call writes the edit; a failed dry run is fed back once.
    async fn generate_patch(
        &self,
        v: &Value,
        s: &ToolSettings,
        ws: &Workspace,
        run: &mut Run<'_>,
        changed: &mut Changes,
    ) -> (String, bool) {
        let Some(instruction) = v["instruction"].as_str() else {
            return ("`instruction` is required".into(), true);
        };
        let paths: Vec<String> = v["paths"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p.as_str().map(String::from))
            .collect();
        if paths.is_empty() {
            return ("`paths` (one or more files) is required".into(), true);
        }
        let fmt_name = v["format"].as_str().unwrap_or(&s.default_format);
        let format = match self.registry.get(fmt_name, Some(PluginKind::EditFormat)) {
            Ok(f) => f,
            Err(e) => return (e.to_string(), true),
        };
        let instructions = match format.format_instructions(paths.len() > 1).await {
            Ok(i) => i,
            Err(e) => return (e.to_string(), true),
        };
        let (files, shown) = match show_files(ws, &paths) {
            Ok(x) => x,
            Err(e) => return (e.to_string(), true),
        };
        let mut req = ChatRequest {
            system: Some(format!(
                "You write code changes. Answer only with the edit, in this format:\n\n{instructions}"
            )),
            messages: vec![Message::User {
                text: format!("## Instruction\n{instruction}\n\n## Files\n{files}"),
            }],
            tools: vec![],
            max_tokens: None,
        };
        let opts = ApplyOptions {
            dry_run: true,
            shown,
            protected: s.protected.clone(),
        };
        for attempt in 1..=2 {
            let answer = match tokio::time::timeout(s.timeout, run.ask(0, &req, false)).await {
                Err(_) => return ("generate_patch timed out".into(), true),
                Ok(Err(super::run::AskError::Cancelled)) => return ("cancelled".into(), true),
                Ok(Err(super::run::AskError::Budget(e))) => return (e.to_string(), true),
                Ok(Err(super::run::AskError::Model(e))) => {
                    return (format!("the model call failed: {e}"), true);
                }
                Ok(Ok(r)) => r.text,
            };
            let report = match edit::apply_response(format, ws, &answer, &paths, &opts).await {
                Ok(r) => r,
                Err(e) => return (e.to_string(), true),
            };
            if !report.ok {
                let why = report.feedback().unwrap_or_else(|| "no edit found".into());
                if attempt == 1 {
                    req.messages.push(Message::Assistant {
                        text: answer,
                        tool_calls: vec![],
                    });
                    req.messages.push(Message::User {
                        text: format!("That edit does not apply:\n{why}\nAnswer again with an edit that applies to the files as shown."),
                    });
                    continue;
                }
                return (
                    format!(
                        "the generated edit did not apply after one retry:\n{why}\n\nThe edit:\n{answer}"
                    ),
                    true,
                );
            }
            if v["apply"].as_bool() == Some(false) {
                return (
                    json!({ "applied": false, "format": format.name, "patch": answer, "attempts": attempt }).to_string(),
                    false,
                );
            }
            let apply = ApplyOptions {
                dry_run: false,
                ..opts.clone()
            };
            let (text, is_error, written) = edit::apply_as_tool_result(
                "generate_patch",
                format,
                ws,
                &answer,
                &paths,
                &apply,
                s.timeout,
            )
            .await;
            note_changed(changed, written);
            if is_error {
                return (text, true);
            }
            return (
                json!({ "applied": true, "format": format.name, "patch": answer, "attempts": attempt, "report": serde_json::from_str::<Value>(&text).unwrap_or(Value::Null) }).to_string(),
                false,
            );
        }
        unreachable!("two attempts end by returning")
    }

    async fn write_file(
        &self,
        v: &Value,
        s: &ToolSettings,
        ws: &Workspace,
        changed: &mut Changes,
    ) -> (String, bool) {
        let (Some(path), Some(content)) = (v["path"].as_str(), v["content"].as_str()) else {
            return ("`path` and `content` are required".into(), true);
        };
        let format = match self.registry.get("whole", Some(PluginKind::EditFormat)) {
            Ok(f) => f,
            Err(e) => return (e.to_string(), true),
        };
        let apply = ApplyOptions {
            protected: s.protected.clone(),
            ..Default::default()
        };
        let (text, is_error, written) =
            edit::write_whole_file(format, ws, path, content, &apply, s.timeout).await;
        note_changed(changed, written);
        (text, is_error)
    }

    async fn compile_loop(
        &self,
        v: &Value,
        s: &ToolSettings,
        run: &mut Run<'_>,
        changed: &mut Changes,
    ) -> (String, bool) {
        let targets = match super::fix::compile_loop_targets(v) {
            Ok(t) => t,
            Err(e) => return (e, true),
        };
        let runner = match self.registry.get("command", Some(PluginKind::Runner)) {
            Ok(r) => r,
            Err(e) => return (e.to_string(), true),
        };
        let format = match self
            .registry
            .get(&s.default_format, Some(PluginKind::EditFormat))
        {
            Ok(f) => f,
            Err(e) => return (e.to_string(), true),
        };
        let mut settings = BTreeMap::new();
        settings.insert("cmd".to_string(), s.compile_cmd.clone().unwrap_or_default());
        let fix = FixOptions {
            targets,
            prompt: v["spec"].as_str().map(String::from),
            lang: v["lang"].as_str().map(String::from),
            runner_settings: settings,
            parent: Some(run.id),
            protected: s.protected.clone(),
            ..Default::default()
        };
        // The nested loop's own events are in the store under its id, not in this stream.
        let mut quiet = |_: &Event| {};
        let nested = run.nested(&mut quiet);
        let deps = FixDeps {
            workspace: nested.workspace,
            runner,
            format,
            model: nested.model,
            store: nested.store,
            cancel: nested.cancel,
            on_event: nested.on_event,
        };
        match run_fix(&fix, deps).await {
            Ok(outcome) => {
                let root = run.workspace.to_string_lossy().into_owned();
                let written = outcome
                    .modified_files
                    .iter()
                    .flatten()
                    .chain(outcome.artifact_path.iter().filter(|_| outcome.iters > 0))
                    .map(|p| {
                        p.strip_prefix(&root)
                            .unwrap_or(p)
                            .trim_start_matches('/')
                            .to_string()
                    })
                    .collect();
                note_changed(changed, written);
                (
                    serde_json::to_string(&outcome).unwrap_or_default(),
                    !outcome.ok,
                )
            }
            Err(e) => (e.to_string(), true),
        }
    }
}

/// The files as a prompt shows them, with the fingerprints of exactly that text (the stale
/// check's reference).
fn show_files(
    ws: &Workspace,
    paths: &[String],
) -> Result<(String, BTreeMap<String, String>), edit::EditError> {
    let mut shown = BTreeMap::new();
    let mut files = String::new();
    for p in paths {
        match ws.read(p)? {
            Some(t) => {
                shown.insert(p.clone(), edit::fingerprint(&t));
                files.push_str(&format!(
                    "{p}\n```\n{t}{}```\n\n",
                    if t.ends_with('\n') { "" } else { "\n" }
                ));
            }
            None => files.push_str(&format!("{p} does not exist yet.\n\n")),
        }
    }
    Ok((files, shown))
}

/// What a run's calls wrote.
#[derive(Debug, Clone, Default)]
pub(crate) struct Changes {
    /// Files written or deleted, workspace-relative, in order of first write.
    pub files: Vec<String>,
    /// Calls that wrote at least one file.
    pub writes: u64,
}

fn note_changed(changed: &mut Changes, written: Vec<String>) {
    if !written.is_empty() {
        changed.writes += 1;
    }
    for w in written {
        if !changed.files.contains(&w) {
            changed.files.push(w);
        }
    }
}

/// The host's own check of a `run_cmd` against the loop's allowlist (the plugin's grant is
/// checked again by the sandbox): the program must be listed, and arguments that would make
/// a listed program run another one or write (`env` with any argument, `find -exec`/`-delete`,
/// `rg --pre`) are refused.
///
/// The loop's inspection programs ([`super::review::REVIEW_COMMANDS`], granted by kiln itself,
/// not by the user) are also kept inside the workspace: Landlock lets a program read anywhere,
/// so `head ~/.ssh/id_ed25519`, `grep -r . /home` or `head link-out.txt` would put files
/// outside it in the model's context and the store. Absolute paths, `..`, arguments naming a
/// path that resolves outside and the flags that follow links while walking are refused.
fn command_refused(s: &ToolSettings, v: &Value, workspace: &Path) -> Option<String> {
    let allow = s.command_allowlist.as_ref()?;
    let command = v["command"].as_str().unwrap_or("").trim();
    let mut words: Vec<String> = command.split_whitespace().map(String::from).collect();
    if let Some(args) = v["args"].as_array() {
        words.extend(args.iter().map(|a| a.as_str().unwrap_or("").to_string()));
    }
    let program = words.first().map(String::as_str).unwrap_or("");
    if !allow.iter().any(|a| a == program) {
        return Some(format!(
            "refused: `{program}` is not allowed here; run_cmd may run only: {}. Nothing was run.",
            if allow.is_empty() {
                "(nothing)".to_string()
            } else {
                allow.join(", ")
            }
        ));
    }
    let args = &words[1..];
    let bad = match program {
        // `env` may only print the environment: any argument could run a program
        // (`env CMD`, `env -S"CMD"`, `env --split-string=CMD`).
        "env" => args.first().cloned(),
        "find" => args
            .iter()
            .find(|a| {
                matches!(
                    a.as_str(),
                    "-exec"
                        | "-execdir"
                        | "-ok"
                        | "-okdir"
                        | "-delete"
                        | "-fprint"
                        | "-fprint0"
                        | "-fprintf"
                        | "-fls"
                )
            })
            .cloned(),
        // `--pre` runs a preprocessor, `-z`/`--search-zip` runs decompressors.
        "rg" => args
            .iter()
            .find(|a| {
                a.starts_with("--pre")
                    || a.starts_with("--hostname-bin")
                    || a.starts_with("--search-zip")
                    || (a.starts_with('-') && !a.starts_with("--") && a.contains('z'))
            })
            .cloned(),
        _ => None,
    };
    if let Some(a) = bad {
        return Some(format!(
            "refused: `{program} {a}` could run another program or write; it is not allowed here. Nothing was run."
        ));
    }
    if super::review::REVIEW_COMMANDS.contains(&program) {
        return outside_argument(workspace, program, args).map(|a| {
            format!(
                "refused: `{program} {a}` could read outside the workspace; `{program}` may only look at paths inside it (relative, no `..`, no link leading out). Nothing was run."
            )
        });
    }
    None
}

/// The first argument of an inspection program that could make it read outside the
/// workspace, if any.
fn outside_argument(workspace: &Path, program: &str, args: &[String]) -> Option<String> {
    let root = workspace.canonicalize().ok()?;
    let leaves = |rel: &str| -> bool {
        if rel.is_empty() {
            return false;
        }
        if crate::path::check_relative(rel).is_err() {
            return true;
        }
        // An existing path must resolve (links followed, as the program will) inside.
        match workspace.join(rel).canonicalize() {
            Ok(real) => !real.starts_with(&root),
            Err(_) => false,
        }
    };
    for a in args {
        let follows = match program {
            "find" => matches!(a.as_str(), "-L" | "-follow"),
            "grep" => {
                a == "--dereference-recursive"
                    || (a.starts_with('-') && !a.starts_with("--") && a.contains('R'))
            }
            "rg" => {
                a == "--follow" || (a.starts_with('-') && !a.starts_with("--") && a.contains('L'))
            }
            "ls" | "stat" => {
                a == "--dereference"
                    || (a.starts_with('-') && !a.starts_with("--") && a.contains('L'))
            }
            _ => false,
        };
        if follows {
            return Some(a.clone());
        }
        let outside = if let Some(opt) = a.strip_prefix("--") {
            // `--file=PATH`: the value is a path like any other.
            opt.split_once('=').is_some_and(|(_, val)| leaves(val))
        } else if a.starts_with('-') && a.len() > 1 {
            // A short option with a value attached (`-f/etc/passwd`) may not name a path.
            a.contains('/')
        } else {
            leaves(a)
        };
        if outside {
            return Some(a.clone());
        }
    }
    None
}

/// A reviewer's structured feedback on files (default: the files this run changed).
async fn evaluate_work(
    v: &Value,
    s: &ToolSettings,
    ws: &Workspace,
    run: &mut Run<'_>,
    changed: &Changes,
) -> (String, bool) {
    let named: Vec<String> = v["paths"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p.as_str().map(String::from))
        .collect();
    let paths = if named.is_empty() {
        changed.files.clone()
    } else {
        named
    };
    let mut material = String::new();
    for p in &paths {
        match ws.read(p) {
            Ok(Some(t)) => material.push_str(&format!("{p}\n```\n{}\n```\n", cap(&t, 32 * 1024))),
            Ok(None) => material.push_str(&format!("{p}: (deleted in this run)\n")),
            Err(_) => material.push_str(&format!("{p}: (cannot be read)\n")),
        }
    }
    if material.is_empty() {
        material.push_str("(no files were named and none has been changed yet)\n");
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
    match tokio::time::timeout(s.timeout, run.ask(0, &req, false)).await {
        Err(_) => ("evaluate_work timed out".into(), true),
        Ok(Err(super::run::AskError::Cancelled)) => ("cancelled".into(), true),
        Ok(Err(super::run::AskError::Budget(e))) => (e.to_string(), true),
        Ok(Err(super::run::AskError::Model(e))) => (format!("the reviewer call failed: {e}"), true),
        Ok(Ok(r)) => {
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

/// The before-tool hook's verdict on one call: the arguments to use (maybe rewritten), or the
/// denial the model is shown.
async fn before_tool(s: &ToolSettings, workspace: &Path, c: &ToolCall) -> Result<String, String> {
    let Some(h) = &s.hooks.before_tool else {
        return Ok(c.arguments.clone());
    };
    let input = json!({ "tool": c.name, "arguments": serde_json::from_str::<Value>(&c.arguments).unwrap_or(Value::Null) });
    let (ok, out, err) = run_hook(h, &input, workspace, s.require_confinement).await;
    let decision: Value = serde_json::from_str(out.trim()).unwrap_or(Value::Null);
    if !ok || decision["decision"] == "deny" {
        let reason = decision["reason"]
            .as_str()
            .map(String::from)
            .unwrap_or_else(|| err.trim().to_string());
        return Err(format!(
            "denied by the before-tool hook: {}",
            if reason.is_empty() {
                "no reason given".into()
            } else {
                reason
            }
        ));
    }
    Ok(match decision.get("arguments").filter(|a| a.is_object()) {
        Some(new_args) => new_args.to_string(),
        None => c.arguments.clone(),
    })
}

/// One plugin tool call under a deadline, as a tool result `(text, is_error)` (the agent and
/// `kiln mcp`).
pub(crate) async fn plugin_call(
    p: &Plugin,
    name: &str,
    args: &str,
    timeout: Duration,
) -> (String, bool) {
    plugin_call_writing(p, name, args, timeout, p.effective.writes).await
}

/// [`plugin_call`] with the programs it starts writing only where `writes` says.
pub(crate) async fn plugin_call_writing(
    p: &Plugin,
    name: &str,
    args: &str,
    timeout: Duration,
    writes: crate::plugin::confine::Writes,
) -> (String, bool) {
    match tokio::time::timeout(timeout, p.tool_call_writing(name, args, writes)).await {
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

/// Run a hook command with `input` on stdin; returns (exit ok, stdout, stderr). A hook runs
/// on the same confined path as every program kiln runs (`plugin::run_host_program`): it
/// reads the workspace and the system, writes the workspace, has no network and only `PATH`
/// and `HOME`, and whatever it starts ends with it.
pub(crate) async fn run_hook(
    cmd: &str,
    input: &Value,
    workspace: &Path,
    require_confinement: bool,
) -> (bool, String, String) {
    const HOOK_TIMEOUT: Duration = Duration::from_secs(30);
    const HOOK_OUTPUT: usize = 1 << 20;
    let words: Vec<&str> = cmd.split_whitespace().collect();
    if words.is_empty() {
        return (true, String::new(), String::new());
    }
    let stdin = Some(input.to_string().into_bytes());
    match crate::plugin::run_host_program(
        &words,
        stdin,
        workspace,
        HOOK_TIMEOUT,
        HOOK_OUTPUT,
        require_confinement,
    )
    .await
    {
        Ok(f) if f.timed_out => (
            false,
            String::new(),
            format!("hook `{cmd}` did not finish in 30 s"),
        ),
        Ok(f) => (
            f.exit_code == Some(0),
            String::from_utf8_lossy(&f.stdout).into_owned(),
            String::from_utf8_lossy(&f.stderr).into_owned(),
        ),
        Err(e) => (
            false,
            String::new(),
            format!("hook `{cmd}` could not be started: {e}"),
        ),
    }
}

/// `text` cut to `n` bytes (on a character boundary) with a marker.
pub(crate) fn cap(text: &str, n: usize) -> String {
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

//! `kiln mcp`: kiln as an MCP server, over stdio (or streamable HTTP on a loopback address with
//! `--http`). It offers the agent tools of the workspace's tool plugins (named as in `kiln tool
//! list`, under the grants of the workspace's kiln.toml exactly as `kiln agent` has them),
//! `apply_edit` (the host's atomic, protected edit path) and `compile_loop` (the fix loop, with
//! progress notifications). A denial or a plugin error is a tool error (`isError`), never the
//! end of the server; a cancelled call is dropped. Every call is recorded in the store under a
//! session of kind `mcp`. Nothing but MCP JSON-RPC is written to stdout.

use super::args::McpArgs;
use super::common::ModelPlan;
use super::ctx::{Ctx, Outcome};
use super::settings::McpSettings;
use crate::config::Config;
use crate::edit::{self, ApplyOptions, Workspace};
use crate::engine::tools::compile_loop::{self, CompileLoopSetup};
use crate::engine::{Event, FixOptions, ModelSource};
use crate::plugin::{PluginKind, Registry};
use crate::store::{NewLoop, Store};
use anyhow::Context as _;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities,
    ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

/// What a tool offered over MCP runs.
enum Target {
    /// A tool plugin's tool: (plugin, its name for the tool).
    Plugin(String, String),
    ApplyEdit,
    CompileLoop,
}

struct Offered {
    tool: Tool,
    target: Target,
}

/// Everything the sessions of one `kiln mcp` process share.
struct Shared {
    workspace: PathBuf,
    config: Config,
    registry: Registry,
    tools: Vec<Offered>,
    default_format: String,
    compile_cmd: Option<String>,
    tool_timeout: Duration,
    /// compile_loop's model; one loop at a time (a second waits). `Err`: why there is none.
    model: tokio::sync::Mutex<Result<ModelSource, NoModel>>,
    model_label: String,
    store: std::sync::Mutex<Store>,
    /// Where compile_loop records its loops (`--store`; `None`: the workspace's file).
    store_url: Option<crate::store::StoreUrl>,
}

/// Why compile_loop has no model (its settings did not resolve), told to each caller.
#[derive(Debug, Clone, thiserror::Error)]
#[error("compile_loop has no model: {0}")]
struct NoModel(String);

/// One MCP connection: a session in the store, closed when the connection ends.
struct Session {
    shared: Arc<Shared>,
    loop_id: i64,
    calls: AtomicI64,
}

impl Drop for Session {
    fn drop(&mut self) {
        let n = self.calls.load(Ordering::Relaxed);
        if let Ok(mut store) = self.shared.store.lock() {
            let _ = store.close_session(self.loop_id, n, &format!("MCP session: {n} tool call(s)"));
        }
    }
}

/// The MCP server handler of one connection.
struct KilnMcp {
    session: Session,
}

impl KilnMcp {
    fn new(shared: Arc<Shared>) -> anyhow::Result<KilnMcp> {
        let loop_id = shared
            .store
            .lock()
            .map_err(|_| anyhow::anyhow!("the store lock is poisoned"))?
            .begin_session(&NewLoop {
                kind: crate::store::RunKind::Mcp,
                runner: "-".into(),
                targets: vec![],
                format: shared.default_format.clone(),
                model: shared.model_label.clone(),
                max_iters: 0,
                parent: None,
            })?;
        Ok(KilnMcp {
            session: Session {
                shared,
                loop_id,
                calls: AtomicI64::new(0),
            },
        })
    }

    fn shared(&self) -> &Shared {
        &self.session.shared
    }
}

fn object(v: Value) -> serde_json::Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => json!({"type": "object"})
            .as_object()
            .cloned()
            .unwrap_or_default(),
    }
}

fn apply_edit_tool(default_format: &str) -> Tool {
    Tool::new(
        "apply_edit",
        format!(
            "Apply an edit response to the workspace through kiln's atomic edit path: every file or none, protected paths (kiln.toml, .kiln/, .git/, [sandbox] protect) refused. `response` is the edit text in `format` (default {default_format}; search-replace, udiff, whole, apply-patch or a plugin format); `files` names the files it may change (workspace-relative; with several, each file's blocks follow a `<<< path=REL >>>` header); `dry_run` validates without writing. Returns the per-edit report; a refused edit is an error that says why."
        ),
        object(json!({
            "type": "object",
            "properties": {
                "response": { "type": "string", "description": "The edit, e.g. SEARCH/REPLACE blocks with <<< path=REL >>> headers" },
                "format": { "type": "string", "description": "Edit format (default: the server's)" },
                "files": { "type": "array", "items": { "type": "string" }, "description": "The files the edit may change (workspace-relative)" },
                "dry_run": { "type": "boolean", "description": "Validate and report without writing" }
            },
            "required": ["response"],
            "additionalProperties": false
        })),
    )
}

pub(crate) async fn run(ctx: &Ctx, extra: &[PathBuf], args: McpArgs) -> anyhow::Result<Outcome> {
    let s = McpSettings::resolve(ctx, &args)?;
    let registry = ctx.with_config(s.config.clone()).registry(extra).await?;
    registry
        .get(&s.format, Some(PluginKind::EditFormat))
        .with_context(|| format!("--format {}", s.format))?;
    let model = compile_loop_model(&args, &s.config)?;
    let model_label = model.as_ref().map_or("-".to_string(), |m| m.label());
    let tools = offered_tools(&registry, &s.format, s.compile_cmd.as_deref()).await?;
    let shared = Arc::new(Shared {
        workspace: ctx.workspace.clone(),
        store: std::sync::Mutex::new(ctx.open_store()?),
        store_url: ctx.store.clone(),
        config: s.config,
        registry,
        tools,
        default_format: s.format,
        compile_cmd: s.compile_cmd,
        tool_timeout: s.tool_timeout,
        model: tokio::sync::Mutex::new(model),
        model_label,
    });
    match s.http {
        None => serve_stdio(shared).await,
        Some(addr) => serve_http(shared, addr).await,
    }
}

/// compile_loop's model: the replay (a file that cannot be read stops the server before it
/// starts) or the live model of kiln's LLM settings, whose absence only compile_loop reports.
fn compile_loop_model(
    args: &McpArgs,
    config: &Config,
) -> anyhow::Result<Result<ModelSource, NoModel>> {
    Ok(match &args.replay {
        Some(file) => Ok(ModelPlan::ReplayFile(file.clone()).open(None)?),
        None => args
            .llm
            .settings(config)
            .and_then(|s| ModelPlan::Live(s).open(None))
            .map_err(|e| NoModel(format!("{e:#}"))),
    })
}

/// The tools offered: the plugin tools, named as `kiln tool list` names them, then kiln's own.
async fn offered_tools(
    registry: &Registry,
    default_format: &str,
    compile_cmd: Option<&str>,
) -> anyhow::Result<Vec<Offered>> {
    let mut tools: Vec<Offered> = Vec::new();
    for t in crate::engine::tools::plugin_tools(registry).await? {
        let name = if ["apply_edit", "compile_loop"].contains(&t.def.name.as_str()) {
            format!("{}__{}", t.plugin.name, t.def.name)
        } else {
            t.def.name.clone()
        };
        let mut tool = Tool::new(name, t.def.description.clone(), object(t.def.parameters));
        if t.read_only {
            tool = tool.with_annotations(ToolAnnotations::new().read_only(true));
        }
        tools.push(Offered {
            tool,
            target: Target::Plugin(t.plugin.name.clone(), t.tool),
        });
    }
    tools.push(Offered {
        tool: apply_edit_tool(default_format),
        target: Target::ApplyEdit,
    });
    let cl = crate::engine::compile_loop_tool();
    tools.push(Offered {
        tool: Tool::new(
            cl.name,
            format!(
                "{} Runs the build command the workspace's kiln.toml grants{}; the model comes from kiln's LLM settings. Sends a progress notification per iteration.",
                cl.description,
                compile_cmd
                    .map(|c| format!(" (`{c}`)"))
                    .unwrap_or_default()
            ),
            object(cl.parameters),
        ),
        target: Target::CompileLoop,
    });
    Ok(tools)
}

async fn serve_stdio(shared: Arc<Shared>) -> anyhow::Result<Outcome> {
    let handler = KilnMcp::new(shared)?;
    let service = handler
        .serve(rmcp::transport::stdio_pipes())
        .await
        .context("MCP initialization over stdio failed")?;
    tokio::select! {
        r = service.waiting() => { r.context("the MCP session ended abnormally")?; }
        _ = tokio::signal::ctrl_c() => {}
    }
    Ok(Outcome::Success)
}

async fn serve_http(shared: Arc<Shared>, addr: std::net::SocketAddr) -> anyhow::Result<Outcome> {
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
    let service = StreamableHttpService::new(
        move || KilnMcp::new(shared.clone()).map_err(std::io::Error::other),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    eprintln!(
        "kiln mcp: streamable HTTP at http://{}/mcp",
        listener.local_addr()?
    );
    loop {
        let (stream, _) = tokio::select! {
            a = listener.accept() => a.context("accept failed")?,
            _ = tokio::signal::ctrl_c() => break,
        };
        let service = service.clone();
        tokio::spawn(async move {
            let io = hyper_util::rt::TokioIo::new(stream);
            let svc = hyper_util::service::TowerToHyperService::new(service);
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, svc)
                .await;
        });
    }
    Ok(Outcome::Success)
}

impl ServerHandler for KilnMcp {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_instructions(format!(
                "kiln's sandboxed tools for the workspace {}. Paths are relative to the workspace root. Tool plugins run under the grants of the workspace's kiln.toml; apply_edit writes atomically and never touches kiln.toml, .kiln/, .git/ or [sandbox] protect paths; compile_loop runs kiln's fix loop with the build command kiln.toml grants.",
                self.shared().workspace.display()
            ));
        info.server_info = Implementation::new("kiln", env!("CARGO_PKG_VERSION"));
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(
            self.shared().tools.iter().map(|t| t.tool.clone()).collect(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let shared = self.shared();
        let name = request.name.to_string();
        let Some(offered) = shared.tools.iter().find(|t| t.tool.name == name) else {
            return Err(ErrorData::invalid_params(
                format!("unknown tool `{name}`; see tools/list"),
                None,
            ));
        };
        let args = Value::Object(request.arguments.unwrap_or_default());
        let n = self.session.calls.fetch_add(1, Ordering::Relaxed) + 1;
        let start = Instant::now();
        let ct = context.ct.clone();
        let (text, is_error) = match &offered.target {
            // The fix loop stops itself on cancellation, so its end is recorded.
            Target::CompileLoop => compile_loop(shared, &args, &context).await,
            target => {
                tokio::select! {
                    r = call(shared, target, &args) => r,
                    _ = ct.cancelled() => ("cancelled by the client".into(), true),
                }
            }
        };
        if let Ok(mut store) = shared.store.lock() {
            let _ = store.record_tool_call(
                self.session.loop_id,
                n,
                &context.id.to_string(),
                &name,
                &args.to_string(),
                &text,
                is_error,
                start.elapsed().as_millis() as i64,
            );
        }
        let content = vec![ContentBlock::text(text)];
        Ok(if is_error {
            CallToolResult::error(content)
        } else {
            CallToolResult::success(content)
        }
        .into())
    }
}

/// A plugin tool or apply_edit: the text for the caller and whether it is an error.
async fn call(shared: &Shared, target: &Target, args: &Value) -> (String, bool) {
    let timeout = shared.tool_timeout;
    match target {
        Target::Plugin(plugin, tool) => {
            let plugin = match shared.registry.get(plugin, Some(PluginKind::Tool)) {
                Ok(p) => p,
                Err(e) => return (e.to_string(), true),
            };
            let out =
                crate::engine::tools::plugin_call(plugin, tool, &args.to_string(), timeout).await;
            (out.text().to_string(), out.is_error())
        }
        Target::ApplyEdit => {
            let Some(response) = args["response"].as_str() else {
                return ("`response` (the edit text) is required".into(), true);
            };
            let format_name = args["format"].as_str().unwrap_or(&shared.default_format);
            let files: Vec<String> = match &args["files"] {
                Value::Null => vec![],
                Value::Array(a) if a.iter().all(Value::is_string) => a
                    .iter()
                    .filter_map(|f| f.as_str().map(String::from))
                    .collect(),
                _ => return ("`files` must be an array of paths".into(), true),
            };
            let format = match shared
                .registry
                .get(format_name, Some(PluginKind::EditFormat))
            {
                Ok(f) => f,
                Err(e) => return (e.to_string(), true),
            };
            let ws = match Workspace::open(&shared.workspace) {
                Ok(ws) => ws,
                Err(e) => return (e.to_string(), true),
            };
            let opts = ApplyOptions {
                dry_run: args["dry_run"].as_bool().unwrap_or(false),
                protected: shared.config.protected(),
                ..Default::default()
            };
            let (text, is_error, _) = edit::apply_as_tool_result(
                "apply_edit",
                format,
                &ws,
                response,
                &files,
                &opts,
                timeout,
            )
            .await;
            (text, is_error)
        }
        Target::CompileLoop => ("compile_loop is not a plain call".into(), true),
    }
}

/// Progress for a compile_loop call: one notification per iteration, sent in order by one
/// task (none when the caller asked for no progress). Drop the sink, then await the task.
fn progress_forwarder(
    context: &RequestContext<RoleServer>,
    max_iters: u32,
) -> (
    impl FnMut(&Event) + Send + use<>,
    Option<tokio::task::JoinHandle<()>>,
) {
    let (progress_tx, mut progress_rx) = tokio::sync::mpsc::unbounded_channel::<(u32, String)>();
    let forward = context.meta.get_progress_token().map(|token| {
        let peer = context.peer.clone();
        let total = max_iters as f64;
        tokio::spawn(async move {
            while let Some((n, message)) = progress_rx.recv().await {
                let _ = peer
                    .notify_progress(
                        ProgressNotificationParam::new(token.clone(), n as f64)
                            .with_total(total)
                            .with_message(message),
                    )
                    .await;
            }
        })
    });
    let on_event = move |e: &Event| {
        if let Event::LoopIteration {
            iteration,
            ok,
            edits_applied,
            ..
        } = e
        {
            let _ = progress_tx.send((
                *iteration,
                format!(
                    "iteration {iteration}: {} applied, check {}",
                    crate::terminal::count(*edits_applied, "edit", "edits"),
                    if *ok { "passes" } else { "still fails" }
                ),
            ));
        }
    };
    (on_event, forward)
}

/// The fix loop as a tool: a progress notification per iteration (when the caller asked for
/// progress), stopped as `cancelled` when the caller cancels.
async fn compile_loop(
    shared: &Shared,
    args: &Value,
    context: &RequestContext<RoleServer>,
) -> (String, bool) {
    let Some(cmd) = shared.compile_cmd.clone() else {
        return (
            "compile_loop needs the build command it may run: set `[agent] test_command` in the workspace's kiln.toml (and `kiln trust` it), or start `kiln mcp --test-command CMD`".into(),
            true,
        );
    };
    let setup = CompileLoopSetup {
        cmd,
        format: shared.default_format.clone(),
        base: FixOptions {
            max_iters: shared.config.fix.max_iters.unwrap_or(5),
            prompt: shared.config.fix.prompt.clone(),
            protected: shared.config.protected(),
            ..Default::default()
        },
    };
    let plan = match compile_loop::plan(&shared.registry, args, setup) {
        Ok(p) => p,
        Err(e) => return (e.to_string(), true),
    };
    let mut store = match Store::open_url(shared.store_url.as_ref(), &shared.workspace) {
        Ok(s) => s,
        Err(e) => return (e.to_string(), true),
    };
    // Cancellation: the loop ends with `cancelled` and its files whole.
    let (cancel_tx, cancel_rx) = tokio::sync::watch::channel(false);
    let ct = context.ct.clone();
    let cancel_watch = tokio::spawn(async move {
        ct.cancelled().await;
        let _ = cancel_tx.send(true);
    });
    let mut model = tokio::select! {
        m = shared.model.lock() => m,
        _ = context.ct.cancelled() => {
            cancel_watch.abort();
            return ("cancelled by the client".into(), true);
        }
    };
    let model = match &mut *model {
        Ok(m) => m,
        Err(why) => {
            cancel_watch.abort();
            return (why.to_string(), true);
        }
    };
    let (mut on_event, forward) = progress_forwarder(context, plan.fix.max_iters);
    let result = crate::engine::run_fix(
        &plan.fix,
        crate::engine::fix::FixPlugins {
            runner: plan.runner,
            format: plan.format,
            tools: None,
        },
        crate::engine::run::RunCtx {
            workspace: &shared.workspace,
            store: &mut store,
            events: &mut on_event,
            model,
            plugins: &shared.registry,
            cancel: cancel_rx,
            task: None,
            resumed: None,
        },
    )
    .await;
    drop(on_event);
    if let Some(f) = forward {
        let _ = f.await;
    }
    cancel_watch.abort();
    let outcome = compile_loop::outcome(&result);
    (outcome.text().to_string(), outcome.is_error())
}

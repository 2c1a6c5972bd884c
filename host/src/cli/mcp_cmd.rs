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
use crate::edit::Workspace;
use crate::engine::tool_names::COMPILE_LOOP;
use crate::engine::tools::compile_loop::{self, CompileLoopPlan, CompileLoopSetup};
use crate::engine::tools::fix_host::FixHost;
use crate::engine::tools::{Kind, ToolSettings, Toolbox};
use crate::engine::{Event, FixOptions, ModelSource};
use crate::plugin::{PluginKind, Registry};
use crate::store::{NewLoop, Store};
use anyhow::Context as _;
use futures_util::future::BoxFuture;
use kiln_protocol::outcome::ToolOutcome;
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
use std::time::Instant;

/// Everything the sessions of one `kiln mcp` process share.
struct Shared {
    workspace: PathBuf,
    config: Config,
    /// The agent's tool table, served: the plugin tools, `apply_edit` and `compile_loop`.
    table: Toolbox<'static>,
    /// The plugins the table's tools and compile_loop's runs use.
    registry: &'static Registry,
    /// How the table's tools run (timeout, protected paths, default edit format).
    settings: ToolSettings,
    /// The tools as MCP lists them, in the table's order.
    listed: Vec<Tool>,
    default_format: String,
    compile_cmd: Option<String>,
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

pub(crate) async fn run(ctx: &Ctx, extra: &[PathBuf], args: McpArgs) -> anyhow::Result<Outcome> {
    let s = McpSettings::resolve(ctx, &args)?;
    let registry = ctx.with_config(s.config.clone()).registry(extra).await?;
    registry
        .get(&s.format, Some(PluginKind::EditFormat))
        .with_context(|| format!("--format {}", s.format))?;
    let model = compile_loop_model(&args, &s.config)?;
    let model_label = model.as_ref().map_or("-".to_string(), |m| m.label());
    // One registry per server process, borrowed by the table for the process's life.
    let registry: &'static Registry = Box::leak(Box::new(registry));
    let settings = ToolSettings {
        timeout: s.tool_timeout,
        default_format: s.format.clone(),
        compile_cmd: s.compile_cmd.clone(),
        protected: s.config.protected(),
        ..Default::default()
    };
    let table = Toolbox::served(registry, &settings, &[COMPILE_LOOP]).await?;
    let listed = listed(&table, s.compile_cmd.as_deref());
    let shared = Arc::new(Shared {
        workspace: ctx.workspace.clone(),
        store: std::sync::Mutex::new(ctx.open_store()?),
        store_url: ctx.store.clone(),
        config: s.config,
        table,
        registry,
        settings,
        listed,
        default_format: s.format,
        compile_cmd: s.compile_cmd,
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

/// The table's tools as MCP lists them: read-only ones annotated, compile_loop's description
/// saying which build command it runs and that it sends progress.
fn listed(table: &Toolbox<'_>, compile_cmd: Option<&str>) -> Vec<Tool> {
    table
        .tools
        .iter()
        .map(|t| {
            let mut description = t.def.description.clone();
            if t.def.name == COMPILE_LOOP {
                description.push_str(&format!(
                    " Runs the build command the workspace's kiln.toml grants{}; the model comes from kiln's LLM settings. Sends a progress notification per iteration.",
                    compile_cmd.map(|c| format!(" (`{c}`)")).unwrap_or_default()
                ));
            }
            let tool = Tool::new(
                t.def.name.clone(),
                description,
                object(t.def.parameters.clone()),
            );
            if t.kind == Kind::Read {
                tool.with_annotations(ToolAnnotations::new().read_only(true))
            } else {
                tool
            }
        })
        .collect()
}

async fn serve_stdio(shared: Arc<Shared>) -> anyhow::Result<Outcome> {
    let handler = KilnMcp::new(shared)?;
    let (stdin, stdout) = rmcp::transport::stdio_pipes();
    let service = handler
        .serve(super::mcp_stdio::LineTransport::new(stdin, stdout))
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
            self.shared().listed.clone(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let shared = self.shared();
        let name = request.name.to_string();
        if shared.table.get(&name).is_none() {
            return Err(ErrorData::invalid_params(
                format!("unknown tool `{name}`; see tools/list"),
                None,
            ));
        }
        let args = Value::Object(request.arguments.unwrap_or_default());
        let n = self.session.calls.fetch_add(1, Ordering::Relaxed) + 1;
        let start = Instant::now();
        let ct = context.ct.clone();
        let (text, is_error) = if name == COMPILE_LOOP {
            // The fix loop stops itself on cancellation, so its end is recorded.
            call(shared, &name, &args, &context).await
        } else {
            tokio::select! {
                r = call(shared, &name, &args, &context) => r,
                _ = ct.cancelled() => ("cancelled by the client".into(), true),
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

/// One call through the agent's table (compile_loop's loop run by [`McpFix`]): the text for
/// the caller and whether it is an error.
async fn call(
    shared: &Shared,
    name: &str,
    args: &Value,
    context: &RequestContext<RoleServer>,
) -> (String, bool) {
    let ws = match Workspace::open(&shared.workspace) {
        Ok(ws) => ws,
        Err(e) => return (e.to_string(), true),
    };
    let host = McpFix { shared, context };
    match shared
        .table
        .call_bare(name, &args.to_string(), &shared.settings, &ws, Some(&host))
        .await
    {
        Some(a) => (a.outcome.text().to_string(), a.outcome.is_error()),
        None => (format!("unknown tool `{name}`; see tools/list"), true),
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

/// compile_loop's loops for one MCP call: the build command kiln.toml grants, the server's
/// model (one loop at a time), a progress notification per iteration (when the caller asked
/// for progress), stopped as `cancelled` when the caller cancels.
struct McpFix<'c> {
    shared: &'c Shared,
    context: &'c RequestContext<RoleServer>,
}

impl FixHost for McpFix<'_> {
    fn setup(&self) -> Result<CompileLoopSetup, String> {
        let shared = self.shared;
        let Some(cmd) = shared.compile_cmd.clone() else {
            return Err("compile_loop needs the build command it may run: set `[agent] test_command` in the workspace's kiln.toml (and `kiln trust` it), or start `kiln mcp --test-command CMD`".into());
        };
        Ok(CompileLoopSetup {
            cmd,
            format: shared.default_format.clone(),
            base: FixOptions {
                max_iters: shared.config.fix.max_iters.unwrap_or(5),
                prompt: shared.config.fix.prompt.clone(),
                protected: shared.config.protected(),
                ..Default::default()
            },
        })
    }

    fn run<'a>(&'a self, plan: CompileLoopPlan<'a>) -> BoxFuture<'a, ToolOutcome> {
        Box::pin(run_compile_loop(self.shared, plan, self.context))
    }
}

/// Run one compile_loop call's loop (see [`McpFix`]).
async fn run_compile_loop(
    shared: &Shared,
    plan: CompileLoopPlan<'_>,
    context: &RequestContext<RoleServer>,
) -> ToolOutcome {
    let mut store = match Store::open_url(shared.store_url.as_ref(), &shared.workspace) {
        Ok(s) => s,
        Err(e) => return ToolOutcome::Failed(e.to_string()),
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
            return ToolOutcome::Failed("cancelled by the client".into());
        }
    };
    let model = match &mut *model {
        Ok(m) => m,
        Err(why) => {
            cancel_watch.abort();
            return ToolOutcome::Failed(why.to_string());
        }
    };
    // The workspace's run lock, as `kiln fix` takes it, held until the loop ends: refused
    // (naming the holder) while another kiln runs, undoes or applies edits here. Taken after
    // the model, so a second compile_loop of this server waits for the first instead.
    let _run_lock = match lock_run(&shared.workspace) {
        Ok(lock) => lock,
        Err(why) => {
            cancel_watch.abort();
            return ToolOutcome::Failed(format!("compile_loop refused: {why}"));
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
            plugins: shared.registry,
            cancel: cancel_rx,
            task: None,
            resumed: None,
            undo: &crate::undo::Recording::off(),
        },
    )
    .await;
    drop(on_event);
    if let Some(f) = forward {
        let _ = f.await;
    }
    cancel_watch.abort();
    compile_loop::outcome(&result)
}

/// The workspace's run lock for a compile_loop call, or why it was not taken.
fn lock_run(workspace: &std::path::Path) -> Result<crate::state_dir::RunLock, String> {
    let state = crate::state_dir::WorkspaceState::open(workspace, true)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| {
            format!(
                "kiln's state directory for {} is missing",
                workspace.display()
            )
        })?;
    state
        .lock_run("mcp compile_loop")
        .map_err(|e| e.to_string())
}

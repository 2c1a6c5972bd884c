//! The command line: clap definitions, configuration resolution and exit codes. Data goes to
//! stdout (human or `--json`), messages to stderr. Exit 0 success, 1 the work ended without
//! success, 2 usage, configuration or plugin-loading error.

mod agent_cmd;
mod check;
mod edit_cmd;
mod fix_cmd;
mod history_cmd;
mod llm_cmd;
mod mcp_cmd;
mod plugin_cmd;
mod scaffold;
mod tool_cmd;
mod trust_cmd;

use crate::config::Config;
use crate::plugin::{Registry, Runtime, Source};
use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// kiln: autonomous coding loops with sandboxed WebAssembly plugins.
#[derive(Debug, Parser)]
#[command(name = "kiln", version, about, propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

/// Options every command takes.
#[derive(Debug, Args)]
struct Global {
    /// Workspace root (default: the current directory).
    #[arg(long, short = 'C', global = true, value_name = "DIR")]
    workspace: Option<PathBuf>,
    /// Load an extra plugin component (repeatable); granted only what kiln.toml grants it.
    #[arg(long = "plugin", global = true, value_name = "FILE.wasm")]
    plugins: Vec<PathBuf>,
    /// Show plugin debug logs.
    #[arg(long, short = 'v', global = true)]
    verbose: bool,
    /// Show only errors.
    #[arg(long, short = 'q', global = true, conflicts_with = "verbose")]
    quiet: bool,
    /// Apply the workspace's kiln.toml even if you have not trusted it (`kiln trust`), for
    /// this run only: for CI and throwaway checkouts you control.
    #[arg(long, global = true, env = "KILN_YES", value_parser = clap::builder::FalseyValueParser::new())]
    yes: bool,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The coding agent: think, act with sandboxed tools, observe, until done or a cap.
    Agent(Box<agent_cmd::AgentArgs>),
    /// The compile-and-fix loop: check, ask the model, apply its edits, repeat.
    Fix(Box<fix_cmd::FixArgs>),
    /// Earlier loops of this workspace.
    History(history_cmd::HistoryArgs),
    /// Run a runner once over target files and report its diagnostics.
    Check(check::CheckArgs),
    /// Parse or apply an LLM response with an edit format.
    #[command(subcommand)]
    Edit(edit_cmd::EditCommand),
    /// Check the LLM connection.
    #[command(subcommand)]
    Llm(llm_cmd::LlmCommand),
    /// Serve the workspace's sandboxed tools, apply_edit and compile_loop over MCP (stdio).
    Mcp(Box<mcp_cmd::McpArgs>),
    /// List, inspect and validate plugins.
    #[command(subcommand)]
    Plugin(plugin_cmd::PluginCommand),
    /// Call agent tools from the command line.
    #[command(subcommand)]
    Tool(tool_cmd::ToolCommand),
    /// Trust the workspace's kiln.toml as it is now, so its grants, hooks and exec rules apply.
    Trust(trust_cmd::TrustArgs),
}

/// Outcome of a command, mapped to the exit status.
pub enum Outcome {
    /// Exit 0.
    Success,
    /// Exit 1: the work ran but did not succeed.
    Failure,
    /// Exit 2: the work stopped on an error (transport, plugin).
    Error,
}

/// Everything a command needs: the workspace, merged configuration, the runtime and the
/// loaded plugins.
pub(crate) struct Ctx {
    pub workspace: PathBuf,
    pub config: Config,
    pub runtime: Runtime,
}

impl Ctx {
    fn new(global: &Global) -> anyhow::Result<Ctx> {
        let workspace = match &global.workspace {
            Some(w) => w.clone(),
            None => std::env::current_dir().context("cannot determine the current directory")?,
        };
        let workspace = workspace
            .canonicalize()
            .with_context(|| format!("workspace {} does not exist", workspace.display()))?;
        let config = Config::load(&workspace, global.yes)?;
        let runtime = Runtime::with_default_cache()?;
        Ok(Ctx {
            workspace,
            config,
            runtime,
        })
    }

    /// Built-ins, configured plugins and `--plugin` files.
    pub async fn registry(&self, extra: &[PathBuf]) -> anyhow::Result<Registry> {
        let mut reg = Registry::load(&self.runtime, &self.workspace, &self.config).await?;
        for path in extra {
            let checked = self.runtime.check_file(path)?;
            reg.insert(
                self.runtime
                    .instantiate(checked, &self.workspace, &self.config)
                    .await?,
            );
        }
        Ok(reg)
    }
}

/// Parse arguments, run, and turn the result into an exit code.
pub fn main() -> ExitCode {
    // Die quietly on a closed pipe (`kiln plugin list | head`), like other Unix tools.
    // SAFETY: restoring the default disposition of SIGPIPE before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    crate::plugin::set_log_level(if cli.global.quiet {
        1
    } else if cli.global.verbose {
        4
    } else {
        2
    });
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match rt.block_on(run(cli)) {
        Ok(Outcome::Success) => ExitCode::SUCCESS,
        Ok(Outcome::Failure) => ExitCode::from(1),
        Ok(Outcome::Error) => ExitCode::from(2),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<Outcome> {
    let ctx = Ctx::new(&cli.global)?;
    if !matches!(cli.command, Command::Trust(_))
        && let Some(warning) = ctx.config.trust.warning()
    {
        eprintln!("warning: {warning}");
    }
    match cli.command {
        Command::Agent(args) => agent_cmd::run(&ctx, &cli.global.plugins, *args).await,
        Command::Fix(args) => fix_cmd::run(&ctx, &cli.global.plugins, *args).await,
        Command::History(args) => history_cmd::run(&ctx, args).await,
        Command::Check(args) => check::run(&ctx, &cli.global.plugins, args).await,
        Command::Edit(cmd) => edit_cmd::run(&ctx, &cli.global.plugins, cmd).await,
        Command::Llm(cmd) => llm_cmd::run(&ctx, cmd).await,
        Command::Mcp(args) => mcp_cmd::run(&ctx, &cli.global.plugins, *args).await,
        Command::Plugin(cmd) => plugin_cmd::run(&ctx, &cli.global.plugins, cmd).await,
        Command::Tool(cmd) => tool_cmd::run(&ctx, &cli.global.plugins, cmd).await,
        Command::Trust(args) => trust_cmd::run(&ctx, args),
    }
}

/// Print a value as one line of JSON on stdout.
pub(crate) fn print_json(value: &serde_json::Value) {
    println!(
        "{}",
        serde_json::to_string(value).expect("JSON values serialize")
    );
}

/// `built-in` or the file path.
pub(crate) fn source_label(s: &Source) -> String {
    s.to_string()
}

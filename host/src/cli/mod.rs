//! The command line: clap definitions, configuration resolution and exit codes. Data goes to
//! stdout (human or `--json`), messages to stderr. Exit 0 success, 1 the work ended without
//! success, 2 usage, configuration or plugin-loading error.

mod agent_cmd;
mod args;
mod batch_cmd;
mod check;
mod closed_output;
mod common;
mod ctx;
mod detect;
mod edit_cmd;
mod event_log;
mod fix_cmd;
mod gc_cmd;
mod guest_sdk;
mod history_cmd;
mod llm_args;
mod llm_cmd;
mod log_lines;
mod loop_cmd;
mod mcp_cmd;
mod mcp_stdio;
mod output;
mod plugin_cmd;
mod prompt_file;
pub mod render;
mod report_cmd;
mod resume_cmd;
mod root;
mod run_task_cmd;
mod runner_args;
mod scaffold;
mod settings;
mod signals;
mod task_cmd;
mod tool_cmd;
mod trust_cmd;
mod undo_cmd;
mod warm_cmd;
mod warmer;
mod worker_cmd;

use crate::config::Config;
use crate::plugin::Runtime;
use anyhow::Context;
use clap::{Args, Parser, Subcommand};
pub(crate) use ctx::Ctx;
pub use ctx::Outcome;
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

/// Options every command takes (listed after a command's own options in its help).
#[derive(Debug, Args)]
#[command(next_help_heading = "Global options")]
struct Global {
    /// Workspace root (default: the nearest directory above the current one, itself included,
    /// that holds `.git`, `kiln.toml` or `.kiln`; else the current directory).
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
    /// Where runs are recorded: postgres://USER[:PASSWORD]@HOST[:PORT]/DB (shared by many
    /// workspaces), sqlite:PATH or a file (default: kiln.db in kiln's state directory for the
    /// workspace, outside it).
    #[arg(
        long = "store",
        global = true,
        env = "KILN_STORE",
        hide_env_values = true,
        value_name = "URL"
    )]
    store: Option<String>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The coding agent: think, act with sandboxed tools, observe, until done or a cap.
    Agent(Box<args::AgentArgs>),
    /// The compile-and-fix loop: check, ask the model, apply its edits, repeat.
    Fix(Box<args::FixArgs>),
    /// The execute/review loop over a task file: an execution agent works, a review agent
    /// records what is pending, for a bounded number of rounds.
    Loop(Box<args::LoopArgs>),
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
    Mcp(Box<args::McpArgs>),
    /// List, inspect and validate plugins.
    #[command(subcommand)]
    Plugin(plugin_cmd::PluginCommand),
    /// Call agent tools from the command line.
    #[command(subcommand)]
    Tool(tool_cmd::ToolCommand),
    /// Trust the workspace's kiln.toml as it is now, so its grants, hooks and exec rules apply.
    Trust(trust_cmd::TrustArgs),
    /// Write one run as a self-contained HTML page (`--html FILE`).
    Report(report_cmd::ReportArgs),
    /// Put back every file a fix, agent or loop run changed (the latest run by default).
    Undo(undo_cmd::UndoArgs),
    /// Show and free what kiln's state directory keeps beyond its limits (`[gc]`).
    Gc(gc_cmd::GcArgs),
    /// Many tasks (fix, agent or loop runs, each in a fresh checkout): run a task file here,
    /// or enqueue it for workers, and read its status and results.
    #[command(subcommand)]
    Batch(batch_cmd::BatchCommand),
    /// Claim tasks from a batch queue and run them, with a lease renewed by heartbeat.
    Worker(Box<worker_cmd::WorkerArgs>),
    /// Run one task (a JSON task spec on stdin) in the workspace: how a worker runs each task.
    #[command(hide = true)]
    RunTask,
    /// Compile the built-ins the compile cache lacks, under its warmer lock: what a command
    /// starts in the background when it found some (`KILN_NO_WARMER=1`: never).
    #[command(hide = true, name = "warm-cache")]
    WarmCache,
}

impl Ctx {
    /// The context of a command; `check_workspace`: refuse a workspace that is `$HOME`, `/` or
    /// holds kiln's own directories (see [`crate::plugin::kiln_dirs::refuse_workspace`]).
    fn new(global: &Global, check_workspace: bool) -> anyhow::Result<Ctx> {
        let given = match &global.workspace {
            Some(w) => w.clone(),
            None => std::env::current_dir().context("cannot determine the current directory")?,
        };
        let given = given
            .canonicalize()
            .with_context(|| format!("workspace {} does not exist", given.display()))?;
        // Without -C: the nearest ancestor holding .git, kiln.toml or .kiln.
        let (workspace, found_by, cwd_in_workspace) = match &global.workspace {
            Some(_) => (given, None, PathBuf::new()),
            None => {
                let (root, marker) = root::discover(&given);
                let rel = given
                    .strip_prefix(&root)
                    .unwrap_or(std::path::Path::new(""))
                    .to_path_buf();
                let found_by = marker.filter(|_| !rel.as_os_str().is_empty());
                (root, found_by, rel)
            }
        };
        // Never git's metadata (`kiln -C .git`, a task's `dir` leading there): a run's programs
        // would write its config and hooks, which git runs unconfined.
        anyhow::ensure!(
            !crate::path::has_git_component(&workspace),
            "the workspace {} lies in `.git`, git's own metadata; kiln does not work there (its programs would write git's config and hooks, which git runs unconfined)",
            crate::terminal::printable(&workspace.to_string_lossy())
        );
        let runtime = std::sync::Arc::new(Runtime::with_default_cache()?);
        if check_workspace
            && let Some(refused) =
                crate::plugin::kiln_dirs::refuse_workspace_here(&workspace, runtime.cache_dir())
        {
            return Err(refused.into());
        }
        let config = Config::load(&workspace, global.yes)?;
        let flag = global.store.as_ref().filter(|u| !u.is_empty());
        let store = match flag.or(config.store.url.as_ref()) {
            Some(url) => Some(url.parse::<crate::store::StoreUrl>()?),
            None => None,
        };
        Ok(Ctx {
            workspace,
            config,
            runtime,
            quiet: global.quiet,
            store,
            cwd_in_workspace,
            found_by,
            undo: crate::undo::Recording::off(),
        })
    }
}

/// Parse arguments, run, and turn the result into an exit code.
pub fn main() -> ExitCode {
    // Die quietly on a closed pipe (`kiln plugin list | head`), like other Unix tools; a loop
    // command catches it instead (below), to close its run as `cancelled`. SIGINT gets its
    // default back too: a kiln started by a script that ignores it (`kiln ... &`) still stops
    // on Ctrl-C.
    // SAFETY: restoring default dispositions before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        libc::signal(libc::SIGINT, libc::SIG_DFL);
    }
    common::note_inherited_signals();
    // The environment, read once, before anything else reads it (see kiln-env).
    kiln_env::env();
    let command = <Cli as clap::CommandFactory>::command();
    let parsed = command
        .clone()
        .try_get_matches_from(std::env::args_os())
        .and_then(|m| <Cli as clap::FromArgMatches>::from_arg_matches(&m).map(|c| (m, c)));
    let cli = match parsed {
        Ok((matches, cli)) => {
            if let Err(e) = resume_cmd::check_matches(&command, &matches) {
                eprintln!("error: {}", crate::terminal::printable(&error_text(&e)));
                return ExitCode::from(2);
            }
            cli
        }
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            if e.use_stderr() {
                let args: Vec<String> = std::env::args_os()
                    .map(|a| a.to_string_lossy().into_owned())
                    .collect();
                if let Some(tool) = tool_cmd::json_call_in(&args) {
                    // The message without clap's usage and tips (its first paragraph).
                    let rendered = e.to_string();
                    let text = rendered
                        .lines()
                        .take_while(|l| !l.trim().is_empty())
                        .map(str::trim)
                        .collect::<Vec<_>>()
                        .join(" ");
                    let text = text.strip_prefix("error: ").unwrap_or(&text);
                    tool_cmd::print_usage_error(tool.as_deref(), text);
                }
            }
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    if matches!(cli.command, Command::WarmCache) {
        return warm_cmd::run();
    }
    if matches!(
        cli.command,
        Command::Agent(_)
            | Command::Fix(_)
            | Command::Loop(_)
            | Command::RunTask
            | Command::Worker(_)
            | Command::Batch(batch_cmd::BatchCommand::Run(_))
    ) {
        // A run must outlive a closed stdout or stderr to record itself as cancelled: writes
        // then fail with EPIPE ([`out_line`]) instead of killing kiln. So must a worker or a
        // local batch whose task child exited before reading its spec (a child that found
        // its claim taken over): the write to the child's stdin fails, the worker goes on. A
        // caught signal (unlike an ignored one) is reset to its default in the programs kiln
        // starts.
        extern "C" fn on_sigpipe(_: libc::c_int) {
            // The write that raised it fails with EPIPE; every later write to that stream
            // (a warning printed anywhere, a result) goes to /dev/null instead of failing
            // again, so nothing after it panics on a closed stream while the run closes.
            for fd in [libc::STDOUT_FILENO, libc::STDERR_FILENO] {
                if closed_output::stream_closed(fd) {
                    closed_output::null_over(fd);
                }
            }
        }
        // SAFETY: installing a handler that does nothing, before any thread starts.
        unsafe {
            libc::signal(
                libc::SIGPIPE,
                on_sigpipe as extern "C" fn(libc::c_int) as libc::sighandler_t,
            );
        }
    }
    log_lines::install(log_lines::level(cli.global.quiet, cli.global.verbose));
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
    let json_call = match &cli.command {
        Command::Tool(tool_cmd::ToolCommand::Call {
            tool, json: true, ..
        }) => Some(tool.clone()),
        _ => None,
    };
    let result = rt.block_on(run(cli));
    // A blocking thread still stuck in the kernel (say, a plugin's open of a file swapped for a
    // FIFO after it was checked) must not keep kiln from exiting once the command is done.
    rt.shutdown_timeout(std::time::Duration::from_secs(1));
    match result {
        Ok(Outcome::Success) => ExitCode::SUCCESS,
        Ok(Outcome::Failure) => ExitCode::from(1),
        Ok(Outcome::Error) => ExitCode::from(2),
        // 130 for Ctrl-C, as a shell reports SIGINT; 143 for SIGTERM, 129 for SIGHUP, 141
        // for a closed output (SIGPIPE).
        Ok(Outcome::Interrupted) => {
            ExitCode::from(128 + common::stop_signal().unwrap_or(libc::SIGINT) as u8)
        }
        Err(e) => {
            let text = error_text(&e);
            if let Some(tool) = &json_call {
                tool_cmd::print_error(Some(tool), &e, &text);
            }
            eprintln!("error: {}", crate::terminal::printable(&text));
            ExitCode::from(2)
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<Outcome> {
    let mut ctx = Ctx::new(&cli.global, !works_outside_a_project(&cli.command))?;
    if !matches!(cli.command, Command::Trust(_))
        && let Some(warning) = ctx.config.trust.warning()
    {
        eprintln!("warning: {warning}");
    }
    for warning in &ctx.config.warnings {
        eprintln!("warning: {}", crate::terminal::printable(warning));
    }
    let a_run = matches!(
        cli.command,
        Command::Agent(_) | Command::Fix(_) | Command::Loop(_) | Command::RunTask
    );
    if a_run {
        ctx.undo = crate::undo::Recording::on();
    }
    // Held until this command ends: taken before a run's undo snapshot and first check, so a
    // second run, an undo or an edit on the same workspace is refused instead of interleaving.
    let _run_lock = match run_lock_name(&cli.command) {
        Some(what) => Some(lock_workspace(&ctx.workspace, what)?),
        None => None,
    };
    if touches_workspace(&cli.command) {
        recover_interrupted_edits(&ctx.workspace);
    }
    // Commands that run programs with no loop watching for a stop: a signal removes the calls'
    // temporary directories before it ends kiln.
    if matches!(
        cli.command,
        Command::Check(_) | Command::Tool(tool_cmd::ToolCommand::Call { .. })
    ) {
        signals::end_cleanly_on_stop_signals();
    }
    let outcome = match cli.command {
        Command::Agent(args) => agent_cmd::run(&ctx, &cli.global.plugins, *args).await,
        Command::Fix(args) => fix_cmd::run(&ctx, &cli.global.plugins, *args).await,
        Command::Loop(args) => loop_cmd::run(&ctx, &cli.global.plugins, *args).await,
        Command::History(args) => history_cmd::run(&ctx, args).await,
        Command::Check(args) => check::run(&ctx, &cli.global.plugins, args).await,
        Command::Edit(cmd) => edit_cmd::run(&ctx, &cli.global.plugins, cmd).await,
        Command::Llm(cmd) => llm_cmd::run(&ctx, cmd).await,
        Command::Mcp(args) => mcp_cmd::run(&ctx, &cli.global.plugins, *args).await,
        Command::Plugin(cmd) => plugin_cmd::run(&ctx, &cli.global.plugins, cmd).await,
        Command::Tool(cmd) => tool_cmd::run(&ctx, &cli.global.plugins, cmd).await,
        Command::Trust(args) => trust_cmd::run(&ctx, args),
        Command::Undo(args) => undo_cmd::run(&ctx, args).await,
        Command::Report(args) => report_cmd::run(&ctx, args).await,
        Command::Batch(cmd) => batch_cmd::run(&ctx, cli.global.yes, cmd).await,
        Command::Worker(args) => worker_cmd::run(&ctx, cli.global.yes, *args).await,
        Command::RunTask => run_task_cmd::run(&ctx, &cli.global.plugins).await,
        Command::Gc(args) => gc_cmd::run(&ctx, args),
        Command::WarmCache => Ok(Outcome::Success),
    };
    if a_run {
        // The run's workspace keeps what `[gc]` says and no more; failing to prune costs only
        // disk space.
        let _ = crate::gc::after_run(&ctx.workspace, crate::gc::Limits::of(&ctx.config.gc));
    }
    outcome
}

/// The command's name when it must hold the workspace's run lock: the runs (fix, agent, loop,
/// a batch task), undo and `edit apply`, which change the workspace's files as a whole.
fn run_lock_name(command: &Command) -> Option<&'static str> {
    match command {
        Command::Fix(_) => Some("fix"),
        Command::Agent(_) => Some("agent"),
        Command::Loop(_) => Some("loop"),
        Command::RunTask => Some("run-task"),
        Command::Undo(_) => Some("undo"),
        Command::Edit(edit_cmd::EditCommand::Apply { .. }) => Some("edit apply"),
        _ => None,
    }
}

/// Take the run lock of `workspace` (in kiln's state directory for it) for `what`.
fn lock_workspace(workspace: &std::path::Path, what: &str) -> anyhow::Result<kiln_state::RunLock> {
    let state = kiln_state::WorkspaceState::open(workspace, true)?.ok_or_else(|| {
        anyhow::anyhow!(
            "kiln's state directory for {} is missing",
            workspace.display()
        )
    })?;
    Ok(state.lock_run(what)?)
}

/// Whether a command may run with any directory as its workspace, `$HOME` included: it runs no
/// program there and serves none of its files (the LLM check, plugin listings, history and
/// reports of the store, gc, parsing an answer, a batch's queue). Every other command is
/// refused a workspace that is `$HOME`, `/` or holds kiln's own directories.
fn works_outside_a_project(command: &Command) -> bool {
    match command {
        Command::Llm(_)
        | Command::Plugin(_)
        | Command::History(_)
        | Command::Report(_)
        | Command::Gc(_)
        | Command::WarmCache => true,
        Command::Edit(cmd) => !matches!(cmd, edit_cmd::EditCommand::Apply { .. }),
        Command::Batch(cmd) => !matches!(cmd, batch_cmd::BatchCommand::Run(_)),
        Command::Agent(_)
        | Command::Fix(_)
        | Command::Loop(_)
        | Command::Check(_)
        | Command::Mcp(_)
        | Command::Tool(_)
        | Command::Trust(_)
        | Command::Undo(_)
        | Command::Worker(_)
        | Command::RunTask => false,
    }
}

/// Whether a command reads or writes workspace files (so an edit interrupted by a killed kiln
/// is finished or undone before it starts).
fn touches_workspace(command: &Command) -> bool {
    match command {
        Command::Agent(_)
        | Command::Fix(_)
        | Command::Loop(_)
        | Command::Check(_)
        | Command::Mcp(_)
        | Command::RunTask
        | Command::Undo(_) => true,
        Command::Edit(cmd) => matches!(cmd, edit_cmd::EditCommand::Apply { .. }),
        Command::Tool(cmd) => matches!(cmd, tool_cmd::ToolCommand::Call { .. }),
        Command::History(_)
        | Command::Llm(_)
        | Command::Plugin(_)
        | Command::Trust(_)
        | Command::Report(_)
        | Command::Batch(_)
        | Command::Worker(_)
        | Command::WarmCache
        | Command::Gc(_) => false,
    }
}

/// Roll an unfinished apply forward or back and remove stale temporary files, saying so on
/// stderr. A failure is reported and does not stop the command (an apply refuses to start
/// on its own when the journal cannot be kept).
fn recover_interrupted_edits(workspace: &std::path::Path) {
    match crate::edit::journal::recover_workspace(workspace) {
        Ok(report) => {
            for m in report.messages() {
                eprintln!("warning: {m}");
            }
        }
        Err(e) => eprintln!("warning: cannot check for an interrupted edit: {e}"),
    }
}

/// An error and its causes on one line, each cause said once (a message that already
/// quotes its cause, "cannot create X: Read-only file system", is not followed by it again),
/// with a hint for a read-only file system.
fn error_text(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let c = cause.to_string();
        if !text.contains(&c) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&c);
        }
    }
    let read_only = e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.raw_os_error() == Some(libc::EROFS))
    }) || text.contains("(os error 30)");
    if read_only {
        text.push_str(
            "\n  the workspace is on a read-only file system: kiln writes its logs in .kiln/ and the files it edits there; run it on a writable copy",
        );
    }
    text
}

//! `kiln loop`: the execute/review loop over a task file (seed 003), with live events for a
//! person (stderr) or as JSON lines (stdout), Ctrl-C handling and artifacts in `.kiln/loop/`.

use super::llm_cmd::LlmArgs;
use super::{Ctx, Outcome, print_json};
use crate::config::ExecGrant;
use crate::engine::agent::AgentOptions;
use crate::engine::review::{LoopDeps, LoopOptions, REVIEW_COMMANDS, load_task, run_loop};
use crate::engine::{Event, ModelSource, Replay};
use crate::llm::LlmClient;
use anyhow::Context;
use clap::Args;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, Args)]
pub(crate) struct LoopArgs {
    /// The task file (inside the workspace). Optional TOML front matter (`+++` fences) with
    /// `[tools] bash = ["python3", ...]` lets the execution phase run those programs.
    #[arg(long)]
    task: PathBuf,
    /// Rounds (each an execution phase, then a review unless the work is complete).
    #[arg(long, default_value_t = 5)]
    loops: u32,
    /// Turn budget of each execution phase; the review gets max(6, half of it).
    #[arg(long, default_value_t = 30)]
    iterations: u32,
    /// A command run_cmd may run in the execution phase (and what it is told to validate
    /// with), e.g. "cargo test".
    #[arg(long)]
    test_command: Option<String>,
    /// Default edit format of write_patch.
    #[arg(long, default_value = "search-replace")]
    format: String,
    /// Per-tool timeout in seconds.
    #[arg(long, default_value_t = 30.0)]
    tool_timeout: f64,
    /// Also append every event as a JSON line to this file.
    #[arg(long)]
    log_path: Option<PathBuf>,
    /// Replay recorded answers (JSONL) instead of calling a model.
    #[arg(long)]
    replay: Option<PathBuf>,
    /// Events as JSON lines on stdout (the last is `loop.run.result`).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    llm: LlmArgs,
    #[command(flatten)]
    budget: super::common::BudgetArgs,
}

/// The task file as a workspace-relative path; a file outside the workspace (through `..`,
/// an absolute path or a symbolic link) is refused.
fn task_path(workspace: &Path, given: &Path) -> anyhow::Result<String> {
    let abs = if given.is_absolute() {
        given.to_path_buf()
    } else {
        std::env::current_dir()
            .context("cannot determine the current directory")?
            .join(given)
    };
    let real = abs
        .canonicalize()
        .with_context(|| format!("task file {} does not exist", given.display()))?;
    let rel = real.strip_prefix(workspace).map_err(|_| {
        anyhow::anyhow!(
            "task file {} is outside the workspace {}; kiln loop works only on a task file inside it",
            given.display(),
            workspace.display()
        )
    })?;
    Ok(rel.to_string_lossy().into_owned())
}

pub(crate) async fn run(ctx: &Ctx, extra: &[PathBuf], args: LoopArgs) -> anyhow::Result<Outcome> {
    let task_file = task_path(&ctx.workspace, &args.task)?;
    let ws = crate::edit::Workspace::open(&ctx.workspace)?;
    let task = load_task(&ws, &task_file)?;
    for w in &task.warnings {
        eprintln!("warning: {task_file}: {}", crate::terminal::printable(w));
    }
    let mut config = ctx.config.clone();
    let test_command = args
        .test_command
        .clone()
        .or(config.agent.test_command.clone());
    if let Some(cmd) = &test_command {
        crate::config::grant_test_command(&mut config, cmd).map_err(|e| anyhow::anyhow!(e))?;
    }
    // What run_cmd may run in the execution phase: what the configuration grants the shell
    // plugin by name, and the task's `bash` list (consent: the user named the task file).
    let shell = config.plugins.entry("shell".into()).or_default();
    let granted: Vec<String> = shell
        .exec
        .iter()
        .flatten()
        .map(|g| g.program.clone())
        .filter(|p| !p.contains(['*', '?', '[']))
        .collect();
    for program in task.bash.iter().map(String::as_str).chain(REVIEW_COMMANDS) {
        shell.exec.get_or_insert_with(Vec::new).push(ExecGrant {
            program: program.to_string(),
            args: vec!["*".into()],
        });
    }
    let mut model = match &args.replay {
        Some(file) => {
            ModelSource::replay(Replay::from_jsonl(file).map_err(|e| anyhow::anyhow!(e))?)
        }
        None => ModelSource::live(LlmClient::new(args.llm.settings_with_key(&config)?)?),
    };
    args.budget.apply(&config, &mut model)?;
    let ctx2 = ctx.with_config(config.clone());
    let registry = ctx2.registry(extra).await?;
    let mut store = ctx.open_store()?;
    let opts = LoopOptions {
        task_file: task_file.clone(),
        loops: args.loops.max(1),
        iterations: args.iterations.max(1),
        agent: AgentOptions {
            tool_timeout: Duration::from_secs_f64(args.tool_timeout.max(0.001)),
            hooks: config.agent.hooks.clone().unwrap_or_default(),
            default_format: args.format.clone(),
            protected: config.protected(),
            require_confinement: config.sandbox.require_confinement == Some(true),
            ..Default::default()
        },
        granted_commands: granted,
        log_path: args.log_path.clone(),
    };
    if !args.json && !ctx.quiet {
        eprintln!(
            "kiln loop: task {task_file}, at most {} of {} each; model {}",
            crate::terminal::count(opts.loops as usize, "round", "rounds"),
            crate::terminal::count(opts.iterations as usize, "turn", "turns"),
            model.label()
        );
    }
    let (rx, _ctrl_c) = super::common::ctrl_c_watch();
    let json = args.json;
    let quiet = ctx.quiet;
    let mut seq = 0u64;
    let mut on_event = move |e: &Event| {
        seq += 1;
        if json {
            print_json(&e.to_json(seq, crate::clock::now_ms()));
        } else if quiet {
        } else if let Event::TextDelta { .. } = e {
        } else if let Some(line) = e.human() {
            eprintln!("{line}");
        }
    };
    let result = run_loop(
        &opts,
        LoopDeps {
            workspace: &ctx.workspace,
            registry: &registry,
            model: &mut model,
            store: &mut store,
            cancel: rx,
            on_event: &mut on_event,
        },
    )
    .await?;
    if !json {
        println!("{}", crate::terminal::printable(result.summary.trim()));
        for p in &result.pending {
            println!("pending: {}", crate::terminal::printable(p));
        }
        eprintln!(
            "[{}] {}; tokens in {} / out {}; artifacts in .kiln/loop/",
            result.stop_reason,
            crate::terminal::count(result.loops_completed as usize, "round", "rounds"),
            result.usage.input + result.usage.cached_input,
            result.usage.output
        );
    }
    Ok(super::common::outcome_of(
        result.stop_reason,
        result.stop_reason.is_success(),
    ))
}

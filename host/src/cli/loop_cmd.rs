//! `kiln loop`: the execute/review loop over a task file, with live events for a
//! person (stderr) or as JSON lines (stdout), Ctrl-C handling and artifacts in `.kiln/loop/`.

use super::common::{EventSink, ctrl_c_watch, exit_for};
use super::ctx::{Ctx, Outcome};
use super::event_log::EventLog;
use super::llm_cmd::LlmArgs;
use super::settings::LoopSettings;
use crate::engine::Event;
use crate::engine::review::{LoopDeps, run_loop};
use clap::Args;
use kiln_protocol::outcome::LoopRunResult;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub(crate) struct LoopArgs {
    /// The task file (inside the workspace). Optional TOML front matter (`+++` fences) with
    /// `[tools] bash = ["python3", ...]` lets the execution phase run those programs.
    #[arg(long)]
    pub(super) task: Option<PathBuf>,
    /// Rounds (each an execution phase, then a review unless the work is complete).
    #[arg(long, default_value_t = 5)]
    pub(super) loops: u32,
    /// Turn budget of each execution phase; the review gets max(6, half of it).
    #[arg(long, default_value_t = 30)]
    pub(super) iterations: u32,
    /// A command run_cmd may run in the execution phase (and what it is told to validate
    /// with), e.g. "cargo test".
    #[arg(long)]
    pub(super) test_command: Option<String>,
    /// Default edit format of write_patch.
    #[arg(long, default_value = crate::engine::defaults::DEFAULT_FORMAT)]
    pub(super) format: String,
    /// Per-tool timeout in seconds.
    #[arg(long, default_value_t = 30.0)]
    pub(super) tool_timeout: f64,
    /// End the run as `blocked` when a reviewer names a blocker (by default the next round
    /// is shown the blocker and the run goes on).
    #[arg(long)]
    pub(super) stop_on_blocker: bool,
    /// Also append every event as a JSON line to this file.
    #[arg(long)]
    pub(super) log_path: Option<PathBuf>,
    /// Replay recorded answers (JSONL) instead of calling a model.
    #[arg(long)]
    pub(super) replay: Option<PathBuf>,
    /// Events as JSON lines on stdout (the last is `loop.run.result`).
    #[arg(long)]
    pub(super) json: bool,
    /// Continue loop run ID (cancelled or crashed) from its stored conversations: the
    /// answers and tool results it already had are replayed, not asked for or run again; it
    /// keeps the options it was started with (`kiln loop --resume ID`, no `--task`).
    #[arg(long, value_name = "ID")]
    pub(super) resume: Option<i64>,
    #[command(flatten)]
    pub(super) llm: LlmArgs,
    #[command(flatten)]
    pub(super) budget: super::common::BudgetArgs,
}

pub(crate) async fn run(
    ctx: &Ctx,
    extra: &[PathBuf],
    mut args: LoopArgs,
) -> anyhow::Result<Outcome> {
    if let Some(id) = args.resume {
        let spec = super::resume_cmd::prepare(ctx, crate::task_spec::Kind::Loop, id)?;
        super::task_cmd::apply_loop(&mut args, &spec, &ctx.workspace);
    }
    if let Some(task) = &args.task {
        let rel = super::settings::task_path(&ctx.workspace, task)?;
        crate::engine::resume::set_record(super::task_cmd::spec_of_loop(&args, &rel));
    }
    let mut s = LoopSettings::resolve(ctx, args)?;
    let registry = ctx.with_config(s.config.clone()).registry(extra).await?;
    let mut store = ctx.open_store()?;
    let opts = &s.options;
    if !s.json && !ctx.quiet {
        eprintln!(
            "kiln loop: task {}, at most {} of {} each; model {}",
            opts.task_file,
            crate::terminal::count(opts.loops as usize, "round", "rounds"),
            crate::terminal::count(opts.iterations as usize, "turn", "turns"),
            s.model.label()
        );
    }
    let (cancel, _ctrl_c) = ctrl_c_watch();
    // A person sees one line per event, without the streamed model text.
    let mut log = EventLog::lines_only(!ctx.quiet && !s.json);
    let mut sink = EventSink::new(s.json, &mut log);
    let mut on_event = |e: &Event| sink.event(e);
    let result = run_loop(
        opts,
        LoopDeps {
            workspace: &ctx.workspace,
            registry: &registry,
            model: &mut s.model,
            store: &mut store,
            cancel,
            on_event: &mut on_event,
        },
    )
    .await?;
    if !s.json {
        print_result(&result, ctx.quiet);
    }
    Ok(exit_for(result.stop_reason))
}

/// The loop's summary and what is still pending for a person, then a summary line on stderr
/// (unless `quiet`).
fn print_result(result: &LoopRunResult, quiet: bool) {
    super::output::out_line(&crate::terminal::printable(result.summary.trim()));
    for p in &result.pending {
        super::output::out_line(&format!("pending: {}", crate::terminal::printable(p)));
    }
    if quiet {
        return;
    }
    super::output::err_line(&format!(
        "[{}] {}; tokens in {} / out {}; artifacts in .kiln/loop/",
        result.stop_reason,
        crate::terminal::count(result.loops_completed as usize, "round", "rounds"),
        result.usage.input + result.usage.cached_input,
        result.usage.output
    ));
}

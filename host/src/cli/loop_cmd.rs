//! `kiln loop`: the execute/review loop over a task file, with live events for a
//! person (stderr) or as JSON lines (stdout), Ctrl-C handling and artifacts in `.kiln/loop/`.

use super::args::LoopArgs;
use super::common::{EventSink, ctrl_c_watch, exit_for};
use super::ctx::{Ctx, Outcome};
use super::event_log::EventLog;
use super::settings::LoopSettings;
use crate::engine::Event;
use crate::engine::kind::{ExecuteReview, LoopKind};
use crate::engine::run::RunCtx;
use kiln_protocol::outcome::LoopRunResult;
use std::path::PathBuf;

pub(crate) async fn run(
    ctx: &Ctx,
    extra: &[PathBuf],
    mut args: LoopArgs,
) -> anyhow::Result<Outcome> {
    let mut resumed = None;
    if let Some(id) = args.resume {
        let r = super::resume_cmd::prepare(ctx, crate::task_spec::Kind::Loop, id)?;
        super::task_cmd::apply_loop(&mut args, &r.spec, &ctx.workspace);
        resumed = Some(r);
    }
    let record = match &args.task {
        Some(task) => {
            let rel = super::settings::task_path(ctx, task)?;
            Some(super::task_cmd::spec_of_loop(&args, &rel))
        }
        None => None,
    };
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
    let result = ExecuteReview { opts }
        .run(RunCtx {
            workspace: &ctx.workspace,
            store: &mut store,
            events: &mut on_event,
            model: &mut s.model,
            plugins: &registry,
            cancel,
            task: record.as_ref(),
            resumed: resumed.as_mut(),
            undo: &ctx.undo,
        })
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
        result.usage.prompt(),
        result.usage.output
    ));
}

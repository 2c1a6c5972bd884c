//! `kiln fix`: the compile-and-fix loop from the command line, with live events for a person
//! (stderr) or as JSON lines (stdout), Ctrl-C handling and the result
//! (`loop.result`, with its cost).

use super::args::FixArgs;
use super::common::{EventSink, ctrl_c_watch, exit_for};
use super::ctx::{Ctx, Outcome};
use super::event_log::EventLog;
use super::settings::FixSettings;
use crate::engine::kind::LoopKind;
use crate::engine::{self, FixOutcome};
use crate::llm::Usage;
use crate::llm::pricing::format_usd;
use crate::plugin::PluginKind;
use crate::terminal::count;
use std::path::PathBuf;

/// The tool plugin whose read-only tools the model may use in project mode.
const PROJECT_TOOLS_PLUGIN: &str = "fs";

pub(crate) async fn run(ctx: &Ctx, extra: &[PathBuf], args: FixArgs) -> anyhow::Result<Outcome> {
    let s = FixSettings::resolve(ctx, args)?;
    let mut store = ctx.open_store()?;
    let mut model = s.model.open_capped(Some(&store), &s.budget, &s.config)?;
    let ctx2 = ctx.with_config(s.config.clone());
    // Project mode: the `fs` plugin answers the model's read-only look-around tools.
    let look = s.options.project() && s.options.tool_rounds > 0;
    let needed: &[&str] = if look {
        &[&s.runner, &s.format, PROJECT_TOOLS_PLUGIN]
    } else {
        &[&s.runner, &s.format]
    };
    let reg = ctx2
        .registry_for(extra, crate::plugin::Needed::Only(needed))
        .await?;
    let runner = reg.get(&s.runner, Some(PluginKind::Runner))?;
    let format = reg.get(&s.format, Some(PluginKind::EditFormat))?;
    let tools = match look {
        true => Some(reg.get(PROJECT_TOOLS_PLUGIN, Some(PluginKind::Tool))?),
        false => None,
    };
    if let Some(line) = ctx.root_banner().filter(|_| !ctx.quiet && !s.json) {
        super::output::err_line(&line);
    }
    let (cancel, _ctrl_c) = ctrl_c_watch();
    let console = !ctx.quiet && !s.json;
    // The banner before the first check (which may take minutes): `loop.started`, which
    // waits for it, then only names the loop.
    if console {
        super::output::err_line(&crate::terminal::printable(&format!(
            "fixing {} with runner `{}`, format `{}`, model `{}` (at most {})",
            if s.options.targets.is_empty() {
                "the project".to_string()
            } else {
                s.options.targets.join(", ")
            },
            runner.name,
            format.name,
            model.label(),
            count(s.options.max_iters as usize, "iteration", "iterations")
        )));
    }
    let mut log = EventLog::new(console, None).bannered();
    let mut sink = EventSink::new(s.json, &mut log).holding_result();
    let mut on_event = |e: &engine::Event| sink.event(e);
    let fix = engine::kind::Fix {
        opts: &s.options,
        plugins: engine::fix::FixPlugins {
            runner,
            format,
            tools,
        },
    };
    let outcome = fix
        .run(engine::run::RunCtx {
            workspace: &ctx.workspace,
            store: &mut store,
            events: &mut on_event,
            model: &mut model,
            plugins: &reg,
            cancel,
            task: None,
            resumed: None,
            undo: &ctx.undo,
        })
        .await?;
    sink.log().end_text();
    let usage = store.loop_detail(outcome.loop_id)?.row.tokens;
    let cost = crate::llm::pricing::cost_usd(&model.label(), &usage, &s.config.pricing);
    if s.json {
        sink.finish_result(&outcome, cost);
    } else {
        print_result(&outcome, &usage, cost, ctx.quiet);
    }
    Ok(exit_for(outcome.stop_reason))
}

/// A short result for a person (stdout); the full record is `--json` or `kiln history show`.
/// Then a summary line on stderr, unless `quiet`.
fn print_result(outcome: &FixOutcome, usage: &Usage, cost: Option<f64>, quiet: bool) {
    super::output::out_line(&crate::terminal::printable(
        outcome.summary.lines().next().unwrap_or(""),
    ));
    for f in outcome.modified_files.iter().flatten() {
        super::output::out_line(&format!("changed: {}", crate::terminal::printable(f)));
    }
    // A warning, kept under -q: the model's own edits to the check may have decided it.
    if outcome.ok && !outcome.check_changed.is_empty() {
        super::output::err_line(&crate::terminal::printable(&format!(
            "kiln: warning: the model changed what the check runs ({}): review those changes before trusting this success (`kiln history show {}`)",
            outcome.check_changed.join(", "),
            outcome.loop_id
        )));
    }
    if quiet {
        return;
    }
    super::output::err_line(&format!(
        "[{}] {}, tokens in {} / out {}{}",
        outcome.stop_reason,
        count(outcome.iters as usize, "iteration", "iterations"),
        usage.prompt(),
        usage.output,
        cost.map(|c| format!(", cost {}", format_usd(c)))
            .unwrap_or_default()
    ));
}

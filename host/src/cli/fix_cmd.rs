//! `kiln fix`: the compile-and-fix loop from the command line, with live events for a person
//! (stderr) or as JSON lines (stdout), Ctrl-C handling and the seed-000 result shape.

use super::event_log::EventLog;
use super::llm_cmd::LlmArgs;
use super::{Ctx, Outcome, print_json};
use crate::engine::{self, Event, FixOptions, ModelSource, Replay};
use crate::llm::LlmClient;
use crate::llm::pricing::format_usd;
use crate::plugin::PluginKind;
use crate::terminal::count;
use anyhow::Context;
use clap::Args;
use std::path::PathBuf;

#[derive(Debug, Args)]
pub(crate) struct FixArgs {
    #[command(flatten)]
    runner: super::check::RunnerArgs,
    /// Edit format (default: `[fix] format` in kiln.toml, else search-replace).
    #[arg(long)]
    format: Option<String>,
    /// Iteration ceiling (default 5).
    #[arg(long)]
    max_iters: Option<u32>,
    /// Extra system prompt text.
    #[arg(long)]
    system: Option<String>,
    /// Language hint for the model.
    #[arg(long)]
    lang: Option<String>,
    /// The task prompt, from a file (default: `[fix] prompt` in kiln.toml).
    #[arg(long)]
    prompt_file: Option<PathBuf>,
    /// Replay recorded LLM responses from a JSONL file instead of calling a model.
    #[arg(long, conflicts_with = "replay_loop")]
    replay: Option<PathBuf>,
    /// Replay the LLM responses recorded for an earlier loop.
    #[arg(long)]
    replay_loop: Option<i64>,
    /// Events as JSON lines on stdout; the last (`loop.result`) carries the result.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    llm: LlmArgs,
    #[command(flatten)]
    budget: super::common::BudgetArgs,
}

pub(crate) async fn run(ctx: &Ctx, extra: &[PathBuf], args: FixArgs) -> anyhow::Result<Outcome> {
    // A missing API key is reported before anything runs or loads.
    let live = match (&args.replay, args.replay_loop) {
        (None, None) => Some(args.llm.settings_with_key(&ctx.config)?),
        _ => None,
    };
    let targets = args.runner.targets()?;
    let mut config = ctx.config.clone();
    let runner_settings = args.runner.consent(&mut config)?;
    let prompt = match &args.prompt_file {
        Some(p) => Some(
            std::fs::read_to_string(p)
                .with_context(|| format!("cannot read --prompt-file {}", p.display()))?,
        ),
        None => config.fix.prompt.clone(),
    };
    let mut store = ctx.open_store()?;
    let mut model = match (&args.replay, args.replay_loop) {
        (Some(file), _) => {
            ModelSource::replay(Replay::from_jsonl(file).map_err(|e| anyhow::anyhow!(e))?)
        }
        (None, Some(id)) => {
            ModelSource::replay(Replay::from_store(&store, id).map_err(|e| anyhow::anyhow!(e))?)
        }
        (None, None) => ModelSource::live(LlmClient::new(match live {
            Some(s) => s,
            None => args.llm.settings(&config)?,
        })?),
    };
    args.budget.apply(&config, &mut model)?;
    let format_name = args
        .format
        .clone()
        .or(config.fix.format.clone())
        .unwrap_or_else(|| "search-replace".into());
    let ctx2 = ctx.with_config(config.clone());
    let reg = ctx2
        .registry_for(
            extra,
            crate::plugin::Needed::Only(&[&args.runner.runner, &format_name]),
        )
        .await?;
    let runner = reg.get(&args.runner.runner, Some(PluginKind::Runner))?;
    let format = reg.get(&format_name, Some(PluginKind::EditFormat))?;
    let opts = FixOptions {
        targets,
        max_iters: args.max_iters.or(config.fix.max_iters).unwrap_or(5),
        system: args.system.clone(),
        lang: args.lang.clone(),
        prompt,
        runner_settings,
        whole_file_format: format.name == "whole",
        protected: config.protected(),
        ..Default::default()
    };
    let (rx, _ctrl_c) = super::common::ctrl_c_watch();
    let json = args.json;
    let mut seq = 0u64;
    let mut log = EventLog::new(!ctx.quiet, None);
    // `loop.result` is printed once the loop is over, with its cost.
    let mut result_event: Option<serde_json::Value> = None;
    let mut on_event = |e: &Event| {
        seq += 1;
        if json {
            let v = e.to_json(seq, crate::clock::now_ms());
            if matches!(e, Event::LoopResult(_)) {
                result_event = Some(v);
            } else {
                print_json(&v);
            }
        } else {
            log.event(e);
        }
    };
    let outcome = engine::run_fix(
        &opts,
        engine::fix::FixDeps {
            workspace: &ctx.workspace,
            runner,
            format,
            model: &mut model,
            store: &mut store,
            cancel: rx,
            on_event: &mut on_event,
        },
    )
    .await?;
    log.end_text();
    let model_name = model.label();
    let usage = store.loop_detail(outcome.loop_id)?.row.tokens;
    let cost = crate::llm::pricing::cost_usd(&model_name, &usage, &config.pricing);
    if json {
        let mut v = result_event.unwrap_or_else(|| {
            Event::LoopResult(outcome.clone()).to_json(seq + 1, crate::clock::now_ms())
        });
        if let serde_json::Value::Object(m) = &mut v {
            m.insert("cost_usd".into(), cost.into());
        }
        print_json(&v);
    } else {
        // A short result for a person; the full record is `--json` or `kiln history show`.
        println!(
            "{}",
            crate::terminal::printable(outcome.summary.lines().next().unwrap_or(""))
        );
        for f in outcome.modified_files.iter().flatten() {
            println!("changed: {}", crate::terminal::printable(f));
        }
        eprintln!(
            "[{}] {}, tokens in {} / out {}{}",
            outcome.stop_reason,
            count(outcome.iters as usize, "iteration", "iterations"),
            usage.input + usage.cached_input,
            usage.output,
            cost.map(|c| format!(", cost {}", format_usd(c)))
                .unwrap_or_default()
        );
    }
    Ok(super::common::outcome_of(
        outcome.stop_reason,
        outcome.stop_reason == engine::StopReason::Success,
    ))
}

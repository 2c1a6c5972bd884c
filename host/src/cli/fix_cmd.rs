//! `kiln fix`: the compile-and-fix loop from the command line, with live events for a person
//! (stderr) or as JSON lines (stdout), Ctrl-C handling and the seed-000 result shape.

use super::llm_cmd::LlmArgs;
use super::{Ctx, Outcome, print_json};
use crate::engine::{self, Event, FixOptions, ModelSource, Replay};
use crate::llm::LlmClient;
use crate::plugin::PluginKind;
use crate::store::Store;
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
}

pub(crate) async fn run(ctx: &Ctx, extra: &[PathBuf], args: FixArgs) -> anyhow::Result<Outcome> {
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
    let mut store = Store::open(&ctx.workspace)?;
    let mut model = match (&args.replay, args.replay_loop) {
        (Some(file), _) => {
            ModelSource::replay(Replay::from_jsonl(file).map_err(|e| anyhow::anyhow!(e))?)
        }
        (None, Some(id)) => {
            ModelSource::replay(Replay::from_store(&store, id).map_err(|e| anyhow::anyhow!(e))?)
        }
        (None, None) => ModelSource::live(LlmClient::new(args.llm.settings(&config)?)?),
    };
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
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            let _ = tx.send(true);
        }
    });
    let json = args.json;
    let mut seq = 0u64;
    let mut on_event = move |e: &Event| {
        seq += 1;
        if json {
            print_json(&e.to_json(seq, crate::store::now_ms()));
        } else if let Some(line) = e.human() {
            eprintln!("{line}");
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
    if !json {
        println!("{}", serde_json::to_string_pretty(&outcome)?);
    }
    Ok(match outcome.stop_reason {
        engine::StopReason::Success => Outcome::Success,
        engine::StopReason::Error => Outcome::Error,
        _ => Outcome::Failure,
    })
}

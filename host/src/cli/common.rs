//! What every loop command shares: where the model's answers come from (live or replayed),
//! the budget flags, the Ctrl-C watch that cancels a run, the sink that shows its events
//! (human lines or JSON), and the mapping from a run's stop reason to the command's outcome
//! (and so its exit code).

use super::ctx::Outcome;
use super::event_log::EventLog;
use super::llm_args::LlmArgs;
use super::output::print_json;
pub(crate) use super::signals::{ctrl_c_watch, note_inherited_signals, stop_signal};
use crate::config::Config;
use crate::engine::budget::Budget;
use crate::engine::{Event, ModelSource, Replay, StopReason};
use crate::llm::{LlmClient, LlmSettings};
use crate::store::Store;
use anyhow::Context;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// `--max-cost` and `--max-tokens`: what the run may spend on model requests.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct BudgetArgs {
    /// Stop (reason `budget`, exit 1) before a model request that would take the run's cost
    /// past USD (default: `[budget] max_cost_usd`). Needs a known price for the model.
    #[arg(long, value_name = "USD")]
    pub max_cost: Option<f64>,
    /// Stop (reason `budget`, exit 1) before a model request that would take the run's tokens
    /// past N (default: `[budget] max_tokens`).
    #[arg(long, value_name = "N")]
    pub max_tokens: Option<u64>,
}

impl BudgetArgs {
    /// Cap `model` with these flags over `[budget]`; refused (before any run begins) for a
    /// cost cap on a model whose price is unknown.
    pub fn apply(
        &self,
        config: &crate::config::Config,
        model: &mut ModelSource,
    ) -> anyhow::Result<()> {
        let max_cost_usd = self.max_cost.or(config.budget.max_cost_usd);
        if let Some(c) = max_cost_usd
            && !(c.is_finite() && c >= 0.0)
        {
            anyhow::bail!("--max-cost {c} is not an amount; give USD (a number, 0 or more)");
        }
        let name = model.label();
        let price = crate::llm::pricing::price(&name, &config.pricing);
        if max_cost_usd.is_some() && price.is_none() {
            anyhow::bail!(
                "--max-cost (or [budget] max_cost_usd) needs the price of model `{name}`, and kiln knows none: add [pricing.\"{name}\"] with `input` and `output` (USD per million tokens) to your configuration, or cap tokens with --max-tokens"
            );
        }
        model.set_budget(Budget {
            max_tokens: self.max_tokens.or(config.budget.max_tokens),
            max_cost_usd,
            price,
            output_estimate: 0,
        });
        Ok(())
    }
}

/// The outcome of a loop that stopped for `reason`: success exits 0, an interrupted run 130
/// (as a shell reports a process ended by SIGINT), an error 2, any other end 1.
pub(crate) fn outcome_of(reason: StopReason, success: bool) -> Outcome {
    match reason {
        _ if success => Outcome::Success,
        StopReason::Cancelled => Outcome::Interrupted,
        StopReason::Error => Outcome::Error,
        _ => Outcome::Failure,
    }
}

/// Where a command's model answers come from, decided from its flags before anything loads
/// (so a missing API key is reported first) and opened when the command needs the model.
pub(crate) enum ModelPlan {
    /// `--replay FILE`: recorded answers, one JSON object per line.
    ReplayFile(PathBuf),
    /// `--replay-loop ID`: the answers recorded in the store for an earlier loop.
    ReplayLoop(i64),
    /// A model server, with settings already resolved and its key checked.
    Live(LlmSettings),
}

impl ModelPlan {
    /// The replay named by the flags, else the live model of `[llm]`, the environment and the
    /// `--provider`/`--base-url`/`--model` flags; a hosted API without a key is refused here.
    pub fn resolve(
        replay: Option<&Path>,
        replay_loop: Option<i64>,
        llm: &LlmArgs,
        config: &Config,
    ) -> anyhow::Result<ModelPlan> {
        Ok(match (replay, replay_loop) {
            (Some(file), _) => ModelPlan::ReplayFile(file.to_path_buf()),
            (None, Some(id)) => ModelPlan::ReplayLoop(id),
            (None, None) => ModelPlan::Live(llm.settings_with_key(config)?),
        })
    }

    /// The model source: the replay read (from `store` for `--replay-loop`) or the client
    /// built.
    pub fn open(self, store: Option<&Store>) -> anyhow::Result<ModelSource> {
        Ok(match self {
            ModelPlan::ReplayFile(file) => {
                ModelSource::replay(Replay::from_jsonl(&file).map_err(|e| {
                    anyhow::anyhow!("--replay {}: {e}", super::root::user_file(&file))
                })?)
            }
            ModelPlan::ReplayLoop(id) => {
                let store = store.context("--replay-loop needs the workspace's store")?;
                ModelSource::replay(Replay::from_store(store, id).map_err(anyhow::Error::msg)?)
            }
            ModelPlan::Live(settings) => ModelSource::live(LlmClient::new(settings)?),
        })
    }

    /// [`ModelPlan::open`], then capped by `--max-cost`/`--max-tokens` over `[budget]`.
    pub fn open_capped(
        self,
        store: Option<&Store>,
        budget: &BudgetArgs,
        config: &Config,
    ) -> anyhow::Result<ModelSource> {
        let mut model = self.open(store)?;
        budget.apply(config, &mut model)?;
        Ok(model)
    }
}

/// Adds fields to the JSON object of an event.
type ExtendJson<'a> = dyn Fn(&Event, &mut serde_json::Map<String, Value>) + Send + 'a;

/// How a loop command shows its events: numbered JSON lines on stdout with `--json`, and the
/// human log (console lines on stderr, a log file) as configured.
pub(crate) struct EventSink<'a> {
    json: bool,
    seq: u64,
    log: &'a mut EventLog,
    /// Fields a command adds to an event's JSON (the agent's `cost_usd` on its result).
    extend: Option<Box<ExtendJson<'a>>>,
    /// Keep the final `loop.result` back instead of printing it, for [`EventSink::finish_result`].
    hold_result: bool,
    held: Option<Value>,
}

impl<'a> EventSink<'a> {
    /// A sink printing JSON lines when `json`, and writing every event to `log`.
    pub fn new(json: bool, log: &'a mut EventLog) -> EventSink<'a> {
        EventSink {
            json,
            seq: 0,
            log,
            extend: None,
            hold_result: false,
            held: None,
        }
    }

    /// Add fields to the JSON of the events `extend` chooses.
    pub fn extending(
        mut self,
        extend: impl Fn(&Event, &mut serde_json::Map<String, Value>) + Send + 'a,
    ) -> Self {
        self.extend = Some(Box::new(extend));
        self
    }

    /// Hold the fix loop's `loop.result` back until the run's cost is known.
    pub fn holding_result(mut self) -> Self {
        self.hold_result = true;
        self
    }

    /// One event of the run.
    pub fn event(&mut self, e: &Event) {
        self.seq += 1;
        if self.json {
            let mut v = e.to_json(self.seq, crate::clock::now_ms());
            if let (Some(extend), Value::Object(m)) = (&self.extend, &mut v) {
                extend(e, m);
            }
            if self.hold_result && matches!(e, Event::LoopResult(_)) {
                self.held = Some(v);
            } else {
                print_json(&v);
            }
        }
        self.log.event(e);
    }

    /// Print the held `loop.result` (or, if the loop sent none, one made from `outcome`) with
    /// `cost_usd` added.
    pub fn finish_result(&mut self, outcome: &crate::engine::FixOutcome, cost: Option<f64>) {
        let seq = self.seq + 1;
        let mut v = self.held.take().unwrap_or_else(|| {
            Event::LoopResult(outcome.clone()).to_json(seq, crate::clock::now_ms())
        });
        if let Value::Object(m) = &mut v {
            m.insert("cost_usd".into(), cost.into());
        }
        print_json(&v);
    }

    /// The human log, for the lines a command adds (banner, summary).
    pub fn log(&mut self) -> &mut EventLog {
        self.log
    }
}

/// The outcome of a run that stopped for `reason`, after the run is over: see [`outcome_of`].
pub(crate) fn exit_for(reason: StopReason) -> Outcome {
    outcome_of(reason, reason.is_success())
}

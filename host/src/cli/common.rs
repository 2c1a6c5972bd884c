//! What every loop command shares: the Ctrl-C watch that cancels a run, the budget flags, and
//! the mapping from a run's stop reason to the command's outcome (and so its exit code).

use super::Outcome;
use crate::engine::budget::Budget;
use crate::engine::{ModelSource, StopReason};

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

/// A channel that turns `true` on the first Ctrl-C; the loops watch it and stop between steps.
/// The task listening for the signal ends with the process (or when aborted by the caller).
pub(crate) fn ctrl_c_watch() -> (
    tokio::sync::watch::Receiver<bool>,
    tokio::task::JoinHandle<()>,
) {
    let (tx, rx) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            let _ = tx.send(true);
        }
    });
    (rx, task)
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

//! Spend caps of a command (`--max-cost`, `--max-tokens`, `[budget]`): the estimate of one
//! request from its size, and the check the ask-the-model step makes before every request.

use crate::llm::pricing::{Price, format_usd};
use crate::llm::{ChatRequest, Message, Usage};

/// Output tokens assumed for a request that names no limit of its own and a model whose
/// settings name none.
pub const DEFAULT_OUTPUT_ESTIMATE: u64 = 1024;

/// What a command may spend, over every model request it makes (nested runs included).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Budget {
    /// Total tokens (input, cached input, cache writes and output).
    pub max_tokens: Option<u64>,
    /// Total cost in USD, at `price`.
    pub max_cost_usd: Option<f64>,
    /// The model's price (required for `max_cost_usd`).
    pub price: Option<Price>,
    /// Output tokens a request is assumed to spend when it names no limit.
    pub output_estimate: u64,
}

/// The next request would exceed the budget.
#[derive(Debug, Clone, thiserror::Error)]
#[error("budget: {0}")]
pub struct BudgetExceeded(pub String);

/// Tokens in a usage, every class.
pub fn total_tokens(u: &Usage) -> u64 {
    u.prompt() + u.cache_write + u.output
}

/// The request's input tokens, estimated as characters / 4 over everything it sends.
pub fn estimate_input(req: &ChatRequest) -> u64 {
    let mut chars = req.system.as_deref().map_or(0, str::len);
    for m in &req.messages {
        chars += match m {
            Message::User { text } => text.len(),
            Message::Assistant { text, tool_calls } => {
                text.len()
                    + tool_calls
                        .iter()
                        .map(|c| c.name.len() + c.arguments.len())
                        .sum::<usize>()
            }
            Message::ToolResult { content, .. } => content.len(),
        };
    }
    for t in &req.tools {
        chars += t.name.len() + t.description.len() + t.parameters.to_string().len();
    }
    (chars as u64).div_ceil(4)
}

impl Budget {
    /// No cap at all.
    pub fn is_unlimited(&self) -> bool {
        self.max_tokens.is_none() && self.max_cost_usd.is_none()
    }

    /// Refuse `req` when what was `spent` plus its estimate would pass a cap.
    pub fn check(&self, spent: &Usage, req: &ChatRequest) -> Result<(), BudgetExceeded> {
        if self.is_unlimited() {
            return Ok(());
        }
        let next = Usage {
            input: estimate_input(req),
            output: req
                .max_tokens
                .map(u64::from)
                .unwrap_or(self.output_estimate),
            ..Default::default()
        };
        if let Some(max) = self.max_tokens {
            let (used, more) = (total_tokens(spent), total_tokens(&next));
            if used + more > max {
                return Err(BudgetExceeded(format!(
                    "the next model request (about {more} tokens) would pass --max-tokens {max} ({used} spent so far)"
                )));
            }
        }
        if let (Some(max), Some(price)) = (self.max_cost_usd, self.price) {
            let (used, more) = (price.cost(spent), price.cost(&next));
            if used + more > max {
                return Err(BudgetExceeded(format!(
                    "the next model request (about {}) would pass --max-cost {} ({} spent so far)",
                    format_usd(more),
                    format_usd(max),
                    format_usd(used)
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(chars: usize) -> ChatRequest {
        ChatRequest {
            messages: vec![Message::User {
                text: "x".repeat(chars),
            }],
            max_tokens: Some(100),
            ..Default::default()
        }
    }

    #[test]
    fn tokens_cap_counts_spent_plus_estimate() {
        let b = Budget {
            max_tokens: Some(1000),
            ..Default::default()
        };
        let spent = Usage {
            input: 400,
            output: 100,
            ..Default::default()
        };
        // 400 chars ≈ 100 tokens in, 100 out: 700 ≤ 1000.
        assert!(b.check(&spent, &req(400)).is_ok());
        // 1600 chars ≈ 400 in, 100 out: 1000 ≤ 1000; one more char passes it.
        assert!(b.check(&spent, &req(1600)).is_ok());
        let e = b.check(&spent, &req(1604)).unwrap_err().to_string();
        assert!(
            e.contains("--max-tokens 1000") && e.contains("500 spent"),
            "{e}"
        );
    }

    #[test]
    fn cost_cap_uses_the_price() {
        let b = Budget {
            max_cost_usd: Some(1.0),
            // $1 per million in, $10 per million out.
            price: Some(Price {
                input: 1.0,
                cached_input: None,
                cache_write: None,
                output: 10.0,
            }),
            output_estimate: 0,
            ..Default::default()
        };
        let spent = Usage {
            output: 90_000,
            ..Default::default()
        };
        // $0.90 spent; 100 out = $0.001: fits. 20_000 more out = $0.20: does not.
        assert!(b.check(&spent, &req(0)).is_ok());
        let mut big = req(0);
        big.max_tokens = Some(20_000);
        let e = b.check(&spent, &big).unwrap_err().to_string();
        assert!(e.contains("--max-cost"), "{e}");
        assert!(Budget::default().check(&spent, &big).is_ok());
    }
}

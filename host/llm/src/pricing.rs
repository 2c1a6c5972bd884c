//! Model prices, for the cost shown at the end of `kiln fix` and `kiln agent`: USD per million
//! tokens of input, cached input, cache writes and output (reasoning is billed as output, and
//! [`Usage::output`] already includes it). A small built-in table of well-known models, matched
//! by the longest name prefix (a provider prefix such as `openai/` is ignored), under the
//! `[pricing."MODEL"]` tables of kiln.toml, which win. Unknown models have no cost.

use super::types::Usage;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The prices of one model, USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// Input tokens not read from a cache.
    pub input: f64,
    /// Input tokens read from the prompt cache (default: the input price).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input: Option<f64>,
    /// Input tokens written to the prompt cache (default: the input price).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write: Option<f64>,
    /// Output tokens, reasoning included.
    pub output: f64,
}

impl Price {
    const fn new(input: f64, cached_input: f64, cache_write: f64, output: f64) -> Price {
        Price {
            input,
            cached_input: Some(cached_input),
            cache_write: Some(cache_write),
            output,
        }
    }

    /// The cost of `usage` at these prices.
    pub fn cost(&self, usage: &Usage) -> f64 {
        let per = |tokens: u64, price: f64| tokens as f64 * price / 1_000_000.0;
        per(usage.input, self.input)
            + per(usage.cached_input, self.cached_input.unwrap_or(self.input))
            + per(usage.cache_write, self.cache_write.unwrap_or(self.input))
            + per(usage.output, self.output)
    }

    /// A field that is negative or not a number, as `(name, value)`.
    pub fn invalid_field(&self) -> Option<(&'static str, f64)> {
        [
            ("input", Some(self.input)),
            ("cached_input", self.cached_input),
            ("cache_write", self.cache_write),
            ("output", Some(self.output)),
        ]
        .into_iter()
        .find_map(|(name, v)| match v {
            Some(v) if !(v.is_finite() && v >= 0.0) => Some((name, v)),
            _ => None,
        })
    }
}

/// Built-in prices (USD per million tokens: input, cached input, cache write, output), by
/// model name prefix. OpenAI bills no cache writes (the input price is used).
const BUILTIN: &[(&str, Price)] = &[
    // OpenAI
    ("gpt-4o", Price::new(2.50, 1.25, 2.50, 10.00)),
    ("gpt-4o-mini", Price::new(0.15, 0.075, 0.15, 0.60)),
    ("gpt-4.1", Price::new(2.00, 0.50, 2.00, 8.00)),
    ("gpt-4.1-mini", Price::new(0.40, 0.10, 0.40, 1.60)),
    ("gpt-4.1-nano", Price::new(0.10, 0.025, 0.10, 0.40)),
    ("gpt-5", Price::new(1.25, 0.125, 1.25, 10.00)),
    ("gpt-5-mini", Price::new(0.25, 0.025, 0.25, 2.00)),
    ("gpt-5-nano", Price::new(0.05, 0.005, 0.05, 0.40)),
    ("o1", Price::new(15.00, 7.50, 15.00, 60.00)),
    ("o1-mini", Price::new(1.10, 0.55, 1.10, 4.40)),
    ("o3", Price::new(2.00, 0.50, 2.00, 8.00)),
    ("o3-mini", Price::new(1.10, 0.55, 1.10, 4.40)),
    ("o3-pro", Price::new(20.00, 20.00, 20.00, 80.00)),
    ("o4-mini", Price::new(1.10, 0.275, 1.10, 4.40)),
    // Anthropic (cache reads 0.1x, 5-minute cache writes 1.25x the input price)
    ("claude-opus-4", Price::new(15.00, 1.50, 18.75, 75.00)),
    ("claude-opus-4-5", Price::new(5.00, 0.50, 6.25, 25.00)),
    ("claude-sonnet-4", Price::new(3.00, 0.30, 3.75, 15.00)),
    ("claude-3-7-sonnet", Price::new(3.00, 0.30, 3.75, 15.00)),
    ("claude-3-5-sonnet", Price::new(3.00, 0.30, 3.75, 15.00)),
    ("claude-haiku-4-5", Price::new(1.00, 0.10, 1.25, 5.00)),
    ("claude-3-5-haiku", Price::new(0.80, 0.08, 1.00, 4.00)),
    ("claude-3-haiku", Price::new(0.25, 0.03, 0.30, 1.25)),
];

/// The names a model is looked up by: as given, without a provider prefix (`openai/gpt-4o`),
/// and for Claude models with dots written as dashes (`claude-3.5-haiku`, OpenRouter's way).
fn candidates(model: &str) -> Vec<String> {
    let model = model.trim();
    let mut out = vec![model.to_string()];
    let bare = model.rsplit('/').next().unwrap_or(model);
    out.push(bare.to_string());
    let lower = bare.to_ascii_lowercase();
    if lower.starts_with("claude") {
        out.push(lower.replace('.', "-"));
    } else {
        out.push(lower);
    }
    out.dedup();
    out
}

/// Whether `prefix` names `name`: equal, or followed by a separator (`gpt-4o-2024-08-06`,
/// `claude-sonnet-4-20250514`, `model:free`), so `o3` does not name `o30`.
fn names(prefix: &str, name: &str) -> bool {
    match name.strip_prefix(prefix) {
        Some("") => true,
        Some(rest) => rest.starts_with(['-', ':', '@', '_', '.']),
        None => false,
    }
}

/// The entry of `table` whose key is the longest prefix of one of the model's names, with
/// that key's length.
fn longest<'a, I>(table: I, model: &str) -> Option<(usize, Price)>
where
    I: Iterator<Item = (&'a str, &'a Price)> + Clone,
{
    candidates(model)
        .iter()
        .filter_map(|name| {
            table
                .clone()
                .filter(|(k, _)| names(k, name))
                .max_by_key(|(k, _)| k.len())
        })
        .max_by_key(|(k, _)| k.len())
        .map(|(k, p)| (k.len(), *p))
}

/// The price of `model`: the longest matching name of `[pricing]` in the configuration or of
/// the built-in table; the configuration wins at equal length (and always for an exact name).
pub fn price(model: &str, overrides: &BTreeMap<String, Price>) -> Option<Price> {
    if let Some(p) = overrides.get(model) {
        return Some(*p);
    }
    let user = longest(overrides.iter().map(|(k, v)| (k.as_str(), v)), model);
    let builtin = longest(BUILTIN.iter().map(|(k, v)| (*k, v)), model);
    match (user, builtin) {
        (Some((u, p)), Some((b, _))) if u >= b => Some(p),
        (Some(_), Some((_, p))) | (None, Some((_, p))) | (Some((_, p)), None) => Some(p),
        (None, None) => None,
    }
}

/// The cost in USD of `usage` on `model`, or `None` when its price is unknown.
pub fn cost_usd(model: &str, usage: &Usage, overrides: &BTreeMap<String, Price>) -> Option<f64> {
    price(model, overrides).map(|p| p.cost(usage))
}

/// A cost for a person: `$1.50`, `$0.0123`, `$0.000090`.
pub fn format_usd(cost: f64) -> String {
    // Zero (an empty f64 sum is -0.0) reads `$0.00`, never `$-0.000000`.
    if cost == 0.0 {
        "$0.00".to_string()
    } else if cost >= 1.0 {
        format!("${cost:.2}")
    } else if cost >= 0.01 {
        format!("${cost:.4}")
    } else {
        format!("${cost:.6}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(input: u64, cached_input: u64, output: u64) -> Usage {
        Usage {
            input,
            cached_input,
            output,
            ..Default::default()
        }
    }

    #[test]
    fn longest_prefix_wins_and_provider_prefixes_are_ignored() {
        let none = BTreeMap::new();
        let p = |m: &str| price(m, &none).map(|p| (p.input, p.output));
        assert_eq!(p("gpt-4o"), Some((2.50, 10.00)));
        assert_eq!(p("gpt-4o-2024-08-06"), Some((2.50, 10.00)));
        assert_eq!(p("gpt-4o-mini"), Some((0.15, 0.60)));
        assert_eq!(p("gpt-4o-mini-2024-07-18"), Some((0.15, 0.60)));
        assert_eq!(p("openai/gpt-4.1-mini"), Some((0.40, 1.60)));
        assert_eq!(p("gpt-4.1"), Some((2.00, 8.00)));
        assert_eq!(p("o3"), Some((2.00, 8.00)));
        assert_eq!(p("o3-mini"), Some((1.10, 4.40)));
        assert_eq!(p("o4-mini-2025-04-16"), Some((1.10, 4.40)));
        assert_eq!(p("claude-sonnet-4-20250514"), Some((3.00, 15.00)));
        assert_eq!(p("anthropic/claude-3.5-haiku"), Some((0.80, 4.00)));
        assert_eq!(p("claude-3-5-haiku-latest"), Some((0.80, 4.00)));
        assert_eq!(p("claude-opus-4-5-20251101"), Some((5.00, 25.00)));
        assert_eq!(p("claude-opus-4-1-20250805"), Some((15.00, 75.00)));
        // Not a prefix at a name boundary, or unknown.
        assert_eq!(p("o30"), None);
        assert_eq!(p("test-model"), None);
        assert_eq!(p("Qwen/Qwen2.5-Coder-32B-Instruct"), None);
        assert_eq!(p(""), None);
    }

    #[test]
    fn cost_counts_each_class_at_its_price() {
        let none = BTreeMap::new();
        // gpt-4o: 1M uncached in at 2.50, 1M cached at 1.25, 1M out at 10.
        let c = cost_usd("gpt-4o", &usage(1_000_000, 1_000_000, 1_000_000), &none).unwrap();
        assert!((c - 13.75).abs() < 1e-9, "{c}");
        // Anthropic cache writes are billed at their own price.
        let u = Usage {
            cache_write: 1_000_000,
            ..Default::default()
        };
        let c = cost_usd("claude-sonnet-4", &u, &none).unwrap();
        assert!((c - 3.75).abs() < 1e-9, "{c}");
        assert_eq!(cost_usd("unknown", &u, &none), None);
    }

    #[test]
    fn overrides_win_and_default_cached_to_input() {
        let mut o = BTreeMap::new();
        o.insert(
            "my-model".to_string(),
            Price {
                input: 1.0,
                cached_input: None,
                cache_write: None,
                output: 4.0,
            },
        );
        o.insert("gpt-4o".to_string(), Price::new(1.0, 0.5, 1.0, 2.0));
        let c = cost_usd("my-model-v2", &usage(500_000, 500_000, 250_000), &o).unwrap();
        assert!((c - 2.0).abs() < 1e-9, "{c}");
        assert_eq!(price("gpt-4o-2024-08-06", &o).unwrap().output, 2.0);
        // A longer built-in name is more specific than the override.
        assert_eq!(price("gpt-4o-mini", &o).unwrap().output, 0.60);
        assert_eq!(price("gpt-4.1", &o).unwrap().output, 8.0);
    }

    #[test]
    fn invalid_fields_are_named() {
        let mut p = Price::new(1.0, 1.0, 1.0, 1.0);
        assert_eq!(p.invalid_field(), None);
        p.cached_input = Some(-1.0);
        assert_eq!(p.invalid_field(), Some(("cached_input", -1.0)));
        p.cached_input = None;
        p.output = f64::NAN;
        assert_eq!(p.invalid_field().map(|f| f.0), Some("output"));
    }

    #[test]
    fn formatting() {
        assert_eq!(format_usd(0.000123), "$0.000123");
        assert_eq!(format_usd(0.0), "$0.00");
        assert_eq!(format_usd(-0.0), "$0.00");
        assert_eq!(format_usd([].iter().sum::<f64>()), "$0.00");
        assert_eq!(format_usd(0.5), "$0.5000");
        assert_eq!(format_usd(12.345), "$12.35");
    }
}

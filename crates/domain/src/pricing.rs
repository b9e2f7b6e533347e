//! Model prices, so a run can say what it cost when the provider does not.
//!
//! Prices are US dollars per million tokens. The built-in table holds list
//! prices of common OpenAI and Anthropic models; prices change, so a workflow
//! extends or overrides it with `pricing:`. A model is priced by its exact
//! name, else by the longest priced name it starts with (so
//! `claude-sonnet-4-20250514` is priced as `claude-sonnet-4`). A model with
//! no price gets no cost at all: a guess would be worse than an absence.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::event::Usage;

/// What one model costs, in USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// Prompt tokens (not read from the cache).
    pub input: f64,
    /// Completion tokens (thinking included).
    pub output: f64,
    /// Prompt tokens read from the provider's cache (default: `input`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read: Option<f64>,
    /// Prompt tokens written to the provider's cache (default: `input`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write: Option<f64>,
}

impl Price {
    /// The cost of `usage`, in USD.
    pub fn cost(&self, usage: &Usage) -> f64 {
        let per_token = |price: f64, tokens: u64| price * tokens as f64 / 1_000_000.0;
        per_token(self.input, usage.input_tokens)
            + per_token(self.output, usage.output_tokens)
            + per_token(
                self.cache_read.unwrap_or(self.input),
                usage.cache_read_input_tokens.unwrap_or(0),
            )
            + per_token(
                self.cache_write.unwrap_or(self.input),
                usage.cache_creation_input_tokens.unwrap_or(0),
            )
    }
}

/// Prices by model name: the built-ins plus a workflow's own.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PriceTable {
    prices: BTreeMap<String, Price>,
}

/// Model, input, output, cache read, cache write.
type Row = (&'static str, f64, f64, Option<f64>, Option<f64>);

/// List prices (USD per million tokens) as published by the providers.
const BUILT_IN: &[Row] = &[
    ("gpt-4o", 2.5, 10.0, Some(1.25), None),
    ("gpt-4o-mini", 0.15, 0.6, Some(0.075), None),
    ("gpt-4.1", 2.0, 8.0, Some(0.5), None),
    ("gpt-4.1-mini", 0.4, 1.6, Some(0.1), None),
    ("gpt-4.1-nano", 0.1, 0.4, Some(0.025), None),
    ("gpt-5", 1.25, 10.0, Some(0.125), None),
    ("gpt-5-mini", 0.25, 2.0, Some(0.025), None),
    ("gpt-5-nano", 0.05, 0.4, Some(0.005), None),
    ("o3", 2.0, 8.0, Some(0.5), None),
    ("o4-mini", 1.1, 4.4, Some(0.275), None),
    ("claude-opus-4", 15.0, 75.0, Some(1.5), Some(18.75)),
    ("claude-opus-4-5", 5.0, 25.0, Some(0.5), Some(6.25)),
    ("claude-sonnet-4", 3.0, 15.0, Some(0.3), Some(3.75)),
    ("claude-3-7-sonnet", 3.0, 15.0, Some(0.3), Some(3.75)),
    ("claude-haiku-4-5", 1.0, 5.0, Some(0.1), Some(1.25)),
    ("claude-3-5-haiku", 0.8, 4.0, Some(0.08), Some(1.0)),
];

impl PriceTable {
    /// The built-in list prices.
    pub fn built_in() -> Self {
        let prices = BUILT_IN
            .iter()
            .map(|&(model, input, output, cache_read, cache_write)| {
                let price = Price {
                    input,
                    output,
                    cache_read,
                    cache_write,
                };
                (model.to_owned(), price)
            })
            .collect();
        Self { prices }
    }

    /// This table with `overrides` added, replacing prices of the same name.
    #[must_use]
    pub fn extended(mut self, overrides: BTreeMap<String, Price>) -> Self {
        self.prices.extend(overrides);
        self
    }

    /// The price of `model`: exact name first, else the longest priced prefix.
    pub fn price(&self, model: &str) -> Option<&Price> {
        self.prices.get(model).or_else(|| {
            self.prices
                .iter()
                .filter(|(name, _)| model.starts_with(name.as_str()))
                .max_by_key(|(name, _)| name.len())
                .map(|(_, price)| price)
        })
    }

    /// The cost of `usage` on `model`, when its price is known.
    pub fn cost(&self, model: &str, usage: &Usage) -> Option<f64> {
        self.price(model).map(|p| p.cost(usage))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn usage(input: u64, output: u64) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: output,
            ..Usage::default()
        }
    }

    #[test]
    fn dated_model_names_take_the_longest_prefix() {
        let table = PriceTable::built_in();
        let sonnet = table.price("claude-sonnet-4-20250514").unwrap();
        assert_eq!(sonnet.input, 3.0);
        // `gpt-4o-mini-2024-07-18` is the mini model, not `gpt-4o`.
        assert_eq!(table.price("gpt-4o-mini-2024-07-18").unwrap().input, 0.15);
        assert_eq!(table.price("gpt-4o").unwrap().input, 2.5);
        assert!(table.price("llama-3-8b").is_none());
        assert_eq!(table.cost("llama-3-8b", &usage(1, 1)), None);
    }

    #[test]
    fn cost_counts_every_kind_of_token() {
        let price = Price {
            input: 1.0,
            output: 2.0,
            cache_read: Some(0.5),
            cache_write: None,
        };
        let mut u = usage(1_000_000, 500_000);
        u.cache_read_input_tokens = Some(2_000_000);
        u.cache_creation_input_tokens = Some(1_000_000);
        // 1 + 1 + 1 (cache reads at 0.5) + 1 (cache writes at the input price)
        assert!((price.cost(&u) - 4.0).abs() < 1e-9);
    }

    #[test]
    fn a_workflow_overrides_and_adds_prices() {
        let mut own = BTreeMap::new();
        let local = Price {
            input: 0.0,
            output: 0.0,
            cache_read: None,
            cache_write: None,
        };
        own.insert("gpt-4o".to_owned(), local);
        own.insert("my-model".to_owned(), local);
        let table = PriceTable::built_in().extended(own);
        assert_eq!(table.cost("gpt-4o", &usage(10, 10)), Some(0.0));
        assert_eq!(table.cost("my-model-q4", &usage(10, 10)), Some(0.0));
    }
}

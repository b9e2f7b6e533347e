//! Token counts, as agents report them: per invocation ([`Usage`]) and per
//! model ([`ModelUsage`]).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Token counts of one agent invocation (seed 001 `agent:complete.usage`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
    /// Tokens written to the provider's prompt cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_creation_input_tokens: Option<u64>,
    /// Tokens read from the provider's prompt cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_input_tokens: Option<u64>,
    /// Counts this version does not know (a newer writer's), kept whole.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Usage {
    /// `self + other`, field by field; a cache count stays unknown only
    /// when both are.
    pub fn plus(&self, other: &Usage) -> Usage {
        let add = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
        };
        Usage {
            extra: Map::new(),
            input_tokens: self.input_tokens.saturating_add(other.input_tokens),
            output_tokens: self.output_tokens.saturating_add(other.output_tokens),
            cache_creation_input_tokens: add(
                self.cache_creation_input_tokens,
                other.cache_creation_input_tokens,
            ),
            cache_read_input_tokens: add(
                self.cache_read_input_tokens,
                other.cache_read_input_tokens,
            ),
        }
    }

    /// `self - earlier`, field by field, never below zero; a cache count
    /// `self` does not know stays unknown. What one invocation used, of a
    /// provider that reports a resumed session's cumulative totals.
    pub fn minus(&self, earlier: &Usage) -> Usage {
        let sub = |a: Option<u64>, b: Option<u64>| a.map(|a| a.saturating_sub(b.unwrap_or(0)));
        Usage {
            extra: Map::new(),
            input_tokens: self.input_tokens.saturating_sub(earlier.input_tokens),
            output_tokens: self.output_tokens.saturating_sub(earlier.output_tokens),
            cache_creation_input_tokens: sub(
                self.cache_creation_input_tokens,
                earlier.cache_creation_input_tokens,
            ),
            cache_read_input_tokens: sub(
                self.cache_read_input_tokens,
                earlier.cache_read_input_tokens,
            ),
        }
    }
}

/// Per-model token counts, when a provider reports them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelUsage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
    /// Counts this version does not know (a newer writer's), kept whole.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

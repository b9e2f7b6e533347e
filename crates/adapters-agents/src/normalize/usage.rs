//! Token usage: the wire shapes the providers print, and their mapping to
//! [`Usage`], in one convention (a prompt count without the cached share).
//!
//! Codex and Copilot report, after a resume, the totals of the whole
//! session. `agent:complete` records one invocation's usage, so the
//! provider subtracts the usage the session's earlier invocations recorded
//! in the run's log (`AgentRequest::session_usage`, [`Usage::minus`]).

use std::collections::BTreeMap;

use domain::event::{ModelUsage, Usage};
use serde::Deserialize;

use super::extra::{ALL, Known};

/// A `usage` object: the Messages API's (Anthropic), which Claude Code
/// prints as is, and Codex's `turn.completed.usage`, which names the cache
/// counts its own way.
#[derive(Debug, Default, Clone, Copy, Deserialize)]
pub struct TokenCounts {
    /// Prompt tokens: on the Messages API those not read from or written to
    /// the cache; Codex counts the cached ones in (see
    /// [`TokenCounts::cached_inside`]).
    pub input_tokens: Option<u64>,
    /// Output tokens (cumulative while a message streams; reasoning included).
    pub output_tokens: Option<u64>,
    /// Prompt tokens written to the cache.
    #[serde(alias = "cache_write_input_tokens")]
    pub cache_creation_input_tokens: Option<u64>,
    /// Prompt tokens read from the cache.
    #[serde(alias = "cached_input_tokens")]
    pub cache_read_input_tokens: Option<u64>,
}

/// The fields of [`TokenCounts`], by every name it reads.
pub const TOKEN_COUNTS: Known = Known::Fields(&[
    ("input_tokens", ALL),
    ("output_tokens", ALL),
    ("cache_creation_input_tokens", ALL),
    ("cache_write_input_tokens", ALL),
    ("cache_read_input_tokens", ALL),
    ("cached_input_tokens", ALL),
]);

/// The fields of [`ModelTokens`], by every name it reads.
pub const MODEL_TOKENS: Known = Known::Fields(&[
    ("input_tokens", ALL),
    ("inputTokens", ALL),
    ("output_tokens", ALL),
    ("outputTokens", ALL),
]);

/// The fields of [`ChatCompletionsUsage`].
pub const CHAT_COMPLETIONS_USAGE: Known = Known::Fields(&[
    ("prompt_tokens", ALL),
    ("completion_tokens", ALL),
    (
        "prompt_tokens_details",
        Known::Fields(&[("cached_tokens", ALL)]),
    ),
]);

/// A Chat Completions `usage` (OpenAI and compatible servers).
#[derive(Debug, Default, Clone, Copy, Deserialize)]
pub struct ChatCompletionsUsage {
    /// All prompt tokens, cached ones included.
    pub prompt_tokens: Option<u64>,
    /// Generated tokens (reasoning included).
    pub completion_tokens: Option<u64>,
    /// The cached share of the prompt.
    pub prompt_tokens_details: Option<PromptTokensDetails>,
}

/// `usage.prompt_tokens_details`.
#[derive(Debug, Default, Clone, Copy, Deserialize)]
pub struct PromptTokensDetails {
    /// Prompt tokens read from the provider's cache.
    pub cached_tokens: Option<u64>,
}

/// One model's prompt and output tokens, as Claude Code (`modelUsage`,
/// `inputTokens`) and Gemini CLI (`stats.models`, `input_tokens`) print them.
#[derive(Debug, Clone, Copy, Deserialize)]
pub struct ModelTokens {
    /// Prompt tokens.
    #[serde(alias = "inputTokens")]
    pub input_tokens: Option<u64>,
    /// Completion tokens.
    #[serde(alias = "outputTokens")]
    pub output_tokens: Option<u64>,
}

impl TokenCounts {
    /// The usage of counts whose `input_tokens` include the cached share,
    /// as Codex prints them (the Responses API's convention): that share
    /// is taken out, so that every provider's `input_tokens` means the same.
    pub fn cached_inside(self) -> Usage {
        let cached = self.cache_read_input_tokens.unwrap_or(0);
        Usage::from(TokenCounts {
            input_tokens: self.input_tokens.map(|n| n.saturating_sub(cached)),
            ..self
        })
    }
}

impl From<TokenCounts> for Usage {
    fn from(u: TokenCounts) -> Self {
        usage(
            u.input_tokens,
            u.output_tokens,
            u.cache_creation_input_tokens,
            u.cache_read_input_tokens,
        )
    }
}

/// Normalizes to Anthropic's convention, which the rest of awr uses:
/// `input_tokens` excludes the cached prompt, which is counted apart (OpenAI
/// counts it inside `prompt_tokens`), so prices apply to each share once.
impl From<ChatCompletionsUsage> for Usage {
    fn from(u: ChatCompletionsUsage) -> Self {
        let prompt = u.prompt_tokens.unwrap_or(0);
        let cached = u.prompt_tokens_details.and_then(|d| d.cached_tokens);
        let cached = cached.unwrap_or(0);
        usage(
            Some(prompt.saturating_sub(cached)),
            u.completion_tokens,
            None,
            (cached > 0).then_some(cached),
        )
    }
}

/// A [`Usage`] from counts that may be missing: a missing prompt or output
/// count is zero, a missing cache count stays unknown.
pub fn usage(
    input: Option<u64>,
    output: Option<u64>,
    cache_creation: Option<u64>,
    cache_read: Option<u64>,
) -> Usage {
    Usage {
        extra: Default::default(),
        input_tokens: input.unwrap_or(0),
        output_tokens: output.unwrap_or(0),
        cache_creation_input_tokens: cache_creation,
        cache_read_input_tokens: cache_read,
    }
}

/// Per-model usage; `None` when no model is named.
pub fn model_usage(
    models: Option<BTreeMap<String, ModelTokens>>,
) -> Option<BTreeMap<String, ModelUsage>> {
    let map: BTreeMap<String, ModelUsage> = models
        .into_iter()
        .flatten()
        .map(|(model, tokens)| {
            let usage = ModelUsage {
                extra: Default::default(),
                input_tokens: tokens.input_tokens.unwrap_or(0),
                output_tokens: tokens.output_tokens.unwrap_or(0),
            };
            (model, usage)
        })
        .collect();
    (!map.is_empty()).then_some(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_without_names_give_none() {
        assert_eq!(model_usage(None), None);
        assert_eq!(model_usage(Some(BTreeMap::new())), None);
        let tokens = ModelTokens {
            input_tokens: Some(2),
            output_tokens: None,
        };
        let map = model_usage(Some([("m".to_owned(), tokens)].into())).unwrap_or_default();
        assert_eq!(map["m"].input_tokens, 2);
    }
}

//! Token usage: the wire shapes more than one provider prints, the mapping
//! to [`Usage`], and the arithmetic for CLIs that report a resumed
//! session's cumulative usage instead of one invocation's.
//!
//! Codex and Copilot report, after a resume, the totals of the whole
//! session. `agent:complete` records one invocation's usage, so the
//! provider subtracts the totals the session's previous invocation
//! reported (its *baseline*). Because each recorded usage is that
//! difference, the baseline of a session is also the sum of the usage its
//! earlier invocations recorded in the run's log; [`SessionTotals`] keeps
//! it in memory for the invocations one process makes.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use domain::event::{ModelUsage, Usage};
use serde::Deserialize;

/// The Messages API's `usage` (Anthropic), which Claude Code prints as is.
#[derive(Debug, Default, Clone, Copy, Deserialize)]
pub struct MessagesUsage {
    /// Prompt tokens not read from or written to the cache.
    pub input_tokens: Option<u64>,
    /// Output tokens (cumulative while a message streams).
    pub output_tokens: Option<u64>,
    /// Prompt tokens written to the cache.
    pub cache_creation_input_tokens: Option<u64>,
    /// Prompt tokens read from the cache.
    pub cache_read_input_tokens: Option<u64>,
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

impl From<MessagesUsage> for Usage {
    fn from(u: MessagesUsage) -> Self {
        usage(
            u.input_tokens,
            u.output_tokens,
            u.cache_creation_input_tokens,
            u.cache_read_input_tokens,
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

/// `total - previous`, field by field, never below zero; a cache count
/// `total` does not know stays unknown.
pub fn minus(total: &Usage, previous: &Usage) -> Usage {
    let sub = |a: Option<u64>, b: Option<u64>| a.map(|a| a.saturating_sub(b.unwrap_or(0)));
    Usage {
        extra: Default::default(),
        input_tokens: total.input_tokens.saturating_sub(previous.input_tokens),
        output_tokens: total.output_tokens.saturating_sub(previous.output_tokens),
        cache_creation_input_tokens: sub(
            total.cache_creation_input_tokens,
            previous.cache_creation_input_tokens,
        ),
        cache_read_input_tokens: sub(
            total.cache_read_input_tokens,
            previous.cache_read_input_tokens,
        ),
    }
}

/// `a + b`, field by field; a cache count stays unknown only when both are.
pub fn plus(a: &Usage, b: &Usage) -> Usage {
    let add = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
    };
    Usage {
        extra: Default::default(),
        input_tokens: a.input_tokens.saturating_add(b.input_tokens),
        output_tokens: a.output_tokens.saturating_add(b.output_tokens),
        cache_creation_input_tokens: add(
            a.cache_creation_input_tokens,
            b.cache_creation_input_tokens,
        ),
        cache_read_input_tokens: add(a.cache_read_input_tokens, b.cache_read_input_tokens),
    }
}

/// The cumulative usage each provider session reported last, for the
/// invocations of one process (see the module docs for what the run's log
/// holds instead). Cloned handles share one map; a std mutex, held for a
/// lookup or an insert, never across an await.
#[derive(Debug, Clone, Default)]
pub struct SessionTotals(Arc<Mutex<HashMap<String, Usage>>>);

impl SessionTotals {
    /// The totals `session` reported last, if any.
    pub fn get(&self, session: &str) -> Option<Usage> {
        self.0.lock().ok()?.get(session).cloned()
    }

    /// Records the totals `session` reported.
    pub fn set(&self, session: String, totals: Usage) {
        if let Ok(mut map) = self.0.lock() {
            map.insert(session, totals);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resumed_session_reports_only_its_own_share() {
        let total = usage(Some(360), Some(75), None, Some(10));
        let before = usage(Some(240), Some(50), None, Some(4));
        let mine = minus(&total, &before);
        assert_eq!((mine.input_tokens, mine.output_tokens), (120, 25));
        assert_eq!(mine.cache_read_input_tokens, Some(6));
        assert_eq!(mine.cache_creation_input_tokens, None);
        assert_eq!(minus(&before, &total).input_tokens, 0, "never below zero");
        assert_eq!(plus(&before, &mine), total);
    }

    #[test]
    fn totals_are_shared_by_clones() {
        let totals = SessionTotals::default();
        totals
            .clone()
            .set("s".into(), usage(Some(1), None, None, None));
        assert_eq!(totals.get("s").map(|u| u.input_tokens), Some(1));
        assert_eq!(totals.get("t"), None);
    }

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

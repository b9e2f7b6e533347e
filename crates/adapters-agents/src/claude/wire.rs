//! Claude Code's `--output-format stream-json` lines, as serde types.
//!
//! Only the fields the decoder reads are declared; everything is optional or
//! defaulted, so a newer CLI adding fields still decodes. What a line holds
//! beyond them is not dropped: each type's [`Known`] constant names the
//! fields it maps, and the rest goes into its event's `extra`
//! ([`crate::normalize::extra`]). Content blocks and stream events are parsed
//! one by one from [`Value`]s so an unknown one can be kept raw in a warning.
//! Seen on Claude Code 2.1.330 (see the captures under `testdata/claude/`).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use crate::normalize::extra::{ALL, Known};
use crate::normalize::usage::{MODEL_TOKENS, ModelTokens, TOKEN_COUNTS, TokenCounts};

/// What the decoder maps of `system/init`: the session and its model.
pub const INIT: Known = Known::Fields(&[
    ("type", ALL),
    ("subtype", ALL),
    ("session_id", ALL),
    ("model", ALL),
]);

/// What it maps of an `assistant` line besides its blocks ([`block_fields`]).
pub const ASSISTANT: Known = Known::Fields(&[
    ("type", ALL),
    ("message", Known::Fields(&[("id", ALL), ("content", ALL)])),
    ("is_api_error_message", ALL),
]);

/// What it maps of a `user` line besides its blocks.
pub const USER: Known = Known::Fields(&[
    ("type", ALL),
    ("message", Known::Fields(&[("content", ALL)])),
]);

/// What it maps of a content block, by its `type` ([`Block`]).
pub fn block_fields(block: &Value) -> Known {
    match block.get("type").and_then(Value::as_str) {
        Some("text") => TEXT_PART,
        Some("thinking") => Known::Fields(&[("type", ALL), ("thinking", ALL), ("signature", ALL)]),
        Some("tool_use") => {
            Known::Fields(&[("type", ALL), ("id", ALL), ("name", ALL), ("input", ALL)])
        }
        Some("tool_result") => Known::Fields(&[
            ("type", ALL),
            ("tool_use_id", ALL),
            ("content", ALL),
            ("is_error", ALL),
        ]),
        _ => ALL,
    }
}

/// A text block, or a text part of a tool result's content.
pub const TEXT_PART: Known = Known::Fields(&[("type", ALL), ("text", ALL)]);

/// What it maps of a `stream_event` line (a `content_block_delta`).
pub const STREAM_EVENT: Known = Known::Fields(&[
    ("type", ALL),
    (
        "event",
        Known::Fields(&[
            ("type", ALL),
            (
                "delta",
                Known::Fields(&[("type", ALL), ("text", ALL), ("thinking", ALL)]),
            ),
        ]),
    ),
    ("api_message_id", ALL),
]);

/// What it maps of the `result` line ([`ResultLine`]).
pub const RESULT: Known = Known::Fields(&[
    ("type", ALL),
    ("subtype", ALL),
    ("is_error", ALL),
    ("result", ALL),
    ("session_id", ALL),
    ("total_cost_usd", ALL),
    ("usage", TOKEN_COUNTS),
    ("modelUsage", Known::Each(&MODEL_TOKENS)),
    ("num_turns", ALL),
    ("duration_ms", ALL),
    ("terminal_reason", ALL),
    ("api_error_status", ALL),
    ("errors", ALL),
]);

/// `type: "system"` (`init`, `status`, `thinking_tokens`, `api_retry`, ...).
#[derive(Debug, Deserialize)]
pub struct SystemLine {
    /// Which system line.
    pub subtype: Option<String>,
    /// The session (on `init`, and on every line).
    pub session_id: Option<String>,
    /// The model (on `init`).
    pub model: Option<String>,
}

/// `type: "system", subtype: "api_retry"`: a failed API request, retried.
#[derive(Debug, Deserialize)]
pub struct ApiRetry {
    /// Retry attempt.
    pub attempt: Option<u64>,
    /// Retries allowed.
    pub max_retries: Option<u64>,
    /// Delay before the retry.
    pub retry_delay_ms: Option<u64>,
    /// HTTP status of the failed request.
    pub error_status: Option<u64>,
    /// Error kind, e.g. `server_error`.
    pub error: Option<Value>,
}

/// `type: "assistant"`: one content block of a model message per line.
#[derive(Debug, Deserialize)]
pub struct AssistantLine {
    /// The (partial) message.
    pub message: WireMessage,
    /// Set on the synthetic message the CLI writes after an API error.
    #[serde(default)]
    pub is_api_error_message: bool,
}

/// `type: "user"`: tool results (or an echoed user message).
#[derive(Debug, Deserialize)]
pub struct UserLine {
    /// The message.
    pub message: WireMessage,
}

/// A Messages API message as the CLI prints it.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct WireMessage {
    /// Message id, shared by all lines of one model message.
    pub id: Option<String>,
    /// Content: an array of blocks, or a plain string for user text.
    pub content: Value,
}

/// One content block.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Block {
    /// Model text.
    Text {
        /// The text.
        text: String,
    },
    /// Model thinking.
    Thinking {
        /// The thinking text.
        thinking: String,
        /// The provider's signature of the block, kept so it can be sent back.
        signature: Option<String>,
    },
    /// The model asked for a tool.
    ToolUse {
        /// Call id, matched by the `tool_result` (kept absent when missing).
        id: Option<String>,
        /// Tool name.
        name: String,
        /// Tool input.
        #[serde(default)]
        input: Value,
    },
    /// The CLI ran the tool.
    ToolResult(ToolResult),
}

/// A `tool_result` block: the CLI ran the tool.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ToolResult {
    /// The `tool_use` this answers.
    pub tool_use_id: Option<String>,
    /// Output: a string or an array of blocks.
    pub content: Value,
    /// The tool failed.
    pub is_error: Option<bool>,
}

/// `type: "stream_event"` (only with `--include-partial-messages`).
#[derive(Debug, Deserialize)]
pub struct StreamEventLine {
    /// The wrapped Messages API event.
    pub event: Value,
    /// The message the event belongs to.
    pub api_message_id: Option<String>,
}

/// The `delta` of a `content_block_delta` the decoder maps.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Delta {
    /// Text.
    TextDelta {
        /// The chunk.
        text: String,
    },
    /// Thinking.
    ThinkingDelta {
        /// The chunk.
        thinking: String,
    },
}

/// `type: "result"`: the last line of an invocation.
#[derive(Debug, Deserialize)]
pub struct ResultLine {
    /// `success`, `error_max_turns`, `error_during_execution`, ...
    pub subtype: Option<String>,
    /// The invocation failed (can be true with `subtype: "success"`).
    pub is_error: Option<bool>,
    /// Final text (or the error text).
    pub result: Option<String>,
    /// The session.
    pub session_id: Option<String>,
    /// Cost, cumulative over a resumed session.
    pub total_cost_usd: Option<f64>,
    /// Token usage of this invocation.
    pub usage: Option<TokenCounts>,
    /// Per-model usage.
    #[serde(rename = "modelUsage")]
    pub model_usage: Option<BTreeMap<String, ModelTokens>>,
    /// Model turns.
    pub num_turns: Option<u64>,
    /// Wall time of the invocation.
    pub duration_ms: Option<u64>,
    /// Why the loop stopped: `completed`, `api_error`, ...
    pub terminal_reason: Option<String>,
    /// HTTP status of a failed API call.
    pub api_error_status: Option<u64>,
    /// Error texts of `error_*` results.
    pub errors: Option<Vec<Value>>,
}

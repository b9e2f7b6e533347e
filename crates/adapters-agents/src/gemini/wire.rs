//! Gemini CLI's `--output-format stream-json` lines, as serde types.
//!
//! Only the fields the decoder reads are declared; everything is optional or
//! defaulted, so a newer CLI adding fields still decodes. What a line holds
//! beyond them goes into its event's `extra` ([`known`] names what each line
//! type maps; [`crate::normalize::extra`]). Seen on `@google/gemini-cli`
//! 0.61.0 (see the captures under `testdata/gemini/`).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use crate::normalize::extra::{ALL, Known};
use crate::normalize::usage::{MODEL_TOKENS, ModelTokens};

/// An `error` object as [`WireError`] reads it.
const ERROR: Known = Known::Fields(&[("message", ALL), ("code", ALL)]);

/// What the decoder maps of a line of type `kind`; `None` for a line whose
/// event keeps it whole (a warning, a reported error) or that has none.
pub fn known(kind: &str) -> Option<Known> {
    Some(match kind {
        "init" => Known::Fields(&[("type", ALL), ("session_id", ALL), ("model", ALL)]),
        "message" => Known::Fields(&[
            ("type", ALL),
            ("role", ALL),
            ("content", ALL),
            ("delta", ALL),
        ]),
        "tool_use" => Known::Fields(&[
            ("type", ALL),
            ("tool_name", ALL),
            ("tool_id", ALL),
            ("parameters", ALL),
        ]),
        "tool_result" => Known::Fields(&[
            ("type", ALL),
            ("tool_id", ALL),
            ("status", ALL),
            ("output", ALL),
            ("error", ERROR),
        ]),
        "result" => RESULT,
        _ => return None,
    })
}

/// What the decoder maps of the `result` line ([`ResultLine`]).
pub const RESULT: Known = Known::Fields(&[
    ("type", ALL),
    ("status", ALL),
    ("error", ERROR),
    (
        "stats",
        Known::Fields(&[
            ("input_tokens", ALL),
            ("output_tokens", ALL),
            ("cached", ALL),
            ("input", ALL),
            ("duration_ms", ALL),
            ("models", Known::Each(&MODEL_TOKENS)),
        ]),
    ),
]);

/// `type: "init"`: the first line of an invocation.
#[derive(Debug, Deserialize)]
pub struct InitLine {
    /// The session (the id to resume with).
    pub session_id: Option<String>,
    /// The model (`auto` when none was named).
    pub model: Option<String>,
}

/// `type: "message"`: a user message echoed back, or assistant text.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct MessageLine {
    /// `user` or `assistant`.
    pub role: Option<String>,
    /// The text (a chunk when `delta` is set).
    pub content: String,
    /// Set on streamed assistant chunks.
    pub delta: bool,
}

/// `type: "tool_use"`: the model asked for a tool.
#[derive(Debug, Deserialize)]
pub struct ToolUseLine {
    /// Tool name, e.g. `run_shell_command`.
    pub tool_name: String,
    /// Call id, matched by the `tool_result` (kept absent when missing).
    pub tool_id: Option<String>,
    /// Tool input.
    #[serde(default)]
    pub parameters: Value,
}

/// `type: "tool_result"`: the CLI ran the tool.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ToolResultLine {
    /// The `tool_use` this answers.
    pub tool_id: Option<String>,
    /// `success` or `error` (`success` even when a shell command exits non-zero).
    pub status: Option<String>,
    /// The tool's output.
    pub output: Value,
    /// Why the tool failed (with `status: "error"`).
    pub error: Option<WireError>,
}

/// `type: "error"`: a non-fatal error or warning the CLI reports.
#[derive(Debug, Deserialize)]
pub struct ErrorLine {
    /// `warning` or `error`.
    pub severity: Option<String>,
    /// What happened.
    pub message: Option<String>,
}

/// `type: "result"`: the last line of an invocation.
#[derive(Debug, Deserialize)]
pub struct ResultLine {
    /// `success` or `error`.
    pub status: Option<String>,
    /// Why the invocation failed.
    pub error: Option<WireError>,
    /// Token counts and timings of this invocation.
    pub stats: Option<Stats>,
}

/// An `error` object (on `result` and `tool_result`).
#[derive(Debug, Default, Deserialize)]
pub struct WireError {
    /// Error text; API errors embed the API's JSON error body.
    pub message: Option<String>,
    /// HTTP status or error code, when given.
    pub code: Option<Value>,
}

/// `stats` of a result.
#[derive(Debug, Default, Deserialize)]
pub struct Stats {
    /// Prompt tokens, cached ones included.
    pub input_tokens: Option<u64>,
    /// Completion tokens.
    pub output_tokens: Option<u64>,
    /// Prompt tokens read from the cache.
    pub cached: Option<u64>,
    /// Prompt tokens not read from the cache.
    pub input: Option<u64>,
    /// Wall time of the invocation.
    pub duration_ms: Option<u64>,
    /// Per-model counts.
    pub models: Option<BTreeMap<String, ModelTokens>>,
}

//! Gemini CLI's `--output-format stream-json` lines, as serde types.
//!
//! Only the fields the decoder reads are declared; everything is optional or
//! defaulted and unknown fields are ignored, so a newer CLI adding fields
//! still decodes. Seen on `@google/gemini-cli` 0.61.0 (see the captures under
//! `testdata/gemini/`).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

/// `type: "init"`: the first line of an invocation.
#[derive(Debug, Deserialize)]
pub struct InitLine {
    /// The session (the id to resume with).
    #[serde(default)]
    pub session_id: Option<String>,
    /// The model (`auto` when none was named).
    #[serde(default)]
    pub model: Option<String>,
}

/// `type: "message"`: a user message echoed back, or assistant text.
#[derive(Debug, Deserialize)]
pub struct MessageLine {
    /// `user` or `assistant`.
    #[serde(default)]
    pub role: Option<String>,
    /// The text (a chunk when `delta` is set).
    #[serde(default)]
    pub content: String,
    /// Set on streamed assistant chunks.
    #[serde(default)]
    pub delta: bool,
}

/// `type: "tool_use"`: the model asked for a tool.
#[derive(Debug, Deserialize)]
pub struct ToolUseLine {
    /// Tool name, e.g. `run_shell_command`.
    pub tool_name: String,
    /// Call id, matched by the `tool_result` (kept absent when missing).
    #[serde(default)]
    pub tool_id: Option<String>,
    /// Tool input.
    #[serde(default)]
    pub parameters: Value,
}

/// `type: "tool_result"`: the CLI ran the tool.
#[derive(Debug, Deserialize)]
pub struct ToolResultLine {
    /// The `tool_use` this answers.
    #[serde(default)]
    pub tool_id: Option<String>,
    /// `success` or `error` (`success` even when a shell command exits non-zero).
    #[serde(default)]
    pub status: Option<String>,
    /// The tool's output.
    #[serde(default)]
    pub output: Value,
    /// Why the tool failed (with `status: "error"`).
    #[serde(default)]
    pub error: Option<WireError>,
}

/// `type: "error"`: a non-fatal error or warning the CLI reports.
#[derive(Debug, Deserialize)]
pub struct ErrorLine {
    /// `warning` or `error`.
    #[serde(default)]
    pub severity: Option<String>,
    /// What happened.
    #[serde(default)]
    pub message: Option<String>,
}

/// `type: "result"`: the last line of an invocation.
#[derive(Debug, Deserialize)]
pub struct ResultLine {
    /// `success` or `error`.
    #[serde(default)]
    pub status: Option<String>,
    /// Why the invocation failed.
    #[serde(default)]
    pub error: Option<WireError>,
    /// Token counts and timings of this invocation.
    #[serde(default)]
    pub stats: Option<Stats>,
}

/// An `error` object (on `result` and `tool_result`).
#[derive(Debug, Default, Deserialize)]
pub struct WireError {
    /// Error kind (`unknown` for API errors in 0.61.0).
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    /// Error text; API errors embed the API's JSON error body.
    #[serde(default)]
    pub message: Option<String>,
    /// HTTP status or error code, when given.
    #[serde(default)]
    pub code: Option<Value>,
}

/// `stats` of a result.
#[derive(Debug, Default, Deserialize)]
pub struct Stats {
    /// Prompt tokens, cached ones included.
    #[serde(default)]
    pub input_tokens: Option<u64>,
    /// Completion tokens.
    #[serde(default)]
    pub output_tokens: Option<u64>,
    /// Prompt tokens read from the cache.
    #[serde(default)]
    pub cached: Option<u64>,
    /// Prompt tokens not read from the cache.
    #[serde(default)]
    pub input: Option<u64>,
    /// Wall time of the invocation.
    #[serde(default)]
    pub duration_ms: Option<u64>,
    /// Tool calls made.
    #[serde(default)]
    pub tool_calls: Option<u64>,
    /// Per-model counts.
    #[serde(default)]
    pub models: Option<BTreeMap<String, ModelStats>>,
}

/// One entry of `stats.models`.
#[derive(Debug, Default, Deserialize)]
pub struct ModelStats {
    /// Prompt tokens.
    #[serde(default)]
    pub input_tokens: Option<u64>,
    /// Completion tokens.
    #[serde(default)]
    pub output_tokens: Option<u64>,
}

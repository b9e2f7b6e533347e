//! Codex's `exec --json` lines, as serde types.
//!
//! Only the fields the decoder reads are declared; everything is optional or
//! defaulted and unknown fields are ignored, so a newer CLI adding fields
//! still decodes. Items are parsed one by one from [`Value`]s (by
//! `item.type`) so an unknown one can be kept raw in a warning. Seen on Codex
//! 0.169.0 (see the captures under `testdata/codex/`).

use serde::Deserialize;
use serde_json::Value;

/// `type: "thread.started"`: the thread (session) is known.
#[derive(Debug, Deserialize)]
pub struct ThreadStarted {
    /// The id to resume with.
    #[serde(default)]
    pub thread_id: Option<String>,
}

/// `type: "item.started" | "item.updated" | "item.completed"`.
#[derive(Debug, Deserialize)]
pub struct ItemLine {
    /// The item, parsed further by its `type`.
    pub item: Value,
}

/// The fields every item has.
#[derive(Debug, Deserialize)]
pub struct ItemHead {
    /// Item id, shared by the started/updated/completed lines of one item.
    #[serde(default)]
    pub id: Option<String>,
    /// `reasoning`, `agent_message`, `command_execution`, ...
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
}

/// A `reasoning` or `agent_message` item.
#[derive(Debug, Deserialize)]
pub struct TextItem {
    /// The text.
    #[serde(default)]
    pub text: String,
}

/// A `command_execution` item (no tool name, no call id).
#[derive(Debug, Deserialize)]
pub struct CommandExecution {
    /// The command line (a string on 0.169.0).
    #[serde(default)]
    pub command: Value,
    /// Interleaved stdout and stderr so far.
    #[serde(default)]
    pub aggregated_output: String,
    /// Exit code; `null` while running.
    #[serde(default)]
    pub exit_code: Option<i64>,
    /// `in_progress`, `completed`, `failed` (or `declined`).
    #[serde(default)]
    pub status: Option<String>,
}

/// An `mcp_tool_call` item.
#[derive(Debug, Deserialize)]
pub struct McpToolCall {
    /// The MCP server.
    #[serde(default)]
    pub server: Option<String>,
    /// The tool's name on that server.
    #[serde(default)]
    pub tool: Option<String>,
    /// The call's arguments.
    #[serde(default)]
    pub arguments: Value,
    /// The tool's result.
    #[serde(default)]
    pub result: Value,
    /// Set when the call failed (`{"message": ...}`).
    #[serde(default)]
    pub error: Value,
    /// `in_progress`, `completed`, `failed`.
    #[serde(default)]
    pub status: Option<String>,
}

/// An `error` item: a non-fatal warning.
#[derive(Debug, Deserialize)]
pub struct ErrorItem {
    /// What happened.
    #[serde(default)]
    pub message: String,
}

/// `type: "turn.completed"`.
#[derive(Debug, Deserialize)]
pub struct TurnCompleted {
    /// Token usage (cumulative for the thread after a resume).
    #[serde(default)]
    pub usage: Option<WireUsage>,
}

/// `usage` of a completed turn. No cost is reported.
#[derive(Debug, Default, Clone, Copy, Deserialize)]
pub struct WireUsage {
    /// Prompt tokens (cached ones included).
    #[serde(default)]
    pub input_tokens: Option<u64>,
    /// Prompt tokens read from the cache.
    #[serde(default)]
    pub cached_input_tokens: Option<u64>,
    /// Prompt tokens written to the cache.
    #[serde(default)]
    pub cache_write_input_tokens: Option<u64>,
    /// Completion tokens (reasoning ones included).
    #[serde(default)]
    pub output_tokens: Option<u64>,
    /// Reasoning tokens.
    #[serde(default)]
    pub reasoning_output_tokens: Option<u64>,
}

/// `type: "turn.failed"`.
#[derive(Debug, Deserialize)]
pub struct TurnFailed {
    /// Why.
    #[serde(default)]
    pub error: Option<ErrorBody>,
}

/// `error` of a failed turn.
#[derive(Debug, Deserialize)]
pub struct ErrorBody {
    /// The message.
    #[serde(default)]
    pub message: Option<String>,
}

/// `type: "error"`: a top-level, non-fatal error (e.g. `Reconnecting... 1/5`).
#[derive(Debug, Deserialize)]
pub struct ErrorLine {
    /// The message.
    #[serde(default)]
    pub message: Option<String>,
}

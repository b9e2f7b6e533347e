//! Codex's `exec --json` lines, as serde types.
//!
//! Only the fields the decoder reads are declared; everything is optional or
//! defaulted and unknown fields are ignored, so a newer CLI adding fields
//! still decodes. Items are parsed one by one from [`Value`]s (by
//! `item.type`) so an unknown one can be kept raw in a warning. Seen on Codex
//! 0.169.0 (see the captures under `testdata/codex/`).

use serde::Deserialize;
use serde_json::Value;

use crate::normalize::usage::TokenCounts;

/// `type: "thread.started"`: the thread (session) is known.
#[derive(Debug, Deserialize)]
pub struct ThreadStarted {
    /// The id to resume with.
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
    pub id: Option<String>,
    /// `reasoning`, `agent_message`, `command_execution`, ...
    #[serde(rename = "type")]
    pub kind: Option<String>,
}

/// A `reasoning` or `agent_message` item.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct TextItem {
    /// The text.
    pub text: String,
}

/// A `command_execution` item (no tool name, no call id).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct CommandExecution {
    /// The command line (a string on 0.169.0).
    pub command: Value,
    /// Interleaved stdout and stderr so far.
    pub aggregated_output: String,
    /// Exit code; `null` while running.
    pub exit_code: Option<i64>,
    /// `in_progress`, `completed`, `failed` (or `declined`).
    pub status: Option<String>,
}

/// An `mcp_tool_call` item (its `status` is read with every tool item's).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct McpToolCall {
    /// The MCP server.
    pub server: Option<String>,
    /// The tool's name on that server.
    pub tool: Option<String>,
    /// The call's arguments.
    pub arguments: Value,
    /// The tool's result.
    pub result: Value,
    /// Set when the call failed (`{"message": ...}`).
    pub error: Value,
}

/// An `error` item: a non-fatal warning.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ErrorItem {
    /// What happened.
    pub message: String,
}

/// `type: "turn.completed"`.
#[derive(Debug, Deserialize)]
pub struct TurnCompleted {
    /// Token usage (cumulative for the thread after a resume). No cost is
    /// reported.
    pub usage: Option<TokenCounts>,
}

/// `type: "turn.failed"`.
#[derive(Debug, Deserialize)]
pub struct TurnFailed {
    /// Why.
    pub error: Option<ErrorMessage>,
}

/// `error` of a failed turn, and `type: "error"`, a top-level, non-fatal
/// error (e.g. `Reconnecting... 1/5`).
#[derive(Debug, Deserialize)]
pub struct ErrorMessage {
    /// The message.
    pub message: Option<String>,
}

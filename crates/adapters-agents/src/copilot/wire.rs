//! Copilot CLI's `--output-format json` lines, as serde types.
//!
//! Every line is `{type, data, id, timestamp, parentId, ephemeral?}` except
//! the final `result`, whose fields are top-level. Only the fields the decoder
//! reads are declared; everything is optional or defaulted. What a line holds
//! beyond them (its envelope's ids and time included) goes into its event's
//! `extra` ([`known`]; [`crate::normalize::extra`]). Seen on
//! `@github/copilot` 1.0.102 (see the captures under `testdata/copilot/`).

use serde::Deserialize;
use serde_json::Value;

use crate::normalize::extra::{ALL, Known};

/// A line whose fields are in `data`: its `type`, and these of `data`.
macro_rules! data {
    ($($field:expr),* $(,)?) => {
        Known::Fields(&[("type", ALL), ("data", Known::Fields(&[$($field),*]))])
    };
}

/// What the decoder maps of a line of type `kind` (the `toolRequests` of a
/// message apart: [`TOOL_REQUEST`]); `None` for a line whose event keeps it
/// whole (a warning, a reported error) or that has none.
pub fn known(kind: &str) -> Option<Known> {
    Some(match kind {
        "assistant.message_delta" => data!(("messageId", ALL), ("deltaContent", ALL)),
        "assistant.message" => data!(("messageId", ALL), ("content", ALL), ("toolRequests", ALL)),
        "assistant.reasoning_delta" => data!(("reasoningId", ALL), ("deltaContent", ALL)),
        "assistant.reasoning" => data!(("reasoningId", ALL), ("content", ALL)),
        "tool.execution_start" => {
            data!(("toolCallId", ALL), ("toolName", ALL), ("arguments", ALL))
        }
        "tool.execution_complete" => data!(
            ("toolCallId", ALL),
            ("success", ALL),
            ("shellExecution", Known::Fields(&[("exitCode", ALL)])),
            ("result", Known::Fields(&[("content", ALL)])),
            ("error", ALL)
        ),
        "result" => Known::Fields(&[
            ("type", ALL),
            ("sessionId", ALL),
            ("exitCode", ALL),
            ("usage", Known::Fields(&[("sessionDurationMs", ALL)])),
        ]),
        _ => return None,
    })
}

/// What the decoder maps of one entry of a message's `toolRequests`.
pub const TOOL_REQUEST: Known =
    Known::Fields(&[("toolCallId", ALL), ("name", ALL), ("arguments", ALL)]);

/// `assistant.message_delta`: a streamed text chunk.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct MessageDelta {
    /// The message the chunk belongs to.
    pub message_id: Option<String>,
    /// The chunk.
    pub delta_content: String,
}

/// `assistant.message`: a complete model message.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Message {
    /// Message id (shared with its deltas).
    pub message_id: Option<String>,
    /// The text (empty when the message only calls tools).
    pub content: String,
    /// Tool calls the message makes.
    pub tool_requests: Vec<ToolRequest>,
}

/// One entry of `toolRequests`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolRequest {
    /// Call id, matched by `tool.execution_complete` (kept absent when missing).
    pub tool_call_id: Option<String>,
    /// Tool name, e.g. `bash`.
    pub name: String,
    /// Tool input.
    #[serde(default)]
    pub arguments: Value,
}

/// `assistant.reasoning_delta`: a streamed thinking chunk.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ReasoningDelta {
    /// The thinking block the chunk belongs to.
    pub reasoning_id: Option<String>,
    /// The chunk.
    pub delta_content: String,
}

/// `assistant.reasoning`: a complete thinking block.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Reasoning {
    /// Block id (shared with its deltas).
    pub reasoning_id: Option<String>,
    /// The thinking text.
    pub content: String,
}

/// `tool.execution_start`: the CLI starts running a tool.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ToolStart {
    /// Call id (kept absent when missing).
    pub tool_call_id: Option<String>,
    /// Tool name.
    pub tool_name: Option<String>,
    /// Tool input.
    pub arguments: Value,
}

/// `tool.execution_complete`: a tool returned.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolComplete {
    /// Call id (kept absent when missing).
    pub tool_call_id: Option<String>,
    /// The tool ran (true even when a shell command exits non-zero).
    pub success: Option<bool>,
    /// The shell command's outcome (shell tools only).
    pub shell_execution: Option<ShellExecution>,
    /// The output given to the model.
    pub result: Option<ToolOutput>,
    /// Why the tool failed (with `success: false`).
    pub error: Option<Value>,
}

/// `shellExecution` of a completed shell tool.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShellExecution {
    /// The command's exit code.
    pub exit_code: Option<i64>,
}

/// `result` of a completed tool.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ToolOutput {
    /// The output text.
    pub content: Value,
}

/// `model.call_failure` and `session.error`: a failed model call.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Failure {
    /// HTTP status of the failed request.
    pub status_code: Option<u64>,
    /// The API's error body (`model.call_failure`).
    pub error_message: Option<String>,
    /// What happened (`session.error`, `session.warning`).
    pub message: Option<String>,
}

/// `type: "result"`: the last line; its fields are top-level.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResultLine {
    /// The session (the only place it appears).
    pub session_id: Option<String>,
    /// The CLI's exit code.
    pub exit_code: Option<i64>,
    /// Timings (token counts are not on stdout).
    pub usage: Option<ResultUsage>,
}

/// `usage` of the result.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResultUsage {
    /// Wall time of the session.
    pub session_duration_ms: Option<u64>,
}

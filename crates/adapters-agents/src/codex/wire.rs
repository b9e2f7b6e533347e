//! Codex's `exec --json` lines, as serde types.
//!
//! Only the fields the decoder reads are declared; everything is optional or
//! defaulted, so a newer CLI adding fields still decodes. What a line holds
//! beyond them goes into its event's `extra` ([`known`];
//! [`crate::normalize::extra`]). Items are parsed one by one from
//! [`Value`]s (by `item.type`) so an unknown one can be kept raw in a
//! warning. Seen on Codex 0.169.0 (see the captures under `testdata/codex/`).

use serde::Deserialize;
use serde_json::Value;

use crate::normalize::extra::{ALL, Known};
use crate::normalize::usage::{TOKEN_COUNTS, TokenCounts};

/// What the decoder maps of a line of type `kind`; `None` for a line whose
/// event keeps it whole (a warning, a reported error) or that has none.
pub fn known(kind: &str, line: &serde_json::Value) -> Option<Known> {
    Some(match kind {
        "thread.started" => Known::Fields(&[("type", ALL), ("thread_id", ALL)]),
        "item.started" | "item.updated" | "item.completed" => {
            match line.pointer("/item/type").and_then(Value::as_str)? {
                "agent_message" | "reasoning" => TEXT_ITEM_LINE,
                "command_execution" => COMMAND_LINE,
                "mcp_tool_call" => MCP_LINE,
                // Recorded whole as the tool's input and output.
                "file_change" | "web_search" | "todo_list" => {
                    Known::Fields(&[("type", ALL), ("item", ALL)])
                }
                _ => return None,
            }
        }
        "turn.completed" => Known::Fields(&[("type", ALL), ("usage", TOKEN_COUNTS)]),
        _ => return None,
    })
}

/// An `agent_message` or `reasoning` item's line.
const TEXT_ITEM_LINE: Known = Known::Fields(&[
    ("type", ALL),
    (
        "item",
        Known::Fields(&[("id", ALL), ("type", ALL), ("text", ALL)]),
    ),
]);
/// A `command_execution` item's line.
const COMMAND_LINE: Known = Known::Fields(&[
    ("type", ALL),
    (
        "item",
        Known::Fields(&[
            ("id", ALL),
            ("type", ALL),
            ("command", ALL),
            ("aggregated_output", ALL),
            ("exit_code", ALL),
            ("status", ALL),
        ]),
    ),
]);
/// An `mcp_tool_call` item's line.
const MCP_LINE: Known = Known::Fields(&[
    ("type", ALL),
    (
        "item",
        Known::Fields(&[
            ("id", ALL),
            ("type", ALL),
            ("server", ALL),
            ("tool", ALL),
            ("arguments", ALL),
            ("result", ALL),
            ("error", ALL),
            ("status", ALL),
        ]),
    ),
]);

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

//! [`RuntimeCommand`]: what a user may tell a run (design §7).
//!
//! `send` and `reply` must name the node execution they are for; a command
//! that does not is recorded (`command:received`, `accepted: false`) and
//! rejected, never queued and never guessed.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Caller;
use crate::ids::NodeRunId;
use crate::time::Timestamp;

/// A command to a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum RuntimeCommand {
    /// Continue a paused or interrupted run; `message` defaults to `"continue"`.
    Resume {
        /// What to tell the agents that were running.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// Inject a message into one running node execution.
    #[serde(rename_all = "camelCase")]
    Send {
        /// The node execution it is for.
        node_run_id: NodeRunId,
        /// The text.
        message: String,
    },
    /// Answer a question a node execution asked.
    #[serde(rename_all = "camelCase")]
    Reply {
        /// The node execution it is for.
        node_run_id: NodeRunId,
        /// The text.
        message: String,
    },
    /// Approve what an `approval` node run asks, with `data` meeting its
    /// schema.
    #[serde(rename_all = "camelCase")]
    Approve {
        /// The node execution that asks.
        node_run_id: NodeRunId,
        /// The answer's data.
        #[serde(default, skip_serializing_if = "Value::is_null")]
        data: Value,
    },
    /// Reject what an `approval` node run asks.
    #[serde(rename_all = "camelCase")]
    Reject {
        /// The node execution that asks.
        node_run_id: NodeRunId,
        /// Why, for the record and the workflow.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// A CLI agent's own tool call waits for a person (Claude Code asks
    /// through awr's permission prompt tool): the node run asks, as for a
    /// tool granted with `requires_approval`, while its agent waits.
    #[serde(rename_all = "camelCase")]
    Ask {
        /// The node execution whose agent asks.
        node_run_id: NodeRunId,
        /// The call it asks about.
        tool: crate::event::AskedCall,
    },
    /// Stop at the next safe point.
    Pause,
    /// Stop for good.
    Cancel {
        /// Why, for the record.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
}

/// An answer to an approval, as the command that gave it said.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Answer {
    /// Approve or reject.
    pub approved: bool,
    /// An approval's data.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub data: Value,
    /// A rejection's reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Who answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<crate::Caller>,
    /// When the answer was accepted (its `command:received`).
    pub at: Timestamp,
}

/// The default message of a resume without one (seed 001 §5.2).
pub const DEFAULT_RESUME_MESSAGE: &str = "continue";

/// A message accepted into one node run's inbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InboxEntry {
    /// The node execution that will consume it.
    pub node_run_id: NodeRunId,
    /// The text.
    pub message: String,
    /// Offset of the `command:received` that accepted it: `agent:start`
    /// names it in `inbox` when it delivers the message.
    #[serde(default)]
    pub offset: u64,
}

/// Why a command was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    /// Not a command at all (bad JSON shape, unknown type, missing `nodeRunId`).
    #[error("invalid command: {0}")]
    Invalid(String),
}

impl RuntimeCommand {
    /// Parses a raw payload. `send`/`reply` without a valid `nodeRunId` fail here.
    ///
    /// ```
    /// use awr_domain::RuntimeCommand;
    /// use serde_json::json;
    ///
    /// let pause = RuntimeCommand::parse(&json!({"type": "pause"}))?;
    /// assert!(matches!(pause, RuntimeCommand::Pause));
    /// // A message must name the node run it is for: never guessed.
    /// assert!(RuntimeCommand::parse(&json!({"type": "send", "message": "hi"})).is_err());
    /// # Ok::<(), awr_domain::command::CommandError>(())
    /// ```
    pub fn parse(raw: &serde_json::Value) -> Result<Self, CommandError> {
        serde_json::from_value(raw.clone()).map_err(|e| CommandError::Invalid(e.to_string()))
    }

    /// The answer this command gives an approval, if it is one, from `by`,
    /// accepted at `at`.
    pub fn answer(&self, by: Option<Caller>, at: Timestamp) -> Option<(NodeRunId, Answer)> {
        let (node_run_id, approved, data, reason) = match self {
            Self::Approve { node_run_id, data } => (node_run_id, true, data.clone(), None),
            Self::Reject {
                node_run_id,
                reason,
            } => (node_run_id, false, Value::Null, reason.clone()),
            _ => return None,
        };
        let answer = Answer {
            approved,
            data,
            reason,
            by,
            at,
        };
        Some((*node_run_id, answer))
    }

    /// The node run an approval answer is for.
    pub fn approval_of(&self) -> Option<NodeRunId> {
        match self {
            Self::Approve { node_run_id, .. } | Self::Reject { node_run_id, .. } => {
                Some(*node_run_id)
            }
            _ => None,
        }
    }

    /// The inbox entry this command adds, if it is a message for a node run.
    pub fn inbox_entry(&self) -> Option<InboxEntry> {
        match self {
            Self::Send {
                node_run_id,
                message,
            }
            | Self::Reply {
                node_run_id,
                message,
            } => Some(InboxEntry {
                node_run_id: *node_run_id,
                message: message.clone(),
                offset: 0,
            }),
            _ => None,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn send_without_node_run_is_refused() {
        assert!(RuntimeCommand::parse(&json!({"type": "send", "message": "hi"})).is_err());
        assert!(
            RuntimeCommand::parse(&json!({"type": "send", "nodeRunId": "nope", "message": "hi"}))
                .is_err()
        );
        let ok = RuntimeCommand::parse(&json!({
            "type": "send",
            "nodeRunId": "0b6f8f4e-3c1a-4d2b-9f3e-1a2b3c4d5e6f",
            "message": "hi"
        }))
        .unwrap();
        assert_eq!(ok.inbox_entry().unwrap().message, "hi");
    }

    #[test]
    fn resume_message_is_optional() {
        let c = RuntimeCommand::parse(&json!({"type": "resume"})).unwrap();
        assert_eq!(c, RuntimeCommand::Resume { message: None });
    }
}

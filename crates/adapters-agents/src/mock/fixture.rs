//! The fixture file format (seed 001 §7.2) and its mapping to agent messages.
//!
//! A file is `{"calls": [{"input"?, "output", "events"?}]}`. `events` hold
//! `agent:*` shapes without the envelope; `output` is the call's result, or
//! an `error` to replay a failure. Unknown event types are kept as warnings
//! rather than refused, so fixtures recorded by a newer awr still replay.

use std::collections::BTreeMap;
use std::path::Path;

use application::ports::{AgentMessage, AgentRequest, AgentResult, QueryError};
use application::recording::turns::recorded_extra;
use domain::SessionId;
use domain::event::{ModelUsage, Usage};
use serde::Deserialize;
use serde_json::Value;

/// One fixture file: the recorded calls of one node, in order.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FixtureFile {
    /// Calls in the order the node made them.
    pub calls: Vec<FixtureCall>,
}

/// One recorded call.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FixtureCall {
    /// What the agent was asked. Checked on replay only when the call has
    /// a `requestHash` (a recording's): then it is the request hashed.
    pub input: Option<Value>,
    /// `sha256:<hex>` of the canonical request (`awr record-fixtures`); a
    /// replay that sends another request is refused.
    #[serde(default, rename = "requestHash")]
    pub request_hash: Option<String>,
    /// The call's index in its node, as recorded (for the reader).
    #[serde(default)]
    pub call: Option<u32>,
    /// The node run it was made in (`agent:start`'s `instance`): with
    /// `instanceCall`, the key a recording's call is served by.
    #[serde(default)]
    pub instance: Option<String>,
    /// Its number among that node run's calls.
    #[serde(default, rename = "instanceCall")]
    pub instance_call: Option<u32>,
    /// How the call ended.
    pub output: FixtureOutput,
    /// `agent:*` events the call produced, in order.
    #[serde(default)]
    pub events: Vec<Value>,
    /// For an HTTP agent's call: what each turn after the first added to
    /// the conversation, checked when the call is replayed turn by turn.
    #[serde(default)]
    pub turns: Vec<RecordedTurn>,
}

/// What one turn of an HTTP agent's tool loop added to the conversation:
/// the model's previous turn and the results of its tool calls.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RecordedTurn {
    /// The turn, from 1 (the first turn's request is the call's `input`).
    pub turn: u32,
    /// `sha256:` of `{"messages": messages}` in RFC 8785 form.
    pub request_hash: String,
    /// The messages, in the recording's JSON form.
    pub messages: Vec<Value>,
}

/// The recorded result of a call.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct FixtureOutput {
    /// Final text.
    pub text: String,
    /// Token usage.
    pub usage: Usage,
    /// Per-model usage.
    pub model_usage: Option<BTreeMap<String, ModelUsage>>,
    /// Cost.
    pub total_cost_usd: Option<f64>,
    /// Duration the provider reported.
    pub duration_ms: Option<u64>,
    /// Turns taken (default 1).
    pub num_turns: Option<u32>,
    /// Provider session.
    pub session_id: Option<SessionId>,
    /// Structured output as recorded (the runner recomputes it from `text`).
    pub structured_output: Option<Value>,
    /// Replays a failed call instead of a result.
    pub error: Option<FixtureError>,
}

/// A recorded failure.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FixtureError {
    /// Stable error type (`rate_limit`, `error_max_turns`, ...).
    pub error_type: String,
    /// Message.
    pub message: String,
}

/// Why a fixture file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum FixtureLoadError {
    /// The file could not be read.
    #[error("cannot read fixture file {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not a valid fixture file.
    #[error("invalid fixture file {path}: {source}")]
    Parse {
        /// The file.
        path: String,
        /// serde's message, with line and column.
        source: serde_json::Error,
    },
}

impl FixtureFile {
    /// Reads and parses a fixture file.
    pub fn load(path: &Path) -> Result<Self, FixtureLoadError> {
        let text = std::fs::read_to_string(path).map_err(|source| FixtureLoadError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// Parses the text of the fixture file at `path` (named in errors).
    pub fn parse(text: &str, path: &Path) -> Result<Self, FixtureLoadError> {
        serde_json::from_str(text).map_err(|source| FixtureLoadError::Parse {
            path: path.display().to_string(),
            source,
        })
    }
}

impl FixtureFile {
    /// The call that answers `request`: by `(instance, instanceCall)` in a
    /// file that records them (parallel `for_each` items call in any
    /// order), else by the node's call index.
    pub fn call_for(&self, request: &AgentRequest) -> Option<&FixtureCall> {
        if self.calls.iter().any(|c| c.instance.is_some()) {
            return self.calls.iter().find(|c| {
                c.instance.as_deref() == Some(request.instance.as_str())
                    && c.instance_call == Some(request.instance_call)
            });
        }
        self.calls.get(request.call_index as usize)
    }
}

impl FixtureCall {
    /// The messages this call replays: its events, then its result (or error).
    pub fn messages(&self) -> Vec<Result<AgentMessage, QueryError>> {
        let mut out = Vec::new();
        for event in &self.events {
            if let Some(message) = event_message(event) {
                // What the agent sent unmapped, before the message it came with.
                if let Some(extra) = recorded_extra(event)
                    && crate::normalize::extra::carries_extra(&message)
                {
                    out.push(Ok(AgentMessage::Extra(extra)));
                }
                out.push(Ok(message));
            }
        }
        // The result's own, kept on its `agent:complete` when recorded.
        if let Some(extra) = self
            .events
            .iter()
            .find(|e| e.get("type").and_then(Value::as_str) == Some("agent:complete"))
            .and_then(recorded_extra)
            .filter(|_| self.output.error.is_none())
        {
            out.push(Ok(AgentMessage::Extra(extra)));
        }
        let o = &self.output;
        out.push(match &o.error {
            Some(e) => Err(QueryError::Agent {
                error_type: e.error_type.clone().into(),
                message: e.message.clone(),
                details: None,
            }),
            None => Ok(AgentMessage::Completed(AgentResult {
                text: o.text.clone(),
                usage: o.usage.clone(),
                model_usage: o.model_usage.clone(),
                total_cost_usd: o.total_cost_usd,
                duration_ms: o.duration_ms,
                num_turns: o.num_turns.unwrap_or(1),
                session_id: o.session_id.clone(),
            })),
        });
        out
    }
}

/// Maps one recorded `agent:*` event to a message. `agent:complete` is
/// dropped: the call's `output` is the authoritative result. A malformed or
/// unknown event is kept as a warning, so nothing recorded disappears silently.
fn event_message(event: &Value) -> Option<AgentMessage> {
    let kind = event.get("type").and_then(Value::as_str).unwrap_or("");
    if kind == "agent:complete" {
        return None;
    }
    Some(
        known_event(kind, event).unwrap_or_else(|| AgentMessage::Warning {
            message: format!("fixture event `{kind}` is unknown or malformed; kept as a warning"),
            details: Some(event.clone()),
        }),
    )
}

fn known_event(kind: &str, event: &Value) -> Option<AgentMessage> {
    let text = |field: &str| event.get(field).and_then(Value::as_str).map(str::to_owned);
    let tokens = event.get("tokenCount").and_then(Value::as_u64);
    let message = match kind {
        "agent:start" => AgentMessage::Session {
            session_id: SessionId::new(text("sessionId")?).ok()?,
            model: text("model"),
        },
        "agent:thinking:delta" => AgentMessage::ThinkingDelta {
            content: text("content")?,
            token_count: tokens,
        },
        "agent:thinking" => AgentMessage::Thinking {
            content: text("content")?,
            token_count: tokens,
            signature: text("signature"),
        },
        "agent:text:delta" => AgentMessage::TextDelta {
            content: text("content")?,
        },
        "agent:text" => AgentMessage::Text {
            content: text("content")?,
        },
        "agent:tool:use" => AgentMessage::ToolUse {
            id: text("toolUseId"),
            name: text("toolName")?,
            input: event.get("toolInput").cloned().unwrap_or(Value::Null),
        },
        "agent:tool" => AgentMessage::Tool {
            id: text("toolUseId"),
            name: text("toolName")?,
            input: event.get("toolInput").cloned().unwrap_or(Value::Null),
            output: event.get("toolOutput").cloned().unwrap_or(Value::Null),
            duration_ms: event.get("durationMs").and_then(Value::as_u64),
            error: text("error"),
        },
        "agent:error" => AgentMessage::Error {
            error_type: text("errorType")?.into(),
            message: text("message").unwrap_or_default(),
            details: event.get("details").cloned(),
        },
        _ => return None,
    };
    Some(message)
}

//! Pairing the tool calls a CLI agent announces with their results.
//!
//! A call is emitted as [`AgentMessage::ToolUse`] where the agent made it,
//! with the provider's own id; its result is paired with it by that id
//! later and emitted as [`AgentMessage::Tool`]. A call that never gets a
//! result is recorded as it is, a use alone: nothing is made up for it when
//! the stream ends. A result that answers no call is kept as a warning.

use std::collections::HashSet;

use application::ports::AgentMessage;
use serde_json::Value;

use super::{Decoded, warning};

/// A tool call an agent announced, waiting for its result.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingCall {
    /// The provider's own id of the call (`None` when its line had none).
    pub id: Option<String>,
    /// Tool name.
    pub name: String,
    /// Full input.
    pub input: Value,
}

impl PendingCall {
    /// The call with its result: an [`AgentMessage::Tool`].
    pub fn done(self, output: Value, error: Option<String>) -> AgentMessage {
        AgentMessage::Tool {
            id: self.id,
            name: self.name,
            input: self.input,
            output,
            duration_ms: None,
            error,
        }
    }
}

/// What a tool result found among the calls.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// The call it answers, now taken from the pending ones.
    Call(PendingCall),
    /// A call with this id was already answered.
    Repeated,
    /// No call with this id was announced.
    Unknown,
}

/// The tool calls of one invocation.
#[derive(Debug, Default)]
pub struct ToolCalls {
    /// Calls without a result yet, in call order.
    pending: Vec<PendingCall>,
    /// Ids whose results were already paired (a repeated result is a warning).
    answered: HashSet<String>,
}

impl ToolCalls {
    /// Records a call the agent made; returns the message that announces it.
    pub fn call(&mut self, id: Option<String>, name: String, input: Value) -> AgentMessage {
        self.pending.push(PendingCall {
            id: id.clone(),
            name: name.clone(),
            input: input.clone(),
        });
        AgentMessage::ToolUse { id, name, input }
    }

    /// Records a call unless one with this id already waits (a CLI that
    /// announces a call twice, in the message and when it starts it).
    pub fn call_once(&mut self, id: Option<String>, name: String, input: Value) -> Vec<Decoded> {
        if self.is_pending(id.as_deref()) {
            return Vec::new();
        }
        vec![Ok(self.call(id, name, input))]
    }

    /// Whether a call with this id waits for its result.
    pub fn is_pending(&self, id: Option<&str>) -> bool {
        self.pending.iter().any(|c| c.id.as_deref() == id)
    }

    /// Takes the call a result names: the first pending one with this id (a
    /// result without an id answers the first call that had none).
    pub fn answer(&mut self, id: Option<&str>) -> Answer {
        match self.pending.iter().position(|c| c.id.as_deref() == id) {
            Some(at) => {
                let call = self.pending.remove(at);
                if let Some(id) = &call.id {
                    self.answered.insert(id.clone());
                }
                Answer::Call(call)
            }
            None if id.is_some_and(|id| self.answered.contains(id)) => Answer::Repeated,
            None => Answer::Unknown,
        }
    }

    /// Pairs a result with the call it answers and maps the two with
    /// `done`; a result that answers no pending call is kept as the warning
    /// of [`unpaired_result`] instead.
    pub fn complete(
        &mut self,
        id: Option<&str>,
        what: &str,
        key: &str,
        raw: &Value,
        done: impl FnOnce(PendingCall) -> AgentMessage,
    ) -> AgentMessage {
        match self.answer(id) {
            Answer::Call(call) => done(call),
            other => unpaired_result(&other, what, key, raw),
        }
    }

    /// Calls still without a result (they stay uses alone in the record).
    pub fn pending(&self) -> &[PendingCall] {
        &self.pending
    }
}

/// The warning for a tool result that answers no pending call; `what`
/// names the result (`tool_result`, `tool.execution_complete`) and `raw`
/// is kept whole under `key`.
pub fn unpaired_result(answer: &Answer, what: &str, key: &str, raw: &Value) -> AgentMessage {
    let why = match answer {
        Answer::Repeated => format!("a second {what} for the same call id; kept as is"),
        _ => format!("a {what} for a call that was never announced; kept as is"),
    };
    let mut details = serde_json::Map::new();
    details.insert(key.to_owned(), raw.clone());
    warning(why, Value::Object(details))
}

/// The error text of a failed tool from its output: the text, or the
/// output as JSON, or `tool failed` when there is none.
pub fn failure_text(output: &Value) -> String {
    match output {
        Value::String(s) if !s.is_empty() => s.clone(),
        Value::Null | Value::String(_) => "tool failed".to_owned(),
        other => other.to_string(),
    }
}

/// The text of an `error` a CLI attached to a tool: a string as is, an
/// object's `message`, anything else as JSON.
pub fn error_text(error: &Value) -> String {
    match error {
        Value::String(s) => s.clone(),
        other => other
            .get("message")
            .and_then(Value::as_str)
            .map_or_else(|| other.to_string(), str::to_owned),
    }
}

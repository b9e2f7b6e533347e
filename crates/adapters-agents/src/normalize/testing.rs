//! Assertion helpers shared by the decoders' tests: every provider's test
//! reads a decoded stream the same way (its kinds, its end, its tools).

use application::ports::{AgentMessage, AgentResult, QueryError};
use serde_json::Value;

use super::Decoded;

pub(crate) fn kind(d: &Decoded) -> &'static str {
    match d {
        Ok(AgentMessage::Session { .. }) => "session",
        Ok(AgentMessage::ThinkingDelta { .. }) => "thinking_delta",
        Ok(AgentMessage::Thinking { .. }) => "thinking",
        Ok(AgentMessage::TextDelta { .. }) => "text_delta",
        Ok(AgentMessage::Text { .. }) => "text",
        Ok(AgentMessage::ToolUse { .. }) => "tool_use",
        Ok(AgentMessage::Tool { .. }) => "tool",
        Ok(AgentMessage::ToolStarted { .. }) => "tool_started",
        Ok(AgentMessage::ToolFinished { .. }) => "tool_finished",
        Ok(AgentMessage::RateLimited { .. }) => "rate_limited",
        Ok(AgentMessage::Error { .. }) => "error",
        Ok(AgentMessage::Warning { .. }) => "warning",
        Ok(AgentMessage::Completed(_)) => "completed",
        Err(_) => "ERR",
    }
}

pub(crate) fn kinds(out: &[Decoded]) -> Vec<&'static str> {
    out.iter().map(kind).collect()
}

pub(crate) fn completed(out: &[Decoded]) -> &AgentResult {
    match out.last() {
        Some(Ok(AgentMessage::Completed(result))) => result,
        other => panic!("expected Completed last, got {other:?}"),
    }
}

pub(crate) fn agent_error(out: &[Decoded]) -> (&str, &str) {
    match out.last() {
        Some(Err(QueryError::Agent {
            error_type,
            message,
            ..
        })) => (error_type.as_str(), message.as_str()),
        other => panic!("expected an agent error last, got {other:?}"),
    }
}

pub(crate) fn tool(d: &Decoded) -> (&str, &Value, &Value, Option<&str>) {
    match d {
        Ok(AgentMessage::Tool {
            name,
            input,
            output,
            error,
            ..
        }) => (name.as_str(), input, output, error.as_deref()),
        other => panic!("expected a tool, got {other:?}"),
    }
}

/// The messages of a decoded stream, all of them, and the error that ends
/// it, if any: tests compare whole sequences, not samples.
pub(crate) fn split(out: Vec<Decoded>) -> (Vec<AgentMessage>, Option<QueryError>) {
    let mut messages = Vec::new();
    let mut error = None;
    for (i, d) in out.into_iter().enumerate() {
        match d {
            Ok(m) => {
                assert!(error.is_none(), "message {i} after the error: {m:?}");
                messages.push(m);
            }
            Err(e) => {
                assert!(error.is_none(), "a second error at {i}: {e:?}");
                error = Some(e);
            }
        }
    }
    (messages, error)
}

/// An [`AgentMessage::ToolUse`].
pub(crate) fn use_of(id: Option<&str>, name: &str, input: Value) -> AgentMessage {
    AgentMessage::ToolUse {
        id: id.map(str::to_owned),
        name: name.to_owned(),
        input,
    }
}

/// An [`AgentMessage::Tool`] without a duration.
pub(crate) fn tool_of(
    id: Option<&str>,
    name: &str,
    input: Value,
    output: Value,
    error: Option<&str>,
) -> AgentMessage {
    AgentMessage::Tool {
        id: id.map(str::to_owned),
        name: name.to_owned(),
        input,
        output,
        duration_ms: None,
        error: error.map(str::to_owned),
    }
}

/// An [`AgentMessage::Text`].
pub(crate) fn text_of(content: &str) -> AgentMessage {
    AgentMessage::Text {
        content: content.to_owned(),
    }
}

/// An [`AgentMessage::Warning`] with its details.
pub(crate) fn warning_of(message: &str, details: Value) -> AgentMessage {
    AgentMessage::Warning {
        message: message.to_owned(),
        details: Some(details),
    }
}

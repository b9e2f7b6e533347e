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

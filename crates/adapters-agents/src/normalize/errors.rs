//! The stable error types every provider maps its failures onto, and the
//! two shapes an error takes: an [`AgentMessage::Error`] the agent recovers
//! from (a retried request), or the [`QueryError`] that ends the invocation.

use application::ports::{AgentMessage, QueryError};
use serde_json::{Value, json};

/// The provider refused for rate or quota (HTTP 429).
pub const RATE_LIMIT: &str = "rate_limit";
/// The model API failed (another HTTP 4xx or 5xx, an overload).
pub const API_ERROR: &str = "api_error";
/// The CLI has no session by the id it was asked to resume: it was stopped
/// before it saved it. Nothing can continue it; the runtime starts afresh.
pub const SESSION_NOT_FOUND: &str = "session_not_found";
/// Anything else: the agent or its CLI failed.
pub const DURING_EXECUTION: &str = "error_during_execution";

/// The error type of an HTTP status: 429 is a rate limit, other 4xx and
/// 5xx are API errors; `None` for a status that says neither.
pub fn status_error_type(status: u64) -> Option<&'static str> {
    match status {
        429 => Some(RATE_LIMIT),
        400..=599 => Some(API_ERROR),
        _ => None,
    }
}

/// The error that ends an invocation, keeping the line that said so.
pub fn fatal(error_type: &str, message: String, line: &Value) -> QueryError {
    QueryError::Agent {
        error_type: error_type.into(),
        message,
        details: Some(line.clone()),
    }
}

/// The error of a CLI that ended without a result because it has no
/// session by the id it was asked to resume, as the stderr line holding
/// `marker` says: [`SESSION_NOT_FOUND`]. `None` for any other stderr.
pub fn session_missing(
    cli: &str,
    marker: &str,
    exit_code: Option<i32>,
    stderr_tail: &str,
) -> Option<QueryError> {
    let said = stderr_tail.lines().find(|l| l.contains(marker))?.trim();
    Some(QueryError::Agent {
        error_type: SESSION_NOT_FOUND.into(),
        message: format!("{cli} has no session to resume: {said}"),
        details: Some(json!({ "exit_code": exit_code, "stderr_tail": stderr_tail })),
    })
}

/// An error the agent reported and went on from, keeping its line.
pub fn reported(error_type: &str, message: String, line: &Value) -> AgentMessage {
    AgentMessage::Error {
        error_type: error_type.into(),
        message,
        details: Some(line.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_stable_types() {
        assert_eq!(status_error_type(429), Some(RATE_LIMIT));
        assert_eq!(status_error_type(400), Some(API_ERROR));
        assert_eq!(status_error_type(503), Some(API_ERROR));
        assert_eq!(status_error_type(200), None);
        assert_eq!(status_error_type(600), None);
    }
}

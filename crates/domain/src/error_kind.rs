//! What kind of failure an agent reported: the kinds awr branches on
//! (retry, resume, replay), each written on the record as the wire string
//! of seed 001's `agent:error.errorType` (`rate_limit`, `network_error`,
//! ...). Code decides on the enum; the string appears only where an event
//! is written or read.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The kind of an agent's failure. Every string maps to exactly one kind
/// and back ([`ErrorKind::parse`], [`ErrorKind::as_str`]), so a recorded
/// `errorType` survives any round trip unchanged, a provider's own among
/// them ([`ErrorKind::Other`]).
#[derive(Debug, Clone, Eq)]
pub enum ErrorKind {
    /// The provider refused for rate or quota (HTTP 429): `rate_limit`.
    RateLimit,
    /// The connection failed or broke: `network_error`.
    Network,
    /// The provider is overloaded: `overloaded_error`.
    Overloaded,
    /// The provider failed on its side: `server_error`.
    Server,
    /// The model API refused or failed otherwise (a 4xx or 5xx): `api_error`.
    Api,
    /// The invocation ran past its timeout: `timeout`.
    Timeout,
    /// The agent hit its turn limit: `error_max_turns`.
    MaxTurns,
    /// A tool call failed: `error_tool_use`.
    ToolUse,
    /// The user rejected or cancelled something: `error_user`.
    User,
    /// The agent or its CLI failed during the work: `error_during_execution`.
    DuringExecution,
    /// The CLI has no session by the id it was asked to resume:
    /// `session_not_found`.
    SessionNotFound,
    /// The agent's output could not be read: `unreadable_output`.
    UnreadableOutput,
    /// The provider is misconfigured or cannot run here: `config_error`.
    Config,
    /// A recording refused or could not serve a call: `fixture_error`.
    Fixture,
    /// An MCP server the agent is granted tools of did not start:
    /// `mcp_server_error`.
    McpServer,
    /// Any other type a provider reported, kept as it said it.
    Other(String),
}

/// Every named kind with its wire string.
const NAMED: [(ErrorKind, &str); 15] = [
    (ErrorKind::RateLimit, "rate_limit"),
    (ErrorKind::Network, "network_error"),
    (ErrorKind::Overloaded, "overloaded_error"),
    (ErrorKind::Server, "server_error"),
    (ErrorKind::Api, "api_error"),
    (ErrorKind::Timeout, "timeout"),
    (ErrorKind::MaxTurns, "error_max_turns"),
    (ErrorKind::ToolUse, "error_tool_use"),
    (ErrorKind::User, "error_user"),
    (ErrorKind::DuringExecution, "error_during_execution"),
    (ErrorKind::SessionNotFound, "session_not_found"),
    (ErrorKind::UnreadableOutput, "unreadable_output"),
    (ErrorKind::Config, "config_error"),
    (ErrorKind::Fixture, "fixture_error"),
    (ErrorKind::McpServer, "mcp_server_error"),
];

impl ErrorKind {
    /// The kind a wire string names; one of no named kind is `Other`.
    pub fn parse(text: &str) -> Self {
        NAMED
            .iter()
            .find(|(_, name)| *name == text)
            .map_or_else(|| Self::Other(text.to_owned()), |(kind, _)| kind.clone())
    }

    /// The wire string, as `agent:error.errorType` records it.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Other(text) => text,
            named => NAMED
                .iter()
                .find(|(kind, _)| std::mem::discriminant(kind) == std::mem::discriminant(named))
                .map_or("", |(_, name)| name),
        }
    }

    /// Whether trying again may succeed: a rate limit, a network failure,
    /// an overload or a server failure. Anything else fails the same way
    /// again.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::RateLimit | Self::Network | Self::Overloaded | Self::Server
        )
    }
}

/// Two kinds are equal when their wire strings are: `Other("rate_limit")`,
/// however it was built, is [`ErrorKind::RateLimit`].
impl PartialEq for ErrorKind {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl std::hash::Hash for ErrorKind {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl PartialEq<str> for ErrorKind {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for ErrorKind {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl From<&str> for ErrorKind {
    fn from(text: &str) -> Self {
        Self::parse(text)
    }
}

impl From<String> for ErrorKind {
    fn from(text: String) -> Self {
        match Self::parse(&text) {
            Self::Other(_) => Self::Other(text),
            named => named,
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ErrorKind {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ErrorKind {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Self::from)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn every_wire_string_round_trips_to_one_kind() {
        for (kind, name) in &NAMED {
            assert_eq!(kind.as_str(), *name);
            assert_eq!(ErrorKind::parse(name), *kind);
            assert!(
                !matches!(ErrorKind::parse(name), ErrorKind::Other(_)),
                "{name}"
            );
        }
        let mut names: Vec<&str> = NAMED.iter().map(|(_, n)| *n).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), NAMED.len(), "no two kinds share a string");
        let own = ErrorKind::from("invalid_request_error".to_owned());
        assert_eq!(own, ErrorKind::Other("invalid_request_error".into()));
        assert_eq!(own.as_str(), "invalid_request_error");
        assert_eq!(ErrorKind::Other("rate_limit".into()), ErrorKind::RateLimit);
    }

    #[test]
    fn only_what_may_pass_is_transient() {
        let transient: Vec<&str> = NAMED
            .iter()
            .filter(|(kind, _)| kind.is_transient())
            .map(|(_, name)| *name)
            .collect();
        assert_eq!(
            transient,
            [
                "rate_limit",
                "network_error",
                "overloaded_error",
                "server_error"
            ]
        );
        assert!(!ErrorKind::from("rate_limit_error").is_transient());
    }

    #[test]
    fn it_is_written_and_read_as_its_string() {
        let json = serde_json::to_string(&ErrorKind::Network).unwrap();
        assert_eq!(json, "\"network_error\"");
        let back: ErrorKind = serde_json::from_str("\"quota\"").unwrap();
        assert_eq!(back, ErrorKind::Other("quota".into()));
    }
}

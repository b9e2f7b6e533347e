//! The shared mapping layer (design §6): what every provider's decoder
//! would otherwise write again.
//!
//! CLI agents print one JSON object per line, and every one can misbehave
//! the same ways: lines split across pipe reads, lines that never end, NUL
//! bytes and invalid UTF-8, lines that are not JSON at all. This module
//! absorbs those quirks once — [`LineFramer`] frames, [`repair_line`]
//! repairs, [`StreamDecoder`] parses and turns each oddity into an
//! [`AgentMessage::Warning`] — and hands each parsed line to a
//! provider-specific [`Decoder`] (for example [`crate::claude::ClaudeDecoder`]).
//!
//! The decoders share the rest of the mapping too: reading a line into its
//! wire type and keeping what does not fit ([`Cli`]), the session
//! ([`announce_session`]), tool-call pairing ([`ToolCalls`]), the one
//! outcome that ends a stream ([`Ending`], [`conclude`]), stable error types
//! ([`errors`]) and token usage ([`usage`]). A provider module keeps only
//! its own wire format and the meaning of its own lines. Nothing here
//! panics on input: whatever the agent prints is recorded.

mod cli;
pub mod errors;
pub mod extra;
mod framer;
mod repair;
mod stream;
#[cfg(test)]
pub(crate) mod testing;
mod text;
mod tools;
pub mod usage;

pub use cli::{Cli, Ending, announce_session, conclude};
pub use framer::{Line, LineFramer, LineKind, MAX_LINE_BYTES, OVERSIZE_PREVIEW_BYTES};
pub use repair::{Repair, repair_line};
pub use stream::{StreamDecoder, decode_all};
pub use text::{describe_exit, exit_code_in, exit_error, preview, tail};
pub use tools::{Answer, PendingCall, ToolCalls, error_text, failure_text, unpaired_result};

use application::ports::{AgentMessage, QueryError};
use serde_json::Value;

/// One normalized item: a message, or the error that ends the invocation.
pub type Decoded = Result<AgentMessage, QueryError>;

/// How much of a bad line is copied into a warning's details.
pub const WARNING_LINE_PREVIEW_BYTES: usize = 64 * 1024;

/// How much of the stderr tail goes into an error message.
pub const STDERR_TAIL_CHARS: usize = 2_000;

/// A provider's mapping from its parsed stdout lines to [`AgentMessage`]s.
pub trait Decoder {
    /// Maps one parsed line; may yield nothing, one or several items.
    fn line(&mut self, value: Value) -> Vec<Decoded>;

    /// The process ended (`exit_code` is `None` when a signal killed it):
    /// yields what is still pending and exactly one terminal item, either
    /// [`AgentMessage::Completed`] or an error.
    fn finish(&mut self, exit_code: Option<i32>, stderr_tail: &str) -> Vec<Decoded>;
}

/// A [`AgentMessage::Warning`]. Details nested too deeply for the log to
/// read back (a line an agent printed, kept whole) are kept as their JSON
/// text instead.
pub fn warning(message: String, details: Value) -> AgentMessage {
    let details = if domain::output::nests_deeper(&details, domain::output::MAX_DEPTH) {
        Value::String(details.to_string())
    } else {
        details
    };
    AgentMessage::Warning {
        message,
        details: Some(details),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A line an agent printed is kept whole in a warning, unless it nests
    /// too deeply for the log to read back: then it is kept as its text.
    #[test]
    fn a_warning_keeps_details_too_deep_for_the_log_as_their_text() {
        let nested = |n: usize| -> Value {
            serde_json::from_str(&format!("{}{}", "[".repeat(n), "]".repeat(n))).unwrap()
        };
        let details = |message| match message {
            AgentMessage::Warning { details, .. } => details.unwrap(),
            other => panic!("{other:?}"),
        };
        let deep = json!({ "line": nested(127) });
        assert_eq!(
            details(warning("w".into(), deep.clone())),
            Value::String(deep.to_string())
        );
        let fine = json!({ "line": nested(90) });
        assert_eq!(details(warning("w".into(), fine.clone())), fine);
    }
}

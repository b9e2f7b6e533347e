//! The provider-independent half of decoding a CLI agent's JSONL stdout.
//!
//! Every CLI provider prints one JSON object per line, and every one can
//! misbehave the same ways: lines split across pipe reads, lines that never
//! end, NUL bytes and invalid UTF-8, lines that are not JSON at all. This
//! module absorbs those quirks once (design §6) — [`LineFramer`] frames,
//! [`repair_line`] repairs, [`StreamDecoder`] parses and turns each oddity into
//! an [`AgentMessage::Warning`] — and hands each parsed line to a
//! provider-specific [`Decoder`] (for example [`crate::claude::ClaudeDecoder`]).
//! Nothing here panics on input: whatever the agent prints is recorded.

mod framer;
mod repair;
#[cfg(test)]
pub(crate) mod testing;

pub use framer::{Line, LineFramer, LineKind, MAX_LINE_BYTES, OVERSIZE_PREVIEW_BYTES};
pub use repair::{Repair, repair_line};

use application::ports::{AgentMessage, QueryError};
use domain::SessionId;
use std::collections::HashSet;

use serde_json::{Value, json};

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

/// Frames, repairs and parses raw stdout for a [`Decoder`], incrementally.
#[derive(Debug)]
pub struct StreamDecoder<D> {
    framer: LineFramer,
    max_line: usize,
    decoder: D,
}

impl<D: Decoder> StreamDecoder<D> {
    /// Wraps `decoder` with the default line cap ([`MAX_LINE_BYTES`]).
    pub fn new(decoder: D) -> Self {
        Self::with_max_line(decoder, MAX_LINE_BYTES)
    }

    /// Wraps `decoder`, keeping lines of at most `max_line` bytes.
    pub fn with_max_line(decoder: D, max_line: usize) -> Self {
        Self {
            framer: LineFramer::with_max(max_line),
            max_line,
            decoder,
        }
    }

    /// Feeds a chunk of stdout; returns the items its complete lines produced.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<Decoded> {
        let mut out = Vec::new();
        for line in self.framer.push(bytes) {
            self.line(line, &mut out);
        }
        out
    }

    /// Ends the stream: decodes a last line without newline, then lets the
    /// decoder yield its pending items and the terminal one.
    pub fn finish(&mut self, exit_code: Option<i32>, stderr_tail: &str) -> Vec<Decoded> {
        let mut out = Vec::new();
        if let Some(line) = self.framer.finish() {
            self.line(line, &mut out);
        }
        out.extend(self.decoder.finish(exit_code, stderr_tail));
        out
    }

    /// The wrapped decoder.
    pub fn decoder(&self) -> &D {
        &self.decoder
    }

    fn line(&mut self, line: Line, out: &mut Vec<Decoded>) {
        if let LineKind::Oversize { len } = line.kind {
            out.push(Ok(warning(
                format!(
                    "skipped a stdout line of {len} bytes: longer than the {}-byte cap",
                    self.max_line
                ),
                json!({ "bytes": len, "prefix": String::from_utf8_lossy(&line.bytes) }),
            )));
            return;
        }
        if line.bytes.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        let (text, repairs) = repair_line(&line.bytes);
        if !repairs.is_empty() {
            out.push(Ok(warning(
                "repaired a stdout line (invalid UTF-8 or NUL bytes)".to_owned(),
                json!({ "repairs": repairs }),
            )));
        }
        match serde_json::from_str::<Value>(&text) {
            Ok(value) => out.extend(self.decoder.line(value)),
            Err(err) => {
                let what = match line.kind {
                    LineKind::Unterminated => {
                        "a truncated last stdout line (no newline) is not JSON"
                    }
                    _ => "a stdout line is not JSON",
                };
                out.push(Ok(warning(
                    format!("{what}: {err}"),
                    json!({ "line": preview(&text, WARNING_LINE_PREVIEW_BYTES) }),
                )));
            }
        }
    }
}

/// Decodes a whole captured run: stdout, exit code and stderr tail.
pub fn decode_all<D: Decoder>(
    decoder: D,
    stdout: &[u8],
    exit_code: Option<i32>,
    stderr_tail: &str,
) -> Vec<Decoded> {
    let mut stream = StreamDecoder::new(decoder);
    let mut out = stream.push(stdout);
    out.extend(stream.finish(exit_code, stderr_tail));
    out
}

/// A [`AgentMessage::Warning`].
pub fn warning(message: String, details: Value) -> AgentMessage {
    AgentMessage::Warning {
        message,
        details: Some(details),
    }
}

/// The first `max` bytes of `text`, cut on a character boundary.
pub fn preview(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The last `max` bytes of `text`, cut on a character boundary, trimmed.
pub fn tail(text: &str, max: usize) -> &str {
    let text = text.trim();
    if text.len() <= max {
        return text;
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// A line of a known type whose fields do not parse: kept as a warning.
pub fn malformed_line(
    cli: &str,
    kind: &str,
    err: &serde_json::Error,
    line: &Value,
) -> Vec<Decoded> {
    vec![Ok(warning(
        format!("malformed {cli} `{kind}` line: {err}"),
        json!({ "line": line }),
    ))]
}

/// A line (or part of one) of a type this version does not know: kept as a warning.
pub fn unknown_line(cli: &str, what: &str, line: &Value) -> Vec<Decoded> {
    vec![Ok(warning(
        format!("unknown {cli} {what}; kept as is"),
        json!({ "line": line }),
    ))]
}

/// Announces a provider's session the first time a line names it. A later
/// line naming the same session is silent; one naming another session, or
/// none, is kept as a warning (`what` names the kind of line).
pub fn announce_session(
    known: &mut Option<SessionId>,
    id: Option<String>,
    model: Option<String>,
    what: &str,
    line: &Value,
) -> Vec<Decoded> {
    match (&*known, SessionId::new(id.unwrap_or_default())) {
        (None, Ok(session_id)) => {
            *known = Some(session_id.clone());
            vec![Ok(AgentMessage::Session { session_id, model })]
        }
        (Some(first), Ok(id)) if *first == id => Vec::new(),
        (Some(_), Ok(_)) => vec![Ok(warning(
            format!("a second {what} line names another session; the first one is kept"),
            json!({ "line": line }),
        ))],
        (_, Err(_)) => vec![Ok(warning(
            format!("{what} line without a session id"),
            json!({ "line": line }),
        ))],
    }
}

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

/// The tool calls of one invocation, shared by every CLI decoder: a call is
/// emitted as [`AgentMessage::ToolUse`] where the agent made it, with the
/// provider's own id; its result is paired with it by that id later. A call
/// that never gets a result is recorded as it is, a use alone: nothing is
/// made up for it when the stream ends.
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

    /// Calls still without a result (they stay uses alone in the record).
    pub fn pending(&self) -> &[PendingCall] {
        &self.pending
    }
}

/// The warning for a tool result that answers no pending call; `what`
/// names the result (`tool_result`, `tool.execution_complete`) and `raw`
/// is kept whole.
pub fn unpaired_result(answer: &Answer, what: &str, key: &str, raw: &Value) -> AgentMessage {
    let why = match answer {
        Answer::Repeated => format!("a second {what} for the same call id; kept as is"),
        _ => format!("a {what} for a call that was never announced; kept as is"),
    };
    let mut details = serde_json::Map::new();
    details.insert(key.to_owned(), raw.clone());
    warning(why, Value::Object(details))
}

/// How every CLI's stream ends: exactly one outcome after whatever came
/// before. A result is passed on, after a warning when the process still
/// exited non-zero; an error is passed on; and no outcome at all (`missing`
/// names the line that never came) is an `error_during_execution` naming
/// the exit and the stderr tail.
pub fn conclude(
    cli: &str,
    outcome: Option<Decoded>,
    missing: &str,
    exit_code: Option<i32>,
    stderr_tail: &str,
) -> Vec<Decoded> {
    let stderr = tail(stderr_tail, STDERR_TAIL_CHARS);
    let details = json!({ "exit_code": exit_code, "stderr_tail": stderr });
    match outcome {
        Some(Ok(done)) if exit_code != Some(0) => vec![
            Ok(warning(
                format!(
                    "{cli} {} after a successful result",
                    describe_exit(exit_code)
                ),
                details,
            )),
            Ok(done),
        ],
        Some(outcome) => vec![outcome],
        None => {
            let stderr_note = if stderr.is_empty() {
                "stderr was empty".to_owned()
            } else {
                format!("stderr: {stderr}")
            };
            vec![Err(QueryError::Agent {
                error_type: "error_during_execution".to_owned(),
                message: format!(
                    "{cli} {} without {missing}; {stderr_note}",
                    describe_exit(exit_code)
                ),
                details: Some(details),
            })]
        }
    }
}

/// "exited with code N" / "was killed by a signal", for messages.
pub fn describe_exit(exit_code: Option<i32>) -> String {
    match exit_code {
        Some(code) => format!("exited with code {code}"),
        None => "was killed by a signal".to_owned(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// Echoes each parsed line as a Text message; finishes with Completed.
    struct Echo;

    impl Decoder for Echo {
        fn line(&mut self, value: Value) -> Vec<Decoded> {
            vec![Ok(AgentMessage::Text {
                content: value.to_string(),
            })]
        }
        fn finish(&mut self, _: Option<i32>, _: &str) -> Vec<Decoded> {
            vec![Ok(AgentMessage::Completed(Default::default()))]
        }
    }

    fn is_warning(d: &Decoded) -> bool {
        matches!(d, Ok(AgentMessage::Warning { .. }))
    }

    #[test]
    fn non_json_line_warns_and_decoding_continues() {
        let out = decode_all(Echo, b"{\"a\":1}\nnot json\n\n{\"b\":2}\n", Some(0), "");
        assert_eq!(out.len(), 4);
        assert!(matches!(&out[0], Ok(AgentMessage::Text { content }) if content == "{\"a\":1}"));
        assert!(is_warning(&out[1]));
        let Ok(AgentMessage::Warning { details, .. }) = &out[1] else {
            unreachable!()
        };
        assert_eq!(details.as_ref().unwrap()["line"], "not json");
        assert!(matches!(&out[2], Ok(AgentMessage::Text { content }) if content == "{\"b\":2}"));
        assert!(matches!(&out[3], Ok(AgentMessage::Completed(_))));
    }

    #[test]
    fn truncated_last_line_is_decoded_when_whole_and_warned_when_cut() {
        let out = decode_all(Echo, b"{\"a\":1}", Some(0), "");
        assert!(matches!(&out[0], Ok(AgentMessage::Text { .. })));
        let out = decode_all(Echo, b"{\"a\":1}\n{\"b\":", Some(0), "");
        assert_eq!(out.len(), 3);
        let Ok(AgentMessage::Warning { message, .. }) = &out[1] else {
            panic!("{out:?}")
        };
        assert!(message.contains("truncated"), "{message}");
    }

    #[test]
    fn nul_and_invalid_utf8_are_repaired_with_a_warning() {
        let out = decode_all(Echo, b"{\"a\":\"x\0\xffy\"}\n", Some(0), "");
        assert_eq!(out.len(), 3);
        assert!(is_warning(&out[0]));
        let Ok(AgentMessage::Text { content }) = &out[1] else {
            panic!("{out:?}")
        };
        let v: Value = serde_json::from_str(content).unwrap();
        assert_eq!(v["a"], "x\u{0}\u{fffd}y");
    }

    #[test]
    fn one_megabyte_line_is_decoded_under_the_cap_and_skipped_over_it() {
        let big = format!("{{\"a\":\"{}\"}}\n{{\"b\":1}}\n", "x".repeat(1 << 20));
        let out = decode_all(Echo, big.as_bytes(), Some(0), "");
        assert!(matches!(&out[0], Ok(AgentMessage::Text { content }) if content.len() > 1 << 20));

        let mut stream = StreamDecoder::with_max_line(Echo, 64 * 1024);
        let mut out = Vec::new();
        for chunk in big.as_bytes().chunks(10_000) {
            out.extend(stream.push(chunk));
        }
        out.extend(stream.finish(Some(0), ""));
        assert_eq!(
            out.len(),
            3,
            "{:?}",
            out.iter().map(|d| d.is_ok()).collect::<Vec<_>>()
        );
        let Ok(AgentMessage::Warning { details, .. }) = &out[0] else {
            panic!("expected a warning")
        };
        assert_eq!(details.as_ref().unwrap()["bytes"], (1 << 20) + 8);
        assert!(matches!(&out[1], Ok(AgentMessage::Text { content }) if content == "{\"b\":1}"));
    }

    #[test]
    fn text_helpers_cut_on_char_boundaries() {
        assert_eq!(preview("héllo", 2), "h");
        assert_eq!(tail("  héllo \n", 4), "llo");
        assert_eq!(describe_exit(Some(2)), "exited with code 2");
        assert_eq!(describe_exit(None), "was killed by a signal");
    }
}

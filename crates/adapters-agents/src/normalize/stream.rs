//! Framing, repairing and parsing a CLI agent's raw stdout, incrementally.

use application::ports::QueryError;
use domain::ErrorKind;
use serde_json::{Value, json};

use super::{
    Decoded, Decoder, Line, LineFramer, LineKind, MAX_LINE_BYTES, WARNING_LINE_PREVIEW_BYTES,
    preview, repair_line, warning,
};

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
            // JSON, but nested past what can be read: what it says (an
            // answer, a tool call) cannot be kept, so the call fails rather
            // than end as if the line had not been there.
            Err(err) if err.to_string().starts_with("recursion limit exceeded") => {
                out.push(Err(QueryError::Agent {
                    error_type: ErrorKind::UnreadableOutput,
                    message: format!(
                        "a line of the agent's output nests arrays and objects deeper than awr reads (128 levels): {err}"
                    ),
                    details: Some(json!({ "line": preview(&text, WARNING_LINE_PREVIEW_BYTES) })),
                }));
            }
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use application::ports::AgentMessage;

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

    /// A line that is JSON nested too deeply to read fails the call: its
    /// content (an answer, a tool call) cannot be kept, and the run must
    /// not end as if it had not been printed.
    #[test]
    fn a_line_nested_too_deeply_to_read_fails_the_call() {
        let deep = format!("{{\"a\":{}{}}}\n", "[".repeat(200), "]".repeat(200));
        let out = decode_all(Echo, deep.as_bytes(), Some(0), "");
        assert!(
            matches!(&out[0], Err(QueryError::Agent { error_type, .. }) if error_type == "unreadable_output"),
            "{out:?}"
        );
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
}

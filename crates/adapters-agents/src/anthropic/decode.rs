//! Reads one streamed Messages API turn into [`ChatEvent`]s.
//!
//! [`MessagesDecoder`] is pure: it is fed (event name, data) pairs and keeps
//! the turn's state, so it is tested on canned SSE text with no HTTP;
//! [`decode`] drives it over a live event stream. A turn is complete only at
//! `message_stop`: a stream that ends before it was cut, and says so.

use std::collections::BTreeMap;

use application::ports::{ChatError, ChatEvent, StopReason, ToolCall};
use eventsource_stream::Event;
use serde::Deserialize;
use serde_json::Value;

use super::wire::{self, BlockDelta, StartBlock, StreamEvent, WireError};
use crate::http::{self, TurnMeta};
use crate::normalize::extra::{self, Pending};
use crate::normalize::usage::TokenCounts;

/// The state of one streamed turn.
#[derive(Debug, Default)]
pub struct MessagesDecoder {
    /// Open content blocks by index. The API streams one block at a time, but
    /// routing deltas by index stays right should blocks ever interleave.
    blocks: BTreeMap<u64, Open>,
    /// Usage (input from `message_start`, output, cumulative, from
    /// `message_delta`), model, response id and stop reason.
    turn: TurnMeta,
    /// `message_stop` arrived; anything after it is ignored.
    done: bool,
    /// What events that became no chat event held unmapped, for the next one.
    pending: Pending,
}

/// A content block being streamed.
#[derive(Debug)]
enum Open {
    Text,
    Thinking {
        text: String,
        signature: Option<String>,
    },
    ToolUse {
        id: String,
        name: String,
        /// The `partial_json` pieces so far.
        json: String,
        /// The input given whole at the start, for a server that does not
        /// stream it.
        start_input: Option<Value>,
    },
    /// A block not mapped (redacted thinking, server tools): deltas dropped.
    Ignored,
}

impl MessagesDecoder {
    /// A decoder for a new turn.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether `message_stop` has arrived: the turn is complete.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Decodes one server-sent event. The JSON `type` decides; the SSE event
    /// name is used only when the data has none.
    ///
    /// # Errors
    /// An in-stream `error` event as the matching [`ChatError`]; data that is
    /// not JSON, or not a readable event, as [`ChatError::Api`].
    pub fn on_event(&mut self, event: &str, data: &str) -> Result<Vec<ChatEvent>, ChatError> {
        if self.done || data.trim().is_empty() {
            return Ok(Vec::new());
        }
        let mut value: Value = serde_json::from_str(data).map_err(|_| {
            http::unreadable(format!(
                "the stream sent data that is not JSON: {}",
                http::quote(data)
            ))
        })?;
        if let Some(object) = value.as_object_mut() {
            object
                .entry("type")
                .or_insert_with(|| Value::String(event.to_owned()));
        }
        let kind = value["type"].as_str().unwrap_or_default().to_owned();
        let extra = extra::of_line(&value, wire::known(&value));
        let parsed = StreamEvent::deserialize(&value).map_err(|e| {
            http::unreadable(format!(
                "the stream sent a `{kind}` event that cannot be read ({e}): {}",
                http::quote(data)
            ))
        })?;
        let mut out = Vec::new();
        match parsed {
            StreamEvent::MessageStart { message } => {
                self.turn.response_id = message.id;
                self.turn.model = message.model;
                if let Some(usage) = &message.usage {
                    self.take_usage(usage);
                }
            }
            StreamEvent::ContentBlockStart {
                index,
                content_block: StartBlock::Other,
            } => {
                self.blocks.insert(index, Open::Ignored);
                out.push(unknown(
                    "a content block of a type this version does not know",
                    value,
                ));
            }
            StreamEvent::ContentBlockStart {
                index,
                content_block,
            } => self.start_block(index, content_block, &mut out),
            StreamEvent::ContentBlockDelta {
                delta: BlockDelta::Other,
                ..
            } => out.push(unknown(
                "a delta of a type this version does not know",
                value,
            )),
            StreamEvent::ContentBlockDelta { index, delta } => {
                self.delta(index, delta, &mut out);
            }
            StreamEvent::ContentBlockStop { index } => {
                if let Some(block) = self.blocks.remove(&index) {
                    out.extend(self.close(block));
                }
            }
            StreamEvent::MessageDelta { delta, usage } => {
                if let Some(reason) = delta.stop_reason {
                    self.turn.stop = Some(stop_reason(&reason));
                }
                if let Some(usage) = &usage {
                    self.take_usage(usage);
                }
            }
            StreamEvent::MessageStop => {
                // Blocks left open are complete all the same: the message is.
                for block in std::mem::take(&mut self.blocks).into_values() {
                    out.extend(self.close(block));
                }
                out.push(self.turn.end());
                self.done = true;
            }
            StreamEvent::Ping => {}
            StreamEvent::Error { error } => return Err(stream_error(error)),
            StreamEvent::Unknown => {
                out.push(unknown(
                    &format!("a Messages stream event `{kind}` this version does not know"),
                    value,
                ));
            }
        }
        Ok(self.pending.place(out, extra))
    }

    /// Ends the turn when the stream closes.
    ///
    /// # Errors
    /// [`ChatError::Network`] when `message_stop` never came: the stream was cut.
    pub fn finish(self) -> Result<Vec<ChatEvent>, ChatError> {
        if self.done {
            Ok(Vec::new())
        } else {
            Err(ChatError::Network(
                "the stream ended before the turn finished".into(),
            ))
        }
    }

    fn start_block(&mut self, index: u64, block: StartBlock, out: &mut Vec<ChatEvent>) {
        let open = match block {
            StartBlock::Text { text } => {
                if !text.is_empty() {
                    out.push(ChatEvent::TextDelta(text));
                }
                Open::Text
            }
            StartBlock::Thinking {
                thinking,
                signature,
            } => {
                if !thinking.is_empty() {
                    out.push(ChatEvent::ThinkingDelta(thinking.clone()));
                }
                Open::Thinking {
                    text: thinking,
                    signature: signature.filter(|s| !s.is_empty()),
                }
            }
            StartBlock::RedactedThinking => {
                tracing::debug!(index, "ignoring a redacted thinking block");
                Open::Ignored
            }
            StartBlock::ToolUse { id, name, input } => Open::ToolUse {
                id,
                name,
                json: String::new(),
                start_input: input,
            },
            // Kept by the caller as an unknown.
            StartBlock::Other => Open::Ignored,
        };
        self.blocks.insert(index, open);
    }

    fn delta(&mut self, index: u64, delta: BlockDelta, out: &mut Vec<ChatEvent>) {
        match delta {
            BlockDelta::TextDelta { text } => {
                if !text.is_empty() {
                    out.push(ChatEvent::TextDelta(text));
                }
            }
            BlockDelta::ThinkingDelta { thinking } => {
                if let Open::Thinking { text, .. } = self.block(index, thinking_block) {
                    text.push_str(&thinking);
                }
                if !thinking.is_empty() {
                    out.push(ChatEvent::ThinkingDelta(thinking));
                }
            }
            BlockDelta::SignatureDelta { signature: piece } => {
                if let Open::Thinking { signature, .. } = self.block(index, thinking_block) {
                    signature.get_or_insert_default().push_str(&piece);
                }
            }
            BlockDelta::InputJsonDelta { partial_json } => {
                if let Open::ToolUse { json, .. } = self.block(index, || Open::Ignored) {
                    json.push_str(&partial_json);
                }
            }
            // Citations are not shown; an unknown delta is kept by the caller.
            BlockDelta::CitationsDelta | BlockDelta::Other => {}
        }
    }

    /// The open block at `index`, opened with `make` if its start was missed.
    fn block(&mut self, index: u64, make: impl FnOnce() -> Open) -> &mut Open {
        self.blocks.entry(index).or_insert_with(make)
    }

    /// What a finished block yields.
    fn close(&mut self, block: Open) -> Option<ChatEvent> {
        match block {
            Open::Thinking { text, signature } => Some(ChatEvent::ThinkingDone { text, signature }),
            Open::ToolUse {
                id,
                name,
                json,
                start_input,
            } => {
                self.turn.called = true;
                Some(ChatEvent::ToolCall(ToolCall {
                    id,
                    name,
                    input: http::call_input(json, start_input),
                }))
            }
            Open::Text | Open::Ignored => None,
        }
    }

    /// Counts present in `usage` replace ours: `output_tokens` is cumulative,
    /// and a later `input_tokens` is the more complete one.
    fn take_usage(&mut self, usage: &TokenCounts) {
        if let Some(n) = usage.input_tokens {
            self.turn.usage.input_tokens = n;
        }
        if let Some(n) = usage.output_tokens {
            self.turn.usage.output_tokens = n;
        }
        if let Some(n) = usage.cache_creation_input_tokens {
            self.turn.usage.cache_creation_input_tokens = Some(n);
        }
        if let Some(n) = usage.cache_read_input_tokens {
            self.turn.usage.cache_read_input_tokens = Some(n);
        }
    }
}

/// Something of a newer API, kept whole for the record.
fn unknown(what: &str, raw: Value) -> ChatEvent {
    ChatEvent::Unknown {
        what: format!("Anthropic: {what}"),
        raw,
    }
}

fn thinking_block() -> Open {
    Open::Thinking {
        text: String::new(),
        signature: None,
    }
}

fn stop_reason(reason: &str) -> StopReason {
    match reason {
        "end_turn" | "stop_sequence" => StopReason::EndTurn,
        "tool_use" => StopReason::ToolUse,
        "max_tokens" => StopReason::MaxTokens,
        other => StopReason::Other(other.to_owned()),
    }
}

/// An in-stream `error` event: overload and internal errors may pass on a
/// retry, a rate limit is one, anything else (a bad request) will not.
fn stream_error(error: WireError) -> ChatError {
    let message = match (error.message.is_empty(), error.kind.is_empty()) {
        (false, _) => error.message,
        (true, false) => error.kind.clone(),
        (true, true) => "the stream reported an error without a message".to_owned(),
    };
    match error.kind.as_str() {
        "rate_limit_error" => ChatError::RateLimited {
            message,
            retry_after: None,
        },
        kind => ChatError::Api {
            status: None,
            message,
            retryable: matches!(kind, "overloaded_error" | "api_error"),
        },
    }
}

impl http::TurnDecoder for MessagesDecoder {
    fn on_event(&mut self, event: &Event) -> Result<Vec<ChatEvent>, ChatError> {
        MessagesDecoder::on_event(self, &event.event, &event.data)
    }

    fn is_done(&self) -> bool {
        MessagesDecoder::is_done(self)
    }

    fn finish(self) -> Result<Vec<ChatEvent>, ChatError> {
        MessagesDecoder::finish(self)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {

    use super::*;
    use crate::normalize::testing::{
        assert_not_json_named, call_of, end, ok, sse_turn, thought_of, usage_of,
    };
    use application::ports::TurnEnd;
    use serde_json::json;

    /// Runs SSE text through the real framing and the decoder, in chunks cut
    /// at odd places, as a network would deliver them.
    async fn run(sse: &str) -> Vec<Result<ChatEvent, ChatError>> {
        let pieces = sse.as_bytes().chunks(7).map(<[u8]>::to_vec).collect();
        sse_turn(MessagesDecoder::new(), pieces).await
    }

    /// SSE text from (event, data) pairs.
    fn sse(events: &[(&str, Value)]) -> String {
        events
            .iter()
            .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
            .collect()
    }

    fn message_start() -> (&'static str, Value) {
        (
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
                "role": "assistant", "model": "claude-test", "content": [], "stop_reason": null,
                "usage": {"input_tokens": 12, "cache_creation_input_tokens": 3,
                    "cache_read_input_tokens": 40, "output_tokens": 1}}}),
        )
    }

    fn ping() -> (&'static str, Value) {
        ("ping", json!({"type": "ping"}))
    }

    fn block_start(index: u64, block: Value) -> (&'static str, Value) {
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": block}),
        )
    }

    fn delta(index: u64, delta: Value) -> (&'static str, Value) {
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": index, "delta": delta}),
        )
    }

    fn text(index: u64, text: &str) -> (&'static str, Value) {
        delta(index, json!({"type": "text_delta", "text": text}))
    }

    fn block_stop(index: u64) -> (&'static str, Value) {
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": index}),
        )
    }

    fn message_delta(stop: &str, usage: Value) -> (&'static str, Value) {
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
                "usage": usage}),
        )
    }

    fn message_stop() -> (&'static str, Value) {
        ("message_stop", json!({"type": "message_stop"}))
    }

    #[tokio::test]
    async fn text_with_pings_between() {
        let events = ok(run(&sse(&[
            message_start(),
            ping(),
            block_start(0, json!({"type": "text", "text": ""})),
            text(0, "Hello "),
            ping(),
            text(0, "there."),
            block_stop(0),
            ping(),
            message_delta("end_turn", json!({"output_tokens": 9})),
            message_stop(),
        ]))
        .await);
        assert_eq!(
            events[..2],
            [
                ChatEvent::TextDelta("Hello ".into()),
                ChatEvent::TextDelta("there.".into())
            ]
        );
        assert_eq!(
            end(&events),
            &TurnEnd {
                stop: StopReason::EndTurn,
                usage: usage_of(12, 9, Some(3), Some(40)),
                model: Some("claude-test".into()),
                response_id: Some("msg_1".into()),
            }
        );
        assert_eq!(events.len(), 3);
    }

    #[tokio::test]
    async fn thinking_text_and_a_streamed_tool_call_in_one_turn() {
        let events = ok(run(&sse(&[
            message_start(),
            block_start(
                0,
                json!({"type": "thinking", "thinking": "", "signature": ""}),
            ),
            delta(0, json!({"type": "thinking_delta", "thinking": "Run "})),
            delta(0, json!({"type": "thinking_delta", "thinking": "it."})),
            delta(0, json!({"type": "signature_delta", "signature": "c2ln"})),
            block_stop(0),
            block_start(1, json!({"type": "text", "text": "On "})),
            text(1, "it."),
            delta(1, json!({"type": "citations_delta", "citation": {}})),
            block_stop(1),
            block_start(
                2,
                json!({"type": "tool_use", "id": "toolu_1", "name": "shell", "input": {}}),
            ),
            delta(2, json!({"type": "input_json_delta", "partial_json": ""})),
            delta(
                2,
                json!({"type": "input_json_delta", "partial_json": "{\"comm"}),
            ),
            delta(
                2,
                json!({"type": "input_json_delta", "partial_json": "and\": \"echo hi\"}"}),
            ),
            block_stop(2),
            block_start(
                3,
                json!({"type": "tool_use", "id": "toolu_2", "name": "noargs"}),
            ),
            block_stop(3),
            message_delta("tool_use", json!({"output_tokens": 30})),
            message_stop(),
        ]))
        .await);
        let call = |id: &str, name: &str, input: Value| {
            ChatEvent::ToolCall(ToolCall {
                id: id.into(),
                name: name.into(),
                input,
            })
        };
        assert_eq!(
            events[..events.len() - 1],
            [
                ChatEvent::ThinkingDelta("Run ".into()),
                ChatEvent::ThinkingDelta("it.".into()),
                thought_of("Run it.", Some("c2ln")),
                ChatEvent::TextDelta("On ".into()),
                ChatEvent::TextDelta("it.".into()),
                call("toolu_1", "shell", json!({"command": "echo hi"})),
                call("toolu_2", "noargs", json!({})),
            ]
        );
        assert_eq!(end(&events).stop, StopReason::ToolUse);
        assert_eq!(end(&events).usage.output_tokens, 30);
    }

    #[tokio::test]
    async fn unknown_blocks_and_deltas_are_kept_in_place_and_a_call_without_id_is_a_call() {
        let server_tool =
            json!({"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search"});
        let odd_delta = json!({"type": "hologram_delta", "beam": 1});
        let events = ok(run(&sse(&[
            message_start(),
            block_start(0, json!({"type": "thinking", "thinking": "plan"})),
            block_stop(0),
            block_start(1, json!({"type": "text", "text": "Looking."})),
            delta(1, odd_delta.clone()),
            block_stop(1),
            block_start(2, server_tool.clone()),
            block_stop(2),
            block_start(
                3,
                json!({"type": "tool_use", "name": "shell", "input": {"command": "ls"}}),
            ),
            block_stop(3),
            message_stop(),
        ]))
        .await);
        let framed = |kind: &str, index: u64, field: &str, inner: &Value| {
            let mut v = json!({"type": kind, "index": index});
            v[field] = inner.clone();
            v
        };
        assert_eq!(
            events[..events.len() - 1],
            [
                ChatEvent::ThinkingDelta("plan".into()),
                thought_of("plan", None),
                ChatEvent::TextDelta("Looking.".into()),
                ChatEvent::Unknown {
                    what: "Anthropic: a delta of a type this version does not know".into(),
                    raw: framed("content_block_delta", 1, "delta", &odd_delta),
                },
                ChatEvent::Unknown {
                    what: "Anthropic: a content block of a type this version does not know".into(),
                    raw: framed("content_block_start", 2, "content_block", &server_tool),
                },
                ChatEvent::ToolCall(ToolCall {
                    id: String::new(),
                    name: "shell".into(),
                    input: json!({"command": "ls"}),
                }),
            ]
        );
    }

    /// A turn in the shape Claude Code received it (from the reference
    /// captures), framed as the API sends it.
    #[tokio::test]
    async fn a_captured_tool_turn() {
        let events = ok(run(include_str!("../../testdata/anthropic/tool_turn.sse")).await);
        let done = events
            .iter()
            .find(|e| matches!(e, ChatEvent::ThinkingDone { .. }))
            .unwrap();
        assert_eq!(
            done,
            &thought_of(
                "The user wants me to run echo hi. I'll use the shell tool.",
                Some("ZmFrZS1zaWduYXR1cmU=")
            )
        );
        let text: String = events
            .iter()
            .filter_map(|e| match e {
                ChatEvent::TextDelta(t) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(text, "I will run a command.");
        assert!(events.contains(&ChatEvent::ToolCall(call_of(
            "toolu_f22dc0ea2bd54be1a9b1",
            "Bash",
            json!({"command": "echo hi", "description": "Print hi"})
        ))));
        let end = end(&events);
        assert_eq!(end.stop, StopReason::ToolUse);
        assert_eq!(end.usage, usage_of(120, 25, Some(0), Some(0)));
        assert_eq!(end.response_id.as_deref(), Some("msg_d3425df8825845e5ba68"));
        assert_eq!(end.model.as_deref(), Some("claude-sonnet-4-5"));
    }

    #[tokio::test]
    async fn invalid_tool_json_becomes_a_string() {
        let events = ok(run(&sse(&[
            message_start(),
            block_start(
                0,
                json!({"type": "tool_use", "id": "t", "name": "shell", "input": {}}),
            ),
            delta(
                0,
                json!({"type": "input_json_delta", "partial_json": "{\"command\": "}),
            ),
            block_stop(0),
            message_delta("tool_use", json!({"output_tokens": 5})),
            message_stop(),
        ]))
        .await);
        assert_eq!(
            events[0],
            ChatEvent::ToolCall(call_of(
                "t",
                "shell",
                Value::String("{\"command\": ".into())
            ))
        );
    }

    #[tokio::test]
    async fn late_usage_and_stop_reasons() {
        let events = ok(run(&sse(&[
            message_start(),
            message_delta(
                "max_tokens",
                json!({"input_tokens": 15, "cache_read_input_tokens": 41, "output_tokens": 4}),
            ),
            message_delta("max_tokens", json!({"output_tokens": 8})),
            message_stop(),
        ]))
        .await);
        let end = end(&events);
        assert_eq!(end.stop, StopReason::MaxTokens);
        assert_eq!(end.usage, usage_of(15, 8, Some(3), Some(41)));
        assert_eq!(stop_reason("stop_sequence"), StopReason::EndTurn);
        assert_eq!(stop_reason("refusal"), StopReason::Other("refusal".into()));
    }

    #[tokio::test]
    async fn a_cut_stream_is_a_network_error() {
        let events = run(&sse(&[
            message_start(),
            block_start(0, json!({"type": "text", "text": ""})),
            text(0, "Partial"),
        ]))
        .await;
        assert_eq!(events.len(), 2);
        assert_eq!(events[0], Ok(ChatEvent::TextDelta("Partial".into())));
        let error = events[1].clone().unwrap_err();
        assert_eq!(
            error,
            ChatError::Network("the stream ended before the turn finished".into())
        );
        assert!(error.is_transient());
    }

    #[tokio::test]
    async fn an_error_event_mid_stream_ends_it() {
        let mut frames = vec![
            message_start(),
            block_start(0, json!({"type": "text", "text": ""})),
            text(0, "Partial "),
            (
                "error",
                json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
            ),
        ];
        frames.extend([text(0, "never seen"), message_stop()]);
        let events = run(&sse(&frames)).await;
        assert_eq!(
            events,
            [
                Ok(ChatEvent::TextDelta("Partial ".into())),
                Err(ChatError::Api {
                    status: None,
                    message: "Overloaded".into(),
                    retryable: true
                })
            ]
        );
    }

    #[test]
    fn error_kinds_map_to_chat_errors() {
        let error = |kind: &str| {
            let mut decoder = MessagesDecoder::new();
            let data = json!({"type": "error", "error": {"type": kind, "message": "m"}});
            decoder.on_event("error", &data.to_string()).unwrap_err()
        };
        assert!(error("api_error").is_transient());
        assert_eq!(
            error("rate_limit_error"),
            ChatError::RateLimited {
                message: "m".into(),
                retry_after: None
            }
        );
        assert_eq!(
            error("invalid_request_error"),
            ChatError::Api {
                status: None,
                message: "m".into(),
                retryable: false
            }
        );
    }

    #[tokio::test]
    async fn data_that_is_not_json_is_named() {
        let long = "x".repeat(1000);
        let events = run(&format!(
            "event: message_start\ndata: <html>{long}</html>\n\n"
        ))
        .await;
        assert_not_json_named(&events);
        // JSON of the wrong shape is named too.
        let mut decoder = MessagesDecoder::new();
        let error = decoder
            .on_event("content_block_start", r#"{"type": "content_block_start"}"#)
            .unwrap_err();
        assert!(
            error.to_string().contains("`content_block_start`"),
            "{error}"
        );
    }

    #[test]
    fn the_event_name_stands_in_for_a_missing_type_and_unknowns_are_kept() {
        let mut decoder = MessagesDecoder::new();
        assert_eq!(decoder.on_event("ping", "{}").unwrap(), []);
        assert_eq!(
            decoder
                .on_event("brand_new_event", r#"{"x": 1}"#)
                .unwrap(),
            [ChatEvent::Unknown {
                what: "Anthropic: a Messages stream event `brand_new_event` this version does not know".into(),
                raw: json!({"type": "brand_new_event", "x": 1}),
            }]
        );
        assert_eq!(decoder.on_event("message", "").unwrap(), []);
        let events = decoder.on_event("message_stop", "{}").unwrap();
        assert!(matches!(events[..], [ChatEvent::End(_)]));
        assert!(decoder.is_done());
        assert_eq!(decoder.finish().unwrap(), []);
    }
}

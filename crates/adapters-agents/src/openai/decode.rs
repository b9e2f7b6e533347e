//! Reads a streamed Chat Completions turn into [`ChatEvent`]s.
//!
//! Text and reasoning are passed on as they arrive, so a user watches the
//! model think and write. Tool calls are not: their arguments arrive as
//! pieces of JSON text, possibly interleaved across calls, and only the
//! `finish_reason` says they are complete, so each call is assembled by its
//! `index` and emitted whole when the choice finishes. The turn ends at
//! `data: [DONE]`, after the usage chunk that `include_usage` adds.
//!
//! [`ChunkDecoder`] is pure (one `data:` payload in, events out) so it is
//! tested on canned streams; [`decode`] drives it over the SSE events of a
//! response.

use std::collections::BTreeMap;

use application::ports::{ChatError, ChatEvent, StopReason, ToolCall};
use eventsource_stream::Event;
use serde_json::Value;
use tracing::debug;

use super::wire::{CHUNK, Chunk, Delta};
use crate::http::{self, TurnMeta};
use crate::normalize::extra::{self, Pending};
use domain::event::Extra;

/// Decodes one streamed turn, one `data:` payload at a time.
#[derive(Debug, Default)]
pub struct ChunkDecoder {
    /// The open reasoning block, whole; empty when none is open.
    reasoning: String,
    /// Tool calls being assembled, by their `index`; a `BTreeMap` so they
    /// come out in index order.
    calls: BTreeMap<usize, PartialCall>,
    /// The `finish_reason`, the last usage seen (zero when the stream
    /// carries none), and the `id` and `model` of the chunks.
    turn: TurnMeta,
    /// Whether the turn has ended (`[DONE]` seen).
    done: bool,
    /// What chunks that became no event held unmapped, for the next one.
    pending: Pending,
}

/// A tool call whose fragments are still arriving.
#[derive(Debug, Default)]
struct PartialCall {
    id: Option<String>,
    name: String,
    arguments: String,
}

impl ChunkDecoder {
    /// A decoder for a new turn.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the turn is over: nothing more needs reading.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Decodes one `data:` payload.
    ///
    /// # Errors
    /// [`ChatError::Api`] for an error object in the stream, or for data that
    /// is not a chunk; the turn is then over.
    pub fn on_data(&mut self, data: &str) -> Result<Vec<ChatEvent>, ChatError> {
        let data = data.trim();
        if self.done {
            debug!(data = %http::quote(data), "openai: data after [DONE] ignored");
            return Ok(Vec::new());
        }
        if data.is_empty() {
            debug!("openai: an empty SSE event ignored");
            return Ok(Vec::new());
        }
        if data == "[DONE]" {
            return Ok(self.end());
        }
        let value: Value = serde_json::from_str(data).map_err(|_| {
            http::unreadable(format!(
                "the stream sent data that is not JSON: {}",
                http::quote(data)
            ))
        })?;
        if value.get("error").is_some_and(|e| !e.is_null()) {
            return Err(stream_error(&value, data));
        }
        let extra = extra::of_line(&value, CHUNK);
        let chunk: Chunk = serde_json::from_value(value).map_err(|e| {
            http::unreadable(format!(
                "the stream sent a chunk that cannot be read ({e}): {}",
                http::quote(data)
            ))
        })?;
        let events = self.on_chunk(chunk);
        Ok(self.pending.place(events, extra))
    }

    /// Ends the turn when the stream ends without `[DONE]`: normally if the
    /// choice finished (some servers omit `[DONE]`), else the stream was cut.
    ///
    /// # Errors
    /// [`ChatError::Network`] when the turn never finished.
    pub fn finish(mut self) -> Result<Vec<ChatEvent>, ChatError> {
        if self.done {
            return Ok(Vec::new());
        }
        if self.turn.stop.is_none() {
            return Err(ChatError::Network(
                "the stream ended before the turn finished".to_owned(),
            ));
        }
        Ok(self.end())
    }

    fn on_chunk(&mut self, chunk: Chunk) -> Vec<ChatEvent> {
        let turn = &mut self.turn;
        if turn.response_id.is_none() {
            turn.response_id = chunk.id.filter(|id| !id.is_empty());
        }
        if turn.model.is_none() {
            turn.model = chunk.model.filter(|m| !m.is_empty());
        }
        if let Some(usage) = chunk.usage {
            turn.usage = usage.into();
        }
        let mut out = Vec::new();
        for choice in chunk.choices.into_iter().flatten() {
            if choice.index.unwrap_or(0) != 0 {
                debug!(index = ?choice.index, "openai: a choice other than the first ignored");
                continue;
            }
            if let Some(delta) = choice.delta {
                self.on_delta(delta, &mut out);
            }
            if let Some(reason) = choice.finish_reason.filter(|r| !r.is_empty()) {
                self.flush(&mut out);
                self.turn.stop = Some(stop_reason(&reason));
            }
        }
        out
    }

    fn on_delta(&mut self, delta: Delta, out: &mut Vec<ChatEvent>) {
        let reasoning = delta
            .reasoning_content
            .or_else(|| delta.reasoning.and_then(|r| r.as_str().map(str::to_owned)));
        if let Some(piece) = reasoning.filter(|r| !r.is_empty()) {
            self.reasoning.push_str(&piece);
            out.push(ChatEvent::ThinkingDelta(piece));
        }
        // A refusal is the model's answer to the user; without it the turn
        // would end silently empty.
        for text in [delta.content, delta.refusal].into_iter().flatten() {
            if !text.is_empty() {
                self.close_reasoning(out);
                out.push(ChatEvent::TextDelta(text));
            }
        }
        for (position, fragment) in delta.tool_calls.into_iter().flatten().enumerate() {
            self.close_reasoning(out);
            // Servers that omit `index` send each call whole, in order.
            let call = self
                .calls
                .entry(fragment.index.unwrap_or(position))
                .or_default();
            if call.id.is_none() {
                call.id = fragment.id.filter(|id| !id.is_empty());
            }
            if let Some(function) = fragment.function {
                if call.name.is_empty() {
                    call.name = function.name.unwrap_or_default();
                }
                call.arguments
                    .push_str(function.arguments.as_deref().unwrap_or_default());
            }
        }
    }

    /// Ends an open reasoning block with its whole text.
    fn close_reasoning(&mut self, out: &mut Vec<ChatEvent>) {
        if !self.reasoning.is_empty() {
            out.push(ChatEvent::ThinkingDone {
                text: std::mem::take(&mut self.reasoning),
                signature: None,
            });
        }
    }

    /// The choice is complete: closes reasoning, emits the tool calls.
    fn flush(&mut self, out: &mut Vec<ChatEvent>) {
        self.close_reasoning(out);
        for (index, call) in std::mem::take(&mut self.calls) {
            self.turn.called = true;
            out.push(ChatEvent::ToolCall(ToolCall {
                id: call.id.unwrap_or_else(|| format!("call_{index}")),
                name: call.name,
                input: http::call_input(call.arguments, None),
            }));
        }
    }

    /// The end of the turn. Without a `finish_reason` (a server that skips
    /// it), the turn's content says why it stopped.
    fn end(&mut self) -> Vec<ChatEvent> {
        let mut out = Vec::new();
        self.flush(&mut out);
        out.push(self.turn.end());
        self.done = true;
        self.pending.place(out, Extra::new())
    }
}

impl http::TurnDecoder for ChunkDecoder {
    fn on_event(&mut self, event: &Event) -> Result<Vec<ChatEvent>, ChatError> {
        self.on_data(&event.data)
    }

    fn is_done(&self) -> bool {
        ChunkDecoder::is_done(self)
    }

    fn finish(self) -> Result<Vec<ChatEvent>, ChatError> {
        ChunkDecoder::finish(self)
    }
}

/// Maps `finish_reason`; `function_call` is the pre-tools name of `tool_calls`.
fn stop_reason(reason: &str) -> StopReason {
    match reason {
        "stop" => StopReason::EndTurn,
        "tool_calls" | "function_call" => StopReason::ToolUse,
        "length" => StopReason::MaxTokens,
        other => StopReason::Other(other.to_owned()),
    }
}

/// An error object inside the stream (`{"error": {"message", "type"}}`).
/// Only the server's own overload signals are worth a retry.
fn stream_error(value: &Value, data: &str) -> ChatError {
    let error = &value["error"];
    let kind = error
        .get("type")
        .or_else(|| error.get("code"))
        .and_then(Value::as_str);
    ChatError::Api {
        status: None,
        message: http::error_message(data).unwrap_or_else(|| http::quote(data)),
        retryable: matches!(
            kind,
            Some("server_error" | "overloaded" | "overloaded_error")
        ),
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
    use domain::event::Usage;
    use serde_json::json;

    /// Streams `sse` through the real SSE framing in small pieces (so events
    /// straddle reads, as on a network) and collects what the turn yields.
    async fn run(sse: &str) -> Vec<Result<ChatEvent, ChatError>> {
        let chars: Vec<char> = sse.chars().collect();
        let pieces = chars
            .chunks(7)
            .map(|c| c.iter().collect::<String>().into_bytes())
            .collect();
        sse_turn(ChunkDecoder::new(), pieces).await
    }

    /// An SSE body of these `data:` payloads.
    fn sse(payloads: &[Value]) -> String {
        let mut body: String = payloads.iter().map(|p| format!("data: {p}\n\n")).collect();
        body.push_str("data: [DONE]\n\n");
        body
    }

    fn chunk(delta: Value, finish: Value) -> Value {
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
            "model": "gpt-test", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    }

    fn usage(prompt: u64, completion: u64, cached: Option<u64>) -> Value {
        let mut usage = json!({"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion});
        if let Some(cached) = cached {
            usage["prompt_tokens_details"] = json!({"cached_tokens": cached});
        }
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
            "model": "gpt-test", "choices": [], "usage": usage})
    }

    #[tokio::test]
    async fn plain_text_streams_and_ends() {
        let events = ok(run(&sse(&[
            chunk(json!({"role": "assistant", "content": ""}), Value::Null),
            chunk(json!({"content": "Hello"}), Value::Null),
            chunk(json!({"content": " world."}), Value::Null),
            chunk(json!({}), json!("stop")),
            usage(12, 3, Some(0)),
        ]))
        .await);
        assert_eq!(
            events,
            vec![
                ChatEvent::TextDelta("Hello".into()),
                ChatEvent::TextDelta(" world.".into()),
                ChatEvent::End(TurnEnd {
                    stop: StopReason::EndTurn,
                    usage: Usage {
                        input_tokens: 12,
                        output_tokens: 3,
                        ..Usage::default()
                    },
                    model: Some("gpt-test".into()),
                    response_id: Some("chatcmpl-1".into()),
                }),
            ]
        );
    }

    #[tokio::test]
    async fn interleaved_tool_calls_are_assembled_by_index() {
        let body = include_str!("../../testdata/openai/two_tool_calls.sse");
        let events = ok(run(body).await);
        assert_eq!(
            events[..3],
            [
                ChatEvent::TextDelta("Checking both.".into()),
                ChatEvent::ToolCall(call_of("call_a", "shell", json!({"command": "ls -la"}))),
                ChatEvent::ToolCall(call_of("call_b", "read_file", json!({"path": "README.md"}))),
            ]
        );
        let end = end(&events);
        assert_eq!(end.stop, StopReason::ToolUse);
        assert_eq!(end.usage.input_tokens, 80);
        assert_eq!(events.len(), 4);
    }

    #[tokio::test]
    async fn bad_arguments_stay_a_string_and_empty_ones_are_an_object() {
        let events = ok(run(&sse(&[
            chunk(
                json!({"tool_calls": [{"index": 0, "id": "call_x", "type": "function",
                    "function": {"name": "shell", "arguments": "{\"command\": "}}]}),
                Value::Null,
            ),
            chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": "ls"}}]}),
                Value::Null,
            ),
            // No id: one is made up from the index.
            chunk(
                json!({"tool_calls": [{"index": 1, "function": {"name": "now", "arguments": ""}}]}),
                json!("tool_calls"),
            ),
        ]))
        .await);
        assert_eq!(
            events[..2],
            [
                ChatEvent::ToolCall(call_of("call_x", "shell", json!("{\"command\": ls"))),
                ChatEvent::ToolCall(call_of("call_1", "now", json!({}))),
            ]
        );
        assert_eq!(end(&events).stop, StopReason::ToolUse);
    }

    #[tokio::test]
    async fn cached_tokens_are_counted_apart() {
        let events = ok(run(&sse(&[
            chunk(json!({"content": "ok"}), json!("length")),
            usage(1000, 40, Some(800)),
        ]))
        .await);
        let end = end(&events);
        assert_eq!(end.stop, StopReason::MaxTokens);
        assert_eq!(end.usage, usage_of(200, 40, None, Some(800)));
    }

    #[tokio::test]
    async fn missing_usage_is_zero_and_done_may_be_missing() {
        // No usage chunk, no `[DONE]`: the finish_reason is enough.
        let body = format!(
            "data: {}\n\ndata: {}\n\n",
            chunk(json!({"content": "ok"}), Value::Null),
            chunk(json!({}), json!("content_filter")),
        );
        let events = ok(run(&body).await);
        let end = end(&events);
        assert_eq!(end.usage, Usage::default());
        assert_eq!(end.stop, StopReason::Other("content_filter".into()));
    }

    /// Reasoning ends when the answer starts, or else at the finish.
    #[tokio::test]
    async fn reasoning_streams_then_closes() {
        let null = || Value::Null;
        let think = |t: &str| ChatEvent::ThinkingDelta(t.into());
        let cases = [
            (
                vec![
                    chunk(
                        json!({"role": "assistant", "reasoning_content": "Let me "}),
                        null(),
                    ),
                    chunk(json!({"reasoning_content": "think."}), null()),
                    chunk(json!({"content": "42"}), null()),
                ],
                vec![
                    think("Let me "),
                    think("think."),
                    thought_of("Let me think.", None),
                    ChatEvent::TextDelta("42".into()),
                ],
            ),
            (
                vec![chunk(json!({"reasoning": "only thoughts"}), null())],
                vec![think("only thoughts"), thought_of("only thoughts", None)],
            ),
        ];
        for (mut chunks, expected) in cases {
            chunks.push(chunk(json!({}), json!("stop")));
            let events = ok(run(&sse(&chunks)).await);
            assert_eq!(events[..events.len() - 1], expected);
            assert_eq!(end(&events).stop, StopReason::EndTurn);
        }
    }

    #[tokio::test]
    async fn a_cut_stream_is_a_network_error() {
        let body = format!(
            "data: {}\n\ndata: {}\n\n",
            chunk(json!({"content": "Half"}), Value::Null),
            chunk(
                json!({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "shell", "arguments": "{"}}]}),
                Value::Null
            ),
        );
        let events = run(&body).await;
        assert_eq!(events.len(), 2, "{events:?}");
        assert_eq!(events[0], Ok(ChatEvent::TextDelta("Half".into())));
        let e = events[1].clone().unwrap_err();
        assert_eq!(
            e,
            ChatError::Network("the stream ended before the turn finished".into())
        );
        assert!(e.is_transient());
    }

    #[tokio::test]
    async fn an_error_in_the_stream_ends_it() {
        let body = format!(
            "data: {}\n\ndata: {}\n\ndata: {}\n\n",
            chunk(json!({"content": "Partial "}), Value::Null),
            json!({"error": {"message": "the model is overloaded", "type": "server_error"}}),
            chunk(json!({"content": "never seen"}), Value::Null),
        );
        let events = run(&body).await;
        assert_eq!(
            events,
            vec![
                Ok(ChatEvent::TextDelta("Partial ".into())),
                Err(ChatError::Api {
                    status: None,
                    message: "the model is overloaded".into(),
                    retryable: true,
                }),
            ]
        );
        let mut decoder = ChunkDecoder::new();
        let e = decoder
            .on_data(
                r#"{"error": {"message": "bad tool schema", "type": "invalid_request_error"}}"#,
            )
            .unwrap_err();
        assert!(!e.is_transient(), "{e}");
    }

    #[tokio::test]
    async fn data_that_is_not_json_is_named() {
        let long = "x".repeat(1000);
        let events = run(&format!("data: <html>{long}\n\n")).await;
        assert_not_json_named(&events);
        let mut decoder = ChunkDecoder::new();
        assert!(decoder.on_data(r#"{"choices": "nope"}"#).is_err());
    }

    #[test]
    fn the_decoder_is_usable_without_a_stream() {
        let mut decoder = ChunkDecoder::new();
        assert_eq!(decoder.on_data("").unwrap(), vec![]);
        let out = decoder
            .on_data(&chunk(json!({"content": "hi"}), json!("stop")).to_string())
            .unwrap();
        // What the chunk held unmapped, before the event it became.
        let kept = json!({"/object": "chat.completion.chunk", "/created": 1});
        let kept = kept.as_object().unwrap().clone();
        assert_eq!(
            out,
            vec![ChatEvent::Extra(kept), ChatEvent::TextDelta("hi".into())]
        );
        let out = decoder.on_data("[DONE]").unwrap();
        assert!(matches!(out.as_slice(), [ChatEvent::End(_)]));
        assert!(decoder.is_done());
        assert_eq!(decoder.on_data("[DONE]").unwrap(), vec![]);
        assert_eq!(decoder.finish().unwrap(), vec![]);
        // A stream that never said anything was cut.
        assert!(matches!(
            ChunkDecoder::new().finish(),
            Err(ChatError::Network(_))
        ));
    }

    #[test]
    fn done_without_a_finish_reason_infers_the_stop() {
        let mut decoder = ChunkDecoder::new();
        decoder
            .on_data(
                &json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "c1",
                    "function": {"name": "shell", "arguments": "{}"}}]}}]})
                .to_string(),
            )
            .unwrap();
        let out = decoder.on_data("[DONE]").unwrap();
        assert!(matches!(&out[0], ChatEvent::ToolCall(c) if c.id == "c1"));
        assert!(matches!(&out[1], ChatEvent::End(e) if e.stop == StopReason::ToolUse));
    }
}

//! Maps Claude Code `stream-json` lines to normalized [`AgentMessage`]s.
//!
//! The CLI prints one line per content block (several lines share one
//! `message.id`), tool results as `user` lines, and a final `result` line.
//! [`ClaudeDecoder`] emits each block where it appears — a `tool_use` as an
//! [`AgentMessage::ToolUse`] with its `id` — and its `tool_result`, paired by
//! that id, as an [`AgentMessage::Tool`]; a call without a result stays a use
//! alone. It keeps whatever it does not understand as a warning and holds the
//! terminal item back until [`Decoder::finish`], so that it is always last.
//!
//! Partial messages (`--include-partial-messages`): `text_delta` and
//! `thinking_delta` become [`AgentMessage::TextDelta`] /
//! [`AgentMessage::ThinkingDelta`]. Once a message (by `message.id`) has
//! streamed text deltas, its complete `text` blocks are not emitted again
//! (likewise thinking), so consumers never see the same text twice; tool
//! calls always come from the complete `tool_use` blocks.

use std::collections::HashMap;

use application::ports::{AgentMessage, AgentResult};
use domain::SessionId;
use serde::Deserialize;
use serde_json::{Value, json};

use super::wire::{
    self, ApiRetry, AssistantLine, Block, Delta, ResultLine, StreamEventLine, SystemLine,
    ToolResult, UserLine,
};
use crate::normalize::errors::{
    API_ERROR, DURING_EXECUTION, RATE_LIMIT, SESSION_NOT_FOUND, fatal, reported,
};
use crate::normalize::extra::{self, At};
use crate::normalize::usage::model_usage;
use crate::normalize::{
    Cli, Decoded, Decoder, Ending, PendingCall, ToolCalls, announce_session, failure_text, warning,
};
use domain::event::Extra;

const CLI: Cli = Cli("Claude Code");

/// Which kinds of deltas a message streamed.
#[derive(Debug, Default, Clone, Copy)]
struct Streamed {
    text: bool,
    thinking: bool,
}

/// Decoder state for one Claude Code invocation.
#[derive(Debug, Default)]
pub struct ClaudeDecoder {
    /// The session announced with [`AgentMessage::Session`].
    session: Option<SessionId>,
    /// Tool calls and their results.
    tools: ToolCalls,
    /// Messages that streamed deltas, by `message.id`.
    streamed: HashMap<String, Streamed>,
    /// The message the current stream events belong to.
    current_message: Option<String>,
    /// The outcome of the `result` line, emitted at [`Decoder::finish`].
    ending: Ending,
}

impl ClaudeDecoder {
    fn system(&mut self, line: SystemLine, value: &Value) -> Vec<Decoded> {
        match line.subtype.as_deref() {
            Some("init") => {
                let id = (line.session_id, line.model);
                let out = announce_session(&mut self.session, id.0, id.1, "system/init", value);
                extra::before_first(out, extra::of_line(value, wire::INIT))
            }
            Some(kind @ "api_retry") => CLI.read(kind, value, |retry| api_retry(retry, value)),
            // Progress noise: request status and thinking-token estimates.
            Some("status" | "thinking_tokens") => Vec::new(),
            other => CLI.unknown(&format!("system line subtype {other:?}"), value),
        }
    }

    fn assistant(&mut self, line: AssistantLine, value: &Value) -> Vec<Decoded> {
        if line.is_api_error_message {
            // The CLI's own rendering of an API failure, not model output; the
            // `result` line that follows carries the error.
            return vec![Ok(warning(
                "Claude Code reported an API error as a synthetic assistant message".to_owned(),
                json!({ "line": value }),
            ))];
        }
        let streamed = line
            .message
            .id
            .as_ref()
            .and_then(|id| self.streamed.get(id))
            .copied()
            .unwrap_or_default();
        let mut out = Vec::new();
        let mut line_extra = Some(extra::of_line(value, wire::ASSISTANT));
        for (i, block) in blocks(&line.message.content).iter().enumerate() {
            let from = out.len();
            match Block::deserialize(block) {
                Ok(Block::Text { text }) if !streamed.text => {
                    out.push(Ok(AgentMessage::Text { content: text }));
                }
                Ok(Block::Thinking {
                    thinking,
                    signature,
                }) if !streamed.thinking => {
                    out.push(Ok(AgentMessage::Thinking {
                        content: thinking,
                        token_count: None,
                        signature,
                    }));
                }
                Ok(Block::Text { .. } | Block::Thinking { .. }) => {}
                Ok(Block::ToolUse { id, name, input }) => {
                    out.push(Ok(self.tools.call(id, name, input)));
                }
                Ok(Block::ToolResult(result)) => out.push(self.tool_result(result, block)),
                Err(_) => out.extend(unknown_block(block)),
            }
            block_extra(&mut out, from, block, i, &mut line_extra);
        }
        out
    }

    fn user(&mut self, line: UserLine, value: &Value) -> Vec<Decoded> {
        let mut out = Vec::new();
        let mut line_extra = Some(extra::of_line(value, wire::USER));
        // A plain-string content is the user's own prompt echoed back: not agent output.
        for (i, block) in blocks(&line.message.content).iter().enumerate() {
            let from = out.len();
            match Block::deserialize(block) {
                Ok(Block::ToolResult(result)) => out.push(self.tool_result(result, block)),
                // Echoed user text: the runtime already knows its own prompt.
                Ok(Block::Text { .. }) => {}
                _ => out.extend(unknown_block(block)),
            }
            block_extra(&mut out, from, block, i, &mut line_extra);
        }
        out
    }

    fn tool_result(&mut self, result: ToolResult, raw: &Value) -> Decoded {
        let id = result.tool_use_id.as_deref();
        let done = |call: PendingCall| {
            let output = tool_output(result.content);
            let failed = result.is_error.unwrap_or(false);
            let error = failed.then(|| failure_text(&output));
            call.done(output, error)
        };
        Ok(self.tools.complete(id, "tool_result", "block", raw, done))
    }

    fn stream_event(&mut self, line: StreamEventLine, value: &Value) -> Vec<Decoded> {
        let out = self.stream_event_messages(line, value);
        extra::before_first(out, extra::of_line(value, wire::STREAM_EVENT))
    }

    fn stream_event_messages(&mut self, line: StreamEventLine, value: &Value) -> Vec<Decoded> {
        let event = &line.event;
        match event.get("type").and_then(Value::as_str) {
            Some("message_start") => {
                self.current_message = event
                    .pointer("/message/id")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .or(line.api_message_id);
                Vec::new()
            }
            Some("content_block_delta") => {
                let delta = event.get("delta").unwrap_or(&Value::Null);
                let message = line.api_message_id.or_else(|| self.current_message.clone());
                match Delta::deserialize(delta) {
                    Ok(Delta::TextDelta { text }) => {
                        self.mark(message, |s| s.text = true);
                        vec![Ok(AgentMessage::TextDelta { content: text })]
                    }
                    Ok(Delta::ThinkingDelta { thinking }) => {
                        self.mark(message, |s| s.thinking = true);
                        vec![Ok(AgentMessage::ThinkingDelta {
                            content: thinking,
                            token_count: None,
                        })]
                    }
                    Err(_) => match delta.get("type").and_then(Value::as_str) {
                        // Covered by the complete blocks that follow.
                        Some("signature_delta" | "input_json_delta" | "citations_delta") => {
                            Vec::new()
                        }
                        other => CLI.unknown(&format!("stream delta type {other:?}"), value),
                    },
                }
            }
            Some("error") => {
                let error = event.get("error").unwrap_or(&Value::Null);
                let kind = error.get("type").and_then(Value::as_str).unwrap_or("");
                let error_type = if kind == "rate_limit_error" {
                    RATE_LIMIT
                } else {
                    API_ERROR
                };
                let message = error
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("error event in the model stream")
                    .to_owned();
                vec![Ok(reported(error_type, message, value))]
            }
            Some(
                "content_block_start"
                | "content_block_stop"
                | "message_delta"
                | "message_stop"
                | "ping",
            ) => Vec::new(),
            other => CLI.unknown(&format!("stream event type {other:?}"), value),
        }
    }

    fn mark(&mut self, message: Option<String>, set: impl FnOnce(&mut Streamed)) {
        if let Some(id) = message {
            set(self.streamed.entry(id).or_default());
        }
    }
}

/// A failed API request the CLI retries: an error it goes on from.
fn api_retry(line: ApiRetry, value: &Value) -> Vec<Decoded> {
    let error_type = if line.error_status == Some(429) {
        RATE_LIMIT
    } else {
        API_ERROR
    };
    let reason = match &line.error {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => "unknown error".to_owned(),
    };
    let status = line
        .error_status
        .map_or_else(|| "no status".to_owned(), |s| format!("HTTP {s}"));
    let message = format!(
        "API request failed ({status}, {reason}); retry {} of {} in {} ms",
        opt(line.attempt),
        opt(line.max_retries),
        opt(line.retry_delay_ms),
    );
    vec![Ok(reported(error_type, message, value))]
}

/// How Claude Code says `--resume` named a session it never saved.
const NO_SESSION: &str = "No conversation found with session ID";

/// What a `result` line says: the invocation's result, or its error.
fn outcome(line: ResultLine, value: &Value, announced: bool) -> Decoded {
    let subtype = line.subtype.as_deref().unwrap_or("");
    if line.is_error.unwrap_or(false) || subtype.starts_with("error") {
        let text = line.result.as_deref().unwrap_or("");
        let errors: Vec<String> = line
            .errors
            .iter()
            .flatten()
            .map(|e| e.as_str().map_or_else(|| e.to_string(), str::to_owned))
            .collect();
        let error_type = if line.api_error_status == Some(429)
            || line.terminal_reason.as_deref() == Some("rate_limit")
        {
            RATE_LIMIT
        } else if errors.iter().any(|e| e.starts_with(NO_SESSION)) {
            SESSION_NOT_FOUND
        } else if subtype.starts_with("error_") {
            subtype
        } else if line.terminal_reason.as_deref() == Some("api_error")
            || text.starts_with("API Error")
        {
            API_ERROR
        } else {
            DURING_EXECUTION
        };
        let message = if !text.is_empty() {
            text.to_owned()
        } else if !errors.is_empty() {
            errors.join("; ")
        } else {
            format!("Claude Code reported an error (subtype {subtype:?})")
        };
        return Err(fatal(error_type, message, value));
    }
    Ok(AgentMessage::Completed(AgentResult {
        text: line.result.unwrap_or_default(),
        usage: line.usage.unwrap_or_default().into(),
        model_usage: model_usage(line.model_usage),
        total_cost_usd: line.total_cost_usd,
        duration_ms: line.duration_ms,
        num_turns: line
            .num_turns
            .map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX)),
        session_id: match announced {
            true => None,
            false => line.session_id.and_then(|id| SessionId::new(id).ok()),
        },
    }))
}

impl Decoder for ClaudeDecoder {
    fn line(&mut self, value: Value) -> Vec<Decoded> {
        let value = &value;
        match value.get("type").and_then(Value::as_str) {
            Some("system") => CLI.read("system", value, |line| self.system(line, value)),
            Some("assistant") => CLI.read("assistant", value, |line| self.assistant(line, value)),
            Some("user") => CLI.read("user", value, |line| self.user(line, value)),
            Some("stream_event") => {
                CLI.read("stream_event", value, |line| self.stream_event(line, value))
            }
            Some("result") => {
                let announced = self.session.is_some();
                self.ending
                    .result(value, wire::RESULT, |line| outcome(line, value, announced))
            }
            _ => CLI.unknown_type(value),
        }
    }

    fn finish(&mut self, exit_code: Option<i32>, stderr_tail: &str) -> Vec<Decoded> {
        let missing = "a result line";
        self.ending
            .finish(CLI, missing, exit_code, stderr_tail, || None)
    }
}

/// Sends what block `i` of a line holds unmapped (and, with the line's
/// first block that makes a message, what the line itself holds) before
/// the message it made in `out[from..]`. A text part of a tool result's
/// content is joined into the output: its other fields are kept too.
fn block_extra(
    out: &mut Vec<Decoded>,
    from: usize,
    block: &Value,
    i: usize,
    line_extra: &mut Option<Extra>,
) {
    let root = At::ROOT;
    let message = root.key("message");
    let content = message.key("content");
    let at = content.index(i);
    let mut kept = Extra::new();
    extra::unmapped(block, wire::block_fields(block), at, &mut kept);
    if block.get("type").and_then(Value::as_str) == Some("tool_result")
        && let Some(parts) = block.get("content").and_then(Value::as_array)
        && parts
            .iter()
            .all(|p| p.get("type").and_then(Value::as_str) == Some("text"))
    {
        let parts_at = at.key("content");
        for (j, part) in parts.iter().enumerate() {
            extra::unmapped(part, wire::TEXT_PART, parts_at.index(j), &mut kept);
        }
    }
    let with_line = match line_extra {
        Some(line) if !line.is_empty() => {
            let mut both = kept.clone();
            extra::merge(&mut both, line.clone());
            both
        }
        _ => kept,
    };
    if extra::insert_from(out, from, with_line) {
        *line_extra = None;
    }
}

/// The content blocks of a message (none when the content is not an array).
fn blocks(content: &Value) -> &[Value] {
    content.as_array().map_or(&[], Vec::as_slice)
}

/// A tool result's content: text blocks joined into one string, a string
/// kept as is, anything else (images, ...) kept raw.
fn tool_output(content: Value) -> Value {
    let Value::Array(parts) = content else {
        return content;
    };
    let texts: Option<Vec<&str>> = parts
        .iter()
        .map(|p| match p.get("type").and_then(Value::as_str) {
            Some("text") => p.get("text").and_then(Value::as_str),
            _ => None,
        })
        .collect();
    match texts {
        Some(texts) => Value::String(texts.join("\n")),
        None => Value::Array(parts),
    }
}

fn opt(n: Option<u64>) -> String {
    n.map_or_else(|| "?".to_owned(), |n| n.to_string())
}

fn unknown_block(block: &Value) -> Vec<Decoded> {
    let kind = block.get("type").and_then(Value::as_str);
    vec![Ok(warning(
        format!("unknown or malformed Claude Code content block {kind:?}; kept as is"),
        json!({ "block": block }),
    ))]
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::normalize::decode_all;
    use crate::normalize::testing::*;

    const TOOL_TEXT: &str = "Tool said: hi\n\n<system-reminder>\n<total_tokens>14999855 tokens left</total_tokens>\n</system-reminder>";

    #[test]
    fn keeps_what_every_cli_decoder_promises() {
        assert_cli_basics::<ClaudeDecoder>("claude", &[INIT], OK_RESULT);
    }

    #[test]
    fn tool_capture_keeps_thinking_with_its_signature() {
        let out = recorded::<ClaudeDecoder>("claude/tool");
        assert!(
            matches!(&out[1], Ok(AgentMessage::Thinking { content, token_count: None, signature: Some(s) })
            if content == "The user wants me to run echo hi. I'll use the shell tool." && !s.is_empty()),
            "{:?}",
            out[1]
        );
        assert_eq!(completed(&out).text, TOOL_TEXT);
    }

    #[test]
    fn partial_capture_streams_deltas_without_duplicating_blocks() {
        let out = recorded::<ClaudeDecoder>("claude/tool_partial");
        assert_eq!(deltas(&out), format!("I will run a command.{TOOL_TEXT}"));
    }

    const INIT: &str = r#"{"type":"system","subtype":"init","session_id":"s1","model":"m"}"#;
    const OK_RESULT: &str = r#"{"type":"result","subtype":"success","is_error":false,"result":"done","num_turns":1,"usage":{"input_tokens":1,"output_tokens":2}}"#;

    #[test]
    fn mixed_blocks_keep_their_order_ids_and_a_dangling_call_stays_a_use() {
        // One message: thinking + text + tool_use in one line, then a line
        // with text after a call, a call without its id, and a call that
        // never gets a result (the CLI is killed).
        let out = run::<ClaudeDecoder>(
            &[
                INIT,
                r#"{"type":"assistant","message":{"id":"m1","content":[{"type":"thinking","thinking":"plan","signature":"c2ln"},{"type":"text","text":"running"},{"type":"tool_use","id":"toolu_A","name":"Bash","input":{"command":"echo a"}}]}}"#,
                r#"{"type":"assistant","message":{"id":"m1","content":[{"type":"tool_use","id":"toolu_B","name":"Bash","input":{"command":"sleep 99"}},{"type":"text","text":"meanwhile"}]}}"#,
                r#"{"type":"assistant","message":{"id":"m1","content":[{"type":"tool_use","name":"Read","input":{}}]}}"#,
                r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"toolu_A","content":"a"}]}}"#,
                r#"{"type":"user","message":{"content":[{"type":"tool_result","content":"file","is_error":false}]}}"#,
                r#"{"type":"assistant","message":{"id":"m2","content":[{"type":"text","text":"waiting"}]}}"#,
            ],
            Some(137),
            "Killed\n",
        );
        let (messages, error) = split(out);
        assert_eq!(
            messages,
            [
                session_of("s1", Some("m")),
                thinking_of("plan", Some("c2ln")),
                text_of("running"),
                use_of(Some("toolu_A"), "Bash", json!({"command": "echo a"})),
                use_of(Some("toolu_B"), "Bash", json!({"command": "sleep 99"})),
                text_of("meanwhile"),
                use_of(None, "Read", json!({})),
                tool_of(
                    Some("toolu_A"),
                    "Bash",
                    json!({"command": "echo a"}),
                    json!("a"),
                    None
                ),
                tool_of(None, "Read", json!({}), json!("file"), None),
                text_of("waiting"),
            ],
            "toolu_B stays a use alone: no result is made up for it"
        );
        assert_killed(error.as_ref());
    }

    #[test]
    fn lines_of_another_cli_version_are_kept_whole() {
        let future = r#"{"type":"assistant_v9","message":{"id":"m1"}}"#;
        let block = json!({"type": "server_tool_use", "id": "srv_1", "name": "web"});
        let with_block = format!(
            r#"{{"type":"assistant","message":{{"id":"m1","content":[{block},{{"type":"text","text":"hi"}}]}}}}"#
        );
        let out = run::<ClaudeDecoder>(&[INIT, future, &with_block, OK_RESULT], Some(0), "");
        let (messages, error) = split(out);
        assert!(error.is_none());
        let future: Value = serde_json::from_str(future).unwrap();
        assert_eq!(
            messages[1..4],
            [
                warning_of(
                    "unknown Claude Code line type `assistant_v9`; kept as is",
                    json!({ "line": future })
                ),
                warning_of(
                    "unknown or malformed Claude Code content block Some(\"server_tool_use\"); kept as is",
                    json!({ "block": block })
                ),
                text_of("hi"),
            ]
        );
        assert_eq!(messages.len(), 5);
        assert!(matches!(messages[4], AgentMessage::Completed(_)));
    }

    #[test]
    fn unknown_lines_and_blocks_are_kept_as_warnings() {
        let out = run::<ClaudeDecoder>(
            &[
                INIT,
                r#"{"type":"system","subtype":"hook_response"}"#,
                r#"{"type":"assistant","message":{"id":"m1","content":[{"type":"redacted_thinking","data":"xx"},{"type":"text","text":"hi"}]}}"#,
                r#"{"type":"assistant","message":"not an object"}"#,
                OK_RESULT,
            ],
            Some(0),
            "",
        );
        assert_kinds(&out, "session warning warning text warning completed");
        assert_eq!(completed(&out).text, "done");
    }

    #[test]
    fn hostile_bytes_do_not_stop_decoding() {
        let text = r#"{"type":"assistant","message":{"id":"m1","content":[{"type":"text","text":"TEXT"}]}}"#;
        let out = hostile::<ClaudeDecoder>(&[INIT], text, &[OK_RESULT]);
        assert_kinds(&out, "session warning text warning warning text completed");
    }

    #[test]
    fn truncated_result_line_means_no_result() {
        let out = run::<ClaudeDecoder>(&[INIT], Some(1), "");
        assert_kinds(&out, "session ERR");
        let stdout = format!("{INIT}\n{}", &OK_RESULT[..40]);
        let out = decode_all(ClaudeDecoder::default(), stdout.as_bytes(), Some(1), "");
        assert_kinds(&out, "session warning ERR");
    }

    #[test]
    fn result_errors_map_to_stable_types() {
        let cases = [
            (
                r#"{"type":"result","subtype":"error_max_turns","is_error":true,"num_turns":3}"#,
                "error_max_turns",
            ),
            (
                r#"{"type":"result","subtype":"error_during_execution","is_error":true,"errors":["tool crashed"]}"#,
                "error_during_execution",
            ),
            (
                r#"{"type":"result","subtype":"success","is_error":true,"api_error_status":429,"result":"API Error: 429 rate limited","terminal_reason":"api_error"}"#,
                "rate_limit",
            ),
            (
                r#"{"type":"result","subtype":"success","is_error":true,"result":"API Error: 400 bad"}"#,
                "api_error",
            ),
            (
                r#"{"type":"result","subtype":"success","is_error":true}"#,
                "error_during_execution",
            ),
            (
                r#"{"type":"result","usage":"oops"}"#,
                "error_during_execution",
            ),
            (
                r#"{"type":"result","subtype":"error_during_execution","is_error":true,"num_turns":0,"session_id":"7fbb09fa-c236-4abb-9d61-ab2a0b7427b8","errors":["No conversation found with session ID: 7fbb09fa-c236-4abb-9d61-ab2a0b7427b8"]}"#,
                "session_not_found",
            ),
        ];
        assert_error_types::<ClaudeDecoder>(&[INIT], &cases);
        let out = run::<ClaudeDecoder>(&[INIT, cases[1].0], Some(1), "");
        assert_eq!(agent_error(&out).1, "tool crashed");
    }

    #[test]
    fn api_retry_429_is_a_rate_limit_error_and_success_with_bad_exit_warns() {
        let out = run::<ClaudeDecoder>(
            &[
                INIT,
                r#"{"type":"system","subtype":"api_retry","attempt":1,"max_retries":3,"retry_delay_ms":500,"error_status":429,"error":"rate_limit"}"#,
                r#"{"type":"stream_event","event":{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}}"#,
                r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"nope","content":"x"}]}}"#,
                OK_RESULT,
            ],
            Some(3),
            "",
        );
        assert_kinds(&out, "session error error warning warning completed");
        assert!(
            matches!(&out[1], Ok(AgentMessage::Error { error_type, .. }) if error_type == "rate_limit")
        );
        assert!(
            matches!(&out[2], Ok(AgentMessage::Error { error_type, message, .. })
            if error_type == "api_error" && message == "Overloaded")
        );
        let result = completed(&out);
        assert_eq!(result.session_id, None);
        assert_eq!(
            (result.usage.input_tokens, result.usage.output_tokens),
            (1, 2)
        );
        assert_eq!(result.usage.cache_read_input_tokens, None);
    }

    #[test]
    fn result_without_init_carries_the_session_and_finish_is_idempotent() {
        let line = r#"{"type":"result","subtype":"success","result":"ok","session_id":"s9"}"#;
        let mut decoder = ClaudeDecoder::default();
        let value: Value = serde_json::from_str(line).unwrap();
        assert!(decoder.line(value).is_empty());
        let out = decoder.finish(Some(0), "");
        assert_eq!(
            completed(&out).session_id.as_ref().map(SessionId::as_str),
            Some("s9")
        );
        assert!(decoder.finish(Some(0), "").is_empty());
    }

    #[test]
    fn tool_result_with_block_content_is_joined_text() {
        let out = run::<ClaudeDecoder>(
            &[
                INIT,
                r#"{"type":"assistant","message":{"id":"m1","content":[{"type":"tool_use","id":"t1","name":"Read","input":{}}]}}"#,
                r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]}}"#,
                r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":"again"}]}}"#,
                OK_RESULT,
            ],
            Some(0),
            "",
        );
        assert_kinds(&out, "session tool_use tool warning completed");
        assert_eq!(tool(&out[2]).2, &json!("a\nb"));
    }
}

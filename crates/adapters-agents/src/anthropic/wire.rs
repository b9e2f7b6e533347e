//! The Messages API on the wire: the request body we send and the stream
//! events we read.
//!
//! The body is built as JSON directly: it is written once, here, and its
//! shape is checked by tests. Events are serde types declaring only the
//! fields the decoder reads, all defaulted, so a field the API adds (or a
//! compatible server leaves out) does not break a turn; unknown event,
//! block and delta types decode to an `Unknown`/`Other` variant.

use application::ports::{ChatBlock, ChatMessage, ChatRequest, ToolResult};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::normalize::extra::{ALL, Known};
use crate::normalize::usage::{TOKEN_COUNTS, TokenCounts};

/// `max_tokens` is required by the API; this is what a turn gets when the
/// agent sets none: enough for a long answer on every current model.
pub(super) const DEFAULT_MAX_TOKENS: u32 = 8192;

/// The body of `POST /v1/messages` for one streamed turn.
pub(super) fn request_body(request: &ChatRequest, model: &str) -> Value {
    let agent = &request.agent;
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    body.insert(
        "max_tokens".into(),
        json!(agent.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS)),
    );
    body.insert("stream".into(), json!(true));
    if !request.system.is_empty() {
        body.insert("system".into(), json!(request.system));
    }
    if let Some(temperature) = agent.temperature {
        body.insert("temperature".into(), json!(temperature));
    }
    if let Some(budget) = agent.thinking_budget {
        body.insert(
            "thinking".into(),
            json!({"type": "enabled", "budget_tokens": budget}),
        );
    }
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| {
                json!({"name": t.name, "description": t.description,
                    "input_schema": t.input_schema})
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    let messages: Vec<Value> = request.messages.iter().filter_map(message).collect();
    body.insert("messages".into(), Value::Array(messages));
    Value::Object(body)
}

/// One message of the conversation; `None` for an assistant turn with
/// nothing left to send, since the API refuses empty content.
fn message(message: &ChatMessage) -> Option<Value> {
    match message {
        ChatMessage::User(text) => Some(json!({"role": "user",
            "content": [{"type": "text", "text": text}]})),
        ChatMessage::Assistant(blocks) => {
            let content: Vec<Value> = blocks.iter().filter_map(assistant_block).collect();
            (!content.is_empty()).then(|| json!({"role": "assistant", "content": content}))
        }
        // All results of one turn go in one user message: the API wants every
        // `tool_use` of a turn answered in the message right after it.
        ChatMessage::ToolResults(results) => Some(json!({"role": "user",
            "content": results.iter().map(tool_result).collect::<Vec<_>>()})),
    }
}

/// A block of a previous model turn, as the API wants it back.
fn assistant_block(block: &ChatBlock) -> Option<Value> {
    match block {
        // The API refuses empty text blocks.
        ChatBlock::Text(text) if text.is_empty() => None,
        ChatBlock::Text(text) => Some(json!({"type": "text", "text": text})),
        // With extended thinking and tool use, the thinking block must come
        // back verbatim with its signature; without one the API would refuse
        // it, and a turn may legally omit it.
        ChatBlock::Thinking { text, signature } => signature
            .as_ref()
            .map(|signature| json!({"type": "thinking", "thinking": text, "signature": signature})),
        ChatBlock::ToolCall(call) => {
            // `input` must be an object: arguments that were not JSON were
            // refused by the schema check already, so `{}` loses nothing.
            let input = if call.input.is_object() {
                call.input.clone()
            } else {
                json!({})
            };
            Some(json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input}))
        }
        // A kind of block this API has no form for is not sent back.
        _ => None,
    }
}

fn tool_result(result: &ToolResult) -> Value {
    json!({"type": "tool_result", "tool_use_id": result.call_id,
        "content": result.content, "is_error": result.is_error})
}

/// One server-sent event of a streamed turn; the `type` field repeats the
/// SSE event name.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum StreamEvent {
    /// The message opens: its id, model and prompt usage.
    MessageStart {
        /// The message so far (empty content).
        message: MessageStart,
    },
    /// A content block opens.
    ContentBlockStart {
        /// The block's position in the message.
        #[serde(default)]
        index: u64,
        /// Its type and initial fields.
        content_block: StartBlock,
    },
    /// A piece of the open block.
    ContentBlockDelta {
        /// The block it belongs to.
        #[serde(default)]
        index: u64,
        /// The piece.
        delta: BlockDelta,
    },
    /// A content block is complete.
    ContentBlockStop {
        /// The block.
        #[serde(default)]
        index: u64,
    },
    /// The stop reason and the usage so far.
    MessageDelta {
        /// Carries `stop_reason`.
        #[serde(default)]
        delta: MessageDelta,
        /// Cumulative usage.
        usage: Option<TokenCounts>,
    },
    /// The turn is over.
    MessageStop,
    /// A keep-alive.
    Ping,
    /// An error inside an accepted stream (`overloaded_error`, ...).
    Error {
        /// What went wrong.
        #[serde(default)]
        error: WireError,
    },
    /// A type this adapter does not know.
    #[serde(other)]
    Unknown,
}

/// `message_start.message`.
#[derive(Debug, Deserialize)]
pub(super) struct MessageStart {
    /// `msg_…`.
    pub id: Option<String>,
    /// The model that answers.
    pub model: Option<String>,
    /// Prompt tokens (and an initial output count).
    pub usage: Option<TokenCounts>,
}

/// `content_block_start.content_block`.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum StartBlock {
    /// Text; usually empty at the start, but not always.
    Text {
        /// Initial text.
        #[serde(default)]
        text: String,
    },
    /// Reasoning.
    Thinking {
        /// Initial reasoning (empty when streamed).
        #[serde(default)]
        thinking: String,
        /// Empty at the start when streamed; it arrives as a delta.
        signature: Option<String>,
    },
    /// Reasoning the API encrypted: nothing to show.
    RedactedThinking,
    /// A tool call; its input arrives as `input_json_delta` pieces.
    ToolUse {
        /// `toolu_…`.
        #[serde(default)]
        id: String,
        /// The tool.
        #[serde(default)]
        name: String,
        /// `{}` when streamed; a server that does not stream the input
        /// may put it whole here.
        input: Option<Value>,
    },
    /// Server tools, web search results, ...: not ours to map.
    #[serde(other)]
    Other,
}

/// `content_block_delta.delta`.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum BlockDelta {
    /// A piece of text.
    TextDelta {
        /// The piece.
        #[serde(default)]
        text: String,
    },
    /// A piece of reasoning.
    ThinkingDelta {
        /// The piece.
        #[serde(default)]
        thinking: String,
    },
    /// The reasoning block's signature, just before it stops.
    SignatureDelta {
        /// The signature (or a piece of it).
        #[serde(default)]
        signature: String,
    },
    /// A piece of a tool call's input JSON.
    InputJsonDelta {
        /// The piece, to concatenate.
        #[serde(default)]
        partial_json: String,
    },
    /// A citation for the text: not shown.
    CitationsDelta,
    /// A type this adapter does not know.
    #[serde(other)]
    Other,
}

/// `message_delta.delta`.
#[derive(Debug, Default, Deserialize)]
pub(super) struct MessageDelta {
    /// `end_turn`, `tool_use`, `max_tokens`, `stop_sequence`, `refusal`, ...
    pub stop_reason: Option<String>,
}

/// `error.error`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct WireError {
    /// `overloaded_error`, `api_error`, `rate_limit_error`, ...
    #[serde(rename = "type")]
    pub kind: String,
    /// The provider's message.
    pub message: String,
}

/// A `content_block_start` whose block has these fields.
macro_rules! start {
    ($($field:expr),* $(,)?) => {
        Known::Fields(&[
            ("type", ALL),
            ("index", ALL),
            ("content_block", Known::Fields(&[("type", ALL), $($field),*])),
        ])
    };
}

/// A `content_block_delta` whose delta has these fields.
macro_rules! delta {
    ($($field:expr),* $(,)?) => {
        Known::Fields(&[
            ("type", ALL),
            ("index", ALL),
            ("delta", Known::Fields(&[("type", ALL), $($field),*])),
        ])
    };
}

/// What the decoder maps of a stream event ([`StreamEvent`]); the rest
/// goes into the `extra` of the event it becomes, or of the next one
/// ([`crate::normalize::extra::Pending`]). An event, block or delta of a
/// type it does not know is kept whole as a warning: nothing is unmapped.
pub(super) fn known(event: &Value) -> Known {
    let sub = |pointer| event.pointer(pointer).and_then(Value::as_str);
    match event.get("type").and_then(Value::as_str) {
        Some("message_start") => Known::Fields(&[
            ("type", ALL),
            (
                "message",
                Known::Fields(&[("id", ALL), ("model", ALL), ("usage", TOKEN_COUNTS)]),
            ),
        ]),
        Some("content_block_start") => match sub("/content_block/type") {
            Some("text") => start!(("text", ALL)),
            Some("thinking") => start!(("thinking", ALL), ("signature", ALL)),
            Some("redacted_thinking") => start!(),
            Some("tool_use") => start!(("id", ALL), ("name", ALL), ("input", ALL)),
            _ => ALL,
        },
        Some("content_block_delta") => match sub("/delta/type") {
            Some("text_delta") => delta!(("text", ALL)),
            Some("thinking_delta") => delta!(("thinking", ALL)),
            Some("signature_delta") => delta!(("signature", ALL)),
            Some("input_json_delta") => delta!(("partial_json", ALL)),
            Some("citations_delta") => delta!(),
            _ => ALL,
        },
        Some("content_block_stop") => Known::Fields(&[("type", ALL), ("index", ALL)]),
        Some("message_delta") => Known::Fields(&[
            ("type", ALL),
            ("delta", Known::Fields(&[("stop_reason", ALL)])),
            ("usage", TOKEN_COUNTS),
        ]),
        Some("message_stop" | "ping") => Known::Fields(&[("type", ALL)]),
        _ => ALL,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use application::ports::{ToolCall, ToolSpec};
    use domain::workflow::{AgentDef, Provider};

    fn request(messages: Vec<ChatMessage>) -> ChatRequest {
        ChatRequest {
            agent: AgentDef::new(Provider::Anthropic),
            system: String::new(),
            messages,
            tools: Vec::new(),
        }
    }

    #[test]
    fn a_bare_request_has_defaults_and_no_optional_fields() {
        let body = request_body(&request(vec![ChatMessage::User("hi".into())]), "claude-x");
        assert_eq!(
            body,
            json!({"model": "claude-x", "max_tokens": 8192, "stream": true,
                "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]})
        );
    }

    #[test]
    fn system_temperature_max_tokens_and_tools_when_set() {
        let mut req = request(vec![ChatMessage::User("hi".into())]);
        req.system = "Be brief.".into();
        req.agent.temperature = Some(0.5);
        req.agent.max_tokens = Some(100);
        req.tools = vec![ToolSpec {
            name: "shell".into(),
            description: "Runs a command.".into(),
            input_schema: json!({"type": "object"}),
        }];
        let body = request_body(&req, "m");
        assert_eq!(body["system"], "Be brief.");
        assert_eq!(body["temperature"], 0.5);
        assert_eq!(body["max_tokens"], 100);
        assert!(body.get("thinking").is_none());
        req.agent.thinking_budget = Some(2048);
        let thinking = &request_body(&req, "m")["thinking"];
        assert_eq!(*thinking, json!({"type": "enabled", "budget_tokens": 2048}));
        assert_eq!(
            body["tools"],
            json!([{"name": "shell", "description": "Runs a command.",
                "input_schema": {"type": "object"}}])
        );
    }

    #[test]
    fn a_tool_turn_round_trips_with_its_thinking_signature() {
        let call = |id: &str, input: Value| {
            ChatBlock::ToolCall(ToolCall {
                id: id.into(),
                name: "shell".into(),
                input,
            })
        };
        let result = |id: &str, content: &str, is_error: bool| ToolResult {
            call_id: id.into(),
            name: "shell".into(),
            content: content.into(),
            is_error,
        };
        let req = request(vec![
            ChatMessage::User("run it".into()),
            ChatMessage::Assistant(vec![
                ChatBlock::Thinking {
                    text: "I should run it.".into(),
                    signature: Some("c2ln".into()),
                },
                ChatBlock::Thinking {
                    text: "unsigned".into(),
                    signature: None,
                },
                ChatBlock::Text(String::new()),
                ChatBlock::Text("Running.".into()),
                call("toolu_1", json!({"command": "echo hi"})),
                call("toolu_2", json!("not json")),
            ]),
            ChatMessage::ToolResults(vec![
                result("toolu_1", "hi\n", false),
                result("toolu_2", "bad input", true),
            ]),
            // A turn with nothing to send back is left out.
            ChatMessage::Assistant(vec![ChatBlock::Text(String::new())]),
        ]);
        let body = request_body(&req, "m");
        assert_eq!(
            body["messages"],
            json!([
                {"role": "user", "content": [{"type": "text", "text": "run it"}]},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "I should run it.", "signature": "c2ln"},
                    {"type": "text", "text": "Running."},
                    {"type": "tool_use", "id": "toolu_1", "name": "shell",
                        "input": {"command": "echo hi"}},
                    {"type": "tool_use", "id": "toolu_2", "name": "shell", "input": {}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "hi\n",
                        "is_error": false},
                    {"type": "tool_result", "tool_use_id": "toolu_2", "content": "bad input",
                        "is_error": true},
                ]},
            ])
        );
    }

    #[test]
    fn unknown_types_and_extra_fields_decode() {
        let event: StreamEvent =
            serde_json::from_str(r#"{"type": "message_stop", "extra": 1}"#).unwrap();
        assert!(matches!(event, StreamEvent::MessageStop));
        let event: StreamEvent = serde_json::from_str(r#"{"type": "brand_new"}"#).unwrap();
        assert!(matches!(event, StreamEvent::Unknown));
        let event: StreamEvent = serde_json::from_str(
            r#"{"type": "content_block_delta", "index": 0,
                "delta": {"type": "citations_delta", "citation": {"x": 1}}}"#,
        )
        .unwrap();
        assert!(matches!(
            event,
            StreamEvent::ContentBlockDelta {
                delta: BlockDelta::CitationsDelta,
                ..
            }
        ));
        let event: StreamEvent = serde_json::from_str(
            r#"{"type": "content_block_start", "index": 3,
                "content_block": {"type": "server_tool_use", "id": "x"}}"#,
        )
        .unwrap();
        assert!(matches!(
            event,
            StreamEvent::ContentBlockStart {
                index: 3,
                content_block: StartBlock::Other
            }
        ));
    }
}

//! The Anthropic Messages wire format (`POST /v1/messages`, which Claude Code
//! calls with `?beta=true`, and Copilot with `COPILOT_PROVIDER_TYPE=anthropic`).
//!
//! Stream: `message_start` → `ping` → per block `content_block_start` /
//! `content_block_delta` / `content_block_stop` → `message_delta`
//! (`stop_reason`, usage) → `message_stop`. A tool turn has three blocks:
//! thinking (with a `signature_delta` before it stops), text, and `tool_use`
//! whose input arrives as `input_json_delta` pieces. `CUTSTREAM` stops after
//! the text deltas, inside the open block.

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use super::scenario::{self, Api, Scenario, TOOL_PREAMBLE};
use super::sse;

const THINKING: &str = "The user wants me to run echo hi. I'll use the shell tool.";

/// Answers one Messages request, streaming when the body asks for it.
pub(super) fn respond(body: &Value, state: &scenario::State) -> Response {
    let sc = scenario::choose(Api::Anthropic, body, state);
    let model = body["model"].as_str().unwrap_or("claude-fake");
    if let Scenario::Error(status) = sc {
        return error(status);
    }
    let msg_id = sse::id("msg_");
    let usage0 = json!({"input_tokens": 120, "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0, "output_tokens": 1, "service_tier": "standard"});
    let (blocks, stop) = match &sc {
        Scenario::Tool { name, args, .. } => (
            vec![
                Block::Thinking(THINKING),
                Block::Text(TOOL_PREAMBLE.to_owned()),
                Block::ToolUse(name.clone(), args.clone()),
            ],
            "tool_use",
        ),
        Scenario::Text(t) => (vec![Block::Text(t.clone())], "end_turn"),
        Scenario::CutStream => (vec![Block::Text(scenario::CUT_TEXT.to_owned())], "end_turn"),
        _ => (
            vec![Block::Text(scenario::PLAIN_TEXT.to_owned())],
            "end_turn",
        ),
    };
    if body["stream"] != true {
        let content: Vec<Value> = blocks.iter().map(Block::complete).collect();
        let mut usage = usage0;
        usage["output_tokens"] = json!(25);
        let msg = json!({"id": msg_id, "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": stop, "stop_sequence": null, "usage": usage});
        if sc == Scenario::CutStream {
            return sse::cut_json(&msg);
        }
        return sse::json(StatusCode::OK, &msg, &[("request-id", sse::id("req_"))]);
    }
    let mut frames = Vec::new();
    let mut send = |event: &str, data: Value| frames.push(sse::frame(Some(event), &data, false));
    send(
        "message_start",
        json!({"type": "message_start", "message": {"id": msg_id, "type": "message",
            "role": "assistant", "model": model, "content": [], "stop_reason": null,
            "stop_sequence": null, "usage": usage0}}),
    );
    send("ping", json!({"type": "ping"}));
    if sc == Scenario::MidErr {
        send(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        );
        send(
            "content_block_delta",
            delta(0, json!({"type": "text_delta", "text": "Partial "})),
        );
        send(
            "error",
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        );
        return sse::stream(frames);
    }
    for (i, block) in blocks.iter().enumerate() {
        let start = match block {
            Block::Thinking(_) => json!({"type": "thinking", "thinking": "", "signature": ""}),
            Block::Text(_) => json!({"type": "text", "text": ""}),
            Block::ToolUse(name, _) => {
                json!({"type": "tool_use", "id": sse::id("toolu_"), "name": name, "input": {}})
            }
        };
        send(
            "content_block_start",
            json!({"type": "content_block_start", "index": i, "content_block": start}),
        );
        match block {
            Block::Thinking(t) => {
                let (a, b) = t.split_at(30.min(t.len()));
                for piece in [a, b] {
                    send(
                        "content_block_delta",
                        delta(i, json!({"type": "thinking_delta", "thinking": piece})),
                    );
                }
                send(
                    "content_block_delta",
                    delta(
                        i,
                        json!({"type": "signature_delta", "signature": "ZmFrZS1zaWduYXR1cmU="}),
                    ),
                );
            }
            Block::Text(t) => {
                for w in sse::words(t) {
                    send(
                        "content_block_delta",
                        delta(i, json!({"type": "text_delta", "text": w})),
                    );
                }
                if sc == Scenario::CutStream {
                    // No content_block_stop, message_delta or message_stop.
                    return sse::stream(frames);
                }
            }
            Block::ToolUse(_, args) => {
                send(
                    "content_block_delta",
                    delta(i, json!({"type": "input_json_delta", "partial_json": ""})),
                );
                for p in sse::pieces(&args.to_string()) {
                    send(
                        "content_block_delta",
                        delta(i, json!({"type": "input_json_delta", "partial_json": p})),
                    );
                }
            }
        }
        send(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": i}),
        );
    }
    send(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
            "usage": {"input_tokens": 120, "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0, "output_tokens": 25}}),
    );
    send("message_stop", json!({"type": "message_stop"}));
    sse::stream(frames)
}

/// One content block of the reply, before it is framed as events.
enum Block {
    Thinking(&'static str),
    Text(String),
    ToolUse(String, Value),
}

impl Block {
    /// The block as it appears in a non-streaming reply.
    fn complete(&self) -> Value {
        match self {
            Block::Thinking(t) => {
                json!({"type": "thinking", "thinking": t, "signature": "fakesig=="})
            }
            Block::Text(t) => json!({"type": "text", "text": t}),
            Block::ToolUse(name, args) => {
                json!({"type": "tool_use", "id": sse::id("toolu_"), "name": name, "input": args})
            }
        }
    }
}

fn delta(index: usize, delta: Value) -> Value {
    json!({"type": "content_block_delta", "index": index, "delta": delta})
}

/// The Anthropic error body; 429 carries `retry-after` so clients back off
/// for a second instead of their default.
fn error(status: u16) -> Response {
    let kind = match status {
        429 => "rate_limit_error",
        400 => "invalid_request_error",
        _ => "api_error",
    };
    let body = json!({"type": "error", "error": {"type": kind, "message": format!("fake {kind} error")},
        "request_id": sse::id("req_")});
    let mut headers = vec![("request-id", sse::id("req_"))];
    if status == 429 {
        headers.push(("retry-after", "1".to_owned()));
    }
    sse::json(sse::status_code(status), &body, &headers)
}

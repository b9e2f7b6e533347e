//! The OpenAI Chat Completions wire format (`POST /v1/chat/completions`),
//! Copilot's default in offline mode and the shape our own `openai` provider
//! will speak.
//!
//! Stream: `data:` lines of `chat.completion.chunk` sharing one `id` and
//! `created`: a role chunk, content deltas, for a tool call a first
//! `tool_calls` fragment (`index`, `id`, `type`, `function.name`) then
//! argument-only fragments, a chunk with `finish_reason`, and with
//! `stream_options.include_usage` a last chunk with `choices: []` and `usage`;
//! then `data: [DONE]`. `CUTSTREAM` stops after the content deltas.

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use super::responses::openai_error_kind;
use super::scenario::{self, Api, Scenario, TOOL_PREAMBLE};
use super::sse;

/// Answers one Chat Completions request, streaming when the body asks for it.
pub(super) fn respond(body: &Value, state: &scenario::State) -> Response {
    let sc = scenario::choose(Api::Chat, body, state);
    let model = body["model"].as_str().unwrap_or("gpt-fake");
    if let Scenario::Error(status) = sc {
        return error(status);
    }
    let cid = sse::id("chatcmpl-");
    let created = sse::now_secs();
    let usage = json!({"prompt_tokens": 120, "completion_tokens": 25, "total_tokens": 145,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0}});
    let call_id = sse::id("call_");
    let (text, tool) = match &sc {
        // Arguments are a string on this wire: a CALLTOOL line goes as written.
        Scenario::Tool {
            name,
            args,
            raw_args,
        } => (
            TOOL_PREAMBLE.to_owned(),
            Some((name, raw_args.clone().unwrap_or_else(|| args.to_string()))),
        ),
        Scenario::Text(t) => (t.clone(), None),
        Scenario::CutStream => (scenario::CUT_TEXT.to_owned(), None),
        _ => (scenario::PLAIN_TEXT.to_owned(), None),
    };
    if body["stream"] != true {
        let mut msg = json!({"role": "assistant", "content": text, "refusal": null});
        let mut finish = "stop";
        if let Some((name, arguments)) = &tool {
            msg["tool_calls"] = json!([{"id": call_id, "type": "function",
                "function": {"name": name, "arguments": arguments}}]);
            finish = "tool_calls";
        }
        let reply = json!({"id": cid, "object": "chat.completion", "created": created,
            "model": model, "choices": [{"index": 0, "message": msg, "logprobs": null,
            "finish_reason": finish}], "usage": usage, "system_fingerprint": null});
        if sc == Scenario::CutStream {
            return sse::cut_json(&reply);
        }
        return sse::json(StatusCode::OK, &reply, &[]);
    }
    let chunk = |delta: Value, finish: Value| {
        json!({"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
            "system_fingerprint": null,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]})
    };
    let mut frames = Vec::new();
    let mut send = |data: Value| frames.push(sse::frame(None, &data, false));
    send(chunk(
        json!({"role": "assistant", "content": "", "refusal": null}),
        Value::Null,
    ));
    if sc == Scenario::MidErr {
        send(chunk(json!({"content": "Partial "}), Value::Null));
        send(json!({"error": {"message": "fake mid-stream failure", "type": "server_error"}}));
        return sse::stream(frames);
    }
    for w in sse::words(&text) {
        send(chunk(json!({"content": w}), Value::Null));
    }
    if sc == Scenario::CutStream {
        // No finish_reason chunk, no usage, no [DONE].
        return sse::stream(frames);
    }
    let mut finish = "stop";
    if let Some((name, arguments)) = &tool {
        send(chunk(
            json!({"tool_calls": [{"index": 0, "id": call_id, "type": "function",
                "function": {"name": name, "arguments": ""}}]}),
            Value::Null,
        ));
        for p in sse::pieces(arguments) {
            send(chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": p}}]}),
                Value::Null,
            ));
        }
        finish = "tool_calls";
    }
    let include_usage = body["stream_options"]["include_usage"] == true;
    let mut last = chunk(json!({}), json!(finish));
    if include_usage {
        last["usage"] = Value::Null;
    }
    send(last);
    if include_usage {
        send(
            json!({"id": cid, "object": "chat.completion.chunk", "created": created,
            "model": model, "system_fingerprint": null, "choices": [], "usage": usage}),
        );
    }
    frames.push(sse::raw_frame(None, "[DONE]", false));
    sse::stream(frames)
}

/// The OpenAI error body; 429 carries `retry-after` so clients back off briefly.
fn error(status: u16) -> Response {
    let body = json!({"error": {"message": format!("fake error {status}"),
        "type": openai_error_kind(status), "param": null, "code": null}});
    let headers = if status == 429 {
        vec![("retry-after", "1".to_owned())]
    } else {
        vec![]
    };
    sse::json(sse::status_code(status), &body, &headers)
}

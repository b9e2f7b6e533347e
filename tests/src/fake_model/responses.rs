//! The OpenAI Responses wire format (`POST /v1/responses`), which Codex
//! requires (`wire_api = "responses"`) and Copilot can use.
//!
//! Stream: `response.created` → `response.in_progress` → per output item
//! `response.output_item.added`, its own deltas, `response.output_item.done`
//! → `response.completed` carrying usage. Every event has the `type` both as
//! the SSE `event:` name and in the data, plus a `sequence_number`. A tool turn
//! has a reasoning item (summary deltas), a message, and a `function_call`
//! whose `arguments` arrive as `response.function_call_arguments.delta`.
//! `CUTSTREAM` stops after the message's text deltas.

use axum::response::Response;
use serde_json::{Value, json};

use super::scenario::{self, Api, Scenario, TOOL_PREAMBLE};
use super::sse;

const REASONING: &str = "Running echo hi with the shell tool.";

/// Answers one Responses request, streaming when the body asks for it.
pub(super) fn respond(body: &Value, state: &scenario::State) -> Response {
    let sc = scenario::choose(Api::Responses, body, state);
    let model = body["model"].as_str().unwrap_or("gpt-fake");
    if let Scenario::Error(status) = sc {
        return error(status);
    }
    let resp_id = sse::id("resp_");
    let created = sse::now_secs();
    let base = |status: &str, output: Vec<Value>, usage: Value| {
        json!({"id": resp_id, "object": "response", "created_at": created, "status": status,
            "model": model, "output": output, "usage": usage, "error": null,
            "incomplete_details": null, "parallel_tool_calls": true, "tool_choice": "auto",
            "tools": [], "previous_response_id": null})
    };
    let outputs = match &sc {
        // Arguments are a string on this wire: a CALLTOOL line goes as written.
        Scenario::Tool {
            name,
            args,
            raw_args,
        } => vec![
            Output::Reasoning(REASONING.to_owned()),
            Output::Message(TOOL_PREAMBLE.to_owned()),
            Output::FunctionCall(
                namespaced(body, name),
                raw_args.clone().unwrap_or_else(|| args.to_string()),
            ),
        ],
        Scenario::Text(t) => vec![Output::Message(t.clone())],
        Scenario::CutStream => vec![Output::Message(scenario::CUT_TEXT.to_owned())],
        _ => vec![Output::Message(scenario::PLAIN_TEXT.to_owned())],
    };
    let usage = json!({"input_tokens": 120, "input_tokens_details": {"cached_tokens": 20},
        "output_tokens": 25, "output_tokens_details": {"reasoning_tokens": 8}, "total_tokens": 145});
    let items: Vec<Value> = outputs.iter().map(Output::item).collect();
    if body["stream"] != true {
        if sc == Scenario::CutStream {
            return sse::cut_json(&base("completed", items, usage));
        }
        return sse::json(
            axum::http::StatusCode::OK,
            &base("completed", items, usage),
            &[],
        );
    }
    let mut frames = Vec::new();
    let mut seq = 0u64;
    let mut send = |kind: &str, payload: Value| {
        let mut data = json!({"type": kind, "sequence_number": seq});
        if let (Some(d), Value::Object(p)) = (data.as_object_mut(), payload) {
            d.extend(p);
        }
        seq += 1;
        frames.push(sse::frame(Some(kind), &data, false));
    };
    send(
        "response.created",
        json!({"response": base("in_progress", vec![], Value::Null)}),
    );
    send(
        "response.in_progress",
        json!({"response": base("in_progress", vec![], Value::Null)}),
    );
    if sc == Scenario::MidErr {
        let mut failed = base("failed", vec![], Value::Null);
        failed["error"] = json!({"code": "server_error", "message": "fake mid-stream failure"});
        send("response.failed", json!({"response": failed}));
        return sse::stream(frames);
    }
    for (idx, (output, item)) in outputs.iter().zip(&items).enumerate() {
        let id = &item["id"];
        match output {
            Output::Message(text) => {
                send(
                    "response.output_item.added",
                    json!({"output_index": idx, "item": {"id": id, "type": "message",
                        "status": "in_progress", "role": "assistant", "content": []}}),
                );
                let at = json!({"item_id": id, "output_index": idx, "content_index": 0});
                send(
                    "response.content_part.added",
                    with(
                        &at,
                        json!({"part": {"type": "output_text", "text": "", "annotations": []}}),
                    ),
                );
                for w in sse::words(text) {
                    send(
                        "response.output_text.delta",
                        with(&at, json!({"delta": w, "logprobs": []})),
                    );
                }
                if sc == Scenario::CutStream {
                    // No output_text.done, output_item.done or response.completed.
                    return sse::stream(frames);
                }
                send(
                    "response.output_text.done",
                    with(&at, json!({"text": text, "logprobs": []})),
                );
                send(
                    "response.content_part.done",
                    with(
                        &at,
                        json!({"part": {"type": "output_text", "text": text, "annotations": []}}),
                    ),
                );
            }
            Output::Reasoning(text) => {
                send(
                    "response.output_item.added",
                    json!({"output_index": idx, "item": {"id": id, "type": "reasoning", "summary": []}}),
                );
                let at = json!({"item_id": id, "output_index": idx, "summary_index": 0});
                send(
                    "response.reasoning_summary_part.added",
                    with(&at, json!({"part": {"type": "summary_text", "text": ""}})),
                );
                send(
                    "response.reasoning_summary_text.delta",
                    with(&at, json!({"delta": text})),
                );
                send(
                    "response.reasoning_summary_text.done",
                    with(&at, json!({"text": text})),
                );
                send(
                    "response.reasoning_summary_part.done",
                    with(&at, json!({"part": {"type": "summary_text", "text": text}})),
                );
            }
            Output::FunctionCall(_, arguments) => {
                let mut added = item.clone();
                added["arguments"] = json!("");
                added["status"] = json!("in_progress");
                send(
                    "response.output_item.added",
                    json!({"output_index": idx, "item": added}),
                );
                let at = json!({"item_id": id, "output_index": idx});
                for p in sse::pieces(arguments) {
                    send(
                        "response.function_call_arguments.delta",
                        with(&at, json!({"delta": p})),
                    );
                }
                send(
                    "response.function_call_arguments.done",
                    with(&at, json!({"arguments": arguments})),
                );
            }
        }
        send(
            "response.output_item.done",
            json!({"output_index": idx, "item": item}),
        );
    }
    send(
        "response.completed",
        json!({"response": base("completed", items.clone(), usage)}),
    );
    sse::stream(frames)
}

/// The namespace (when the request offered the tool in one) and the name
/// of the tool the scenario calls as `name`.
fn namespaced(body: &Value, name: &str) -> (Option<String>, String) {
    let tools = body["tools"].as_array().into_iter().flatten();
    for ns in tools.filter(|t| t["type"] == "namespace") {
        let Some(prefix) = ns["name"].as_str() else {
            continue;
        };
        let inner = name
            .strip_prefix(prefix)
            .and_then(|rest| rest.strip_prefix("__"));
        let offered = |tool: &str| {
            let mut tools = ns["tools"].as_array().into_iter().flatten();
            tools.any(|f| f["name"] == tool)
        };
        if let Some(tool) = inner.filter(|tool| offered(tool)) {
            return (Some(prefix.to_owned()), tool.to_owned());
        }
    }
    (None, name.to_owned())
}

/// One output item of the reply, before it is framed as events.
enum Output {
    Reasoning(String),
    Message(String),
    /// Tool (its namespace, if any, and name) and its arguments as a JSON
    /// string (the wire carries a string).
    FunctionCall((Option<String>, String), String),
}

impl Output {
    /// The completed item, as in `output_item.done` and `response.completed`.
    fn item(&self) -> Value {
        match self {
            Output::Message(text) => json!({"id": sse::id("msg_"), "type": "message",
                "status": "completed", "role": "assistant", "content": [{"type": "output_text",
                "text": text, "annotations": [], "logprobs": []}]}),
            Output::Reasoning(text) => json!({"id": sse::id("rs_"), "type": "reasoning",
                "summary": [{"type": "summary_text", "text": text}], "encrypted_content": null}),
            Output::FunctionCall((namespace, name), arguments) => {
                let mut item = json!({"id": sse::id("fc_"), "type": "function_call",
                    "status": "completed", "call_id": sse::id("call_"), "name": name,
                    "arguments": arguments});
                if let Some(namespace) = namespace {
                    item["namespace"] = json!(namespace);
                }
                item
            }
        }
    }
}

/// Merges the common locator fields (`item_id`, indexes) into an event payload.
fn with(at: &Value, extra: Value) -> Value {
    let mut v = at.clone();
    if let (Some(o), Value::Object(e)) = (v.as_object_mut(), extra) {
        o.extend(e);
    }
    v
}

/// The OpenAI error body; 429 carries `retry-after` so clients back off briefly.
fn error(status: u16) -> Response {
    let kind = openai_error_kind(status);
    let body = json!({"error": {"message": format!("fake error {status}"), "type": kind,
        "param": null, "code": kind}});
    let mut headers = vec![("x-request-id", sse::id("req_"))];
    if status == 429 {
        headers.push(("retry-after", "1".to_owned()));
    }
    sse::json(sse::status_code(status), &body, &headers)
}

/// The OpenAI error `type` for a status, shared with Chat Completions.
pub(super) fn openai_error_kind(status: u16) -> &'static str {
    match status {
        429 => "rate_limit_exceeded",
        400 => "invalid_request_error",
        _ => "server_error",
    }
}

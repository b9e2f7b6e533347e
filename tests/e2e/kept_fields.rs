//! Nothing an agent emitted vanishes from the record (seed 000): a field
//! an adapter does not map, on a line type it knows, reaches the event the
//! line becomes and the transcript, unchanged, under `extra` and its JSON
//! Pointer in the line. Each test takes a real capture of one provider (or
//! its wire format), adds fields as another CLI or API version would send
//! them, runs it through `awr run`, and reads both records.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::util::{Awr, repo_root, run_id_of};

/// The lines of a recorded capture of the real CLI, `testdata/<cli>/<scenario>`.
fn capture(scenario: &str) -> Vec<Value> {
    let path = repo_root()
        .join("crates/adapters-agents/testdata")
        .join(scenario)
        .join("stdout.jsonl");
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The first line of `lines` that `pick` chooses, to edit.
fn line(lines: &mut [Value], pick: impl Fn(&Value) -> bool) -> &mut Value {
    lines.iter_mut().find(|l| pick(l)).expect("no such line")
}

/// Runs one agent of `provider` whose CLI prints `lines`; the run's event
/// log and transcript, as JSON lines.
fn run_cli(awr: &Awr, provider: &str, lines: &[Value]) -> (Vec<Value>, Vec<Value>) {
    let stdout: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let stdout = awr.write("stdout.jsonl", &stdout);
    let exe = awr.executable(
        "fake-cli",
        &format!("#!/bin/sh\ncat '{}'\n", stdout.display()),
    );
    let flow = awr.write(
        "flow.yaml",
        &format!(
            "name: kept\nagents:\n  coder:\n    provider: {provider}\n    executable: '{}'\nsteps: [{{agent: coder}}]\n",
            exe.display()
        ),
    );
    let out = awr.run(&["run", &flow.display().to_string()]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    records(awr, &run_id_of(&out))
}

fn records(awr: &Awr, run: &str) -> (Vec<Value>, Vec<Value>) {
    let read = |path: &Path| -> Vec<Value> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let transcript = awr
        .storage()
        .join("transcripts")
        .join(format!("{run}.jsonl"));
    (awr.events(run), read(&transcript))
}

/// The first event of type `kind` that `pick` chooses.
fn event<'a>(events: &'a [Value], kind: &str, pick: impl Fn(&Value) -> bool) -> &'a Value {
    events
        .iter()
        .find(|e| e["type"] == kind && pick(e))
        .unwrap_or_else(|| panic!("no {kind} event: {events:#?}"))
}

/// The blocks of the run's (one) assistant message.
fn blocks(transcript: &[Value]) -> Vec<Value> {
    let reply = transcript
        .iter()
        .find(|l| l["type"] == "message.assistant")
        .expect("an assistant message");
    reply["payload"]["blocks"].as_array().unwrap().clone()
}

/// The first block of `kind` that `pick` chooses.
fn block(transcript: &[Value], kind: &str, pick: impl Fn(&Value) -> bool) -> Value {
    blocks(transcript)
        .into_iter()
        .find(|b| b["type"] == kind && pick(b))
        .unwrap_or_else(|| panic!("no {kind} block: {transcript:#?}"))
}

/// The payload of the first transcript line of `kind` for tool call `id`.
fn tool_line(transcript: &[Value], kind: &str, id: &str) -> Value {
    transcript
        .iter()
        .find(|l| l["type"] == kind && l["payload"]["call_id"] == id)
        .unwrap_or_else(|| panic!("no {kind} of {id}"))["payload"]
        .clone()
}

/// Claude Code: a `tool_use` block and its line carrying fields this
/// version does not map (a newer API's `caller`, a newer CLI's
/// `request_id`), and the fields the real capture already carries unmapped
/// (`uuid`, the `user` line's `tool_use_result`).
#[test]
fn claude_codes_unmapped_fields_reach_the_event_and_the_transcript() {
    let awr = Awr::new();
    let mut lines = capture("claude/tool");
    let is_use = |l: &Value| l.pointer("/message/content/0/type") == Some(&json!("tool_use"));
    let call = line(&mut lines, is_use);
    call["message"]["content"][0]["caller"] = json!({"type": "direct"});
    call["request_id"] = json!("req_011CQ");
    let (uuid, id) = (
        call["uuid"].clone(),
        call["message"]["content"][0]["id"].clone(),
    );
    let answered = line(&mut lines, |l| l["type"] == "user")["tool_use_result"].clone();
    let (events, transcript) = run_cli(&awr, "claude-code", &lines);

    let id = id.as_str().unwrap();
    let used = event(&events, "agent:tool:use", |e| e["toolUseId"] == id);
    let extra = &used["extra"];
    assert_eq!(
        extra["/message/content/0/caller"],
        json!({"type": "direct"}),
        "{used}"
    );
    assert_eq!(extra["/request_id"], "req_011CQ");
    assert_eq!(extra["/uuid"], uuid);
    assert_eq!(extra["/message/model"], "claude-sonnet-4-5");
    assert_eq!(
        block(&transcript, "tool_use", |b| b["tool_id"] == id)["extra"],
        *extra
    );
    assert_eq!(tool_line(&transcript, "tool.call", id)["extra"], *extra);

    let done = event(&events, "agent:tool", |e| e["toolUseId"] == id);
    assert_eq!(done["extra"]["/tool_use_result"], answered, "{done}");
    let result = block(&transcript, "tool_result", |b| b["tool_id"] == id);
    assert_eq!(result["extra"], done["extra"]);
    assert_eq!(
        tool_line(&transcript, "tool.result", id)["extra"],
        done["extra"]
    );
}

/// Codex: a `command_execution` item and an `agent_message` item carrying
/// fields a newer Codex adds.
#[test]
fn codex_unmapped_fields_reach_the_event_and_the_transcript() {
    let awr = Awr::new();
    let mut lines = capture("codex/tool");
    let completed = |kind: &'static str| {
        move |l: &Value| l["type"] == "item.completed" && l["item"]["type"] == kind
    };
    line(&mut lines, completed("command_execution"))["item"]["duration_ms"] = json!(42);
    let message = line(&mut lines, completed("agent_message"));
    message["item"]["phase"] = json!("commentary");
    let text = message["item"]["text"].clone();
    let (events, transcript) = run_cli(&awr, "codex", &lines);

    let done = event(&events, "agent:tool", |_| true);
    assert_eq!(done["extra"], json!({"/item/duration_ms": 42}), "{done}");
    let id = done["toolUseId"].as_str().unwrap();
    assert_eq!(
        block(&transcript, "tool_result", |b| b["tool_id"] == id)["extra"],
        done["extra"]
    );
    assert_eq!(
        tool_line(&transcript, "tool.result", id)["extra"],
        done["extra"]
    );

    let said = event(&events, "agent:text", |e| e["content"] == text);
    assert_eq!(
        said["extra"],
        json!({"/item/phase": "commentary"}),
        "{said}"
    );
    assert_eq!(
        block(&transcript, "text", |b| b["text"] == text)["extra"],
        said["extra"]
    );
}

/// Gemini CLI: a `tool_use` and a `tool_result` line carrying a field a
/// newer CLI adds, and the `timestamp` every real line carries unmapped.
#[test]
fn gemini_unmapped_fields_reach_the_event_and_the_transcript() {
    let awr = Awr::new();
    let mut lines = capture("gemini/tool");
    let call = line(&mut lines, |l| l["type"] == "tool_use");
    call["thought_signature"] = json!("c2ln");
    let (id, at) = (call["tool_id"].clone(), call["timestamp"].clone());
    line(&mut lines, |l| l["type"] == "tool_result")["duration_ms"] = json!(187);
    let (events, transcript) = run_cli(&awr, "gemini", &lines);

    let id = id.as_str().unwrap();
    let used = event(&events, "agent:tool:use", |e| e["toolUseId"] == id);
    assert_eq!(
        used["extra"],
        json!({"/thought_signature": "c2ln", "/timestamp": at}),
        "{used}"
    );
    assert_eq!(
        block(&transcript, "tool_use", |b| b["tool_id"] == id)["extra"],
        used["extra"]
    );
    assert_eq!(
        tool_line(&transcript, "tool.call", id)["extra"],
        used["extra"]
    );
    let done = event(&events, "agent:tool", |e| e["toolUseId"] == id);
    assert_eq!(done["extra"]["/duration_ms"], 187, "{done}");
    assert_eq!(
        block(&transcript, "tool_result", |b| b["tool_id"] == id)["extra"],
        done["extra"]
    );
}

/// Copilot CLI: a tool request of `assistant.message` (the real capture's
/// own `intentionSummary`, a newer CLI's `permission`) and a
/// `tool.execution_complete` carrying a newer field.
#[test]
fn copilot_unmapped_fields_reach_the_event_and_the_transcript() {
    let awr = Awr::new();
    let mut lines = capture("copilot/tool");
    let asks = |l: &Value| {
        l["type"] == "assistant.message"
            && l["data"]["toolRequests"]
                .as_array()
                .is_some_and(|r| !r.is_empty())
    };
    let message = line(&mut lines, asks);
    message["data"]["toolRequests"][0]["permission"] = json!({"decision": "approved"});
    let id = message["data"]["toolRequests"][0]["toolCallId"].clone();
    let summary = message["data"]["toolRequests"][0]["intentionSummary"].clone();
    line(&mut lines, |l| l["type"] == "tool.execution_complete")["data"]["sandboxed"] = json!(true);
    let (events, transcript) = run_cli(&awr, "copilot", &lines);

    let id = id.as_str().unwrap();
    let used = event(&events, "agent:tool:use", |e| e["toolUseId"] == id);
    let extra = &used["extra"];
    assert_eq!(
        extra["/data/toolRequests/0/permission"],
        json!({"decision": "approved"}),
        "{used}"
    );
    assert_eq!(extra["/data/toolRequests/0/intentionSummary"], summary);
    assert_eq!(
        block(&transcript, "tool_use", |b| b["tool_id"] == id)["extra"],
        *extra
    );
    assert_eq!(tool_line(&transcript, "tool.call", id)["extra"], *extra);
    let done = event(&events, "agent:tool", |e| e["toolUseId"] == id);
    assert_eq!(done["extra"]["/data/sandboxed"], true, "{done}");
    assert_eq!(
        tool_line(&transcript, "tool.result", id)["extra"],
        done["extra"]
    );
}

/// A model server on 127.0.0.1 that answers each request with the next of
/// `turns` (SSE bodies).
async fn model_server(turns: Vec<String>) -> (String, tokio::task::JoinHandle<()>) {
    let turns = Arc::new(Mutex::new(VecDeque::from(turns)));
    let app = axum::Router::new().fallback(move || {
        let turns = Arc::clone(&turns);
        async move {
            let body = turns.lock().unwrap().pop_front().unwrap_or_default();
            ([("content-type", "text/event-stream")], body)
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (format!("http://{addr}"), task)
}

/// Runs one HTTP agent of `provider` at `base_url` granted `read_file`.
fn run_http(awr: &Awr, provider: &str, base_url: &str) -> (Vec<Value>, Vec<Value>) {
    awr.write("notes.txt", "hello");
    let flow = awr.write(
        "flow.yaml",
        &format!(
            "name: kept\ninput: read notes.txt\nagents:\n  coder:\n    provider: {provider}\n    model: m\n    base_url: {base_url}\n    tools: [read_file]\nsteps: [{{agent: coder}}]\n"
        ),
    );
    let out = tokio::task::block_in_place(|| {
        awr.run_in(awr.dir.path(), &[], &["run", &flow.display().to_string()])
    });
    assert_eq!(out.code, 0, "{}", out.stderr);
    records(awr, &run_id_of(&out))
}

/// SSE `data:` lines of `chunks`, then `[DONE]`.
fn chat_turn(chunks: &[Value]) -> String {
    let mut body: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    body.push_str("data: [DONE]\n\n");
    body
}

/// A Chat Completions chunk as OpenAI streams it (`testdata/openai`).
fn chunk(delta: Value, finish: Value) -> Value {
    json!({"id": "chatcmpl-k", "object": "chat.completion.chunk", "created": 1760000000,
        "model": "m", "system_fingerprint": null,
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]})
}

/// OpenAI: a text chunk with the `obfuscation` field a newer API adds, and
/// a tool call whose fragment carries `type` (which awr does not map).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_unmapped_fields_reach_the_event_and_the_transcript() {
    let awr = Awr::new();
    let mut said = chunk(json!({"content": "Reading."}), Value::Null);
    said["obfuscation"] = json!("Xq3");
    let call = json!({"tool_calls": [{"index": 0, "id": "call_k", "type": "function",
        "function": {"name": "read_file", "arguments": "{\"path\": \"notes.txt\"}"}}]});
    let first = chat_turn(&[
        said,
        chunk(call, Value::Null),
        chunk(json!({}), json!("tool_calls")),
    ]);
    let second = chat_turn(&[chunk(json!({"content": "hello"}), json!("stop"))]);
    let (url, _server) = model_server(vec![first, second]).await;
    let (events, transcript) = run_http(&awr, "openai", &format!("{url}/v1"));

    let delta = event(&events, "agent:text:delta", |e| e["content"] == "Reading.");
    assert_eq!(delta["extra"]["/obfuscation"], "Xq3", "{delta}");
    assert_eq!(delta["extra"]["/object"], "chat.completion.chunk");
    let text = block(&transcript, "text", |b| b["text"] == "Reading.");
    assert_eq!(text["extra"], delta["extra"]);
    let started = event(&events, "tool:started", |e| e["callId"] == "call_k");
    assert_eq!(
        started["extra"]["/choices/0/delta/tool_calls/0/type"], "function",
        "{started}"
    );
    assert_eq!(
        block(&transcript, "tool_use", |b| b["tool_id"] == "call_k")["extra"],
        started["extra"]
    );
    assert_eq!(
        tool_line(&transcript, "tool.call", "call_k")["extra"],
        started["extra"]
    );
}

/// SSE events of a Messages stream.
fn messages_turn(events: &[Value]) -> String {
    events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
        .collect()
}

/// Anthropic: a `tool_use` block whose start carries the `caller` a newer
/// API adds, and a text delta carrying a newer field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_unmapped_fields_reach_the_event_and_the_transcript() {
    let awr = Awr::new();
    let start = json!({"type": "message_start", "message": {"id": "msg_k", "type": "message",
        "role": "assistant", "model": "m", "content": [], "stop_reason": null,
        "usage": {"input_tokens": 10, "output_tokens": 1}}});
    let stop = |reason: &str| {
        [
            json!({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": null},
                "usage": {"output_tokens": 5}}),
            json!({"type": "message_stop"}),
        ]
    };
    let mut first = vec![
        start.clone(),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Reading."}, "trace": "t-1"}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use",
            "id": "toolu_k", "name": "read_file", "input": {}, "caller": {"type": "direct"}}}),
        json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta",
            "partial_json": "{\"path\": \"notes.txt\"}"}}),
        json!({"type": "content_block_stop", "index": 1}),
    ];
    first.extend(stop("tool_use"));
    let mut second = vec![
        start,
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hello"}}),
        json!({"type": "content_block_stop", "index": 0}),
    ];
    second.extend(stop("end_turn"));
    let (url, _server) = model_server(vec![messages_turn(&first), messages_turn(&second)]).await;
    let (events, transcript) = run_http(&awr, "anthropic", &url);

    let delta = event(&events, "agent:text:delta", |e| e["content"] == "Reading.");
    assert_eq!(delta["extra"]["/trace"], "t-1", "{delta}");
    assert_eq!(
        delta["extra"]["/message/role"], "assistant",
        "the message start's, handed on"
    );
    let text = block(&transcript, "text", |b| b["text"] == "Reading.");
    assert_eq!(text["extra"], delta["extra"]);
    let started = event(&events, "tool:started", |e| e["callId"] == "toolu_k");
    assert_eq!(
        started["extra"]["/content_block/caller"],
        json!({"type": "direct"}),
        "{started}"
    );
    assert_eq!(
        block(&transcript, "tool_use", |b| b["tool_id"] == "toolu_k")["extra"],
        started["extra"]
    );
    assert_eq!(
        tool_line(&transcript, "tool.call", "toolu_k")["extra"],
        started["extra"]
    );
}

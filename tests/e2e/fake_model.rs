//! The fake model server speaks each provider's wire format: these tests
//! check its replies at the byte level with a raw HTTP/1.1 client, so the
//! CLI-driving tests can trust it (and so its shapes stay the ones the real
//! CLIs were captured accepting).

use awr_tests::fake_model::FakeModel;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A response read to the end: status, lower-cased header block, decoded body.
struct Reply {
    status: u16,
    headers: String,
    body: String,
}

impl Reply {
    /// The strings at `pointer` (a JSON pointer) of every event, joined:
    /// the text, or the tool arguments, a stream sent in pieces.
    fn joined(&self, pointer: &str) -> String {
        self.events()
            .iter()
            .filter_map(|e| e.pointer(pointer).and_then(Value::as_str))
            .collect()
    }

    /// The JSON `data:` payloads of an SSE body, in order (`[DONE]` skipped).
    fn events(&self) -> Vec<Value> {
        self.body
            .lines()
            .filter_map(|l| l.trim_end_matches('\r').strip_prefix("data: "))
            .filter(|d| *d != "[DONE]")
            .map(|d| serde_json::from_str(d).unwrap())
            .collect()
    }
}

/// Sends one POST with `Connection: close` and reads until the server closes,
/// undoing chunked transfer encoding (streams are sent chunk per event).
async fn post(
    server: &FakeModel,
    path: &str,
    extra_headers: &[(&str, &str)],
    body: &Value,
) -> Reply {
    let addr = server.base_url().trim_start_matches("http://").to_owned();
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    let body = body.to_string();
    let mut req = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in extra_headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(&body);
    stream.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    let raw = String::from_utf8(raw).unwrap();
    let (head, rest) = raw.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let headers = head.to_lowercase();
    let body = if headers.contains("transfer-encoding: chunked") {
        dechunk(rest)
    } else {
        rest.to_owned()
    };
    Reply {
        status,
        headers,
        body,
    }
}

fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    loop {
        let (size, tail) = rest.split_once("\r\n").unwrap();
        let size = usize::from_str_radix(size.split(';').next().unwrap().trim(), 16).unwrap();
        if size == 0 {
            return out;
        }
        out.push_str(&tail[..size]);
        rest = &tail[size + 2..];
    }
}

fn anthropic_body(text: &str) -> Value {
    json!({"model": "claude-test", "stream": true, "max_tokens": 100,
        "messages": [{"role": "user", "content": [{"type": "text", "text": text}]}],
        "tools": [{"name": "Bash", "input_schema": {"type": "object",
            "properties": {"command": {"type": "string"}, "description": {"type": "string"}},
            "required": ["command"]}}]})
}

fn responses_body(text: &str) -> Value {
    json!({"model": "gpt-test", "stream": true,
        "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}],
        "tools": [{"type": "function", "name": "exec_command", "parameters": {"type": "object",
            "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}]})
}

fn chat_body(text: &str) -> Value {
    json!({"model": "gpt-test", "stream": true, "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": text}],
        "tools": [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object",
            "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]})
}

fn gemini_body(text: &str) -> Value {
    json!({"contents": [{"role": "user", "parts": [{"text": text}]}],
        "tools": [{"functionDeclarations": [{"name": "run_shell_command", "parametersJsonSchema": {
            "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}]}]})
}

const ANTHROPIC: &str = "/v1/messages?beta=true";
const RESPONSES: &str = "/v1/responses";
const CHAT: &str = "/v1/chat/completions";
const GEMINI: &str = "/v1beta/models/gemini-test:streamGenerateContent?alt=sse";

#[tokio::test]
async fn anthropic_plain_text_streams_blocks_and_usage() {
    let server = FakeModel::start().await.unwrap();
    let r = post(&server, ANTHROPIC, &[], &anthropic_body("say hello")).await;
    assert_eq!(r.status, 200);
    assert!(r.headers.contains("content-type: text/event-stream"));
    let kinds: Vec<_> = r
        .events()
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(kinds.first().unwrap(), "message_start");
    assert!(kinds.contains(&"ping".to_owned()));
    assert_eq!(kinds[kinds.len() - 2..], ["message_delta", "message_stop"]);
    assert!(r.body.contains("event: content_block_delta\n"));
    let text = r.joined("/delta/text");
    assert_eq!(text, "Hello from the fake server.");
    let delta = r
        .events()
        .into_iter()
        .find(|e| e["type"] == "message_delta")
        .unwrap();
    assert_eq!(delta["delta"]["stop_reason"], "end_turn");
    assert_eq!(delta["usage"]["output_tokens"], 25);
}

#[tokio::test]
async fn anthropic_tooltest_calls_bash_with_echo_hi_then_reports() {
    let server = FakeModel::start().await.unwrap();
    let r = post(&server, ANTHROPIC, &[], &anthropic_body("TOOLTEST please")).await;
    let events = r.events();
    let start = events
        .iter()
        .find(|e| e["content_block"]["type"] == "tool_use")
        .unwrap();
    assert_eq!(start["content_block"]["name"], "Bash");
    let input: String = events
        .iter()
        .filter_map(|e| e["delta"]["partial_json"].as_str().map(str::to_owned))
        .collect();
    let input: Value = serde_json::from_str(&input).unwrap();
    assert_eq!(input["command"], "echo hi");
    let delta = events
        .iter()
        .find(|e| e["type"] == "message_delta")
        .unwrap();
    assert_eq!(delta["delta"]["stop_reason"], "tool_use");

    let mut second = anthropic_body("TOOLTEST please");
    second["messages"].as_array_mut().unwrap().extend([
        json!({"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": input}]}),
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "hi\n"}]}),
    ]);
    let r = post(&server, ANTHROPIC, &[], &second).await;
    let text = r.joined("/delta/text");
    assert_eq!(text, "Tool said: hi");
}

#[tokio::test]
async fn anthropic_errors_and_miderr() {
    let server = FakeModel::start().await.unwrap();
    let r = post(&server, ANTHROPIC, &[], &anthropic_body("ERRTEST")).await;
    assert_eq!(r.status, 500);
    assert!(r.body.contains(r#""type":"api_error""#));
    let r = post(&server, ANTHROPIC, &[], &anthropic_body("RATETEST")).await;
    assert_eq!(r.status, 429);
    assert!(r.headers.contains("retry-after: 1"));
    let r = post(&server, ANTHROPIC, &[], &anthropic_body("BADREQ")).await;
    assert_eq!(r.status, 400);
    let r = post(&server, ANTHROPIC, &[], &anthropic_body("MIDERR")).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.events().last().unwrap()["error"]["type"],
        "overloaded_error"
    );
}

#[tokio::test]
async fn requests_are_recorded_with_headers_and_body() {
    let server = FakeModel::start().await.unwrap();
    let body = anthropic_body("hi");
    post(
        &server,
        ANTHROPIC,
        &[
            ("x-api-key", "sk-test"),
            ("anthropic-version", "2023-06-01"),
        ],
        &body,
    )
    .await;
    let reqs = server.requests();
    assert_eq!(reqs.len(), 1);
    let req = &reqs[0];
    assert_eq!(
        (req.method.as_str(), req.path.as_str(), req.query.as_str()),
        ("POST", "/v1/messages", "beta=true")
    );
    assert_eq!(req.header("X-Api-Key"), Some("sk-test"));
    assert_eq!(req.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(req.body, body);
}

#[tokio::test]
async fn responses_plain_text_and_usage() {
    let server = FakeModel::start().await.unwrap();
    let r = post(&server, RESPONSES, &[], &responses_body("hello")).await;
    assert_eq!(r.status, 200);
    let events = r.events();
    assert_eq!(events[0]["type"], "response.created");
    assert!(r.body.contains("event: response.output_item.added\n"));
    let text: String = events
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .map(|e| e["delta"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(text, "Hello from the fake server.");
    let done = events.last().unwrap();
    assert_eq!(done["type"], "response.completed");
    assert_eq!(done["response"]["usage"]["input_tokens"], 120);
    assert_eq!(done["response"]["usage"]["output_tokens"], 25);
    let seqs: Vec<u64> = events
        .iter()
        .map(|e| e["sequence_number"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, (0..events.len() as u64).collect::<Vec<_>>());
}

#[tokio::test]
async fn responses_tooltest_calls_exec_command() {
    let server = FakeModel::start().await.unwrap();
    let r = post(&server, RESPONSES, &[], &responses_body("TOOLTEST")).await;
    let events = r.events();
    let args: String = events
        .iter()
        .filter(|e| e["type"] == "response.function_call_arguments.delta")
        .map(|e| e["delta"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&args).unwrap(),
        json!({"cmd": "echo hi"})
    );
    let item = events
        .iter()
        .find(|e| e["type"] == "response.output_item.done" && e["item"]["type"] == "function_call")
        .unwrap();
    assert_eq!(item["item"]["name"], "exec_command");
    assert_eq!(item["item"]["arguments"], args);
    assert!(
        item["item"]["call_id"]
            .as_str()
            .unwrap()
            .starts_with("call_")
    );
    assert_eq!(events.last().unwrap()["type"], "response.completed");
}

#[tokio::test]
async fn responses_errors() {
    let server = FakeModel::start().await.unwrap();
    assert_eq!(
        post(&server, RESPONSES, &[], &responses_body("ERRTEST"))
            .await
            .status,
        500
    );
    let r = post(&server, RESPONSES, &[], &responses_body("RATETEST")).await;
    assert_eq!(r.status, 429);
    assert!(r.headers.contains("retry-after:"));
    let r = post(&server, RESPONSES, &[], &responses_body("MIDERR")).await;
    assert_eq!(r.events().last().unwrap()["type"], "response.failed");
}

#[tokio::test]
async fn chat_plain_text_usage_and_done() {
    let server = FakeModel::start().await.unwrap();
    let r = post(
        &server,
        CHAT,
        &[("authorization", "Bearer k")],
        &chat_body("hello"),
    )
    .await;
    assert_eq!(r.status, 200);
    assert!(r.body.trim_end().ends_with("data: [DONE]"));
    let events = r.events();
    let text: String = events
        .iter()
        .filter_map(|e| {
            e["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(text, "Hello from the fake server.");
    let last = events.last().unwrap();
    assert_eq!(last["choices"], json!([]));
    assert_eq!(last["usage"]["total_tokens"], 145);
    assert_eq!(
        events[events.len() - 2]["choices"][0]["finish_reason"],
        "stop"
    );
    assert!(events.iter().all(|e| e["id"] == events[0]["id"]));
    assert_eq!(
        server.requests()[0].header("authorization"),
        Some("Bearer k")
    );
}

#[tokio::test]
async fn chat_tooltest_streams_tool_call_fragments() {
    let server = FakeModel::start().await.unwrap();
    let r = post(&server, CHAT, &[], &chat_body("TOOLTEST")).await;
    let events = r.events();
    let calls: Vec<&Value> = events
        .iter()
        .filter_map(|e| e["choices"][0]["delta"].get("tool_calls"))
        .collect();
    assert_eq!(calls[0][0]["function"]["name"], "bash");
    assert!(calls[0][0]["id"].is_string());
    let args: String = calls
        .iter()
        .map(|c| c[0]["function"]["arguments"].as_str().unwrap())
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&args).unwrap()["command"],
        "echo hi"
    );
    assert!(
        events
            .iter()
            .any(|e| e["choices"][0]["finish_reason"] == "tool_calls")
    );
    let r = post(&server, CHAT, &[], &chat_body("ERRTEST")).await;
    assert_eq!(r.status, 500);
}

#[tokio::test]
async fn gemini_text_tool_and_errors() {
    let server = FakeModel::start().await.unwrap();
    let r = post(&server, GEMINI, &[], &gemini_body("hello")).await;
    assert_eq!(r.status, 200);
    assert!(r.body.contains("\r\n\r\n"));
    let events = r.events();
    let text: String = events
        .iter()
        .filter_map(|e| {
            e["candidates"][0]["content"]["parts"][0]["text"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(text, "Hello from the fake server.");
    let last = events.last().unwrap();
    assert_eq!(last["candidates"][0]["finishReason"], "STOP");
    assert_eq!(last["usageMetadata"]["candidatesTokenCount"], 25);

    let r = post(&server, GEMINI, &[], &gemini_body("TOOLTEST")).await;
    let call = r
        .events()
        .into_iter()
        .find_map(|e| {
            e["candidates"][0]["content"]["parts"][0]
                .get("functionCall")
                .cloned()
        })
        .unwrap();
    assert_eq!(
        call,
        json!({"name": "run_shell_command", "args": {"command": "echo hi"}})
    );

    assert_eq!(
        post(&server, GEMINI, &[], &gemini_body("ERRTEST"))
            .await
            .status,
        500
    );
    let r = post(&server, GEMINI, &[], &gemini_body("RATETEST")).await;
    assert_eq!(r.status, 429);
    assert!(r.headers.contains("retry-after:"));
}

#[tokio::test]
async fn unknown_paths_get_404_and_drop_stops_the_server() {
    let server = FakeModel::start().await.unwrap();
    let r = post(&server, "/api/event_logging/batch", &[], &json!({})).await;
    assert_eq!(r.status, 404);
    let addr = server.base_url().trim_start_matches("http://").to_owned();
    drop(server);
    // The listener closes once the runtime drops the aborted server task:
    // wait for that, not for a fixed time.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while TcpStream::connect(&addr).await.is_ok() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the server at {addr} still accepts connections 10 s after it was dropped"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn rateonce_answers_429_once_per_server_then_normally() {
    let server = FakeModel::start().await.unwrap();
    let r = post(&server, CHAT, &[], &chat_body("RATEONCE")).await;
    assert_eq!(r.status, 429);
    assert!(r.headers.contains("retry-after: 1\r\n"));
    let r = post(&server, CHAT, &[], &chat_body("RATEONCE")).await;
    assert_eq!(r.status, 200);
    assert!(r.body.trim_end().ends_with("data: [DONE]"));
    // Later requests follow the other keywords, in any format.
    let r = post(
        &server,
        ANTHROPIC,
        &[],
        &anthropic_body("RATEONCE TOOLTEST"),
    )
    .await;
    assert_eq!(r.status, 200);
    assert!(
        r.events()
            .iter()
            .any(|e| e["content_block"]["type"] == "tool_use")
    );

    let other = FakeModel::start().await.unwrap();
    let r = post(&other, ANTHROPIC, &[], &anthropic_body("RATEONCE")).await;
    assert_eq!(r.status, 429);
    assert!(r.headers.contains("retry-after: 1\r\n"));
    assert!(r.body.contains("rate_limit_error"));
    let r = post(&other, ANTHROPIC, &[], &anthropic_body("RATEONCE")).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.events().last().unwrap()["type"], "message_stop");
}

#[tokio::test]
async fn cutstream_ends_every_format_without_its_terminal_event() {
    let server = FakeModel::start().await.unwrap();

    let r = post(&server, CHAT, &[], &chat_body("CUTSTREAM")).await;
    assert_eq!(r.status, 200);
    assert!(!r.body.contains("[DONE]"));
    let events = r.events();
    let text: String = events
        .iter()
        .filter_map(|e| {
            e["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(text, "This reply is cut off");
    assert!(
        events
            .iter()
            .all(|e| e["choices"][0]["finish_reason"].is_null() && e.get("usage").is_none())
    );

    let r = post(&server, ANTHROPIC, &[], &anthropic_body("CUTSTREAM")).await;
    assert_eq!(r.status, 200);
    let kinds: Vec<_> = r
        .events()
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(kinds[0], "message_start");
    assert_eq!(kinds.last().unwrap(), "content_block_delta");
    assert!(
        !kinds
            .iter()
            .any(|k| k == "message_stop" || k == "message_delta")
    );

    let r = post(&server, RESPONSES, &[], &responses_body("CUTSTREAM")).await;
    assert_eq!(r.status, 200);
    let events = r.events();
    assert_eq!(events.last().unwrap()["type"], "response.output_text.delta");
    assert!(!events.iter().any(|e| e["type"] == "response.completed"));

    let r = post(&server, GEMINI, &[], &gemini_body("CUTSTREAM")).await;
    assert_eq!(r.status, 200);
    let events = r.events();
    assert!(!events.is_empty());
    assert!(
        events
            .iter()
            .all(|e| e["candidates"][0].get("finishReason").is_none())
    );

    let mut whole = chat_body("CUTSTREAM");
    whole["stream"] = json!(false);
    let r = post(&server, CHAT, &[], &whole).await;
    assert_eq!(r.status, 200);
    assert!(serde_json::from_str::<Value>(&r.body).is_err());
}

#[tokio::test]
async fn calltool_calls_any_offered_tool_with_the_given_arguments() {
    let server = FakeModel::start().await.unwrap();
    let line = r#"CALLTOOL bash {"command": 42, "extra": true}"#;

    // Chat Completions: the arguments string is the text as written.
    let r = post(&server, CHAT, &[], &chat_body(line)).await;
    let args = r.joined("/choices/0/delta/tool_calls/0/function/arguments");
    assert_eq!(args, r#"{"command": 42, "extra": true}"#);
    let r = post(&server, CHAT, &[], &chat_body("CALLTOOL bash {oops")).await;
    let args = r.joined("/choices/0/delta/tool_calls/0/function/arguments");
    assert_eq!(args, "{oops");

    // Responses carries a string too.
    let r = post(
        &server,
        RESPONSES,
        &[],
        &responses_body(r#"CALLTOOL exec_command {"cmd": ["x"]}"#),
    )
    .await;
    let item = r
        .events()
        .into_iter()
        .find(|e| e["type"] == "response.output_item.done" && e["item"]["type"] == "function_call")
        .unwrap();
    assert_eq!(item["item"]["name"], "exec_command");
    assert_eq!(item["item"]["arguments"], r#"{"cmd": ["x"]}"#);

    // Anthropic gets the parsed value; once the result is back, the answer quotes it.
    let line = r#"CALLTOOL Bash {"command": 42, "extra": true}"#;
    let r = post(&server, ANTHROPIC, &[], &anthropic_body(line)).await;
    let input = r.joined("/delta/partial_json");
    assert_eq!(
        serde_json::from_str::<Value>(&input).unwrap(),
        json!({"command": 42, "extra": true})
    );
    let mut second = anthropic_body(line);
    second["messages"].as_array_mut().unwrap().extend([
        json!({"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}]}),
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
            "content": "invalid input for `Bash`", "is_error": true}]}),
    ]);
    let r = post(&server, ANTHROPIC, &[], &second).await;
    let text = r.joined("/delta/text");
    assert_eq!(text, "Tool said: invalid input for `Bash`");

    // Gemini gets the parsed value as `args`.
    let r = post(
        &server,
        GEMINI,
        &[],
        &gemini_body(r#"CALLTOOL run_shell_command {"command": "ls"}"#),
    )
    .await;
    let call = r
        .events()
        .into_iter()
        .find_map(|e| {
            e["candidates"][0]["content"]["parts"][0]
                .get("functionCall")
                .cloned()
        })
        .unwrap();
    assert_eq!(
        call,
        json!({"name": "run_shell_command", "args": {"command": "ls"}})
    );
}

/// Sends one POST and reads only the status line and headers.
async fn post_head(server: &FakeModel, path: &str, body: &Value) -> (TcpStream, String) {
    let addr = server.base_url().trim_start_matches("http://").to_owned();
    let mut stream = TcpStream::connect(&addr).await.unwrap();
    let body = body.to_string();
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(req.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        stream.read_exact(&mut byte).await.unwrap();
        head.push(byte[0]);
    }
    (stream, String::from_utf8(head).unwrap())
}

#[tokio::test]
async fn hold_after_answers_the_first_calls_then_holds_the_rest_open_until_released() {
    let server = FakeModel::start().await.unwrap();
    server.hold_after(1);
    let r = post(&server, ANTHROPIC, &[], &anthropic_body("hello")).await;
    assert_eq!(r.events().last().unwrap()["type"], "message_stop");
    // Probes are not model calls: answered while calls are held.
    let r = post(&server, "/v1/messages/count_tokens", &[], &json!({})).await;
    assert_eq!(r.status, 200);

    let (mut held, head) = post_head(&server, CHAT, &chat_body("hello")).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.to_lowercase().contains("text/event-stream"), "{head}");
    // Nothing more comes; a reply would arrive at once.
    let mut byte = [0u8; 1];
    let more =
        tokio::time::timeout(std::time::Duration::from_millis(300), held.read(&mut byte)).await;
    assert!(more.is_err(), "the held call got more: {more:?}");

    server.release();
    let r = post(&server, CHAT, &[], &chat_body("hello")).await;
    assert!(r.body.trim_end().ends_with("data: [DONE]"));
    assert_eq!(server.requests().len(), 4);
}

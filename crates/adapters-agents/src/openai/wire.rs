//! The Chat Completions wire format: the request body we send and the
//! streamed chunks we read back.
//!
//! The body is built as JSON directly: it is written once, here, and a
//! [`serde_json::Value`] makes "omit when unset" plain to read. The chunk
//! types declare only the fields the decoder reads, all optional, so the
//! extra fields compatible servers add (`system_fingerprint`, `timings`,
//! `logprobs`, ...) and the ones they leave out both decode; the extra ones
//! are kept in the events' `extra` ([`CHUNK`]).

use application::ports::{ChatBlock, ChatError, ChatMessage, ChatRequest, ToolCall, ToolResult};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::normalize::extra::{ALL, Known};
use crate::normalize::usage::{CHAT_COMPLETIONS_USAGE, ChatCompletionsUsage};

/// The streaming request body for one turn.
///
/// Thinking blocks are not sent back: Chat Completions has no field for
/// them, and the servers that stream `reasoning_content` document that it
/// must not be returned.
pub(crate) fn request_body(request: &ChatRequest) -> Result<Value, ChatError> {
    let agent = &request.agent;
    let model = agent
        .model
        .as_deref()
        .filter(|m| !m.trim().is_empty())
        .ok_or_else(|| {
            ChatError::Config(
                "`model` is not set: the openai provider needs the model's name \
                 (e.g. `gpt-4o-mini`, or the name a local server serves)"
                    .to_owned(),
            )
        })?;
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    if !request.system.is_empty() {
        messages.push(json!({"role": "system", "content": request.system}));
    }
    for message in &request.messages {
        match message {
            ChatMessage::User(text) => messages.push(json!({"role": "user", "content": text})),
            ChatMessage::Assistant(blocks) => messages.push(assistant(blocks)),
            ChatMessage::ToolResults(results) => messages.extend(results.iter().map(tool_result)),
        }
    }
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    body.insert("stream".into(), json!(true));
    // Without it the stream carries no token counts at all.
    body.insert("stream_options".into(), json!({"include_usage": true}));
    body.insert("messages".into(), Value::Array(messages));
    if !request.tools.is_empty() {
        let tools = request.tools.iter().map(|t| {
            json!({"type": "function", "function": {
                "name": t.name, "description": t.description, "parameters": t.input_schema}})
        });
        body.insert("tools".into(), Value::Array(tools.collect()));
    }
    // Only when set: the server's own defaults suit models we know nothing of.
    if let Some(temperature) = agent.temperature {
        body.insert("temperature".into(), json!(temperature));
    }
    if let Some(max_tokens) = agent.max_tokens {
        body.insert("max_tokens".into(), json!(max_tokens));
    }
    Ok(Value::Object(body))
}

/// A previous model turn: its text and its tool calls.
fn assistant(blocks: &[ChatBlock]) -> Value {
    let mut text = String::new();
    let mut calls = Vec::new();
    for block in blocks {
        match block {
            ChatBlock::Text(t) => text.push_str(t),
            ChatBlock::ToolCall(call) => calls.push(tool_call(call)),
            // Thinking, and any block this API has no form for, is not sent back.
            _ => {}
        }
    }
    let content = match (text.is_empty(), calls.is_empty()) {
        (false, _) => Value::String(text),
        (true, false) => Value::Null,
        // OpenAI refuses an assistant message with neither content nor tool calls.
        (true, true) => Value::String(String::new()),
    };
    let mut message = json!({"role": "assistant", "content": content});
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    message
}

/// A tool call as the model sent it: arguments are a JSON *string*. Input
/// that was not JSON was kept as a string, and goes back as the raw text.
fn tool_call(call: &ToolCall) -> Value {
    let arguments = match &call.input {
        Value::String(raw) => raw.clone(),
        input => input.to_string(),
    };
    json!({"id": call.id, "type": "function",
        "function": {"name": call.name, "arguments": arguments}})
}

/// One `tool` message per result. The format has no error flag: an error's
/// message is the content, which is how the model learns of it.
fn tool_result(result: &ToolResult) -> Value {
    json!({"role": "tool", "tool_call_id": result.call_id, "content": result.content})
}

/// What the decoder maps of a chunk ([`Chunk`]); the rest of each chunk
/// (`object`, `created`, `system_fingerprint`, `logprobs`, a delta's
/// `role`, ...) goes into its event's `extra` ([`crate::normalize::extra`]).
pub(crate) const CHUNK: Known = Known::Fields(&[
    ("id", ALL),
    ("model", ALL),
    (
        "choices",
        Known::Each(&Known::Fields(&[
            ("index", ALL),
            (
                "delta",
                Known::Fields(&[
                    ("content", ALL),
                    ("refusal", ALL),
                    ("reasoning_content", ALL),
                    ("reasoning", ALL),
                    (
                        "tool_calls",
                        Known::Each(&Known::Fields(&[
                            ("index", ALL),
                            ("id", ALL),
                            (
                                "function",
                                Known::Fields(&[("name", ALL), ("arguments", ALL)]),
                            ),
                        ])),
                    ),
                ]),
            ),
            ("finish_reason", ALL),
        ])),
    ),
    ("usage", CHAT_COMPLETIONS_USAGE),
]);

/// One `chat.completion.chunk` (an in-stream error is checked for before).
#[derive(Debug, Deserialize)]
pub(crate) struct Chunk {
    /// `chatcmpl-…`, the same on every chunk of a response.
    pub id: Option<String>,
    /// The model that answered.
    pub model: Option<String>,
    /// One entry per choice; empty on the usage chunk.
    pub choices: Option<Vec<Choice>>,
    /// Token counts; on the last chunk with `include_usage`, `null` before.
    pub usage: Option<ChatCompletionsUsage>,
}

/// One choice of a chunk; we ask for one (no `n`), so only index 0 counts.
#[derive(Debug, Deserialize)]
pub(crate) struct Choice {
    /// Which choice; absent on some servers, meaning 0.
    pub index: Option<u64>,
    /// What this chunk adds.
    pub delta: Option<Delta>,
    /// Set on the choice's last content chunk.
    pub finish_reason: Option<String>,
}

/// What a chunk adds to the turn.
#[derive(Debug, Deserialize)]
pub(crate) struct Delta {
    /// A piece of the answer.
    pub content: Option<String>,
    /// A piece of a refusal (OpenAI): the answer, in another field.
    pub refusal: Option<String>,
    /// A piece of reasoning (llama.cpp, vLLM, DeepSeek).
    pub reasoning_content: Option<String>,
    /// A piece of reasoning (OpenRouter, Ollama). A `Value`: not every
    /// server sends a string here.
    pub reasoning: Option<Value>,
    /// Fragments of tool calls.
    pub tool_calls: Option<Vec<ToolCallDelta>>,
}

/// A fragment of one tool call.
#[derive(Debug, Deserialize)]
pub(crate) struct ToolCallDelta {
    /// Which call it belongs to; the key across fragments.
    pub index: Option<usize>,
    /// The call id, on the first fragment.
    pub id: Option<String>,
    /// Name (first fragment) and argument pieces.
    pub function: Option<FunctionDelta>,
}

/// The function part of a tool call fragment.
#[derive(Debug, Deserialize)]
pub(crate) struct FunctionDelta {
    /// The tool's name, on the first fragment.
    pub name: Option<String>,
    /// A piece of the JSON arguments text.
    pub arguments: Option<String>,
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::normalize::testing::call_of;
    use application::ports::ToolSpec;
    use domain::workflow::{AgentDef, Provider};

    fn agent() -> AgentDef {
        let mut agent = AgentDef::new(Provider::OpenAi);
        agent.model = Some("gpt-test".into());
        agent
    }

    fn request(agent: AgentDef, system: &str, messages: Vec<ChatMessage>) -> ChatRequest {
        ChatRequest {
            agent,
            system: system.into(),
            messages,
            tools: vec![],
        }
    }

    #[test]
    fn a_first_turn_is_system_then_user() {
        let body = request_body(&request(
            agent(),
            "Be brief.",
            vec![ChatMessage::User("hello".into())],
        ))
        .unwrap();
        assert_eq!(
            body,
            json!({"model": "gpt-test", "stream": true,
                "stream_options": {"include_usage": true},
                "messages": [{"role": "system", "content": "Be brief."},
                             {"role": "user", "content": "hello"}]})
        );
    }

    #[test]
    fn an_empty_system_prompt_is_left_out() {
        let body =
            request_body(&request(agent(), "", vec![ChatMessage::User("x".into())])).unwrap();
        assert_eq!(body["messages"], json!([{"role": "user", "content": "x"}]));
    }

    #[test]
    fn tool_calls_and_results_go_back_in_the_openai_shape() {
        let messages = vec![
            ChatMessage::User("run it".into()),
            ChatMessage::Assistant(vec![
                ChatBlock::Thinking {
                    text: "hmm".into(),
                    signature: None,
                },
                ChatBlock::Text("I will ".into()),
                ChatBlock::Text("run two.".into()),
                ChatBlock::ToolCall(call_of("call_a", "shell", json!({"command": "ls"}))),
                ChatBlock::ToolCall(call_of("call_b", "shell", json!("{not json"))),
            ]),
            ChatMessage::ToolResults(vec![
                ToolResult {
                    call_id: "call_a".into(),
                    name: "shell".into(),
                    content: "a.txt".into(),
                    is_error: false,
                },
                ToolResult {
                    call_id: "call_b".into(),
                    name: "shell".into(),
                    content: "invalid arguments".into(),
                    is_error: true,
                },
            ]),
            ChatMessage::Assistant(vec![ChatBlock::ToolCall(call_of(
                "call_c",
                "shell",
                json!({}),
            ))]),
        ];
        let body = request_body(&request(agent(), "", messages)).unwrap();
        assert_eq!(
            body["messages"],
            json!([
                {"role": "user", "content": "run it"},
                {"role": "assistant", "content": "I will run two.", "tool_calls": [
                    {"id": "call_a", "type": "function",
                     "function": {"name": "shell", "arguments": "{\"command\":\"ls\"}"}},
                    {"id": "call_b", "type": "function",
                     "function": {"name": "shell", "arguments": "{not json"}}]},
                {"role": "tool", "tool_call_id": "call_a", "content": "a.txt"},
                {"role": "tool", "tool_call_id": "call_b", "content": "invalid arguments"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_c", "type": "function",
                     "function": {"name": "shell", "arguments": "{}"}}]}
            ])
        );
    }

    #[test]
    fn an_assistant_turn_of_text_only_has_no_tool_calls_field() {
        let messages = vec![
            ChatMessage::User("a".into()),
            ChatMessage::Assistant(vec![ChatBlock::Text("b".into())]),
            ChatMessage::User("c".into()),
        ];
        let body = request_body(&request(agent(), "", messages)).unwrap();
        assert_eq!(
            body["messages"][1],
            json!({"role": "assistant", "content": "b"})
        );
    }

    #[test]
    fn sampling_settings_and_tools_only_when_set() {
        let plain =
            request_body(&request(agent(), "", vec![ChatMessage::User("x".into())])).unwrap();
        let plain = plain.as_object().unwrap();
        assert!(!plain.contains_key("temperature"));
        assert!(!plain.contains_key("max_tokens"));
        assert!(!plain.contains_key("tools"));

        let mut tuned = agent();
        tuned.temperature = Some(0.5);
        tuned.max_tokens = Some(256);
        let mut req = request(tuned, "", vec![ChatMessage::User("x".into())]);
        req.tools = vec![ToolSpec {
            name: "shell".into(),
            description: "Runs a command.".into(),
            input_schema: json!({"type": "object",
                "properties": {"command": {"type": "string"}}, "required": ["command"]}),
        }];
        let body = request_body(&req).unwrap();
        assert_eq!(body["temperature"], json!(0.5));
        assert_eq!(body["max_tokens"], json!(256));
        assert_eq!(
            body["tools"],
            json!([{"type": "function", "function": {"name": "shell",
                "description": "Runs a command.",
                "parameters": {"type": "object",
                    "properties": {"command": {"type": "string"}}, "required": ["command"]}}}])
        );
    }

    #[test]
    fn the_model_is_required() {
        let mut no_model = agent();
        no_model.model = None;
        let e =
            request_body(&request(no_model, "", vec![ChatMessage::User("x".into())])).unwrap_err();
        assert!(
            matches!(&e, ChatError::Config(m) if m.starts_with("`model` is not set")),
            "{e}"
        );
    }
}

//! The `anthropic` chat adapter against the fake model server: real HTTP on
//! 127.0.0.1, the real SSE framing, and the requests it recorded, so what
//! the adapter sends is checked as well as what it reads.

use std::time::Duration;

use adapters_agents::KeySource;
use adapters_agents::anthropic::AnthropicChat;
use application::ports::{
    ChatBlock, ChatError, ChatEvent, ChatMessage, ChatModel, ChatRequest, StopReason, ToolResult,
    ToolSpec, TurnEnd,
};
use awr_tests::fake_model::FakeModel;
use domain::workflow::{AgentDef, Provider};
use futures::StreamExt;
use serde_json::json;

/// The fake's thinking text and signature for a tool turn.
const THINKING: &str = "The user wants me to run echo hi. I'll use the shell tool.";
const SIGNATURE: &str = "ZmFrZS1zaWduYXR1cmU=";

fn agent(server: &FakeModel) -> AgentDef {
    let mut agent = AgentDef::new(Provider::Anthropic);
    agent.model = Some("claude-test".into());
    agent.base_url = Some(server.base_url());
    agent
}

/// No key anywhere: a local server with the default variable needs none.
fn chat() -> AnthropicChat {
    AnthropicChat::with_keys(KeySource::from_fn(|_| None))
}

fn request(agent: AgentDef, messages: Vec<ChatMessage>, tools: Vec<ToolSpec>) -> ChatRequest {
    ChatRequest {
        agent,
        system: "You are a test.".into(),
        messages,
        tools,
    }
}

fn shell_tool() -> ToolSpec {
    ToolSpec {
        name: "shell".into(),
        description: "Runs a shell command.".into(),
        input_schema: json!({"type": "object",
            "properties": {"command": {"type": "string"}}, "required": ["command"]}),
    }
}

/// Runs one turn to the end of its stream.
async fn turn(chat: &AnthropicChat, request: ChatRequest) -> Vec<Result<ChatEvent, ChatError>> {
    let stream = chat.turn(request).await.unwrap();
    stream.collect().await
}

fn ok(events: Vec<Result<ChatEvent, ChatError>>) -> Vec<ChatEvent> {
    events.into_iter().map(Result::unwrap).collect()
}

fn text(events: &[ChatEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            ChatEvent::TextDelta(t) => Some(t.as_str()),
            _ => None,
        })
        .collect()
}

fn end(events: &[ChatEvent]) -> &TurnEnd {
    match events.last() {
        Some(ChatEvent::End(end)) => end,
        other => panic!("the turn did not end: {other:?}"),
    }
}

/// The error a turn fails with before streaming.
async fn turn_error(prompt: &str) -> ChatError {
    let server = FakeModel::start().await.unwrap();
    let request = request(
        agent(&server),
        vec![ChatMessage::User(prompt.into())],
        vec![],
    );
    match chat().turn(request).await {
        Err(error) => error,
        Ok(_) => panic!("{prompt}: the turn started"),
    }
}

#[tokio::test]
async fn a_text_reply_streams_and_ends() {
    let server = FakeModel::start().await.unwrap();
    let events = ok(turn(
        &chat(),
        request(
            agent(&server),
            vec![ChatMessage::User("say hello".into())],
            vec![],
        ),
    )
    .await);
    assert_eq!(text(&events), "Hello from the fake server.");
    let end = end(&events);
    assert_eq!(end.stop, StopReason::EndTurn);
    assert!(end.usage.input_tokens > 0 && end.usage.output_tokens > 0);
    assert_eq!(end.model.as_deref(), Some("claude-test"));
    assert!(end.response_id.as_deref().unwrap().starts_with("msg_"));

    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let sent = &requests[0];
    assert_eq!(
        (sent.method.as_str(), sent.path.as_str()),
        ("POST", "/v1/messages")
    );
    assert_eq!(sent.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(sent.header("content-type"), Some("application/json"));
    assert_eq!(sent.header("x-api-key"), None);
    assert_eq!(
        sent.body,
        json!({"model": "claude-test", "max_tokens": 8192, "stream": true,
            "system": "You are a test.",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "say hello"}]}]})
    );
}

#[tokio::test]
async fn a_tool_turn_then_its_result_round_trip() {
    let server = FakeModel::start().await.unwrap();
    let chat = chat();
    let first = ok(turn(
        &chat,
        request(
            agent(&server),
            vec![ChatMessage::User("TOOLTEST please".into())],
            vec![shell_tool()],
        ),
    )
    .await);
    assert!(first.contains(&ChatEvent::ThinkingDone {
        text: THINKING.into(),
        signature: Some(SIGNATURE.into()),
    }));
    let call = first
        .iter()
        .find_map(|e| match e {
            ChatEvent::ToolCall(call) => Some(call.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(call.name, "shell");
    assert_eq!(call.input, json!({"command": "echo hi"}));
    assert!(call.id.starts_with("toolu_"));
    assert_eq!(end(&first).stop, StopReason::ToolUse);

    // The turn as the tool loop keeps it, then the tool's result.
    let blocks = vec![
        ChatBlock::Thinking {
            text: THINKING.into(),
            signature: Some(SIGNATURE.into()),
        },
        ChatBlock::Text(text(&first)),
        ChatBlock::ToolCall(call.clone()),
    ];
    let second = ok(turn(
        &chat,
        request(
            agent(&server),
            vec![
                ChatMessage::User("TOOLTEST please".into()),
                ChatMessage::Assistant(blocks),
                ChatMessage::ToolResults(vec![ToolResult {
                    call_id: call.id.clone(),
                    name: "shell".into(),
                    content: "hi\n".into(),
                    is_error: false,
                }]),
            ],
            vec![shell_tool()],
        ),
    )
    .await);
    assert!(text(&second).contains("Tool said: hi"), "{second:?}");
    assert_eq!(end(&second).stop, StopReason::EndTurn);

    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let messages = &requests[1].body["messages"];
    assert_eq!(
        messages[1]["content"][0],
        json!({"type": "thinking", "thinking": THINKING, "signature": SIGNATURE})
    );
    assert_eq!(
        messages[1]["content"][2],
        json!({"type": "tool_use", "id": call.id, "name": "shell",
            "input": {"command": "echo hi"}})
    );
    assert_eq!(
        messages[2],
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
            "content": "hi\n", "is_error": false}]})
    );
    assert_eq!(
        requests[1].body["tools"],
        json!([{"name": "shell", "description": "Runs a shell command.",
            "input_schema": shell_tool().input_schema}])
    );
}

#[tokio::test]
async fn http_errors_map_to_their_kinds() {
    match turn_error("RATETEST").await {
        ChatError::RateLimited {
            message,
            retry_after,
        } => {
            assert_eq!(retry_after, Some(Duration::from_secs(1)));
            assert_eq!(message, "fake rate_limit_error error");
        }
        other => panic!("{other:?}"),
    }
    let error = turn_error("ERRTEST").await;
    assert!(
        matches!(
            error,
            ChatError::Api {
                status: Some(500),
                retryable: true,
                ..
            }
        ),
        "{error:?}"
    );
    let error = turn_error("BADREQ").await;
    assert!(
        matches!(
            error,
            ChatError::Api {
                status: Some(400),
                retryable: false,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(!error.is_transient());
}

#[tokio::test]
async fn an_error_inside_the_stream_ends_it() {
    let server = FakeModel::start().await.unwrap();
    let events = turn(
        &chat(),
        request(
            agent(&server),
            vec![ChatMessage::User("MIDERR".into())],
            vec![],
        ),
    )
    .await;
    // What the chunks hold unmapped is kept (`kept_fields` checks it), not
    // asked here.
    let events: Vec<_> = events
        .into_iter()
        .filter(|e| !matches!(e, Ok(ChatEvent::Extra(_))))
        .collect();
    assert_eq!(events[0], Ok(ChatEvent::TextDelta("Partial ".into())));
    assert_eq!(
        events.last(),
        Some(&Err(ChatError::Api {
            status: None,
            message: "Overloaded".into(),
            retryable: true,
        }))
    );
    assert_eq!(events.iter().filter(|e| e.is_err()).count(), 1);
}

#[tokio::test]
async fn the_key_goes_in_its_header_and_nowhere_else() {
    const KEY: &str = "sk-ant-test-not-a-real-key-0123";
    let server = FakeModel::start().await.unwrap();
    let chat = AnthropicChat::with_keys(KeySource::from_fn(|name| {
        (name == "AWR_TEST_ANTHROPIC_KEY").then(|| KEY.to_owned())
    }));
    let mut agent = agent(&server);
    agent.api_key_env = Some("AWR_TEST_ANTHROPIC_KEY".into());
    let events = ok(turn(
        &chat,
        request(
            agent.clone(),
            vec![ChatMessage::User("hello".into())],
            vec![],
        ),
    )
    .await);
    assert_eq!(end(&events).stop, StopReason::EndTurn);
    let sent = &server.requests()[0];
    assert_eq!(sent.header("x-api-key"), Some(KEY));
    assert_eq!(sent.header("anthropic-version"), Some("2023-06-01"));
    assert!(!sent.body.to_string().contains(KEY));
    assert!(!format!("{chat:?}").contains(KEY));

    // Nor in an error.
    let Err(error) = chat
        .turn(request(
            agent,
            vec![ChatMessage::User("ERRTEST".into())],
            vec![],
        ))
        .await
    else {
        panic!("the turn started");
    };
    assert!(!error.to_string().contains(KEY));
    assert!(!format!("{error:?}").contains(KEY));
}

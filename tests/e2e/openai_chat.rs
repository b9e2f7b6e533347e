//! The `openai` chat adapter against the fake model server: real HTTP on
//! 127.0.0.1, the real SSE framing, the fake's Chat Completions replies.

use std::time::Duration;

use adapters_agents::KeySource;
use adapters_agents::openai::OpenAiChat;
use application::ports::{
    ChatBlock, ChatError, ChatEvent, ChatMessage, ChatModel, ChatRequest, StopReason, ToolCall,
    ToolResult, ToolSpec, TurnEnd,
};
use awr_tests::fake_model::FakeModel;
use domain::workflow::{AgentDef, Provider};
use futures::StreamExt;
use serde_json::json;

/// A chat model that finds no key: the fake server needs none, and a real
/// `OPENAI_API_KEY` in the test's environment must not be sent to it.
fn keyless() -> OpenAiChat {
    OpenAiChat::with_keys(KeySource::from_fn(|_| None))
}

fn agent(server: &FakeModel) -> AgentDef {
    let mut agent = AgentDef::new(Provider::OpenAi);
    agent.model = Some("gpt-fake".into());
    agent.base_url = Some(format!("{}/v1", server.base_url()));
    agent
}

fn request(agent: AgentDef, messages: Vec<ChatMessage>) -> ChatRequest {
    ChatRequest {
        agent,
        system: "You are a test.".into(),
        messages,
        tools: vec![],
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

/// Runs one turn to its end: the events, and the error that ended it, if any.
async fn turn(chat: &OpenAiChat, request: ChatRequest) -> (Vec<ChatEvent>, Option<ChatError>) {
    let mut stream = chat.turn(request).await.expect("the turn starts");
    let mut events = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(event) => events.push(event),
            Err(e) => {
                assert!(stream.next().await.is_none(), "nothing after an error");
                return (events, Some(e));
            }
        }
    }
    (events, None)
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

fn end(events: &[ChatEvent]) -> TurnEnd {
    match events.last() {
        Some(ChatEvent::End(end)) => end.clone(),
        other => panic!("the turn does not end with End: {other:?}"),
    }
}

async fn start_error(chat: &OpenAiChat, request: ChatRequest) -> ChatError {
    match chat.turn(request).await {
        Ok(_) => panic!("the turn should fail before streaming"),
        Err(e) => e,
    }
}

#[tokio::test]
async fn a_text_reply_streams_with_usage() {
    let server = FakeModel::start().await.unwrap();
    let chat = keyless();
    let (events, error) = turn(
        &chat,
        request(agent(&server), vec![ChatMessage::User("say hello".into())]),
    )
    .await;
    assert_eq!(error, None);
    assert_eq!(text(&events), "Hello from the fake server.");
    let end = end(&events);
    assert_eq!(end.stop, StopReason::EndTurn);
    assert!(end.usage.input_tokens > 0 && end.usage.output_tokens > 0);
    assert_eq!(end.model.as_deref(), Some("gpt-fake"));
    assert!(end.response_id.unwrap().starts_with("chatcmpl-"));

    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].path, "/v1/chat/completions");
    assert_eq!(requests[0].header("authorization"), None);
    assert_eq!(
        requests[0].body["messages"][0],
        json!({"role": "system", "content": "You are a test."})
    );
}

#[tokio::test]
async fn a_tool_call_then_its_result_makes_the_final_answer() {
    let server = FakeModel::start().await.unwrap();
    let chat = keyless();
    let mut first = request(agent(&server), vec![ChatMessage::User("TOOLTEST".into())]);
    first.tools = vec![shell_tool()];
    let (events, error) = turn(&chat, first.clone()).await;
    assert_eq!(error, None);
    let calls: Vec<&ToolCall> = events
        .iter()
        .filter_map(|e| match e {
            ChatEvent::ToolCall(c) => Some(c),
            _ => None,
        })
        .collect();
    assert_eq!(calls.len(), 1, "{events:?}");
    let call = calls[0].clone();
    assert_eq!(call.name, "shell");
    assert_eq!(call.input, json!({"command": "echo hi"}));
    assert!(!call.id.is_empty());
    assert_eq!(end(&events).stop, StopReason::ToolUse);

    let mut second = first;
    second.messages.push(ChatMessage::Assistant(vec![
        ChatBlock::Text(text(&events)),
        ChatBlock::ToolCall(call.clone()),
    ]));
    second
        .messages
        .push(ChatMessage::ToolResults(vec![ToolResult {
            call_id: call.id.clone(),
            name: "shell".into(),
            content: "hi\n".into(),
            is_error: false,
        }]));
    let (events, error) = turn(&chat, second).await;
    assert_eq!(error, None);
    assert!(text(&events).contains("Tool said: hi"), "{events:?}");
    assert_eq!(end(&events).stop, StopReason::EndTurn);

    // The second request carried the call and its result in OpenAI's shape.
    let sent = &server.requests()[1].body["messages"];
    assert_eq!(sent[2]["tool_calls"][0]["id"], json!(call.id));
    assert_eq!(
        sent[2]["tool_calls"][0]["function"]["arguments"],
        json!(r#"{"command":"echo hi"}"#)
    );
    assert_eq!(
        sent[3],
        json!({"role": "tool", "tool_call_id": call.id, "content": "hi\n"})
    );
}

#[tokio::test]
async fn http_errors_map_to_their_kinds() {
    let server = FakeModel::start().await.unwrap();
    let chat = keyless();
    let ask = |prompt: &str| request(agent(&server), vec![ChatMessage::User(prompt.into())]);

    let e = start_error(&chat, ask("RATETEST")).await;
    assert!(
        matches!(&e, ChatError::RateLimited { retry_after, .. } if *retry_after == Some(Duration::from_secs(1))),
        "{e:?}"
    );

    let e = start_error(&chat, ask("ERRTEST")).await;
    assert!(
        matches!(
            &e,
            ChatError::Api {
                status: Some(500),
                retryable: true,
                ..
            }
        ),
        "{e:?}"
    );

    let e = start_error(&chat, ask("BADREQ")).await;
    assert_eq!(
        e,
        ChatError::Api {
            status: Some(400),
            message: "fake error 400".into(),
            retryable: false,
        }
    );
}

#[tokio::test]
async fn an_error_inside_the_stream_follows_the_text_so_far() {
    let server = FakeModel::start().await.unwrap();
    let chat = keyless();
    let (events, error) = turn(
        &chat,
        request(agent(&server), vec![ChatMessage::User("MIDERR".into())]),
    )
    .await;
    // What the chunks hold unmapped is kept (`kept_fields` checks it), not
    // asked here.
    let events: Vec<_> = events
        .into_iter()
        .filter(|e| !matches!(e, ChatEvent::Extra(_)))
        .collect();
    assert_eq!(events, vec![ChatEvent::TextDelta("Partial ".into())]);
    let error = error.expect("the stream ends with an error");
    assert!(
        matches!(&error, ChatError::Api { status: None, message, .. } if message.contains("fake mid-stream failure")),
        "{error:?}"
    );
}

#[tokio::test]
async fn the_key_goes_only_into_the_authorization_header() {
    let server = FakeModel::start().await.unwrap();
    const KEY: &str = "sk-fake-0123456789abcdef";
    let chat = OpenAiChat::with_keys(KeySource::from_fn(|name| {
        (name == "FAKE_OPENAI_KEY").then(|| KEY.to_owned())
    }));
    let mut agent = agent(&server);
    agent.api_key_env = Some("FAKE_OPENAI_KEY".into());
    let (_, error) = turn(
        &chat,
        request(agent.clone(), vec![ChatMessage::User("hello".into())]),
    )
    .await;
    assert_eq!(error, None);
    let requests = server.requests();
    let sent = &requests[0];
    assert_eq!(
        sent.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(sent.body["stream"], json!(true));
    assert_eq!(sent.body["stream_options"]["include_usage"], json!(true));
    assert_eq!(sent.body["model"], json!("gpt-fake"));

    // An error reply does not echo it either.
    let e = start_error(
        &chat,
        request(agent, vec![ChatMessage::User("BADREQ".into())]),
    )
    .await;
    assert!(!format!("{e} {e:?} {chat:?}").contains(KEY));
}

#[tokio::test]
async fn a_cut_stream_is_a_network_error_after_its_text() {
    let server = FakeModel::start().await.unwrap();
    let chat = keyless();
    let (events, error) = turn(
        &chat,
        request(agent(&server), vec![ChatMessage::User("CUTSTREAM".into())]),
    )
    .await;
    assert!(!text(&events).is_empty(), "{events:?}");
    assert!(!events.iter().any(|e| matches!(e, ChatEvent::End(_))));
    let error = error.expect("a cut stream fails");
    assert!(matches!(error, ChatError::Network(_)), "{error:?}");
    assert!(error.is_transient());
}

#[tokio::test]
async fn arguments_that_are_not_json_arrive_as_a_string() {
    let server = FakeModel::start().await.unwrap();
    let chat = keyless();
    let mut ask = request(
        agent(&server),
        vec![ChatMessage::User("CALLTOOL shell {\"command\": ".into())],
    );
    ask.tools = vec![shell_tool()];
    let (events, error) = turn(&chat, ask).await;
    assert_eq!(error, None);
    let call = events
        .iter()
        .find_map(|e| match e {
            ChatEvent::ToolCall(c) => Some(c),
            _ => None,
        })
        .expect("a tool call");
    assert_eq!(call.input, json!("{\"command\":"));
    assert_eq!(end(&events).stop, StopReason::ToolUse);
}

//! The model turns of an HTTP agent's recorded call: how its recorded
//! events split into turns, what each turn added to the conversation, and
//! the `turns` a recording keeps to check a replay's requests against
//! (seed 001 §7.2). The mock provider replays the turns; a recording is
//! projected with [`recorded_turns`].

use domain::event::Extra;
use serde_json::{Value, json};

use crate::ports::{ChatBlock, ChatEvent, ChatMessage, ToolCall, ToolResult};
use crate::tool_loop::assistant_blocks;

/// A recorded tool call and its outcome: its output, or its error.
pub type Outcome = (ToolCall, Result<Value, String>);

/// The `extra` a recorded event keeps (what its agent sent unmapped), when
/// it keeps any.
pub fn recorded_extra(event: &Value) -> Option<Extra> {
    match event.get("extra") {
        Some(Value::Object(extra)) if !extra.is_empty() => Some(extra.clone()),
        _ => None,
    }
}

/// One model turn of a recorded call: what it streamed, and the tool calls
/// it ended with, each with the outcome recorded for it.
#[derive(Debug, Default, Clone)]
pub struct Turn {
    /// What the model streamed.
    pub stream: Vec<ChatEvent>,
    /// Its tool calls, each with the outcome recorded for it.
    pub calls: Vec<Outcome>,
    /// What the API sent unmapped with each call, by its place in `calls`.
    pub call_extras: Vec<Option<Extra>>,
}

/// The model turns of a call, from its recorded `agent:*` events: a text
/// or reasoning event after a tool call begins the next turn.
pub fn split(events: &[Value]) -> Vec<Turn> {
    let mut turns = vec![Turn::default()];
    let text = |e: &Value, field: &str| e[field].as_str().unwrap_or_default().to_owned();
    for event in events {
        let kind = event["type"].as_str().unwrap_or_default();
        let streamed = match kind {
            "agent:text:delta" => Some(ChatEvent::TextDelta(text(event, "content"))),
            "agent:thinking:delta" => Some(ChatEvent::ThinkingDelta(text(event, "content"))),
            "agent:thinking" => Some(ChatEvent::ThinkingDone {
                text: text(event, "content"),
                signature: event["signature"].as_str().map(str::to_owned),
            }),
            _ => None,
        };
        if let Some(streamed) = streamed {
            if turns.last().is_some_and(|t| !t.calls.is_empty()) {
                turns.push(Turn::default());
            }
            if let Some(turn) = turns.last_mut() {
                // What the API sent unmapped, before the event it came with
                // (no part of the conversation: the turn's blocks ignore it).
                turn.stream
                    .extend(recorded_extra(event).map(ChatEvent::Extra));
                turn.stream.push(streamed);
            }
            continue;
        }
        if kind == "agent:tool"
            && let Some(turn) = turns.last_mut()
        {
            let call = ToolCall {
                id: text(event, "toolUseId"),
                name: text(event, "toolName"),
                input: event["toolInput"].clone(),
            };
            let outcome = match event["error"].as_str() {
                Some(error) => Err(error.to_owned()),
                None => Ok(event["toolOutput"].clone()),
            };
            turn.calls.push((call, outcome));
            turn.call_extras.push(recorded_extra(event));
        }
    }
    turns
}

/// The JSON form of a conversation message in a recording's `turns`.
pub fn message_json(message: &ChatMessage) -> Value {
    match message {
        ChatMessage::User(text) => json!({"role": "user", "content": text}),
        ChatMessage::Assistant(blocks) => {
            let content: Vec<Value> = blocks
                .iter()
                .map(|b| match b {
                    ChatBlock::Text(text) => json!({"type": "text", "text": text}),
                    ChatBlock::Thinking { text, signature } => {
                        json!({"type": "thinking", "text": text, "signature": signature})
                    }
                    ChatBlock::ToolCall(call) => json!({
                        "type": "tool_call", "id": call.id, "name": call.name, "input": call.input,
                    }),
                })
                .collect();
            json!({"role": "assistant", "content": content})
        }
        ChatMessage::ToolResults(results) => {
            let results: Vec<Value> = results
                .iter()
                .map(|r| {
                    json!({"callId": r.call_id, "name": r.name, "content": r.content, "isError": r.is_error})
                })
                .collect();
            json!({"role": "tool", "results": results})
        }
    }
}

/// What a turn adds to the conversation after it: the model's message and
/// its tools' results, as the tool loop appends them.
fn added_by(turn: &Turn) -> Vec<ChatMessage> {
    let calls = turn
        .calls
        .iter()
        .map(|(c, _)| ChatEvent::ToolCall(c.clone()));
    let blocks = assistant_blocks(turn.stream.iter().cloned().chain(calls));
    let results = turn
        .calls
        .iter()
        .map(|(call, outcome)| ToolResult::of(call, outcome))
        .collect();
    vec![
        ChatMessage::Assistant(blocks),
        ChatMessage::ToolResults(results),
    ]
}

/// The `turns` a recording keeps for a call of an HTTP agent, from its
/// events: for each turn after the first, what it added to the
/// conversation, and the hash of that.
pub fn recorded_turns(events: &[Value]) -> Vec<Value> {
    let turns = split(events);
    turns
        .iter()
        .take(turns.len().saturating_sub(1))
        .enumerate()
        .map(|(i, turn)| {
            let messages: Vec<Value> = added_by(turn).iter().map(message_json).collect();
            let added = json!({"messages": messages});
            json!({
                "turn": i + 1,
                "requestHash": super::request::request_hash(&added),
                "messages": messages,
            })
        })
        .collect()
}

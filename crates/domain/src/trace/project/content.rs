//! What a span says of the content it carried, when content is captured
//! (`TraceInput::capture_content`): the messages of a provider call and
//! the arguments and result of a tool call, as the GenAI conventions
//! shape them (`gen_ai.input.messages`, `gen_ai.output.messages`,
//! `gen_ai.tool.call.arguments`, `gen_ai.tool.call.result`), JSON in a
//! string attribute.

use serde_json::{Value, json};

use crate::event::Prompt;

/// The messages a call sent: a prompt as one user message of one text
/// part; a provider's own messages as it sent them.
pub(super) fn input_messages(prompt: &Prompt) -> String {
    match prompt {
        Prompt::Text(text) => json!([{
            "role": "user",
            "parts": [{ "type": "text", "content": text }],
        }])
        .to_string(),
        Prompt::Messages(messages) => Value::Array(messages.clone()).to_string(),
    }
}

/// The answer a call gave, as one assistant message of one text part.
pub(super) fn output_messages(answer: &str) -> String {
    json!([{
        "role": "assistant",
        "parts": [{ "type": "text", "content": answer }],
        "finish_reason": "stop",
    }])
    .to_string()
}

/// A tool's arguments or result: a string as itself, anything else as JSON.
pub(super) fn text_of(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

//! One node run's reply in progress, built block by block from its agent's
//! events, and the transcript lines a tool call makes as it happens.

use domain::event::Extra;
use domain::transcript::{ContentBlock, ExchangeType, Fidelity};
use domain::{EventKind, RunId};
use serde_json::{Value, json};

/// The reply of one node run in progress.
#[derive(Default)]
pub(super) struct Reply {
    /// Blocks in the order the agent produced them.
    pub(super) blocks: Vec<ContentBlock>,
    /// Ids of tool calls the agent announced (`agent:tool:use`) with no result yet.
    pub(super) open_tool_uses: Vec<Option<String>>,
    /// The child run of a `call_workflow` node run.
    pub(super) child: Option<RunId>,
}

impl Reply {
    /// Adds what `kind` says to the reply; the transcript lines it makes
    /// (a tool call or result is a line of its own as it happens).
    pub(super) fn absorb(&mut self, kind: &EventKind) -> Vec<(ExchangeType, Value)> {
        let fidelity = Fidelity::AgentEmitted;
        let mut lines = Vec::new();
        let line: Option<(ExchangeType, Value)> = match kind {
            EventKind::AgentThinkingDelta { content, extra, .. } => {
                if let Some(ContentBlock::Thinking {
                    thinking,
                    extra: kept,
                    ..
                }) = self.blocks.last_mut()
                {
                    thinking.push_str(content);
                    merge(kept, extra);
                } else {
                    self.blocks.push(ContentBlock::Thinking {
                        thinking: content.clone(),
                        signature: None,
                        fidelity,
                        extra: extra.clone(),
                    });
                }
                None
            }
            EventKind::AgentThinking {
                content,
                signature,
                extra,
                ..
            } => {
                match self.blocks.last_mut() {
                    // The whole block after its deltas: it only adds the signature.
                    Some(ContentBlock::Thinking {
                        thinking,
                        signature: pending @ None,
                        extra: kept,
                        ..
                    }) if thinking == content => {
                        pending.clone_from(signature);
                        merge(kept, extra);
                    }
                    _ => self.blocks.push(ContentBlock::Thinking {
                        thinking: content.clone(),
                        signature: signature.clone(),
                        fidelity,
                        extra: extra.clone(),
                    }),
                }
                None
            }
            EventKind::AgentTextDelta { content, extra } => {
                if let Some(ContentBlock::Text {
                    text, extra: kept, ..
                }) = self.blocks.last_mut()
                {
                    text.push_str(content);
                    merge(kept, extra);
                } else {
                    self.blocks.push(ContentBlock::Text {
                        text: content.clone(),
                        fidelity,
                        extra: extra.clone(),
                    });
                }
                None
            }
            EventKind::AgentText { content, extra } => {
                self.blocks.push(ContentBlock::Text {
                    text: content.clone(),
                    fidelity,
                    extra: extra.clone(),
                });
                None
            }
            EventKind::AgentComplete { result, .. } => {
                // A provider that streamed no text gives its answer only here.
                let streamed = self
                    .blocks
                    .iter()
                    .any(|b| matches!(b, ContentBlock::Text { .. }));
                // The result line's own fields are the call's, not the
                // text's: they stay on `agent:complete`.
                if !streamed && !result.is_empty() {
                    self.blocks.push(ContentBlock::Text {
                        text: result.clone(),
                        fidelity,
                        extra: Default::default(),
                    });
                }
                None
            }
            EventKind::AgentToolUse {
                tool_use_id,
                tool_name,
                tool_input,
                extra,
            } => {
                self.open_tool_uses.push(tool_use_id.clone());
                let call = (tool_use_id, tool_name.as_str(), tool_input);
                Some(agent_tool_use(self, call, extra))
            }
            EventKind::AgentTool {
                tool_use_id,
                tool_name,
                tool_input,
                tool_output,
                error,
                extra,
                ..
            } => {
                // The use is already in place when the agent announced it;
                // a provider that reports only the whole call gets it here.
                let mut call = None;
                match self.open_tool_uses.iter().position(|id| id == tool_use_id) {
                    Some(at) => {
                        self.open_tool_uses.remove(at);
                    }
                    // The line's fields are the result's: the use made up
                    // from it carries none of them again.
                    None => {
                        let made = (tool_use_id, tool_name.as_str(), tool_input);
                        call = Some(agent_tool_use(self, made, &Extra::new()));
                    }
                }
                self.blocks.push(ContentBlock::ToolResult {
                    tool_id: tool_use_id.clone().unwrap_or_default(),
                    tool_content: if error.is_some() {
                        Value::Null
                    } else {
                        tool_output.clone()
                    },
                    fidelity,
                    extra: extra.clone(),
                });
                lines.extend(call);
                let mut result =
                    json!({"name": tool_name, "output": tool_output, "fidelity": fidelity});
                if let Some(id) = tool_use_id {
                    result["call_id"] = Value::String(id.clone());
                }
                with_extra(&mut result, extra);
                if let Some(error) = error {
                    result["error"] = Value::String(error.clone());
                }
                Some((ExchangeType::ToolResult, result))
            }
            EventKind::ToolStarted {
                call_id,
                tool_name,
                tool_input,
                extra,
            } => {
                let fidelity = Fidelity::Router;
                self.blocks.push(ContentBlock::ToolUse {
                    tool_name: tool_name.clone(),
                    tool_id: call_id.clone(),
                    tool_input: tool_input.clone(),
                    fidelity,
                    extra: extra.clone(),
                });
                let mut call = json!({"name": tool_name, "call_id": call_id, "input": tool_input, "fidelity": fidelity});
                with_extra(&mut call, extra);
                Some((ExchangeType::ToolCall, call))
            }
            EventKind::ToolCompleted {
                call_id,
                tool_name,
                tool_output,
                duration_ms,
            } => {
                self.blocks.push(ContentBlock::ToolResult {
                    tool_id: call_id.clone(),
                    tool_content: tool_output.clone(),
                    fidelity: Fidelity::Router,
                    extra: Default::default(),
                });
                let result = json!({"name": tool_name, "call_id": call_id, "output": tool_output,
                    "duration_ms": duration_ms, "fidelity": Fidelity::Router});
                Some((ExchangeType::ToolResult, result))
            }
            EventKind::ToolFailed {
                call_id,
                tool_name,
                error,
                duration_ms,
            } => {
                self.blocks.push(ContentBlock::ToolResult {
                    tool_id: call_id.clone(),
                    tool_content: Value::Null,
                    fidelity: Fidelity::Router,
                    extra: Default::default(),
                });
                let result = json!({"name": tool_name, "call_id": call_id, "output": null,
                    "error": error, "duration_ms": duration_ms, "fidelity": Fidelity::Router});
                Some((ExchangeType::ToolResult, result))
            }
            _ => None,
        };
        lines.extend(line);
        lines
    }
}

/// The `tool_use` block and the `tool.call` line of a tool call the agent
/// made, with the provider's own id (none when it gave none: an id is never
/// invented, it is how a reader joins a call to its result).
fn agent_tool_use(
    reply: &mut Reply,
    (tool_use_id, tool_name, tool_input): (&Option<String>, &str, &Value),
    extra: &Extra,
) -> (ExchangeType, Value) {
    let fidelity = Fidelity::AgentEmitted;
    reply.blocks.push(ContentBlock::ToolUse {
        tool_name: tool_name.to_owned(),
        tool_id: tool_use_id.clone().unwrap_or_default(),
        tool_input: tool_input.clone(),
        fidelity,
        extra: extra.clone(),
    });
    let mut call = json!({"name": tool_name, "input": tool_input, "fidelity": fidelity});
    if let Some(id) = tool_use_id {
        call["call_id"] = Value::String(id.clone());
    }
    with_extra(&mut call, extra);
    (ExchangeType::ToolCall, call)
}

/// Adds to a block built from several events (streamed pieces, a whole
/// block after its deltas) what the later ones carry unmapped: each
/// piece's own stays on its event; where two name the same pointer, the
/// block keeps the first.
fn merge(kept: &mut Extra, more: &Extra) {
    for (pointer, value) in more {
        if !kept.contains_key(pointer) {
            kept.insert(pointer.clone(), value.clone());
        }
    }
}

/// A tool line's payload with what the agent sent unmapped with the call
/// (`extra`, as on its block), when it sent any.
fn with_extra(payload: &mut Value, extra: &Extra) {
    if !extra.is_empty() {
        payload["extra"] = Value::Object(extra.clone());
    }
}

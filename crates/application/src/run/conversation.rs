//! The conversation of an HTTP agent's node run, rebuilt from the run's
//! record: what a node run that continues (after a crash, a pause, or to
//! deliver a message) sends the model, since an HTTP API keeps no session.
//!
//! The record holds every piece of it: each invocation's prompt
//! (`agent:start`), the model's blocks (`agent:thinking`, `agent:text`), the
//! tool calls the runtime ran for it (`tool:started`) and their results
//! (`tool:completed` / `tool:failed`). A call with a start and no result
//! was cut off by the end of the process that ran it: it is not run again
//! (a tool may not be safe to repeat), and the model is told its outcome is
//! unknown.

use domain::{EventKind, NodeRunId, RuntimeEvent};
use serde_json::Value;

use crate::ports::{ChatBlock, ChatMessage, ToolCall, ToolResult};

/// What the model is told of a call whose result was never recorded.
pub(crate) const UNKNOWN_RESULT: &str = "the outcome of this tool call is unknown: the process running it stopped before its result was recorded, and it was not run again";

/// The conversation of node run `run`'s current attempt, from the run's
/// events (in offset order).
pub(crate) fn rebuild(events: &[RuntimeEvent], run: NodeRunId) -> Vec<ChatMessage> {
    let ours = events.iter().filter(|e| e.node_run_id == Some(run));
    // Only the current attempt: an earlier one's conversation was abandoned.
    let ours: Vec<&RuntimeEvent> = ours.collect();
    let from = ours
        .iter()
        .rposition(|e| matches!(e.kind, EventKind::NodeStarted { .. }))
        .map_or(0, |i| i + 1);
    let mut conversation = Conversation::default();
    for event in &ours[from..] {
        conversation.add(&event.kind);
    }
    conversation.finish()
}

#[derive(Default)]
struct Conversation {
    messages: Vec<ChatMessage>,
    /// The model's turn being read.
    blocks: Vec<ChatBlock>,
    /// Results of that turn's calls, by call.
    results: Vec<ToolResult>,
}

impl Conversation {
    fn add(&mut self, kind: &EventKind) {
        match kind {
            EventKind::AgentStart { prompt, .. } => {
                self.end_turn();
                let text = match prompt {
                    domain::event::Prompt::Text(text) => text.clone(),
                    other => serde_json::to_string(other).unwrap_or_default(),
                };
                self.messages.push(ChatMessage::User(text));
            }
            EventKind::AgentThinking {
                content, signature, ..
            } => {
                self.before_block();
                self.blocks.push(ChatBlock::Thinking {
                    text: content.clone(),
                    signature: signature.clone(),
                });
            }
            EventKind::AgentText { content, .. } => {
                self.before_block();
                self.blocks.push(ChatBlock::Text(content.clone()));
            }
            EventKind::ToolStarted {
                call_id,
                tool_name,
                tool_input,
                ..
            } => {
                self.before_block();
                self.blocks.push(ChatBlock::ToolCall(ToolCall {
                    id: call_id.clone(),
                    name: tool_name.clone(),
                    input: tool_input.clone(),
                }));
            }
            EventKind::ToolCompleted {
                call_id,
                tool_name,
                tool_output,
                ..
            } => {
                let content = match tool_output {
                    Value::String(text) => text.clone(),
                    other => other.to_string(),
                };
                self.results.push(ToolResult {
                    call_id: call_id.clone(),
                    name: tool_name.clone(),
                    content,
                    is_error: false,
                });
            }
            EventKind::ToolFailed {
                call_id,
                tool_name,
                error,
                ..
            } => self.results.push(ToolResult {
                call_id: call_id.clone(),
                name: tool_name.clone(),
                content: error.clone(),
                is_error: true,
            }),
            EventKind::AgentComplete { .. } | EventKind::AgentError { .. } => self.end_turn(),
            _ => {}
        }
    }

    /// A block after tool results starts the model's next turn.
    fn before_block(&mut self) {
        if !self.results.is_empty() {
            self.end_turn();
        }
    }

    /// The turn read so far goes into the conversation, with its calls'
    /// results in call order; a call without one gets [`UNKNOWN_RESULT`].
    fn end_turn(&mut self) {
        if self.blocks.is_empty() {
            self.results.clear();
            return;
        }
        let blocks = std::mem::take(&mut self.blocks);
        let mut results = std::mem::take(&mut self.results);
        let calls: Vec<&ToolCall> = blocks
            .iter()
            .filter_map(|b| match b {
                ChatBlock::ToolCall(call) => Some(call),
                _ => None,
            })
            .collect();
        let answered: Vec<ToolResult> = calls
            .iter()
            .map(
                |call| match results.iter().position(|r| r.call_id == call.id) {
                    Some(at) => results.remove(at),
                    None => ToolResult {
                        call_id: call.id.clone(),
                        name: call.name.clone(),
                        content: UNKNOWN_RESULT.to_owned(),
                        is_error: true,
                    },
                },
            )
            .collect();
        self.messages.push(ChatMessage::Assistant(blocks));
        if !answered.is_empty() {
            self.messages.push(ChatMessage::ToolResults(answered));
        }
    }

    fn finish(mut self) -> Vec<ChatMessage> {
        self.end_turn();
        self.messages
    }
}

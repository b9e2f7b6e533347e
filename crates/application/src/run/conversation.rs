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
//!
//! A turn may also be left open on purpose: a call of a tool granted with
//! `requires_approval` waits for a person (`approval:requested` names it
//! and the turn's calls after it). Those calls have no result yet and are
//! not cut off: the invocation that follows the answer runs them (the
//! approved one without asking again) before the model is asked anything.
//! A rejected call's result is the person's rejection.
use domain::{EventKind, NodeRunId, RuntimeEvent};
use serde_json::Value;

use crate::ports::{ChatBlock, ChatMessage, ToolCall, ToolResult};

/// What the model is told of a call whose result was never recorded.
pub(crate) const UNKNOWN_RESULT: &str = "the outcome of this tool call is unknown: the process running it stopped before its result was recorded, and it was not run again";

/// What the model is told of a call a person rejected.
pub(crate) fn rejected(by: Option<&domain::Caller>, reason: Option<&str>) -> String {
    let who = by.map_or_else(|| "a person".to_owned(), |by| format!("`{by}`"));
    match reason {
        Some(reason) => format!("this tool call was not run: {who} rejected it: {reason}"),
        None => format!("this tool call was not run: {who} rejected it"),
    }
}

/// A conversation read back ([`rebuild`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Rebuilt {
    /// The messages so far. When the model's last turn is open (calls
    /// that waited for a person and have not run), they end with that
    /// turn and the results it has.
    pub messages: Vec<ChatMessage>,
    /// The call of the open turn a person approved, which runs without
    /// asking again.
    pub approved: Option<String>,
    /// Whether the last turn is open: its calls without a result run next.
    pub open: bool,
}

/// The conversation of node run `run`'s current attempt, from the run's
/// events (in offset order).
pub(crate) fn rebuild(events: &[RuntimeEvent], run: NodeRunId) -> Rebuilt {
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
    /// The turn's calls a person was asked about (or that wait with one):
    /// without a result, they are open rather than cut off.
    waiting: Vec<String>,
    /// The turn's calls that started running.
    started: Vec<String>,
    /// The call of the question asked last, until it is resolved.
    asked: Option<String>,
    /// An approved call that has not run yet.
    approved: Option<String>,
}

impl Conversation {
    fn add(&mut self, kind: &EventKind) {
        match kind {
            // The invocation that finishes an open turn says nothing.
            EventKind::AgentStart {
                prompt: domain::event::Prompt::Text(text),
                ..
            } if text.is_empty() && !self.messages.is_empty() => {}
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
                self.started.push(call_id.clone());
                if self.approved.as_ref() == Some(call_id) {
                    self.approved = None;
                }
                // A waiting call of this turn is in it already.
                if !self.waiting.contains(call_id) {
                    self.before_block();
                    self.blocks.push(ChatBlock::ToolCall(ToolCall {
                        id: call_id.clone(),
                        name: tool_name.clone(),
                        input: tool_input.clone(),
                    }));
                }
            }
            EventKind::ApprovalRequested {
                tool: Some(first),
                later_calls,
                ..
            } => {
                for call in std::iter::once(first).chain(later_calls) {
                    if !self.waiting.contains(&call.call_id) {
                        self.waiting.push(call.call_id.clone());
                        self.blocks.push(ChatBlock::ToolCall(ToolCall {
                            id: call.call_id.clone(),
                            name: call.tool_name.clone(),
                            input: call.tool_input.clone(),
                        }));
                    }
                }
                self.asked = Some(first.call_id.clone());
            }
            EventKind::ApprovalResolved {
                approved,
                reason,
                by,
                ..
            } => {
                let Some(call) = self.asked.take() else {
                    return;
                };
                if *approved {
                    self.approved = Some(call);
                } else {
                    let name = self.call_name(&call);
                    self.results.push(ToolResult {
                        call_id: call,
                        name,
                        content: rejected(by.as_ref(), reason.as_deref()),
                        is_error: true,
                    });
                }
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

    /// The name of call `id` of the turn.
    fn call_name(&self, id: &str) -> String {
        (self.calls())
            .find(|call| call.id == id)
            .map(|call| call.name.clone())
            .unwrap_or_default()
    }

    fn calls(&self) -> impl Iterator<Item = &ToolCall> {
        self.blocks.iter().filter_map(|b| match b {
            ChatBlock::ToolCall(call) => Some(call),
            _ => None,
        })
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
        self.waiting.clear();
        self.started.clear();
        self.asked = None;
        self.approved = None;
        if self.blocks.is_empty() {
            self.results.clear();
            return;
        }
        let blocks = std::mem::take(&mut self.blocks);
        let mut results = std::mem::take(&mut self.results);
        let answered: Vec<ToolResult> = (blocks.iter())
            .filter_map(|b| match b {
                ChatBlock::ToolCall(call) => Some(call),
                _ => None,
            })
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

    /// Whether the turn read last is open: a call that waited for a person
    /// has neither run nor been answered with a rejection.
    fn open(&self) -> bool {
        (self.waiting.iter())
            .any(|id| !self.started.contains(id) && !self.results.iter().any(|r| r.call_id == *id))
    }

    fn finish(mut self) -> Rebuilt {
        if !self.open() {
            self.end_turn();
            return Rebuilt {
                messages: self.messages,
                ..Rebuilt::default()
            };
        }
        // The calls that ran, or were cut off running, have their results;
        // the rest run next.
        let blocks = std::mem::take(&mut self.blocks);
        let mut results = std::mem::take(&mut self.results);
        let mut known = Vec::new();
        for call in blocks.iter().filter_map(|b| match b {
            ChatBlock::ToolCall(call) => Some(call),
            _ => None,
        }) {
            match results.iter().position(|r| r.call_id == call.id) {
                Some(at) => known.push(results.remove(at)),
                None if self.started.contains(&call.id) || !self.waiting.contains(&call.id) => {
                    known.push(ToolResult {
                        call_id: call.id.clone(),
                        name: call.name.clone(),
                        content: UNKNOWN_RESULT.to_owned(),
                        is_error: true,
                    });
                }
                None => {}
            }
        }
        self.messages.push(ChatMessage::Assistant(blocks));
        if !known.is_empty() {
            self.messages.push(ChatMessage::ToolResults(known));
        }
        Rebuilt {
            messages: self.messages,
            approved: self.approved,
            open: true,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use domain::event::{AskedCall, Prompt};
    use domain::{Caller, NodeId, RunId, SessionId, Timestamp};
    use serde_json::json;
    use uuid::Uuid;

    const RUN: u128 = 7;

    fn log(kinds: Vec<EventKind>) -> Vec<RuntimeEvent> {
        let run_id = RunId::new(Uuid::new_v4()).unwrap();
        (kinds.into_iter().enumerate())
            .map(|(i, kind)| RuntimeEvent {
                id: i.to_string(),
                offset: domain::Offset::new(i as u64 + 1).unwrap(),
                timestamp: Timestamp::from_millis(0),
                run_id,
                node_id: Some(NodeId::new("n").unwrap()),
                node_run_id: Some(NodeRunId::new(Uuid::from_u128(RUN))),
                kind,
                extra: Default::default(),
            })
            .collect()
    }

    fn start(prompt: &str) -> EventKind {
        EventKind::AgentStart {
            session_id: SessionId::from_uuid(Uuid::from_u128(2)),
            model: None,
            prompt: Prompt::Text(prompt.into()),
            provisional: false,
            inbox: Vec::new(),
            call_index: None,
            instance: None,
            instance_call: None,
            restart: None,
        }
    }

    fn asked(id: &str) -> AskedCall {
        AskedCall {
            call_id: id.into(),
            tool_name: "shell".into(),
            tool_input: json!({"command": id}),
            extra: Default::default(),
        }
    }

    fn ask(first: &str, later: &[&str]) -> EventKind {
        EventKind::ApprovalRequested {
            prompt: "?".into(),
            schema: None,
            deadline: None,
            on_timeout: None,
            approvers: Vec::new(),
            tool: Some(asked(first)),
            later_calls: later.iter().map(|id| asked(id)).collect(),
        }
    }

    fn resolved(approved: bool) -> EventKind {
        EventKind::ApprovalResolved {
            approved,
            data: Value::Null,
            reason: (!approved).then(|| "too risky".to_owned()),
            by: Some(Caller::new("alice").unwrap()),
            how: "answered".into(),
        }
    }

    fn ran(id: &str) -> [EventKind; 2] {
        [
            EventKind::ToolStarted {
                call_id: id.into(),
                tool_name: "shell".into(),
                tool_input: json!({"command": id}),
                extra: Default::default(),
            },
            EventKind::ToolCompleted {
                call_id: id.into(),
                tool_name: "shell".into(),
                tool_output: json!(id),
                duration_ms: 1,
            },
        ]
    }

    fn rebuilt(kinds: Vec<EventKind>) -> Rebuilt {
        rebuild(&log(kinds), NodeRunId::new(Uuid::from_u128(RUN)))
    }

    fn results(message: &ChatMessage) -> Vec<(&str, &str)> {
        let ChatMessage::ToolResults(results) = message else {
            panic!("{message:?}");
        };
        (results.iter())
            .map(|r| (r.call_id.as_str(), r.content.as_str()))
            .collect()
    }

    #[test]
    fn a_waiting_turn_stays_open_with_the_results_it_has() {
        let mut kinds = vec![start("go")];
        kinds.extend(ran("c1"));
        kinds.push(ask("c2", &["c3"]));
        let open = rebuilt(kinds.clone());
        assert!(open.open && open.approved.is_none());
        assert_eq!(open.messages.len(), 3, "{:?}", open.messages);
        let ChatMessage::Assistant(blocks) = &open.messages[1] else {
            panic!("{:?}", open.messages);
        };
        assert_eq!(blocks.len(), 3, "every call of the turn: {blocks:?}");
        assert_eq!(results(&open.messages[2]), [("c1", "c1")]);

        // Approved: it runs next, without asking again.
        kinds.push(resolved(true));
        let approved = rebuilt(kinds.clone());
        assert_eq!(
            (approved.open, approved.approved.as_deref()),
            (true, Some("c2"))
        );

        // The continuation ran it, then c3 asked and was rejected.
        kinds.push(start(""));
        kinds.extend(ran("c2"));
        kinds.push(ask("c3", &[]));
        kinds.push(resolved(false));
        let done = rebuilt(kinds);
        assert!(!done.open && done.approved.is_none());
        assert_eq!(done.messages.len(), 3, "{:?}", done.messages);
        let said = results(&done.messages[2]);
        assert_eq!(said[..2], [("c1", "c1"), ("c2", "c2")]);
        assert_eq!(
            said[2],
            (
                "c3",
                "this tool call was not run: `alice` rejected it: too risky"
            )
        );
    }

    #[test]
    fn a_call_cut_off_while_its_turn_waited_is_unknown_not_run_again() {
        let mut kinds = vec![start("go"), ask("c1", &["c2"]), resolved(true), start("")];
        kinds.push(ran("c1")[0].clone());
        let cut = rebuilt(kinds);
        // c1 started and has no result: unknown. c2 never started: it runs.
        assert!(cut.open && cut.approved.is_none());
        assert_eq!(results(&cut.messages[2]), [("c1", UNKNOWN_RESULT)]);
    }
}

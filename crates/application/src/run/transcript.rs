//! [`TranscriptWriter`]: the run's exchange transcript (seed 000), written
//! as a projection of its events.
//!
//! Every line is derived from an event the recorder has just stored and the
//! state before it: a node run's start gives `step.started` and the user
//! message (the prompt is its input), its agent events build the assistant
//! reply block by block, a later `agent:start` of the same attempt (a
//! message delivered, a resume) gives the reply so far and the new user
//! message, its end gives the reply and `step.completed`. The
//! transcript therefore holds nothing the log does not, and node runs that
//! interleave keep their own reply.

use std::collections::HashMap;
use std::sync::Arc;

use domain::event::Prompt;
use domain::transcript::{
    ContentBlock, ExchangeDraft, ExchangeType, Fidelity, message_payload, step_payload,
};
use domain::workflow::NodeKind;
use domain::{EventKind, NodeRunId, RunId, RunSnapshot, RuntimeEvent, Timestamp, WorkflowDef};
use serde_json::{Value, json};

use crate::ports::{Clock, Transcript, TranscriptError};

mod reply;

use self::reply::Reply;

/// Writes one run's transcript from its events.
pub(crate) struct TranscriptWriter {
    transcript: Arc<dyn Transcript>,
    clock: Arc<dyn Clock>,
    replies: HashMap<NodeRunId, Reply>,
    /// The time of the event whose lines are being written: a line is
    /// stamped with its event's time, so lines written after the fact (a
    /// fork's copied events) say when it happened, as the log does.
    at: Option<Timestamp>,
}

/// What a node run is called in the transcript: its node id, and for an
/// item of a `for_each` node the item's index after it (`review[2]`).
fn place(event: &RuntimeEvent, state: &RunSnapshot) -> (String, u32) {
    let node = event
        .node_id
        .as_ref()
        .map(|n| n.to_string())
        .unwrap_or_default();
    match event.node_run_id.and_then(|id| state.node_runs.get(&id)) {
        Some(run) => match run.item {
            Some(item) => (format!("{node}[{item}]"), run.iteration),
            None => (node, run.iteration),
        },
        None => (node, 0),
    }
}

/// The step kind of a node in the transcript.
fn step_kind(wf: &WorkflowDef, event: &RuntimeEvent, state: &RunSnapshot) -> &'static str {
    let node = event.node_id.as_ref().and_then(|id| wf.node(id));
    let is_items = event
        .node_id
        .as_ref()
        .is_some_and(|id| state.for_each.contains_key(id))
        && event
            .node_run_id
            .and_then(|r| state.node_runs.get(&r))
            .is_some_and(|r| r.item.is_none());
    match node.map(|n| &n.kind) {
        _ if is_items => "for_each",
        Some(NodeKind::CallWorkflow { .. }) => "call_workflow",
        Some(NodeKind::Command(_)) => "command",
        Some(NodeKind::Approval(_)) => "approval",
        _ => "agent",
    }
}

/// What an agent is asked: text as is, anything else as pretty JSON.
pub(crate) fn render_prompt(data: &Value) -> String {
    match data {
        Value::String(text) => text.clone(),
        Value::Null => String::new(),
        other => serde_json::to_string_pretty(other).unwrap_or_else(|_| other.to_string()),
    }
}

impl TranscriptWriter {
    pub fn new(transcript: Arc<dyn Transcript>, clock: Arc<dyn Clock>) -> Self {
        Self {
            transcript,
            clock,
            replies: HashMap::new(),
            at: None,
        }
    }

    /// Writes the lines of `events`, a whole log from its `flow:started`
    /// that was copied rather than run here (a fork's), each at its event's
    /// time: a fork's transcript then begins where its log does, not at the
    /// fork.
    pub async fn project(
        &mut self,
        events: &[RuntimeEvent],
        wf: &WorkflowDef,
    ) -> Result<(), TranscriptError> {
        let mut state: Option<RunSnapshot> = None;
        for event in events {
            let written = match &mut state {
                Some(state) => {
                    let written = self.observe(event, state, wf).await;
                    state.apply(event);
                    written
                }
                // `flow:started`: its line needs nothing of the state.
                None => match RunSnapshot::fold([event]) {
                    Some(first) => self.observe(event, state.insert(first), wf).await,
                    None => Ok(()),
                },
            };
            written?;
        }
        Ok(())
    }

    /// Events live subscribers have missed.
    pub fn dropped(&self) -> u64 {
        self.transcript.dropped()
    }

    /// Ends the transcript.
    /// Writes the lines taken so far ([`Transcript::flush`]).
    pub async fn flush(&self) -> Result<(), TranscriptError> {
        self.transcript.flush().await
    }

    /// Writes what is left, then ends the transcript: a line that cannot
    /// be written now is logged, its event being on record already.
    pub async fn close(self) {
        if let Err(e) = self.transcript.flush().await {
            tracing::warn!(error = %e, "cannot write the last lines of the transcript");
        }
        self.transcript.close().await;
    }

    async fn line(
        &self,
        kind: ExchangeType,
        (path, iteration): (String, u32),
        payload: Value,
        child_run_id: Option<RunId>,
    ) -> Result<(), TranscriptError> {
        let draft = ExchangeDraft {
            child_run_id,
            kind,
            path,
            iteration,
            timestamp: self.at.unwrap_or_else(|| self.clock.now()),
            payload,
        };
        self.transcript.append(draft).await.map(|_| ())
    }

    /// Writes the lines `event` gives, `state` being the state before it.
    pub async fn observe(
        &mut self,
        event: &RuntimeEvent,
        state: &RunSnapshot,
        wf: &WorkflowDef,
    ) -> Result<(), TranscriptError> {
        self.at = Some(event.timestamp);
        let here = || place(event, state);
        match &event.kind {
            EventKind::FlowStarted { .. } => {
                let payload = step_payload(&wf.name, "workflow", None, None);
                self.line(ExchangeType::RunStarted, (String::new(), 0), payload, None)
                    .await
            }
            EventKind::FlowCompleted { output, .. } => {
                let payload = step_payload(&wf.name, "workflow", None, Some(output));
                self.line(
                    ExchangeType::RunCompleted,
                    (String::new(), 0),
                    payload,
                    None,
                )
                .await
            }
            EventKind::FlowFailed { error, .. } => {
                let payload = step_payload(&wf.name, "workflow", Some(error), None);
                self.line(
                    ExchangeType::RunCompleted,
                    (String::new(), 0),
                    payload,
                    None,
                )
                .await
            }
            EventKind::FlowCancelled { reason } => {
                let error = format!(
                    "cancelled: {}",
                    reason.as_deref().unwrap_or("no reason given")
                );
                let payload = step_payload(&wf.name, "workflow", Some(&error), None);
                self.line(
                    ExchangeType::RunCompleted,
                    (String::new(), 0),
                    payload,
                    None,
                )
                .await
            }
            EventKind::NodeStarted {
                input, item, items, ..
            } => {
                self.node_started(event, state, wf, input, *item, items.is_some())
                    .await
            }
            EventKind::NodeCompleted { output } => {
                let data = output.get("data").cloned().unwrap_or(Value::Null);
                self.node_ended(event, state, wf, None, &data).await
            }
            EventKind::NodeFailed { error, .. } => {
                self.node_ended(event, state, wf, Some(error), &Value::Null)
                    .await
            }
            EventKind::SubflowStarted { child_run_id, .. } => {
                if let Some(id) = event.node_run_id {
                    self.replies.entry(id).or_default().child = Some(*child_run_id);
                }
                let node = event
                    .node_id
                    .as_ref()
                    .map(|n| n.as_str())
                    .unwrap_or_default();
                let payload = step_payload(node, "call_workflow", None, None);
                self.line(
                    ExchangeType::CallWorkflowStarted,
                    here(),
                    payload,
                    Some(*child_run_id),
                )
                .await
            }
            EventKind::ApprovalRequested {
                prompt,
                schema,
                deadline,
                tool,
                ..
            } => {
                // The question, as the person was shown it; a tool call's
                // after the model's turn that asked for it.
                let mut payload = json!({"prompt": prompt});
                if let Some(tool) = tool {
                    self.flush_reply(event, state).await?;
                    payload["tool"] = json!({"callId": tool.call_id,
                        "toolName": tool.tool_name, "toolInput": tool.tool_input});
                }
                if let Some(schema) = schema {
                    payload["schema"] = schema.clone();
                }
                if let Some(deadline) = deadline {
                    payload["deadline"] = json!(deadline);
                }
                self.line(ExchangeType::ApprovalRequested, here(), payload, None)
                    .await
            }
            EventKind::ApprovalResolved {
                approved,
                data,
                reason,
                by,
                how,
            } => {
                // The person's answer, or why there was none.
                let payload = json!({"approved": approved, "data": data, "reason": reason,
                    "by": by, "how": how});
                self.line(ExchangeType::ApprovalResolved, here(), payload, None)
                    .await
            }
            EventKind::AgentStart { prompt, .. } => self.agent_started(event, state, prompt).await,
            _ => self.collect_reply(event, state).await,
        }
    }

    /// An invocation that continues a node run's conversation (messages
    /// delivered after a turn, or a resume): the reply so far, then what
    /// the agent is told now. The first invocation of an attempt is asked
    /// what `node:started` showed; it has no `callIndex` yet in the state
    /// (an invocation sets it, a new attempt clears it).
    async fn agent_started(
        &mut self,
        event: &RuntimeEvent,
        state: &RunSnapshot,
        prompt: &Prompt,
    ) -> Result<(), TranscriptError> {
        let Some(run_id) = event.node_run_id else {
            return Ok(());
        };
        let follow_up = state
            .node_runs
            .get(&run_id)
            .is_some_and(|r| r.call_index.is_some());
        if !follow_up {
            return Ok(());
        }
        let here = place(event, state);
        self.flush_reply(event, state).await?;
        let text = match prompt {
            // It only finishes the model's turn: nothing is said.
            Prompt::Text(text) if text.is_empty() => return Ok(()),
            Prompt::Text(text) => text.clone(),
            Prompt::Messages(messages) => serde_json::to_string_pretty(messages)
                .unwrap_or_else(|_| Value::from(messages.clone()).to_string()),
        };
        let told = [ContentBlock::Text {
            text,
            fidelity: Fidelity::Router,
            extra: Default::default(),
        }];
        let user = message_payload("user", &told);
        self.line(ExchangeType::MessageUser, here, user, None).await
    }

    /// The reply of `event`'s node run collected so far, as an assistant
    /// message.
    async fn flush_reply(
        &mut self,
        event: &RuntimeEvent,
        state: &RunSnapshot,
    ) -> Result<(), TranscriptError> {
        let Some(run_id) = event.node_run_id else {
            return Ok(());
        };
        let so_far = self
            .replies
            .get_mut(&run_id)
            .map(|r| std::mem::take(&mut r.blocks))
            .unwrap_or_default();
        if so_far.is_empty() {
            return Ok(());
        }
        let assistant = message_payload("assistant", &so_far);
        let here = place(event, state);
        self.line(ExchangeType::MessageAssistant, here, assistant, None)
            .await
    }

    /// `step.started`, and the user message of an agent (again on a retry).
    async fn node_started(
        &mut self,
        event: &RuntimeEvent,
        state: &RunSnapshot,
        wf: &WorkflowDef,
        input: &Value,
        item: Option<u32>,
        spawns_items: bool,
    ) -> Result<(), TranscriptError> {
        let Some(run_id) = event.node_run_id else {
            return Ok(());
        };
        let retry = state.node_runs.contains_key(&run_id);
        // The place of a run that starts, as the fold will give it.
        let here = if retry {
            place(event, state)
        } else {
            let node = event.node_id.as_ref();
            let passes = node
                .and_then(|n| state.node_passes.get(n))
                .copied()
                .unwrap_or(0);
            let name = node.map(|n| n.to_string()).unwrap_or_default();
            match item {
                Some(i) => (format!("{name}[{i}]"), passes.saturating_sub(1)),
                None => (name, passes),
            }
        };
        let kind = if spawns_items {
            "for_each"
        } else {
            step_kind(wf, event, state)
        };
        let runs_work = !spawns_items;
        self.replies.insert(run_id, Reply::default());
        if !retry {
            let node = event
                .node_id
                .as_ref()
                .map(|n| n.as_str())
                .unwrap_or_default();
            let payload = step_payload(node, kind, None, None);
            self.line(ExchangeType::StepStarted, here.clone(), payload, None)
                .await?;
        }
        let agent = event
            .node_id
            .as_ref()
            .and_then(|id| wf.node(id))
            .and_then(|n| wf.agent_of(n));
        if let (Some((_, agent)), true) = (agent, runs_work) {
            let data = input.get("data").unwrap_or(&Value::Null);
            let mut asked = vec![ContentBlock::Text {
                text: render_prompt(data),
                fidelity: Fidelity::Router,
                extra: Default::default(),
            }];
            if !agent.system_prompt.is_empty() {
                asked.push(ContentBlock::Text {
                    text: agent.system_prompt.clone(),
                    fidelity: Fidelity::Router,
                    extra: Default::default(),
                });
            }
            let user = message_payload("user", &asked);
            self.line(ExchangeType::MessageUser, here, user, None)
                .await?;
        }
        Ok(())
    }

    /// The assistant reply, a child run's return, and `step.completed`.
    async fn node_ended(
        &mut self,
        event: &RuntimeEvent,
        state: &RunSnapshot,
        wf: &WorkflowDef,
        error: Option<&String>,
        data: &Value,
    ) -> Result<(), TranscriptError> {
        let here = place(event, state);
        let kind = step_kind(wf, event, state);
        let reply = event
            .node_run_id
            .and_then(|id| self.replies.remove(&id))
            .unwrap_or_default();
        if !reply.blocks.is_empty() {
            let assistant = message_payload("assistant", &reply.blocks);
            self.line(
                ExchangeType::MessageAssistant,
                here.clone(),
                assistant,
                None,
            )
            .await?;
        }
        let node = event
            .node_id
            .as_ref()
            .map(|n| n.as_str())
            .unwrap_or_default();
        if let Some(child) = reply.child {
            let returned =
                step_payload(node, "call_workflow", error.map(String::as_str), Some(data));
            self.line(
                ExchangeType::CallWorkflowCompleted,
                here.clone(),
                returned,
                Some(child),
            )
            .await?;
        }
        let done = step_payload(node, kind, error.map(String::as_str), Some(data));
        self.line(ExchangeType::StepCompleted, here, done, None)
            .await
    }

    /// Adds an agent event to its node run's reply (deltas join the block
    /// they continue) and writes the transcript lines of a tool call.
    async fn collect_reply(
        &mut self,
        event: &RuntimeEvent,
        state: &RunSnapshot,
    ) -> Result<(), TranscriptError> {
        let Some(run_id) = event.node_run_id else {
            return Ok(());
        };
        let here = place(event, state);
        let lines = self.replies.entry(run_id).or_default().absorb(&event.kind);
        for (kind, payload) in lines {
            self.line(kind, here.clone(), payload, None).await?;
        }
        Ok(())
    }

    /// Takes in what the agents of turns in flight said before this writer
    /// (a resume's) took over, without writing it: those lines were written
    /// as it happened, and the reply so far is written when the resumed
    /// turn goes on, as any reply so far is.
    /// The child runs of `call_workflow` node runs in flight come from
    /// `state`, for the `step.call_workflow.completed` each still owes.
    pub(crate) fn restore(&mut self, state: &RunSnapshot, events: &[RuntimeEvent]) {
        for (run, child) in state
            .node_runs
            .iter()
            .filter_map(|(r, s)| Some((r, s.child?)))
        {
            self.replies.entry(*run).or_default().child = Some(child);
        }
        for event in events {
            if let Some(run_id) = event.node_run_id {
                self.replies.entry(run_id).or_default().absorb(&event.kind);
            }
        }
    }
}

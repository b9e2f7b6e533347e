//! The part of the fold that follows an agent's invocations: turns,
//! sessions, process groups, results and what they consumed.

use serde_json::Value;

use super::{NodeRunState, ProcessRef, RunSnapshot};
use crate::event::{EventKind, RuntimeEvent};
use crate::ids::SessionId;

impl RunSnapshot {
    /// Applies an `agent:*` or `process:started` event.
    pub(super) fn apply_agent(&mut self, event: &RuntimeEvent) {
        match &event.kind {
            EventKind::AgentStart {
                session_id,
                provisional,
                inbox,
                call_index,
                instance_call,
                ..
            } => {
                let session = (!provisional).then_some(session_id);
                self.agent_started(event, session, inbox, *call_index, *instance_call);
            }
            EventKind::AgentSession { session_id, .. } => {
                self.agent_session(event, session_id);
            }
            EventKind::ProcessStarted {
                pid,
                start_time,
                host,
            } => {
                if let Some(run) = self.node_run_mut(event) {
                    run.processes.push(ProcessRef {
                        pid: *pid,
                        start_time: *start_time,
                    });
                    if host.is_some() {
                        run.host.clone_from(host);
                    }
                }
            }
            EventKind::AgentError { .. } => {
                if let Some(run) = self.node_run_mut(event) {
                    run.in_turn = false;
                    run.processes.clear();
                }
            }
            EventKind::AgentComplete {
                result,
                structured_output,
                session_id,
                usage,
                total_cost_usd,
                num_turns,
                ..
            } => {
                self.spent.add(usage, *total_cost_usd, *num_turns);
                if let Some(session_id) = session_id {
                    self.agent_session(event, session_id);
                }
                if let Some(run) = self.node_run_mut(event) {
                    run.in_turn = false;
                    run.processes.clear();
                    run.result = Some(match structured_output {
                        Some(value) => value.clone(),
                        None => Value::String(result.clone()),
                    });
                    let before = run.session_usage.take().unwrap_or_default();
                    run.session_usage = Some(before.plus(usage));
                }
                if let Some(node) = &event.node_id {
                    // Its entry is there since its `node:started`: one search.
                    match self.node_spent.get_mut(node) {
                        Some(spent) => spent.add(usage, *total_cost_usd, *num_turns),
                        None => self.node_spent.entry(self.key(node)).or_default().add(
                            usage,
                            *total_cost_usd,
                            *num_turns,
                        ),
                    }
                }
            }
            _ => {}
        }
    }

    /// The node run in flight an event belongs to.
    fn node_run_mut(&mut self, event: &RuntimeEvent) -> Option<&mut NodeRunState> {
        self.node_runs.get_mut(&event.node_run_id?)
    }

    /// An agent invocation began: its node run is in a turn, the messages
    /// its prompt delivers leave the inbox, and a known session is recorded.
    fn agent_started(
        &mut self,
        event: &RuntimeEvent,
        session: Option<&SessionId>,
        inbox: &[u64],
        call_index: Option<u32>,
        instance_call: Option<u32>,
    ) {
        self.inbox.retain(|entry| !inbox.contains(&entry.offset));
        if let (Some(node), Some(index)) = (&event.node_id, call_index) {
            let calls = self.node_calls.entry(self.key(node)).or_insert(0);
            *calls = (*calls).max(index.saturating_add(1));
        }
        if let Some(run) = self.node_run_mut(event) {
            run.in_turn = true;
            run.call_index = call_index;
            run.redo_call = None;
            if let Some(k) = instance_call {
                run.calls = run.calls.max(k.saturating_add(1));
            }
            run.result = None;
            run.forked = false;
        }
        if let Some(session) = session {
            self.agent_session(event, session);
        }
    }

    /// The session a node run's agent runs in (`agentSessions[nodeId]`);
    /// a new one starts its usage baseline from nothing.
    fn agent_session(&mut self, event: &RuntimeEvent, session: &SessionId) {
        if let Some(node) = &event.node_id {
            match self.agent_sessions.get_mut(node) {
                Some(known) => known.clone_from(session),
                None => {
                    self.agent_sessions.insert(self.key(node), session.clone());
                }
            }
        }
        if let Some(run) = self.node_run_mut(event)
            && run.session.as_ref() != Some(session)
        {
            run.session = Some(session.clone());
            run.session_usage = None;
        }
    }
}

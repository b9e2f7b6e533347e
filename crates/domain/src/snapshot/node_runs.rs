//! A node run's start, folded: the bookkeeping of attempts, passes, call
//! indexes and `for_each` items that a `node:started` sets.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use super::{ForEachState, NodeRunState, NodeStatus, RunSnapshot};
use crate::event::RuntimeEvent;
use crate::ids::NodeId;

impl RunSnapshot {
    /// A node run begins, or begins its next attempt.
    pub(super) fn node_started(
        &mut self,
        event: &RuntimeEvent,
        node: &NodeId,
        input: &Arc<Value>,
        attempt: Option<u32>,
        item: Option<u32>,
        items: Option<u32>,
    ) {
        let attempt = attempt.unwrap_or(1);
        if let Some(run) = event.node_run_id.and_then(|id| self.node_runs.get_mut(&id)) {
            // A new attempt starts afresh: no session, no turn, no process;
            // a call the last one was cut off in is redone.
            let redo_call = match run.in_turn {
                true => run.call_index,
                false => run.redo_call,
            };
            *run = NodeRunState {
                redo_call,
                attempt,
                result: None,
                session: None,
                session_usage: None,
                call_index: None,
                in_turn: false,
                processes: Vec::new(),
                host: None,
                child: None,
                forked: false,
                ..run.clone()
            };
            return;
        }
        // The state's copy of the id, found once: a search of the per-node
        // maps costs a string comparison per level, several per event.
        let key = match item {
            Some(_) => self.key(node),
            None => self.set_status(node, NodeStatus::Running),
        };
        let passes = self.node_passes.entry(key.clone()).or_insert(0);
        let iteration = match item {
            // Items share the pass of the node run that spawned them.
            Some(_) => passes.saturating_sub(1),
            None => {
                *passes += 1;
                *passes - 1
            }
        };
        // A node run that may call sets its first call index aside (the
        // one spawning `for_each` items does not call).
        let first_call = items.is_none().then(|| {
            let calls = self.node_calls.entry(self.key(node)).or_insert(0);
            *calls += 1;
            *calls - 1
        });
        if let Some(id) = event.node_run_id {
            self.node_runs.insert(
                id,
                NodeRunState {
                    node_id: key.clone(),
                    attempt,
                    item,
                    iteration,
                    started_at: Some(event.timestamp),
                    input: input.clone(),
                    result: None,
                    session: None,
                    session_usage: None,
                    call_index: None,
                    first_call,
                    calls: 0,
                    redo_call: None,
                    in_turn: false,
                    processes: Vec::new(),
                    host: None,
                    child: None,
                    forked: false,
                    approval: None,
                },
            );
        }
        self.node_spent
            .entry(key)
            .or_default()
            .since
            .get_or_insert(event.timestamp);
        match item {
            Some(index) => {
                if let Some(progress) = self.for_each.get_mut(node) {
                    progress.started = progress.started.max(index.saturating_add(1));
                }
            }
            None => {
                self.steps_started += 1;
                self.outputs.remove(node);
                if items.is_some() {
                    let list = input
                        .get("data")
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default();
                    self.for_each.insert(
                        node.clone(),
                        ForEachState {
                            items: list,
                            outputs: BTreeMap::new(),
                            started: 0,
                        },
                    );
                }
            }
        }
    }
}

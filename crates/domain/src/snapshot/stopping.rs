//! The part of the fold that remembers a stop under way: between the event
//! that decides a run stops (an accepted `cancel` or `pause`, a
//! `budget:exceeded`) and the event that ends it, a writer winds its node
//! runs down and records how each ended. A writer killed in between leaves
//! the decision on record, so whoever continues the run finishes the stop
//! instead of undoing it.

use serde::{Deserialize, Serialize};

use super::RunSnapshot;
use crate::command::RuntimeCommand;
use crate::event::{EventKind, RuntimeEvent};
use crate::ids::NodeId;

/// A stop that was decided and not yet carried out to its end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum Stopping {
    /// An accepted `cancel` command: the run ends `cancelled`.
    Cancel {
        /// Why, as the command said.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// An accepted `pause` command: the run ends `paused`.
    Pause,
    /// A budget ran out (`budget:exceeded`): the run ends `failed`.
    #[serde(rename_all = "camelCase")]
    Budget {
        /// `tokens`, `cost_usd`, `turns` or `deadline`.
        budget: String,
        /// The limit.
        limit: f64,
        /// What was used.
        used: f64,
        /// The node whose budget it is; none for the run's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        node_id: Option<NodeId>,
    },
}

impl RunSnapshot {
    /// Notes a stop that `event` decides, or forgets one it completes.
    pub(super) fn apply_stopping(&mut self, event: &RuntimeEvent) {
        match &event.kind {
            EventKind::CommandReceived {
                command,
                accepted: true,
                ..
            } => match RuntimeCommand::parse(command) {
                Ok(RuntimeCommand::Cancel { reason }) => {
                    self.stopping = Some(Stopping::Cancel { reason });
                }
                // A cancel under way stays one.
                Ok(RuntimeCommand::Pause) if self.stopping.is_none() => {
                    self.stopping = Some(Stopping::Pause);
                }
                _ => {}
            },
            EventKind::BudgetExceeded {
                budget,
                limit,
                used,
            } if self.stopping.is_none() => {
                self.stopping = Some(Stopping::Budget {
                    budget: budget.clone(),
                    limit: *limit,
                    used: *used,
                    node_id: event.node_id.clone(),
                });
            }
            // A fork goes on from the parent's state, not from a stop the
            // parent had decided there.
            EventKind::FlowPaused { .. }
            | EventKind::FlowResumed { .. }
            | EventKind::FlowForked { .. }
            | EventKind::FlowCompleted { .. }
            | EventKind::FlowFailed { .. }
            | EventKind::FlowCancelled { .. } => self.stopping = None,
            _ => {}
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The state after `events`, each the type and fields of one event.
    fn stopping_after(events: &[serde_json::Value]) -> Option<Stopping> {
        let mut state = RunSnapshot::new("7f8c2b1e-3d4a-4b5c-9d6e-1f2a3b4c5d6e".parse().unwrap());
        for (i, body) in events.iter().enumerate() {
            let mut line = json!({
                "id": "00000000-0000-4000-8000-000000000001",
                "offset": i + 1,
                "timestamp": "2026-01-01T00:00:00Z",
                "runId": state.run_id,
            });
            line.as_object_mut()
                .unwrap()
                .extend(body.as_object().unwrap().clone());
            state.apply(&serde_json::from_value(line).unwrap());
        }
        state.stopping
    }

    fn command(command: serde_json::Value, accepted: bool) -> serde_json::Value {
        json!({"type": "command:received", "command": command, "accepted": accepted})
    }

    #[test]
    fn a_decided_stop_is_remembered_until_the_event_that_ends_it() {
        let cancel = command(json!({"type": "cancel", "reason": "r"}), true);
        let pause = command(json!({"type": "pause"}), true);
        let budget =
            json!({"type": "budget:exceeded", "budget": "turns", "limit": 2.0, "used": 3.0});
        let cancelled = Some(Stopping::Cancel {
            reason: Some("r".into()),
        });
        let cases: Vec<(&str, Vec<serde_json::Value>, Option<Stopping>)> = vec![
            ("a cancel", vec![cancel.clone()], cancelled.clone()),
            (
                "a rejected cancel",
                vec![command(json!({"type": "cancel"}), false)],
                None,
            ),
            ("a pause", vec![pause.clone()], Some(Stopping::Pause)),
            (
                "a pause, then a cancel",
                vec![pause.clone(), cancel.clone()],
                cancelled.clone(),
            ),
            (
                "a cancel, then a pause",
                vec![cancel.clone(), pause.clone()],
                cancelled.clone(),
            ),
            (
                "a budget",
                vec![budget.clone()],
                Some(Stopping::Budget {
                    budget: "turns".into(),
                    limit: 2.0,
                    used: 3.0,
                    node_id: None,
                }),
            ),
            (
                "a cancel during a budget stop",
                vec![budget.clone(), cancel.clone()],
                cancelled,
            ),
            (
                "a pause, ended",
                vec![pause.clone(), json!({"type": "flow:paused"})],
                None,
            ),
            (
                "a pause, undone by a resume",
                vec![pause, json!({"type": "flow:resumed"})],
                None,
            ),
            (
                "a cancel, ended",
                vec![cancel, json!({"type": "flow:cancelled"})],
                None,
            ),
            (
                "a budget, ended",
                vec![budget, json!({"type": "flow:failed", "error": "budget"})],
                None,
            ),
            (
                "a message",
                vec![command(
                    json!({"type": "send", "nodeRunId": "00000000-0000-4000-8000-000000000009", "message": "m"}),
                    true,
                )],
                None,
            ),
        ];
        for (what, events, expected) in cases {
            assert_eq!(stopping_after(&events), expected, "{what}");
        }
    }
}

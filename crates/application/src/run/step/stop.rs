//! How a run stops before it completes: what it records before its node
//! runs wind down ([`announce`]), how each node run still open ends
//! ([`closing`]), and the run's own end ([`terminal`]). The driver records
//! each in turn, with the winding down between the first two.

use domain::{EventKind, NodeId, RunSnapshot, RunStatus, Stopping};

use super::budget::Exceeded;
use crate::run::recorder::{Ctx, RUN_LEVEL};

/// Why a run stops before it completes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Stop {
    /// A node failed (its policy stops the run) or routing failed.
    Failed { node: Option<NodeId>, error: String },
    /// A budget ran out.
    Budget(Exceeded),
    /// The run was cancelled.
    Cancelled(String),
    /// The run was paused (a `pause` command): it stops where it is.
    Paused(String),
    /// Everything in flight waits for a person: the run stops `waiting`.
    Waiting,
}

/// The stop a failure of `node` (on `for_each` item `item`) makes, when
/// the node does not continue on error.
pub(crate) fn node_failed(node: &NodeId, item: Option<u32>, error: &str) -> Stop {
    let error = match item {
        Some(i) => format!("node `{node}` failed on item {i}: {error}"),
        None => format!("node `{node}` failed: {error}"),
    };
    Stop::Failed {
        node: Some(node.clone()),
        error,
    }
}

/// What a stop records before its node runs wind down: `budget:exceeded`
/// for a budget, unless a dead writer that began this stop recorded it
/// already (the state's `stopping` says so). Decided before it takes
/// effect, so a writer killed while winding down leaves the stop to the
/// next one to finish.
pub(crate) fn announce(state: &RunSnapshot, stop: &Stop) -> Option<(Ctx, EventKind)> {
    let Stop::Budget(exceeded) = stop else {
        return None;
    };
    if matches!(state.stopping, Some(Stopping::Budget { .. })) {
        return None;
    }
    let kind = EventKind::BudgetExceeded {
        budget: exceeded.budget.clone(),
        limit: exceeded.limit,
        used: exceeded.used,
    };
    Some(((exceeded.node.clone(), None), kind))
}

/// How the `error` of every `node:failed` that [`closing`] writes begins
/// (docs/events.md): what tells a node run the stop ended from the failure
/// that caused the stop, when a resume reads the log back.
const CLOSED: &str = "cancelled";

/// Whether a `node:failed` with `error` is one a stop wrote for a node run
/// it ended ([`closing`]), rather than a node run's own failure.
pub(crate) fn closed_by_stop(error: &str) -> bool {
    error.starts_with(CLOSED)
}

/// Once the node runs have wound down: `node:failed` for every node run
/// still open, saying why the run stopped it.
pub(crate) fn closing(state: &RunSnapshot, stop: &Stop) -> Vec<(Ctx, EventKind)> {
    let why = match stop {
        Stop::Failed { error, .. } => format!("{CLOSED} because the run failed: {error}"),
        Stop::Budget(e) => format!("{CLOSED}: the {} budget ran out", e.budget),
        Stop::Cancelled(reason) => format!("{CLOSED}: {reason}"),
        Stop::Paused(_) | Stop::Waiting => String::new(),
    };
    let mut events = Vec::with_capacity(state.node_runs.len());
    for (run, r) in &state.node_runs {
        let ctx: Ctx = (Some(r.node_id.clone()), Some(*run));
        // A question still open is withdrawn, on record, before its node
        // run ends.
        if r.approval.as_ref().is_some_and(|q| q.answer.is_none()) {
            events.push((ctx.clone(), super::approval::withdrawn(why.clone())));
        }
        let failed = EventKind::NodeFailed {
            error: why.clone(),
            continued: false,
        };
        events.push((ctx, failed));
    }
    events
}

/// The run's end after `duration_ms`: `flow:failed` for a failure or a
/// budget, `flow:cancelled` otherwise, with the status and the error the
/// run's outcome reports.
pub(crate) fn terminal(stop: Stop, duration_ms: u64) -> (Ctx, EventKind, RunStatus, String) {
    let (status, error, kind) = match stop {
        Stop::Failed { node, error } => (
            RunStatus::Failed,
            error.clone(),
            EventKind::FlowFailed {
                error,
                failed_node: node,
                duration_ms,
            },
        ),
        Stop::Budget(e) => {
            let error = format!(
                "the {} budget ran out: {} used, limit {}",
                e.budget, e.used, e.limit
            );
            let kind = EventKind::FlowFailed {
                error: error.clone(),
                failed_node: e.node,
                duration_ms,
            };
            (RunStatus::Failed, error, kind)
        }
        Stop::Waiting => {
            let reason = "waiting for a person".to_owned();
            let kind = EventKind::FlowCancelled {
                reason: Some(reason.clone()),
            };
            (RunStatus::Cancelled, reason, kind)
        }
        Stop::Cancelled(reason) | Stop::Paused(reason) => (
            RunStatus::Cancelled,
            reason.clone(),
            EventKind::FlowCancelled {
                reason: Some(reason),
            },
        ),
    };
    (RUN_LEVEL, kind, status, error)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use domain::snapshot::NodeRunState;
    use domain::{NodeRunId, RunId};
    use serde_json::{Value, json};

    use super::*;

    fn node(name: &str) -> NodeId {
        NodeId::new(name).unwrap()
    }

    fn exceeded(node: Option<&str>) -> Exceeded {
        Exceeded {
            budget: "tokens".into(),
            limit: 100.0,
            used: 120.0,
            node: node.map(self::node),
        }
    }

    /// A running run with node runs of `nodes` in flight.
    fn state(nodes: &[&str]) -> RunSnapshot {
        let run = RunId::new(uuid::Uuid::from_u128(0x4000_8000_0000_0000_0001)).unwrap();
        let mut state = RunSnapshot::new(run);
        state.status = RunStatus::Running;
        for (i, name) in nodes.iter().enumerate() {
            let r: NodeRunState =
                serde_json::from_value(json!({"nodeId": name, "attempt": 1})).unwrap();
            let id = NodeRunId::new(uuid::Uuid::from_u128(
                0x4000_8000_0000_0000_0100 + i as u128,
            ));
            state.node_runs.insert(id, r);
        }
        state
    }

    /// An event as `type` and its fields, for a table.
    fn shown((ctx, kind): &(Ctx, EventKind)) -> (Option<String>, Value) {
        let value = serde_json::to_value(kind).unwrap();
        (ctx.0.as_ref().map(ToString::to_string), value)
    }

    #[test]
    fn only_a_budget_not_yet_on_record_is_announced() {
        let stop = Stop::Budget(exceeded(Some("a")));
        let announced = announce(&state(&[]), &stop).map(|e| shown(&e));
        assert_eq!(
            announced,
            Some((
                Some("a".into()),
                json!({"type": "budget:exceeded", "budget": "tokens", "limit": 100.0, "used": 120.0})
            ))
        );
        let mut begun = state(&[]);
        begun.stopping = Some(Stopping::Budget {
            budget: "tokens".into(),
            limit: 100.0,
            used: 120.0,
            node_id: None,
        });
        assert_eq!(announce(&begun, &stop), None, "a dead writer recorded it");
        for other in [
            Stop::Cancelled("by a test".into()),
            Stop::Failed {
                node: None,
                error: "boom".into(),
            },
        ] {
            assert_eq!(announce(&state(&[]), &other), None, "{other:?}");
        }
    }

    #[test]
    fn every_node_run_still_open_fails_saying_why_the_run_stopped() {
        let cases = [
            (
                Stop::Failed {
                    node: Some(node("a")),
                    error: "exit 3".into(),
                },
                "cancelled because the run failed: exit 3",
            ),
            (
                Stop::Budget(exceeded(None)),
                "cancelled: the tokens budget ran out",
            ),
            (
                Stop::Cancelled("by a command".into()),
                "cancelled: by a command",
            ),
        ];
        for (stop, why) in cases {
            let events = closing(&state(&["a", "b"]), &stop);
            let shown: Vec<_> = events.iter().map(shown).collect();
            let failed = |n: &str| {
                (
                    Some(n.to_owned()),
                    json!({"type": "node:failed", "error": why, "continued": false}),
                )
            };
            assert_eq!(shown, [failed("a"), failed("b")], "{stop:?}");
            assert!(events.iter().all(|((_, run), _)| run.is_some()));
            assert!(closed_by_stop(why), "a resume tells {why:?} from a cause");
        }
        assert!(closing(&state(&[]), &Stop::Cancelled("x".into())).is_empty());
        assert!(!closed_by_stop("the command exited with code 3"));
    }

    #[test]
    fn a_failure_or_a_budget_fails_the_run_and_a_cancel_cancels_it() {
        let table = [
            (
                Stop::Failed {
                    node: Some(node("a")),
                    error: "node `a` failed: exit 3".into(),
                },
                json!({"type": "flow:failed", "error": "node `a` failed: exit 3", "failedNode": "a", "durationMs": 7}),
                RunStatus::Failed,
                "node `a` failed: exit 3",
            ),
            (
                Stop::Budget(exceeded(Some("b"))),
                json!({"type": "flow:failed", "error": "the tokens budget ran out: 120 used, limit 100", "failedNode": "b", "durationMs": 7}),
                RunStatus::Failed,
                "the tokens budget ran out: 120 used, limit 100",
            ),
            (
                Stop::Cancelled("by a command".into()),
                json!({"type": "flow:cancelled", "reason": "by a command"}),
                RunStatus::Cancelled,
                "by a command",
            ),
        ];
        for (stop, event, status, error) in table {
            let (ctx, kind, got_status, got_error) = terminal(stop, 7);
            assert_eq!(ctx, RUN_LEVEL);
            assert_eq!(serde_json::to_value(&kind).unwrap(), event);
            assert_eq!((got_status, got_error.as_str()), (status, error));
        }
    }
}

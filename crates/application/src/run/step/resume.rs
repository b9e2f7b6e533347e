//! A run is continued (a resume, a recovery, a fork): the stop its last
//! writer had decided and not finished ([`stop_under_way`]), the step it
//! died in, read off the end of its log ([`LastStep`]), and what is left of
//! that step: the edge events of a routing not on record
//! ([`rest_of_routing`]), or the stop a failure was making
//! ([`stop::node_failed`](super::stop::node_failed)).

use domain::WorkflowDef;
use domain::{EventKind, NodeId, NodeRunId, NodeStatus, RunSnapshot, RuntimeEvent, Stopping};
use serde_json::Value;

use super::budget::Exceeded;
use super::stop::{Stop, closed_by_stop};
use crate::run::Continue;
use crate::run::recorder::Ctx;
use crate::run::routing;

/// The stop the previous writer had decided and not finished, if the run
/// is to finish it: a cancel or a budget always; a pause when the run is
/// recovered, not when it is explicitly resumed or forked.
pub(crate) fn stop_under_way(state: &RunSnapshot, how: &Continue) -> Option<Stop> {
    Some(match state.stopping.clone()? {
        Stopping::Cancel { reason } => {
            Stop::Cancelled(reason.unwrap_or_else(|| "cancelled by a command".to_owned()))
        }
        Stopping::Budget {
            budget,
            limit,
            used,
            node_id,
        } => Stop::Budget(Exceeded {
            budget,
            limit,
            used,
            node: node_id,
        }),
        Stopping::Pause => match how {
            Continue::Recover => Stop::Paused("paused by a command".to_owned()),
            Continue::Resume(..) | Continue::Fork => return None,
        },
    })
}

/// The edge events of `node`'s routing that are not `recorded`, decided
/// again on the state: routing reads outputs and counters, which edge
/// events do not change, so it is the routing that was under way. `None`
/// when the node has not ended whole (a loop edge that fired sent it back
/// to pending): there is no routing to finish. The stop routing asks for,
/// as it did the first time.
pub(crate) fn rest_of_routing(
    state: &RunSnapshot,
    workflow: &WorkflowDef,
    node: &NodeId,
    recorded: &[String],
    run_input: &Value,
) -> Result<Option<Vec<(Ctx, EventKind)>>, Stop> {
    let ended = match routing::node_status(state, node) {
        NodeStatus::Done => true,
        NodeStatus::Failed => workflow
            .node(node)
            .is_some_and(|n| workflow.continues_on_error(n)),
        _ => false,
    };
    if !ended {
        return Ok(None);
    }
    let data = routing::data_of(state, node);
    let kinds =
        routing::route(state, workflow, node, &data, run_input).map_err(|error| Stop::Failed {
            node: Some(node.clone()),
            error,
        })?;
    Ok(Some(
        kinds
            .into_iter()
            .filter(|kind| match kind {
                EventKind::EdgeFired { edge_id, .. } | EventKind::EdgeSkipped { edge_id, .. } => {
                    !recorded.contains(edge_id)
                }
                _ => false,
            })
            .map(|kind| ((Some(node.clone()), None), kind))
            .collect(),
    ))
}

/// What a writer was in the middle of when it died.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum LastStep {
    /// Routing `node`'s end; the edges `recorded` are on record.
    Routing { node: NodeId, recorded: Vec<String> },
    /// Stopping the run for `node`'s failure `error` (of its node run `run`).
    Failing {
        node: NodeId,
        run: Option<NodeRunId>,
        error: String,
    },
}

impl LastStep {
    /// Read off `tail`, the last events of a log (`whole`: all of it);
    /// `None` when the answer lies further back.
    pub(crate) fn of(tail: &[RuntimeEvent], whole: bool) -> Option<Option<Self>> {
        let mut recorded = Vec::new();
        // The stopping failures at the end, latest first: the first of them
        // is the cause, the others the node runs it cancelled.
        let mut failing: Option<&RuntimeEvent> = None;
        for event in tail.iter().rev() {
            match &event.kind {
                EventKind::NodeFailed {
                    continued: false, ..
                } if recorded.is_empty() => failing = Some(event),
                _ if failing.is_some() => return Some(Self::failing(failing)),
                EventKind::EdgeFired { edge_id, .. } | EventKind::EdgeSkipped { edge_id, .. } => {
                    recorded.push(edge_id.clone());
                }
                // A fork's mark stands after the step its parent was in.
                EventKind::StateSaved { .. } | EventKind::FlowForked { .. } => {}
                EventKind::NodeCompleted { .. } | EventKind::NodeFailed { .. } => {
                    let node = event.node_id.clone()?;
                    return Some(Some(Self::Routing { node, recorded }));
                }
                _ => return Some(None),
            }
        }
        if !whole {
            return None;
        }
        Some(Self::failing(failing))
    }

    /// The failure `cause` was stopping the run with, unless it is one the
    /// stop itself wrote (a cancelled node run), whose cause is not on record.
    fn failing(cause: Option<&RuntimeEvent>) -> Option<Self> {
        let cause = cause?;
        let EventKind::NodeFailed { error, .. } = &cause.kind else {
            return None;
        };
        if closed_by_stop(error) {
            return None;
        }
        Some(Self::Failing {
            node: cause.node_id.clone()?,
            run: cause.node_run_id,
            error: error.clone(),
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const RUN: &str = "7f8c2b1e-3d4a-4b5c-9d6e-1f2a3b4c5d6e";

    /// Events from `(node, body)` pairs, offsets 1.., each `body` the
    /// event's type and fields as JSON.
    fn log(events: &[(&str, &str)]) -> Vec<RuntimeEvent> {
        events
            .iter()
            .enumerate()
            .map(|(i, (node, body))| {
                let line = format!(
                    r#"{{"id":"00000000-0000-4000-8000-00000000000{}","offset":{},"timestamp":"2026-01-01T00:00:00Z","runId":"{RUN}","nodeId":"{node}",{body}}}"#,
                    i,
                    i + 1
                );
                serde_json::from_str(&line).unwrap()
            })
            .collect()
    }

    #[test]
    fn an_end_followed_by_some_of_its_edges_is_a_routing_under_way() {
        let tail = log(&[
            ("a", r#""type":"node:completed","output":{"data":1}"#),
            (
                "a",
                r#""type":"edge:fired","edgeId":"a->b","from":"a","to":"b""#,
            ),
        ]);
        match LastStep::of(&tail, true) {
            Some(Some(LastStep::Routing { node, recorded })) => {
                assert_eq!(node.as_str(), "a");
                assert_eq!(recorded, ["a->b"]);
            }
            _ => panic!("not a routing under way"),
        }
    }

    #[test]
    fn the_first_of_the_stopping_failures_at_the_end_is_the_cause() {
        let tail = log(&[
            ("a", r#""type":"node:started","input":null"#),
            ("a", r#""type":"node:failed","error":"exit 3""#),
            (
                "b",
                r#""type":"node:failed","error":"cancelled because the run failed: exit 3""#,
            ),
        ]);
        match LastStep::of(&tail, false) {
            Some(Some(LastStep::Failing { node, error, .. })) => {
                assert_eq!(node.as_str(), "a");
                assert_eq!(error, "exit 3");
            }
            _ => panic!("not a failure under way"),
        }
        // All of the tail failures: the cause may lie further back.
        assert!(LastStep::of(&tail[1..], false).is_none());
    }

    #[test]
    fn a_stop_whose_cause_is_not_on_record_and_a_started_node_are_no_step() {
        let cancelled = log(&[("a", r#""type":"node:failed","error":"cancelled: SIGINT""#)]);
        assert!(matches!(LastStep::of(&cancelled, true), Some(None)));
        let started = log(&[("a", r#""type":"node:started","input":null"#)]);
        assert!(matches!(LastStep::of(&started, true), Some(None)));
    }

    fn stopping(stopping: Option<Stopping>) -> RunSnapshot {
        let mut state = RunSnapshot::new(RUN.parse().unwrap());
        state.stopping = stopping;
        state
    }

    /// The table: what the state says was stopping, how the run is
    /// continued; then the stop the continuation finishes.
    #[test]
    fn a_cancel_or_a_budget_under_way_is_finished_and_a_pause_only_on_recovery() {
        let resume = || Continue::Resume("go on".into(), None);
        let cancel = |reason: Option<&str>| Stopping::Cancel {
            reason: reason.map(str::to_owned),
        };
        let budget = Stopping::Budget {
            budget: "turns".into(),
            limit: 2.0,
            used: 3.0,
            node_id: Some(NodeId::new("a").unwrap()),
        };
        let table = [
            (None, resume(), None),
            (
                Some(cancel(Some("enough"))),
                Continue::Fork,
                Some(Stop::Cancelled("enough".into())),
            ),
            (
                Some(cancel(None)),
                resume(),
                Some(Stop::Cancelled("cancelled by a command".into())),
            ),
            (
                Some(budget),
                Continue::Recover,
                Some(Stop::Budget(Exceeded {
                    budget: "turns".into(),
                    limit: 2.0,
                    used: 3.0,
                    node: Some(NodeId::new("a").unwrap()),
                })),
            ),
            (
                Some(Stopping::Pause),
                Continue::Recover,
                Some(Stop::Paused("paused by a command".into())),
            ),
            (Some(Stopping::Pause), resume(), None),
            (Some(Stopping::Pause), Continue::Fork, None),
        ];
        for (under_way, how, stop) in table {
            let case = format!("{under_way:?}");
            assert_eq!(stop_under_way(&stopping(under_way), &how), stop, "{case}");
        }
    }

    /// The table: the log up to the kill, the edges on record; then the
    /// edge events the resume still records (`None`: no routing to finish).
    #[test]
    fn the_edges_of_a_routing_under_way_not_on_record_are_recorded() {
        let workflow = WorkflowDef::from_yaml(
            "name: w\nagents:\n  m: {provider: mock}\n\
             nodes: [{id: a, agent: m}, {id: b, agent: m}, {id: c, agent: m}]\n\
             edges: [{from: a, to: b}, {from: a, to: c, when: 'false'}]\n",
        )
        .unwrap();
        let started = (
            "a",
            r#""type":"node:started","nodeRunId":"00000000-0000-4000-8000-0000000000a1","input":null"#,
        );
        let completed = (
            "a",
            r#""type":"node:completed","nodeRunId":"00000000-0000-4000-8000-0000000000a1","output":{"data":1,"metadata":{}}"#,
        );
        let edges = |state: &RunSnapshot, recorded: &[&str]| {
            let recorded: Vec<String> = recorded.iter().map(|e| (*e).to_owned()).collect();
            let node = NodeId::new("a").unwrap();
            rest_of_routing(state, &workflow, &node, &recorded, &Value::Null).map(|rest| {
                rest.map(|edges| {
                    edges
                        .into_iter()
                        .map(|(_, kind)| serde_json::to_value(kind).unwrap()["type"].clone())
                        .collect::<Vec<_>>()
                })
            })
        };
        let ended = RunSnapshot::fold(&log(&[started, completed])).unwrap();
        let fired = serde_json::json!("edge:fired");
        let skipped = serde_json::json!("edge:skipped");
        assert_eq!(edges(&ended, &[]), Ok(Some(vec![fired.clone(), skipped])));
        assert_eq!(edges(&ended, &["a->c"]), Ok(Some(vec![fired])));
        assert_eq!(edges(&ended, &["a->b", "a->c"]), Ok(Some(vec![])));
        let running = RunSnapshot::fold(&log(&[started])).unwrap();
        assert_eq!(edges(&running, &[]), Ok(None));
    }
}

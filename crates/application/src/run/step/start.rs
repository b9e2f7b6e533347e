//! The scheduler's actions, recorded: a node run that starts ([`started`])
//! and a node that will not run in this pass ([`skipped`]); and a provider
//! call that starts, numbered ([`numbered`]). Which ones
//! happen is `run::decide`'s; what each records, and what follows, is
//! decided here.

use std::sync::Arc;

use domain::{EventKind, NodeId, NodeRunId, RunSnapshot, WorkflowDef};
use serde_json::Value;

use super::{Effect, Input, Step};
use crate::run::node_run::{Ack, NodeEnd};
use crate::run::routing;

/// Node run `run` of `node` starts with `input` (`Err`: why its input
/// could not be computed), on `for_each` item `item`, or as a `for_each`
/// node's own run over `items` items. Its `node:started` is recorded, then
/// its task starts; a node run of a `for_each` node's own has no task (its
/// items are started next), and one that cannot run fails at once.
pub(crate) fn started(
    workflow: &WorkflowDef,
    run: NodeRunId,
    node: NodeId,
    input: Result<Value, String>,
    item: Option<u32>,
    items: Option<u32>,
) -> Step {
    let (input, broken) = match input {
        Ok(input) => (Arc::new(input), None),
        Err(error) => (Arc::default(), Some(error)),
    };
    let started = EventKind::NodeStarted {
        input: Arc::clone(&input),
        attempt: Some(1),
        item,
        items,
    };
    let missing = || format!("node `{node}` is not in the workflow");
    let effect = match broken {
        Some(error) => Some(failed(run, node.clone(), error)),
        None if items.is_some() => None,
        None if workflow.node(&node).is_none() => Some(failed(run, node.clone(), missing())),
        None => Some(Effect::Spawn { run, input }),
    };
    Step {
        events: smallvec::smallvec![((Some(node), Some(run)), started)],
        effects: effect.into_iter().collect(),
    }
}

/// `node` will not run in this pass: `node:skipped`, and each of its
/// outgoing edges skipped.
pub(crate) fn skipped(workflow: &WorkflowDef, node: NodeId, reason: &str) -> Step {
    let ctx = (Some(node.clone()), None);
    let skipped = EventKind::NodeSkipped {
        reason: reason.to_owned(),
    };
    let edges = workflow
        .outgoing(&node)
        .map(|edge| (ctx.clone(), routing::skipped(edge, "source skipped")));
    Step {
        events: std::iter::once((ctx.clone(), skipped))
            .chain(edges)
            .collect(),
        effects: Default::default(),
    }
}

/// An `agent:start` of node run `run` of `node` numbered: its `callIndex`
/// among the node's provider calls in the run (the mock provider serves
/// its recorded call by it), its node run's position (`instance`) and its
/// number among that node run's calls (`instanceCall`). A call redone after
/// a crash comes with its index (`redone`), or is the one an earlier
/// attempt was cut off in (`redoCall` on record: the process that started
/// this attempt died before it began the call), and is the last its node
/// run started.
pub(crate) fn numbered(
    state: &RunSnapshot,
    run: NodeRunId,
    node: &NodeId,
    redone: Option<u32>,
) -> Ack {
    let current = state.node_runs.get(&run);
    let redone = redone.or_else(|| current.and_then(|s| s.redo_call));
    let first = current.and_then(|s| s.first_call.filter(|_| s.calls == 0));
    let calls = || state.node_calls.get(node).copied().unwrap_or(0);
    let call_index = redone.or(first).unwrap_or_else(calls);
    let (instance, instance_call) = current.map_or_else(
        || (String::new(), 0),
        |current| {
            let k = match redone {
                Some(_) => current.calls.saturating_sub(1),
                None => current.calls,
            };
            (current.instance(), k)
        },
    );
    Ack {
        call_index,
        instance,
        instance_call,
        traceparent: None,
    }
}

fn failed(run: NodeRunId, node: NodeId, error: String) -> Effect {
    let end = NodeEnd::failed(error);
    Effect::Then(Input::NodeEnded { run, node, end })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use domain::RunId;
    use domain::snapshot::NodeRunState;
    use serde_json::json;

    use super::*;

    /// The table: the node run's calls so far, its first call's index and
    /// the call an earlier attempt was cut off in on record, the index of a
    /// call redone; then the `callIndex` and the `instanceCall` the
    /// `agent:start` gets. The node has made 5 calls.
    #[test]
    fn a_provider_call_is_numbered_among_its_nodes_and_its_node_runs_calls() {
        let run = NodeRunId::new(uuid::Uuid::from_u128(0x4000_8000_0000_0000_0100));
        let node = NodeId::new("a").unwrap();
        let table = [
            (0, None, None, None, (5, 0)),
            (0, Some(2), None, None, (2, 0)),
            (1, Some(2), None, None, (5, 1)),
            (2, Some(2), None, Some(7), (7, 1)),
            // A new attempt, cut off before it began the call to redo.
            (1, Some(0), Some(0), None, (0, 0)),
            (3, Some(0), Some(2), None, (2, 2)),
        ];
        for (calls, first, redo, redone, (index, k)) in table {
            let mut state = RunSnapshot::new(
                RunId::new(uuid::Uuid::from_u128(0x4000_8000_0000_0000_0001)).unwrap(),
            );
            state.node_calls.insert(node.clone(), 5);
            let r: NodeRunState = serde_json::from_value(json!({
                "nodeId": "a", "calls": calls, "firstCall": first, "redoCall": redo,
                "iteration": 3
            }))
            .unwrap();
            let instance = r.instance();
            state.node_runs.insert(run, r);
            let call = numbered(&state, run, &node, redone);
            let case = format!("calls {calls}, first {first:?}, redo {redo:?}, redone {redone:?}");
            assert_eq!((call.call_index, call.instance_call), (index, k), "{case}");
            assert_eq!(call.instance, instance, "{case}");
        }
        let empty = RunSnapshot::new(
            RunId::new(uuid::Uuid::from_u128(0x4000_8000_0000_0000_0001)).unwrap(),
        );
        let gone = numbered(&empty, run, &node, None);
        assert_eq!((gone.call_index, gone.instance.as_str()), (0, ""));
    }
}

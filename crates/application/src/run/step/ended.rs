//! A node run ended: what records its end ([`ended`]), how a whole node's
//! data then goes along its edges ([`routed`]), and how a `for_each` node
//! ends once its items have ([`items_end`]).

use domain::{NodeId, NodeRunId, RunSnapshot, Timestamp, WorkflowDef};
use serde_json::{Value, json};

use super::stop::{self, Stop};
use crate::run::node_run::NodeEnd;
use crate::run::recorder::Ctx;
use crate::run::routing;

/// What follows a node run's end, once it is recorded.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum After {
    /// The node failed and its policy stops the run.
    Stop(Stop),
    /// An item of a `for_each` node ended: the node ends with its last.
    Item,
    /// The node ended whole: its data goes along its edges ([`routed`]).
    Route(Value),
}

/// The event that records how node run `run` of `node` ended, and what
/// follows. A failure stops the run unless the node continues on error.
pub(crate) fn ended(
    state: &RunSnapshot,
    workflow: &WorkflowDef,
    run: NodeRunId,
    node: &NodeId,
    end: NodeEnd,
) -> ((Ctx, domain::EventKind), After) {
    let item = state.node_runs.get(&run).and_then(|r| r.item);
    let continues = workflow
        .node(node)
        .is_some_and(|n| workflow.continues_on_error(n));
    let ctx: Ctx = (Some(node.clone()), Some(run));
    let after = match (&end.error, item) {
        (Some(error), _) if !continues => After::Stop(stop::node_failed(node, item, error)),
        (_, Some(_)) => After::Item,
        (_, None) => After::Route(end.data.clone()),
    };
    ((ctx, end.into_event(continues)), after)
}

/// The edge events of `node`, which ended whole with `data`, decided on
/// the state with its end recorded; a condition that cannot be evaluated
/// or a loop limit reached stops the run, naming the edge.
pub(crate) fn routed(
    state: &RunSnapshot,
    workflow: &WorkflowDef,
    node: &NodeId,
    data: &Value,
    run_input: &Value,
) -> Result<Vec<(Ctx, domain::EventKind)>, Stop> {
    match routing::route(state, workflow, node, data, run_input) {
        Ok(kinds) => Ok(kinds
            .into_iter()
            .map(|kind| ((Some(node.clone()), None), kind))
            .collect()),
        Err(error) => Err(Stop::Failed {
            node: Some(node.clone()),
            error,
        }),
    }
}

/// Every item of the `for_each` node `node` finished: its own node run and
/// how it ends, with the items' data in item order and the time since it
/// started (`now` is asked only then: a replay's clock counts its
/// readings). `None` when the node has no run of its own in flight.
pub(crate) fn items_end(
    state: &RunSnapshot,
    workflow: &WorkflowDef,
    node: &NodeId,
    now: impl FnOnce() -> Timestamp,
) -> Option<(NodeRunId, NodeEnd)> {
    let (run, own) = state
        .node_runs
        .iter()
        .find(|(_, r)| &r.node_id == node && r.item.is_none())?;
    let outputs: Vec<Value> = state
        .for_each
        .get(node)
        .map(|p| p.outputs.values().cloned().collect())
        .unwrap_or_default();
    let elapsed = own.started_at.map_or(0, |at| now().millis_since(at));
    let mut metadata = json!({ "items": outputs.len(), "execution_time_ms": elapsed });
    if let Some((name, _)) = workflow.node(node).and_then(|n| workflow.agent_of(n)) {
        metadata["agent_name"] = Value::String(name.to_owned());
    }
    let end = NodeEnd {
        data: Value::Array(outputs),
        metadata,
        error: None,
    };
    Some((*run, end))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use domain::snapshot::{ForEachState, NodeRunState};
    use domain::{RunId, RunStatus};

    use super::*;

    fn workflow(rest: &str) -> WorkflowDef {
        let yaml = format!(
            "name: w\nagents: {{a: {{provider: mock}}, b: {{provider: mock}}, \
             lenient: {{provider: mock, policy: {{continue_on_error: true}}}}}}\n{rest}"
        );
        WorkflowDef::from_yaml(&yaml).unwrap()
    }

    fn id(name: &str) -> NodeId {
        NodeId::new(name).unwrap()
    }

    fn run_id(n: u128) -> NodeRunId {
        NodeRunId::new(uuid::Uuid::from_u128(0x4000_8000_0000_0000_0100 + n))
    }

    /// A running run with node runs `(n, node, item)` in flight, each
    /// started at 2026-01-01T00:00:00Z.
    fn state(runs: &[(u128, &str, Option<u32>)]) -> RunSnapshot {
        let run = RunId::new(uuid::Uuid::from_u128(0x4000_8000_0000_0000_0001)).unwrap();
        let mut state = RunSnapshot::new(run);
        state.status = RunStatus::Running;
        for (n, node, item) in runs {
            let r: NodeRunState = serde_json::from_value(
                json!({"nodeId": node, "attempt": 1, "item": item, "startedAt": "2026-01-01T00:00:00Z"}),
            )
            .unwrap();
            state.node_runs.insert(run_id(*n), r);
        }
        state
    }

    fn end(data: Value, error: Option<&str>) -> NodeEnd {
        NodeEnd {
            data,
            metadata: json!({}),
            error: error.map(str::to_owned),
        }
    }

    /// The table: the workflow, the node run's item, how it ended; then the
    /// event recorded and what follows.
    #[test]
    fn an_end_is_recorded_then_stops_routes_or_waits_for_the_other_items() {
        let plain = "nodes: [{id: x, agent: a}]\n";
        let lenient = "nodes: [{id: x, agent: lenient}]\n";
        let table = [
            (
                plain,
                None,
                end(json!("ok"), None),
                "node:completed",
                After::Route(json!("ok")),
            ),
            (
                plain,
                None,
                end(Value::Null, Some("exit 3")),
                "node:failed",
                After::Stop(Stop::Failed {
                    node: Some(id("x")),
                    error: "node `x` failed: exit 3".into(),
                }),
            ),
            (
                plain,
                Some(2),
                end(Value::Null, Some("exit 3")),
                "node:failed",
                After::Stop(Stop::Failed {
                    node: Some(id("x")),
                    error: "node `x` failed on item 2: exit 3".into(),
                }),
            ),
            (
                lenient,
                None,
                end(Value::Null, Some("exit 3")),
                "node:failed",
                After::Route(Value::Null),
            ),
            (
                plain,
                Some(1),
                end(json!("one"), None),
                "node:completed",
                After::Item,
            ),
        ];
        for (wf, item, end, recorded, after) in table {
            let wf = workflow(wf);
            let state = state(&[(1, "x", item)]);
            let ((ctx, kind), got) = ended(&state, &wf, run_id(1), &id("x"), end);
            assert_eq!(ctx, (Some(id("x")), Some(run_id(1))));
            let event = serde_json::to_value(&kind).unwrap();
            assert_eq!(event["type"], recorded, "{event}");
            if recorded == "node:failed" {
                let continued = wf.continues_on_error(&wf.nodes[0]);
                assert_eq!(event["continued"], continued, "{event}");
            }
            assert_eq!(got, after, "{item:?}");
        }
    }

    #[test]
    fn a_whole_node_routes_along_its_edges_or_stops_on_a_bad_condition() {
        let wf = workflow(
            "nodes: [{id: a, agent: a}, {id: b, agent: b}]\nedges: [{from: a, to: b, when: 'output == \"go\"'}]\n",
        );
        let state = state(&[]);
        let go = routed(&state, &wf, &id("a"), &json!("go"), &Value::Null).unwrap();
        let types: Vec<Value> = go
            .iter()
            .map(|(ctx, kind)| {
                assert_eq!(ctx, &(Some(id("a")), None));
                serde_json::to_value(kind).unwrap()["type"].clone()
            })
            .collect();
        assert_eq!(types, [json!("edge:fired")]);
        let stay = routed(&state, &wf, &id("a"), &json!("stay"), &Value::Null).unwrap();
        let kind = serde_json::to_value(&stay[0].1).unwrap();
        assert_eq!(kind["type"], "edge:skipped");
        let broken = workflow(
            "nodes: [{id: a, agent: a}, {id: b, agent: b}]\nedges: [{from: a, to: b, when: 'output.size() > 1'}]\n",
        );
        match routed(&state, &broken, &id("a"), &json!(7), &Value::Null) {
            Err(Stop::Failed { node, error }) => {
                assert_eq!(node, Some(id("a")));
                assert!(error.contains("a->b"), "{error}");
            }
            other => panic!("not a stop: {other:?}"),
        }
    }

    #[test]
    fn a_for_each_node_ends_with_its_items_data_in_item_order() {
        let wf = workflow("nodes: [{id: x, agent: a, for_each: {items: '[1, 2]'}}]\n");
        let mut state = state(&[(1, "x", None)]);
        let progress = ForEachState {
            items: vec![json!(1), json!(2)],
            outputs: [(1, json!("two")), (0, json!("one"))].into(),
            started: 2,
        };
        state.for_each.insert(id("x"), progress);
        let now = Timestamp::from_millis(1_767_225_600_000 + 1_500);
        let (run, end) = items_end(&state, &wf, &id("x"), || now).unwrap();
        assert_eq!(run, run_id(1));
        assert_eq!(end.data, json!(["one", "two"]));
        assert_eq!(
            end.metadata,
            json!({"items": 2, "execution_time_ms": 1_500, "agent_name": "a"})
        );
        assert_eq!(end.error, None);
        let unasked = || -> Timestamp { panic!("the clock is read for nothing") };
        assert!(items_end(&self::state(&[]), &wf, &id("x"), unasked).is_none());
    }
}

//! [`decide`] as a table: a folded state and a workflow in, the decision
//! out, with no executor, no process and no clock (plain `#[test]`s, no
//! tokio). Each case is the state written as data: the statuses of nodes
//! and edges, the outputs, the node runs in flight and the `for_each`
//! progress a log would have folded into.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use domain::snapshot::{ForEachState, NodeRunState};
use domain::{
    EdgeStatus, JsonText, NodeId, NodeRunId, NodeStatus, RunId, RunSnapshot, RunStatus, WorkflowDef,
};
use serde_json::{Value, json};

use super::decide::{Action, decide};

/// A workflow of `mock` agents `a`, `b`, ... from its nodes and edges.
fn workflow(rest: &str) -> WorkflowDef {
    let yaml = format!(
        "name: table\nagents: {{a: {{provider: mock}}, b: {{provider: mock}}, c: {{provider: mock}}}}\n{rest}"
    );
    WorkflowDef::from_yaml(&yaml).unwrap()
}

fn id(name: &str) -> NodeId {
    NodeId::new(name).unwrap()
}

/// A running run with nothing decided yet.
fn running() -> RunSnapshot {
    let mut state =
        RunSnapshot::new(RunId::new(uuid::Uuid::from_u128(0x4000_8000_0000_0000_0001)).unwrap());
    state.status = RunStatus::Running;
    state
}

/// `node` finished with `data`.
fn done(state: &mut RunSnapshot, node: &str, data: Value) {
    state.node_status.insert(id(node), NodeStatus::Done);
    let output = json!({"data": data, "metadata": {}});
    state.outputs.insert(id(node), JsonText::from(output));
}

fn edge(state: &mut RunSnapshot, edge: &str, status: EdgeStatus) {
    state.edge_status.insert(edge.to_owned(), status);
}

/// A run of `node` in flight (`item` for a `for_each` item).
fn in_flight(state: &mut RunSnapshot, n: u128, node: &str, item: Option<u32>) {
    let run: NodeRunState =
        serde_json::from_value(json!({"nodeId": node, "attempt": 1, "item": item})).unwrap();
    state
        .node_runs
        .insert(NodeRunId::new(uuid::Uuid::from_u128(n)), run);
    state.node_status.insert(id(node), NodeStatus::Running);
}

/// Every node is a candidate, as at a run's start or resume.
fn every(workflow: &WorkflowDef) -> BTreeSet<usize> {
    (0..workflow.nodes.len()).collect()
}

/// The decision, each action as a short line: `start a #0` (its step
/// index), `item x 2`, `finish x`, `skip b (reason)`, `complete OUTPUT`;
/// then `ready N` for each candidate that found no free slot.
fn decided(
    state: &RunSnapshot,
    workflow: &WorkflowDef,
    candidates: &BTreeSet<usize>,
) -> Vec<String> {
    let decision = decide(state, workflow, &json!("the input"), candidates);
    let mut lines: Vec<String> = decision
        .actions
        .iter()
        .map(|action| match action {
            Action::Start { node, input, items } => {
                let input = input.as_ref().expect("an input");
                let step = &input["metadata"]["step_index"];
                match items {
                    Some(items) => {
                        format!("start {node} #{step} items {}", Value::from(items.clone()))
                    }
                    None => format!("start {node} #{step} on {}", input["data"]),
                }
            }
            Action::StartItem { node, index, input } => {
                let input = input.as_ref().expect("an input");
                format!("item {node} {index} on {}", input["data"])
            }
            Action::FinishItems { node } => format!("finish {node}"),
            Action::Skip { node, reason } => format!("skip {node} ({reason})"),
            Action::Complete { output } => format!("complete {output}"),
        })
        .collect();
    lines.extend(decision.ready.iter().map(|r| format!("ready {r}")));
    lines
}

#[test]
fn a_new_run_starts_its_roots_on_the_run_input() {
    let wf = workflow("nodes: [{id: a, agent: a}, {id: b, agent: b}]\nedges: [{from: a, to: b}]\n");
    assert_eq!(
        decided(&running(), &wf, &every(&wf)),
        ["start a #0 on \"the input\""]
    );
}

#[test]
fn a_node_starts_once_its_edge_fired_on_the_output_before_it() {
    let wf = workflow("nodes: [{id: a, agent: a}, {id: b, agent: b}]\nedges: [{from: a, to: b}]\n");
    let mut state = running();
    done(&mut state, "a", json!("from a"));
    state.steps_started = 1;
    edge(&mut state, "a->b", EdgeStatus::Fired);
    assert_eq!(
        decided(&state, &wf, &BTreeSet::from([1])),
        ["start b #1 on \"from a\""]
    );
}

#[test]
fn a_node_whose_only_edge_was_skipped_is_skipped() {
    let wf = workflow(
        "nodes: [{id: a, agent: a}, {id: b, agent: b}]\nedges: [{from: a, to: b, when: 'false'}]\n",
    );
    let mut state = running();
    done(&mut state, "a", json!(1));
    edge(&mut state, "a->b", EdgeStatus::Skipped);
    assert_eq!(
        decided(&state, &wf, &BTreeSet::from([1])),
        ["skip b (no incoming edge fired)"]
    );
}

#[test]
fn a_full_run_keeps_a_ready_node_for_later() {
    let wf = workflow("max_concurrency: 1\nnodes: [{id: a, agent: a}, {id: b, agent: b}]\n");
    assert_eq!(
        decided(&running(), &wf, &every(&wf)),
        ["start a #0 on \"the input\"", "ready 1"]
    );
    let mut state = running();
    in_flight(&mut state, 1, "a", None);
    assert_eq!(decided(&state, &wf, &BTreeSet::from([1])), ["ready 1"]);
}

#[test]
fn a_node_waiting_on_an_undecided_edge_waits_while_others_run() {
    let wf = workflow("nodes: [{id: a, agent: a}, {id: b, agent: b}]\nedges: [{from: a, to: b}]\n");
    let mut state = running();
    in_flight(&mut state, 1, "a", None);
    assert!(decided(&state, &wf, &BTreeSet::from([1])).is_empty());
}

#[test]
fn nothing_in_flight_and_nothing_pending_completes_with_the_leaves() {
    let wf = workflow("nodes: [{id: a, agent: a}, {id: b, agent: b}]\nedges: [{from: a, to: b}]\n");
    let mut state = running();
    done(&mut state, "a", json!("A"));
    edge(&mut state, "a->b", EdgeStatus::Fired);
    done(&mut state, "b", json!("B"));
    assert_eq!(decided(&state, &wf, &BTreeSet::new()), ["complete \"B\""]);
}

#[test]
fn what_can_never_start_is_skipped_once_nothing_runs() {
    let wf = workflow("nodes: [{id: a, agent: a}, {id: b, agent: b}]\nedges: [{from: a, to: b}]\n");
    let mut state = running();
    done(&mut state, "a", json!("A"));
    // The edge was never decided, and nothing is left to decide it.
    assert_eq!(
        decided(&state, &wf, &BTreeSet::new()),
        ["skip b (unreachable: its inputs can never resolve)"]
    );
}

#[test]
fn an_ended_run_decides_nothing() {
    let wf = workflow("nodes: [{id: a, agent: a}]\n");
    for status in [
        RunStatus::Completed,
        RunStatus::Failed,
        RunStatus::Cancelled,
    ] {
        let mut state = running();
        state.status = status;
        assert!(decided(&state, &wf, &every(&wf)).is_empty(), "{status:?}");
    }
}

#[test]
fn a_for_each_node_starts_with_its_items_then_runs_them_up_to_its_limit() {
    let wf = workflow(
        "nodes: [{id: x, agent: a, for_each: {items: '[1, 2, 3]', max_concurrency: 2}}]\n",
    );
    assert_eq!(
        decided(&running(), &wf, &every(&wf)),
        ["start x #0 items [1,2,3]"]
    );
    let mut state = running();
    in_flight(&mut state, 1, "x", None);
    let progress = ForEachState {
        items: vec![json!(1), json!(2), json!(3)],
        outputs: Default::default(),
        started: 0,
    };
    state.for_each.insert(id("x"), progress);
    assert_eq!(
        decided(&state, &wf, &BTreeSet::new()),
        ["item x 0 on 1", "item x 1 on 2"]
    );
    // One item runs and one finished: one slot, for the third item.
    in_flight(&mut state, 2, "x", Some(0));
    let progress = state.for_each.get_mut(&id("x")).unwrap();
    progress.started = 2;
    progress.outputs.insert(1, json!("two"));
    assert_eq!(decided(&state, &wf, &BTreeSet::new()), ["item x 2 on 3"]);
}

#[test]
fn a_for_each_node_finishes_once_every_item_is_done_and_none_runs() {
    let wf = workflow("nodes: [{id: x, agent: a, for_each: {items: '[1, 2]'}}]\n");
    let mut state = running();
    in_flight(&mut state, 1, "x", None);
    let progress = ForEachState {
        items: vec![json!(1), json!(2)],
        outputs: [(0, json!("one")), (1, json!("two"))].into(),
        started: 2,
    };
    state.for_each.insert(id("x"), progress);
    assert_eq!(decided(&state, &wf, &BTreeSet::new()), ["finish x"]);
    in_flight(&mut state, 2, "x", Some(1));
    assert!(
        decided(&state, &wf, &BTreeSet::new()).is_empty(),
        "an item still runs"
    );
}

//! Edges on mocked ports: conditions pick a branch, loop edges repeat their
//! body up to their limit, and a condition that cannot be evaluated fails
//! the run naming its edge.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::tests::{done, harness, of_type, run};
use super::*;
use domain::{EdgeStatus, EventKind, NodeId, NodeStatus};
use serde_json::json;
use std::collections::HashMap;

#[tokio::test]
async fn conditions_pick_a_branch_and_skip_the_other() {
    let yaml = r#"
name: branch
agents:
  judge: {provider: mock}
  yes: {provider: mock}
  no: {provider: mock}
nodes: [{id: judge, agent: judge}, {id: yes, agent: yes}, {id: no, agent: no}]
edges:
  - {from: judge, to: yes, when: 'output.contains("APPROVED")'}
  - {from: judge, to: no, when: '!output.contains("APPROVED")'}
"#;
    let h = harness(
        HashMap::from([
            ("judge", vec![vec![done("APPROVED")]]),
            ("yes", vec![vec![done("shipped")]]),
        ]),
        None,
    );
    let outcome = run(&h, yaml, json!("x")).await.unwrap();
    assert_eq!(outcome.output, json!("shipped"));
    let s = &outcome.snapshot;
    assert_eq!(
        s.node_status[&NodeId::new("no").unwrap()],
        NodeStatus::Skipped
    );
    assert_eq!(s.edge_status["judge->yes"], EdgeStatus::Fired);
    assert_eq!(s.edge_status["judge->no"], EdgeStatus::Skipped);
}

#[tokio::test]
async fn a_loop_edge_repeats_its_body_up_to_its_limit() {
    let yaml = r#"
name: refine
agents:
  writer: {provider: mock}
  critic: {provider: mock}
  publish: {provider: mock}
nodes: [{id: writer, agent: writer}, {id: critic, agent: critic}, {id: publish, agent: publish}]
edges:
  - {from: writer, to: critic}
  - {from: critic, to: writer, when: '!output.contains("OK")', max_iterations: 2, on_limit: continue}
  - {from: critic, to: publish}
"#;
    let h = harness(
        HashMap::from([
            (
                "writer",
                vec![
                    vec![done("draft 1")],
                    vec![done("draft 2")],
                    vec![done("draft 3")],
                ],
            ),
            (
                "critic",
                vec![
                    vec![done("again")],
                    vec![done("again")],
                    vec![done("still bad")],
                ],
            ),
            ("publish", vec![vec![done("published")]]),
        ]),
        None,
    );
    let outcome = run(&h, yaml, json!("x")).await.unwrap();
    assert_eq!(outcome.status, RunStatus::Completed);
    assert_eq!(outcome.output, json!("published"));
    assert_eq!(outcome.snapshot.loop_counters["critic->writer"], 2);
    let writer_prompts: Vec<String> = h
        .prompts
        .lock()
        .unwrap()
        .iter()
        .filter(|(n, _)| n == "writer")
        .map(|(_, p)| p.clone())
        .collect();
    assert_eq!(writer_prompts, ["x", "again", "again"]);
    let EventKind::EdgeSkipped { reason, .. } = &of_type(&h, "edge:skipped")[0].kind else {
        panic!()
    };
    assert_eq!(reason, "loop limit reached");
}

#[tokio::test]
async fn a_loop_edge_at_its_limit_fails_the_run_by_default() {
    let yaml = r#"
name: refine
agents:
  writer: {provider: mock}
  critic: {provider: mock}
  publish: {provider: mock}
nodes: [{id: writer, agent: writer}, {id: critic, agent: critic}, {id: publish, agent: publish}]
edges:
  - {from: writer, to: critic}
  - {from: critic, to: writer, id: revise, when: '!output.contains("OK")', max_iterations: 1}
  - {from: critic, to: publish}
"#;
    let h = harness(
        HashMap::from([
            ("writer", vec![vec![done("draft 1")], vec![done("draft 2")]]),
            ("critic", vec![vec![done("again")], vec![done("still bad")]]),
            ("publish", vec![vec![done("published")]]),
        ]),
        None,
    );
    let outcome = run(&h, yaml, json!("x")).await.unwrap();
    assert_eq!(outcome.status, RunStatus::Failed);
    let error = outcome.error.unwrap();
    assert!(
        error.contains("edge `revise` reached its loop limit (max_iterations: 1)"),
        "{error}"
    );
    assert_eq!(outcome.snapshot.loop_counters["revise"], 1);
    let failed = of_type(&h, "flow:failed");
    let EventKind::FlowFailed { failed_node, .. } = &failed[0].kind else {
        panic!()
    };
    assert_eq!(failed_node.as_ref().map(NodeId::as_str), Some("critic"));
    assert!(
        h.prompts
            .lock()
            .unwrap()
            .iter()
            .all(|(n, _)| n != "publish"),
        "publish never ran"
    );
}

#[tokio::test]
async fn a_condition_that_cannot_be_evaluated_fails_the_run_naming_the_edge() {
    let yaml = r#"
name: typo
agents:
  a: {provider: mock}
  b: {provider: mock}
nodes: [{id: a, agent: a}, {id: b, agent: b}]
edges: [{from: a, to: b, when: 'output.score > 1'}]
"#;
    let h = harness(
        HashMap::from([("a", vec![vec![done("not an object")]])]),
        None,
    );
    let outcome = run(&h, yaml, json!("x")).await.unwrap();
    assert_eq!(outcome.status, RunStatus::Failed);
    assert!(outcome.error.unwrap().contains("edge `a->b`"));
    assert_eq!(h.prompts.lock().unwrap().len(), 1, "b never ran");
}

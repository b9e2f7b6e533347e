//! The scheduler's actions, recorded: a node run that starts ([`started`])
//! and a node that will not run in this pass ([`skipped`]). Which ones
//! happen is `run::decide`'s; what each records, and what follows, is
//! decided here.

use std::sync::Arc;

use domain::{EventKind, NodeId, NodeRunId, WorkflowDef};
use serde_json::Value;

use super::{Effect, Input, Step};
use crate::run::node_run::NodeEnd;
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
        None => Some(Effect::Spawn {
            run,
            node: node.clone(),
            input,
        }),
    };
    Step {
        events: vec![((Some(node), Some(run)), started)],
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
        effects: Vec::new(),
    }
}

fn failed(run: NodeRunId, node: NodeId, error: String) -> Effect {
    let end = NodeEnd::failed(error);
    Effect::Then(Input::NodeEnded { run, node, end })
}

//! [`decide`]: what may happen next in a run, as a pure function of its
//! folded state. No IO, no clock, no ids: the driver records each decision
//! (which gives it ids and times) and carries it out.

use std::collections::BTreeSet;

use domain::{NodeId, NodeStatus, RunSnapshot, WorkflowDef};
use serde_json::{Value, json};

use super::routing::{self, Readiness};

/// One decision.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Action {
    /// Start a pass of `node` with `input` (`{data, metadata}`); a
    /// `for_each` node gets its `items` (its item runs are started by
    /// [`Action::StartItem`] next). `Err` is why its input could not be
    /// computed: the node fails at once.
    Start {
        node: NodeId,
        input: Result<Value, String>,
        items: Option<Vec<Value>>,
    },
    /// Start item `index` of a running `for_each` node.
    StartItem {
        node: NodeId,
        index: u32,
        input: Result<Value, String>,
    },
    /// Every item of a `for_each` node finished: the node completes.
    FinishItems { node: NodeId },
    /// `node` will not run in this pass.
    Skip { node: NodeId, reason: &'static str },
    /// Nothing is in flight and nothing can start: the run completed.
    Complete { output: Value },
}

/// Node runs executing: a `for_each` node's own run only waits for its
/// items, and a question waiting for a person (an `approval` node run)
/// holds no slot, so the branches that do not wait go on.
pub(crate) fn busy(state: &RunSnapshot) -> usize {
    state
        .node_runs
        .values()
        .filter(|r| r.item.is_some() || !state.for_each.contains_key(&r.node_id))
        .filter(|r| !asks(r))
        .count()
}

/// Whether node run `r` is an open question, waiting for a person.
fn asks(r: &domain::snapshot::NodeRunState) -> bool {
    r.approval.as_ref().is_some_and(|q| q.answer.is_none())
}

/// What [`decide`] found.
#[derive(Debug, Default)]
pub(crate) struct Decision {
    /// What may happen now, in file order of the nodes.
    pub actions: Vec<Action>,
    /// Candidates that may start but found no free slot: still candidates.
    pub ready: Vec<usize>,
}

/// What may happen next; no actions when the run must wait for a node run
/// in flight (or has ended).
///
/// `candidates` are the positions of the pending nodes whose readiness may
/// have changed (every node at first, then the targets of the edges decided
/// since): the nodes that did not change cannot have become ready, so a step
/// costs what it touches, not the size of the graph. Only when nothing is in
/// flight and nothing can start is every node looked at, once, to end the run.
pub(crate) fn decide(
    state: &RunSnapshot,
    wf: &WorkflowDef,
    run_input: &Value,
    candidates: &BTreeSet<usize>,
) -> Decision {
    let mut ready = Vec::new();
    if state.status.is_terminal() {
        return Decision::default();
    }
    let capacity = (wf.max_concurrency.max(1) as usize).saturating_sub(busy(state));
    let mut free = capacity;
    let mut actions = Vec::new();

    for (node_id, progress) in &state.for_each {
        let Some(node) = wf.node(node_id) else {
            continue;
        };
        let items =
            (state.node_runs.values()).filter(|r| &r.node_id == node_id && r.item.is_some());
        let (in_flight, running) = items.fold((0, 0), |(all, executing), r| {
            (all + 1, executing + usize::from(!asks(r)))
        });
        if progress.is_done() && in_flight == 0 {
            actions.push(Action::FinishItems {
                node: node_id.clone(),
            });
            continue;
        }
        let limit = node
            .for_each
            .as_ref()
            .map_or(1, |f| f.max_concurrency.max(1)) as usize;
        let mut slots = limit.saturating_sub(running).min(free);
        let mut index = progress.started;
        while slots > 0 && (index as usize) < progress.items.len() {
            let item = &progress.items[index as usize];
            let input = routing::item_input(state, node, run_input, index, item).map(|data| {
                routing::envelope(
                    data,
                    json!({
                        "step_index": state.steps_started,
                        "previous_agent": state.previous_agent,
                        "item": index,
                    }),
                )
            });
            actions.push(Action::StartItem {
                node: node_id.clone(),
                index,
                input,
            });
            index += 1;
            slots -= 1;
            free -= 1;
        }
    }

    let mut starts = 0u64;
    for &position in candidates {
        let Some(node) = wf.nodes.get(position) else {
            continue;
        };
        if routing::node_status(state, &node.id) != NodeStatus::Pending {
            continue;
        }
        match routing::readiness(state, wf, node) {
            // A candidate again when one of its incoming edges is decided.
            Readiness::Wait => {}
            Readiness::Skip => actions.push(Action::Skip {
                node: node.id.clone(),
                reason: "no incoming edge fired",
            }),
            Readiness::Run if free == 0 => ready.push(position),
            Readiness::Run => {
                let gathered = routing::gather_input(state, wf, node, run_input);
                let items = match &gathered {
                    Ok(_) => routing::for_each_items(state, node, run_input),
                    Err(_) => Ok(None),
                };
                let step_index = state.steps_started + starts;
                let (input, items) = match (gathered, items) {
                    (Err(e), _) | (Ok(_), Err(e)) => (Err(e), None),
                    (Ok((data, previous)), Ok(items)) => {
                        let data = match &items {
                            Some(list) => Value::Array(list.clone()),
                            None => data,
                        };
                        let input = routing::envelope(
                            data,
                            json!({ "step_index": step_index, "previous_agent": previous }),
                        );
                        (Ok(input), items)
                    }
                };
                actions.push(Action::Start {
                    node: node.id.clone(),
                    input,
                    items,
                });
                starts += 1;
                free -= 1;
            }
        }
    }
    if actions.is_empty() && state.node_runs.is_empty() {
        // Nothing runs and nothing can start: what is still pending can
        // never run; with nothing pending, the run is complete.
        let stuck: Vec<Action> = wf
            .nodes
            .iter()
            .filter(|n| routing::node_status(state, &n.id) == NodeStatus::Pending)
            .map(|n| Action::Skip {
                node: n.id.clone(),
                reason: "unreachable: its inputs can never resolve",
            })
            .collect();
        actions = if stuck.is_empty() {
            vec![Action::Complete {
                output: routing::final_output(state, wf),
            }]
        } else {
            stuck
        };
    }
    Decision { actions, ready }
}

//! `approval` node runs (docs/approvals.md), as pure functions of the
//! folded state: the question a node run asks ([`question`]), which
//! questions are settled and how ([`due`]), the next deadline
//! ([`next_deadline`]), and whether the run has nothing left but people to
//! wait for ([`only_people`]).
//!
//! An approval node run has no task: the driver asks its question once
//! (`approval:requested`, kept in the state), and ends it when the state
//! holds an accepted answer or its deadline has passed. Both are read off
//! the state, so a writer that died after an answer was accepted leaves it
//! for the next one to resolve, and a deadline that passed while no
//! process ran fires at the next load, once.

use domain::workflow::{ApprovalDef, NodeKind, OnTimeout};
use domain::{EventKind, NodeId, NodeRunId, RunSnapshot, Timestamp, WorkflowDef};
use serde_json::{Value, json};

use crate::run::node_run::NodeEnd;
use crate::run::routing::{Reads, input_vars};

/// The approval node run `run` is of, when it is one.
fn approval<'a>(
    state: &RunSnapshot,
    workflow: &'a WorkflowDef,
    run: NodeRunId,
) -> Option<&'a ApprovalDef> {
    let node = &state.node_runs.get(&run)?.node_id;
    match &workflow.node(node)?.kind {
        NodeKind::Approval(def) => Some(def),
        _ => None,
    }
}

/// Whether node run `run` is an approval's.
pub(crate) fn is_approval(state: &RunSnapshot, workflow: &WorkflowDef, run: NodeRunId) -> bool {
    approval(state, workflow, run).is_some()
}

/// The question approval node run `run` asks at `now`: `approval:requested`
/// with its prompt rendered (`input` is the data that reached the node,
/// `outputs` and `loops` as for a node's `input:`), or, when the prompt
/// cannot be rendered, why. `None` when it has asked already (a resume) or
/// is no approval's.
pub(crate) fn question(
    state: &RunSnapshot,
    workflow: &WorkflowDef,
    run: NodeRunId,
    now: Timestamp,
) -> Option<Result<EventKind, String>> {
    let def = approval(state, workflow, run)?;
    let current = state.node_runs.get(&run)?;
    if current.approval.is_some() {
        return None;
    }
    let data = current.input.get("data").cloned().unwrap_or(Value::Null);
    let mut vars = input_vars(state, &data, Reads::All);
    if let Some(item) = current.item {
        vars.insert("index".into(), json!(item));
        vars.insert("item".into(), data);
    }
    let prompt = match def.prompt.render(&vars) {
        Ok(prompt) => prompt,
        Err(e) => return Some(Err(format!("its prompt cannot be rendered: {e}"))),
    };
    let deadline = def.timeout.map(|t| now.plus_millis(t.0.as_millis()));
    Some(Ok(EventKind::ApprovalRequested {
        prompt,
        schema: def.schema.as_deref().cloned(),
        deadline,
        on_timeout: def.timeout.map(|_| def.on_timeout.as_str().to_owned()),
        approvers: def.approvers.clone(),
    }))
}

/// A question settled: its `approval:resolved`, and how its node run ends.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Settled {
    pub run: NodeRunId,
    pub node: NodeId,
    pub resolved: EventKind,
    pub end: NodeEnd,
}

/// The questions settled at `now`, in the order they are to be recorded
/// (by deadline or answer time, then node run): each with an accepted
/// answer, and each unanswered one whose deadline has passed, which
/// becomes what its `on_timeout` says.
pub(crate) fn due(state: &RunSnapshot, workflow: &WorkflowDef, now: Timestamp) -> Vec<Settled> {
    let mut due: Vec<(Timestamp, Settled)> = Vec::new();
    for (run, current) in &state.node_runs {
        let (Some(question), Some(def)) = (&current.approval, approval(state, workflow, *run))
        else {
            continue;
        };
        let node = current.node_id.clone();
        if let Some(answer) = &question.answer {
            let resolved = EventKind::ApprovalResolved {
                approved: answer.approved,
                data: answer.data.clone(),
                reason: answer.reason.clone(),
                by: answer.by.clone(),
                how: "answered".to_owned(),
            };
            let data = json!({
                "approved": answer.approved,
                "data": answer.data,
                "reason": answer.reason,
                "by": answer.by,
                "at": answer.at,
            });
            let end = success(data);
            due.push((
                answer.at,
                Settled {
                    run: *run,
                    node,
                    resolved,
                    end,
                },
            ));
            continue;
        }
        let Some(deadline) = question.deadline.filter(|d| *d <= now) else {
            continue;
        };
        let approved = def.on_timeout == OnTimeout::Approve;
        let reason = "no answer came before the deadline".to_owned();
        let resolved = EventKind::ApprovalResolved {
            approved,
            data: Value::Null,
            reason: Some(reason.clone()),
            by: None,
            how: "timed_out".to_owned(),
        };
        let end = match def.on_timeout {
            OnTimeout::Fail => NodeEnd::failed(format!("approval timed out: {reason}")),
            OnTimeout::Approve | OnTimeout::Reject => success(json!({
                "approved": approved,
                "data": null,
                "reason": reason,
                "by": null,
                "at": deadline,
            })),
        };
        due.push((
            deadline,
            Settled {
                run: *run,
                node,
                resolved,
                end,
            },
        ));
    }
    due.sort_by(|(a, x), (b, y)| a.cmp(b).then(x.run.cmp(&y.run)));
    due.into_iter().map(|(_, settled)| settled).collect()
}

fn success(data: Value) -> NodeEnd {
    NodeEnd {
        data,
        metadata: json!({}),
        error: None,
    }
}

/// The earliest deadline of a question still open.
pub(crate) fn next_deadline(state: &RunSnapshot) -> Option<Timestamp> {
    (state.node_runs.values())
        .filter_map(|r| r.approval.as_ref())
        .filter(|q| q.answer.is_none())
        .filter_map(|q| q.deadline)
        .min()
}

/// Whether everything in flight waits for a person: at least one question
/// is open, and every other node run in flight is one too, or a
/// `for_each` node's own run (which ends with its items). Then nothing
/// can happen until someone answers or a deadline passes: the run stops
/// `waiting`, holding nothing.
pub(crate) fn only_people(state: &RunSnapshot, workflow: &WorkflowDef) -> bool {
    let mut asked = false;
    for (run, current) in &state.node_runs {
        if current
            .approval
            .as_ref()
            .is_some_and(|q| q.answer.is_none())
            && is_approval(state, workflow, *run)
        {
            asked = true;
            continue;
        }
        let spawns_items = current.item.is_none() && state.for_each.contains_key(&current.node_id);
        if !spawns_items {
            return false;
        }
    }
    asked
}

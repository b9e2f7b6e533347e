//! A run pauses: which node runs stop at once ([`stopped_at_once`]), and
//! what ends the pause once every node run has stopped ([`paused`]).
//!
//! An agent stops at its next safe point (no tool call in flight: a tool is
//! never cut off halfway) and a child run pauses likewise; any other node
//! run (a command) is stopped at once. All of them stay in flight: a resume
//! continues them.

use domain::workflow::NodeKind;
use domain::{EventKind, NodeRunId, RunSnapshot, WorkflowDef};

use super::stop::Stop;
use crate::run::recorder::{Ctx, RUN_LEVEL};

/// The node runs in flight that a pause stops at once: those that cannot
/// stop themselves at a safe point. An agent whose own tool call waits for
/// a person ([`waits_on_its_call`]) is one: it reaches no safe point
/// before the answer, and a stopping run takes no answer.
pub(crate) fn stopped_at_once(state: &RunSnapshot, workflow: &WorkflowDef) -> Vec<NodeRunId> {
    state
        .node_runs
        .iter()
        .filter(|(run, r)| {
            let pauses_itself = workflow.node(&r.node_id).is_some_and(|n| {
                matches!(
                    n.kind,
                    NodeKind::Agent { .. } | NodeKind::CallWorkflow { .. } | NodeKind::Approval(_)
                )
            });
            !pauses_itself || waits_on_its_call(state, **run)
        })
        .map(|(run, _)| *run)
        .collect()
}

/// Whether node run `run`'s agent asked a person about one of its own tool
/// calls and has no answer yet. While its node run's task is in flight,
/// that is a CLI agent (Claude Code's permission prompt), whose process
/// waits on the call; an HTTP agent's task ends when it asks.
pub(crate) fn waits_on_its_call(state: &RunSnapshot, run: NodeRunId) -> bool {
    state.node_runs.get(&run).is_some_and(|r| {
        r.approval
            .as_ref()
            .is_some_and(|q| q.tool.is_some() && q.answer.is_none())
    })
}

/// The end of the question of an agent whose process a pause stops while
/// it waits for the answer: withdrawn, on record, as a stop withdraws it
/// (docs/approvals.md); the resumed session asks again if it still wants
/// the call.
pub(crate) fn withdrawn(reason: &str) -> EventKind {
    super::approval::withdrawn(format!("the run paused: {reason}"))
}

/// How a pause ends once its node runs have stopped: `flow:paused`, or,
/// when the run was cancelled meanwhile, the cancellation that takes its
/// place.
pub(crate) fn paused(reason: String, cancelled: Option<Stop>) -> Result<(Ctx, EventKind), Stop> {
    match cancelled {
        Some(stop) => Err(stop),
        None => Ok((
            RUN_LEVEL,
            EventKind::FlowPaused {
                reason: Some(reason),
                waiting: false,
            },
        )),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use domain::RunId;
    use domain::snapshot::NodeRunState;
    use serde_json::json;

    use super::*;

    fn node_run(n: u128) -> NodeRunId {
        NodeRunId::new(uuid::Uuid::from_u128(0x4000_8000_0000_0000_0100 + n))
    }

    #[test]
    fn a_pause_stops_commands_at_once_and_lets_agents_and_child_runs_stop_themselves() {
        let workflow = WorkflowDef::from_yaml(
            "name: w\nagents:\n  a: {provider: mock}\n\
             nodes:\n\
             - {id: agent, agent: a}\n\
             - {id: shell, command: 'true'}\n\
             - {id: child, call_workflow: child.yaml}\n",
        )
        .unwrap();
        let run = RunId::new(uuid::Uuid::from_u128(0x4000_8000_0000_0000_0001)).unwrap();
        let mut state = RunSnapshot::new(run);
        for (n, node) in [
            (1, "agent"),
            (2, "shell"),
            (3, "child"),
            (4, "gone"),
            (5, "agent"),
        ] {
            let r: NodeRunState =
                serde_json::from_value(json!({"nodeId": node, "attempt": 1})).unwrap();
            state.node_runs.insert(node_run(n), r);
        }
        // Node run 5's agent waits for a person's answer to its own call.
        let asked = json!({"prompt": "may I?", "tool": {"callId": "t1", "toolName": "Bash"}});
        state.node_runs.get_mut(&node_run(5)).unwrap().approval =
            Some(Box::new(serde_json::from_value(asked).unwrap()));
        assert!(waits_on_its_call(&state, node_run(5)));
        assert!(!waits_on_its_call(&state, node_run(1)));
        let mut stopped = stopped_at_once(&state, &workflow);
        stopped.sort();
        // A node run of a node the workflow no longer has cannot pause itself.
        let mut expected = vec![node_run(2), node_run(4), node_run(5)];
        expected.sort();
        assert_eq!(stopped, expected);
    }

    #[test]
    fn a_pause_ends_paused_unless_cancelled_meanwhile() {
        let (ctx, kind) = paused("lunch".into(), None).unwrap();
        assert_eq!(ctx, RUN_LEVEL);
        assert_eq!(
            kind,
            EventKind::FlowPaused {
                reason: Some("lunch".into()),
                waiting: false,
            }
        );
        let cancel = Stop::Cancelled("interrupted".into());
        assert_eq!(paused("lunch".into(), Some(cancel.clone())), Err(cancel));
    }
}

//! Which commands a run accepts (design §7): a pure judgement over the
//! run's state, so the same rule holds for the live writer and for a
//! command recorded while no writer runs.
//!
//! A `send`/`reply` must name a node run in flight whose node is an agent;
//! while a writer runs, its agent must also be in a turn (`agent:start`
//! without its end), so the message reaches it after that turn — never
//! queued for a node run that will not read it, never guessed.

use domain::workflow::NodeKind;

use crate::run::step::approval::{Permission, permission};
use domain::{Caller, NodeRunId, RunSnapshot, RuntimeCommand, Timestamp, WorkflowDef};
use serde_json::Value;

/// The verdict on one raw command from `by`, arriving at `now`: the
/// command, or why it is refused.
pub(crate) fn judge(
    state: &RunSnapshot,
    workflow: &WorkflowDef,
    raw: &Value,
    live: bool,
    by: Option<&Caller>,
    now: Timestamp,
) -> Result<RuntimeCommand, String> {
    let command = RuntimeCommand::parse(raw).map_err(|e| e.to_string())?;
    if state.status.is_terminal() {
        return Err(format!(
            "the run has ended ({}); it takes no more commands",
            state.status.as_str()
        ));
    }
    match &command {
        RuntimeCommand::Send { node_run_id, .. } | RuntimeCommand::Reply { node_run_id, .. } => {
            let Some(run) = state.node_runs.get(node_run_id) else {
                return Err(format!(
                    "no node run {node_run_id} is in flight in this run"
                ));
            };
            let is_agent = workflow
                .node(&run.node_id)
                .is_some_and(|n| matches!(n.kind, NodeKind::Agent { .. }));
            if !is_agent {
                return Err(format!(
                    "node run {node_run_id} (node `{}`) is not an agent: it reads no messages",
                    run.node_id
                ));
            }
            if live && !run.in_turn {
                return Err(format!(
                    "node run {node_run_id} is not in a turn: its agent has finished"
                ));
            }
        }
        RuntimeCommand::Approve { node_run_id, data } => {
            answerable(state, workflow, *node_run_id, by, now)?;
            let schema = (state.node_runs.get(node_run_id))
                .and_then(|run| workflow.node(&run.node_id))
                .and_then(|node| match &node.kind {
                    NodeKind::Approval(def) => def.schema.clone(),
                    _ => None,
                });
            if let Some(schema) = schema {
                domain::workflow::check_answer(&schema, data)?;
            }
        }
        RuntimeCommand::Reject { node_run_id, .. } => {
            answerable(state, workflow, *node_run_id, by, now)?;
        }
        RuntimeCommand::Ask { node_run_id, tool } => {
            if !live {
                return Err("no process runs the run: its agents ask nothing".to_owned());
            }
            let Some(run) = state.node_runs.get(node_run_id) else {
                return Err(format!(
                    "no node run {node_run_id} is in flight in this run"
                ));
            };
            if !run.in_turn {
                return Err(format!(
                    "node run {node_run_id} is not in a turn: its agent asks nothing"
                ));
            }
            if run.approval.is_some() {
                return Err(format!(
                    "node run {node_run_id} waits for an answer already"
                ));
            }
            // Accepted when granted: a person is asked only when its grant
            // asks for these arguments (the step puts the question).
            if let Permission::Deny(why) = permission(workflow, &run.node_id, tool) {
                return Err(why);
            }
        }
        RuntimeCommand::Pause if state.status.is_stopped() => {
            return Err(format!("the run is {} already", state.status.as_str()));
        }
        RuntimeCommand::Resume { .. } if live => {
            return Err("the run is running; there is nothing to resume".to_owned());
        }
        RuntimeCommand::Resume { .. } => {
            return Err("a resume needs a process to run the run: use `awr resume`".to_owned());
        }
        RuntimeCommand::Pause | RuntimeCommand::Cancel { .. } => {}
    }
    Ok(command)
}

/// Whether `by` may answer the question of node run `run` at `now`: it
/// must be an approval's (or an agent's waiting tool call's), in flight, asked, not yet answered (an answer is
/// taken once) and not past its deadline (which settles it as its
/// `on_timeout` says, whichever process loads the run first), and `by`
/// one of its `approvers` when it names any.
fn answerable(
    state: &RunSnapshot,
    workflow: &WorkflowDef,
    run: NodeRunId,
    by: Option<&Caller>,
    now: Timestamp,
) -> Result<(), String> {
    let Some(current) = state.node_runs.get(&run) else {
        return Err(format!(
            "no node run {run} is in flight in this run: it is answered already, or was never asked"
        ));
    };
    let def = match workflow.node(&current.node_id).map(|n| &n.kind) {
        Some(NodeKind::Approval(def)) => Some(def),
        // An agent's tool call waits for a person (`requires_approval:`).
        Some(NodeKind::Agent { .. })
            if current.approval.as_ref().is_some_and(|q| q.tool.is_some()) =>
        {
            None
        }
        Some(NodeKind::Agent { .. }) => {
            return Err(format!(
                "node run {run} (node `{}`) waits for no approval: its agent asked none",
                current.node_id
            ));
        }
        _ => {
            return Err(format!(
                "node run {run} (node `{}`) is not an approval: it asks nothing",
                current.node_id
            ));
        }
    };
    let Some(question) = &current.approval else {
        return Err(format!("node run {run} has not asked its question yet"));
    };
    if question.answer.is_some() {
        return Err(format!(
            "node run {run} is answered already: an answer is taken once"
        ));
    }
    if let Some(deadline) = question.deadline.filter(|d| *d <= now) {
        return Err(format!(
            "node run {run}'s deadline passed at {deadline}: it is settled as its `on_timeout` says"
        ));
    }
    if let Some(def) = def.filter(|d| !d.approvers.is_empty()) {
        let who = by.map(Caller::as_str);
        if !who.is_some_and(|who| def.approvers.iter().any(|a| a == who)) {
            return Err(format!(
                "{} may not answer node run {run}: its approvers are {}",
                who.map_or_else(|| "an unnamed caller".to_owned(), |w| format!("`{w}`")),
                def.approvers.join(", ")
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use domain::snapshot::NodeRunState;
    use domain::{NodeId, RunId, RunStatus};
    use serde_json::json;

    const RUN: &str = "0b6f8f4e-3c1a-4d2b-9f3e-1a2b3c4d5e6f";
    const NODE_RUN: &str = "1b6f8f4e-3c1a-4d2b-9f3e-1a2b3c4d5e6f";

    fn workflow() -> WorkflowDef {
        WorkflowDef::from_yaml(
            "name: w\nagents:\n  a: {provider: mock}\nsteps:\n  - {id: write, agent: a}\n",
        )
        .unwrap()
    }

    fn state(in_turn: bool) -> RunSnapshot {
        let mut state = RunSnapshot::new(RUN.parse::<RunId>().unwrap());
        state.status = RunStatus::Running;
        let run = NodeRunState {
            node_id: NodeId::new("write").unwrap(),
            attempt: 1,
            item: None,
            iteration: 0,
            started_at: None,
            input: Value::Null.into(),
            result: None,
            session: None,
            session_usage: None,
            call_index: None,
            first_call: None,
            redo_call: None,
            calls: 0,
            in_turn,
            processes: Vec::new(),
            host: None,
            child: None,
            forked: false,
            approval: None,
        };
        state
            .node_runs
            .insert(NODE_RUN.parse::<NodeRunId>().unwrap(), run);
        state
    }

    #[test]
    fn messages_need_a_node_run_in_flight_and_in_a_turn() {
        let wf = workflow();
        let send = json!({"type": "send", "nodeRunId": NODE_RUN, "message": "hi"});
        assert!(
            judge(
                &state(true),
                &wf,
                &send,
                true,
                None,
                Timestamp::from_millis(1_000)
            )
            .is_ok()
        );
        let between = judge(
            &state(false),
            &wf,
            &send,
            true,
            None,
            Timestamp::from_millis(1_000),
        )
        .unwrap_err();
        assert!(between.contains("not in a turn"), "{between}");
        // With no writer, the message waits in the inbox for the resume.
        assert!(
            judge(
                &state(false),
                &wf,
                &send,
                false,
                None,
                Timestamp::from_millis(1_000)
            )
            .is_ok()
        );
        let other = json!({"type": "reply", "nodeRunId": RUN, "message": "hi"});
        let error = judge(
            &state(true),
            &wf,
            &other,
            true,
            None,
            Timestamp::from_millis(1_000),
        )
        .unwrap_err();
        assert!(error.contains("no node run"), "{error}");
        let missing = json!({"type": "send", "message": "hi"});
        let error = judge(
            &state(true),
            &wf,
            &missing,
            true,
            None,
            Timestamp::from_millis(1_000),
        )
        .unwrap_err();
        assert!(error.contains("nodeRunId"), "{error}");
    }

    #[test]
    fn an_ended_run_takes_nothing_and_a_paused_one_no_second_pause() {
        let wf = workflow();
        let mut ended = state(true);
        ended.status = RunStatus::Completed;
        let error = judge(
            &ended,
            &wf,
            &json!({"type": "cancel"}),
            false,
            None,
            Timestamp::from_millis(1_000),
        )
        .unwrap_err();
        assert!(error.contains("completed"), "{error}");
        let mut paused = state(false);
        paused.status = RunStatus::Paused;
        assert!(
            judge(
                &paused,
                &wf,
                &json!({"type": "pause"}),
                false,
                None,
                Timestamp::from_millis(1_000)
            )
            .is_err()
        );
        assert!(
            judge(
                &paused,
                &wf,
                &json!({"type": "cancel"}),
                false,
                None,
                Timestamp::from_millis(1_000)
            )
            .is_ok()
        );
        assert!(
            judge(
                &state(true),
                &wf,
                &json!({"type": "resume"}),
                true,
                None,
                Timestamp::from_millis(1_000)
            )
            .is_err()
        );
        assert!(
            judge(
                &state(true),
                &wf,
                &json!("garbage"),
                true,
                None,
                Timestamp::from_millis(1_000)
            )
            .is_err()
        );
    }

    /// An answer names an approval's node run that asked and has no answer
    /// yet, comes from one of its approvers, and meets its schema.
    #[test]
    fn an_answer_is_taken_once_from_an_approver_and_must_meet_the_schema() {
        let wf = WorkflowDef::from_yaml(
            "name: w\nnodes:\n  - {id: write, command: 'true'}\n  - id: ok\n    approval: {prompt: Go?, approvers: [alice], schema: {type: object, required: [n]}}\n",
        )
        .unwrap();
        let mut state = state(false);
        let mut run: NodeRunState = serde_json::from_value(json!({"nodeId": "ok"})).unwrap();
        let ok_run = "2b6f8f4e-3c1a-4d2b-9f3e-1a2b3c4d5e6f";
        let alice = Caller::new("alice").unwrap();
        let bob = Caller::new("bob").unwrap();
        let approve = json!({"type": "approve", "nodeRunId": ok_run, "data": {"n": 1}});
        state.node_runs.insert(ok_run.parse().unwrap(), run.clone());
        let early = judge(
            &state,
            &wf,
            &approve,
            true,
            Some(&alice),
            Timestamp::from_millis(1_000),
        )
        .unwrap_err();
        assert!(early.contains("has not asked"), "{early}");
        run.approval = Some(Box::new(domain::snapshot::Question {
            prompt: "Go?".into(),
            schema: None,
            deadline: None,
            answer: None,
            tool: None,
        }));
        state.node_runs.insert(ok_run.parse().unwrap(), run.clone());
        assert!(
            judge(
                &state,
                &wf,
                &approve,
                true,
                Some(&alice),
                Timestamp::from_millis(1_000)
            )
            .is_ok()
        );
        let stranger = judge(
            &state,
            &wf,
            &approve,
            true,
            Some(&bob),
            Timestamp::from_millis(1_000),
        )
        .unwrap_err();
        assert!(
            stranger.contains("`bob` may not answer") && stranger.contains("alice"),
            "{stranger}"
        );
        let bad = json!({"type": "approve", "nodeRunId": ok_run, "data": {}});
        let bad = judge(
            &state,
            &wf,
            &bad,
            true,
            Some(&alice),
            Timestamp::from_millis(1_000),
        )
        .unwrap_err();
        assert!(bad.contains("schema"), "{bad}");
        // Past its deadline, a question takes no answer: the deadline
        // settles it, whichever process loads the run first.
        run.approval.as_mut().unwrap().deadline = Some(domain::Timestamp::from_millis(500));
        state.node_runs.insert(ok_run.parse().unwrap(), run.clone());
        let late = judge(
            &state,
            &wf,
            &approve,
            true,
            Some(&alice),
            Timestamp::from_millis(1_000),
        )
        .unwrap_err();
        assert!(late.contains("deadline passed"), "{late}");
        run.approval.as_mut().unwrap().deadline = None;
        state.node_runs.insert(ok_run.parse().unwrap(), run.clone());
        // A rejection carries no data to check.
        let reject = json!({"type": "reject", "nodeRunId": ok_run});
        assert!(
            judge(
                &state,
                &wf,
                &reject,
                false,
                Some(&alice),
                Timestamp::from_millis(1_000)
            )
            .is_ok()
        );
        // Answered: a second answer is refused.
        let (_, answer) = RuntimeCommand::parse(&reject)
            .unwrap()
            .answer(Some(alice.clone()), domain::Timestamp::from_millis(0))
            .unwrap();
        run.approval.as_mut().unwrap().answer = Some(answer);
        state.node_runs.insert(ok_run.parse().unwrap(), run);
        let twice = judge(
            &state,
            &wf,
            &approve,
            true,
            Some(&alice),
            Timestamp::from_millis(1_000),
        )
        .unwrap_err();
        assert!(twice.contains("answered already"), "{twice}");
        // Not an approval's node run; not in flight.
        let agent = json!({"type": "approve", "nodeRunId": NODE_RUN});
        let not = judge(
            &state,
            &wf,
            &agent,
            true,
            Some(&alice),
            Timestamp::from_millis(1_000),
        )
        .unwrap_err();
        assert!(not.contains("not an approval"), "{not}");
        let gone = json!({"type": "reject", "nodeRunId": RUN});
        let gone = judge(
            &state,
            &wf,
            &gone,
            true,
            Some(&alice),
            Timestamp::from_millis(1_000),
        )
        .unwrap_err();
        assert!(gone.contains("no node run"), "{gone}");
    }
}

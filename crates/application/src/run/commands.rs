//! Which commands a run accepts (design §7): a pure judgement over the
//! run's state, so the same rule holds for the live writer and for a
//! command recorded while no writer runs.
//!
//! A `send`/`reply` must name a node run in flight whose node is an agent;
//! while a writer runs, its agent must also be in a turn (`agent:start`
//! without its end), so the message reaches it after that turn — never
//! queued for a node run that will not read it, never guessed.

use domain::workflow::NodeKind;
use domain::{RunSnapshot, RunStatus, RuntimeCommand, WorkflowDef};
use serde_json::Value;

/// The verdict on one raw command: the command, or why it is refused.
pub(crate) fn judge(
    state: &RunSnapshot,
    workflow: &WorkflowDef,
    raw: &Value,
    live: bool,
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
        RuntimeCommand::Pause if state.status == RunStatus::Paused => {
            return Err("the run is paused already".to_owned());
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use domain::snapshot::NodeRunState;
    use domain::{NodeId, NodeRunId, RunId};
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
        assert!(judge(&state(true), &wf, &send, true).is_ok());
        let between = judge(&state(false), &wf, &send, true).unwrap_err();
        assert!(between.contains("not in a turn"), "{between}");
        // With no writer, the message waits in the inbox for the resume.
        assert!(judge(&state(false), &wf, &send, false).is_ok());
        let other = json!({"type": "reply", "nodeRunId": RUN, "message": "hi"});
        let error = judge(&state(true), &wf, &other, true).unwrap_err();
        assert!(error.contains("no node run"), "{error}");
        let missing = json!({"type": "send", "message": "hi"});
        let error = judge(&state(true), &wf, &missing, true).unwrap_err();
        assert!(error.contains("nodeRunId"), "{error}");
    }

    #[test]
    fn an_ended_run_takes_nothing_and_a_paused_one_no_second_pause() {
        let wf = workflow();
        let mut ended = state(true);
        ended.status = RunStatus::Completed;
        let error = judge(&ended, &wf, &json!({"type": "cancel"}), false).unwrap_err();
        assert!(error.contains("completed"), "{error}");
        let mut paused = state(false);
        paused.status = RunStatus::Paused;
        assert!(judge(&paused, &wf, &json!({"type": "pause"}), false).is_err());
        assert!(judge(&paused, &wf, &json!({"type": "cancel"}), false).is_ok());
        assert!(judge(&state(true), &wf, &json!({"type": "resume"}), true).is_err());
        assert!(judge(&state(true), &wf, &json!("garbage"), true).is_err());
    }
}

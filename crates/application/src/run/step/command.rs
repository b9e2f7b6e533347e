//! A command that reaches the live writer of a run (design §7), and the
//! stops this process or a parent asks for as commands: each is recorded
//! as `command:received` (accepted, or with why not) before it takes
//! effect, and an accepted `pause` or `cancel` stops the run.

use domain::{
    Caller, EventKind, NodeId, NodeRunId, RunSnapshot, RuntimeCommand, Timestamp, WorkflowDef,
};
use serde_json::Value;

use super::stop::Stop;
use crate::run::commands;

/// What a command received records, and what follows from it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Received {
    /// The `command:received` to record.
    pub event: EventKind,
    /// Why it was refused, for the sender's answer.
    pub error: Option<String>,
    /// The stop it asks for, once recorded.
    pub stop: Option<Stop>,
    /// The question an accepted `ask` puts (its node run's
    /// `approval:requested`), recorded right after it; none when the
    /// call's grant does not ask for its arguments (it may go ahead).
    pub asks: Option<(NodeId, NodeRunId, EventKind)>,
}

/// The live writer's verdict on the raw command `raw` sent by `by`
/// ([`commands::judge`]). A child run (`child`) pauses with its parent,
/// never alone: its parent, waiting on it, would take the pause for the
/// child's failure.
pub(crate) fn received(
    state: &RunSnapshot,
    workflow: &WorkflowDef,
    raw: Value,
    by: Option<Caller>,
    child: bool,
    now: Timestamp,
) -> Received {
    let verdict =
        commands::judge(state, workflow, &raw, true, by.as_ref(), now).and_then(|command| {
            match command {
        RuntimeCommand::Pause if child => Err(
            "this run is a child run (`call_workflow`): pause its parent run, which pauses it too"
                .to_owned(),
        ),
        other => Ok(other),
    }
        });
    let error = verdict.as_ref().err().cloned();
    let asks = match &verdict {
        Ok(RuntimeCommand::Ask { node_run_id, tool }) => (state.node_runs.get(node_run_id))
            .and_then(|run| {
                let ask = super::approval::permission(workflow, &run.node_id, tool);
                if ask != super::approval::Permission::Ask {
                    return None;
                }
                let node = workflow.node(&run.node_id)?;
                let (agent, _) = workflow.agent_of(node)?;
                let asked = super::approval::asking(agent, tool.clone(), Vec::new());
                Some((run.node_id.clone(), *node_run_id, asked))
            }),
        _ => None,
    };
    let stop = match verdict {
        Ok(RuntimeCommand::Pause) => Some(Stop::Paused("paused by a command".to_owned())),
        Ok(RuntimeCommand::Cancel { reason }) => Some(Stop::Cancelled(
            reason.unwrap_or_else(|| "cancelled by a command".to_owned()),
        )),
        _ => None,
    };
    let event = EventKind::CommandReceived {
        command: raw,
        accepted: error.is_none(),
        error: error.clone(),
        by,
    };
    Received {
        event,
        error,
        stop,
        asks,
    }
}

/// A cancellation from this process (a signal, the library's `Cancel`),
/// recorded as the `cancel` command it is.
pub(crate) fn cancelled_here(reason: String) -> (EventKind, Stop) {
    let command = RuntimeCommand::Cancel {
        reason: Some(reason.clone()),
    };
    (ours(&command), Stop::Cancelled(reason))
}

/// The parent of this child run paused: the child pauses too, recorded as
/// the `pause` command it is. A resume of the parent continues it.
pub(crate) fn paused_with_parent() -> (EventKind, Stop) {
    let stop = Stop::Paused("its parent run paused".to_owned());
    (ours(&RuntimeCommand::Pause), stop)
}

/// `command:received` of a command the runtime gave itself: accepted, by
/// no one.
fn ours(command: &RuntimeCommand) -> EventKind {
    EventKind::CommandReceived {
        command: serde_json::to_value(command).unwrap_or_default(),
        accepted: true,
        error: None,
        by: None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use domain::{RunId, RunStatus};
    use serde_json::json;

    use super::*;

    fn workflow() -> WorkflowDef {
        WorkflowDef::from_yaml(
            "name: w\nagents: {a: {provider: mock}}\nsteps: [{id: s, agent: a}]\n",
        )
        .unwrap()
    }

    fn running() -> RunSnapshot {
        let run = RunId::new(uuid::Uuid::from_u128(0x4000_8000_0000_0000_0001)).unwrap();
        let mut state = RunSnapshot::new(run);
        state.status = RunStatus::Running;
        state
    }

    /// The table: the raw command, whether the run is a child, then what is
    /// recorded (`accepted`, the start of the refusal) and the stop.
    #[test]
    fn each_command_is_recorded_with_its_verdict_and_asks_for_its_stop() {
        let alice = Caller::new("alice").unwrap();
        let table = [
            (
                json!({"type": "pause"}),
                false,
                None,
                Some(Stop::Paused("paused by a command".into())),
            ),
            (
                json!({"type": "cancel", "reason": "wrong input"}),
                false,
                None,
                Some(Stop::Cancelled("wrong input".into())),
            ),
            (
                json!({"type": "cancel"}),
                true,
                None,
                Some(Stop::Cancelled("cancelled by a command".into())),
            ),
            (
                json!({"type": "pause"}),
                true,
                Some("this run is a child run"),
                None,
            ),
            (
                json!({"type": "resume"}),
                false,
                Some("the run is running"),
                None,
            ),
            (
                json!({"type": "send", "message": "hi"}),
                false,
                Some("nodeRunId"),
                None,
            ),
            (json!("garbage"), false, Some(""), None),
        ];
        for (raw, child, refused, stop) in table {
            let got = received(
                &running(),
                &workflow(),
                raw.clone(),
                Some(alice.clone()),
                child,
                Timestamp::from_millis(0),
            );
            let EventKind::CommandReceived {
                command,
                accepted,
                error,
                by,
            } = &got.event
            else {
                panic!("{raw}: not command:received: {:?}", got.event);
            };
            assert_eq!((command, by.as_ref()), (&raw, Some(&alice)), "{raw}");
            assert_eq!(*accepted, refused.is_none(), "{raw}");
            assert_eq!(error, &got.error, "{raw}");
            if let Some(start) = refused {
                let error = error.as_deref().unwrap();
                assert!(error.contains(start), "{raw}: {error}");
            }
            assert_eq!(got.stop, stop, "{raw}");
        }
    }

    #[test]
    fn an_ended_run_refuses_even_a_cancel() {
        let mut ended = running();
        ended.status = RunStatus::Completed;
        let got = received(
            &ended,
            &workflow(),
            json!({"type": "cancel"}),
            None,
            false,
            Timestamp::from_millis(0),
        );
        assert_eq!(got.stop, None);
        assert!(got.error.unwrap().contains("completed"));
    }

    #[test]
    fn the_runtimes_own_stops_are_recorded_as_accepted_commands_by_no_one() {
        let (event, stop) = cancelled_here("SIGTERM".into());
        assert_eq!(
            serde_json::to_value(&event).unwrap(),
            json!({"type": "command:received", "command": {"type": "cancel", "reason": "SIGTERM"}, "accepted": true})
        );
        assert_eq!(stop, Stop::Cancelled("SIGTERM".into()));
        let (event, stop) = paused_with_parent();
        assert_eq!(
            serde_json::to_value(&event).unwrap(),
            json!({"type": "command:received", "command": {"type": "pause"}, "accepted": true})
        );
        assert_eq!(stop, Stop::Paused("its parent run paused".into()));
    }
}

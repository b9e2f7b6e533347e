//! One node run, started: its node's kind chooses what runs it (an agent,
//! a command, a child workflow), so `node_run`, which every kind shares,
//! depends on none of them.

use domain::workflow::NodeKind;

use super::node_run::{Msg, NodeTask, command};
use super::{agent, subflow};

/// Runs the node run to its end and reports it; returns early, silently,
/// when it is cancelled (the recorder records the cancellation).
pub(crate) async fn run(mut task: NodeTask) {
    let end = match &task.node.kind {
        NodeKind::CallWorkflow { workflow, resolved } => {
            let (reference, child) = (workflow.clone(), resolved.clone());
            subflow::run(&task, &reference, child).await
        }
        NodeKind::Agent { .. } => {
            let cancel = task.cancel.clone();
            tokio::select! {
                _ = cancel.cancelled() => return,
                end = agent::run(&mut task) => match end {
                    Some(end) => end,
                    // The recorder took its end with its last event.
                    None => return,
                },
            }
        }
        // Asked and answered by the driver (`step::approval`): no task.
        NodeKind::Approval(_) => return,
        NodeKind::Command(_) => {
            let cancel = task.cancel.clone();
            // A command that has finished is reported even when its
            // cancellation came in the same turn: it ran, and left in
            // flight it would be run again by whoever continues the run.
            tokio::select! {
                biased;
                end = command(&task) => end,
                _ = cancel.cancelled() => return,
            }
        }
    };
    let msg = Msg::Ended {
        run: task.run,
        node: task.node.id.clone(),
        end,
    };
    let _ = task.tx.send(msg).await;
}

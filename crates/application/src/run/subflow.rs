//! A `call_workflow` node run: the child is a run of its own (own id, log,
//! snapshot and transcript, linked both ways); its output is this node's.

use std::sync::Arc;

use domain::{EventKind, RunStatus, WorkflowDef};
use serde_json::json;

use super::node_run::{NodeEnd, NodeTask};
use super::{Executor, Parent, RunRequest};

/// Runs the child to its end. Cancelling the node run cancels the child
/// through its own token, so the child records its own `flow:cancelled`.
pub(super) async fn run(
    task: &NodeTask,
    reference: &str,
    child: Option<Arc<WorkflowDef>>,
) -> NodeEnd {
    let Some(child) = child else {
        return NodeEnd::failed(format!(
            "workflow `{reference}` was not loaded before the run"
        ));
    };
    let started = task.ports.clock.now();
    let executor = Executor::of(Arc::clone(&task.ports));
    let parent = Parent {
        run_id: task.run_id,
        pausing: task.pausing.clone(),
    };
    let request = RunRequest {
        workflow: Arc::clone(&child),
        input: task.data().clone(),
        source: None,
        started_by: None,
    };
    let cancel = task.cancel.child();
    let (child_id, outcome) = match task.resume.as_ref().and_then(|c| Some((c.child?, c))) {
        Some((child_id, next)) => {
            let message = next.message.clone();
            let outcome = executor
                .continue_child(child_id, parent, request, message, cancel)
                .await;
            (child_id, outcome)
        }
        None => {
            let child_id = match executor.create().await {
                Ok(id) => id,
                Err(e) => return NodeEnd::failed(format!("cannot create the child run: {e}")),
            };
            let announced = task
                .record(EventKind::SubflowStarted {
                    child_run_id: child_id,
                    workflow: child.name.clone(),
                })
                .await;
            if announced.is_none() {
                return NodeEnd::failed("the run ended before its child could start");
            }
            let outcome = executor.run_child(child_id, parent, request, cancel).await;
            (child_id, outcome)
        }
    };
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(e) => return NodeEnd::failed(format!("child run {child_id} failed: {e}")),
    };
    if outcome.status == RunStatus::Paused && task.pausing.is_cancelled() {
        // Paused with this run: the node run stays in flight, its child
        // to be continued by the resume.
        return NodeEnd::failed(format!("child run {child_id} paused with its parent"));
    }
    let elapsed = task.ports.clock.now().millis_since(started);
    task.send(EventKind::SubflowCompleted {
        child_run_id: child_id,
        status: outcome.status,
    })
    .await;
    NodeEnd {
        data: outcome.output,
        metadata: json!({
            "workflow": child.name,
            "child_run_id": child_id.to_string(),
            "execution_time_ms": elapsed,
            "tool_calls_count": 0,
        }),
        error: outcome
            .error
            .map(|e| format!("child run {child_id} failed: {e}")),
    }
}

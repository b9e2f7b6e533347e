//! A run's node runs, started and reaped: each a future the driver polls
//! in its own task (a child run excepted, a task of its own), and a panic
//! in one the failure of that node run alone.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;

use domain::NodeRunId;
use domain::workflow::{NodeDef, NodeKind};
use futures::FutureExt;
use serde_json::Value;
use tokio_util::task::AbortOnDropHandle;

use super::{Driver, Stop};
use crate::run::ExecutorError;
use crate::run::node_run::{Continuation, NodeEnd, NodeTask};

/// What a node run's panic carries.
pub(super) type Panic = Box<dyn Any + Send>;

/// A node run in flight: it ends with its id, and its panic if it had one.
pub(super) type NodeFuture = Pin<Box<dyn Future<Output = (NodeRunId, Result<(), Panic>)> + Send>>;

impl Driver {
    /// Starts a node run whose start is recorded: published first, so its
    /// start is on record before the node run can act. It first runs at the
    /// loop's next wait.
    pub(super) async fn spawn_task(
        &mut self,
        run: NodeRunId,
        def: NodeDef,
        input: Arc<Value>,
        resume: Option<Continuation>,
    ) -> Result<(), ExecutorError> {
        if let NodeKind::Approval(_) = def.kind {
            // No task: the loop asks its question.
            self.to_ask.push(run);
            return Ok(());
        }
        self.rec.publish().await?;
        let cancel = self.cancel.child();
        let task = NodeTask {
            ports: Arc::clone(&self.ports),
            workflow: Arc::clone(&self.workflow),
            run_id: self.state().run_id,
            node: def,
            run,
            resume,
            input,
            tx: self.tx.clone(),
            cancel: cancel.clone(),
            pausing: self.pausing.clone(),
            mcp: self.mcp.clone(),
        };
        let child_run = matches!(task.node.kind, NodeKind::CallWorkflow { .. });
        // A panic ends the node run, not the run (`reap`).
        let node_run = AssertUnwindSafe(crate::run::dispatch::run(task))
            .catch_unwind()
            .map(move |ended| (run, ended));
        if child_run {
            // A child run is a driver: it takes what this one takes (the
            // store's shared sync, a connection of its pool) and holds it
            // across its awaits, so it must go on while this driver waits
            // for those outside its select. Its own task, then, aborted
            // when its node run is dropped.
            let task = AbortOnDropHandle::new(tokio::spawn(node_run));
            // Its panic is caught inside (one while its future is dropped
            // is still a panic); a task cancelled from outside (the runtime
            // shutting down) ended nothing.
            self.tasks
                .push(Box::pin(task.map(move |joined| match joined {
                    Ok(ended) => ended,
                    Err(e) if e.is_panic() => (run, Err(e.into_panic())),
                    Err(_) => (run, Ok(())),
                })));
        } else {
            // Boxed here, once: the node run's future is kilobytes (the
            // agent's stream state).
            self.tasks.push(Box::pin(node_run));
        }
        self.running.insert(run, cancel);
        Ok(())
    }

    /// A node run's future that ended: a panic ends the node run as a
    /// failure (it sent no end of its own).
    pub(super) async fn reap(
        &mut self,
        run: NodeRunId,
        ended: Result<(), Panic>,
    ) -> Result<Option<Stop>, ExecutorError> {
        let Err(panic) = ended else {
            return Ok(None);
        };
        if self.running.remove(&run).is_none() {
            return Ok(None);
        }
        let Some(node) = self.state().node_runs.get(&run).map(|r| r.node_id.clone()) else {
            return Ok(None);
        };
        let why = (panic.downcast_ref::<&str>().copied())
            .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
            .unwrap_or("no message");
        tracing::error!(run = %self.state().run_id, node_run = %run, panic = why, "a node run panicked");
        let end = NodeEnd::failed(format!(
            "the node run stopped unexpectedly: it panicked ({why})"
        ));
        self.node_ended(run, &node, end).await
    }
}

//! How a run stops before it completes: a node failure, a budget, a
//! cancellation, or the runtime's own failure. Every node run in flight is
//! cancelled and waited for, what it still sent is recorded, and each one
//! still open ends with `node:failed`; then the terminal event.

use std::sync::Arc;

use domain::workflow::NodeKind;
use domain::{EventKind, NodeId, NodeRunId, RunId, RunStatus, WorkflowDef};
use futures::StreamExt;
use serde_json::{Value, json};

use super::Driver;
use super::apply::Asker;
use crate::ports::StoreError;
use crate::run::node_run::{Msg, NodeEnd};
use crate::run::recorder::{Ctx, RUN_LEVEL};
use crate::run::step::stop::{self, Stop};
use crate::run::step::{Input, pause};
use crate::run::{Executor, ExecutorError, Ports, RunOutcome};

impl Driver {
    /// Stops every node run in flight, records how each ended, then the
    /// run's end: `budget:exceeded` first for a budget, and `flow:failed` or
    /// `flow:cancelled` last. A pause ends `flow:paused` instead, unless the
    /// run is cancelled while it waits for its node runs.
    pub(super) async fn stop(&mut self, stop: Stop) -> Result<RunOutcome, ExecutorError> {
        // What was decided is stored before the node runs are stopped.
        self.rec.publish().await?;
        let stop = match stop {
            Stop::Paused(reason) => match self.pause(reason).await? {
                Ok(outcome) => return Ok(outcome),
                Err(cancelled) => cancelled,
            },
            Stop::Waiting => return self.wait_for_people().await,
            stop => stop,
        };
        if let Some((ctx, kind)) = stop::announce(self.state(), &stop) {
            self.rec.emit(ctx, kind).await?;
            // Decided before it takes effect: a writer killed while winding
            // down leaves the stop for the next one to finish.
            self.rec.checkpoint().await?;
        }
        self.wind_down().await?;
        let left = self.left_children();
        cancel_children(Arc::clone(&self.ports), self.state().run_id, left).await;
        for (ctx, failed) in stop::closing(self.state(), &stop) {
            self.rec.emit(ctx, failed).await?;
        }
        let (ctx, terminal, status, error) = stop::terminal(stop, self.duration_ms());
        self.rec.emit(ctx, terminal).await?;
        self.rec.finish().await?;
        Ok(self.outcome(status, Value::Null, Some(error)))
    }

    /// Paused ([`pause`]): no node run starts, and those in flight stop
    /// and stay in flight. Then `flow:paused` and the final snapshot; or,
    /// when the run is cancelled while it waits, the cancellation (recorded)
    /// to stop with instead.
    async fn pause(&mut self, reason: String) -> Result<Result<RunOutcome, Stop>, ExecutorError> {
        self.pausing.cancel(reason.clone());
        for run in pause::stopped_at_once(self.state(), &self.workflow) {
            let Some(cancel) = self.running.get(&run) else {
                continue;
            };
            cancel.cancel("the run is pausing");
            if pause::waits_on_its_call(self.state(), run) {
                let node = self.state().node_runs.get(&run).map(|r| r.node_id.clone());
                let ctx: Ctx = (node, Some(run));
                self.rec.emit(ctx, pause::withdrawn(&reason)).await?;
            }
        }
        // A node run that finished meanwhile may have stopped the run (a
        // budget crossed, a condition that cannot be evaluated): that
        // stop takes the pause's place, as a cancellation does.
        let stopped = self.drain(true).await?;
        let cancelled = match (stopped, self.cancel.is_cancelled()) {
            (Some(stop), _) => Some(stop),
            (None, true) => {
                let why = self.cancel.reason().unwrap_or("cancelled").to_owned();
                self.apply(Input::Cancelled(why), Asker::None).await?
            }
            (None, false) => None,
        };
        let (ctx, paused) = match pause::paused(reason.clone(), cancelled) {
            Ok(paused) => paused,
            Err(cancelled) => return Ok(Err(cancelled)),
        };
        self.rec.emit(ctx, paused).await?;
        self.rec.finish().await?;
        Ok(Ok(self.outcome(
            RunStatus::Paused,
            Value::Null,
            Some(reason),
        )))
    }

    /// Handed over ([`Cancel::hand_over`](crate::Cancel::hand_over)): stops
    /// as a pause does (no node run starts, those in flight stop at their
    /// next safe point and stay in flight) and records nothing of it: the
    /// run stays `running`, for the writer that takes it next to continue
    /// from its log, as after a crash. Its outcome is `running`.
    pub(super) async fn hand_over(&mut self) -> Result<RunOutcome, ExecutorError> {
        self.rec.publish().await?;
        let why = "the run is handed over";
        self.pausing.cancel(why);
        for run in pause::stopped_at_once(self.state(), &self.workflow) {
            if let Some(cancel) = self.running.get(&run) {
                cancel.cancel(why);
            }
        }
        if let Some(stop) = self.drain(true).await? {
            // A node run that finished meanwhile stopped the run: that is
            // recorded here, as it would have been had the run not been
            // handed over, rather than left for the next writer.
            return self.stop(stop).await;
        }
        self.rec.finish().await?;
        // Its MCP servers stopped first: the next writer starts its own,
        // and finds no port or file still held by these.
        if let Some(mcp) = &self.mcp {
            mcp.close().await;
        }
        // Free for the next writer everywhere before this one says it is.
        if let Some(lock) = self.lock.take() {
            lock.release().await;
        }
        Ok(self.outcome(RunStatus::Running, Value::Null, Some(why.to_owned())))
    }

    /// The store learned that another writer took the run over (a
    /// heartbeat found the lease gone): the error the run stops with at
    /// once. Its node runs are aborted by [`Self::record_system_failure`]
    /// (their agents' process groups killed), and nothing is recorded.
    pub(super) fn lost(&self) -> ExecutorError {
        let run_id = self.state().run_id;
        ExecutorError::Store(StoreError::LeaseLost(format!(
            "run {run_id}: this writer's lease was lost (another writer took the run over); it stopped at once"
        )))
    }

    /// The child runs (`call_workflow`) of the node runs still open once
    /// they wound down, with their definitions: no writer of this process
    /// continues them (see [`cancel_children`]).
    fn left_children(&self) -> Vec<(RunId, Arc<WorkflowDef>)> {
        (self.state().node_runs.values())
            .filter_map(|r| match &self.workflow.node(&r.node_id)?.kind {
                NodeKind::CallWorkflow {
                    resolved: Some(child),
                    ..
                } => Some((r.child?, Arc::clone(child))),
                _ => None,
            })
            .collect()
    }

    /// Cancels every node run and waits for their tasks, recording what
    /// they still send (it happened) until the last one is gone.
    async fn wind_down(&mut self) -> Result<(), ExecutorError> {
        for cancel in self.running.values() {
            cancel.cancel("the run is stopping");
        }
        // Stopping for good, no end is routed, so none asks for a stop.
        self.drain(false).await.map(drop)
    }

    /// Waits for every node run's task to end, recording what they still
    /// send (see [`Self::settle`] for `keep`). Returns the stop that
    /// the end of a node run recorded with `keep` asks for, if any (the
    /// first).
    async fn drain(&mut self, keep: bool) -> Result<Option<Stop>, ExecutorError> {
        // Once an end asked for a stop, the run stops for good: the ends
        // after it are recorded, not routed.
        let mut stop = None;
        loop {
            tokio::select! {
                biased;
                Some(msg) = self.rx.recv() => {
                    let asked = self.settle(msg, keep && stop.is_none()).await?;
                    stop = stop.or(asked);
                }
                joined = self.tasks.next() => if joined.is_none() { break },
            }
        }
        while let Ok(msg) = self.rx.try_recv() {
            let asked = self.settle(msg, keep && stop.is_none()).await?;
            stop = stop.or(asked);
        }
        self.running.clear();
        Ok(stop)
    }

    /// A message that arrives while the run stops. Stopping for good, what
    /// it says is recorded, and a node run's end is never routed. Pausing
    /// or handing over (`keep`), a node run that ended on its own ends as
    /// in a turn of the loop, routed, and the stop that asks for is
    /// returned; one that failed stays in flight (see [`records_end`]).
    async fn settle(&mut self, msg: Msg, keep: bool) -> Result<Option<Stop>, ExecutorError> {
        match msg {
            Msg::Event {
                run,
                node,
                kind,
                ack,
            } => {
                self.record_for(run, &node, kind, ack).await?;
                Ok(None)
            }
            Msg::Completed {
                run,
                node,
                kind,
                end,
                answer,
            } => {
                let ended = self.completed(run, &node, kind, end, answer).await?;
                let Some((recorded, Some(end))) = ended else {
                    return Ok(None);
                };
                let at = recorded.timestamp;
                self.end_while_stopping(run, node, end, keep, |run, node, end| {
                    let end = Some(end);
                    Input::AgentCompleted { run, node, end, at }
                })
                .await
            }
            // No new attempt starts while the run stops: dropped unanswered,
            // the node run ends with its error.
            Msg::AttemptFailed { .. } => Ok(None),
            Msg::Ended { run, node, end } => {
                if !self.state().node_runs.contains_key(&run) {
                    return Ok(None);
                }
                self.end_while_stopping(run, node, end, keep, |run, node, end| Input::NodeEnded {
                    run,
                    node,
                    end,
                })
                .await
            }
        }
    }

    /// A node run's `end` that arrives while the run stops, if it is
    /// recorded at all ([`records_end`]): stopping for good, as it is;
    /// pausing or handing over, as in a turn of the loop, by the `input`
    /// made of it, and the stop that asks for is returned.
    async fn end_while_stopping(
        &mut self,
        run: NodeRunId,
        node: NodeId,
        end: NodeEnd,
        keep: bool,
        input: impl FnOnce(NodeRunId, NodeId, NodeEnd) -> Input,
    ) -> Result<Option<Stop>, ExecutorError> {
        if !records_end(keep, &end) {
            return Ok(None);
        }
        if !keep {
            let ctx: Ctx = (Some(node), Some(run));
            self.rec.emit(ctx, end.into_event(false)).await?;
            return Ok(None);
        }
        self.running.remove(&run);
        self.apply(input(run, node, end), Asker::None).await
    }

    /// Records the runtime's own failure, best effort: the store may be what
    /// failed. No terminal event follows: the run did not fail, its writer
    /// could not go on (a database locked for a while, a full disk), and it
    /// is left as a dead writer leaves it, for `awr resume` to continue.
    pub(super) async fn record_system_failure(&mut self, error: &ExecutorError) {
        self.tasks.clear();
        if let ExecutorError::Store(StoreError::LeaseLost(_)) = error {
            // Another writer has the run: nothing more is this one's to write.
            tracing::warn!(run = %self.rec.state.run_id, "this writer lost the run to another; its node runs are stopped and nothing more is recorded here");
            return;
        }
        let state = self.state();
        if state.status.is_terminal() || state.last_offset == 0 {
            return;
        }
        let message = error.to_string();
        let attempt = async {
            self.rec
                .emit(
                    RUN_LEVEL,
                    EventKind::SystemError {
                        message: message.clone(),
                        details: None,
                    },
                )
                .await?;
            self.rec.finish().await
        };
        if let Err(e) = attempt.await {
            tracing::error!(run = %self.rec.state.run_id, error = %e, "could not record the runtime failure");
        }
    }
}

/// Whether a node run's end that arrives while the run stops is recorded.
/// Stopping for good (`keep` false): always. Pausing or handing the run
/// over (`keep`): only a success. That node run finished on its own, and
/// left in flight it would be done again by the next writer: a command
/// run twice. A failure is not recorded, and the node run stays in flight
/// for the next writer to try again: the pause itself may have caused it
/// (an agent stopped at its safe point ends with an error).
fn records_end(keep: bool, end: &NodeEnd) -> bool {
    !keep || end.error.is_none()
}

/// Cancels the child runs `left` of run `parent` as it stops: one that
/// paused with it, one whose process died. Each is cancelled on its own
/// record, as `awr cancel` would (over its control channel if a writer
/// elsewhere has it), so that no child stays paused or interrupted under a
/// parent that ended. A child that ended already refuses, which is what
/// was wanted; a failure is logged: the parent's end does not wait on its
/// children's storage.
async fn cancel_children(ports: Arc<Ports>, parent: RunId, left: Vec<(RunId, Arc<WorkflowDef>)>) {
    if left.is_empty() {
        return;
    }
    let executor = Executor::of(ports);
    let raw = json!({"type": "cancel", "reason": format!("its parent run {parent} stopped")});
    for (child, workflow) in left {
        // Boxed: a child's cancellation is this same stop, one level down.
        let sent = Box::pin(executor.command(child, &raw, None, async || Ok(workflow))).await;
        match sent {
            Ok(reply) if reply.accepted => {}
            Ok(reply) => tracing::debug!(%child, error = ?reply.error, "child run not cancelled"),
            Err(ExecutorError::Refused(why)) => {
                tracing::debug!(%child, %why, "child run not cancelled");
            }
            Err(e) => {
                tracing::warn!(%child, error = %e, "cannot cancel a child run its parent left")
            }
        }
    }
}

//! How a run stops before it completes: a node failure, a budget, a
//! cancellation, or the runtime's own failure. Every node run in flight is
//! cancelled and waited for, what it still sent is recorded, and each one
//! still open ends with `node:failed`; then the terminal event.

use domain::{EventKind, RunStatus};
use futures::StreamExt;
use serde_json::Value;

use super::Driver;
use super::apply::Asker;
use crate::ports::StoreError;
use crate::run::node_run::Msg;
use crate::run::recorder::{Ctx, RUN_LEVEL};
use crate::run::step::stop::{self, Stop};
use crate::run::step::{Input, pause};
use crate::run::{ExecutorError, RunOutcome};

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
        self.wind_down(false).await?;
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
            if let Some(cancel) = self.running.get(&run) {
                cancel.cancel("the run is pausing");
            }
        }
        self.drain(true).await?;
        let cancelled = match self.cancel.is_cancelled() {
            true => {
                let why = self.cancel.reason().unwrap_or("cancelled").to_owned();
                self.apply(Input::Cancelled(why), Asker::None).await?
            }
            false => None,
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
        self.drain(true).await?;
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

    /// Cancels every node run and waits for their tasks, recording what
    /// they still send (it happened) until the last one is gone; with
    /// `keep`, a node run's end is not recorded: it stays in flight.
    async fn wind_down(&mut self, keep: bool) -> Result<(), ExecutorError> {
        for cancel in self.running.values() {
            cancel.cancel("the run is stopping");
        }
        self.drain(keep).await
    }

    /// Waits for every node run's task to end, recording what they still
    /// send (see [`Self::wind_down`] for `keep`).
    async fn drain(&mut self, keep: bool) -> Result<(), ExecutorError> {
        loop {
            tokio::select! {
                biased;
                Some(msg) = self.rx.recv() => self.settle(msg, keep).await?,
                joined = self.tasks.next() => if joined.is_none() { break },
            }
        }
        while let Ok(msg) = self.rx.try_recv() {
            self.settle(msg, keep).await?;
        }
        self.running.clear();
        Ok(())
    }

    /// A message that arrives while the run stops: recorded, never routed.
    async fn settle(&mut self, msg: Msg, keep: bool) -> Result<(), ExecutorError> {
        match msg {
            Msg::Event {
                run,
                node,
                kind,
                ack,
            } => {
                self.record_for(run, &node, kind, ack).await?;
            }
            Msg::Completed {
                run,
                node,
                kind,
                end,
                answer,
            } => {
                let ended = self.completed(run, &node, kind, end, answer).await?;
                if let Some((_, Some(end))) = ended
                    && !keep
                {
                    let ctx: Ctx = (Some(node), Some(run));
                    self.rec.emit(ctx, end.into_event(false)).await?;
                }
            }
            // No new attempt starts while the run stops: dropped unanswered,
            // the node run ends with its error.
            Msg::AttemptFailed { .. } => {}
            Msg::Ended { run, node, end } => {
                if !keep && self.state().node_runs.contains_key(&run) {
                    let ctx: Ctx = (Some(node), Some(run));
                    self.rec.emit(ctx, end.into_event(false)).await?;
                }
            }
        }
        Ok(())
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

//! The driver's side of `approval` node runs (`step::approval` decides):
//! it asks each new question, ends the node runs whose question is
//! settled, and stops the run `waiting` when nothing else is left to do.

use std::sync::Arc;

use domain::{EventKind, NodeId, NodeRunId, Timestamp};
use serde_json::Value;

use super::Driver;
use crate::run::conversation;
use crate::run::node_run::{Continuation, NodeEnd};
use crate::run::recorder::RUN_LEVEL;
use crate::run::step::approval;
use crate::run::step::stop::Stop;
use crate::run::{ExecutorError, RunOutcome};

pub(super) use crate::run::step::approval::next_deadline;

/// What settling the run's questions led to.
pub(super) enum Settled {
    /// Nothing changed.
    Still,
    /// A node run ended: the scheduler may have something to start.
    Moved,
    /// The run stops.
    Stop(Stop),
}

impl Driver {
    /// Asks the questions not yet asked, then ends each node run whose
    /// question is answered or past its deadline, in the order
    /// [`approval::due`] gives.
    pub(super) async fn settle_approvals(&mut self) -> Result<Settled, ExecutorError> {
        // A run with no question costs its loop nothing more than this.
        let asks = |r: &domain::snapshot::NodeRunState| r.approval.is_some();
        if self.to_ask.is_empty() && !self.state().node_runs.values().any(asks) {
            return Ok(Settled::Still);
        }
        let now = self.ports.clock.now();
        let mut moved = false;
        for run in std::mem::take(&mut self.to_ask) {
            if let Some(stop) = self.ask(run, now).await? {
                return Ok(Settled::Stop(stop));
            }
            // A question asked holds no slot (`decide::busy`): a node that
            // found none may start now.
            moved = true;
        }
        if self
            .state()
            .node_runs
            .values()
            .all(|r| r.approval.is_none())
        {
            return Ok(if moved {
                Settled::Moved
            } else {
                Settled::Still
            });
        }
        for settled in approval::due(self.state(), &self.workflow, now) {
            let ctx = (Some(settled.node.clone()), Some(settled.run));
            self.rec.emit(ctx, settled.resolved).await?;
            let Some(end) = settled.end else {
                // A tool call answered: a CLI agent, still running, hears
                // it from the record (its permission prompt waits on it);
                // an HTTP agent's turn is finished by a new invocation.
                if !self.running.contains_key(&settled.run) {
                    self.finish_turn(settled.run, &settled.node).await?;
                }
                moved = true;
                continue;
            };
            if let Some(stop) = self.node_ended(settled.run, &settled.node, end).await? {
                return Ok(Settled::Stop(stop));
            }
            moved = true;
        }
        Ok(if moved {
            Settled::Moved
        } else {
            Settled::Still
        })
    }

    /// Asks approval node run `run`'s question at `now` unless it has: a
    /// prompt that cannot be rendered fails the node run.
    async fn ask(&mut self, run: NodeRunId, now: Timestamp) -> Result<Option<Stop>, ExecutorError> {
        let Some(node) = self.state().node_runs.get(&run).map(|r| r.node_id.clone()) else {
            return Ok(None);
        };
        match approval::question(self.state(), &self.workflow, run, now) {
            None => Ok(None),
            Some(Ok(requested)) => {
                self.rec.emit((Some(node), Some(run)), requested).await?;
                // On record before anyone can answer it.
                self.rec.checkpoint().await?;
                Ok(None)
            }
            Some(Err(error)) => self.node_ended(run, &node, NodeEnd::failed(error)).await,
        }
    }

    /// Starts the invocation that finishes node run `run`'s open model
    /// turn, now that the call it waited on is answered: its conversation
    /// is read back from the record, as after a crash.
    async fn finish_turn(&mut self, run: NodeRunId, node: &NodeId) -> Result<(), ExecutorError> {
        let Some(current) = self.state().node_runs.get(&run) else {
            return Ok(());
        };
        let (session, input) = (current.session.clone(), Arc::clone(&current.input));
        let rebuilt = conversation::rebuild(&self.events().await?, run);
        let next = Continuation {
            session,
            history: rebuilt.messages,
            approved_call: rebuilt.approved,
            ..Continuation::default()
        };
        self.spawn_for(run, node, input, Some(next)).await
    }

    /// Whether the run has nothing left but people to wait for.
    pub(super) fn waits_for_people(&self) -> bool {
        self.to_ask.is_empty() && approval::only_people(self.state(), &self.workflow)
    }

    /// Stops the run `waiting` ([`Stop::Waiting`]): `flow:paused` with
    /// `waiting`, and the final snapshot. Nothing runs; an answer, or a
    /// deadline passing, continues it through the resume path.
    pub(super) async fn wait_for_people(&mut self) -> Result<RunOutcome, ExecutorError> {
        let reason = "waiting for a person to answer".to_owned();
        let paused = EventKind::FlowPaused {
            reason: Some(reason.clone()),
            waiting: true,
        };
        self.rec.emit(RUN_LEVEL, paused).await?;
        self.rec.finish().await?;
        let status = domain::RunStatus::Waiting;
        Ok(self.outcome(status, Value::Null, Some(reason)))
    }
}

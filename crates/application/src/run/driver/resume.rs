//! How a node run in flight goes on: after a resume (its writer paused, or
//! died), or after a turn when messages for it arrived meanwhile.
//!
//! All of it is read off the state, so it is the same whichever process
//! wrote the run before: an agent whose provider named a session continues
//! it (CLI agents resume natively; HTTP agents get their conversation
//! rebuilt from the record); an agent whose last invocation finished ends
//! with that result; anything else starts a new attempt of the same node
//! run, redoing the provider call it had begun under the same call index.

use std::sync::Arc;

use domain::{EventKind, NodeId, NodeRunId, RunSnapshot, RuntimeCommand, WorkflowDef};
use serde_json::Value;

use super::apply::Asker;
use super::tail::TAIL;
use super::{Driver, Endpoints, Stop};
use crate::inspect::snapshot_and_tail;
use crate::ports::{CommandReply, RunLock};
use crate::run::control::Cancel;
use crate::run::conversation;
use crate::run::node_run::Continuation;
use crate::run::recorder::RUN_LEVEL;
use crate::run::step::approval;
use crate::run::step::resume::{self, GoOn, LastStep};
use crate::run::step::{Input, stop};
use crate::run::{Continue, Parent, Ports, RunOutcome, resumable};
use crate::run::{ExecutorError, commands};
use domain::Caller;
use domain::command::DEFAULT_RESUME_MESSAGE;
use domain::definition::Definition;
use domain::event::WorkflowRef;

impl Driver {
    /// Continues the run `lock` holds from its state (folded from its
    /// log): `flow:resumed`, then every node run in flight goes on (see
    /// [`Self::go_on`]), then the loop. Nothing is synced before the
    /// provider calls it leads to: the next step boundary does that
    /// (design §4.2, §11).
    ///
    /// The fold is on the way to the provider call; the sweep for processes
    /// the previous writer left (a scan of every process, the slowest part)
    /// and the opening of the endpoints are not, and depend on nothing it
    /// reads: one task does them meanwhile, and the resume waits for it
    /// before anything starts.
    pub(crate) async fn resume(
        ports: Arc<Ports>,
        lock: RunLock,
        parent: Option<Parent>,
        workflow: Arc<WorkflowDef>,
        how: Continue,
        cancel: Cancel,
    ) -> Result<RunOutcome, ExecutorError> {
        let (run_id, epoch) = (lock.run_id(), lock.epoch());
        let (parent, parent_pausing) = Parent::split(parent);
        // The sweep starts at once on a blocking thread, so it runs beside
        // the fold on a runtime of one thread too (`awr resume`'s).
        let sweep = (ports.processes.clone())
            .map(|processes| tokio::task::spawn_blocking(move || processes.kill_run(run_id)));
        let aside = tokio::spawn({
            let (ports, workflow) = (Arc::clone(&ports), Arc::clone(&workflow));
            async move {
                let endpoints =
                    Endpoints::open(&ports, run_id, epoch, parent, true, &workflow).await;
                if let Some(sweep) = sweep {
                    match sweep.await {
                        Ok(0) => {}
                        Ok(found) => {
                            tracing::info!(found, run = %run_id, "killed processes the run's previous writer left");
                        }
                        // The runtime shuts down: the resume has ended.
                        Err(e) if e.is_cancelled() => {}
                        Err(e) => {
                            tracing::warn!(run = %run_id, error = %e, "the sweep for processes the run's previous writer left failed");
                        }
                    }
                }
                endpoints
            }
        });
        let loaded = snapshot_and_tail(ports.store.as_ref(), run_id, TAIL).await;
        let refused = loaded
            .map_err(ExecutorError::from)
            .and_then(|(state, tail)| {
                resumable(&state, &workflow, matches!(how, Continue::Upgrade(..)))?;
                Ok((state, tail))
            });
        let (state, tail) = match refused {
            Ok(loaded) => loaded,
            Err(e) => {
                // Nothing is continued nor opened (the sweep may be under
                // way: it only ends processes of a writer that is dead).
                aside.abort();
                return Err(e);
            }
        };
        let endpoints = match aside.await {
            Ok(endpoints) => endpoints?,
            // As if it had run here.
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => {
                return Err(ExecutorError::Refused(format!(
                    "run {run_id}: the runtime shut down while the resume began: {e}"
                )));
            }
        };
        let mut driver = Self::with(ports, lock, workflow, state, cancel, endpoints);
        driver.parent_pausing = parent_pausing;
        driver.tail = tail;
        let result = async {
            let (message, by) = match &how {
                Continue::Resume(message, by) | Continue::Upgrade(message, by, _) => {
                    (message.clone(), by.clone())
                }
                Continue::Recover(by) => (DEFAULT_RESUME_MESSAGE.to_owned(), by.clone()),
                Continue::Fork => (DEFAULT_RESUME_MESSAGE.to_owned(), None),
            };
            let fork = matches!(how, Continue::Fork);
            // A fork (or a child forked with it) that has done nothing yet,
            // before it records anything here: its transcript is its copied
            // log's, then its own.
            let unrun_fork = driver
                .state()
                .forked_from
                .is_some_and(|f| driver.state().last_offset == f.offset + 1);
            let resumed = EventKind::FlowResumed {
                message: Some(message.clone()),
                by,
            };
            if let Some(stop) = resume::stop_under_way(driver.state(), &how) {
                let in_flight: Vec<NodeRunId> = driver.state().node_runs.keys().copied().collect();
                for run in in_flight {
                    driver.kill_leftovers(run);
                }
                return driver.stop(stop).await;
            }
            if let Some(stop) = driver.finish_last_step().await? {
                return driver.stop(stop).await;
            }
            if unrun_fork {
                driver.project_transcript().await?;
            } else {
                driver.restore_transcript().await?;
            }
            driver.tail = Vec::new();
            if let Continue::Upgrade(_, by, source) = &how {
                let workflow = Arc::clone(&driver.workflow);
                // Its files, kept with the run before it goes on under them.
                let definition = match source {
                    Some(source) => {
                        let definition = Definition::of(&workflow, source);
                        Some(driver.ports.store.save_definition(&definition).await?)
                    }
                    None => None,
                };
                let upgraded = EventKind::FlowUpgraded {
                    from: driver.state().workflow.clone(),
                    to: WorkflowRef {
                        extra: Default::default(),
                        name: workflow.name.clone(),
                        hash: workflow.hash.clone(),
                    },
                    definition,
                    nodes: workflow.nodes.iter().map(|n| n.id.clone()).collect(),
                    edges: workflow.edges.iter().map(|e| e.id.clone()).collect(),
                    by: by.clone(),
                };
                driver.rec.emit(RUN_LEVEL, upgraded).await?;
            }
            if !fork {
                // A fork's `flow:forked` is on record already, in its place.
                driver.rec.emit(RUN_LEVEL, resumed).await?;
            }
            let in_flight: Vec<NodeRunId> = driver.state().node_runs.keys().copied().collect();
            for run in in_flight {
                if let Some(stop) = driver.go_on(run, &message).await? {
                    return driver.stop(stop).await;
                }
            }
            // No step boundary here: a resume starts no step, it goes on
            // with the ones in flight, and their ends sync the log (with
            // `flow:resumed`) as any step's does. A sync and a snapshot
            // here would stand between the resume and the provider call.
            driver.drive().await
        }
        .await;
        driver.settle_result(result).await
    }

    /// Records a command to a run no process writes (see
    /// [`Self::offline_command`]).
    pub(crate) async fn record_command(
        ports: Arc<Ports>,
        lock: RunLock,
        workflow: Arc<WorkflowDef>,
        state: RunSnapshot,
        raw: Value,
        by: Option<Caller>,
    ) -> Result<CommandReply, ExecutorError> {
        let cancel = Cancel::new();
        let mut driver = Self::open(ports, lock, None, workflow, state, cancel, false).await?;
        driver.offline_command(raw, by).await
    }

    /// Finishes the step the previous writer died in, read off the end of
    /// its log. A node's end is recorded, then at once either that node's
    /// edge events one by one, or (a failure that stops the run) the end of
    /// every other node run in flight and `flow:failed`; a kill in between
    /// leaves the end of the log as that end and some of what follows it.
    ///
    /// Routing is computed again (from outputs and counters, which edge
    /// events do not change, so it is the one that was under way) and the
    /// edge events not on record are recorded; a failure that was stopping
    /// the run stops it. A loop edge that fired sends its source back to
    /// pending: then there is nothing left to do.
    pub(super) async fn finish_last_step(&mut self) -> Result<Option<Stop>, ExecutorError> {
        match self.last_step().await? {
            Some(LastStep::Routing { node, recorded }) => {
                let unfinished = Input::RoutingUnfinished { node, recorded };
                self.apply(unfinished, Asker::None).await
            }
            Some(LastStep::Failing { node, run, error }) => {
                // Which item failed, if any, its `node:started` says.
                let item = self.item_of(run).await?;
                Ok(Some(stop::node_failed(&node, item, &error)))
            }
            None => Ok(None),
        }
    }

    /// Node run `run`, found in flight by a resume, goes on as
    /// [`resume::go_on`] decides; the processes its previous writer left
    /// are killed first.
    pub(super) async fn go_on(
        &mut self,
        run: NodeRunId,
        message: &str,
    ) -> Result<Option<Stop>, ExecutorError> {
        self.kill_leftovers(run);
        let Some(current) = self.state().node_runs.get(&run) else {
            return Ok(None);
        };
        let (node, input) = (current.node_id.clone(), Arc::clone(&current.input));
        if let Some(abandoned) = approval::abandoned(self.state(), &self.workflow, run) {
            // Its CLI agent asked, and is gone: the question with it.
            self.rec
                .emit((Some(node.clone()), Some(run)), abandoned)
                .await?;
        }
        let here = self.ports.processes.as_ref().and_then(|p| p.host());
        let afresh =
            match resume::go_on(self.state(), &self.workflow, run, message, here.as_deref()) {
                GoOn::Items => return Ok(None),
                GoOn::Ends(end) => return self.node_ended(run, &node, end).await,
                GoOn::Converse { redo_call, afresh } => {
                    match self.deliver(run, Some(message)).await? {
                        Some(mut next) => {
                            if redo_call.is_some() {
                                next.call_index = redo_call;
                            }
                            self.spawn_for(run, &node, input, Some(next)).await?;
                            return Ok(None);
                        }
                        None => afresh,
                    }
                }
                GoOn::Child(next) => {
                    self.spawn_for(run, &node, input, Some(next)).await?;
                    return Ok(None);
                }
                GoOn::Ask => {
                    self.to_ask.push(run);
                    return Ok(None);
                }
                GoOn::Afresh(afresh) => afresh,
            };
        if let Some(started) = afresh.started {
            self.rec
                .emit((Some(node.clone()), Some(run)), started)
                .await?;
        }
        self.spawn_for(run, &node, input, afresh.resume).await?;
        Ok(None)
    }

    /// Starts the task of node run `run` of `node` (in the workflow: see
    /// [`resume::go_on`]).
    pub(super) async fn spawn_for(
        &mut self,
        run: NodeRunId,
        node: &NodeId,
        input: Arc<Value>,
        resume: Option<Continuation>,
    ) -> Result<(), ExecutorError> {
        let Some(def) = self.workflow.node(node).cloned() else {
            return Ok(());
        };
        self.spawn_task(run, def, input, resume).await
    }

    /// Kills every process the run's previous writer started that still
    /// lives, recorded or not (it may have died between starting one and
    /// recording it). Only a run with node runs in flight can have any.
    pub(super) fn kill_run_leftovers(&self) {
        let state = self.state();
        let Some(processes) = self
            .ports
            .processes
            .as_ref()
            .filter(|_| !state.node_runs.is_empty())
        else {
            return;
        };
        let found = processes.kill_run(state.run_id);
        if found > 0 {
            tracing::info!(found, run = %state.run_id, "killed processes the run's previous writer left");
        }
    }

    /// Kills the process groups node run `run` started that may outlive a
    /// writer that died: their pid and start time are on record.
    pub(super) fn kill_leftovers(&self, run: NodeRunId) {
        let (Some(processes), Some(state)) =
            (&self.ports.processes, self.state().node_runs.get(&run))
        else {
            return;
        };
        if let (Some(there), Some(here)) = (&state.host, processes.host())
            && *there != here
        {
            tracing::info!(node_run = %run, host = %there, "the run's previous writer's processes are on another machine; left alone");
            return;
        }
        for p in &state.processes {
            if processes.kill_group(p.pid, p.start_time) {
                tracing::info!(pid = p.pid, node_run = %run, "killed a process group the run's previous writer left");
            }
        }
    }

    /// A command to a run that no process writes, recorded by the caller
    /// under the run's lock: judged as for a live run, except that a
    /// message waits in the inbox for the resume; a cancel ends the run
    /// (killing what its dead writer left), a pause marks it paused.
    pub(super) async fn offline_command(
        &mut self,
        raw: serde_json::Value,
        by: Option<Caller>,
    ) -> Result<CommandReply, ExecutorError> {
        let now = self.ports.clock.now();
        let verdict = commands::judge(self.state(), &self.workflow, &raw, false, by.as_ref(), now);
        let error = verdict.as_ref().err().cloned();
        let received = EventKind::CommandReceived {
            command: raw,
            accepted: error.is_none(),
            error: error.clone(),
            by,
        };
        let event = self.rec.emit(RUN_LEVEL, received).await?;
        let reply = CommandReply {
            accepted: error.is_none(),
            offset: event.offset.get(),
            error,
        };
        let in_flight: Vec<NodeRunId> = self.state().node_runs.keys().copied().collect();
        match verdict {
            Ok(RuntimeCommand::Cancel { reason }) => {
                self.kill_run_leftovers();
                for run in in_flight {
                    self.kill_leftovers(run);
                }
                let reason = reason.unwrap_or_else(|| "cancelled by a command".to_owned());
                self.stop(Stop::Cancelled(reason)).await?;
            }
            Ok(RuntimeCommand::Pause) => {
                self.kill_run_leftovers();
                for run in in_flight {
                    self.kill_leftovers(run);
                }
                self.stop(Stop::Paused("paused by a command".to_owned()))
                    .await?;
            }
            _ => self.rec.finish().await?,
        }
        Ok(reply)
    }

    /// The invocation that continues node run `run`'s conversation with
    /// `first` (a resume message) and the messages waiting in its inbox
    /// ([`resume::converse`]); `None` when there is nothing to say, or no
    /// conversation to continue. An HTTP agent's conversation is read back
    /// from the log.
    pub(super) async fn deliver(
        &mut self,
        run: NodeRunId,
        first: Option<&str>,
    ) -> Result<Option<Continuation>, ExecutorError> {
        let Some(converse) = resume::converse(self.state(), &self.workflow, run, first) else {
            return Ok(None);
        };
        let mut next = converse.next;
        if converse.http {
            let rebuilt = conversation::rebuild(&self.events().await?, run);
            if rebuilt.open {
                // The model's turn is not over: its waiting calls run first,
                // and the messages wait for the turn's end.
                return Ok(Some(Continuation {
                    session: next.session,
                    history: rebuilt.messages,
                    approved_call: rebuilt.approved,
                    call_index: next.call_index,
                    fork: next.fork,
                    ..Continuation::default()
                }));
            }
            next.history = rebuilt.messages;
        }
        if next.history.is_empty() && (converse.http || next.session.is_none()) {
            return Ok(None);
        }
        Ok(Some(next))
    }

    /// The `for_each` item node run `run` worked on, from its `node:started`.
    async fn item_of(&mut self, run: Option<NodeRunId>) -> Result<Option<u32>, ExecutorError> {
        let Some(run) = run else { return Ok(None) };
        Ok(self.events().await?.iter().find_map(|e| match &e.kind {
            EventKind::NodeStarted { item, .. } if e.node_run_id == Some(run) => *item,
            _ => None,
        }))
    }
}

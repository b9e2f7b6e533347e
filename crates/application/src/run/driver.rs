//! [`Driver`]: the loop of one run, and the runner of its effects. It
//! decides nothing itself: the scheduler ([`decide`]) and the transitions
//! (`run::step`) do, and it records what they say and carries it out.
//!
//! The loop owns the run's [`Recorder`] (so it is the run's single writer)
//! and the node runs in flight, each a future under a child of the run's
//! [`Cancel`]. It polls them itself, in its own task, while it waits: a
//! node run is an agent's stream or a process's pipes, so a run's node runs
//! need turns, not threads, and a message from one to the loop is a queue
//! push and a wake-up of the task already running, not a hand-off to
//! another task. A child run (`call_workflow`) is the exception: it is a
//! driver of its own, which takes the store's shared resources across its
//! awaits, so it runs as a task (see [`Driver::spawn_task`]).
//!
//! A turn of the loop: turn what [`decide`] says into inputs
//! until it says nothing; check the budgets (`Input::Tick`); then wait for
//! one thing — a message from a node run, a command, a cancellation, a
//! deadline — and hand it to `step` as an input ([`Driver::apply`]).
//!
//! A message of a node run that is no longer in flight (it was failed or
//! cancelled meanwhile) is dropped: the state, not the task, says who may
//! still write.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use domain::definition::Definition;
use domain::event::WorkflowRef;
use domain::{EventKind, NodeId, NodeRunId, RunId, RunSnapshot, RunStatus, WorkflowDef};
use futures::stream::{FuturesUnordered, StreamExt};
use serde_json::Value;
use tokio::sync::mpsc;

mod apply;
mod approvals;
mod commands;
mod endpoints;
mod node_runs;
mod resume;
mod stop;
mod tail;

use self::apply::Asker;
use self::endpoints::Endpoints;
use self::node_runs::NodeFuture;

use super::control::Cancel;
use super::decide::{Action, decide};
use super::node_run::{Ack, Continuation, Msg, NodeEnd};
use super::recorder::{RUN_LEVEL, Recorded, Recorder};
use super::step::stop::Stop;
use super::step::{Input, budget, start};
use super::{ExecutorError, Parent, Ports, RunOutcome, RunRequest};
use crate::mcp::McpServers;
use crate::ports::{Listener, RunLock};

/// Messages from node runs waiting to be recorded. Bounded so that an agent
/// that streams faster than the disk takes waits for the writer instead of
/// filling memory; 256 keeps a burst of deltas from stalling the agent.
const CHANNEL: usize = 256;

pub(crate) struct Driver {
    ports: Arc<Ports>,
    workflow: Arc<WorkflowDef>,
    /// The run input (`flow:started`'s).
    input: Value,
    rec: Recorder,
    cancel: Cancel,
    /// Fired by a pause: each agent stops at its next safe point.
    pausing: Cancel,
    tx: mpsc::Sender<Msg>,
    rx: mpsc::Receiver<Msg>,
    /// The node runs' futures (a child run's: its task's handle), polled
    /// by the loop while it waits.
    tasks: FuturesUnordered<NodeFuture>,
    /// The cancellation of each node run in flight.
    running: HashMap<NodeRunId, Cancel>,
    /// Nodes that may start but found no free slot: candidates of the next
    /// decision (a node run ending frees a slot).
    ready: BTreeSet<usize>,
    /// Nodes with a budget of their own ([`budget::budgeted`]).
    budgeted: Vec<usize>,
    /// Where commands for the run arrive from other processes.
    listener: Option<Listener>,
    /// The parent's pause, for a child run: it pauses with its parent, to
    /// be continued with it.
    parent_pausing: Option<Cancel>,
    /// The last events a resume folded, until it has looked at them.
    tail: Vec<domain::RuntimeEvent>,
    /// This process's right to write the run, held until the run ends
    /// (taken out only to be released at a hand-over).
    lock: Option<RunLock>,
    /// The run's MCP servers, shared by its node runs, closed when this
    /// writer lets go of the run.
    mcp: Option<Arc<McpServers>>,
    /// Approval node runs started (or found in flight by a resume) whose
    /// question is yet to be asked, if it has not been.
    to_ask: Vec<NodeRunId>,
}

impl Driver {
    /// Opens the run for writing, at `state` (nothing, for a new run).
    async fn open(
        ports: Arc<Ports>,
        lock: RunLock,
        parent: Option<RunId>,
        workflow: Arc<WorkflowDef>,
        state: RunSnapshot,
        cancel: Cancel,
        listen: bool,
    ) -> Result<Self, ExecutorError> {
        let endpoints = Endpoints::open(
            &ports,
            lock.run_id(),
            lock.epoch(),
            parent,
            listen,
            &workflow,
        )
        .await?;
        Ok(Self::with(ports, lock, workflow, state, cancel, endpoints))
    }

    /// The writer of the run at `state`, its endpoints open.
    fn with(
        ports: Arc<Ports>,
        lock: RunLock,
        workflow: Arc<WorkflowDef>,
        state: RunSnapshot,
        cancel: Cancel,
        endpoints: Endpoints,
    ) -> Self {
        let input = state.input.clone();
        let rec = Recorder::new(
            Arc::clone(&ports),
            Arc::clone(&workflow),
            state,
            endpoints.transcript,
        )
        .with_live(endpoints.live);
        let (tx, rx) = mpsc::channel(CHANNEL);
        let budgeted = budget::budgeted(&workflow);
        Driver {
            ports,
            workflow,
            input,
            rec,
            cancel,
            pausing: Cancel::new(),
            tx,
            rx,
            tasks: FuturesUnordered::new(),
            running: HashMap::new(),
            ready: BTreeSet::new(),
            budgeted,
            listener: endpoints.listener,
            parent_pausing: None,
            tail: Vec::new(),
            lock: Some(lock),
            mcp: endpoints.mcp,
            to_ask: Vec::new(),
        }
    }

    /// Starts a new run: `flow:started`, durable, then the loop (its first
    /// snapshot when the checkpoint policy asks for one).
    pub async fn start(
        ports: Arc<Ports>,
        lock: RunLock,
        parent: Option<Parent>,
        request: RunRequest,
        cancel: Cancel,
    ) -> Result<RunOutcome, ExecutorError> {
        let state = RunSnapshot::new(lock.run_id());
        let workflow = request.workflow;
        let (parent, parent_pausing) = Parent::split(parent);
        let mut driver = Self::open(
            ports,
            lock,
            parent,
            Arc::clone(&workflow),
            state,
            cancel,
            true,
        )
        .await?;
        driver.parent_pausing = parent_pausing;
        driver.input = request.input;
        let result = async {
            // The files it runs, kept with it before it starts, so it
            // continues from them wherever it is resumed.
            let definition = match &request.source {
                Some(source) => {
                    let definition = Definition::of(&workflow, source);
                    Some(driver.ports.store.save_definition(&definition).await?)
                }
                None => None,
            };
            let started = EventKind::FlowStarted {
                workflow: WorkflowRef {
                    extra: Default::default(),
                    name: workflow.name.clone(),
                    hash: workflow.hash.clone(),
                },
                input: driver.input.clone(),
                parent_run_id: parent,
                source: request.source,
                definition,
                nodes: workflow.nodes.iter().map(|n| n.id.clone()).collect(),
                edges: workflow.edges.iter().map(|e| e.id.clone()).collect(),
                started_by: request.started_by,
            };
            driver.rec.new_run();
            driver.rec.emit(RUN_LEVEL, started).await?;
            driver.rec.checkpoint().await?;
            driver.drive().await
        }
        .await;
        driver.settle_result(result).await
    }

    /// The runtime's own failure is recorded, as far as it can be.
    async fn settle_result(
        &mut self,
        result: Result<RunOutcome, ExecutorError>,
    ) -> Result<RunOutcome, ExecutorError> {
        if let Err(error) = &result {
            self.record_system_failure(error).await;
        }
        // Nothing calls them any more: every node run has ended (or was
        // left to a later writer, which starts its own).
        if let Some(mcp) = &self.mcp {
            mcp.close().await;
        }
        result
    }

    fn state(&self) -> &RunSnapshot {
        &self.rec.state
    }

    async fn drive(&mut self) -> Result<RunOutcome, ExecutorError> {
        // Kept across the loop's turns: each waits on its token once.
        let cancelled = self.cancel.fired();
        let handed_over = self.cancel.hand_over_asked();
        tokio::pin!(cancelled, handed_over);
        loop {
            match self.act().await? {
                Some(Next::Complete(output)) => return self.complete(output).await,
                Some(Next::Stop(stop)) => return self.stop(stop).await,
                None => {}
            }
            match self.settle_approvals().await? {
                approvals::Settled::Stop(stop) => return self.stop(stop).await,
                // A node run ended: decide again.
                approvals::Settled::Moved => continue,
                approvals::Settled::Still => {}
            }
            if self.running.is_empty() && self.waits_for_people() {
                return self.stop(Stop::Waiting).await;
            }
            let now = self.ports.clock.now();
            if let Some(stop) = self.apply(Input::Tick { now }, Asker::None).await? {
                return self.stop(stop).await;
            }
            let next = budget::next_deadline(self.state(), &self.workflow, &self.budgeted);
            let asked = approvals::next_deadline(self.state(), &self.workflow);
            let deadline = next.into_iter().chain(asked).min().map(|at| {
                self.ports
                    .clock
                    .sleep(Duration::from_millis(at.millis_since(now)))
            });
            let deadline = async {
                match deadline {
                    Some(wait) => wait.await,
                    None => std::future::pending().await,
                }
            };
            // Nothing recorded waits while the run waits: the node runs
            // and the observer see it now.
            self.rec.publish().await?;
            let stop = tokio::select! {
                biased;
                () = cancelled.as_mut() => {
                    let reason = self.cancel.reason().unwrap_or("cancelled").to_owned();
                    self.apply(Input::Cancelled(reason), Asker::None).await?
                }
                () = commands::until(handed_over.as_mut()) => return self.hand_over().await,
                () = commands::lost(self.lock.as_ref()) => return Err(self.lost()),
                () = commands::parent_paused(self.parent_pausing.as_ref()) => {
                    // Fired once: the pause that follows does not come back
                    // to the loop.
                    self.parent_pausing = None;
                    self.apply(Input::ParentPaused, Asker::None).await?
                }
                Some(msg) = self.rx.recv() => self.handle_queued(msg).await?,
                // Before the commands: polled here, the node runs go on
                // however many commands arrive (only a node run's end
                // makes it ready).
                Some((run, ended)) = self.tasks.next() => self.reap(run, ended).await?,
                Some(delivery) = commands::next(&mut self.listener) => {
                    let child = self.parent_pausing.is_some();
                    let at = self.ports.clock.now();
                    let command = Input::Command { raw: delivery.raw, by: delivery.by, child, at };
                    self.apply(command, Asker::Sender(delivery.reply)).await?
                }
                // The checks at the top of the loop see the deadline.
                () = deadline => None,
            };
            if let Some(stop) = stop {
                return self.stop(stop).await;
            }
        }
    }

    /// Carries out what [`decide`] says until it says nothing more.
    async fn act(&mut self) -> Result<Option<Next>, ExecutorError> {
        loop {
            let mut candidates = self.rec.take_touched();
            candidates.append(&mut self.ready);
            let decision = decide(self.state(), &self.workflow, &self.input, &candidates);
            self.ready = decision.ready.into_iter().collect();
            if decision.actions.is_empty() {
                return Ok(None);
            }
            for action in decision.actions {
                let input = match action {
                    Action::Complete { output } => return Ok(Some(Next::Complete(output))),
                    Action::FinishItems { node } => match self.finish_items(&node).await? {
                        Some(stop) => return Ok(Some(Next::Stop(stop))),
                        None => continue,
                    },
                    Action::Skip { node, reason } => Input::Skip { node, reason },
                    Action::Start { node, input, items } => Input::Start {
                        run: NodeRunId::new(self.ports.ids.uuid()),
                        node,
                        input,
                        item: None,
                        items: items.map(|i| u32::try_from(i.len()).unwrap_or(u32::MAX)),
                    },
                    Action::StartItem { node, index, input } => Input::Start {
                        run: NodeRunId::new(self.ports.ids.uuid()),
                        node,
                        input,
                        item: Some(index),
                        items: None,
                    },
                };
                if let Some(stop) = self.apply(input, Asker::None).await? {
                    return Ok(Some(Next::Stop(stop)));
                }
            }
        }
    }

    /// A message of a node run, then those already queued behind it (up
    /// to a channel's worth, so a stream that never pauses still lets the
    /// loop decide): an agent's burst of deltas is recorded in one `write`
    /// instead of one each, and no message waits for it.
    async fn handle_queued(&mut self, msg: Msg) -> Result<Option<Stop>, ExecutorError> {
        let mut stop = self.handle(msg).await?;
        for _ in 1..CHANNEL {
            if stop.is_some() {
                break;
            }
            let Ok(msg) = self.rx.try_recv() else { break };
            stop = self.handle(msg).await?;
        }
        Ok(stop)
    }

    /// One message of a node run.
    async fn handle(&mut self, msg: Msg) -> Result<Option<Stop>, ExecutorError> {
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
                let Some((recorded, end)) = self.completed(run, &node, kind, end, answer).await?
                else {
                    return Ok(None);
                };
                if end.is_some() {
                    self.running.remove(&run);
                }
                let at = recorded.timestamp;
                let completed = Input::AgentCompleted { run, node, end, at };
                self.apply(completed, Asker::None).await
            }
            Msg::AttemptFailed {
                run,
                failure,
                answer,
            } => {
                let failed = Input::AttemptFailed { run, failure };
                self.apply(failed, Asker::NodeRun(answer)).await
            }
            Msg::Ended { run, node, end } => {
                if !self.state().node_runs.contains_key(&run) {
                    return Ok(None);
                }
                self.running.remove(&run);
                self.node_ended(run, &node, end).await
            }
        }
    }

    /// Records an event a node run sent, if that node run is still in
    /// flight, then answers its acknowledgement once it is stored (the
    /// sender must not wait for a run that dropped its message). An
    /// `agent:start` is numbered first ([`start::numbered`]).
    async fn record_for(
        &mut self,
        run: NodeRunId,
        node: &NodeId,
        mut kind: EventKind,
        ack: Option<tokio::sync::oneshot::Sender<Ack>>,
    ) -> Result<Option<Recorded>, ExecutorError> {
        if !self.state().node_runs.contains_key(&run) {
            return Ok(None);
        }
        let mut answer = Ack::default();
        let starts = matches!(kind, EventKind::AgentStart { .. });
        if let EventKind::AgentStart {
            call_index,
            instance,
            instance_call,
            ..
        } = &mut kind
        {
            let call = start::numbered(self.state(), run, node, *call_index);
            *call_index = Some(call.call_index);
            *instance = Some(call.instance.clone());
            *instance_call = Some(call.instance_call);
            answer = call;
        }
        let asks = matches!(kind, EventKind::ApprovalRequested { .. });
        let recorded = self.rec.emit((Some(node.clone()), Some(run)), kind).await?;
        if starts {
            answer.traceparent = self.rec.traceparent(recorded.offset);
        }
        if asks {
            // A tool call waits for a person: the node run's task ends, and
            // the question is on record before anyone can answer it.
            self.running.remove(&run);
            self.rec.checkpoint().await?;
        }
        if let Some(ack) = ack {
            self.rec.publish().await?;
            let _ = ack.send(answer);
        }
        Ok(Some(recorded))
    }

    /// Records an agent's result (see [`Msg::Completed`]), if its node run
    /// is still in flight, and answers it: with the invocation that
    /// delivers the messages waiting for the node run, or, when none wait,
    /// with `None`, and the node run's `end` is returned for the caller to
    /// record. That answer, which the task only ends on, need not wait for
    /// a write.
    async fn completed(
        &mut self,
        run: NodeRunId,
        node: &NodeId,
        kind: EventKind,
        end: NodeEnd,
        answer: tokio::sync::oneshot::Sender<Option<Continuation>>,
    ) -> Result<Option<(Recorded, Option<NodeEnd>)>, ExecutorError> {
        if !self.state().node_runs.contains_key(&run) {
            return Ok(None);
        }
        let recorded = self.rec.emit((Some(node.clone()), Some(run)), kind).await?;
        let next = self.deliver(run, None).await?;
        let end = match next {
            Some(next) => {
                self.rec.publish().await?;
                let _ = answer.send(Some(next));
                None
            }
            None => {
                let _ = answer.send(None);
                Some(end)
            }
        };
        Ok(Some((recorded, end)))
    }

    /// Completed: `flow:completed` and the final snapshot.
    async fn complete(&mut self, output: Value) -> Result<RunOutcome, ExecutorError> {
        let duration_ms = self.duration_ms();
        self.rec
            .emit(
                RUN_LEVEL,
                EventKind::FlowCompleted {
                    output: output.clone(),
                    duration_ms,
                },
            )
            .await?;
        self.rec.finish().await?;
        Ok(self.outcome(RunStatus::Completed, output, None))
    }

    fn duration_ms(&self) -> u64 {
        let now = self.ports.clock.now();
        self.state().started_at.map_or(0, |at| now.millis_since(at))
    }

    /// The run's outcome, which takes the state: called once the run is
    /// over (its end recorded), when nothing reads the state again, so the
    /// run's largest value is handed over rather than copied.
    fn outcome(&mut self, status: RunStatus, output: Value, error: Option<String>) -> RunOutcome {
        let run_id = self.state().run_id;
        RunOutcome {
            run_id,
            status,
            output,
            error,
            snapshot: std::mem::replace(&mut self.rec.state, RunSnapshot::new(run_id)),
        }
    }
}

/// What the decisions of one turn led to.
enum Next {
    Complete(Value),
    Stop(Stop),
}

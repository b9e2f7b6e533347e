//! The executor: runs a workflow, and the run is its log (design §5.1).
//!
//! A run's whole state is `fold(events)`: the [`RunSnapshot`] that
//! [`RunSnapshot::apply`] builds from the log. The executor keeps nothing
//! else that matters. Each turn of its loop asks the pure `decide` what can
//! happen next given that state, records the decision, and only then acts on
//! it. So starting a run and continuing one from its log are the same code:
//! fold, decide, continue.
//!
//! The parts, one job each:
//! - `decide`: which node runs may start, which nodes are skipped, when
//!   the run is done (pure);
//! - `routing`: a node's input, its outgoing edges, loop counters, the
//!   final output (pure);
//! - `control`: budgets, cancellation, retries (pure checks and the
//!   cancellation tree);
//! - `recorder`: the run's single writer — offsets, appends, snapshots,
//!   observers, the exchange transcript;
//! - `driver`: the loop that carries the decisions out: it spawns node runs
//!   as tasks, receives their events over one channel, and writes them;
//! - `node_run`, `agent`, `subflow`: what one node run does.

mod agent;
mod checkpoints;
mod commands;
mod continuing;
mod control;
pub(crate) mod conversation;
mod decide;
mod deliver;
mod dispatch;
mod driver;
mod live;
mod node_run;
mod recorder;
mod routing;
mod step;
mod subflow;
mod transcript;

pub(crate) use continuing::{Continue, resumable};
pub(crate) use step::approval::due_at;

pub use checkpoints::CheckpointPolicy;
pub use control::Cancel;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use domain::command::DEFAULT_RESUME_MESSAGE;
use domain::workflow::McpServerDef;
use domain::{Caller, EventKind, RunId, RunSnapshot, RunStatus, WorkflowDef};
use futures::future::BoxFuture;
use serde_json::Value;

use crate::ports::{
    Clock, CommandRunner, ControlChannel, ControlError, IdGen, McpConnector, Processes, QueryFn,
    RunLock, RunObserver, RunStore, SpanSink, StoreError, TranscriptError, Transcripts,
};

/// What to run.
///
/// ```
/// # extern crate domain as awr_domain;
/// use std::sync::Arc;
///
/// use awr_application::ports::{CommandError, CommandOutcome, CommandRequest, CommandRunner};
/// use awr_application::{RunRequest, Runtime};
/// use awr_domain::{Caller, WorkflowDef};
/// use awr_infrastructure::clock::{RandomIds, SystemClock};
/// use awr_infrastructure::store::MemoryRunStore;
/// use serde_json::json;
///
/// /// Every command succeeds, printing nothing.
/// struct Ok0;
///
/// #[async_trait::async_trait]
/// impl CommandRunner for Ok0 {
///     async fn run(&self, _: CommandRequest) -> Result<CommandOutcome, CommandError> {
///         let (stdout, stderr) = (String::new(), String::new());
///         Ok(CommandOutcome { exit_code: Some(0), stdout, stderr, truncated: false, timed_out: false, duration_ms: 0 })
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let runtime = Runtime::builder(Arc::new(MemoryRunStore::new()), Arc::new(SystemClock), Arc::new(RandomIds))
///     .commands(Arc::new(Ok0))
///     .build();
/// let request = RunRequest {
///     workflow: Arc::new(WorkflowDef::from_yaml("name: w\nnodes: [{id: test, command: make test}]\n")?),
///     input: json!({"branch": "main"}),
///     source: Some("ci/nightly.yaml".into()), // where `awr resume` would read it again
///     started_by: Some(Caller::new("ci-bot")?), // recorded in `flow:started`
/// };
/// let outcome = runtime.run(request).await?;
/// assert_eq!(outcome.snapshot.input, json!({"branch": "main"}));
/// assert_eq!(outcome.snapshot.started_by, Some(Caller::new("ci-bot")?));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct RunRequest {
    /// The validated workflow.
    pub workflow: Arc<WorkflowDef>,
    /// Input of the entry nodes (`data` of their input).
    pub input: Value,
    /// Where the definition was read from (`flow:started`'s `source`), so
    /// that `awr resume` can read it again.
    pub source: Option<String>,
    /// Who starts it (`flow:started`'s `startedBy`): a token's name, a
    /// local user; `None` for a run the runtime starts itself.
    pub started_by: Option<Caller>,
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// The run.
    pub run_id: RunId,
    /// `Completed`, `Failed` or `Cancelled`.
    pub status: RunStatus,
    /// The final output (`data` of the last node, or a map when several branches end).
    pub output: Value,
    /// Why it failed or was cancelled, if it was.
    pub error: Option<String>,
    /// The final state: the fold of the run's whole log.
    pub snapshot: RunSnapshot,
}

/// What a child run (`call_workflow`) knows of its parent.
#[derive(Debug, Clone)]
pub(crate) struct Parent {
    /// The parent run: `flow:started`'s `parentRunId`, the transcript's link.
    pub run_id: RunId,
    /// Fires when the parent pauses: the child pauses with it, and is
    /// continued with it.
    pub pausing: Cancel,
}

impl Parent {
    /// The parent's id and pause, each if there is a parent.
    fn split(parent: Option<Parent>) -> (Option<RunId>, Option<Cancel>) {
        match parent {
            Some(p) => (Some(p.run_id), Some(p.pausing)),
            None => (None, None),
        }
    }
}

/// The outcome of a run that has ended, as its log records it: the final
/// output is on its `flow:completed`.
async fn ended(store: &dyn RunStore, state: RunSnapshot) -> Result<RunOutcome, ExecutorError> {
    let last = store
        .read(state.run_id, state.last_offset.saturating_sub(1), 1)
        .await?;
    let output = match last.first().map(|e| &e.kind) {
        Some(EventKind::FlowCompleted { output, .. }) => output.clone(),
        _ => Value::Null,
    };
    let error = match &last.first().map(|e| &e.kind) {
        Some(EventKind::FlowCancelled { reason }) => {
            Some(reason.clone().unwrap_or_else(|| "cancelled".to_owned()))
        }
        _ => state.failure.as_ref().map(|f| f.error.clone()),
    };
    Ok(RunOutcome {
        run_id: state.run_id,
        status: state.status,
        output,
        error,
        snapshot: state,
    })
}

/// The runtime itself could not go on (not an agent failure: those fail the run normally).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExecutorError {
    /// The request cannot be carried out on this run (it has ended, its
    /// definition changed, it never started); says why.
    #[error("{0}")]
    Refused(String),
    /// A command could not reach the run's writer.
    #[error(transparent)]
    Control(#[from] ControlError),
    /// The store refused or failed an operation.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The exchange transcript could not be written.
    #[error(transparent)]
    Transcript(#[from] TranscriptError),
}

/// The ports a run uses; shared by the runs of one executor and their children.
#[derive(Clone)]
pub(crate) struct Ports {
    pub store: Arc<dyn RunStore>,
    pub query: Arc<dyn QueryFn>,
    pub commands: Option<Arc<dyn CommandRunner>>,
    pub control: Option<Arc<dyn ControlChannel>>,
    pub processes: Option<Arc<dyn Processes>>,
    pub clock: Arc<dyn Clock>,
    pub ids: Arc<dyn IdGen>,
    pub observer: Option<Arc<dyn RunObserver>>,
    pub transcripts: Option<Arc<dyn Transcripts>>,
    pub spans: Option<Arc<dyn SpanSink>>,
    /// Starts the MCP servers runs declare; without one, none is started
    /// (a replay, which serves their recorded results instead).
    pub mcp: Option<Arc<dyn McpConnector>>,
    /// How a CLI agent reaches awr's permission prompt (`awr mcp
    /// --permission-prompt`), given to one whose grants ask a person.
    pub permission_prompt: Option<McpServerDef>,
    pub checkpoints: CheckpointPolicy,
}

/// Executes workflows against the ports it was built with. Cheap to clone:
/// a `call_workflow` node runs its child with a clone.
#[derive(Clone)]
pub struct Executor {
    ports: Arc<Ports>,
    /// Locks of runs [`Executor::create`] made and [`Executor::run`] has not
    /// taken yet: a run is locked from its creation to its end, with no
    /// window for another writer and no second lock to take.
    created: Arc<Mutex<HashMap<RunId, RunLock>>>,
}

impl Executor {
    /// An executor over the given ports.
    pub fn new(
        store: Arc<dyn RunStore>,
        query: Arc<dyn QueryFn>,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGen>,
    ) -> Self {
        Self {
            created: Arc::default(),
            ports: Arc::new(Ports {
                store,
                query,
                commands: None,
                control: None,
                processes: None,
                clock,
                ids,
                observer: None,
                transcripts: None,
                spans: None,
                mcp: None,
                permission_prompt: None,
                checkpoints: CheckpointPolicy::default(),
            }),
        }
    }

    /// Changes a setting; the runs already started keep the ports they had.
    fn with(mut self, change: impl FnOnce(&mut Ports)) -> Self {
        change(Arc::make_mut(&mut self.ports));
        self
    }

    /// Also writes each run's exchange transcript (seed 000).
    #[must_use]
    pub fn with_transcripts(self, transcripts: Arc<dyn Transcripts>) -> Self {
        self.with(|p| p.transcripts = Some(transcripts))
    }

    /// Sets when snapshots are written at step boundaries.
    #[must_use]
    pub fn with_checkpoints(self, policy: CheckpointPolicy) -> Self {
        self.with(|p| p.checkpoints = policy)
    }

    /// Shows every recorded event to `observer` (after it is stored).
    #[must_use]
    pub fn with_observer(self, observer: Arc<dyn RunObserver>) -> Self {
        self.with(|p| p.observer = Some(observer))
    }

    /// Hands each run's spans to `sink` as they end (a live export).
    #[must_use]
    pub fn with_spans(self, sink: Arc<dyn SpanSink>) -> Self {
        self.with(|p| p.spans = Some(sink))
    }

    /// Runs `command` nodes with `runner` (without one, they fail).
    #[must_use]
    pub fn with_commands(self, runner: Arc<dyn CommandRunner>) -> Self {
        self.with(|p| p.commands = Some(runner))
    }

    /// Takes commands for the runs it writes from other processes over
    /// `control`, and delivers commands to runs other processes write.
    #[must_use]
    pub fn with_control(self, control: Arc<dyn ControlChannel>) -> Self {
        self.with(|p| p.control = Some(control))
    }

    /// Starts the MCP servers a run's workflow declares with `connector`.
    #[must_use]
    pub fn with_mcp(self, connector: Arc<dyn McpConnector>) -> Self {
        self.with(|p| p.mcp = Some(connector))
    }

    /// Gives a CLI agent whose grants ask a person (`requires_approval`)
    /// awr's permission prompt: `server` started with `--run RUN
    /// --node-run ID` added (see [`crate::ports::PERMISSION_SERVER`]).
    #[must_use]
    pub fn with_permission_prompt(self, server: McpServerDef) -> Self {
        self.with(|p| p.permission_prompt = Some(server))
    }

    /// Kills the process groups a dead writer of a resumed run left behind.
    #[must_use]
    pub fn with_processes(self, processes: Arc<dyn Processes>) -> Self {
        self.with(|p| p.processes = Some(processes))
    }

    /// Allocates a run id and creates the run in the store; call [`Self::run`] next.
    /// Split in two so a caller can show the run id before the run starts.
    pub async fn create(&self) -> Result<RunId, ExecutorError> {
        let run_id = self.new_run_id();
        let lock = self.ports.store.create_run(run_id).await?;
        self.created_locks().insert(run_id, lock);
        Ok(run_id)
    }

    /// Keeps `lock` for the [`Self::run`] (or resume) of its run, as
    /// [`Self::create`] does.
    pub(crate) fn adopt(&self, lock: RunLock) {
        self.created_locks().insert(lock.run_id(), lock);
    }

    /// The store runs are written to.
    pub(crate) fn store(&self) -> &dyn RunStore {
        self.ports.store.as_ref()
    }

    /// A new run id.
    pub(crate) fn new_run_id(&self) -> RunId {
        loop {
            if let Ok(id) = RunId::new(self.ports.ids.uuid()) {
                break id;
            }
        }
    }

    /// A new event id.
    pub(crate) fn new_event_id(&self) -> String {
        domain::ids::uuid_text(self.ports.ids.uuid())
    }

    /// The time now, by the executor's clock.
    pub(crate) fn now(&self) -> domain::Timestamp {
        self.ports.clock.now()
    }

    fn created_locks(&self) -> std::sync::MutexGuard<'_, HashMap<RunId, RunLock>> {
        // A panic while the map was held cannot leave it inconsistent.
        self.created.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The run's lock: the one [`Self::create`] took, or a new one. Another
    /// writer holding it is [`StoreError::Locked`], and nothing is written.
    /// An executor over `ports` with no run of its own created: what a
    /// run's driver uses to reach another run (a child it left).
    pub(crate) fn of(ports: Arc<Ports>) -> Self {
        Self {
            ports,
            created: Arc::default(),
        }
    }

    async fn lock(&self, run_id: RunId) -> Result<RunLock, ExecutorError> {
        let created = self.created_locks().remove(&run_id);
        match created {
            Some(lock) => Ok(lock),
            None => Ok(self.ports.store.lock(run_id).await?),
        }
    }

    /// Runs the workflow to its end under `run_id` (created with [`Self::create`]).
    ///
    /// Agent failures end the run with `flow:failed` and an `Ok` outcome;
    /// `Err` means the runtime itself failed (the store), in which case
    /// `system:error` is recorded if possible and the run is left to be
    /// resumed (no terminal event).
    pub async fn run(
        &self,
        run_id: RunId,
        request: RunRequest,
    ) -> Result<RunOutcome, ExecutorError> {
        self.run_cancellable(run_id, request, Cancel::new()).await
    }

    /// [`Self::run`], stopped with `flow:cancelled` when `cancel` fires.
    pub async fn run_cancellable(
        &self,
        run_id: RunId,
        request: RunRequest,
        cancel: Cancel,
    ) -> Result<RunOutcome, ExecutorError> {
        let lock = self.lock(run_id).await?;
        self.start_top(lock, request, cancel).await
    }

    /// Continues a run that stopped (paused, or interrupted by the death
    /// of the process writing it) from its log: the same loop as a new
    /// run, from the folded state. `message` (default `"continue"`) is what
    /// each agent that was in flight is told; `by` (who asked) is recorded
    /// in its `flow:resumed`. `workflow` must be the definition the run
    /// started with (same hash).
    pub async fn resume(
        &self,
        run_id: RunId,
        workflow: Arc<WorkflowDef>,
        message: Option<String>,
        by: Option<Caller>,
        cancel: Cancel,
    ) -> Result<RunOutcome, ExecutorError> {
        let message = message.unwrap_or_else(|| DEFAULT_RESUME_MESSAGE.to_owned());
        self.continue_run(run_id, workflow, Continue::Resume(message, by), cancel)
            .await
    }

    /// Continues a stopped run as [`Self::resume`] does, on `workflow` (read
    /// from `source`, when from a file), an edited definition that still has
    /// every node in flight (else `Refused`, naming the missing ones). Its
    /// files are stored with the run, and `flow:upgraded` records both
    /// definitions' hashes before `flow:resumed`.
    pub async fn upgrade(
        &self,
        run_id: RunId,
        workflow: Arc<WorkflowDef>,
        source: Option<String>,
        message: Option<String>,
        by: Option<Caller>,
        cancel: Cancel,
    ) -> Result<RunOutcome, ExecutorError> {
        let message = message.unwrap_or_else(|| DEFAULT_RESUME_MESSAGE.to_owned());
        let how = Continue::Upgrade(message, by, source);
        self.continue_run(run_id, workflow, how, cancel).await
    }

    /// Continues a run whose writer died, as [`Self::resume`] does with the
    /// default message, except that a pause the dead writer had begun is
    /// finished (the run ends `paused`) rather than undone: nobody asked
    /// for it to go on.
    pub async fn recover(
        &self,
        run_id: RunId,
        workflow: Arc<WorkflowDef>,
        cancel: Cancel,
    ) -> Result<RunOutcome, ExecutorError> {
        self.continue_run(run_id, workflow, Continue::Recover(None), cancel)
            .await
    }

    /// Continues, as [`Self::recover`] does, a run that `by` (a worker)
    /// claimed after its writer died or handed it over; `by` is recorded in
    /// its `flow:resumed`. `lock` is the run's, taken by the claim.
    pub async fn take_over(
        &self,
        lock: RunLock,
        workflow: Arc<WorkflowDef>,
        by: Caller,
        cancel: Cancel,
    ) -> Result<RunOutcome, ExecutorError> {
        let how = Continue::Recover(Some(by));
        self.resume_top(lock, workflow, how, cancel).await
    }

    /// Starts `request` as the run whose `lock` a claim took: a queued run
    /// no writer has started yet (its log is empty).
    pub async fn start_claimed(
        &self,
        lock: RunLock,
        request: RunRequest,
        cancel: Cancel,
    ) -> Result<RunOutcome, ExecutorError> {
        self.start_top(lock, request, cancel).await
    }

    /// Drives a new top-level run (no parent) from its start. Boxed, as
    /// every entry point's run is: its future is over 10 KB, and the
    /// caller's frame (a `block_on`, a spawned task) would otherwise carry
    /// and move it.
    async fn start_top(
        &self,
        lock: RunLock,
        request: RunRequest,
        cancel: Cancel,
    ) -> Result<RunOutcome, ExecutorError> {
        Box::pin(driver::Driver::start(
            Arc::clone(&self.ports),
            lock,
            None,
            request,
            cancel,
        ))
        .await
    }

    /// Drives a stopped top-level run on from its log, boxed as
    /// [`Self::start_top`] is.
    async fn resume_top(
        &self,
        lock: RunLock,
        workflow: Arc<WorkflowDef>,
        how: Continue,
        cancel: Cancel,
    ) -> Result<RunOutcome, ExecutorError> {
        Box::pin(driver::Driver::resume(
            Arc::clone(&self.ports),
            lock,
            None,
            workflow,
            how,
            cancel,
        ))
        .await
    }

    pub(crate) async fn continue_run(
        &self,
        run_id: RunId,
        workflow: Arc<WorkflowDef>,
        how: Continue,
        cancel: Cancel,
    ) -> Result<RunOutcome, ExecutorError> {
        let lock = match self.lock(run_id).await {
            Ok(lock) => lock,
            Err(ExecutorError::Store(e)) => {
                return Err(self.ended_or(run_id, e, "there is nothing to resume").await);
            }
            Err(e) => return Err(e),
        };
        self.resume_top(lock, workflow, how, cancel).await
    }

    /// A child run of `parent` (a `call_workflow` node). A boxed future of
    /// a named type: a child run is this same machinery one level down, and
    /// the recursion needs a type of known size that is known to be `Send`.
    pub(crate) fn run_child(
        &self,
        run_id: RunId,
        parent: Parent,
        request: RunRequest,
        cancel: Cancel,
    ) -> BoxFuture<'static, Result<RunOutcome, ExecutorError>> {
        let executor = self.clone();
        Box::pin(async move {
            let lock = executor.lock(run_id).await?;
            driver::Driver::start(executor.ports, lock, Some(parent), request, cancel).await
        })
    }

    /// Continues child run `run_id`, which a resumed parent's node run had
    /// started: to its end from where it stopped (`message` is what its
    /// agents in flight are told), or its end as recorded if it has one. A
    /// child that never started starts now, with `request`.
    pub(crate) fn continue_child(
        &self,
        run_id: RunId,
        parent: Parent,
        request: RunRequest,
        message: String,
        cancel: Cancel,
    ) -> BoxFuture<'static, Result<RunOutcome, ExecutorError>> {
        let executor = self.clone();
        Box::pin(async move {
            let lock = executor.lock(run_id).await?;
            let store = executor.ports.store.as_ref();
            let state = crate::inspect::current_snapshot(store, run_id).await?;
            if state.last_offset == 0 {
                return driver::Driver::start(executor.ports, lock, Some(parent), request, cancel)
                    .await;
            }
            if state.status.is_terminal() {
                return ended(store, state).await;
            }
            let how = Continue::Resume(message, None);
            let workflow = request.workflow;
            driver::Driver::resume(executor.ports, lock, Some(parent), workflow, how, cancel).await
        })
    }
}

#[cfg(test)]
mod cadence_tests;
#[cfg(test)]
mod decide_tests;
#[cfg(test)]
mod edge_tests;
#[cfg(test)]
mod ended_tests;
#[cfg(test)]
mod fork_tests;
#[cfg(test)]
mod graph_tests;
#[cfg(test)]
mod handover_tests;
#[cfg(test)]
mod live_tests;
#[cfg(test)]
mod memory_log;
#[cfg(test)]
mod publish_tests;
#[cfg(test)]
mod resume_tests;
#[cfg(test)]
mod stop_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod transcript_tests;

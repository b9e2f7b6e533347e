//! [`Runtime`]: the one entry point of a program that embeds awr.
//!
//! A [`Runtime`] is built from ports only ([`Runtime::builder`]): a
//! [`RunStore`], a [`QueryFn`](crate::ports::QueryFn) per provider (or a
//! [`ChatModel`](crate::ports::ChatModel) per HTTP provider, run through the
//! [`ToolLoop`](crate::tool_loop::ToolLoop)), the [`Tool`](crate::ports::Tool)s those agents may
//! be granted, transcript sinks, a [`Clock`] and an [`IdGen`], observers.
//! It offers what the `awr` command line does — run a workflow, resume a
//! run, follow its events from an offset, send it a command, read its
//! snapshot — over the one [`Executor`]; the command line and `awr serve`
//! are built on it too, so there is no second way to wire a run.
//!
//! ```
//! # extern crate domain as awr_domain;
//! use std::sync::Arc;
//!
//! use awr_application::ports::{AgentMessage, AgentRequest, AgentResult, AgentStream};
//! use awr_application::ports::{QueryError, QueryFn};
//! use awr_application::{RunRequest, Runtime};
//! use awr_domain::workflow::Provider;
//! use awr_domain::{RunStatus, WorkflowDef};
//! use awr_infrastructure::clock::{RandomIds, SystemClock};
//! use awr_infrastructure::store::MemoryRunStore;
//!
//! /// An agent that answers every prompt with its length.
//! struct Counter;
//!
//! #[async_trait::async_trait]
//! impl QueryFn for Counter {
//!     async fn query(&self, request: AgentRequest) -> Result<AgentStream, QueryError> {
//!         let text = request.prompt.len().to_string();
//!         let done = AgentMessage::Completed(AgentResult { text, num_turns: 1, ..Default::default() });
//!         Ok(Box::pin(futures::stream::iter([Ok(done)])))
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = Arc::new(MemoryRunStore::new());
//! let runtime = Runtime::builder(store, Arc::new(SystemClock), Arc::new(RandomIds))
//!     .provider(Provider::Mock, Arc::new(Counter))
//!     .build();
//! let yaml = "name: count\nagents: {a: {provider: mock}}\nsteps: [{agent: a}]\n";
//! let workflow = Arc::new(WorkflowDef::from_yaml(yaml)?);
//! let request = RunRequest { workflow, input: "four".into(), source: None, started_by: None };
//! let outcome = runtime.run(request).await?;
//! assert_eq!(outcome.status, RunStatus::Completed, "{:?}", outcome.error);
//! assert!(outcome.output.as_str().is_some_and(|n| n.parse::<usize>().is_ok()));
//! assert_eq!(runtime.snapshot(outcome.run_id).await?.status, RunStatus::Completed);
//! # Ok(())
//! # }
//! ```

use std::sync::Arc;

use domain::{Caller, RunId, RunSnapshot, WorkflowDef};
use serde_json::Value;

use crate::fork::ForkRequest;
use crate::ports::{Clock, CommandReply, EventStream, IdGen, RunLock, RunStore, StoreError};
use crate::run::{Cancel, Executor, ExecutorError, RunOutcome, RunRequest};
use crate::tools::ToolRouter;

mod builder;
mod providers;

pub use builder::RuntimeBuilder;
pub use providers::Providers;

/// Runs, resumes, follows and commands workflows over the ports it was
/// built with. Cheap to clone; share one among the runs of a program.
#[derive(Clone)]
pub struct Runtime {
    executor: Executor,
    store: Arc<dyn RunStore>,
    tools: Arc<ToolRouter>,
}

impl Runtime {
    /// A builder over `store`, with `clock` and `ids` for the time and the
    /// ids of everything recorded (fixed ones make a run reproducible).
    ///
    /// ```
    /// # extern crate domain as awr_domain;
    /// use std::sync::Arc;
    ///
    /// use awr_application::Runtime;
    /// use awr_infrastructure::clock::{FixedClock, SeededIds};
    /// use awr_infrastructure::store::MemoryRunStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // A fixed clock and seeded ids: the program makes the same runs every time.
    /// let build = || {
    ///     let (clock, ids) = (Arc::new(FixedClock::default()), Arc::new(SeededIds::new(7)));
    ///     Runtime::builder(Arc::new(MemoryRunStore::new()), clock, ids).build()
    /// };
    /// let runtime = build();
    /// let (first, second) = (runtime.create().await?, runtime.create().await?);
    /// assert_ne!(first, second);
    /// assert_eq!(build().create().await?, first);
    /// # Ok(())
    /// # }
    /// ```
    pub fn builder(
        store: Arc<dyn RunStore>,
        clock: Arc<dyn Clock>,
        ids: Arc<dyn IdGen>,
    ) -> RuntimeBuilder {
        RuntimeBuilder::new(store, clock, ids)
    }

    /// The executor underneath, for what this type does not wrap.
    pub fn executor(&self) -> &Executor {
        &self.executor
    }

    /// The store runs are written to and read from.
    pub fn store(&self) -> &Arc<dyn RunStore> {
        &self.store
    }

    /// The tools agents on HTTP providers may be granted.
    pub fn tools(&self) -> &ToolRouter {
        &self.tools
    }

    /// Creates a new run in the store and returns its id (the run holds
    /// its lock until it ends); [`Runtime::run_created`] runs it. Split in
    /// two so a caller can show the id, or follow the run, before it starts.
    pub async fn create(&self) -> Result<RunId, ExecutorError> {
        self.executor.create().await
    }

    /// Deletes `run_id` if nothing of it is on record, and says whether
    /// nothing is left of it: a run whose storage failed at its first event
    /// (a full disk) has nothing to resume, and would be listed `pending`
    /// for ever. (A store that makes a run appear with its first event
    /// holds none by then: the creation was given up with its lock.)
    pub async fn discard_if_unstarted(&self, run_id: RunId) -> bool {
        match self.store.last_offset(run_id).await {
            Ok(0) => self.store.delete_run(run_id).await.is_ok(),
            Err(StoreError::NotFound(_)) => true,
            _ => false,
        }
    }

    /// Runs `request` to its end as a new run: [`Runtime::create`] then
    /// [`Runtime::run_created`]. An agent's failure is an `Ok` outcome of
    /// status `failed`; `Err` is the runtime's own failure (the store).
    pub async fn run(&self, request: RunRequest) -> Result<RunOutcome, ExecutorError> {
        let run_id = self.create().await?;
        self.run_created(run_id, request, Cancel::new()).await
    }

    /// Runs `request` as `run_id` (made by [`Runtime::create`]) to its end,
    /// stopped with `flow:cancelled` when `cancel` fires.
    pub async fn run_created(
        &self,
        run_id: RunId,
        request: RunRequest,
        cancel: Cancel,
    ) -> Result<RunOutcome, ExecutorError> {
        self.executor.run_cancellable(run_id, request, cancel).await
    }

    /// Continues a paused or interrupted run from its log, telling the
    /// agents that were in flight `message` (default `"continue"`) and
    /// recording `by`, who asked, in its `flow:resumed`; `workflow` must be
    /// the definition it started with (same hash).
    pub async fn resume(
        &self,
        run_id: RunId,
        workflow: Arc<WorkflowDef>,
        message: Option<String>,
        by: Option<Caller>,
        cancel: Cancel,
    ) -> Result<RunOutcome, ExecutorError> {
        self.executor
            .resume(run_id, workflow, message, by, cancel)
            .await
    }

    /// Continues a paused or interrupted run as [`Runtime::resume`] does,
    /// under `workflow`, an edited definition read from `source`: refused
    /// unless every node in flight is in it (see [`Executor::upgrade`]).
    pub async fn upgrade(
        &self,
        run_id: RunId,
        workflow: Arc<WorkflowDef>,
        source: Option<String>,
        message: Option<String>,
        by: Option<Caller>,
        cancel: Cancel,
    ) -> Result<RunOutcome, ExecutorError> {
        self.executor
            .upgrade(run_id, workflow, source, message, by, cancel)
            .await
    }

    /// Continues a run whose writer died, finishing a pause it had begun
    /// (see [`Executor::recover`]).
    pub async fn recover(
        &self,
        run_id: RunId,
        workflow: Arc<WorkflowDef>,
        cancel: Cancel,
    ) -> Result<RunOutcome, ExecutorError> {
        self.executor.recover(run_id, workflow, cancel).await
    }

    /// Starts `request` as the queued run whose `lock` a worker's claim
    /// took (see [`crate::ports::RunQueue`]).
    pub async fn start_claimed(
        &self,
        lock: RunLock,
        request: RunRequest,
        cancel: Cancel,
    ) -> Result<RunOutcome, ExecutorError> {
        self.executor.start_claimed(lock, request, cancel).await
    }

    /// Continues a run whose `lock` `by` (a worker) claimed after its
    /// writer died or handed it over, as [`Runtime::recover`] does,
    /// recording `by` in its `flow:resumed`.
    pub async fn take_over(
        &self,
        lock: RunLock,
        workflow: Arc<WorkflowDef>,
        by: Caller,
        cancel: Cancel,
    ) -> Result<RunOutcome, ExecutorError> {
        self.executor.take_over(lock, workflow, by, cancel).await
    }

    /// Makes a new run that branches off `request.parent` after its event
    /// at `request.at` (see [`Executor::fork`]); [`Runtime::run_fork`] runs it.
    pub async fn fork(
        &self,
        request: ForkRequest,
        workflow: &WorkflowDef,
    ) -> Result<RunId, ExecutorError> {
        self.executor.fork(request, workflow).await
    }

    /// Runs a fork made by [`Runtime::fork`] to its end.
    pub async fn run_fork(
        &self,
        run_id: RunId,
        workflow: Arc<WorkflowDef>,
        cancel: Cancel,
    ) -> Result<RunOutcome, ExecutorError> {
        self.executor.run_fork(run_id, workflow, cancel).await
    }

    /// The events of `run_id` after offset `after` (0: from the first),
    /// then live ones as they are stored, in offset order; the stream ends
    /// after the run's terminal event. An event is stored before any
    /// subscriber sees it, so what a subscriber saw survives a crash.
    ///
    /// ```
    /// # extern crate domain as awr_domain;
    /// use std::sync::Arc;
    ///
    /// use awr_application::ports::{AgentMessage, AgentRequest, AgentResult, AgentStream};
    /// use awr_application::ports::{QueryError, QueryFn};
    /// use awr_application::{Cancel, RunRequest, Runtime};
    /// use awr_domain::WorkflowDef;
    /// use awr_domain::workflow::Provider;
    /// use awr_infrastructure::clock::{RandomIds, SystemClock};
    /// use awr_infrastructure::store::MemoryRunStore;
    /// use futures::StreamExt;
    ///
    /// /// Answers every prompt at once, with nothing.
    /// struct Done;
    ///
    /// #[async_trait::async_trait]
    /// impl QueryFn for Done {
    ///     async fn query(&self, _: AgentRequest) -> Result<AgentStream, QueryError> {
    ///         let done = AgentMessage::Completed(AgentResult::default());
    ///         Ok(Box::pin(futures::stream::iter([Ok(done)])))
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let runtime = Runtime::builder(Arc::new(MemoryRunStore::new()), Arc::new(SystemClock), Arc::new(RandomIds))
    ///     .provider(Provider::Mock, Arc::new(Done))
    ///     .build();
    /// let workflow = Arc::new(WorkflowDef::from_yaml("name: w\nagents: {a: {provider: mock}}\nsteps: [{agent: a}]\n")?);
    /// let request = RunRequest { workflow, input: "hi".into(), source: None, started_by: None };
    ///
    /// // The id first, so the run is followed from its first event.
    /// let run_id = runtime.create().await?;
    /// let mut events = runtime.subscribe(run_id, 0).await?;
    /// let running = tokio::spawn({
    ///     let runtime = runtime.clone();
    ///     async move { runtime.run_created(run_id, request, Cancel::new()).await }
    /// });
    /// let mut seen = Vec::new();
    /// while let Some(event) = events.next().await {
    ///     let event = event?;
    ///     seen.push((event.offset.get(), event.kind.type_name().to_owned()));
    /// } // the stream ends after the terminal event
    /// running.await??;
    /// assert_eq!(seen.first(), Some(&(1, "flow:started".to_owned())));
    /// assert_eq!(seen.last().map(|(_, t)| t.as_str()), Some("flow:completed"));
    ///
    /// // From an offset: what came after it.
    /// let third = runtime.subscribe(run_id, 2).await?.next().await.transpose()?;
    /// assert_eq!(third.map(|e| e.offset.get()), Some(3));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn subscribe(&self, run_id: RunId, after: u64) -> Result<EventStream, StoreError> {
        self.store.follow(run_id, after).await
    }

    /// Gives `command` (the JSON of a [`domain::RuntimeCommand`]) to a
    /// run: to the process writing it, or recorded here when none does
    /// (`workflow` then yields the run's definition). Either way it is on
    /// record, accepted or rejected, with `by`, who sent it, before the
    /// answer.
    ///
    /// A run paused by `ops` from another task, over awr-infrastructure's
    /// control socket (as `awr pause` does from another process), then
    /// resumed by `ops` with [`Runtime::resume`]:
    ///
    /// ```
    /// # extern crate domain as awr_domain;
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicBool, Ordering};
    ///
    /// use awr_application::ports::{AgentMessage, AgentRequest, AgentResult, AgentStream};
    /// use awr_application::ports::{QueryError, QueryFn};
    /// use awr_application::{Cancel, RunRequest, Runtime};
    /// use awr_domain::workflow::Provider;
    /// use awr_domain::{Caller, EventKind, RunStatus, WorkflowDef};
    /// use awr_infrastructure::UnixControl;
    /// use awr_infrastructure::clock::{RandomIds, SystemClock};
    /// use awr_infrastructure::store::MemoryRunStore;
    /// use serde_json::json;
    ///
    /// /// Thinks until the gate opens, then answers.
    /// struct Gated(Arc<AtomicBool>);
    ///
    /// #[async_trait::async_trait]
    /// impl QueryFn for Gated {
    ///     async fn query(&self, _: AgentRequest) -> Result<AgentStream, QueryError> {
    ///         if !self.0.load(Ordering::SeqCst) {
    ///             return Ok(Box::pin(futures::stream::pending()));
    ///         }
    ///         let done = AgentMessage::Completed(AgentResult { text: "done".into(), ..Default::default() });
    ///         Ok(Box::pin(futures::stream::iter([Ok(done)])))
    ///     }
    /// }
    ///
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let sockets = std::env::temp_dir().join(format!("awr-doc-{}", std::process::id()));
    /// let gate = Arc::new(AtomicBool::new(false));
    /// let runtime = Runtime::builder(Arc::new(MemoryRunStore::new()), Arc::new(SystemClock), Arc::new(RandomIds))
    ///     .provider(Provider::Mock, Arc::new(Gated(gate.clone())))
    ///     .control(Arc::new(UnixControl::new(&sockets)))
    ///     .build();
    /// let workflow = Arc::new(WorkflowDef::from_yaml("name: w\nagents: {a: {provider: mock}}\nsteps: [{agent: a}]\n")?);
    /// let request = RunRequest { workflow: workflow.clone(), input: "hi".into(), source: None, started_by: None };
    /// let run_id = runtime.create().await?;
    /// let running = tokio::spawn({
    ///     let runtime = runtime.clone();
    ///     async move { runtime.run_created(run_id, request, Cancel::new()).await }
    /// });
    ///
    /// let ops = Caller::new("ops")?;
    /// let reply = runtime.command(run_id, &json!({"type": "pause"}), Some(&ops), async || Ok(workflow.clone())).await?;
    /// assert!(reply.accepted, "{reply:?}");
    /// assert_eq!(running.await??.status, RunStatus::Paused);
    ///
    /// gate.store(true, Ordering::SeqCst);
    /// let outcome = runtime.resume(run_id, workflow, None, Some(ops.clone()), Cancel::new()).await?;
    /// assert_eq!(outcome.status, RunStatus::Completed, "{:?}", outcome.error);
    /// let log = runtime.store().read(run_id, 0, 1_000).await?;
    /// let resumed_by = log.iter().find_map(|event| match &event.kind {
    ///     EventKind::FlowResumed { by, .. } => by.clone(),
    ///     _ => None,
    /// });
    /// assert_eq!(resumed_by, Some(ops));
    /// # std::fs::remove_dir_all(&sockets).ok();
    /// # Ok(())
    /// # }
    /// ```
    pub async fn command(
        &self,
        run_id: RunId,
        command: &Value,
        by: Option<&Caller>,
        workflow: impl AsyncFnOnce() -> Result<Arc<WorkflowDef>, ExecutorError>,
    ) -> Result<CommandReply, ExecutorError> {
        self.executor.command(run_id, command, by, workflow).await
    }

    /// The current state of `run_id`: its saved snapshot brought up to date
    /// from the log (or the fold of the whole log).
    pub async fn snapshot(&self, run_id: RunId) -> Result<RunSnapshot, StoreError> {
        crate::inspect::current_snapshot(self.store.as_ref(), run_id).await
    }
}

//! [`Worker`]: claims runs from a [`RunQueue`] and runs each to its end
//! (`awr worker`).
//!
//! A claimed run is an ordinary run with one writer, so a worker runs it
//! through the same code path as `awr run` and `awr recover` (design
//! §5.1): a queued run starts ([`Runtime::start_claimed`]); a run whose
//! writer died or handed it over continues from its log
//! ([`Runtime::take_over`], its `flow:resumed` naming this worker). The
//! lease the claim took fences every write, so a worker that lost it (a
//! pause, a partition) cannot write one more event.
//!
//! A drain (`SIGTERM`) stops claiming and hands every run over at its next
//! safe point ([`Cancel::hand_over`]): the run stays `running`, released,
//! and another worker continues it. Nothing is failed by a drain.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use domain::definition::Definition;
use domain::{Caller, RunId, RunStatus, WorkflowDef};
use tokio::task::JoinSet;

use crate::ports::{Claim, RunQueue, RunStore, StoreError};
use crate::run::{Cancel, ExecutorError, RunOutcome, RunRequest};
use crate::runtime::Runtime;

/// How long a run that could not run where it was claimed waits before
/// any worker claims it again.
pub const FAILED_BACKOFF: Duration = Duration::from_secs(10);

/// Builds the runtime that runs one workflow definition: the composition
/// root's, which knows the providers, tools and where files go.
#[async_trait]
pub trait Runtimes: Send + Sync {
    /// The runtime for `definition`, writing to the worker's store, and
    /// the workflow loaded from it. `Refused` when it cannot be loaded
    /// here (names why).
    async fn for_definition(
        &self,
        definition: &Definition,
    ) -> Result<(Runtime, Arc<WorkflowDef>), ExecutorError>;
}

/// How a worker works.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Who it is, as its takeovers record it (`flow:resumed`'s `by`).
    pub name: Caller,
    /// How many runs it runs at once.
    pub concurrency: usize,
    /// How long it waits before asking the queue again when it found
    /// nothing to claim (or the queue failed).
    pub idle_poll: Duration,
}

/// How one claimed run ended here.
#[derive(Debug)]
pub enum Ended {
    /// It ran to an end of its own (completed, failed, cancelled, paused),
    /// or was handed over (`running`). Boxed: an outcome holds the run's
    /// whole state.
    Ran(Box<RunOutcome>),
    /// Its log had ended (or paused) already: only its status on record
    /// lagged behind, and is now brought up to date.
    Settled(RunStatus),
    /// It could not be run here (its definition cannot be loaded, the
    /// store failed): released for another claim.
    Failed(ExecutorError),
}

/// Told of each run a worker claims and of how it ended, for display.
pub trait WorkerObserver: Send + Sync {
    /// `run_id` was claimed; `started` when it continues from its log.
    fn claimed(&self, run_id: RunId, started: bool);
    /// `run_id` ended here as `ended` says.
    fn ended(&self, run_id: RunId, ended: &Ended);
}

/// What a worker did until it stopped.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct WorkerReport {
    /// Runs claimed.
    pub claimed: u64,
    /// Runs handed over by the drain.
    pub handed_over: u64,
    /// Runs that could not be run here.
    pub failed: u64,
}

/// Claims runs and runs them, `concurrency` at a time, until drained.
pub struct Worker {
    queue: Arc<dyn RunQueue>,
    runtimes: Arc<dyn Runtimes>,
    config: WorkerConfig,
    observer: Arc<dyn WorkerObserver>,
}

impl Worker {
    /// A worker over `queue`, running each claim on the runtime
    /// `runtimes` builds for it.
    pub fn new(
        queue: Arc<dyn RunQueue>,
        runtimes: Arc<dyn Runtimes>,
        config: WorkerConfig,
        observer: Arc<dyn WorkerObserver>,
    ) -> Self {
        Self {
            queue,
            runtimes,
            config,
            observer,
        }
    }

    /// Works until `drain` fires: then claims nothing more, hands every
    /// run it runs over at its next safe point, and returns once all are
    /// released.
    pub async fn work(&self, drain: Cancel) -> WorkerReport {
        let mut report = WorkerReport::default();
        let mut running: JoinSet<(RunId, Ended)> = JoinSet::new();
        // By task: a run deferred and claimed again has a task of its own.
        let mut cancels: HashMap<tokio::task::Id, Cancel> = HashMap::new();
        let concurrency = self.config.concurrency.max(1);
        loop {
            if drain.is_cancelled() {
                break;
            }
            if running.len() < concurrency {
                match self.queue.claim().await {
                    Ok(Some(claim)) => {
                        report.claimed += 1;
                        let run_id = claim.lock.run_id();
                        self.observer.claimed(run_id, claim.started);
                        let cancel = Cancel::new();
                        let job = Job {
                            store: Arc::clone(&self.queue) as Arc<dyn RunStore>,
                            runtimes: Arc::clone(&self.runtimes),
                            name: self.config.name.clone(),
                        };
                        let task = running.spawn({
                            let cancel = cancel.clone();
                            async move { (run_id, job.run(claim, cancel).await) }
                        });
                        cancels.insert(task.id(), cancel);
                        continue;
                    }
                    Ok(None) => {}
                    Err(e) => tracing::warn!(error = %e, "cannot claim a run"),
                }
            }
            tokio::select! {
                () = drain.cancelled() => {}
                Some(joined) = running.join_next_with_id(), if !running.is_empty() => {
                    self.reap(joined, &mut cancels, &mut report).await;
                }
                () = tokio::time::sleep(self.config.idle_poll), if running.len() < concurrency => {}
            }
        }
        for cancel in cancels.values() {
            cancel.hand_over();
        }
        while let Some(joined) = running.join_next_with_id().await {
            self.reap(joined, &mut cancels, &mut report).await;
        }
        report
    }

    /// Notes how a run's task ended. A run that could not run here waits
    /// [`FAILED_BACKOFF`] before any worker claims it again, rather than be
    /// claimed again at once, here or elsewhere, for ever.
    async fn reap(
        &self,
        joined: Result<(tokio::task::Id, (RunId, Ended)), tokio::task::JoinError>,
        cancels: &mut HashMap<tokio::task::Id, Cancel>,
        report: &mut WorkerReport,
    ) {
        match joined {
            Ok((task, (run_id, ended))) => {
                cancels.remove(&task);
                match &ended {
                    Ended::Ran(outcome) if outcome.status == RunStatus::Running => {
                        report.handed_over += 1;
                    }
                    // Another worker has it: nothing to hold back.
                    Ended::Failed(ExecutorError::Store(StoreError::LeaseLost(_))) => {
                        report.failed += 1;
                    }
                    Ended::Failed(_) => {
                        report.failed += 1;
                        if let Err(e) = self.queue.defer(run_id, FAILED_BACKOFF).await {
                            tracing::warn!(run = %run_id, error = %e, "cannot hold a failing run back");
                        }
                    }
                    _ => {}
                }
                self.observer.ended(run_id, &ended);
            }
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => {
                cancels.remove(&e.id());
                tracing::warn!(error = %e, "a run's task was cancelled");
            }
        }
    }
}

/// One claimed run, and what it needs to run it.
struct Job {
    store: Arc<dyn RunStore>,
    runtimes: Arc<dyn Runtimes>,
    name: Caller,
}

impl Job {
    async fn run(self, claim: Claim, cancel: Cancel) -> Ended {
        match self.go(claim, cancel).await {
            Ok(ended) => ended,
            Err(e) => Ended::Failed(e),
        }
    }

    async fn go(&self, claim: Claim, cancel: Cancel) -> Result<Ended, ExecutorError> {
        let run_id = claim.lock.run_id();
        let store = self.store.as_ref();
        if !claim.started {
            let definition = self
                .definition(&claim.submission.definition, run_id)
                .await?;
            let (runtime, workflow) = self.runtimes.for_definition(&definition).await?;
            let submission = claim.submission;
            let request = RunRequest {
                workflow,
                input: submission.input,
                source: submission.source,
                started_by: submission.submitted_by,
            };
            let outcome = runtime.start_claimed(claim.lock, request, cancel).await?;
            return Ok(Ended::Ran(Box::new(outcome)));
        }
        let state = crate::inspect::current_snapshot(store, run_id).await?;
        if state.status.is_terminal() || state.status == RunStatus::Paused {
            // The log has ended, or waits for a person: its status on
            // record lagged (a final snapshot its writer could not save).
            // Brought up to date, so no worker claims it again.
            store.save_snapshot(&state).await?;
            claim.lock.release().await;
            return Ok(Ended::Settled(state.status));
        }
        let hash = crate::queue::kept_definition(store, run_id)
            .await?
            .unwrap_or(claim.submission.definition);
        let definition = self.definition(&hash, run_id).await?;
        let (runtime, workflow) = self.runtimes.for_definition(&definition).await?;
        let outcome = runtime
            .take_over(claim.lock, workflow, self.name.clone(), cancel)
            .await?;
        Ok(Ended::Ran(Box::new(outcome)))
    }

    async fn definition(&self, hash: &str, run_id: RunId) -> Result<Definition, ExecutorError> {
        self.store.load_definition(hash).await?.ok_or_else(|| {
            ExecutorError::Refused(format!(
                "run {run_id} names definition {hash}, which the store does not hold"
            ))
        })
    }
}

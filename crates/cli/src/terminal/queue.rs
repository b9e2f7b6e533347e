//! `awr submit` and `awr worker`: runs queued on the PostgreSQL store, and
//! the long-lived processes that claim and run them.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::anyhow;
use application::Cancel;
use application::ports::RunStore;
use application::queue::SubmitRequest;
use application::worker::{Ended, Worker, WorkerConfig, WorkerObserver};
use domain::{Caller, RunId};

use crate::storage::Storage;
use crate::terminal::run::{Input, parse_input};
use crate::{Failure, wiring};

/// `awr submit FILE [--input JSON | --input-text TEXT] [--priority N]`:
/// queues a run and prints its id at once; a worker runs it.
pub async fn submit(
    storage: &Storage,
    file: &Path,
    input: Input<'_>,
    priority: i32,
) -> Result<(), Failure> {
    // Everything that can be wrong with the input is checked before the store is touched.
    let workflow = wiring::load_workflow(file)?;
    let input = parse_input(input, &workflow)?;
    let queue = wiring::queue(storage, &Default::default()).await?;
    let (_, ids) = wiring::clock_and_ids();
    let request = SubmitRequest {
        workflow,
        source: wiring::source_of(file),
        input,
        by: wiring::local_caller(),
        priority,
    };
    let run_id = application::queue::submit(queue.as_ref(), ids.as_ref(), request)
        .await
        .map_err(|e| Failure::Input(anyhow!("cannot submit {}: {e}", file.display())))?;
    crate::say(&run_id.to_string())
}

/// How `awr worker` works, from its flags.
#[derive(Debug, Clone)]
pub struct WorkerArgs {
    /// Runs at once.
    pub concurrency: usize,
    /// Its name, else `worker@HOST:PID`.
    pub name: Option<String>,
    /// The wait between two looks at an empty queue.
    pub poll: Duration,
    /// How long its leases last unless renewed.
    pub lease: Duration,
}

/// `awr worker`: claims queued runs and runs whose writer is gone, and runs
/// each to its end, until SIGTERM or SIGINT, which drain it: no new claim,
/// every run handed over at its next safe point, then exit 0.
pub async fn worker(storage: &Storage, args: WorkerArgs) -> Result<(), Failure> {
    let name = match args.name {
        Some(name) => name,
        None => default_name(),
    };
    let caller = Caller::new(name.clone()).map_err(|e| Failure::Input(anyhow!("--name: {e}")))?;
    // Listening before anything else: a SIGTERM while it connects drains
    // a worker that has claimed nothing yet, which then exits 0.
    let drain = Cancel::new();
    let _signals = crate::signals::notify_on_signal(
        drain.clone(),
        "draining: no new claims, every run handed over at its next safe point",
    );
    let holder = awr_cli::embed::Holder {
        name: Some(name.clone()),
        lease: Some(args.lease),
    };
    let queue = wiring::queue(storage, &holder).await?;
    let store: Arc<dyn RunStore> = queue.clone();
    let runtimes = Arc::new(wiring::StockRuntimes::new(storage.clone(), store));
    let config = WorkerConfig {
        name: caller,
        concurrency: args.concurrency,
        idle_poll: args.poll.max(Duration::from_millis(10)),
    };
    let worker = Worker::new(queue, runtimes, config, Arc::new(Shown));
    // Held for the worker's life: its runs share one command channel.
    let _commands = wiring::control(storage);
    crate::note(&format!(
        "awr worker {name}: claiming runs from {storage} ({} at once)",
        args.concurrency.max(1)
    ));
    let report = worker.work(drain).await;
    crate::note(&format!(
        "awr worker {name}: drained: {} run(s) claimed, {} handed over, {} could not run here",
        report.claimed, report.handed_over, report.failed
    ));
    Ok(())
}

/// `worker@HOST:PID`.
fn default_name() -> String {
    let host = whoami::hostname().unwrap_or_else(|_| "localhost".to_owned());
    format!("worker@{host}:{}", std::process::id())
}

/// Says on stderr what the worker claims and how each run ends.
struct Shown;

impl WorkerObserver for Shown {
    fn claimed(&self, run_id: RunId, started: bool) {
        let how = match started {
            true => "taking over",
            false => "starting",
        };
        crate::note(&format!("run {run_id}: {how}"));
    }

    fn ended(&self, run_id: RunId, ended: &Ended) {
        let line = match ended {
            Ended::Ran(outcome) if outcome.status == domain::RunStatus::Running => {
                format!("run {run_id}: handed over")
            }
            Ended::Ran(outcome) => match &outcome.error {
                Some(error) => format!("run {run_id}: {}: {error}", outcome.status.as_str()),
                None => format!("run {run_id}: {}", outcome.status.as_str()),
            },
            Ended::Settled(status) => {
                format!("run {run_id}: had ended ({})", status.as_str())
            }
            Ended::Failed(application::ExecutorError::Store(
                application::ports::StoreError::LeaseLost(e),
            )) => format!("run {run_id}: lost to another worker, stopped: {e}"),
            Ended::Failed(e) => format!("run {run_id}: cannot run here: {e}"),
        };
        crate::note(&line);
    }
}

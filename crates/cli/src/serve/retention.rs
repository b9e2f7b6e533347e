//! `awr serve --retention AGE`: prunes runs that ended longer ago than
//! `AGE` (as `awr prune --older-than AGE` does) through the server's own
//! store, at start and then every [`interval`] until the server stops.

use std::time::Duration;

use application::ports::Clock;
use application::retention::{self, PrunePolicy};
use tokio::task::JoinHandle;

use super::App;

/// How often the server prunes: a quarter of the retention age, so a run
/// outlives it by at most a quarter; between a minute and an hour.
pub fn interval(age: Duration) -> Duration {
    (age / 4).clamp(Duration::from_secs(60), Duration::from_secs(3600))
}

/// Starts the pruner; it stops when the returned handle is dropped (it is
/// aborted with the server's runtime) or the process ends.
pub fn spawn(app: &App, age: Duration) -> AbortOnDrop {
    let store = std::sync::Arc::clone(&app.0.store);
    let files = crate::wiring::run_files(&app.0.config.storage);
    let (clock, _) = crate::wiring::clock_and_ids();
    let policy = PrunePolicy {
        older_than: age,
        statuses: Vec::new(),
        dry_run: false,
    };
    let every = interval(age);
    AbortOnDrop(tokio::spawn(async move {
        loop {
            match retention::prune(&*store, &*files, &policy, clock.now()).await {
                Ok(report) => {
                    for run in &report.pruned {
                        tracing::info!(run = %run.run_id, status = run.status.as_str(), "pruned");
                    }
                    for (run, why) in &report.failed {
                        tracing::warn!(run = %run, error = %why, "retention: cannot prune the run");
                    }
                }
                Err(e) => tracing::warn!(error = %e, "retention: cannot prune"),
            }
            tokio::time::sleep(every).await;
        }
    }))
}

/// A task aborted when this is dropped.
pub struct AbortOnDrop(JoinHandle<()>);

impl AbortOnDrop {
    /// Aborts `task` when dropped.
    pub fn new(task: JoinHandle<()>) -> Self {
        Self(task)
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

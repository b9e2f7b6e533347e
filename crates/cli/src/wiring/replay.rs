//! A replay of a recording, as `awr verify-determinism` runs it: in
//! memory, on the recording's clock and ids, every agent served from the
//! recording.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use application::ports::{Clock, IdGen, RunStore};
use application::recording::SeededIds;
use application::secrets::KeyNames;
use application::{ExecutorError, RunRequest, Runtime};
use awr_cli::embed;
use domain::recording::Manifest;
use domain::{RunId, Timestamp, WorkflowDef};
use futures::future::BoxFuture;
use infrastructure::FixedClock;
use infrastructure::store::MemoryRunStore;

/// A clock whose readings are logical (a millisecond per reading from the
/// recording's start) and whose waits are real, so a timeout still waits.
struct PinnedClock(FixedClock);

impl Clock for PinnedClock {
    fn now(&self) -> Timestamp {
        self.0.now()
    }

    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep(duration))
    }
}

/// Runs `workflow` once more on the recording in `dir` (its `manifest`,
/// its ids from `id_seed`), on a store of its own in memory: the store
/// and the replayed run.
pub async fn replay_recording(
    dir: &Path,
    manifest: &Manifest,
    id_seed: u64,
    workflow: Arc<WorkflowDef>,
) -> Result<(Arc<dyn RunStore>, RunId), ExecutorError> {
    let store: Arc<dyn RunStore> = Arc::new(MemoryRunStore::default());
    let clock: Arc<dyn Clock> = Arc::new(PinnedClock(FixedClock::starting_at(
        Timestamp::from_millis(manifest.seeds.clock_start_ms),
    )));
    let ids: Arc<dyn IdGen> = Arc::new(SeededIds::new(id_seed));
    let keys = KeyNames::default();
    let project = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let builder = Runtime::builder(Arc::clone(&store), clock.clone(), ids.clone())
        .commands(embed::commands(&project, &keys))
        .workspace(project);
    // Every agent is the recording's: the runtime's own tool loop and
    // tools are never used.
    let runtime = embed::replaying(builder, dir, &keys, clock, ids).build();
    let outcome = runtime
        .run(RunRequest {
            workflow,
            input: manifest.input.clone(),
            source: None,
            started_by: None,
        })
        .await?;
    Ok((store, outcome.run_id))
}

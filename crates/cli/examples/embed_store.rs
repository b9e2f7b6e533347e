//! Swaps the `RunStore`: a store of the program's own (here a wrapper over
//! the file store that counts appends) passes the store conformance suite
//! (feature `testing` of `awr-application`), then runs a workflow. Exits
//! non-zero if a check fails or no append was counted.
//!
//! `cargo run -p cli --example embed_store`

// The harness is test support: storage it cannot set up or damage is a
// failed check, and the suite reports a failed check by a panic.
#![allow(clippy::expect_used)]

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use application::ports::{
    EventBatches, EventFilter, EventStream, RunLock, RunQuery, RunStore, RunSummary, StoreError,
};
use application::secrets::KeyNames;
use application::testing::store_conformance::StoreHarness;
use application::{RunRequest, Runtime};
use async_trait::async_trait;
use domain::definition::Definition;
use domain::snapshot::SnapshotDelta;
use domain::{RunId, RunSnapshot, RunStatus, RuntimeEvent, WorkflowDef};
use infrastructure::clock::{RandomIds, SystemClock};
use infrastructure::store::{FileRunStore, FileStoreConfig};

/// The file store, counting the appends that reach it.
struct Counting {
    inner: FileRunStore,
    appends: AtomicU64,
}

impl Counting {
    fn open(dir: &Path) -> Result<Self, StoreError> {
        let config = FileStoreConfig {
            // Followers of runs another instance writes look often: the
            // suite's checks across instances run faster.
            follow_poll: Duration::from_millis(10),
            ..FileStoreConfig::default()
        };
        Ok(Self {
            inner: FileRunStore::open_with(dir, config)?,
            appends: AtomicU64::new(0),
        })
    }
}

#[async_trait]
impl RunStore for Counting {
    async fn create_run(&self, run_id: RunId) -> Result<RunLock, StoreError> {
        self.inner.create_run(run_id).await
    }
    async fn lock(&self, run_id: RunId) -> Result<RunLock, StoreError> {
        self.inner.lock(run_id).await
    }
    async fn has_writer(&self, run_id: RunId) -> Result<bool, StoreError> {
        self.inner.has_writer(run_id).await
    }
    async fn append(&self, run_id: RunId, events: &[RuntimeEvent]) -> Result<u64, StoreError> {
        let written = self.inner.append(run_id, events).await?;
        self.appends.fetch_add(1, Ordering::SeqCst);
        Ok(written)
    }
    async fn flush(&self, run_id: RunId) -> Result<(), StoreError> {
        self.inner.flush(run_id).await
    }
    async fn read(
        &self,
        run_id: RunId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<RuntimeEvent>, StoreError> {
        self.inner.read(run_id, after, limit).await
    }
    async fn last_offset(&self, run_id: RunId) -> Result<u64, StoreError> {
        self.inner.last_offset(run_id).await
    }
    async fn follow(&self, run_id: RunId, after: u64) -> Result<EventStream, StoreError> {
        self.inner.follow(run_id, after).await
    }
    async fn save_snapshot(&self, snapshot: &RunSnapshot) -> Result<u64, StoreError> {
        self.inner.save_snapshot(snapshot).await
    }
    async fn save_snapshot_delta(&self, delta: &SnapshotDelta) -> Result<Option<u64>, StoreError> {
        self.inner.save_snapshot_delta(delta).await
    }
    async fn load_snapshot(&self, run_id: RunId) -> Result<Option<RunSnapshot>, StoreError> {
        self.inner.load_snapshot(run_id).await
    }
    async fn save_definition(&self, definition: &Definition) -> Result<String, StoreError> {
        self.inner.save_definition(definition).await
    }
    async fn load_definition(&self, hash: &str) -> Result<Option<Definition>, StoreError> {
        self.inner.load_definition(hash).await
    }
    async fn list_runs(&self) -> Result<Vec<RunId>, StoreError> {
        self.inner.list_runs().await
    }
    async fn query_runs(&self, query: &RunQuery) -> Result<Vec<RunSummary>, StoreError> {
        self.inner.query_runs(query).await
    }
    async fn read_matching(
        &self,
        run_id: RunId,
        after: u64,
        filter: &EventFilter,
        limit: usize,
    ) -> Result<Vec<RuntimeEvent>, StoreError> {
        self.inner.read_matching(run_id, after, filter, limit).await
    }
    async fn delete_run(&self, run_id: RunId) -> Result<(), StoreError> {
        self.inner.delete_run(run_id).await
    }
    async fn import_run(
        &self,
        run_id: RunId,
        events: EventBatches,
        snapshot: Option<RunSnapshot>,
    ) -> Result<(), StoreError> {
        self.inner.import_run(run_id, events, snapshot).await
    }
}

/// What the conformance suite needs of a store under test: fresh storage,
/// a second instance on it, and the store's own ways to damage it.
struct Harness {
    dir: tempfile::TempDir,
    store: Arc<Counting>,
}

impl Harness {
    fn log(&self, run: RunId) -> std::path::PathBuf {
        self.store.inner.run_dir(run).join("events.ndjson")
    }
}

impl StoreHarness for Harness {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = Arc::new(Counting::open(dir.path()).expect("the store opens"));
        Self { dir, store }
    }
    fn store(&self) -> Arc<dyn RunStore> {
        self.store.clone()
    }
    fn another(&self) -> Option<Arc<dyn RunStore>> {
        Some(Arc::new(
            Counting::open(self.dir.path()).expect("the store opens again"),
        ))
    }
    fn tear_tail(&self, run: RunId) -> bool {
        let mut log = std::fs::OpenOptions::new()
            .append(true)
            .open(self.log(run))
            .expect("the log opens");
        log.write_all(br#"{"id":"x","offset":11,"timest"#)
            .expect("half a line is written");
        true
    }
    fn corrupt_event(&self, run: RunId, offset: u64) -> bool {
        let text = std::fs::read_to_string(self.log(run)).expect("the log reads");
        let mut lines: Vec<&str> = text.lines().collect();
        lines[usize::try_from(offset).expect("an offset") - 1] = "{this is not json";
        std::fs::write(self.log(run), lines.join("\n") + "\n").expect("the log is written");
        true
    }
    fn bad_event_place(&self, _run: RunId, offset: u64) -> String {
        format!("events.ndjson line {offset}")
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Every check of the suite, in turn; a failed check panics (exit 101).
    application::store_conformance!(run Harness).await;
    println!("the counting store passes the store conformance suite");

    let dir = tempfile::tempdir()?;
    let store = Arc::new(Counting::open(dir.path())?);
    let runtime = Runtime::builder(store.clone(), Arc::new(SystemClock), Arc::new(RandomIds))
        .commands(awr_cli::embed::commands(dir.path(), &KeyNames::default()))
        .build();
    let yaml = "name: count\nnodes:\n  - id: a\n    command: echo one\n  - id: b\n    command: echo two\nedges:\n  - {from: a, to: b}\n";
    let request = RunRequest {
        workflow: Arc::new(WorkflowDef::from_yaml(yaml)?),
        input: serde_json::Value::Null,
        source: None,
        started_by: None,
    };
    let outcome = runtime.run(request).await?;
    assert_eq!(outcome.status, RunStatus::Completed, "{:?}", outcome.error);
    let appends = store.appends.load(Ordering::SeqCst);
    let events = outcome.snapshot.last_offset;
    assert!(
        appends > 0 && appends <= events,
        "{appends} appends of {events} events: each append carries at least one"
    );
    println!(
        "run {}: {events} events in {appends} appends",
        outcome.run_id
    );
    Ok(())
}

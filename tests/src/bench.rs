//! What the benches share: where criterion writes, the raw file and line
//! every figure is judged against, an agent that answers at once, a chain
//! of agent steps, and a store that counts the bytes it writes.

use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use std::sync::atomic::{AtomicU64, Ordering};

use application::ports::{
    AgentMessage, AgentRequest, AgentResult, AgentStream, EventStream, QueryError, QueryFn,
    RunLock, RunStore, StoreError,
};
use async_trait::async_trait;
use domain::{RunId, RunSnapshot, RuntimeEvent, WorkflowDef};

/// Where criterion writes its results: `criterion/` in the target
/// directory, which is `CARGO_TARGET_DIR` or the one the bench binary
/// (`<target>/<profile>/deps/<bench>-*`) runs from. `cargo xtask
/// bench-report` reads the figures a bench writes there.
pub fn criterion_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            let exe = std::env::current_exe().ok()?;
            Some(exe.parent()?.parent()?.parent()?.to_path_buf())
        })
        .unwrap_or_else(|| PathBuf::from("target"))
        .join("criterion")
}

/// The release `awr`, built next to the bench that asks for it.
///
/// # Panics
/// When the build fails: a bench has no caller to hand an error to.
pub fn release_awr() -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let tests = Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = tests.parent().unwrap_or(tests);
    #[allow(clippy::expect_used)]
    let status = std::process::Command::new(cargo)
        .args(["build", "--quiet", "--release", "-p", "cli", "--bin", "awr"])
        .current_dir(root)
        .status()
        .expect("cargo build");
    assert!(status.success(), "building awr failed");
    #[allow(clippy::expect_used)]
    let exe = std::env::current_exe().expect("the bench's own path");
    let release = exe.parent().and_then(Path::parent);
    #[allow(clippy::expect_used)]
    release
        .expect("a bench runs from <target>/release/deps")
        .join("awr")
}

/// The median of `samples` (the upper one of an even count), or NaN for
/// none: a filter left that figure out.
pub fn median(samples: &[f64]) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN)
}

/// A file opened for appending (0600, created if need be), as a run's log
/// is: the raw reference's file.
///
/// # Panics
/// When the file cannot be opened: a bench has no caller to report to.
pub fn append_file(path: &Path) -> File {
    #[allow(clippy::expect_used)]
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .expect("raw file")
}

/// A 300-byte line, about an event's: what a raw `write` + `fdatasync`
/// writes.
pub fn raw_line() -> Vec<u8> {
    [b'x'; 299].into_iter().chain([b'\n']).collect()
}

/// An agent that answers at once: what is measured is the runtime alone.
pub struct Stub;

#[async_trait]
impl QueryFn for Stub {
    async fn query(&self, request: AgentRequest) -> Result<AgentStream, QueryError> {
        let done = AgentMessage::Completed(AgentResult {
            text: format!("answer of {}", request.node_id),
            num_turns: 1,
            ..AgentResult::default()
        });
        Ok(Box::pin(futures::stream::iter([Ok(done)])))
    }
}

/// A workflow `name` of `steps` agent steps in a chain, each its own agent
/// `a<i>` with the settings `agent` (YAML flow-mapping entries, such as
/// `provider: mock`) and a system prompt of its own.
///
/// # Panics
/// When the settings make no valid workflow.
pub fn chain(name: &str, agent: &str, steps: usize) -> WorkflowDef {
    let mut yaml = format!("name: {name}\nagents:\n");
    for i in 0..steps {
        yaml += &format!("  a{i}: {{{agent}, system_prompt: 'agent {i}'}}\n");
    }
    yaml += "steps:\n";
    for i in 0..steps {
        yaml += &format!("  - agent: a{i}\n");
    }
    #[allow(clippy::expect_used)]
    WorkflowDef::from_yaml(&yaml).expect("bench workflow")
}

/// A store that counts the bytes it reports writing: the log's (`append`),
/// the snapshots' (`save_snapshot`) and the deltas' (`save_snapshot_delta`),
/// how many of each, and the offsets the snapshots were taken at.
pub struct Counting<S> {
    /// The store that does the work.
    pub inner: S,
    /// Bytes appended to logs.
    pub log: AtomicU64,
    /// Bytes of the snapshots saved.
    pub snapshots: AtomicU64,
    /// Snapshots saved.
    pub saves: AtomicU64,
    /// Bytes of the deltas saved.
    pub deltas: AtomicU64,
    /// Deltas saved.
    pub delta_saves: AtomicU64,
    /// The `lastOffset` of each snapshot saved (not of the deltas).
    pub snapshot_offsets: std::sync::Mutex<Vec<u64>>,
}

impl<S> Counting<S> {
    /// `inner`, with every count at zero.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            log: AtomicU64::new(0),
            snapshots: AtomicU64::new(0),
            saves: AtomicU64::new(0),
            deltas: AtomicU64::new(0),
            delta_saves: AtomicU64::new(0),
            snapshot_offsets: std::sync::Mutex::new(Vec::new()),
        }
    }
}

#[async_trait]
impl<S: RunStore> RunStore for Counting<S> {
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
        let bytes = self.inner.append(run_id, events).await?;
        self.log.fetch_add(bytes, Ordering::Relaxed);
        Ok(bytes)
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
        let bytes = self.inner.save_snapshot(snapshot).await?;
        self.snapshots.fetch_add(bytes, Ordering::Relaxed);
        self.saves.fetch_add(1, Ordering::Relaxed);
        (self.snapshot_offsets.lock())
            .map_err(|e| StoreError::io_msg(e.to_string()))?
            .push(snapshot.last_offset);
        Ok(bytes)
    }
    async fn save_snapshot_delta(
        &self,
        delta: &domain::snapshot::SnapshotDelta,
    ) -> Result<Option<u64>, StoreError> {
        let bytes = self.inner.save_snapshot_delta(delta).await?;
        if let Some(bytes) = bytes {
            self.deltas.fetch_add(bytes, Ordering::Relaxed);
            self.delta_saves.fetch_add(1, Ordering::Relaxed);
        }
        Ok(bytes)
    }
    async fn load_snapshot(&self, run_id: RunId) -> Result<Option<RunSnapshot>, StoreError> {
        self.inner.load_snapshot(run_id).await
    }
    async fn save_definition(
        &self,
        definition: &domain::definition::Definition,
    ) -> Result<String, StoreError> {
        self.inner.save_definition(definition).await
    }
    async fn load_definition(
        &self,
        hash: &str,
    ) -> Result<Option<domain::definition::Definition>, StoreError> {
        self.inner.load_definition(hash).await
    }
    async fn list_runs(&self) -> Result<Vec<RunId>, StoreError> {
        self.inner.list_runs().await
    }
    async fn delete_run(&self, run_id: RunId) -> Result<(), StoreError> {
        self.inner.delete_run(run_id).await
    }
    async fn import_run(
        &self,
        run_id: RunId,
        events: application::ports::EventBatches,
        snapshot: Option<RunSnapshot>,
    ) -> Result<(), StoreError> {
        self.inner.import_run(run_id, events, snapshot).await
    }
}

/// A chain of `n` mock agents named `chain<n>` written in `dir`
/// (`chain<n>.yaml`), with its fixtures (one file per node).
///
/// # Panics
/// When a file cannot be written.
#[allow(clippy::expect_used)]
pub fn mock_chain(dir: &Path, n: usize) {
    let name = format!("chain{n}");
    let fixtures = dir.join("fixtures").join(&name);
    std::fs::create_dir_all(&fixtures).expect("fixture dir");
    let mut yaml = format!("name: {name}\nagents:\n  a: {{provider: mock}}\nnodes:\n");
    for i in 0..n {
        yaml += &format!("  - {{id: n{i}, agent: a}}\n");
        let body = serde_json::json!({"calls": [{
            "output": {"text": format!("answer {i}"), "sessionId": format!("s{i}"),
                       "usage": {"inputTokens": 100, "outputTokens": 50}},
            "events": [{"type": "agent:start", "sessionId": format!("s{i}")},
                       {"type": "agent:text:delta", "content": "answer "},
                       {"type": "agent:text:delta", "content": format!("{i}")}]}]});
        std::fs::write(fixtures.join(format!("n{i}.json")), body.to_string()).expect("fixture");
    }
    yaml += "edges:\n";
    for i in 1..n {
        yaml += &format!("  - {{from: n{}, to: n{i}}}\n", i - 1);
    }
    std::fs::write(dir.join(format!("{name}.yaml")), yaml).expect("workflow");
}

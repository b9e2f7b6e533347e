//! What the executor's counted tests run on: a run's log in memory that
//! notes every operation in order (`append <type>` per event, `flush`,
//! `save_snapshot`, `save_snapshot_delta`) and tallies the bytes the file
//! store would write (an event as its JSON line, a snapshot or a delta as
//! its JSON), with ids and a clock
//! that count instead of being random.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use domain::snapshot::SnapshotDelta;
use domain::{RunId, RunSnapshot, RuntimeEvent};

use crate::ports::{EventStream, IdGen, RunLock, RunStore, StoreError};

/// What the store was given, counted.
#[derive(Default)]
pub(super) struct Tally {
    /// Bytes of the log.
    pub log: u64,
    /// Bytes of every snapshot saved.
    pub snapshots: u64,
    /// The offset of each snapshot saved.
    pub saved_at: Vec<u64>,
    /// Bytes of every delta saved.
    pub deltas: u64,
    /// The offset of each delta saved.
    pub deltas_at: Vec<u64>,
    /// Bytes of the last snapshot saved.
    pub last_snapshot: u64,
    /// Log bytes appended since the last snapshot or delta: what a load folds.
    pub tail: u64,
    /// Log bytes appended since the last flush or snapshot: the step in
    /// progress.
    pub step: u64,
    /// The largest tail seen, the step in progress aside, and the snapshot
    /// it followed: `(tail, snapshot)`.
    pub worst_tail: (u64, u64),
    /// The largest tail seen after each snapshot, by the snapshot's size.
    pub tail_after: std::collections::BTreeMap<u64, u64>,
    /// Appends that carried events: each is one `write` in the file store.
    pub appends: u64,
    /// Flushes: each a sync in the file store.
    pub flushes: u64,
}

/// A run's log in memory.
#[derive(Default)]
pub(super) struct MemoryLog {
    pub events: Mutex<Vec<RuntimeEvent>>,
    pub snapshot: Mutex<Option<RunSnapshot>>,
    /// Every operation, in order; shared with agents that note their calls.
    pub ops: Arc<Mutex<Vec<String>>>,
    pub tally: Mutex<Tally>,
    /// Loads find no snapshot, whatever was saved: the state is then the
    /// fold of the whole log.
    pub forgets_snapshots: bool,
    /// Deltas are declined, as by a store that keeps none.
    pub declines_deltas: bool,
    /// Reads a run's status from its log, as the file store does: a run's
    /// stop owes it no snapshot.
    pub folds_status: bool,
}

impl MemoryLog {
    /// A log whose loads find no snapshot (see [`MemoryLog::forgets_snapshots`]).
    pub fn forgetting_snapshots() -> Self {
        Self {
            forgets_snapshots: true,
            ..Self::default()
        }
    }

    pub fn note(&self, op: String) {
        self.ops.lock().unwrap().push(op);
    }
}

#[async_trait]
impl RunStore for MemoryLog {
    async fn create_run(&self, run_id: RunId) -> Result<RunLock, StoreError> {
        Ok(RunLock::new(run_id, ()))
    }
    async fn lock(&self, run_id: RunId) -> Result<RunLock, StoreError> {
        Ok(RunLock::new(run_id, ()))
    }
    async fn has_writer(&self, _: RunId) -> Result<bool, StoreError> {
        Ok(false)
    }
    fn needs_final_snapshot(&self) -> bool {
        !self.folds_status
    }
    async fn append(&self, _: RunId, events: &[RuntimeEvent]) -> Result<u64, StoreError> {
        let mut buf = Vec::new();
        let mut bytes = 0;
        for event in events {
            self.note(format!("append {}", event.kind.type_name()));
            buf.clear();
            event.write_json(&mut buf).unwrap();
            bytes += buf.len() as u64 + 1;
        }
        self.events.lock().unwrap().extend_from_slice(events);
        let mut t = self.tally.lock().unwrap();
        t.appends += u64::from(!events.is_empty());
        t.log += bytes;
        t.tail += bytes;
        t.step += bytes;
        let tail = t.tail - t.step;
        if tail > t.worst_tail.0 {
            t.worst_tail = (tail, t.last_snapshot);
        }
        let after = t.last_snapshot;
        let worst = t.tail_after.entry(after).or_default();
        *worst = (*worst).max(tail);
        Ok(bytes)
    }
    async fn flush(&self, _: RunId) -> Result<(), StoreError> {
        self.note("flush".into());
        let mut t = self.tally.lock().unwrap();
        t.flushes += 1;
        t.step = 0;
        Ok(())
    }
    async fn read(
        &self,
        _: RunId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<RuntimeEvent>, StoreError> {
        let events = self.events.lock().unwrap();
        let from = usize::try_from(after).unwrap().min(events.len());
        Ok(events[from..].iter().take(limit).cloned().collect())
    }
    async fn last_offset(&self, _: RunId) -> Result<u64, StoreError> {
        Ok(self.events.lock().unwrap().len() as u64)
    }
    async fn follow(&self, _: RunId, _: u64) -> Result<EventStream, StoreError> {
        Ok(Box::pin(futures::stream::empty()))
    }
    async fn save_snapshot(&self, snapshot: &RunSnapshot) -> Result<u64, StoreError> {
        self.note("save_snapshot".into());
        let bytes = serde_json::to_vec(snapshot).unwrap().len() as u64;
        *self.snapshot.lock().unwrap() = Some(snapshot.clone());
        let mut t = self.tally.lock().unwrap();
        t.snapshots += bytes;
        t.saved_at.push(snapshot.last_offset);
        t.last_snapshot = bytes;
        // What was appended so far is in the snapshot.
        t.tail = 0;
        t.step = 0;
        Ok(bytes)
    }
    async fn save_snapshot_delta(&self, delta: &SnapshotDelta) -> Result<Option<u64>, StoreError> {
        self.note("save_snapshot_delta".into());
        if self.declines_deltas {
            return Ok(None);
        }
        let mut bytes = Vec::new();
        delta.write_json(&mut bytes).unwrap();
        let read = SnapshotDelta::from_json(&bytes).unwrap();
        if let Some(snapshot) = self.snapshot.lock().unwrap().as_mut() {
            snapshot.apply_delta(read).unwrap();
        }
        let bytes = bytes.len() as u64 + 1;
        let mut t = self.tally.lock().unwrap();
        t.deltas += bytes;
        t.deltas_at.push(delta.last_offset);
        t.tail = 0;
        t.step = 0;
        Ok(Some(bytes))
    }
    async fn load_snapshot(&self, _: RunId) -> Result<Option<RunSnapshot>, StoreError> {
        if self.forgets_snapshots {
            return Ok(None);
        }
        Ok(self.snapshot.lock().unwrap().clone())
    }
    /// Runs here start from no file: there is no definition to keep.
    async fn save_definition(
        &self,
        _: &domain::definition::Definition,
    ) -> Result<String, StoreError> {
        Err(StoreError::io_msg("this test store keeps no definitions"))
    }
    async fn load_definition(
        &self,
        _: &str,
    ) -> Result<Option<domain::definition::Definition>, StoreError> {
        Ok(None)
    }
    async fn list_runs(&self) -> Result<Vec<RunId>, StoreError> {
        Ok(Vec::new())
    }
    async fn delete_run(&self, run_id: RunId) -> Result<(), StoreError> {
        Err(StoreError::NotFound(run_id))
    }
    async fn import_run(
        &self,
        _: RunId,
        _: crate::ports::EventBatches,
        _: Option<RunSnapshot>,
    ) -> Result<(), StoreError> {
        Err(StoreError::Conflict("a memory log holds one run".into()))
    }
}

/// Ids 1, 2, 3, ... as UUIDs.
pub(super) struct Counter(pub AtomicU64);

impl Default for Counter {
    fn default() -> Self {
        Self(AtomicU64::new(1))
    }
}

impl IdGen for Counter {
    fn uuid(&self) -> uuid::Uuid {
        let n = self.0.fetch_add(1, Ordering::Relaxed);
        let mut bytes = [0u8; 16];
        bytes[8..].copy_from_slice(&n.to_be_bytes());
        uuid::Builder::from_random_bytes(bytes).into_uuid()
    }
}

/// A clock that moves 1 ms per reading.
#[derive(Default)]
pub(super) struct Ticking(pub AtomicU64);

impl crate::ports::Clock for Ticking {
    fn now(&self) -> domain::Timestamp {
        domain::Timestamp::from_millis(
            1_767_225_600_000 + self.0.fetch_add(1, Ordering::Relaxed) as i64,
        )
    }
    fn sleep(&self, duration: std::time::Duration) -> futures::future::BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep(duration))
    }
}

/// A chain of `steps` Claude Code agent nodes `n0`, `n1`, ...
pub(super) fn chain(steps: usize) -> domain::WorkflowDef {
    let mut yaml = String::from("name: chain\nagents:\n  a: {provider: claude-code}\nnodes:\n");
    for i in 0..steps {
        yaml += &format!("  - {{id: n{i}, agent: a}}\n");
    }
    yaml += "edges:\n";
    for i in 1..steps {
        yaml += &format!("  - {{from: n{}, to: n{i}}}\n", i - 1);
    }
    domain::WorkflowDef::from_yaml(&yaml).unwrap()
}

//! [`MemoryRunStore`]: the [`RunStore`] contract without a disk, for tests and
//! embedders that do not need durability. It passes the same conformance
//! suite as the file store, so a test written against it holds for both.
//! A run's lock is a flag beside its log, cleared when the [`RunLock`] drops.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use application::ports::{EventBatches, EventStream, RunLock, RunStore, StoreError};
use async_trait::async_trait;
use domain::definition::Definition;
use domain::snapshot::SnapshotDelta;
use domain::{RunId, RunSnapshot, RuntimeEvent};
use futures::StreamExt;
use tokio::sync::Notify;

use super::row::event_json;
use super::{LogSource, check_continuation, follow_log, locked_here, not_locked};

/// Runs, logs and snapshots held in memory; lost when dropped.
///
/// Events are kept as values, never encoded: an append reports 0 bytes
/// (see [`RunStore::append`]), so the amortized rule never asks for a
/// snapshot and a state read folds the log in memory. A store made by
/// [`MemoryRunStore::measuring`] weighs each event as the file store's JSON
/// line instead, so snapshots and deltas fall where the file store's would:
/// what tests of that cadence need.
#[derive(Debug, Default)]
pub struct MemoryRunStore {
    /// A `std` mutex, not a Tokio one: it is held only to look up or insert
    /// a run, never across an `.await`.
    runs: Mutex<HashMap<RunId, Arc<MemRun>>>,
    /// Workflow definitions by hash.
    definitions: Mutex<HashMap<String, Definition>>,
    /// Whether appends weigh events as JSON lines.
    measuring: bool,
}

/// One run.
#[derive(Debug, Default)]
struct MemRun {
    /// A `std` mutex: held only while copying events in or out, never across
    /// an `.await`.
    state: Mutex<MemState>,
    /// Wakes followers after each append.
    changed: Notify,
}

#[derive(Debug, Default)]
struct MemState {
    events: Vec<RuntimeEvent>,
    /// Reused buffer for measuring events as the file store's JSON lines
    /// (a measuring store's).
    buf: Vec<u8>,
    snapshot: Option<RunSnapshot>,
    /// Deltas saved since the snapshot, as JSON, as the file store keeps them.
    deltas: Vec<Vec<u8>>,
    /// Whether a [`RunLock`] of this run is alive.
    locked: bool,
}

/// What a memory store's [`RunLock`] holds: dropping it unlocks the run.
struct Held(Arc<MemRun>);

impl Drop for Held {
    fn drop(&mut self) {
        self.0.state().locked = false;
    }
}

/// Locks, recovering the data of a poisoned lock: nothing here panics while
/// holding one, and a panic elsewhere must not make the store unusable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl MemRun {
    fn state(&self) -> MutexGuard<'_, MemState> {
        lock(&self.state)
    }

    /// The run's state, for a write: refused unless the run is locked.
    fn writable(&self, run_id: RunId) -> Result<MutexGuard<'_, MemState>, StoreError> {
        let state = self.state();
        if !state.locked {
            return Err(not_locked(run_id));
        }
        Ok(state)
    }
}

/// The bytes `events` take as JSON lines, serialized into `buf`.
fn json_lines_bytes(
    run_id: RunId,
    events: &[RuntimeEvent],
    buf: &mut Vec<u8>,
) -> Result<u64, StoreError> {
    let mut bytes = 0;
    for event in events {
        bytes += event_json(run_id, event, buf)?.len() as u64 + 1;
    }
    Ok(bytes)
}

/// Locks `run` for a new [`RunLock`].
fn take_lock(run_id: RunId, run: Arc<MemRun>) -> Result<RunLock, StoreError> {
    {
        let mut state = run.state();
        if state.locked {
            return Err(locked_here(run_id));
        }
        state.locked = true;
    }
    Ok(RunLock::new(run_id, Held(run)))
}

impl MemRun {
    fn read_after(&self, after: u64, limit: usize) -> Vec<RuntimeEvent> {
        let state = self.state();
        let start = usize::try_from(after)
            .unwrap_or(usize::MAX)
            .min(state.events.len());
        let stop = start.saturating_add(limit).min(state.events.len());
        state.events[start..stop].to_vec()
    }

    fn last(&self) -> u64 {
        self.state().events.len() as u64
    }
}

impl LogSource for MemRun {
    async fn read_after(&self, after: u64, limit: usize) -> Result<Vec<RuntimeEvent>, StoreError> {
        Ok(MemRun::read_after(self, after, limit))
    }

    async fn last(&self) -> Result<u64, StoreError> {
        Ok(MemRun::last(self))
    }

    fn changed(&self) -> &Notify {
        &self.changed
    }

    fn poll_interval(&self) -> Option<Duration> {
        None
    }
}

impl MemoryRunStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store whose appends report the bytes the file store would
    /// write (each event serialized to count them), so the snapshot cadence
    /// is the file store's.
    pub fn measuring() -> Self {
        Self {
            measuring: true,
            ..Self::default()
        }
    }

    /// Checks that `events` continue the run's log, counts their bytes when
    /// measuring, and has `keep` add them to the log; followers are woken
    /// once they are in.
    fn append_with<E: AsRef<[RuntimeEvent]>>(
        &self,
        run_id: RunId,
        events: E,
        keep: impl FnOnce(&mut Vec<RuntimeEvent>, E),
    ) -> Result<u64, StoreError> {
        let run = self.run(run_id)?;
        let bytes = {
            let mut state = run.writable(run_id)?;
            let batch = events.as_ref();
            check_continuation(run_id, state.events.len() as u64, batch)?;
            let bytes = if self.measuring {
                json_lines_bytes(run_id, batch, &mut state.buf)?
            } else {
                0
            };
            keep(&mut state.events, events);
            bytes
        };
        run.changed.notify_waiters();
        Ok(bytes)
    }

    fn run(&self, run_id: RunId) -> Result<Arc<MemRun>, StoreError> {
        lock(&self.runs)
            .get(&run_id)
            .cloned()
            .ok_or(StoreError::NotFound(run_id))
    }
}

#[async_trait]
impl RunStore for MemoryRunStore {
    async fn create_run(&self, run_id: RunId) -> Result<RunLock, StoreError> {
        let run = {
            let mut runs = lock(&self.runs);
            if runs.contains_key(&run_id) {
                return Err(StoreError::Conflict(format!("run {run_id} already exists")));
            }
            // Locked before anyone else can see it.
            let run = Arc::new(MemRun::default());
            run.state().locked = true;
            runs.insert(run_id, Arc::clone(&run));
            run
        };
        Ok(RunLock::new(run_id, Held(run)))
    }

    async fn lock(&self, run_id: RunId) -> Result<RunLock, StoreError> {
        take_lock(run_id, self.run(run_id)?)
    }

    async fn has_writer(&self, run_id: RunId) -> Result<bool, StoreError> {
        Ok(self.run(run_id)?.state().locked)
    }

    /// Returns 0, encoding nothing; a [`MemoryRunStore::measuring`] store
    /// returns the bytes the events take as JSON lines, as the file store
    /// writes them.
    async fn append(&self, run_id: RunId, events: &[RuntimeEvent]) -> Result<u64, StoreError> {
        self.append_with(run_id, events, |kept, events| {
            kept.extend_from_slice(events)
        })
    }

    /// Moves the events into the log: a copy of each would cost more than
    /// everything else an append does here.
    async fn append_owned(
        &self,
        run_id: RunId,
        events: &mut Vec<RuntimeEvent>,
    ) -> Result<u64, StoreError> {
        self.append_with(run_id, events, |kept, events| kept.append(events))
    }

    async fn flush(&self, run_id: RunId) -> Result<(), StoreError> {
        self.run(run_id).map(|_| ())
    }

    async fn read(
        &self,
        run_id: RunId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<RuntimeEvent>, StoreError> {
        Ok(self.run(run_id)?.read_after(after, limit))
    }

    async fn last_offset(&self, run_id: RunId) -> Result<u64, StoreError> {
        Ok(self.run(run_id)?.last())
    }

    async fn follow(&self, run_id: RunId, after: u64) -> Result<EventStream, StoreError> {
        Ok(follow_log(self.run(run_id)?, after))
    }

    /// Returns the bytes of the snapshot as JSON, as the file store writes it.
    async fn save_snapshot(&self, snapshot: &RunSnapshot) -> Result<u64, StoreError> {
        let run = self.run(snapshot.run_id)?;
        let bytes = snapshot.to_json_vec().map_err(|e| {
            StoreError::io(
                format!("cannot serialize the snapshot of run {}", snapshot.run_id),
                e.into(),
            )
        })?;
        let mut state = run.writable(snapshot.run_id)?;
        state.snapshot = Some(snapshot.clone());
        state.deltas.clear();
        Ok(bytes.len() as u64)
    }

    /// Keeps the delta as its JSON, read back as the file store reads it;
    /// returns its bytes.
    async fn save_snapshot_delta(&self, delta: &SnapshotDelta) -> Result<Option<u64>, StoreError> {
        let run_id = delta.run_id;
        let run = self.run(run_id)?;
        let mut bytes = Vec::new();
        delta.write_json(&mut bytes).map_err(|e| {
            StoreError::io(
                format!("cannot serialize a snapshot delta of run {run_id}"),
                e.into(),
            )
        })?;
        let len = bytes.len() as u64;
        run.writable(run_id)?.deltas.push(bytes);
        Ok(Some(len))
    }

    /// No: a run's status is read from its log.
    fn needs_final_snapshot(&self) -> bool {
        false
    }

    async fn load_snapshot(&self, run_id: RunId) -> Result<Option<RunSnapshot>, StoreError> {
        let run = self.run(run_id)?;
        let state = run.state();
        let Some(mut snapshot) = state.snapshot.clone() else {
            return Ok(None);
        };
        let deltas = state.deltas.iter().map(|d| SnapshotDelta::from_json(d));
        if let Some(e) = snapshot.apply_deltas(deltas) {
            tracing::debug!(run = %run_id, error = %e, "snapshot deltas end here");
        }
        Ok(Some(snapshot))
    }

    async fn save_definition(&self, definition: &Definition) -> Result<String, StoreError> {
        let hash = definition.hash();
        lock(&self.definitions)
            .entry(hash.clone())
            .or_insert_with(|| definition.clone());
        Ok(hash)
    }

    async fn load_definition(&self, hash: &str) -> Result<Option<Definition>, StoreError> {
        Ok(lock(&self.definitions).get(hash).cloned())
    }

    async fn list_runs(&self) -> Result<Vec<RunId>, StoreError> {
        Ok(lock(&self.runs).keys().copied().collect())
    }

    async fn delete_run(&self, run_id: RunId) -> Result<(), StoreError> {
        let mut runs = lock(&self.runs);
        let run = runs.get(&run_id).ok_or(StoreError::NotFound(run_id))?;
        if run.state().locked {
            return Err(locked_here(run_id));
        }
        runs.remove(&run_id);
        Ok(())
    }

    /// Gathers the whole run first, then inserts it in one step.
    async fn import_run(
        &self,
        run_id: RunId,
        mut events: EventBatches,
        snapshot: Option<RunSnapshot>,
    ) -> Result<(), StoreError> {
        if lock(&self.runs).contains_key(&run_id) {
            return Err(StoreError::Conflict(format!("run {run_id} already exists")));
        }
        let mut log = Vec::new();
        while let Some(batch) = events.next().await {
            let batch = batch?;
            check_continuation(run_id, log.len() as u64, &batch)?;
            log.extend(batch);
        }
        let run = MemRun::default();
        {
            let mut state = run.state();
            state.events = log;
            state.snapshot = snapshot;
        }
        let mut runs = lock(&self.runs);
        if runs.contains_key(&run_id) {
            return Err(StoreError::Conflict(format!("run {run_id} already exists")));
        }
        runs.insert(run_id, Arc::new(run));
        Ok(())
    }
}

/// The store conformance suite against the memory store.
#[cfg(test)]
mod conformance {
    use std::sync::Arc;

    use application::ports::RunStore;
    use application::testing::store_conformance::StoreHarness;
    use domain::RunId;

    use super::MemoryRunStore;

    /// The storage of a memory store is the store itself: there is no other
    /// instance on it, and nothing stored is encoded, so nothing can tear or
    /// rot. The plain store (`measuring` false) weighs no append.
    struct Memory<const MEASURING: bool>(Arc<MemoryRunStore>);

    impl<const MEASURING: bool> StoreHarness for Memory<MEASURING> {
        fn new() -> Self {
            Self(Arc::new(if MEASURING {
                MemoryRunStore::measuring()
            } else {
                MemoryRunStore::new()
            }))
        }
        fn store(&self) -> Arc<dyn RunStore> {
            self.0.clone()
        }
        fn another(&self) -> Option<Arc<dyn RunStore>> {
            None
        }
        fn tear_tail(&self, _run: RunId) -> bool {
            false
        }
        fn corrupt_event(&self, _run: RunId, _offset: u64) -> bool {
            false
        }
        fn bad_event_place(&self, _run: RunId, _offset: u64) -> String {
            String::new()
        }
        fn weighs_appends(&self) -> bool {
            MEASURING
        }
    }

    mod plain {
        use super::Memory;
        application::store_conformance!(Memory<false>);
    }

    mod measuring {
        use super::Memory;
        application::store_conformance!(Memory<true>);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use application::ports::RunStore;
    use domain::{EventKind, Offset, RunId, RuntimeEvent, Timestamp};

    use super::MemoryRunStore;

    fn warning(run_id: RunId, offset: u64) -> RuntimeEvent {
        RuntimeEvent {
            id: format!("e{offset}"),
            offset: Offset::new(offset).unwrap(),
            timestamp: Timestamp::from_millis(0),
            run_id,
            node_id: None,
            node_run_id: None,
            kind: EventKind::Warning {
                message: "a \"quoted\" word".into(),
                details: None,
            },
            extra: Default::default(),
        }
    }

    #[tokio::test]
    async fn an_append_is_weighed_only_by_a_measuring_store() {
        let run = RunId::new(uuid::Uuid::new_v4()).unwrap();
        let events = [warning(run, 1), warning(run, 2)];
        let mut line = Vec::new();
        events[0].write_json(&mut line).unwrap();
        let lines = 2 * (line.len() as u64 + 1);

        let plain = MemoryRunStore::new();
        let _lock = plain.create_run(run).await.unwrap();
        assert_eq!(plain.append(run, &events).await.unwrap(), 0);
        assert_eq!(plain.read(run, 0, 10).await.unwrap(), events);

        let measuring = MemoryRunStore::measuring();
        let _lock = measuring.create_run(run).await.unwrap();
        assert_eq!(measuring.append(run, &events).await.unwrap(), lines);
        assert_eq!(measuring.read(run, 0, 10).await.unwrap(), events);
    }
}

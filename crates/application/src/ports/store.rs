//! [`RunStore`]: runs, their append-only event logs, and their snapshots.
//!
//! Contract every implementation meets (checked by one conformance suite,
//! `crate::testing::store_conformance`, which every store's tests run):
//! - one writer per run: [`RunStore::create_run`] and [`RunStore::lock`]
//!   hand out the run's [`RunLock`], at most one at a time across every
//!   store instance and process sharing the storage; `append` and
//!   `save_snapshot` on a run whose lock this store instance does not hold
//!   are refused with [`StoreError::Locked`] and write nothing. Dropping the
//!   lock releases it (so does the end of the process holding it): at once
//!   for this instance, and for others once [`RunLock::release`] returns.
//!   Reading and following need no lock;
//! - `has_writer` tells whether anyone (this store instance included) holds
//!   the run's lock now, without taking it from a writer or making a
//!   concurrent `lock` fail: a run whose log is not over and has no writer
//!   was interrupted. A writer appends before it releases, so once
//!   `has_writer` said false, the log holds everything that writer wrote;
//! - offsets of a run are 1..n with no gaps; `append` refuses any other
//!   offset with [`StoreError::Conflict`];
//! - an appended event is readable by `read` and `follow` at once;
//! - `read(after)` costs the same wherever `after` lies;
//! - `follow` yields history after `after`, then live events, and ends after
//!   the run's terminal event; a bad line is yielded as
//!   [`StoreError::BadEvent`] in its place and the stream goes on;
//! - `flush` makes everything appended so far durable, as the store's sync
//!   policy defines durable;
//! - a run appears whole and goes whole: [`RunStore::import_run`] and
//!   [`RunStore::delete_run`] are all-or-nothing for readers (`list_runs`,
//!   `read`, `load_snapshot`), even across a crash, so no reader ever takes
//!   a partly copied or partly deleted run for a valid one;
//! - a definition saved is loaded back equal, by its hash, by every
//!   instance; saving it again is harmless.

use async_trait::async_trait;
use domain::definition::Definition;
use domain::snapshot::SnapshotDelta;
use domain::{RunId, RunSnapshot, RuntimeEvent};
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use tokio_util::sync::CancellationToken;

use super::run_query::{EventFilter, RunQuery, RunSummary, scan_events, scan_runs};

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// No such run.
    #[error("run {0} not found")]
    NotFound(RunId),
    /// The run exists already, or an append does not continue the log.
    #[error("conflict: {0}")]
    Conflict(String),
    /// Stored data cannot be read (names the file/row and what is wrong).
    #[error("corrupt store data: {0}")]
    Corrupt(String),
    /// The event at `offset` cannot be read, or is not the event that belongs
    /// there (another offset, another run); `detail` names the file and line.
    /// The events before it are intact, and a reader that may skip (a log
    /// viewer) can go on after it; a fold must not.
    #[error("corrupt store data: {detail}")]
    BadEvent {
        /// The position of the bad line (line `k` holds offset `k`).
        offset: u64,
        /// What is wrong, naming the file and line.
        detail: String,
    },
    /// Another writer holds the run's lock, or this store does not hold
    /// it; the message names the run and says which.
    #[error("{0}")]
    Locked(String),
    /// This writer held the run's lock and lost it: another writer took
    /// the run over (this one was stopped or cut off past its lease). It
    /// writes nothing more, and its run must stop at once
    /// ([`RunLock::lost`] says so before a write finds out). The message
    /// names the run.
    #[error("{0}")]
    LeaseLost(String),
    /// The medium failed. `cause` is the underlying error when there is
    /// one, so a caller can branch on its kind ([`StoreError::io_kind`]).
    /// Its text is in the message, since many print only the message; so it
    /// is not also the error's `source()`, or a report of the cause chain
    /// (`awr`'s own) would say it twice.
    #[error("storage I/O error: {context}{}", suffix(.cause))]
    Io {
        /// What was being done, naming the file or run.
        context: String,
        /// The failure of the medium, if one caused this.
        cause: Option<std::io::Error>,
    },
}

/// `: <cause>` when there is one, for the message of [`StoreError::Io`].
fn suffix(cause: &Option<std::io::Error>) -> String {
    cause.as_ref().map(|e| format!(": {e}")).unwrap_or_default()
}

impl StoreError {
    /// The medium failed doing `context` (e.g. `cannot write <path>`) with
    /// `cause`.
    pub fn io(context: impl Into<String>, cause: std::io::Error) -> Self {
        Self::Io {
            context: context.into(),
            cause: Some(cause),
        }
    }

    /// The medium is unusable with no underlying error at hand (a poisoned
    /// lock, an earlier failure that stays): `context` says why.
    pub fn io_msg(context: impl Into<String>) -> Self {
        Self::Io {
            context: context.into(),
            cause: None,
        }
    }

    /// The kind of the underlying I/O failure, if this is an
    /// [`StoreError::Io`] with a cause: the way a caller tells a full disk
    /// ([`std::io::ErrorKind::StorageFull`]) from a refused permission and
    /// the like, rather than parsing the message.
    pub fn io_kind(&self) -> Option<std::io::ErrorKind> {
        match self {
            Self::Io {
                cause: Some(cause), ..
            } => Some(cause.kind()),
            _ => None,
        }
    }
}

/// `definition` read back from under `hash` (`place` names where, for the
/// error), checked to be the one `hash` names: what every store's
/// [`RunStore::load_definition`] returns.
pub fn definition_at(hash: &str, json: &[u8], place: &str) -> Result<Definition, StoreError> {
    let definition = Definition::from_json(json)
        .map_err(|e| StoreError::Corrupt(format!("{place}: not a workflow definition: {e}")))?;
    if definition.hash() != hash {
        return Err(StoreError::Corrupt(format!(
            "{place}: holds definition {}, not {hash}",
            definition.hash()
        )));
    }
    Ok(definition)
}

/// The exclusive right to write one run, from [`RunStore::create_run`] or
/// [`RunStore::lock`]. Dropping it releases the run: at once for the store
/// instance that holds it, and for other instances as soon as the store can
/// tell them (a store on a server releases in the background, and a writer
/// that dies is known dead without it). [`RunLock::release`] returns only
/// once every instance sees the run released.
#[must_use = "the run is unlocked as soon as its lock is dropped"]
pub struct RunLock {
    run_id: RunId,
    /// The store's hold on the run (a locked file, a lease); its `Drop`
    /// releases the run.
    _held: Box<dyn Send + Sync>,
    /// Releases the run everywhere, for stores whose `Drop` cannot wait.
    release: Option<Release>,
    /// Fired by the store when it learns the lock was lost.
    lost: Option<CancellationToken>,
    /// The lease epoch it was taken under, for a store that fences writes
    /// by it.
    epoch: Option<i64>,
}

/// What [`RunLock::release`] awaits.
type Release = Box<dyn FnOnce() -> BoxFuture<'static, ()> + Send + Sync>;

impl RunLock {
    /// The lock of `run_id`, released when `held` is dropped: for stores.
    pub fn new(run_id: RunId, held: impl Send + Sync + 'static) -> Self {
        Self {
            run_id,
            _held: Box::new(held),
            release: None,
            lost: None,
            epoch: None,
        }
    }

    /// The lock of `run_id` whose release others see only once `release`
    /// has run: for stores on a server. `held` is dropped after it, and its
    /// `Drop` releases in the background a lock dropped without
    /// [`RunLock::release`].
    pub fn with_release(
        run_id: RunId,
        held: impl Send + Sync + 'static,
        release: impl FnOnce() -> BoxFuture<'static, ()> + Send + Sync + 'static,
    ) -> Self {
        Self {
            run_id,
            _held: Box::new(held),
            release: Some(Box::new(release)),
            lost: None,
            epoch: None,
        }
    }

    /// The lock, with `lost` fired by the store when it learns another
    /// writer took the run over (a heartbeat that finds the lease gone):
    /// for stores whose locks can be lost.
    pub fn losable(mut self, lost: CancellationToken) -> Self {
        self.lost = Some(lost);
        self
    }

    /// The lock, taken under lease epoch `epoch`: for stores that fence
    /// every write by the epoch of its writer's lease, so that what else
    /// the writer opens (its transcript) writes under the same one.
    pub fn fenced(mut self, epoch: i64) -> Self {
        self.epoch = Some(epoch);
        self
    }

    /// The lease epoch the lock was taken under, if its store fences by one.
    pub fn epoch(&self) -> Option<i64> {
        self.epoch
    }

    /// Completes when the store learns the lock was lost (never, for a
    /// store whose locks cannot be): the run's writer stops at once, and
    /// its agents with it, since nothing they do can be recorded.
    pub async fn lost(&self) {
        match &self.lost {
            Some(lost) => lost.cancelled().await,
            None => std::future::pending().await,
        }
    }

    /// The locked run.
    pub fn run_id(&self) -> RunId {
        self.run_id
    }

    /// Releases the run and returns once every store instance sees it free:
    /// what a writer that hands the run on (to a resume, to another
    /// process) does rather than drop it.
    pub async fn release(mut self) {
        if let Some(release) = self.release.take() {
            release().await;
        }
    }
}

impl std::fmt::Debug for RunLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunLock")
            .field("run_id", &self.run_id)
            .finish_non_exhaustive()
    }
}

/// Events as they arrive, for followers.
pub type EventStream = BoxStream<'static, Result<RuntimeEvent, StoreError>>;

/// A whole log in order, in batches, for [`RunStore::import_run`].
pub type EventBatches = BoxStream<'static, Result<Vec<RuntimeEvent>, StoreError>>;

/// Durable storage of runs.
///
/// The contract in use, on awr-infrastructure's memory store (a store of
/// your own proves it with the conformance suite, `testing::store_conformance`):
///
/// ```
/// # extern crate domain as awr_domain;
/// use awr_application::ports::{RunStore, StoreError};
/// use awr_domain::{EventKind, Offset, RunId, RuntimeEvent, Timestamp};
/// use awr_infrastructure::store::MemoryRunStore;
///
/// /// A warning at `offset` of `run`.
/// fn warning(run: RunId, offset: u64) -> RuntimeEvent {
///     RuntimeEvent {
///         id: format!("event-{offset}"),
///         offset: Offset::new(offset).expect("offsets start at 1"),
///         timestamp: Timestamp::from_millis(1_767_225_600_000),
///         run_id: run,
///         node_id: None,
///         node_run_id: None,
///         kind: EventKind::Warning { message: "hello".into(), details: None },
///         extra: Default::default(),
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = MemoryRunStore::new();
/// let run: RunId = "00000000-0000-4000-8000-000000000001".parse()?;
/// let lock = store.create_run(run).await?; // one writer per run: its lock
/// assert!(matches!(store.lock(run).await, Err(StoreError::Locked(_))));
/// store.append(run, &[warning(run, 1), warning(run, 2)]).await?;
/// // Offsets continue the log exactly: no gap, nothing overwritten.
/// let gap = store.append(run, &[warning(run, 4)]).await;
/// assert!(matches!(gap, Err(StoreError::Conflict(_))), "{gap:?}");
/// assert_eq!(store.last_offset(run).await?, 2);
/// assert_eq!(store.read(run, 1, 100).await?, [warning(run, 2)]);
/// drop(lock); // the run is free for another writer
/// assert!(store.lock(run).await.is_ok());
/// # Ok(())
/// # }
/// ```
#[cfg_attr(all(any(test, feature = "testing"), not(doctest)), mockall::automock)]
#[async_trait]
pub trait RunStore: Send + Sync + 'static {
    /// Registers a new run and locks it for the caller, in one step, so no
    /// other writer can come first. `Conflict` if it exists.
    async fn create_run(&self, run_id: RunId) -> Result<RunLock, StoreError>;

    /// Takes the exclusive lock of an existing run, without waiting:
    /// [`StoreError::Locked`] when another store instance or process holds
    /// it, or this store already does; `NotFound` for no such run.
    async fn lock(&self, run_id: RunId) -> Result<RunLock, StoreError>;

    /// Whether any store instance or process (this one included) holds the
    /// run's lock right now. A probe: it never disturbs a writer, nor makes a
    /// concurrent [`RunStore::lock`] fail. `NotFound` for no such run.
    async fn has_writer(&self, run_id: RunId) -> Result<bool, StoreError>;

    /// Appends events whose offsets continue the log exactly (last + 1, ...),
    /// and returns their size as the store encodes them (JSON lines, before
    /// any large value is moved aside): the recorder weighs the log's growth
    /// against the size of the last snapshot to decide when the next is due.
    /// A store that encodes nothing (one in memory) may return 0: a
    /// snapshot is then due only under a policy whose floor is 0 bytes,
    /// and a read folds the log.
    /// [`StoreError::Locked`] unless this store holds the run's lock.
    async fn append(&self, run_id: RunId, events: &[RuntimeEvent]) -> Result<u64, StoreError>;

    /// [`RunStore::append`], handing the events over: a store that keeps
    /// events as they are (one in memory) moves them instead of copying
    /// each, and the writer, who no longer needs them, drops none. On
    /// success `events` is left empty (its capacity kept, for the writer's
    /// next batch); on an error, as it was. The default appends a borrow.
    async fn append_owned(
        &self,
        run_id: RunId,
        events: &mut Vec<RuntimeEvent>,
    ) -> Result<u64, StoreError> {
        let bytes = self.append(run_id, events).await?;
        events.clear();
        Ok(bytes)
    }

    /// Makes what was appended durable per the store's sync policy (called at step boundaries).
    async fn flush(&self, run_id: RunId) -> Result<(), StoreError>;

    /// Up to `limit` events with offset greater than `after`, in order. May
    /// return fewer than `limit` (a store bounds the bytes of one batch);
    /// only an empty batch means there is nothing after `after`. A line that
    /// is not the event of its position is [`StoreError::BadEvent`].
    async fn read(
        &self,
        run_id: RunId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<RuntimeEvent>, StoreError>;

    /// Offset of the last event (0 for none).
    async fn last_offset(&self, run_id: RunId) -> Result<u64, StoreError>;

    /// Events after `after`, then live ones; ends after the terminal event.
    /// A [`StoreError::BadEvent`] takes the place of its line and the stream
    /// goes on after it; any other error ends the stream.
    async fn follow(&self, run_id: RunId, after: u64) -> Result<EventStream, StoreError>;

    /// Replaces the run's snapshot atomically, and returns its size as
    /// encoded (measured as [`RunStore::append`] measures events).
    /// [`StoreError::Locked`] unless this store holds the run's lock.
    async fn save_snapshot(&self, snapshot: &RunSnapshot) -> Result<u64, StoreError>;

    /// Keeps `delta` after the run's snapshot and the deltas saved since
    /// it, so [`RunStore::load_snapshot`] returns the state at the delta's
    /// offset without the state being rewritten whole (each delta carries
    /// only what changed). Returns its size as encoded, or `None` when this
    /// store keeps no deltas (the default: the state then loads from the
    /// last snapshot and folds a longer tail). [`RunStore::save_snapshot`]
    /// replaces the deltas with the snapshot. Like a snapshot, a delta is a
    /// cache of the log: one the store cannot read back, or that does not
    /// continue the state before it, is left out of the load, and the log
    /// after the state it reaches is folded instead.
    /// [`StoreError::Locked`] unless this store holds the run's lock.
    async fn save_snapshot_delta(&self, delta: &SnapshotDelta) -> Result<Option<u64>, StoreError> {
        let _ = delta;
        Ok(None)
    }

    /// Whether a run that stops leaves a snapshot even when the amortized
    /// rule ([`crate::CheckpointPolicy`]) asks for none: yes (the default)
    /// for a store whose rows take a run's status and deadlines from its
    /// snapshots. A store that reads them from the log says no, and a
    /// short run then writes no snapshot at all: its readers fold the tail,
    /// which the rule keeps short.
    fn needs_final_snapshot(&self) -> bool {
        true
    }

    /// The last saved snapshot, if any, with the deltas saved after it applied.
    async fn load_snapshot(&self, run_id: RunId) -> Result<Option<RunSnapshot>, StoreError>;

    /// Keeps `definition` (a workflow's files) under its hash, which it
    /// returns, for the runs whose `flow:started` names it. Content
    /// addressed: saving it again changes nothing, and runs of one
    /// definition share it. Needs no run's lock.
    async fn save_definition(&self, definition: &Definition) -> Result<String, StoreError>;

    /// The definition stored under `hash`, if any; `Corrupt` when what is
    /// stored there is not that definition.
    async fn load_definition(&self, hash: &str) -> Result<Option<Definition>, StoreError>;

    /// What `run_id` was submitted with, while it is queued: submitted to
    /// a [`RunQueue`](super::RunQueue) and not started yet. `None` for any
    /// other run, and from a store that keeps no queue (the default).
    async fn queued(&self, run_id: RunId) -> Result<Option<super::Submission>, StoreError> {
        let _ = run_id;
        Ok(None)
    }

    /// Every run, in no particular order.
    async fn list_runs(&self) -> Result<Vec<RunId>, StoreError>;

    /// The runs `query` selects, newest first (see [`RunQuery`]). The
    /// default reads every run ([`scan_runs`]); a store with an index of
    /// runs answers from it.
    async fn query_runs(&self, query: &RunQuery) -> Result<Vec<RunSummary>, StoreError> {
        scan_runs(self, query).await
    }

    /// Up to `limit` events of the run with offset greater than `after` that
    /// `filter` lets through, in order; only an empty batch means there are
    /// no more. Matches before a bad line come first; a batch that would
    /// start with one is [`StoreError::BadEvent`] (the caller may go on
    /// after its offset). The default reads every event after `after`
    /// ([`scan_events`]); a store with an index of events answers from it.
    async fn read_matching(
        &self,
        run_id: RunId,
        after: u64,
        filter: &EventFilter,
        limit: usize,
    ) -> Result<Vec<RuntimeEvent>, StoreError> {
        scan_events(self, run_id, after, filter, limit).await
    }
    /// Deletes the run whole: log, snapshot and everything the store keeps
    /// for it. Refused with [`StoreError::Locked`] while anyone holds the
    /// run's lock (it takes the lock itself, so no writer can start
    /// meanwhile); `NotFound` for no such run. Crash-safe: at any point
    /// readers see the run whole or not at all. What is kept outside the
    /// store (transcripts, control sockets) is the caller's to remove, after.
    async fn delete_run(&self, run_id: RunId) -> Result<(), StoreError>;

    /// Creates `run_id` from a whole run (its log, in order from offset 1,
    /// and its snapshot) copied from another store, stored exactly as
    /// `append` and `save_snapshot` would store them. Readers see nothing of
    /// it until it is complete, and a crash or error midway leaves nothing
    /// that reads as a run. `Conflict` if the run exists; a log that does
    /// not run 1..n is refused as `append` refuses it.
    async fn import_run(
        &self,
        run_id: RunId,
        events: EventBatches,
        snapshot: Option<RunSnapshot>,
    ) -> Result<(), StoreError>;
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;
    use std::io;

    use super::StoreError;

    /// The cause is in the message once: not also the `source()`, which a
    /// report of the chain would print again.
    #[test]
    fn an_io_error_keeps_its_cause_and_says_it_once() {
        let e = StoreError::io("cannot write x", io::Error::from_raw_os_error(28));
        assert_eq!(e.io_kind(), Some(io::ErrorKind::StorageFull));
        let text = e.to_string();
        assert!(
            text.starts_with("storage I/O error: cannot write x: "),
            "{text}"
        );
        assert!(e.source().is_none());
        let bare = StoreError::io_msg("x");
        assert_eq!(bare.to_string(), "storage I/O error: x");
        assert_eq!(bare.io_kind(), None);
    }
}

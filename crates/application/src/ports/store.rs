//! [`RunStore`]: runs, their append-only event logs, and their snapshots.
//!
//! Contract every implementation meets (checked by one conformance suite):
//! - offsets of a run are 1..n with no gaps; `append` refuses any other
//!   offset with [`StoreError::Conflict`] (this also stops two writers);
//! - an appended event is readable by `read` and `follow` at once;
//! - `read(after)` costs the same wherever `after` lies;
//! - `follow` yields history after `after`, then live events, and ends after
//!   the run's terminal event; a bad line is yielded as
//!   [`StoreError::BadEvent`] in its place and the stream goes on;
//! - `flush` makes everything appended so far durable, as the store's sync
//!   policy defines durable.

use async_trait::async_trait;
use domain::{RunId, RunSnapshot, RuntimeEvent};
use futures::stream::BoxStream;

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
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
    /// The medium failed.
    #[error("storage I/O error: {0}")]
    Io(String),
}

/// Events as they arrive, for followers.
pub type EventStream = BoxStream<'static, Result<RuntimeEvent, StoreError>>;

/// Durable storage of runs.
#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait RunStore: Send + Sync + 'static {
    /// Registers a new run. `Conflict` if it exists.
    async fn create_run(&self, run_id: RunId) -> Result<(), StoreError>;

    /// Appends events whose offsets continue the log exactly (last + 1, ...).
    async fn append(&self, run_id: RunId, events: &[RuntimeEvent]) -> Result<(), StoreError>;

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

    /// Replaces the run's snapshot atomically.
    async fn save_snapshot(&self, snapshot: &RunSnapshot) -> Result<(), StoreError>;

    /// The last saved snapshot, if any.
    async fn load_snapshot(&self, run_id: RunId) -> Result<Option<RunSnapshot>, StoreError>;

    /// Every run, in no particular order.
    async fn list_runs(&self) -> Result<Vec<RunId>, StoreError>;
}

//! Run stores: implementations of [`application::ports::RunStore`].
//!
//! Every store shares `follow_log`, the one implementation of `follow`:
//! read history in bounded batches, then wait for a wake-up (an in-process
//! append) or, for logs another process may extend, a poll tick; and the
//! wording of their errors (a conflict, a lock held elsewhere).

mod file;
mod memory;
mod postgres;
mod row;
mod sqlite;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use application::ports::{EventStream, StoreError};
use domain::RuntimeEvent;
use futures::StreamExt;
use tokio::sync::Notify;

pub use file::{FileRunStore, FileStoreConfig, SyncCounts, SyncPolicy};
pub use memory::MemoryRunStore;
pub use postgres::{
    PG_SCHEMA_VERSION, PgControl, PgControlOn, PgDatabase, PgOpenError, PgRunStore, PgStoreConfig,
    PgTranscripts, PgTranscriptsOn,
};
pub use sqlite::{SCHEMA_VERSION, SqliteOpenError, SqliteRunStore, SqliteStoreConfig};

/// Events a follower reads per batch: large enough that catching up on a
/// long history costs few store calls, small enough that a follower never
/// holds more than a few hundred kilobytes of events.
const FOLLOW_BATCH: usize = 256;

/// One run's log as `follow_log` sees it.
pub(crate) trait LogSource: Send + Sync + 'static {
    /// Up to `limit` events after `after`, in order (the store's `read`).
    fn read_after(
        &self,
        after: u64,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<RuntimeEvent>, StoreError>> + Send;

    /// Offset of the last stored event (0 for none).
    fn last(&self) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Woken (with `notify_waiters`) after every append made in this process.
    fn changed(&self) -> &Notify;

    /// How often to look for appends made by another process; `None` when
    /// only this process can write (the memory store).
    fn poll_interval(&self) -> Option<Duration>;
}

/// Where a follower is.
struct Follower<S> {
    source: Arc<S>,
    /// Offset of the last event yielded (or the caller's `after`).
    after: u64,
    /// Events read but not yet yielded (at most [`FOLLOW_BATCH`]).
    pending: VecDeque<RuntimeEvent>,
    /// Whether we already checked if the run ended at or before `after`.
    checked_end: bool,
    /// Set after the terminal event or an error: the stream is over.
    done: bool,
}

/// `follow` for any [`LogSource`]: history after `after`, then live events,
/// ending after the terminal event (or at once when the run already ended at
/// or before `after`). A line that is not its event
/// ([`StoreError::BadEvent`]) is yielded in its place, after the good events
/// before it, and the stream goes on after it, as `awr events` reads a log;
/// any other error is yielded once and ends the stream.
pub(crate) fn follow_log<S: LogSource>(source: Arc<S>, after: u64) -> EventStream {
    let follower = Follower {
        source,
        after,
        pending: VecDeque::new(),
        checked_end: false,
        done: false,
    };
    futures::stream::unfold(follower, next_event).boxed()
}

async fn next_event<S: LogSource>(
    mut f: Follower<S>,
) -> Option<(Result<RuntimeEvent, StoreError>, Follower<S>)> {
    loop {
        if f.done {
            return None;
        }
        if let Some(event) = f.pending.pop_front() {
            f.after = event.offset.get();
            f.done = event.kind.is_terminal();
            return Some((Ok(event), f));
        }
        let source = Arc::clone(&f.source);
        // Registered before reading, so an append that lands between the read
        // and the wait still wakes us (notify_waiters only wakes registered waiters).
        let notified = source.changed().notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        match source.read_after(f.after, FOLLOW_BATCH).await {
            Ok(batch) if !batch.is_empty() => {
                f.pending.extend(batch);
                continue;
            }
            Ok(_) => {}
            Err(StoreError::BadEvent { offset, detail }) => {
                // The good events before the bad line come first, in order.
                if offset > f.after + 1 {
                    let before = usize::try_from(offset - f.after - 1)
                        .unwrap_or(FOLLOW_BATCH)
                        .min(FOLLOW_BATCH);
                    match source.read_after(f.after, before).await {
                        Ok(batch) if !batch.is_empty() => {
                            f.pending.extend(batch);
                            continue;
                        }
                        Ok(_) => {}
                        Err(e) => {
                            f.done = true;
                            return Some((Err(e), f));
                        }
                    }
                }
                f.after = f.after.max(offset);
                return Some((Err(StoreError::BadEvent { offset, detail }), f));
            }
            Err(e) => {
                f.done = true;
                return Some((Err(e), f));
            }
        }
        if !f.checked_end {
            f.checked_end = true;
            match ended_at_or_before(&*source, f.after).await {
                Ok(true) => return None,
                Ok(false) => {}
                Err(e) => {
                    f.done = true;
                    return Some((Err(e), f));
                }
            }
        }
        match source.poll_interval() {
            Some(every) => {
                tokio::select! {
                    () = &mut notified => {}
                    () = tokio::time::sleep(every) => {}
                }
            }
            None => notified.await,
        }
    }
}

/// Whether the log's last event is terminal and at or before `after`: then a
/// follower starting at `after` would wait forever.
async fn ended_at_or_before<S: LogSource>(source: &S, after: u64) -> Result<bool, StoreError> {
    let last = source.last().await?;
    if last == 0 || last > after {
        return Ok(false);
    }
    let tail = source.read_after(last - 1, 1).await?;
    Ok(tail.first().is_some_and(|e| e.kind.is_terminal()))
}

/// [`StoreError::Locked`] for a lock another store instance or process holds.
pub(crate) fn locked_elsewhere(run_id: domain::RunId) -> StoreError {
    StoreError::Locked(format!(
        "run {run_id} is locked: another process is writing it"
    ))
}

/// [`StoreError::Locked`] for a run whose writer, process `pid`, is dead,
/// but whose lock a process it started still holds (see `file::holder`).
pub(crate) fn locked_by_leftover(run_id: domain::RunId, pid: u32) -> StoreError {
    StoreError::Locked(format!(
        "run {run_id} is locked, though its writer (process {pid}) is dead: a process it \
         started still holds its lock; try again once that process has ended"
    ))
}

/// [`StoreError::Locked`] for a second lock of a run this store already holds.
pub(crate) fn locked_here(run_id: domain::RunId) -> StoreError {
    StoreError::Locked(format!(
        "run {run_id} is locked: another writer in this process is writing it"
    ))
}

/// [`StoreError::Locked`] for a write to a run whose lock this store does not hold.
pub(crate) fn not_locked(run_id: domain::RunId) -> StoreError {
    StoreError::Locked(format!(
        "run {run_id} is not locked by this writer: another process may be writing it \
         (a writer takes the run's lock first)"
    ))
}

/// Checks that `events` continue a log whose last offset is `last` and
/// belong to `run_id`; returns the new last offset. Shared so that every
/// store words its conflicts the same way.
pub(crate) fn check_continuation(
    run_id: domain::RunId,
    last: u64,
    events: &[RuntimeEvent],
) -> Result<u64, StoreError> {
    let mut expected = last;
    for event in events {
        expected += 1;
        if event.run_id != run_id {
            return Err(StoreError::Conflict(format!(
                "run {run_id}: event {} belongs to run {}",
                event.id, event.run_id
            )));
        }
        if event.offset.get() != expected {
            return Err(StoreError::Conflict(format!(
                "run {run_id}: expected offset {expected}, got {}",
                event.offset
            )));
        }
    }
    Ok(expected)
}

//! Group commit: the flushers of every run of one store share syncs.
//!
//! A flusher puts its run in the batch being gathered. If no sync is in
//! flight it leads: it takes the batch and syncs it; otherwise it waits for
//! the sync in flight, after which its batch is led by one of its members.
//! A run's flush thus returns only once a sync that began after its last
//! append has completed (design §4.1), and N runs flushing in one window cost
//! one sync, not N.
//!
//! What one sync is, measured on ext4 (see `docs/performance.md`, Store):
//! - a batch of one run whose directory entries are already durable:
//!   `fdatasync` of its log, which waits for nothing but that file;
//! - a batch of one new run: `fdatasync` of its log, then `fsync` of its
//!   directory and of `runs/`, which name it (the log's sync commits the
//!   journal that holds their new entries, so theirs find little to do);
//! - several runs: one `syncfs` of the storage's filesystem, which
//!   costs one to two `fdatasync`s with up to 10 dirty files and ~6 with
//!   100, where `fdatasync` per file costs one each. Its price: it also writes back
//!   whatever else is dirty on that filesystem. Should it fail (or not
//!   exist), each log is synced by itself, so one run never gets another's
//!   error.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use application::ports::StoreError;
use tokio::sync::Notify;

use super::log::io_err;
use super::{RunHandle, lock};

/// Syncs a store issued, by kind: what tests and benchmarks count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SyncCounts {
    /// `fdatasync` of a run's log.
    pub fdatasync: u64,
    /// `syncfs` of the storage's filesystem.
    pub syncfs: u64,
    /// `fsync` of a directory that names a new run (its own, and `runs/`).
    pub dirs: u64,
}

impl SyncCounts {
    /// Syncs of any kind.
    pub fn total(&self) -> u64 {
        self.fdatasync + self.syncfs + self.dirs
    }

    /// Syncs of logs, one by one or by the filesystem: what the step
    /// boundaries cost, besides the directories of new runs.
    pub fn logs(&self) -> u64 {
        self.fdatasync + self.syncfs
    }
}

/// The syncing side of one store, shared by its runs.
#[derive(Debug)]
pub(super) struct GroupSync {
    /// `<root>/runs`: what `syncfs` is called on.
    runs_dir: PathBuf,
    state: Mutex<Gathering>,
    /// Woken (`notify_waiters`) when a leader is done.
    done: Notify,
    fdatasyncs: AtomicU64,
    syncfs: AtomicU64,
    dir_syncs: AtomicU64,
}

#[derive(Debug, Default)]
struct Gathering {
    /// Runs waiting for the next sync.
    pending: Vec<Arc<RunHandle>>,
    /// Number of the batch being gathered (the first is 1).
    batch: u64,
    /// Number of the last batch whose sync has completed.
    finished: u64,
    /// Whether a leader is gathering or syncing a batch.
    leading: bool,
}

/// One run of a batch, as its leader found it.
pub(super) struct Member {
    pub handle: Arc<RunHandle>,
    pub file: Arc<File>,
    /// The run's last offset when the batch was taken: durable once synced.
    pub upto: u64,
    /// Whether the run's directory entries are to be made durable too.
    pub dirs: bool,
}

impl Member {
    /// Records that the member's sync succeeded. Directory entries are
    /// marked durable only now: a concurrent flush must not take them as
    /// done while the sync is in flight.
    pub(super) fn synced(&self) {
        let run = &self.handle.sync;
        run.synced.fetch_max(self.upto, Ordering::AcqRel);
        if self.dirs {
            run.dir_unsynced.store(false, Ordering::Release);
        }
    }
}

/// Per-run state the group keeps on each [`RunHandle`].
#[derive(Debug, Default)]
pub(super) struct RunSync {
    /// Offset up to which the log is known to be synced.
    pub synced: AtomicU64,
    /// Set for runs this process created: their directory entries must be
    /// synced once too, or a machine crash could lose the whole run.
    pub dir_unsynced: AtomicBool,
    /// Whether the run is in `Gathering::pending` (changed under its lock).
    queued: AtomicBool,
    /// The last batch that failed for this run, and why.
    failure: Mutex<Option<(u64, Failure)>>,
}

/// A failed sync, handed to each writer whose batch it was. A
/// [`StoreError`] is not `Clone`, so its text and I/O kind are kept: every
/// writer can still tell a full disk from other failures.
#[derive(Debug)]
struct Failure {
    context: String,
    cause: Option<(io::ErrorKind, String)>,
}

impl Failure {
    fn of(e: &StoreError) -> Self {
        match e {
            StoreError::Io { context, cause } => Self {
                context: context.clone(),
                cause: cause.as_ref().map(|c| (c.kind(), c.to_string())),
            },
            other => Self {
                context: other.to_string(),
                cause: None,
            },
        }
    }

    fn error(&self) -> StoreError {
        match &self.cause {
            Some((kind, text)) => {
                StoreError::io(self.context.clone(), io::Error::new(*kind, text.clone()))
            }
            None => StoreError::io_msg(self.context.clone()),
        }
    }
}

impl RunSync {
    fn covers(&self, target: u64) -> bool {
        self.synced.load(Ordering::Acquire) >= target && !self.dir_unsynced.load(Ordering::Acquire)
    }
}

/// Ends a leader's turn even when its future is dropped mid-way.
struct Turn<'a>(&'a GroupSync);

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        lock(&self.0.state).leading = false;
        self.0.done.notify_waiters();
    }
}

impl GroupSync {
    pub(super) fn new(runs_dir: PathBuf) -> Self {
        Self {
            runs_dir,
            state: Mutex::new(Gathering {
                batch: 1,
                ..Gathering::default()
            }),
            done: Notify::new(),
            fdatasyncs: AtomicU64::new(0),
            syncfs: AtomicU64::new(0),
            dir_syncs: AtomicU64::new(0),
        }
    }

    pub(super) fn counts(&self) -> SyncCounts {
        SyncCounts {
            fdatasync: self.fdatasyncs.load(Ordering::Relaxed),
            syncfs: self.syncfs.load(Ordering::Relaxed),
            dirs: self.dir_syncs.load(Ordering::Relaxed),
        }
    }

    /// Makes the log of `handle` durable up to at least offset `target` (and
    /// its directory entries, if new), by a sync that begins after this call.
    pub(super) async fn sync(
        &self,
        handle: &Arc<RunHandle>,
        target: u64,
    ) -> Result<(), StoreError> {
        let run = &handle.sync;
        if run.covers(target) {
            return Ok(());
        }
        // The batch our run is in, once queued.
        let mut mine: Option<u64> = None;
        loop {
            let mut done = pin!(self.done.notified());
            let lead = {
                let mut state = lock(&self.state);
                if run.covers(target) {
                    return Ok(());
                }
                if let Some(batch) = mine
                    && state.finished >= batch
                {
                    // Our batch is synced and did not cover us: it failed,
                    // or the run was released (and its release synced it).
                    if let Some((failed, why)) = lock(&run.failure).as_ref()
                        && *failed >= batch
                    {
                        return Err(why.error());
                    }
                    if !handle.is_writing() {
                        return Ok(());
                    }
                    mine = None;
                }
                if mine.is_none() {
                    if !run.queued.swap(true, Ordering::AcqRel) {
                        state.pending.push(Arc::clone(handle));
                    }
                    mine = Some(state.batch);
                }
                if state.leading {
                    done.as_mut().enable();
                    false
                } else {
                    state.leading = true;
                    true
                }
            };
            if lead {
                let _turn = Turn(self);
                if on_one_thread() {
                    // Let the tasks that are ready (other runs' writers)
                    // reach their flush and join this batch first: nothing
                    // else runs on this thread while we sync, and a step
                    // whose store calls never wait would sync alone. (On a
                    // multi-thread runtime they run on the other workers
                    // meanwhile and join the next batch.)
                    tokio::task::yield_now().await;
                }
                self.lead();
            } else {
                done.await;
            }
        }
    }

    /// Takes the batch gathered so far and syncs it.
    fn lead(&self) {
        let (batch, handles) = {
            let mut state = lock(&self.state);
            let batch = state.batch;
            state.batch += 1;
            for handle in &state.pending {
                handle.sync.queued.store(false, Ordering::Release);
            }
            (batch, std::mem::take(&mut state.pending))
        };
        let members: Vec<Member> = handles.iter().filter_map(RunHandle::member).collect();
        let results = off_the_runtime(|| self.sync_members(&members));
        for (member, result) in members.iter().zip(results) {
            let run = &member.handle.sync;
            match result {
                Ok(()) => member.synced(),
                Err(e) => *lock(&run.failure) = Some((batch, Failure::of(&e))),
            }
        }
        let mut state = lock(&self.state);
        state.finished = state.finished.max(batch);
    }

    /// Syncs `members` (blocking) and says, for each, whether its log (and
    /// directory entries) are durable now.
    pub(super) fn sync_members(&self, members: &[Member]) -> Vec<Result<(), StoreError>> {
        match members {
            [] => Vec::new(),
            [one] if !one.dirs => vec![self.fdatasync(&one.file, &one.handle.paths.log)],
            // A lone new run (a short run's first step): its log, then the
            // two directories that name it, each of which the log's sync
            // has mostly committed already. A `syncfs` would write back
            // whatever else is dirty on the filesystem too.
            [one] => vec![self.sync_alone(one)],
            _ => match self.sync_filesystem() {
                Ok(()) => members.iter().map(|_| Ok(())).collect(),
                Err(e) => {
                    tracing::warn!(error = %e, "syncfs failed; syncing each run's log by itself");
                    members.iter().map(|m| self.sync_alone(m)).collect()
                }
            },
        }
    }

    /// One `syncfs` of the filesystem holding the runs.
    fn sync_filesystem(&self) -> Result<(), StoreError> {
        self.syncfs.fetch_add(1, Ordering::Relaxed);
        let dir = File::open(&self.runs_dir).map_err(|e| io_err("open", &self.runs_dir, e))?;
        rustix::fs::syncfs(&dir).map_err(|e| io_err("syncfs", &self.runs_dir, e.into()))
    }

    /// A lone new run's sync, and the fallback of a failed `syncfs`: the
    /// run's log, then the directories that name it.
    fn sync_alone(&self, member: &Member) -> Result<(), StoreError> {
        let paths = &member.handle.paths;
        self.fdatasync(&member.file, &paths.log)?;
        if member.dirs {
            for dir in [&paths.dir, &paths.runs_dir] {
                let file = File::open(dir).map_err(|e| io_err("open", dir, e))?;
                self.dir_syncs.fetch_add(1, Ordering::Relaxed);
                file.sync_all().map_err(|e| io_err("sync", dir, e))?;
            }
        }
        Ok(())
    }

    fn fdatasync(&self, file: &File, path: &Path) -> Result<(), StoreError> {
        use std::os::unix::fs::MetadataExt;
        self.fdatasyncs.fetch_add(1, Ordering::Relaxed);
        file.sync_data().map_err(|e| io_err("sync", path, e))?;
        // A file removed under its writer syncs without a fault, to
        // nowhere: what was written since is not on record.
        if file.metadata().is_ok_and(|m| m.nlink() == 0) {
            return Err(StoreError::io_msg(format!(
                "{}: removed while the run was written; what was written to it since is not on record",
                path.display()
            )));
        }
        Ok(())
    }
}

/// Whether the caller runs on a current-thread Tokio runtime.
fn on_one_thread() -> bool {
    use tokio::runtime::{Handle, RuntimeFlavor};
    Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::CurrentThread)
}

/// Runs a short blocking call (a sync, ~0.1-1 ms) on the calling thread.
///
/// A hop to Tokio's blocking pool costs two thread wake-ups, 30-100 µs on
/// this kind of VM: as much as the sync itself. On a multi-thread runtime
/// (servers) `block_in_place` hands this worker's other tasks to the other
/// workers, so they keep running, and gather the next batch, during the
/// sync. On a current-thread runtime the call simply runs inline.
pub(in crate::store) fn off_the_runtime<T>(f: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

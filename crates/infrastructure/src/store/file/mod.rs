//! [`FileRunStore`]: the durable run store, one directory per run (design §4).
//!
//! ```text
//! <root>/runs/<run-id>/events.ndjson   the log: one RuntimeEvent per line, offset k on line k
//! <root>/runs/<run-id>/events.idx      derived: byte position of each line (see `index`), once the log is long
//! <root>/runs/<run-id>/snapshot.json   the state to resume from, replaced by rename
//! <root>/runs/<run-id>/blobs/          values over 64 KiB, stored once (see `crate::blobs`)
//! <root>/runs/<run-id>/snapshot-blobs/ the snapshot's values over 64 KiB (links to `blobs/` when there)
//! ```
//!
//! Why it is shaped this way:
//! - An append is one `write` of whole lines to an `O_APPEND` file, done
//!   inline: a page-cache write takes about a microsecond, less than a hop to
//!   a blocking thread would. Only `fdatasync` goes to `spawn_blocking`.
//! - Durability is a [`SyncPolicy`]. The flushes of all runs of a store
//!   share syncs (group commit, see `sync`): a flush joins the batch that
//!   the next sync covers, so N runs flushing together cost one sync, not N.
//!   A new run's first flush also syncs the two directories that name it
//!   (its own and `runs/`), never the whole filesystem; the snapshot is
//!   never synced (the log is the truth, design §4.2).
//! - Reads seek through an in-memory offset index, so reading at offset 10
//!   and at offset 1,000,000 costs the same; the index is persisted in
//!   batches and re-derived from the log whenever it is missing or in doubt.
//! - A torn last line (a crash mid-write) is ignored by readers and cut off
//!   by the next writer; every complete line is kept. A bad line anywhere
//!   else is reported as corruption, never skipped.
//! - Directories are created 0700 and files 0600: runs hold prompts and
//!   outputs that are private to their user.
//! - One writer per run, enforced: `create_run` and `lock` hand out the
//!   run's `RunLock`, an exclusive `flock` on its `lock` file, and `append`
//!   and `save_snapshot` refuse a run this store does not hold. Others may
//!   read and follow it, and see its appends by polling the file.

mod definitions;
mod follow;
pub(super) mod holder;
mod index;
pub(super) mod lock;
mod log;
mod snapshot;
pub(super) mod sync;
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod sync_tests;
mod whole;

use std::collections::HashMap;
use std::fs::{self, DirBuilder, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use application::ports::{EventBatches, EventStream, RunLock, RunStore, StoreError};
use async_trait::async_trait;
use domain::definition::Definition;
use domain::snapshot::SnapshotDelta;
use domain::{RunId, RunSnapshot, RuntimeEvent};
use tokio::sync::Notify;

use self::lock::WriterSlot;
use self::log::{FILE_MODE, LogState, RunPaths, io_err};
use self::snapshot::{append_delta, blobs_err, read_snapshot, write_snapshot};
pub use self::sync::SyncCounts;
use self::sync::{GroupSync, Member, RunSync, off_the_runtime};
use super::follow_log;

/// Mode of every directory the store creates.
const DIR_MODE: u32 = 0o700;

/// Idle run handles (each holds up to two open files) kept when the cache
/// grows past this; well under the usual limit of 1024 open files.
const HANDLE_CACHE_SOFT_CAP: usize = 256;

/// When appended events become durable against a machine crash.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum SyncPolicy {
    /// A sync inside every `append`: nothing acknowledged is ever lost, at
    /// one sync (~0.1–1.5 ms, shared with other runs appending meanwhile)
    /// per append.
    Always,
    /// A sync in `flush`, which the runner calls at each step boundary: one
    /// sync per step (shared with the runs that flush in the same window),
    /// and a crash loses at most the step in progress, which resume re-runs.
    /// The default.
    #[default]
    StepBoundary,
    /// Never sync: the page cache survives a process crash but not a machine
    /// crash. For tests, benchmarks and throwaway runs.
    Never,
}

/// Settings of a [`FileRunStore`]; a struct so new settings do not change
/// every constructor call.
#[derive(Debug, Clone)]
pub struct FileStoreConfig {
    /// When appends are synced.
    pub sync: SyncPolicy,
    /// How often a follower looks for events appended by another process
    /// (appends in this process wake followers at once). 50 ms keeps a
    /// terminal or HTTP client feeling live at negligible cost.
    pub follow_poll: Duration,
}

impl Default for FileStoreConfig {
    fn default() -> Self {
        Self {
            sync: SyncPolicy::default(),
            follow_poll: Duration::from_millis(50),
        }
    }
}

/// The durable [`RunStore`]: a directory per run under `<root>/runs`.
/// Cloning is cheap and clones share open files, caches and followers.
#[derive(Debug, Clone)]
pub struct FileRunStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    root: PathBuf,
    runs_dir: PathBuf,
    config: FileStoreConfig,
    /// Open runs. A `std` mutex, not a Tokio one: it is held only to look up
    /// or insert a handle, never across an `.await`.
    handles: Mutex<HashMap<RunId, Arc<RunHandle>>>,
    /// Group commit across the store's runs.
    group: Arc<GroupSync>,
    /// Whether what crashed imports and deletions left was swept (see `whole`).
    swept: std::sync::atomic::AtomicBool,
}

/// Everything this process keeps about one run.
#[derive(Debug)]
struct RunHandle {
    paths: RunPaths,
    /// Loaded on first use. A `std` mutex: held for page-cache syscalls
    /// (one `write` per append, index catch-up reads) but never across an
    /// `.await`; reads and syncs clone the file and release it first.
    log: Mutex<Option<LogState>>,
    /// Wakes this process's followers after every append.
    changed: Notify,
    /// How far the log is synced, and the run's place in group commit.
    sync: RunSync,
    /// The store's group commit, shared by all its runs.
    group: Arc<GroupSync>,
    /// Snapshot writes of one run share a temporary file name, so they take
    /// turns; a `std` mutex, held while a snapshot is encoded into that file
    /// and swapped in.
    snapshot_lock: Mutex<()>,
    /// Length of the last snapshot written: the next one's buffer starts
    /// about that large rather than growing from a few KiB by doubling (a
    /// 2.5 MB state was ten reallocations, most of them copies).
    snapshot_len: std::sync::atomic::AtomicUsize,
    /// A snapshot of the run had a value to move to a blob: the next ones
    /// are encoded whole, not streamed (`snapshot::write_snapshot`).
    blobbed: std::sync::atomic::AtomicBool,
    /// Snapshots streamed, for the tests to tell the two ways apart.
    #[cfg(test)]
    streamed: std::sync::atomic::AtomicU64,
    /// `snapshot-deltas.ndjson`, held open once a delta was appended, and
    /// whether it holds lines the next snapshot replaces.
    deltas: Mutex<snapshot::DeltaFile>,
    /// Copied from the store's config for [`LogSource::poll_interval`].
    follow_poll: Duration,
    /// Whether the store's policy syncs at all (not [`SyncPolicy::Never`]).
    durable: bool,
    /// The run's locked `lock` file while this store holds its
    /// [`RunLock`]; writes are refused without it.
    writer: WriterSlot,
}

/// Locks, recovering the data of a poisoned lock: nothing here panics while
/// holding one, and a panic elsewhere must not make the store unusable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl FileRunStore {
    /// A store under `root` with the default [`FileStoreConfig`]
    /// (sync at step boundaries); creates `root/runs` (0700) if needed.
    pub fn open(root: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_with(root, FileStoreConfig::default())
    }

    /// A store over the existing directory `root`, for commands that only
    /// read: creates nothing, and fails with an `Io` error naming `root`,
    /// of kind `NotFound` or `NotADirectory`, when it does not exist or is
    /// not a directory. (Its `runs` directory may be missing: then there
    /// are no runs.)
    pub fn open_existing(root: impl AsRef<Path>) -> Result<Self, StoreError> {
        let root = root.as_ref().to_path_buf();
        match fs::metadata(&root) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                return Err(StoreError::io(
                    format!("storage {}", root.display()),
                    io::Error::new(io::ErrorKind::NotADirectory, "not a directory"),
                ));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(StoreError::io(
                    format!("storage {}", root.display()),
                    io::Error::new(io::ErrorKind::NotFound, "does not exist"),
                ));
            }
            Err(e) => return Err(io_err("open storage", &root, e)),
        }
        Ok(Self::at(root, FileStoreConfig::default()))
    }

    fn at(root: PathBuf, config: FileStoreConfig) -> Self {
        let runs_dir = root.join("runs");
        Self {
            inner: Arc::new(Inner {
                root,
                group: Arc::new(GroupSync::new(runs_dir.clone())),
                runs_dir,
                config,
                handles: Mutex::new(HashMap::new()),
                swept: std::sync::atomic::AtomicBool::new(false),
            }),
        }
    }

    /// A store under `root` with explicit settings.
    pub fn open_with(root: impl AsRef<Path>, config: FileStoreConfig) -> Result<Self, StoreError> {
        let root = root.as_ref().to_path_buf();
        let runs_dir = root.join("runs");
        DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(&runs_dir)
            .map_err(|e| io_err("create", &runs_dir, e))?;
        Ok(Self::at(root, config))
    }

    /// The directory given to [`FileRunStore::open`].
    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    /// Where a run's files are (whether or not it exists), for tools and
    /// messages that point users at them.
    pub fn run_dir(&self, run_id: RunId) -> PathBuf {
        self.inner.runs_dir.join(run_id.to_string())
    }

    /// Syncs this store has issued (every `fdatasync`, `fsync` and
    /// `syncfs`), for tests and benchmarks that count them.
    pub fn syncs(&self) -> SyncCounts {
        self.inner.group.counts()
    }

    /// The policy this store syncs by.
    pub fn sync_policy(&self) -> SyncPolicy {
        self.inner.config.sync
    }
}

impl Inner {
    fn new_handle(&self, run_id: RunId) -> RunHandle {
        let mut paths = RunPaths::new(&self.runs_dir, run_id);
        paths.blobs = paths.blobs.with_sync(self.config.sync != SyncPolicy::Never);
        RunHandle {
            paths,
            log: Mutex::new(None),
            changed: Notify::new(),
            sync: RunSync::default(),
            group: Arc::clone(&self.group),
            snapshot_lock: Mutex::new(()),
            snapshot_len: std::sync::atomic::AtomicUsize::new(0),
            blobbed: std::sync::atomic::AtomicBool::new(false),
            #[cfg(test)]
            streamed: std::sync::atomic::AtomicU64::new(0),
            deltas: Mutex::default(),
            follow_poll: self.config.follow_poll,
            durable: self.config.sync != SyncPolicy::Never,
            writer: WriterSlot::default(),
        }
    }

    /// The cached handle of an existing run, opening it if needed.
    fn handle(&self, run_id: RunId) -> Result<Arc<RunHandle>, StoreError> {
        let mut handles = lock(&self.handles);
        if let Some(handle) = handles.get(&run_id) {
            return Ok(Arc::clone(handle));
        }
        let handle = self.new_handle(run_id);
        match fs::metadata(&handle.paths.dir) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => return Err(StoreError::NotFound(run_id)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(StoreError::NotFound(run_id));
            }
            Err(e) => return Err(io_err("stat", &handle.paths.dir, e)),
        }
        Self::evict_idle(&mut handles);
        let handle = Arc::new(handle);
        handles.insert(run_id, Arc::clone(&handle));
        Ok(handle)
    }

    /// Drops handles nobody is using once the cache is large. A dropped
    /// handle persists its index; reopening it later is always correct.
    fn evict_idle(handles: &mut HashMap<RunId, Arc<RunHandle>>) {
        if handles.len() >= HANDLE_CACHE_SOFT_CAP {
            handles.retain(|_, handle| Arc::strong_count(handle) > 1);
        }
    }
}

impl RunHandle {
    /// Runs `f` on the loaded log, loading it (as reader or writer) first.
    fn with_log<R>(
        &self,
        writable: bool,
        f: impl FnOnce(&mut LogState, &RunPaths) -> Result<R, StoreError>,
    ) -> Result<R, StoreError> {
        let mut slot = lock(&self.log);
        if slot.is_none() {
            *slot = Some(LogState::open(&self.paths, writable)?);
        }
        let Some(state) = slot.as_mut() else {
            return Err(StoreError::io_msg(format!(
                "{}: log state unavailable",
                self.paths.log.display()
            )));
        };
        if writable {
            state.make_writable(&self.paths)?;
        }
        f(state, &self.paths)
    }

    fn read(&self, after: u64, limit: usize) -> Result<Vec<RuntimeEvent>, StoreError> {
        let Some(plan) = self.with_log(false, |log, paths| log.plan_read(paths, after, limit))?
        else {
            return Ok(Vec::new());
        };
        match plan.execute(&self.paths) {
            Err(StoreError::Corrupt(_) | StoreError::BadEvent { .. }) if !plan.trusted => {
                // The index came from events.idx and may be the culprit:
                // re-derive it from the log and read again.
                let plan = self.with_log(false, |log, paths| {
                    log.rebuild_index(paths)?;
                    log.plan_read(paths, after, limit)
                })?;
                match plan {
                    Some(plan) => plan.execute(&self.paths),
                    None => Ok(Vec::new()),
                }
            }
            result => result,
        }
    }

    /// What a leader of group commit syncs for this run: `None` unless this
    /// process writes the run's log now.
    fn member(self: &Arc<Self>) -> Option<Member> {
        let (file, upto) = {
            let slot = lock(&self.log);
            let log = slot.as_ref().filter(|log| log.is_writable())?;
            (log.file(), log.known_last())
        };
        Some(Member {
            handle: Arc::clone(self),
            file,
            upto,
            dirs: self.sync.dir_unsynced.load(Ordering::Acquire),
        })
    }

    /// Whether this process has the run's log open as its writer.
    fn is_writing(&self) -> bool {
        lock(&self.log).as_ref().is_some_and(LogState::is_writable)
    }

    /// Lets go of the snapshot's temporary file (see `snapshot::release`).
    fn release_snapshot(&self) {
        snapshot::release(self);
    }

    /// What a writer that releases the run leaves durable: everything it
    /// appended, as a `flush` would have made it (after the release, this
    /// store's `flush` has nothing of its own to sync). Blocking, and only
    /// when something is left unsynced: a writer usually flushes first.
    fn sync_on_release(self: &Arc<Self>, log: &LogState) {
        let unsynced = self.sync.synced.load(Ordering::Acquire) < log.known_last()
            || self.sync.dir_unsynced.load(Ordering::Acquire);
        if !self.durable || !log.is_writable() || !unsynced {
            return;
        }
        let member = Member {
            handle: Arc::clone(self),
            file: log.file(),
            upto: log.known_last(),
            dirs: self.sync.dir_unsynced.load(Ordering::Acquire),
        };
        let results = off_the_runtime(|| self.group.sync_members(std::slice::from_ref(&member)));
        match results.into_iter().next() {
            Some(Ok(())) => member.synced(),
            Some(Err(e)) => {
                tracing::warn!(run = %self.paths.run_id, error = %e, "cannot sync a released run")
            }
            None => {}
        }
    }
}

fn list_run_dirs(runs_dir: &Path) -> Result<Vec<RunId>, StoreError> {
    let entries = match fs::read_dir(runs_dir) {
        Ok(entries) => entries,
        // A read-only store over storage where no run was made yet.
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err("list", runs_dir, e)),
    };
    let mut runs = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| io_err("list", runs_dir, e))?;
        let Some(run_id) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            runs.push(run_id);
        }
    }
    Ok(runs)
}

#[async_trait]
impl RunStore for FileRunStore {
    async fn create_run(&self, run_id: RunId) -> Result<RunLock, StoreError> {
        let inner = &self.inner;
        let paths = RunPaths::new(&inner.runs_dir, run_id);
        DirBuilder::new()
            .mode(DIR_MODE)
            .create(&paths.dir)
            .map_err(|e| match e.kind() {
                io::ErrorKind::AlreadyExists => {
                    StoreError::Conflict(format!("run {run_id} already exists"))
                }
                _ => io_err("create", &paths.dir, e),
            })?;
        let handle = {
            let mut handles = lock(&inner.handles);
            Inner::evict_idle(&mut handles);
            Arc::clone(
                handles
                    .entry(run_id)
                    .or_insert_with(|| Arc::new(inner.new_handle(run_id))),
            )
        };
        // The log, then its lock: for that instant the run has no events,
        // so no reader shows it, and no other process knows its id yet.
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create_new(true)
            .mode(FILE_MODE)
            .open(&paths.log)
            .map_err(|e| io_err("create", &paths.log, e))?;
        let run_lock = self::lock::take(Arc::clone(&handle))?;
        let state = LogState::created(file, &paths)?;
        handle.sync.dir_unsynced.store(true, Ordering::Release);
        let mut slot = lock(&handle.log);
        if slot.is_none() {
            *slot = Some(state);
        }
        Ok(run_lock)
    }

    async fn lock(&self, run_id: RunId) -> Result<RunLock, StoreError> {
        self::lock::take(self.inner.handle(run_id)?)
    }

    async fn has_writer(&self, run_id: RunId) -> Result<bool, StoreError> {
        self::lock::probe(&self.inner.handle(run_id)?.paths)
    }

    async fn append(&self, run_id: RunId, events: &[RuntimeEvent]) -> Result<u64, StoreError> {
        let handle = self.inner.handle(run_id)?;
        let (last, bytes) = {
            let _held = handle.writer.held(&handle.paths)?;
            handle.with_log(true, |log, paths| log.append(paths, events))?
        };
        if events.is_empty() {
            return Ok(0);
        }
        handle.changed.notify_waiters();
        if self.inner.config.sync == SyncPolicy::Always {
            self.inner.group.sync(&handle, last).await?;
        }
        Ok(bytes)
    }

    async fn flush(&self, run_id: RunId) -> Result<(), StoreError> {
        let handle = self.inner.handle(run_id)?;
        let target = {
            let mut slot = lock(&handle.log);
            match slot.as_mut() {
                // Nothing loaded: nothing was appended by this process.
                None => return Ok(()),
                // Without syncing, flush does nothing at all. (The index is
                // persisted every thousand or so events and on close.)
                Some(_) if self.inner.config.sync == SyncPolicy::Never => return Ok(()),
                // A log this process only reads has nothing of ours to sync.
                Some(log) if !log.is_writable() => return Ok(()),
                // The index is not persisted here: it is derived data (a crash
                // loses nothing the next open cannot re-derive from the log),
                // and writing it would put its file into the sync's journal
                // commit (ext4 data=ordered), costing a third of a sync.
                Some(log) => log.known_last(),
            }
        };
        self.inner.group.sync(&handle, target).await
    }

    async fn read(
        &self,
        run_id: RunId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<RuntimeEvent>, StoreError> {
        self.inner.handle(run_id)?.read(after, limit)
    }

    async fn last_offset(&self, run_id: RunId) -> Result<u64, StoreError> {
        self.inner.handle(run_id)?.last()
    }

    async fn follow(&self, run_id: RunId, after: u64) -> Result<EventStream, StoreError> {
        let handle = self.inner.handle(run_id)?;
        // Open the log now, so an unreadable run fails here rather than in the stream.
        handle.last()?;
        Ok(follow_log(handle, after))
    }

    async fn save_snapshot(&self, snapshot: &RunSnapshot) -> Result<u64, StoreError> {
        let handle = self.inner.handle(snapshot.run_id)?;
        let _held = handle.writer.held(&handle.paths)?;
        write_snapshot(&handle, snapshot)
    }

    async fn save_snapshot_delta(&self, delta: &SnapshotDelta) -> Result<Option<u64>, StoreError> {
        let handle = self.inner.handle(delta.run_id)?;
        let _held = handle.writer.held(&handle.paths)?;
        append_delta(&handle, delta).map(Some)
    }

    /// No: a run's status is read from its log (a short run's whole log,
    /// which the amortized rule keeps short), so a short run makes no
    /// snapshot file.
    fn needs_final_snapshot(&self) -> bool {
        false
    }

    async fn load_snapshot(&self, run_id: RunId) -> Result<Option<RunSnapshot>, StoreError> {
        let handle = self.inner.handle(run_id)?;
        // Deltas reach no further than the log: neither is synced when a
        // delta is written, and a crash may keep one and not the other.
        read_snapshot(&handle.paths, || handle.last().ok())
    }

    async fn save_definition(&self, definition: &Definition) -> Result<String, StoreError> {
        let root = self.inner.root.clone();
        let definition = definition.clone();
        off_the_runtime(move || definitions::save(&root, &definition))
    }

    async fn load_definition(&self, hash: &str) -> Result<Option<Definition>, StoreError> {
        definitions::load(&self.inner.root, hash)
    }

    async fn list_runs(&self) -> Result<Vec<RunId>, StoreError> {
        // What a crashed prune or import left is removed by the next lister.
        self.sweep_once().await;
        let runs_dir = self.inner.runs_dir.clone();
        // A directory of many runs takes a while to list: off the async threads.
        tokio::task::spawn_blocking(move || list_run_dirs(&runs_dir))
            .await
            .map_err(|e| StoreError::io("listing runs did not finish", e.into()))?
    }

    async fn delete_run(&self, run_id: RunId) -> Result<(), StoreError> {
        self.delete_whole(run_id).await
    }

    async fn import_run(
        &self,
        run_id: RunId,
        events: EventBatches,
        snapshot: Option<RunSnapshot>,
    ) -> Result<(), StoreError> {
        self.import_whole(run_id, events, snapshot).await
    }
}

#[cfg(test)]
mod delta_tests;

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::fs::File;
    use std::io::Write;

    use super::*;

    #[test]
    fn a_snapshot_write_that_fails_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("snapshot.json.tmp");
        let tmp = File::create(&path).unwrap();
        let err = snapshot::fill_or_remove(tmp, &path, |tmp| {
            tmp.write_all(b"{\"half")?;
            Err::<(), _>(io::Error::from_raw_os_error(28))
        })
        .unwrap_err();
        assert!(err.to_string().contains("snapshot.json.tmp"), "{err}");
        assert!(!path.exists(), "the half-written file is gone");
    }

    /// The medium's error stays typed: a caller branches on its kind, and
    /// the message still names the file and the cause.
    #[tokio::test]
    async fn a_failed_create_reports_the_kind_of_its_io_error() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileRunStore::open(dir.path()).unwrap();
        // `runs` a regular file: making a run's directory in it is ENOTDIR.
        fs::remove_dir(dir.path().join("runs")).unwrap();
        File::create(dir.path().join("runs")).unwrap();
        let run = RunId::new(uuid::Uuid::new_v4()).unwrap();
        let err = store.create_run(run).await.unwrap_err();
        assert_eq!(err.io_kind(), Some(io::ErrorKind::NotADirectory), "{err:?}");
        let text = err.to_string();
        assert!(text.contains(&run.to_string()), "{text}");
        assert!(text.contains("Not a directory"), "{text}");
    }
    use domain::{EventKind, Offset, Timestamp};

    fn warning(run: RunId, offset: u64) -> RuntimeEvent {
        RuntimeEvent {
            id: format!("e{offset}"),
            offset: Offset::new(offset).unwrap(),
            timestamp: Timestamp::from_millis(0),
            run_id: run,
            node_id: None,
            node_run_id: None,
            kind: EventKind::Warning {
                message: "m".into(),
                details: None,
            },
            extra: Default::default(),
        }
    }

    /// Syncs of logs (a new run's directories are synced besides, once).
    fn syncs(store: &FileRunStore, _run: RunId) -> u64 {
        store.syncs().logs()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn flushes_share_syncs_and_skip_when_nothing_is_new() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileRunStore::open(dir.path()).unwrap();
        let run = RunId::new(uuid::Uuid::new_v4()).unwrap();
        let _lock = store.create_run(run).await.unwrap();
        store.flush(run).await.unwrap();
        assert_eq!(syncs(&store, run), 1, "a new run syncs its log once");
        assert_eq!(
            store.syncs().dirs,
            2,
            "and the two directories that name it"
        );
        store.flush(run).await.unwrap();
        assert_eq!(syncs(&store, run), 1, "nothing new: no sync");

        store.append(run, &[warning(run, 1)]).await.unwrap();
        store.flush(run).await.unwrap();
        store.flush(run).await.unwrap();
        assert_eq!(syncs(&store, run), 2);

        store.append(run, &[warning(run, 2)]).await.unwrap();
        let flushes = (0..16).map(|_| store.flush(run));
        for result in futures::future::join_all(flushes).await {
            result.unwrap();
        }
        assert_eq!(syncs(&store, run), 3, "concurrent flushes share one sync");
    }

    /// A snapshot's large values live in `snapshot-blobs/`, which holds the
    /// current snapshot's blobs only: those of the snapshots it replaced
    /// are removed, so a long run's storage is not its snapshots' history.
    /// The log's `blobs/` is never touched by a snapshot.
    #[tokio::test]
    async fn a_replaced_snapshot_leaves_no_blob_behind() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileRunStore::open(dir.path()).unwrap();
        let run = RunId::new(uuid::Uuid::new_v4()).unwrap();
        let _lock = store.create_run(run).await.unwrap();
        let run_dir = store.run_dir(run);
        let blobs = |name: &str| -> Vec<String> {
            std::fs::read_dir(run_dir.join(name))
                .map(|d| {
                    d.flatten()
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default()
        };
        let mut snapshot = RunSnapshot::new(run);
        for n in 0..5 {
            let big = format!("{n}").repeat(crate::blobs::INLINE_LIMIT + 10);
            snapshot.input = serde_json::Value::String(big);
            store.save_snapshot(&snapshot).await.unwrap();
            assert_eq!(blobs("snapshot-blobs").len(), 1, "after snapshot {n}");
            let loaded = store.load_snapshot(run).await.unwrap().unwrap();
            assert_eq!(loaded.input, snapshot.input);
        }
        assert!(blobs("blobs").is_empty(), "{:?}", blobs("blobs"));
        // Deep in a node's output, and beside it a snapshot larger than the
        // limit made of small values only, which is written as it is.
        let node = domain::NodeId::new("a").unwrap();
        let output =
            serde_json::json!({"data": {"deep": ["y".repeat(crate::blobs::INLINE_LIMIT + 10)]}});
        snapshot.input = serde_json::Value::Null;
        snapshot
            .outputs
            .insert(node, domain::JsonText::from_value(&output));
        store.save_snapshot(&snapshot).await.unwrap();
        assert_eq!(blobs("snapshot-blobs").len(), 1);
        let text = std::fs::read_to_string(run_dir.join("snapshot.json")).unwrap();
        assert!(
            text.len() < 1_000,
            "the long string is a blob: {} bytes",
            text.len()
        );
        let loaded = store.load_snapshot(run).await.unwrap().unwrap();
        assert_eq!(loaded.outputs, snapshot.outputs);
        snapshot.outputs.clear();
        for n in 0..8_000 {
            let node = domain::NodeId::new(format!("n{n}")).unwrap();
            snapshot.node_calls.insert(node, n);
        }
        store.save_snapshot(&snapshot).await.unwrap();
        let text = std::fs::read(run_dir.join("snapshot.json")).unwrap();
        assert!(text.len() > crate::blobs::INLINE_LIMIT);
        assert_eq!(text, snapshot.to_json_vec().unwrap());
        assert!(blobs("snapshot-blobs").is_empty());
    }

    /// A long run's snapshot is written as it is encoded, a part at a time
    /// (a short one's whole): the file is its JSON exactly either way,
    /// however long the snapshot it replaced (whose file the next write
    /// reuses). A value shaped like a blob's reference, seen only once
    /// written, has the snapshot written again, escaped, and the run's later
    /// snapshots whole.
    #[tokio::test]
    async fn a_snapshot_written_in_parts_is_its_json_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileRunStore::open(dir.path()).unwrap();
        let run = RunId::new(uuid::Uuid::new_v4()).unwrap();
        let _lock = store.create_run(run).await.unwrap();
        let file = store.run_dir(run).join("snapshot.json");
        let streamed = || {
            let handle = store.inner.handle(run).unwrap();
            handle.streamed.load(std::sync::atomic::Ordering::Relaxed)
        };
        let mut snapshot = RunSnapshot::new(run);
        let fill = |snapshot: &mut RunSnapshot| {
            for n in 0..50_000 {
                let node = domain::NodeId::new(format!("n{n}")).unwrap();
                let output = serde_json::json!({"data": n});
                (snapshot.outputs).insert(node.clone(), domain::JsonText::from_value(&output));
                snapshot.node_calls.insert(node, 1);
            }
        };
        fill(&mut snapshot);
        // Whole (none before it), streamed, streamed and shorter, whole.
        for (shrink, streams) in [(false, 0), (false, 1), (true, 2), (true, 2)] {
            if shrink {
                snapshot.outputs.clear();
                snapshot.node_calls.clear();
            }
            store.save_snapshot(&snapshot).await.unwrap();
            assert_eq!(streamed(), streams);
            let text = std::fs::read(&file).unwrap();
            assert_eq!(text.len() > super::snapshot::STREAM_FROM, !shrink);
            assert_eq!(text, snapshot.to_json_vec().unwrap());
        }
        fill(&mut snapshot);
        store.save_snapshot(&snapshot).await.unwrap();
        let shaped = serde_json::json!({"data": {"$blob": "sha256:00", "bytes": 1}});
        let last = domain::NodeId::new("zz").unwrap();
        (snapshot.outputs).insert(last, domain::JsonText::from_value(&shaped));
        for streams in [3, 3] {
            store.save_snapshot(&snapshot).await.unwrap();
            assert_eq!(streamed(), streams);
            let text = std::fs::read(&file).unwrap();
            assert_ne!(text, snapshot.to_json_vec().unwrap(), "escaped");
            let loaded = store.load_snapshot(run).await.unwrap().unwrap();
            assert_eq!(loaded.outputs, snapshot.outputs);
        }
    }

    /// A streamed snapshot found to need a blob, which cannot be stored (a
    /// full disk; here `snapshot-blobs` is a file): the error is reported,
    /// the snapshot before it stays, and the streamed text is not left
    /// behind as `snapshot.json.tmp`.
    #[tokio::test]
    async fn a_snapshot_whose_blob_cannot_be_stored_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileRunStore::open(dir.path()).unwrap();
        let run = RunId::new(uuid::Uuid::new_v4()).unwrap();
        let _lock = store.create_run(run).await.unwrap();
        let run_dir = store.run_dir(run);
        let mut snapshot = RunSnapshot::new(run);
        for n in 0..120_000 {
            snapshot
                .node_calls
                .insert(domain::NodeId::new(format!("n{n}")).unwrap(), 1);
        }
        store.save_snapshot(&snapshot).await.unwrap();
        let saved = std::fs::read(run_dir.join("snapshot.json")).unwrap();
        assert!(
            saved.len() > super::snapshot::STREAM_FROM,
            "the next one streams"
        );
        std::fs::write(run_dir.join("snapshot-blobs"), b"not a directory").unwrap();
        let big = "x".repeat(crate::blobs::INLINE_LIMIT + 10);
        snapshot.input = serde_json::Value::String(big);
        let err = store.save_snapshot(&snapshot).await.unwrap_err();
        assert!(err.to_string().contains("snapshot"), "{err}");
        assert!(!run_dir.join("snapshot.json.tmp").exists());
        assert_eq!(std::fs::read(run_dir.join("snapshot.json")).unwrap(), saved);
    }

    #[tokio::test]
    async fn releasing_the_lock_syncs_what_was_not_flushed() {
        let dir = tempfile::tempdir().unwrap();
        for (sync, expected) in [(SyncPolicy::StepBoundary, 1), (SyncPolicy::Never, 0)] {
            let config = FileStoreConfig {
                sync,
                ..FileStoreConfig::default()
            };
            let store =
                FileRunStore::open_with(dir.path().join(format!("{sync:?}")), config).unwrap();
            let run = RunId::new(uuid::Uuid::new_v4()).unwrap();
            let lock = store.create_run(run).await.unwrap();
            store.append(run, &[warning(run, 1)]).await.unwrap();
            assert_eq!(syncs(&store, run), 0);
            drop(lock);
            assert_eq!(syncs(&store, run), expected, "{sync:?}");
            // Flushed first: nothing left for the release to sync.
            let lock = store.lock(run).await.unwrap();
            store.append(run, &[warning(run, 2)]).await.unwrap();
            store.flush(run).await.unwrap();
            let flushed = syncs(&store, run);
            drop(lock);
            assert_eq!(syncs(&store, run), flushed, "{sync:?}");
        }
    }

    #[tokio::test]
    async fn sync_never_never_syncs_and_sync_always_syncs_each_append() {
        let dir = tempfile::tempdir().unwrap();
        for (sync, expected) in [(SyncPolicy::Never, 0), (SyncPolicy::Always, 3)] {
            let config = FileStoreConfig {
                sync,
                ..FileStoreConfig::default()
            };
            let store =
                FileRunStore::open_with(dir.path().join(format!("{sync:?}")), config).unwrap();
            let run = RunId::new(uuid::Uuid::new_v4()).unwrap();
            let _lock = store.create_run(run).await.unwrap();
            for offset in 1..=3 {
                store.append(run, &[warning(run, offset)]).await.unwrap();
                store.flush(run).await.unwrap();
            }
            assert_eq!(syncs(&store, run), expected, "{sync:?}");
        }
    }
}

/// The store conformance suite against the file store.
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod conformance {
    use std::io::Write;
    use std::sync::Arc;
    use std::time::Duration;

    use application::ports::RunStore;
    use application::testing::store_conformance::StoreHarness;
    use domain::RunId;

    use super::{FileRunStore, FileStoreConfig};

    /// A file store in a temporary directory; `another` opens the directory
    /// again, with its own handles and locks, as another process would.
    struct Files {
        dir: tempfile::TempDir,
        store: Arc<FileRunStore>,
    }

    fn open(root: &std::path::Path) -> FileRunStore {
        let config = FileStoreConfig {
            follow_poll: Duration::from_millis(10),
            ..FileStoreConfig::default()
        };
        FileRunStore::open_with(root, config).unwrap()
    }

    impl StoreHarness for Files {
        fn new() -> Self {
            let dir = tempfile::tempdir().unwrap();
            let store = Arc::new(open(dir.path()));
            Self { dir, store }
        }
        fn store(&self) -> Arc<dyn RunStore> {
            self.store.clone()
        }
        fn another(&self) -> Option<Arc<dyn RunStore>> {
            Some(Arc::new(open(self.dir.path())))
        }
        /// Half a line at the end of the log, as a crash inside `write` leaves.
        fn tear_tail(&self, run: RunId) -> bool {
            let log = self.store.run_dir(run).join("events.ndjson");
            let mut f = std::fs::OpenOptions::new().append(true).open(log).unwrap();
            f.write_all(br#"{"id":"x","offset":11,"timest"#).unwrap();
            true
        }
        fn corrupt_event(&self, run: RunId, offset: u64) -> bool {
            let log = self.store.run_dir(run).join("events.ndjson");
            let text = std::fs::read_to_string(&log).unwrap();
            let mut lines: Vec<&str> = text.lines().collect();
            lines[usize::try_from(offset).unwrap() - 1] = "{this is not json";
            std::fs::write(&log, lines.join("\n") + "\n").unwrap();
            true
        }
        fn bad_event_place(&self, _run: RunId, offset: u64) -> String {
            format!("events.ndjson line {offset}")
        }
    }

    application::store_conformance!(Files);
}

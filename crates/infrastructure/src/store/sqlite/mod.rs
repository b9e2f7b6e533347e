//! [`SqliteRunStore`]: the run store in one SQLite database (bundled
//! SQLite, WAL), for users who keep many runs and query them.
//!
//! ```text
//! <db>              runs, events (one row per event), snapshots (one per
//!                   run) and the deltas saved since each
//! <db>-wal, -shm    SQLite's write-ahead log
//! <db>-writers      one byte a run (its `lock_slot`), locked by its one writer
//! ```
//!
//! Why it is shaped this way:
//! - An event row holds the event's JSON exactly as the file store writes
//!   its line (large values inline: SQLite keeps them in overflow pages), so
//!   both stores hold the same bytes and copying between them is lossless.
//! - One writer per run is a lock on the run's byte of one lock file beside
//!   the database (see `writers`), rather than a lease row: the kernel
//!   releases it when the writer dies, where a lease would wait to expire;
//!   and rather than a file per run, which a new run would pay an inode for.
//! - Each instance has two connections: one writes (every append is one
//!   transaction), one reads, so readers and followers never wait behind a
//!   writer's sync (WAL readers see the last commit without blocking).
//! - Sync policy as in the file store: [`SyncPolicy::StepBoundary`] commits
//!   with `synchronous=NORMAL` (no sync per append) and `flush` syncs the
//!   WAL file (`fdatasync` of `<db>-wal`), which makes every commit before
//!   it durable, as `synchronous=FULL` would at a commit, without one more
//!   commit. Snapshots are not counted as commits to sync: a flush or a
//!   release after one alone syncs nothing. Flushes share syncs (group
//!   commit): one waiting while another syncs finds its appends covered
//!   and returns.
//!   [`SyncPolicy::Always`] is `synchronous=FULL` (a sync per commit),
//!   [`SyncPolicy::Never`] is `synchronous=OFF`.
//! - Followers poll for other processes' appends, as in the file store.

mod connect;
mod definitions;
mod errors;
mod held;
mod query;
mod rows;
mod schema;
mod whole;
mod writers;

pub use errors::SqliteOpenError;

use errors::{io_err, sql_err};

use self::connect::{CREATING, connection, create_private, read_only_connection};
use self::held::HeldRun;

use std::collections::HashMap;
use std::fs::DirBuilder;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use application::ports::{
    EventBatches, EventFilter, EventStream, RunLock, RunQuery, RunStore, RunSummary, StoreError,
};
use async_trait::async_trait;
use domain::definition::Definition;
use domain::snapshot::SnapshotDelta;
use domain::{RunId, RunSnapshot, RuntimeEvent};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use tokio::sync::Notify;

pub use self::schema::SCHEMA_VERSION;
use super::file::lock::PROBE_RETRY;
use super::file::sync::off_the_runtime;
use super::{LogSource, SyncPolicy, follow_log};

/// Mode of the directories the store creates.
const DIR_MODE: u32 = 0o700;

/// Mode of the database file: runs hold prompts and outputs private to
/// their user (SQLite gives its `-wal` and `-shm` files the same mode).
const FILE_MODE: u32 = 0o600;

/// Bytes of event JSON one `read` returns at most (after its first event),
/// so a follower catching up never holds a huge batch.
const READ_BUDGET: usize = 4 << 20;

/// How long a statement waits for another connection's write lock (another
/// instance or process writing another run) before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Settings of a [`SqliteRunStore`].
#[derive(Debug, Clone)]
pub struct SqliteStoreConfig {
    /// When commits are synced.
    pub sync: SyncPolicy,
    /// How often a follower looks for events appended by another process.
    pub follow_poll: Duration,
}

impl Default for SqliteStoreConfig {
    fn default() -> Self {
        Self {
            sync: SyncPolicy::default(),
            follow_poll: Duration::from_millis(50),
        }
    }
}

/// The [`RunStore`] in one SQLite database. Cloning is cheap and clones
/// share connections and locks.
#[derive(Debug, Clone)]
pub struct SqliteRunStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    path: PathBuf,
    /// The lock file of the database's writers.
    writers: Arc<writers::Writers>,
    config: SqliteStoreConfig,
    /// Appends, snapshots and syncs. A `std` mutex: held for one
    /// transaction, never across an `.await`.
    writer: Mutex<Connection>,
    /// Reads and follows.
    reader: Mutex<Connection>,
    /// The runs this instance holds.
    held: Mutex<HashMap<RunId, HeldRun>>,
    /// Wakes this instance's followers of a run after its appends.
    notifies: Mutex<HashMap<RunId, Arc<Notify>>>,
    /// Commits by this instance, and how many of them are synced.
    committed: AtomicU64,
    synced: AtomicU64,
    /// The `-wal` file a sync makes durable, opened by the first sync and
    /// kept: SQLite removes or replaces it only once the last connection to
    /// the database closes, and this instance's writer connection is open
    /// as long as the handle is.
    wal: Mutex<Option<std::fs::File>>,
    /// Attempts at a lock that found a dead writer's leftover: what a test
    /// waits on to know a locker is waiting.
    #[cfg(test)]
    leftover_waits: AtomicU64,
}

/// A copy of what [`HeldRun`] knows, taken for one append.
#[derive(Debug, Clone, Copy)]
struct HeldState {
    slot: i64,
    last: Option<u64>,
    recorded: bool,
}

/// The keys of the events of the run at `slot` (schema 7: its slot above
/// an offset's 32 bits): `[first, end)`.
fn slot_keys(slot: i64) -> (i64, i64) {
    (slot << 32, (slot + 1) << 32)
}

/// Locks, recovering the data of a poisoned lock: nothing here panics while
/// holding one.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl SqliteRunStore {
    /// The store in the database at `path` with the default settings,
    /// creating it (and its directory, 0700) if needed.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, SqliteOpenError> {
        Self::open_with(path, SqliteStoreConfig::default())
    }

    /// The store in the existing database at `path`, for commands that only
    /// read: fails, naming `path`, when there is no such file.
    pub fn open_existing(path: impl AsRef<Path>) -> Result<Self, SqliteOpenError> {
        let path = path.as_ref();
        if !path.is_file() {
            return Err(StoreError::io_msg(format!(
                "storage {} does not exist (or is not a file)",
                path.display()
            ))
            .into());
        }
        let config = SqliteStoreConfig::default();
        // Not even tried read-write: the attempt would leave SQLite's index
        // files beside a database this process cannot write.
        if !connect::writable(path) {
            return Self::connect_read_only(path.to_path_buf(), config);
        }
        match Self::connect(path.to_path_buf(), config.clone()) {
            Ok(store) => Ok(store),
            // One this process may write in a directory it may not (where
            // SQLite cannot make its index files) is still read.
            Err(e) => match Self::connect_read_only(path.to_path_buf(), config) {
                Ok(store) => {
                    tracing::debug!(path = %path.display(), error = %e, "opened read-only");
                    Ok(store)
                }
                // Unreadable as well: the first error says why. A schema
                // this build cannot read is the reason itself.
                Err(SqliteOpenError::Store(_)) => Err(e),
                Err(other) => Err(other),
            },
        }
    }

    /// The store at `path` with explicit settings, creating it if needed.
    pub fn open_with(
        path: impl AsRef<Path>,
        config: SqliteStoreConfig,
    ) -> Result<Self, SqliteOpenError> {
        let path = path.as_ref().to_path_buf();
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            DirBuilder::new()
                .recursive(true)
                .mode(DIR_MODE)
                .create(parent)
                .map_err(|e| io_err("create", parent, e))?;
        }
        create_private(&path)?;
        Self::connect(path, config)
    }

    fn connect(path: PathBuf, config: SqliteStoreConfig) -> Result<Self, SqliteOpenError> {
        drop(lock(&CREATING));
        let mut writer = connection(&path, config.sync)?;
        schema::migrate(&mut writer, &path)?;
        let reader = connection(&path, config.sync)?;
        Ok(Self::with(path, config, writer, reader))
    }

    /// The store on a database this process cannot write, whose schema
    /// must then be this build's: every write fails, naming the file.
    fn connect_read_only(
        path: PathBuf,
        config: SqliteStoreConfig,
    ) -> Result<Self, SqliteOpenError> {
        drop(lock(&CREATING));
        let writer = read_only_connection(&path)?;
        schema::check(&writer, &path)?;
        let reader = read_only_connection(&path)?;
        Ok(Self::with(path, config, writer, reader))
    }

    fn with(
        path: PathBuf,
        config: SqliteStoreConfig,
        writer: Connection,
        reader: Connection,
    ) -> Self {
        // Beside the real file, symlinks resolved: a process that names the
        // database through another path must find the same locks.
        let real = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
        Self {
            inner: Arc::new(Inner {
                writers: Arc::new(writers::Writers::beside(&real)),
                path,
                config,
                writer: Mutex::new(writer),
                reader: Mutex::new(reader),
                held: Mutex::new(HashMap::new()),
                notifies: Mutex::new(HashMap::new()),
                committed: AtomicU64::new(0),
                synced: AtomicU64::new(0),
                wal: Mutex::new(None),
                #[cfg(test)]
                leftover_waits: AtomicU64::new(0),
            }),
        }
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }
}

/// One run's log as a follower polls it.
struct SqlLog {
    inner: Arc<Inner>,
    run_id: RunId,
    changed: Arc<Notify>,
}

impl LogSource for SqlLog {
    async fn read_after(&self, after: u64, limit: usize) -> Result<Vec<RuntimeEvent>, StoreError> {
        self.inner.read(self.run_id, after, limit)
    }

    async fn last(&self) -> Result<u64, StoreError> {
        self.inner.last(self.run_id)
    }

    fn changed(&self) -> &Notify {
        &self.changed
    }

    fn poll_interval(&self) -> Option<Duration> {
        Some(self.inner.config.follow_poll)
    }
}

#[async_trait]
impl RunStore for SqliteRunStore {
    async fn create_run(&self, run_id: RunId) -> Result<RunLock, StoreError> {
        // The insert itself refuses a run that exists (`Conflict`).
        self.inner.create(run_id)
    }

    async fn lock(&self, run_id: RunId) -> Result<RunLock, StoreError> {
        let started = std::time::Instant::now();
        loop {
            // `NotFound` from the lookup of the run's lock slot.
            match self.inner.try_take_lock(run_id)? {
                held::Attempt::Taken(run_lock) => return Ok(run_lock),
                held::Attempt::Leftover(pid) => {
                    self.inner.leftover_patience(run_id, pid, started)?;
                }
            }
            // Waited out here, holding nothing: the instance's other runs,
            // and the tasks of this thread, go on meanwhile.
            tokio::time::sleep(PROBE_RETRY).await;
        }
    }

    async fn has_writer(&self, run_id: RunId) -> Result<bool, StoreError> {
        self.inner.has_writer(run_id)
    }

    /// Inline: a commit without a sync takes microseconds, less than a hop
    /// to another thread. With [`SyncPolicy::Always`] every commit syncs,
    /// so it runs off the async workers.
    async fn append(&self, run_id: RunId, events: &[RuntimeEvent]) -> Result<u64, StoreError> {
        if self.inner.config.sync == SyncPolicy::Always {
            off_the_runtime(|| self.inner.append(run_id, events))
        } else {
            self.inner.append(run_id, events)
        }
    }

    async fn flush(&self, run_id: RunId) -> Result<(), StoreError> {
        let inner = &self.inner;
        // A run this instance holds exists (a run with a writer cannot be
        // deleted): only another run is looked up.
        if inner.check_held(run_id).is_err() {
            inner.require(&lock(&inner.reader), run_id)?;
        }
        if inner.config.sync != SyncPolicy::StepBoundary
            || inner.synced.load(Ordering::Acquire) >= inner.committed.load(Ordering::Acquire)
        {
            return Ok(());
        }
        off_the_runtime(|| inner.sync())
    }

    async fn read(
        &self,
        run_id: RunId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<RuntimeEvent>, StoreError> {
        self.inner.read(run_id, after, limit)
    }

    async fn last_offset(&self, run_id: RunId) -> Result<u64, StoreError> {
        self.inner.last(run_id)
    }

    async fn follow(&self, run_id: RunId, after: u64) -> Result<EventStream, StoreError> {
        self.inner.require(&lock(&self.inner.reader), run_id)?;
        let log = SqlLog {
            inner: Arc::clone(&self.inner),
            run_id,
            changed: self.inner.notify(run_id),
        };
        Ok(follow_log(Arc::new(log), after))
    }

    async fn save_snapshot(&self, snapshot: &RunSnapshot) -> Result<u64, StoreError> {
        let inner = &self.inner;
        let path = &inner.path;
        let run_id = snapshot.run_id;
        let json = snapshot.to_json_string().map_err(|e| {
            StoreError::io(
                format!("cannot serialize the snapshot of run {run_id}"),
                e.into(),
            )
        })?;
        let status = serde_json::to_value(snapshot.status)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned));
        let mut conn = lock(&inner.writer);
        inner.require(&conn, run_id)?;
        inner.check_held(run_id)?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| sql_err(path, "begin a snapshot", e))?;
        tx.execute(
            "INSERT INTO snapshots (run_id, json) VALUES (?1, ?2) \
             ON CONFLICT (run_id) DO UPDATE SET json = excluded.json",
            params![run_id.to_string(), json],
        )
        // The snapshot replaces the deltas that continued the one before.
        .and_then(|_| {
            tx.execute(
                "DELETE FROM snapshot_deltas WHERE run_id = ?1",
                [run_id.to_string()],
            )
        })
        .and_then(|_| {
            tx.execute(
                "UPDATE runs SET status = ?2, workflow = ?3, started_at = ?4, updated_at = ?5 \
                 WHERE run_id = ?1",
                params![
                    run_id.to_string(),
                    status,
                    snapshot.workflow.name,
                    snapshot.started_at.map(|t| t.as_millis()),
                    snapshot.updated_at.map(|t| t.as_millis()),
                ],
            )
        })
        .and_then(|_| tx.commit())
        .map_err(|e| sql_err(path, &format!("save the snapshot of run {run_id}"), e))?;
        // Not counted as a commit to sync: the snapshot is derived from the
        // log, so no flush or release syncs for it (design §4.2).
        Ok(json.len() as u64)
    }

    /// One row, committed without a sync (the snapshot is not synced either).
    async fn save_snapshot_delta(&self, delta: &SnapshotDelta) -> Result<Option<u64>, StoreError> {
        let inner = &self.inner;
        let run_id = delta.run_id;
        let mut json = Vec::new();
        let written = delta.write_json(&mut json).map_err(std::io::Error::from);
        let json = written
            .and_then(|()| {
                String::from_utf8(json)
                    .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
            })
            .map_err(|e| {
                StoreError::io(
                    format!("cannot serialize a snapshot delta of run {run_id}"),
                    e,
                )
            })?;
        let conn = lock(&inner.writer);
        inner.require(&conn, run_id)?;
        inner.check_held(run_id)?;
        let offset = i64::try_from(delta.last_offset).map_err(|_| {
            StoreError::io_msg(format!("offset {} out of range", delta.last_offset))
        })?;
        conn.prepare_cached(
            "INSERT OR REPLACE INTO snapshot_deltas (run_id, last_offset, json) \
             VALUES (?1, ?2, ?3)",
        )
        .and_then(|mut stmt| stmt.execute(params![run_id.to_string(), offset, json]))
        .map_err(|e| {
            sql_err(
                &inner.path,
                &format!("save a snapshot delta of run {run_id}"),
                e,
            )
        })?;
        Ok(Some(json.len() as u64))
    }

    /// No: the `runs` row follows the log (see `query::index_run`).
    fn needs_final_snapshot(&self) -> bool {
        false
    }

    async fn load_snapshot(&self, run_id: RunId) -> Result<Option<RunSnapshot>, StoreError> {
        let inner = &self.inner;
        let conn = lock(&inner.reader);
        inner.require(&conn, run_id)?;
        let json: Option<Vec<u8>> = conn
            .prepare_cached("SELECT CAST(json AS BLOB) FROM snapshots WHERE run_id = ?1")
            .and_then(|mut stmt| {
                stmt.query_row([run_id.to_string()], |row| row.get(0))
                    .optional()
            })
            .map_err(|e| {
                sql_err(
                    &inner.path,
                    &format!("read the snapshot of run {run_id}"),
                    e,
                )
            })?;
        let Some(json) = json else { return Ok(None) };
        let mut snapshot = RunSnapshot::from_json(&json, run_id).map_err(|e| {
            StoreError::Corrupt(format!(
                "{} snapshots row of run {run_id}: {e}",
                inner.path.display()
            ))
        })?;
        // Deltas are a cache: rows that cannot be read end the chain, and
        // the log is folded from the state reached.
        let deltas: Result<Vec<Vec<u8>>, _> = conn
            .prepare_cached(
                "SELECT CAST(json AS BLOB) FROM snapshot_deltas \
                 WHERE run_id = ?1 ORDER BY last_offset",
            )
            .and_then(|mut stmt| {
                stmt.query_map([run_id.to_string()], |row| row.get(0))?
                    .collect()
            });
        match deltas {
            Ok(rows) => {
                let deltas = rows.iter().map(|row| SnapshotDelta::from_json(row));
                if let Some(e) = snapshot.apply_deltas(deltas) {
                    tracing::debug!(run = %run_id, error = %e, "snapshot deltas end here");
                }
            }
            Err(e) => {
                tracing::warn!(run = %run_id, error = %e, "snapshot deltas left out; the log is folded instead");
            }
        }
        Ok(Some(snapshot))
    }

    async fn save_definition(&self, definition: &Definition) -> Result<String, StoreError> {
        self.inner.save_definition(definition)
    }

    async fn load_definition(&self, hash: &str) -> Result<Option<Definition>, StoreError> {
        self.inner.load_definition(hash)
    }

    async fn list_runs(&self) -> Result<Vec<RunId>, StoreError> {
        let inner = &self.inner;
        let conn = lock(&inner.reader);
        let mut stmt = conn
            .prepare_cached("SELECT run_id FROM runs")
            .map_err(|e| sql_err(&inner.path, "list runs", e))?;
        let ids = stmt
            .query_map([], |row| row.get_ref(0).map(query::text))
            .and_then(Iterator::collect::<Result<Vec<_>, _>>)
            .map_err(|e| sql_err(&inner.path, "list runs", e))?;
        let mut runs = Vec::with_capacity(ids.len());
        for id in ids {
            match id.as_deref().map(str::parse) {
                Some(Ok(run_id)) => runs.push(run_id),
                _ => {
                    tracing::warn!(db = %inner.path.display(), id, "a runs row is not a run id; skipped")
                }
            }
        }
        Ok(runs)
    }

    async fn query_runs(&self, query: &RunQuery) -> Result<Vec<RunSummary>, StoreError> {
        self.inner.query_runs(query)
    }

    async fn read_matching(
        &self,
        run_id: RunId,
        after: u64,
        filter: &EventFilter,
        limit: usize,
    ) -> Result<Vec<RuntimeEvent>, StoreError> {
        self.inner.read_matching(run_id, after, filter, limit)
    }

    async fn delete_run(&self, run_id: RunId) -> Result<(), StoreError> {
        self.inner.delete_whole(run_id)
    }

    async fn import_run(
        &self,
        run_id: RunId,
        events: EventBatches,
        snapshot: Option<RunSnapshot>,
    ) -> Result<(), StoreError> {
        self.inner.import_whole(run_id, events, snapshot).await
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod held_tests;

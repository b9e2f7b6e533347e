//! [`PgRunStore`]: the run store on PostgreSQL, shared by every process and
//! machine of a team.
//!
//! Why it is shaped this way:
//! - A run's writer holds its lease (`lease_owner`, `lease_epoch`), and
//!   every append and snapshot checks both in the statement that writes,
//!   so a writer that lost the lease (to another that took the run over)
//!   cannot write one more row. An append is one statement: it moves
//!   `next_offset` on only if the events continue the log, and inserts them;
//!   the row lock it takes orders the appends of one run, so offsets are
//!   gap-free and commit in order.
//! - A lease ends when it is released, when it expires (heartbeats renew it
//!   on the database's clock), or when its holder's session ends
//!   (`lease_presence`, see `presence`): a writer that dies frees its runs
//!   at once, one that hangs frees them once its leases expire.
//! - Followers are woken by `NOTIFY` (a hint: they re-read from their last
//!   offset) and poll slowly in case a notification was lost.
//! - Commits are durable when they return (the server's
//!   `synchronous_commit`), so `flush` has nothing left to do.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use application::ports::{EventBatches, EventStream, RunLock, RunStore, StoreError};
use async_trait::async_trait;
use domain::{RunId, RunSnapshot, RuntimeEvent};
use tokio::sync::Notify;
use tokio::task::AbortHandle;

use super::super::{LogSource, follow_log};
use super::lease::Hold;
use super::{PgDatabase, PgOpenError, presence};

/// Settings of a [`PgRunStore`].
#[derive(Debug, Clone)]
pub struct PgStoreConfig {
    /// Who writes, as the runs it leases record it (a worker's name).
    pub name: String,
    /// How long a lease lasts unless renewed: how long a writer that hangs
    /// keeps its runs from others. Heartbeats renew it three times a term.
    pub lease_ttl: Duration,
    /// How often a follower re-reads when no notification woke it: the
    /// safety net for notifications lost with a connection.
    pub follow_poll: Duration,
}

impl Default for PgStoreConfig {
    fn default() -> Self {
        Self {
            name: default_name(),
            lease_ttl: Duration::from_secs(30),
            follow_poll: Duration::from_secs(1),
        }
    }
}

/// `awr@HOST:PID`: which process writes, for people reading the runs table.
fn default_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default();
    let host = if host.is_empty() { "localhost" } else { &host };
    format!("awr@{host}:{}", std::process::id())
}

/// The [`RunStore`] on a PostgreSQL database. Cloning is cheap and clones
/// share the pool, the leases and the listening session.
#[derive(Debug, Clone)]
pub struct PgRunStore {
    pub(super) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(super) struct Inner {
    pub(super) db: PgDatabase,
    pub(super) config: PgStoreConfig,
    /// `lease_owner` of the runs this instance leases: its name and an id
    /// of its own, so two instances of one name never pass for each other.
    pub(super) owner: String,
    /// The key of this instance's presence lock (`lease_presence`).
    pub(super) presence: i32,
    /// The runs this instance leases, or is taking.
    pub(super) held: Mutex<HashMap<RunId, Hold>>,
    /// Wakes this instance's followers of a run.
    pub(super) notifies: Arc<Notifies>,
    /// The presence session and the heartbeat, stopped with the store.
    tasks: Vec<AbortHandle>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Locks, recovering the data of a poisoned lock: nothing here panics while
/// holding one.
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The followers' wake-ups, by run: woken by this instance's appends and
/// by the notifications of everyone's.
#[derive(Debug, Default)]
pub(super) struct Notifies(Mutex<HashMap<RunId, Arc<Notify>>>);

impl Notifies {
    pub(super) fn of(&self, run_id: RunId) -> Arc<Notify> {
        let mut notifies = lock(&self.0);
        if notifies.len() >= 256 {
            notifies.retain(|_, n| Arc::strong_count(n) > 1);
        }
        Arc::clone(notifies.entry(run_id).or_default())
    }

    pub(super) fn wake(&self, run_id: RunId) {
        if let Some(n) = lock(&self.0).get(&run_id) {
            n.notify_waiters();
        }
    }

    /// Wakes every follower: notifications may have been lost.
    pub(super) fn wake_all(&self) {
        for n in lock(&self.0).values() {
            n.notify_waiters();
        }
    }
}

impl PgRunStore {
    /// The store on the database at `url`, with the default settings.
    pub async fn open(url: &str) -> Result<Self, PgOpenError> {
        Self::open_with(url, PgStoreConfig::default()).await
    }

    /// The store on the database at `url`: migrates its schema, and opens
    /// the session that says this instance is there before it leases runs.
    pub async fn open_with(url: &str, config: PgStoreConfig) -> Result<Self, PgOpenError> {
        let db = PgDatabase::open(url).await?;
        Self::on(db, config).await
    }

    /// The store on an opened database.
    pub async fn on(db: PgDatabase, config: PgStoreConfig) -> Result<Self, PgOpenError> {
        let notifies = Arc::new(Notifies::default());
        let (presence, session) = presence::start(&db, Arc::clone(&notifies)).await?;
        let owner = format!("{}#{}", config.name, uuid::Uuid::new_v4().simple());
        let ttl = config.lease_ttl;
        let inner = Arc::new_cyclic(|weak| {
            let heartbeat = tokio::spawn(super::lease::heartbeat(weak.clone(), ttl));
            Inner {
                db,
                config,
                owner,
                presence,
                held: Mutex::new(HashMap::new()),
                notifies,
                tasks: vec![session, heartbeat.abort_handle()],
            }
        });
        Ok(Self { inner })
    }

    /// The database.
    pub fn database(&self) -> &PgDatabase {
        &self.inner.db
    }

    /// Ends this instance's session and heartbeat as the end of its process
    /// would, leaving its leases behind.
    #[cfg(test)]
    pub(super) fn vanish(&self) {
        for task in &self.inner.tasks {
            task.abort();
        }
    }
}

/// One run's log as a follower reads it.
struct PgLog {
    inner: Arc<Inner>,
    run_id: RunId,
    changed: Arc<Notify>,
}

impl LogSource for PgLog {
    async fn read_after(&self, after: u64, limit: usize) -> Result<Vec<RuntimeEvent>, StoreError> {
        self.inner.read(self.run_id, after, limit).await
    }

    async fn last(&self) -> Result<u64, StoreError> {
        self.inner.last(self.run_id).await
    }

    fn changed(&self) -> &Notify {
        &self.changed
    }

    fn poll_interval(&self) -> Option<Duration> {
        Some(self.inner.config.follow_poll)
    }
}

#[async_trait]
impl RunStore for PgRunStore {
    async fn create_run(&self, run_id: RunId) -> Result<RunLock, StoreError> {
        self.inner.create(run_id).await
    }

    async fn lock(&self, run_id: RunId) -> Result<RunLock, StoreError> {
        self.inner.take(run_id).await
    }

    async fn has_writer(&self, run_id: RunId) -> Result<bool, StoreError> {
        self.inner.has_writer(run_id).await
    }

    async fn append(&self, run_id: RunId, events: &[RuntimeEvent]) -> Result<u64, StoreError> {
        self.inner.append(run_id, events).await
    }

    /// Every commit was durable when it returned.
    async fn flush(&self, run_id: RunId) -> Result<(), StoreError> {
        self.inner.require(run_id).await
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
        self.inner.last(run_id).await
    }

    async fn follow(&self, run_id: RunId, after: u64) -> Result<EventStream, StoreError> {
        self.inner.require(run_id).await?;
        let log = PgLog {
            inner: Arc::clone(&self.inner),
            run_id,
            changed: self.inner.notifies.of(run_id),
        };
        Ok(follow_log(Arc::new(log), after))
    }

    async fn save_snapshot(&self, snapshot: &RunSnapshot) -> Result<u64, StoreError> {
        self.inner.save_snapshot(snapshot).await
    }

    async fn load_snapshot(&self, run_id: RunId) -> Result<Option<RunSnapshot>, StoreError> {
        self.inner.load_snapshot(run_id).await
    }

    async fn list_runs(&self) -> Result<Vec<RunId>, StoreError> {
        self.inner.list_runs().await
    }

    async fn delete_run(&self, run_id: RunId) -> Result<(), StoreError> {
        self.inner.delete_whole(run_id).await
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

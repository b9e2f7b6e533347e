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
//! - Appends commit without waiting for the server's sync
//!   (`synchronous_commit=off` on every connection); `flush`, at a step
//!   boundary, commits one synced transaction that covers them. What must
//!   be durable at once (a lease taken, a run deleted or imported) syncs
//!   before it returns.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use application::ports::{EventBatches, EventStream, RunLock, RunStore, StoreError, definition_at};
use async_trait::async_trait;
use domain::definition::Definition;
use domain::{RunId, RunSnapshot, RuntimeEvent};
use tokio::sync::Notify;

use super::super::{LogSource, follow_log};
use super::shared::{Inner, Notifies, PgStoreConfig, pg_err, prepare_err};
use super::{PgDatabase, PgOpenError, presence};

/// The [`RunStore`] on a PostgreSQL database. Cloning is cheap and clones
/// share the pool, the leases and the listening session.
#[derive(Debug, Clone)]
pub struct PgRunStore {
    pub(super) inner: Arc<Inner>,
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

    /// The store on the database at `url` for commands that only read:
    /// refused when the database holds no awr store.
    pub async fn open_existing(url: &str) -> Result<Self, PgOpenError> {
        let db = PgDatabase::open_existing(url).await?;
        Self::on(db, PgStoreConfig::default()).await
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
                losses: Mutex::new(HashMap::new()),
                notifies,
                appended: std::sync::atomic::AtomicU64::new(0),
                synced: std::sync::atomic::AtomicU64::new(0),
                upto: Mutex::new(HashMap::new()),
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

    /// One synced commit covering this instance's appends, if any are
    /// not yet durable. A run this instance leases exists (deleting it
    /// takes its lease): no look-up.
    async fn flush(&self, run_id: RunId) -> Result<(), StoreError> {
        if self.inner.epoch(run_id).is_err() {
            self.inner.require(run_id).await?;
        }
        use std::sync::atomic::Ordering;
        let inner = &self.inner;
        if inner.synced.load(Ordering::Acquire) >= inner.appended.load(Ordering::Acquire) {
            return Ok(());
        }
        let client = inner.client().await?;
        inner.sync(&client, Some(run_id)).await
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

    async fn save_definition(&self, definition: &Definition) -> Result<String, StoreError> {
        let hash = definition.hash();
        let client = self.inner.client().await?;
        // Durable with the next flush, before the run that names it is.
        self.inner
            .appended
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        client
            .execute(
                &client
                    .prepare_cached(
                        "INSERT INTO awr_definitions (hash, body) VALUES ($1, $2) \
                 ON CONFLICT (hash) DO NOTHING",
                    )
                    .await
                    .map_err(prepare_err)?,
                &[&hash, &definition.to_json()],
            )
            .await
            .map_err(|e| pg_err(format!("save definition {hash}"), e))?;
        Ok(hash)
    }

    async fn load_definition(&self, hash: &str) -> Result<Option<Definition>, StoreError> {
        let client = self.inner.client().await?;
        let row = client
            .query_opt(
                &client
                    .prepare_cached("SELECT body FROM awr_definitions WHERE hash = $1")
                    .await
                    .map_err(prepare_err)?,
                &[&hash],
            )
            .await
            .map_err(|e| pg_err(format!("read definition {hash}"), e))?;
        row.map(|row| {
            let body: &str = row.get(0);
            let place = format!(
                "PostgreSQL {} awr_definitions row {hash}",
                self.inner.db.target
            );
            definition_at(hash, body.as_bytes(), &place)
        })
        .transpose()
    }

    async fn queued(
        &self,
        run_id: RunId,
    ) -> Result<Option<application::ports::Submission>, StoreError> {
        self.submission(run_id).await
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

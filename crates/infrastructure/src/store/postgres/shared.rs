//! What the parts of the PostgreSQL store share: the state of one store
//! instance ([`Inner`]), its settings, where it stands with each run
//! ([`Hold`]), its followers' wake-ups, and the wording of its errors.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use application::ports::StoreError;
use domain::RunId;
use tokio::sync::Notify;
use tokio::task::AbortHandle;

use super::PgDatabase;

/// The channel appends notify on, with `RUN:NEXT_OFFSET` as the payload.
pub(super) const CHANNEL: &str = "awr_log";

/// Settings of a [`PgRunStore`](super::PgRunStore).
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
    /// What tells the lock of each run leased here, under its epoch, that
    /// it was lost ([`application::ports::RunLock::lost`]).
    pub(super) losses: Mutex<HashMap<RunId, (i64, tokio_util::sync::CancellationToken)>>,
    /// Wakes this instance's followers of a run.
    pub(super) notifies: Arc<Notifies>,
    /// Writes by this instance that commit without waiting for a sync
    /// (appends, snapshots, definitions), counted before each is sent, and
    /// how many of them a sync is known to cover: a flush has nothing to do
    /// only when the second has caught up with the first.
    pub(super) appended: std::sync::atomic::AtomicU64,
    pub(super) synced: std::sync::atomic::AtomicU64,
    /// The `next_offset` this instance's last append to each run left, so
    /// a flush can tell that a server crash lost appends it had taken.
    pub(super) upto: Mutex<HashMap<RunId, i64>>,
    /// The presence session and the heartbeat, stopped with the store.
    pub(super) tasks: Vec<AbortHandle>,
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

/// The wake-ups of this instance's tasks that wait on a run: its
/// followers (woken by appends, this instance's and everyone's
/// notifications) and, apart, its command listeners and senders (woken by
/// a command sent or answered), so an append never sends those to the
/// database for nothing.
#[derive(Debug, Default)]
pub(super) struct Notifies {
    log: Mutex<HashMap<RunId, Arc<Notify>>>,
    commands: Mutex<HashMap<RunId, Arc<Notify>>>,
}

/// The wake-up of `run_id` in `map`, made on first use; those nobody
/// waits on any more are dropped once there are many.
fn notify_of(map: &Mutex<HashMap<RunId, Arc<Notify>>>, run_id: RunId) -> Arc<Notify> {
    let mut notifies = lock(map);
    if notifies.len() >= 256 {
        notifies.retain(|_, n| Arc::strong_count(n) > 1);
    }
    Arc::clone(notifies.entry(run_id).or_default())
}

fn wake_in(map: &Mutex<HashMap<RunId, Arc<Notify>>>, run_id: RunId) {
    if let Some(n) = lock(map).get(&run_id) {
        n.notify_waiters();
    }
}

impl Notifies {
    /// What wakes the followers of `run_id`.
    pub(super) fn of(&self, run_id: RunId) -> Arc<Notify> {
        notify_of(&self.log, run_id)
    }

    pub(super) fn wake(&self, run_id: RunId) {
        wake_in(&self.log, run_id);
    }

    /// What wakes the command listener and senders of `run_id`.
    pub(super) fn of_commands(&self, run_id: RunId) -> Arc<Notify> {
        notify_of(&self.commands, run_id)
    }

    pub(super) fn wake_commands(&self, run_id: RunId) {
        wake_in(&self.commands, run_id);
    }

    /// Wakes every waiting task: notifications may have been lost.
    pub(super) fn wake_all(&self) {
        for map in [&self.log, &self.commands] {
            for n in lock(map).values() {
                n.notify_waiters();
            }
        }
    }
}

/// Where this instance stands with a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Hold {
    /// A `lock` or `create_run` of it is under way.
    Taking,
    /// Leased under this epoch.
    Held(i64),
    /// Leased under this epoch until another writer took the run over.
    Lost(i64),
}

/// A statement that could not be prepared (a connection lost, a schema
/// not awr's).
pub(super) fn prepare_err(e: tokio_postgres::Error) -> StoreError {
    pg_err("prepare a statement".to_owned(), e)
}

/// A failed statement or connection, saying what was being done and, in
/// the server's own words, what went wrong.
pub(super) fn pg_err(what: String, e: tokio_postgres::Error) -> StoreError {
    StoreError::io(
        format!("PostgreSQL: cannot {what}"),
        std::io::Error::other(said(&e)),
    )
}

/// `e` with its cause: a client error shows only its kind (`db error`),
/// and its cause says what the server said (`ERROR: could not extend
/// file …: No space left on device`).
pub(super) fn said(e: &tokio_postgres::Error) -> String {
    match std::error::Error::source(e) {
        Some(cause) => format!("{e}: {cause}"),
        None => e.to_string(),
    }
}

/// `LeaseLost`, for a writer whose lease another took over.
pub(super) fn lease_lost(run_id: RunId) -> StoreError {
    StoreError::LeaseLost(format!(
        "run {run_id}: this writer's lease was lost (another writer took the run over); \
         it writes nothing more"
    ))
}

impl Inner {
    /// Waits until everything this instance committed so far is durable:
    /// one statement, an implicit transaction that writes (it takes an id)
    /// and commits with `synchronous_commit` on, whose sync covers every
    /// commit before it. With `run`, also checks that the run's log still
    /// reaches where this instance's appends left it: a server that crashed
    /// before syncing them lost them, and that is an error, not a flush.
    pub(super) async fn sync(
        &self,
        client: &deadpool_postgres::Object,
        run: Option<RunId>,
    ) -> Result<(), StoreError> {
        use std::sync::atomic::Ordering;
        let target = self.appended.load(Ordering::Acquire);
        let expected = run.and_then(|run| lock(&self.upto).get(&run).copied());
        let statement = client
            .prepare_cached(
                "SELECT set_config('synchronous_commit', 'on', true), \
                 pg_current_xact_id()::text, \
                 (SELECT next_offset FROM awr_runs WHERE run_id = $1)",
            )
            .await
            .map_err(prepare_err)?;
        let id = run.map(|run| run.as_uuid());
        let row = client
            .query_one(&statement, &[&id])
            .await
            .map_err(|e| pg_err("sync".to_owned(), e))?;
        if let (Some(run), Some(expected)) = (run, expected) {
            let found: Option<i64> = row.get(2);
            if found.is_none_or(|found| found < expected) {
                return Err(StoreError::io_msg(format!(
                    "PostgreSQL {}: run {run} ends before offset {}, where this writer's \
                     appends left it: the server lost appends it had not synced (a crash, \
                     a failover)",
                    self.db.target,
                    expected - 1
                )));
            }
        }
        self.synced.fetch_max(target, Ordering::AcqRel);
        Ok(())
    }

    /// A connection from the pool.
    pub(super) async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.db.pool.get().await.map_err(|e| {
            StoreError::io(
                format!("cannot connect to PostgreSQL at {}", self.db.target),
                std::io::Error::other(e),
            )
        })
    }

    pub(super) async fn exists(
        &self,
        client: &deadpool_postgres::Object,
        run_id: RunId,
    ) -> Result<bool, StoreError> {
        let row = client
            .query_opt(
                &client
                    .prepare_cached("SELECT 1 FROM awr_runs WHERE run_id = $1")
                    .await
                    .map_err(prepare_err)?,
                &[&run_id.as_uuid()],
            )
            .await
            .map_err(|e| pg_err(format!("look up run {run_id}"), e))?;
        Ok(row.is_some())
    }

    /// `NotFound` unless `run_id` is a run of the database.
    pub(super) async fn require(&self, run_id: RunId) -> Result<(), StoreError> {
        let client = self.client().await?;
        match self.exists(&client, run_id).await? {
            true => Ok(()),
            false => Err(StoreError::NotFound(run_id)),
        }
    }
}

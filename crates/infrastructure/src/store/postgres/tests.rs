//! The schema against a real PostgreSQL server: the one `AWR_TEST_POSTGRES`
//! names (`cargo xtask test` starts a throwaway one), a database of its own
//! per test.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use application::ports::RunStore;
use application::testing::store_conformance::StoreHarness;
use domain::RunId;

use super::*;

/// Settings for tests: followers poll often, leases are short.
pub(super) fn config() -> PgStoreConfig {
    PgStoreConfig {
        name: "test".into(),
        lease_ttl: Duration::from_secs(5),
        follow_poll: Duration::from_millis(20),
    }
}

/// Runs `future` to its end from a synchronous function inside a
/// multi-threaded runtime (the harness's constructors are synchronous).
fn block<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(future))
}

/// A database of its own on the test server; `another` opens a second store
/// on it, with its own pool, session and leases, as another process would.
struct Postgres {
    url: String,
    store: Arc<PgRunStore>,
}

impl StoreHarness for Postgres {
    fn available() -> bool {
        server().is_some()
    }
    fn new() -> Self {
        block(async {
            let url = fresh_database().await.expect("a PostgreSQL server");
            let store = Arc::new(PgRunStore::open_with(&url, config()).await.unwrap());
            Self { url, store }
        })
    }
    fn store(&self) -> Arc<dyn RunStore> {
        self.store.clone()
    }
    fn another(&self) -> Option<Arc<dyn RunStore>> {
        let store = block(PgRunStore::open_with(&self.url, config())).unwrap();
        Some(Arc::new(store))
    }
    /// An append is one statement: a crash leaves all of it or none.
    fn tear_tail(&self, _run: RunId) -> bool {
        false
    }
    fn corrupt_event(&self, run: RunId, offset: u64) -> bool {
        let changed = block(async {
            let client = self.store.database().client().await.unwrap();
            client
                .execute(
                    "UPDATE awr_events SET body = '{this is not json' \
                     WHERE run_id = $1 AND \"offset\" = $2",
                    &[&run.as_uuid(), &(offset as i64)],
                )
                .await
                .unwrap()
        });
        assert_eq!(changed, 1);
        true
    }
    fn bad_event_place(&self, run: RunId, offset: u64) -> String {
        format!("awr_events row (run {run}, offset {offset})")
    }
}

mod conformance {
    application::store_conformance!(super::Postgres);
}

/// The test server's URL, or `None` after saying why; fails where the
/// server must be there (`AWR_REQUIRE_POSTGRES`, as in CI).
fn server() -> Option<String> {
    match std::env::var("AWR_TEST_POSTGRES") {
        Ok(url) => Some(url),
        Err(_) => {
            assert!(
                std::env::var_os("AWR_REQUIRE_POSTGRES").is_none(),
                "AWR_REQUIRE_POSTGRES is set but AWR_TEST_POSTGRES names no server"
            );
            eprintln!(
                "skipped: no PostgreSQL server (set AWR_TEST_POSTGRES, as `cargo xtask test` does)"
            );
            None
        }
    }
}

/// A fresh database on the test server, as a URL; `None` (saying why) on a
/// machine with no server, unless `AWR_REQUIRE_POSTGRES` says there must be
/// one (CI), where its absence fails the test.
pub(super) async fn fresh_database() -> Option<String> {
    let base = server()?;
    let (client, connection) = tokio_postgres::connect(&base, NoTls).await.unwrap();
    tokio::spawn(connection);
    let name = format!("awr_t_{}", uuid::Uuid::new_v4().simple());
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    let (server, _) = base.rsplit_once('/').expect("a postgres:// URL");
    Some(format!("{server}/{name}"))
}

async fn tables(database: &PgDatabase) -> Vec<String> {
    let client = database.client().await.unwrap();
    client
        .query(
            "SELECT table_name::text FROM information_schema.tables \
             WHERE table_schema = 'public' ORDER BY table_name",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

#[tokio::test]
async fn a_new_database_is_migrated_and_opening_it_again_changes_nothing() {
    let Some(url) = fresh_database().await else {
        return;
    };
    let first = PgDatabase::open(&url).await.unwrap();
    assert_eq!(first.schema_version().await.unwrap(), PG_SCHEMA_VERSION);
    assert_eq!(
        tables(&first).await,
        [
            "awr_commands",
            "awr_definitions",
            "awr_events",
            "awr_runs",
            "awr_schema",
            "awr_snapshots",
            "awr_transcript_blobs",
            "awr_transcript_lines"
        ]
    );
    let again = PgDatabase::open(&url).await.unwrap();
    assert_eq!(again.schema_version().await.unwrap(), PG_SCHEMA_VERSION);
    let client = again.client().await.unwrap();
    let rows: i64 = client
        .query_one("SELECT count(*) FROM awr_schema", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 1);
}

#[tokio::test]
async fn processes_that_open_one_new_database_at_once_all_succeed() {
    let Some(url) = fresh_database().await else {
        return;
    };
    let opens = (0..4).map(|_| PgDatabase::open(&url));
    for opened in futures::future::join_all(opens).await {
        let database = opened.unwrap();
        assert_eq!(database.schema_version().await.unwrap(), PG_SCHEMA_VERSION);
    }
}

#[tokio::test]
async fn a_database_of_a_newer_awr_is_refused_naming_both_versions() {
    let Some(url) = fresh_database().await else {
        return;
    };
    let database = PgDatabase::open(&url).await.unwrap();
    let client = database.client().await.unwrap();
    client
        .execute("UPDATE awr_schema SET version = 99", &[])
        .await
        .unwrap();
    let refused = PgDatabase::open(&url).await.unwrap_err();
    assert!(
        matches!(
            refused,
            PgOpenError::Newer {
                found: 99,
                known: PG_SCHEMA_VERSION
            }
        ),
        "{refused:?}"
    );
    let text = refused.to_string();
    assert!(text.contains("99") && text.contains("newer"), "{text}");
}

#[tokio::test]
async fn a_bad_url_and_an_absent_server_are_named_without_the_password() {
    let bad = PgDatabase::open("postgres://me@host:port/db")
        .await
        .unwrap_err();
    assert!(matches!(bad, PgOpenError::BadUrl(_)), "{bad:?}");
    // Nothing listens on port 1 of the loopback.
    let absent = PgDatabase::open("postgres://me:secret@127.0.0.1:1/teamdb?connect_timeout=5")
        .await
        .unwrap_err();
    let text = absent.to_string();
    assert!(matches!(absent, PgOpenError::Connect { .. }), "{absent:?}");
    assert!(text.contains("127.0.0.1:1/teamdb"), "{text}");
    assert!(!text.contains("secret"), "{text}");
}

/// A store on `url` whose leases last `ttl`.
pub(super) async fn store_with(url: &str, ttl: Duration) -> PgRunStore {
    let config = PgStoreConfig {
        lease_ttl: ttl,
        ..config()
    };
    PgRunStore::open_with(url, config).await.unwrap()
}

/// Makes the lease of `run` expire now, as if its writer had stopped
/// renewing it long ago.
pub(super) async fn expire(store: &PgRunStore, run: RunId) {
    let client = store.database().client().await.unwrap();
    let changed = client
        .execute(
            "UPDATE awr_runs SET lease_expires_at = now() - interval '1 second' \
             WHERE run_id = $1",
            &[&run.as_uuid()],
        )
        .await
        .unwrap();
    assert_eq!(changed, 1);
}

/// The epochs the events of `run` were written under, by offset.
pub(super) async fn epochs(store: &PgRunStore, run: RunId) -> Vec<(i64, i64)> {
    let client = store.database().client().await.unwrap();
    client
        .query(
            "SELECT \"offset\", epoch FROM awr_events WHERE run_id = $1 ORDER BY \"offset\"",
            &[&run.as_uuid()],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect()
}

/// `LeaseLost`, naming the run.
pub(super) fn assert_lost<T: std::fmt::Debug>(
    result: Result<T, application::ports::StoreError>,
    run: RunId,
    what: &str,
) {
    match result {
        Err(application::ports::StoreError::LeaseLost(message)) => {
            assert!(message.contains(&run.to_string()), "{what}: {message}");
            assert!(message.contains("lease was lost"), "{what}: {message}");
        }
        other => panic!("{what}: expected LeaseLost, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_lost_its_lease_cannot_write_one_more_event() {
    use application::testing::store_conformance::{run_with, snapshot, warning};
    let Some(url) = fresh_database().await else {
        return;
    };
    let zombie = store_with(&url, Duration::from_secs(60)).await;
    let (run, zombie_lock) = run_with(&zombie, 2).await;
    // Alive but silent past its lease (a pause, a partition): taken over.
    expire(&zombie, run).await;
    let heir = store_with(&url, Duration::from_secs(60)).await;
    let _heir_lock = heir.lock(run).await.unwrap();
    heir.append(run, &[warning(run, 3)]).await.unwrap();

    let refused = zombie.append(run, &[warning(run, 4)]).await;
    assert_lost(refused, run, "the zombie's append");
    // Its lock says so, for its writer to stop at once.
    tokio::time::timeout(Duration::from_secs(10), zombie_lock.lost())
        .await
        .expect("the zombie's lock learns it was lost");
    assert_lost(
        zombie.append(run, &[warning(run, 4)]).await,
        run,
        "the zombie's second append",
    );
    assert_lost(
        zombie
            .save_snapshot(&snapshot(run, 3, domain::RunStatus::Failed))
            .await,
        run,
        "the zombie's snapshot",
    );
    // The log is the heir's from the takeover on, and nothing is written
    // under the zombie's epoch after it.
    assert_eq!(epochs(&heir, run).await, [(1, 1), (2, 1), (3, 2)]);
    assert_eq!(heir.load_snapshot(run).await.unwrap(), None);
    heir.append(run, &[warning(run, 4)]).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_whose_process_is_gone_frees_its_runs_before_its_lease_expires() {
    use application::testing::store_conformance::{PATIENCE, run_with};
    let Some(url) = fresh_database().await else {
        return;
    };
    let dead = store_with(&url, Duration::from_secs(600)).await;
    let (run, lock) = run_with(&dead, 1).await;
    // The process ends without releasing: its session goes, the lease stays.
    dead.vanish();
    std::mem::forget(lock);
    let heir = store_with(&url, Duration::from_secs(600)).await;
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while heir.has_writer(run).await.unwrap() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the dead writer's lease outlived its session"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _lock = heir.lock(run).await.unwrap();
    assert_eq!(heir.last_offset(run).await.unwrap(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_keep_a_lease_past_its_term() {
    use application::testing::store_conformance::{PATIENCE, assert_locked, run_with, warning};
    let Some(url) = fresh_database().await else {
        return;
    };
    let writer = store_with(&url, Duration::from_millis(300)).await;
    let (run, _lock) = run_with(&writer, 1).await;
    let client = writer.database().client().await.unwrap();
    let expiry = || async {
        let row = client
            .query_one(
                "SELECT lease_expires_at FROM awr_runs WHERE run_id = $1",
                &[&run.as_uuid()],
            )
            .await
            .unwrap();
        row.get::<_, chrono::DateTime<chrono::Utc>>(0)
    };
    // Renewed until its expiry moved a whole term past the first: the
    // lease has outlived the term it was taken for. (Counting three
    // renewals of a third of a term each fell short by a fraction of a
    // millisecond when the heartbeats came early.)
    let first = expiry().await;
    let mut last = first;
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while last - first < chrono::Duration::milliseconds(300) {
        assert!(tokio::time::Instant::now() < deadline, "never renewed");
        tokio::time::sleep(Duration::from_millis(20)).await;
        last = last.max(expiry().await);
    }
    let other = store_with(&url, Duration::from_millis(300)).await;
    assert_locked(other.lock(run).await, run, "a renewed lease");
    writer.append(run, &[warning(run, 2)]).await.unwrap();
}

/// A writer that writes nothing (an agent thinking for minutes) still
/// learns that its run was taken over: its heartbeat finds the lease gone
/// and its lock says so, for the run to stop its agents at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heartbeat_that_finds_the_lease_taken_tells_the_lock() {
    use application::testing::store_conformance::{PATIENCE, run_with};
    let Some(url) = fresh_database().await else {
        return;
    };
    let zombie = store_with(&url, Duration::from_millis(300)).await;
    let (run, lock) = run_with(&zombie, 1).await;
    expire(&zombie, run).await;
    let heir = store_with(&url, Duration::from_secs(60)).await;
    let _taken = heir.lock(run).await.unwrap();
    tokio::time::timeout(PATIENCE, lock.lost())
        .await
        .expect("the heartbeat tells the lock it was lost");
    assert!(heir.has_writer(run).await.unwrap());
}

/// A database of schema version 3 (snapshots in the runs' rows) is brought
/// to this one with every snapshot where the store now reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_schema_keeps_its_snapshots_across_the_migration() {
    use application::testing::store_conformance::{new_run, snapshot};
    let Some(url) = fresh_database().await else {
        return;
    };
    let (client, connection) = tokio_postgres::connect(&url, NoTls).await.unwrap();
    tokio::spawn(connection);
    for migration in &schema::MIGRATIONS[..3] {
        client.batch_execute(migration).await.unwrap();
    }
    client
        .batch_execute(
            "CREATE TABLE awr_schema (version integer NOT NULL); INSERT INTO awr_schema VALUES (3)",
        )
        .await
        .unwrap();
    let run = new_run();
    let saved = snapshot(run, 0, domain::RunStatus::Paused);
    client
        .execute(
            "INSERT INTO awr_runs (run_id, status, snapshot, snapshot_offset) VALUES ($1, 'paused', $2, 0)",
            &[&run.as_uuid(), &saved.to_json_string().unwrap()],
        )
        .await
        .unwrap();
    let store = PgRunStore::open_with(&url, config()).await.unwrap();
    assert_eq!(
        store.database().schema_version().await.unwrap(),
        PG_SCHEMA_VERSION
    );
    assert_eq!(store.load_snapshot(run).await.unwrap(), Some(saved));
}

/// A lock whose lease was lost is still held by its task until dropped:
/// the instance hands out no second lock of the run meanwhile, which
/// would let both write under the new epoch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lock_keeps_a_second_lock_of_its_instance_out_until_dropped() {
    use application::testing::store_conformance::{assert_locked, run_with, warning};
    let Some(url) = fresh_database().await else {
        return;
    };
    let first = store_with(&url, Duration::from_secs(60)).await;
    let (run, lost) = run_with(&first, 1).await;
    expire(&first, run).await;
    let heir = store_with(&url, Duration::from_secs(60)).await;
    heir.lock(run).await.unwrap().release().await;
    assert_lost(
        first.append(run, &[warning(run, 2)]).await,
        run,
        "the lost lock",
    );
    assert_locked(
        first.lock(run).await,
        run,
        "a second lock beside the lost one",
    );
    drop(lost);
    let again = first.lock(run).await.unwrap();
    first.append(run, &[warning(run, 2)]).await.unwrap();
    drop(again);
}

/// A flush that finds the run's log shorter than this writer's appends
/// left it (the server lost commits it had not synced) fails rather than
/// pass them for durable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flush_that_finds_appends_lost_fails() {
    use application::testing::store_conformance::{run_with, warning};
    let Some(url) = fresh_database().await else {
        return;
    };
    let store = store_with(&url, Duration::from_secs(60)).await;
    let (run, _lock) = run_with(&store, 1).await;
    store.flush(run).await.unwrap();
    store.append(run, &[warning(run, 2)]).await.unwrap();
    // What a crash before the server's sync leaves: the append undone.
    let client = store.database().client().await.unwrap();
    client
        .batch_execute(&format!(
            "DELETE FROM awr_events WHERE run_id = '{run}' AND \"offset\" = 2; \
             UPDATE awr_runs SET next_offset = 2 WHERE run_id = '{run}'"
        ))
        .await
        .unwrap();
    let lost = store.flush(run).await.unwrap_err();
    assert!(lost.to_string().contains("lost appends"), "{lost}");
}

//! Tests of the SQLite store: the conformance suite, and what only it has
//! (schema versions, its files).

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::Duration;

use application::ports::RunStore;
use application::testing::store_conformance::{StoreHarness, run_with, snapshot};
use domain::{RunId, RunStatus};

use super::*;

fn config() -> SqliteStoreConfig {
    SqliteStoreConfig {
        follow_poll: Duration::from_millis(10),
        ..SqliteStoreConfig::default()
    }
}

/// A database in a temporary directory; `another` opens it again, with its
/// own connections and locks, as another process would.
struct Sqlite {
    dir: tempfile::TempDir,
    store: Arc<SqliteRunStore>,
}

impl Sqlite {
    fn db(&self) -> PathBuf {
        self.dir.path().join("runs.db")
    }
}

impl StoreHarness for Sqlite {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store =
            Arc::new(SqliteRunStore::open_with(dir.path().join("runs.db"), config()).unwrap());
        Self { dir, store }
    }
    fn store(&self) -> Arc<dyn RunStore> {
        self.store.clone()
    }
    fn another(&self) -> Option<Arc<dyn RunStore>> {
        Some(Arc::new(
            SqliteRunStore::open_with(self.db(), config()).unwrap(),
        ))
    }
    /// An append is one transaction: a crash leaves all of it or none.
    fn tear_tail(&self, _run: RunId) -> bool {
        false
    }
    fn corrupt_event(&self, run: RunId, offset: u64) -> bool {
        let conn = Connection::open(self.db()).unwrap();
        let changed = conn
            .execute(
                "UPDATE run_events SET json = '{this is not json' WHERE run_id = ?1 AND \"offset\" = ?2",
                params![run.to_string(), offset as i64],
            )
            .unwrap();
        assert_eq!(changed, 1);
        true
    }
    fn bad_event_place(&self, run: RunId, offset: u64) -> String {
        format!("runs.db events row (run {run}, offset {offset})")
    }
}

/// `column` of each of `run`'s rows of `run_events`, in the order of its log.
fn column_of<T: rusqlite::types::FromSql>(conn: &Connection, column: &str, run: RunId) -> Vec<T> {
    conn.prepare(&format!(
        "SELECT {column} FROM run_events WHERE run_id = ?1 ORDER BY \"offset\""
    ))
    .unwrap()
    .query_map([run.to_string()], |row| row.get(0))
    .unwrap()
    .collect::<Result<_, _>>()
    .unwrap()
}

mod conformance {
    application::store_conformance!(super::Sqlite);
}

#[test]
fn a_database_from_a_newer_awr_is_refused_naming_the_file_and_both_versions() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.db");
    drop(SqliteRunStore::open(&db).unwrap());
    let conn = Connection::open(&db).unwrap();
    conn.pragma_update(None, "user_version", SCHEMA_VERSION + 5)
        .unwrap();
    drop(conn);
    let err = SqliteRunStore::open(&db).unwrap_err();
    assert!(matches!(err, SqliteOpenError::Newer { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains(&db.display().to_string()), "{message}");
    assert!(
        message.contains(&format!("schema version {}", SCHEMA_VERSION + 5)),
        "{message}"
    );
    assert!(
        message.contains(&format!("knows ({SCHEMA_VERSION})")),
        "{message}"
    );
}

/// The `column` of run `run`'s row.
pub(super) fn cell<T: rusqlite::types::FromSql>(
    store: &SqliteRunStore,
    column: &str,
    run: RunId,
) -> T {
    lock(&store.inner.reader)
        .query_row(
            &format!("SELECT {column} FROM runs WHERE run_id = ?1"),
            [run.to_string()],
            |row| row.get(0),
        )
        .unwrap()
}

/// A database named through a symlink has its WAL beside the real file,
/// and a flush syncs that file: not a file beside the link (a stray one
/// there would be synced instead, and the commits left unsynced), nor a
/// marker commit for want of one.
#[tokio::test]
async fn a_flush_syncs_the_wal_beside_the_real_file() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real/runs.db");
    drop(SqliteRunStore::open(&real).unwrap());
    let link = dir.path().join("link.db");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    std::fs::write(dir.path().join("link.db-wal"), b"stray").unwrap();
    let store = SqliteRunStore::open(&link).unwrap();
    let (run, _held) = run_with(&store, 2).await;
    store.flush(run).await.unwrap();
    let marks: i64 = lock(&store.inner.reader)
        .query_row("SELECT n FROM sync_marks WHERE id = 1", [], |r| r.get(0))
        .unwrap();
    assert_eq!(marks, 0, "synced without a marker commit");
    let synced = lock(&store.inner.wal)
        .as_ref()
        .map(|f| std::os::unix::fs::MetadataExt::ino(&f.metadata().unwrap()));
    let real_wal = std::fs::metadata(dir.path().join("real/runs.db-wal")).unwrap();
    assert_eq!(synced, Some(std::os::unix::fs::MetadataExt::ino(&real_wal)));
}

/// A runs row whose `lock_slot` no key can hold (edited by hand, or
/// damaged) reaches no other run's events: a slot past 2^32 would wrap
/// onto another run's range. Reading, locking and deleting the run say it
/// is damaged, naming it, and the other run keeps its whole log.
#[tokio::test]
async fn a_slot_out_of_range_reaches_no_other_runs_events() {
    use application::ports::EventFilter;
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteRunStore::open(dir.path().join("runs.db")).unwrap();
    let (a, held) = run_with(&store, 3).await;
    drop(held);
    let (b, held) = run_with(&store, 0).await;
    drop(held);
    let slot_of_a = cell::<i64>(&store, "lock_slot", a);
    for bad in [slot_of_a + (1 << 32), i64::MAX, i64::MIN, 0, -1] {
        lock(&store.inner.writer)
            .execute(
                "UPDATE runs SET lock_slot = ?2 WHERE run_id = ?1",
                rusqlite::params![b.to_string(), bad],
            )
            .unwrap();
        let damaged = |what: &str, e: StoreError| {
            assert!(
                matches!(&e, StoreError::Corrupt(m) if m.contains(&b.to_string())),
                "{what} with slot {bad}: {e:?}"
            );
        };
        damaged("read", store.read(b, 0, 10).await.unwrap_err());
        damaged("last_offset", store.last_offset(b).await.unwrap_err());
        let all = EventFilter::default();
        damaged(
            "read_matching",
            store.read_matching(b, 0, &all, 10).await.unwrap_err(),
        );
        damaged("lock", store.lock(b).await.unwrap_err());
        damaged("delete_run", store.delete_run(b).await.unwrap_err());
        assert_eq!(store.read(a, 0, 10).await.unwrap().len(), 3, "slot {bad}");
    }
}

/// Rows of `runs` another program wrote: one whose `run_id` is not a run
/// id (not even text) is skipped by the listings, which list the others; a
/// run whose other columns have odd types is listed, what cannot be read of
/// it unknown.
#[tokio::test]
async fn odd_runs_rows_are_skipped_or_listed_as_unknown() {
    use application::ports::RunQuery;
    use application::testing::store_conformance::new_run;
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteRunStore::open(dir.path().join("runs.db")).unwrap();
    let (run, _held) = run_with(&store, 1).await;
    let odd = new_run();
    lock(&store.inner.writer)
        .execute(
            "INSERT INTO runs (run_id, created_at, status, lock_slot) \
             VALUES (x'00ff', 0, 'running', 999), ('not a run', 0, 'running', 998), \
             (?1, 0, 7, 997)",
            [odd.to_string()],
        )
        .unwrap();
    lock(&store.inner.writer)
        .execute(
            "UPDATE runs SET workflow = x'01', started_at = 'noon', parent_run_id = 3 \
             WHERE run_id = ?1",
            [odd.to_string()],
        )
        .unwrap();
    let mut listed = store.list_runs().await.unwrap();
    listed.sort();
    let mut expected = vec![run, odd];
    expected.sort();
    assert_eq!(listed, expected);
    let found = store.query_runs(&RunQuery::default()).await.unwrap();
    assert_eq!(found.len(), 2, "{found:?}");
    let odd = found.iter().find(|r| r.run_id == odd).unwrap();
    assert_eq!(
        (odd.status, &odd.workflow, odd.started_at, odd.parent),
        (None, &None, None, None)
    );
}

#[test]
fn opening_applies_the_migrations_once_and_sets_the_version() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("deep/dir/runs.db");
    drop(SqliteRunStore::open(&db).unwrap());
    // A second open finds the schema in place and applies nothing.
    drop(SqliteRunStore::open(&db).unwrap());
    let conn = Connection::open(&db).unwrap();
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    let mode: String = conn
        .pragma_query_value(None, "journal_mode", |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&db), 0o600);
    assert_eq!(mode(db.parent().unwrap()), 0o700);
}

#[test]
fn open_existing_refuses_a_missing_database() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("none.db");
    let err = SqliteRunStore::open_existing(&db).unwrap_err();
    assert!(err.to_string().contains("none.db"), "{err}");
    assert!(!db.exists(), "nothing created");
}

/// The snapshot fills the run's row, which listing and queries read.
#[tokio::test]
async fn a_snapshot_fills_the_runs_row() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.db");
    let store = SqliteRunStore::open(&db).unwrap();
    let (run, _lock) = run_with(&store, 2).await;
    store
        .save_snapshot(&snapshot(run, 2, RunStatus::Running))
        .await
        .unwrap();
    let conn = Connection::open(&db).unwrap();
    let (status, workflow): (String, String) = conn
        .query_row(
            "SELECT status, workflow FROM runs WHERE run_id = ?1",
            [run.to_string()],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((status.as_str(), workflow.as_str()), ("running", "flow"));
    let types: Vec<String> = column_of(&conn, "type", run);
    assert_eq!(types, ["warning", "warning"]);
}

/// Every policy keeps the contract, and what a flush made durable is there
/// when the database is opened again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_sync_policy_keeps_the_contract() {
    for sync in [
        SyncPolicy::Always,
        SyncPolicy::StepBoundary,
        SyncPolicy::Never,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("runs.db");
        let store = Arc::new(
            SqliteRunStore::open_with(&db, SqliteStoreConfig { sync, ..config() }).unwrap(),
        );
        let mut runs = Vec::new();
        for _ in 0..4 {
            runs.push(run_with(&*store, 0).await);
        }
        let writers = runs.iter().map(|(run, _)| {
            let (store, run) = (Arc::clone(&store), *run);
            tokio::spawn(async move {
                for o in 1..=20 {
                    store
                        .append(
                            run,
                            &[application::testing::store_conformance::warning(run, o)],
                        )
                        .await
                        .unwrap();
                    if o % 5 == 0 {
                        store.flush(run).await.unwrap();
                    }
                }
            })
        });
        for w in futures::future::join_all(writers).await {
            w.unwrap();
        }
        let synced = store.inner.synced.load(Ordering::Acquire);
        let committed = store.inner.committed.load(Ordering::Acquire);
        if sync == SyncPolicy::StepBoundary {
            assert_eq!(synced, committed, "the last flush covered every commit");
        } else {
            assert_eq!(synced, 0, "{sync:?} never syncs by a flush");
        }
        drop(runs);
        let reopened = SqliteRunStore::open(&db).unwrap();
        for run in reopened.list_runs().await.unwrap() {
            assert_eq!(reopened.last_offset(run).await.unwrap(), 20, "{sync:?}");
        }
    }
}

/// A connection that cannot migrate reads only this build's schema: an
/// older one is named as such (it must be opened once where it can be
/// written), a newer one as newer.
#[test]
fn a_read_only_database_must_have_this_builds_schema() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.db");
    drop(SqliteRunStore::open(&db).unwrap());
    let conn = Connection::open(&db).unwrap();
    assert!(super::schema::check(&conn, &db).is_ok());
    for (version, says) in [(SCHEMA_VERSION - 1, "older"), (SCHEMA_VERSION + 1, "newer")] {
        conn.pragma_update(None, "user_version", version).unwrap();
        let err = super::schema::check(&conn, &db).unwrap_err().to_string();
        assert!(err.contains(says) && err.contains("runs.db"), "{err}");
    }
}

/// The `immutable` URI names the very file, whatever its path holds.
#[test]
fn the_immutable_uri_escapes_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("a?b#c%20 d.db");
    drop(SqliteRunStore::open(&db).unwrap());
    use rusqlite::OpenFlags;
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI;
    let conn = Connection::open_with_flags(super::connect::immutable_uri(&db), flags).unwrap();
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    assert!(!dir.path().join("a").exists(), "no file of a cut path");
}

/// An append that fails inside its transaction (here a row a rogue writer
/// put where the next event goes) is a conflict naming the database, the
/// run and the offset; it rolls back, leaves the writer connection free
/// for the next transaction, and the writer reads where the log ends again.
#[tokio::test]
async fn a_failed_append_rolls_back_and_the_writer_goes_on() {
    use application::testing::store_conformance::{warning, warnings};
    let h = <Sqlite as StoreHarness>::new();
    let store = h.store();
    let (run, _lock) = run_with(&*store, 1).await;
    let rogue = Connection::open(h.db()).unwrap();
    rogue
        .execute(
            "INSERT INTO run_events (id, run_id, \"offset\", type, json) \
             SELECT (lock_slot << 32) | 2, run_id, 2, 'warning', '{}' FROM runs WHERE run_id = ?1",
            [run.to_string()],
        )
        .unwrap();
    let err = store.append(run, &warnings(run, 2..=3)).await.unwrap_err();
    assert!(matches!(err, StoreError::Conflict(_)), "{err:?}");
    let err = err.to_string();
    assert!(
        err.contains("runs.db") && err.contains(&run.to_string()) && err.contains("offset 2"),
        "{err}"
    );
    // Nothing of the batch stayed; the rogue row is all there is past 1.
    let offsets: Vec<i64> = column_of(&rogue, "\"offset\"", run);
    assert_eq!(offsets, [1, 2]);
    // No transaction was left open on the writer connection.
    let (other, _other_lock) = run_with(&*store, 0).await;
    store.append(other, &[warning(other, 1)]).await.unwrap();
    assert_eq!(store.last_offset(other).await.unwrap(), 1);
    // The writer forgot where it thought the log ended: it continues the
    // log as stored.
    store.append(run, &[warning(run, 3)]).await.unwrap();
    assert_eq!(store.last_offset(run).await.unwrap(), 3);
}

/// A database at schema version 6 (events keyed by `(run_id, offset)`)
/// is migrated at open: two runs whose appends interleaved, and an event
/// row whose run has no `runs` row, are all read back in order, found by
/// type, and continued by new appends; the lock slots go on growing.
#[tokio::test]
async fn a_version_6_database_is_migrated_without_losing_an_event() {
    use application::ports::EventFilter;
    use application::testing::store_conformance::{new_run, warning};
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.db");
    let (a, b, orphan) = (new_run(), new_run(), new_run());
    {
        let conn = Connection::open(&db).unwrap();
        for migration in &schema::MIGRATIONS[..6] {
            conn.execute_batch(migration).unwrap();
        }
        conn.pragma_update(None, "user_version", 6).unwrap();
        for (run, slot) in [(a, 1), (b, 2)] {
            conn.execute(
                "INSERT INTO runs (run_id, created_at, status, lock_slot) VALUES (?1, 0, 'running', ?2)",
                params![run.to_string(), slot],
            )
            .unwrap();
        }
        conn.execute("UPDATE writer_slots SET last = 2", [])
            .unwrap();
        // Interleaved, as two runs appending at once leave them.
        for (run, offset) in [(a, 1), (b, 1), (a, 2), (orphan, 1), (b, 2), (a, 3)] {
            let event = warning(run, offset);
            conn.execute(
                "INSERT INTO events (run_id, \"offset\", type, node_id, json, ts) \
                 VALUES (?1, ?2, ?3, NULL, ?4, 0)",
                params![
                    run.to_string(),
                    offset as i64,
                    event.kind.type_name(),
                    event.to_json().unwrap()
                ],
            )
            .unwrap();
        }
    }
    // A connection of an older awr, open across the upgrade.
    let older = Connection::open(&db).unwrap();
    let store = SqliteRunStore::open(&db).unwrap();
    // Its appends fail, rather than land in another run's range.
    let err = older
        .execute(
            "INSERT INTO events (run_id, \"offset\", type, json) VALUES (?1, 4, 'warning', '{}')",
            [a.to_string()],
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("no such table: events"), "{err}");
    let offsets = |events: Vec<domain::RuntimeEvent>| -> Vec<u64> {
        events.iter().map(|e| e.offset.get()).collect()
    };
    assert_eq!(offsets(store.read(a, 0, 10).await.unwrap()), [1, 2, 3]);
    assert_eq!(offsets(store.read(b, 1, 10).await.unwrap()), [2]);
    assert_eq!(offsets(store.read(orphan, 0, 10).await.unwrap()), [1]);
    assert_eq!(store.last_offset(a).await.unwrap(), 3);
    let warnings = EventFilter {
        types: vec!["warning".into()],
        ..EventFilter::default()
    };
    let found = store.read_matching(a, 1, &warnings, 10).await.unwrap();
    assert_eq!(offsets(found), [2, 3]);
    {
        let _lock = store.lock(a).await.unwrap();
        store.append(a, &[warning(a, 4)]).await.unwrap();
    }
    assert_eq!(offsets(store.read(a, 2, 10).await.unwrap()), [3, 4]);
    // The orphan's new row took a slot of its own, given out: the next
    // run's is past every other.
    let (c, _lock) = run_with(&store, 2).await;
    let conn = Connection::open(&db).unwrap();
    let slot_of = |run: RunId| -> i64 {
        conn.query_row(
            "SELECT lock_slot FROM runs WHERE run_id = ?1",
            [run.to_string()],
            |row| row.get(0),
        )
        .unwrap()
    };
    assert!(slot_of(orphan) > 2, "{}", slot_of(orphan));
    assert!(
        slot_of(c) > slot_of(orphan),
        "{} {}",
        slot_of(c),
        slot_of(orphan)
    );
    assert_eq!(offsets(store.read(c, 0, 10).await.unwrap()), [1, 2]);
}

/// The keys are checked: an event past the 32 bits of offset a key holds
/// is refused, naming the database and the run, and nothing is written.
#[tokio::test]
async fn an_offset_beyond_a_keys_range_is_refused() {
    let h = <Sqlite as StoreHarness>::new();
    let run = application::testing::store_conformance::new_run();
    let path = h.db();
    let err = rows::event_key(&path, run, 1, u64::from(u32::MAX) + 1)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("runs.db") && err.contains(&run.to_string()),
        "{err}"
    );
    assert!(rows::event_key(&path, run, 1, 0).is_err());
    assert_eq!(
        rows::event_key(&path, run, 3, 5).unwrap(),
        (3 << 32) | 5,
        "the slot above the offset"
    );
}

/// A version 6 database holding what schema version 7 cannot key (an
/// event at offset 0, which no awr wrote) is refused at open, naming the
/// database, the run and the offset, and left as it was.
#[test]
fn a_version_6_database_with_an_unkeyable_event_is_refused_and_left_as_it_was() {
    use application::testing::store_conformance::{new_run, warning};
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.db");
    let run = new_run();
    {
        let conn = Connection::open(&db).unwrap();
        for migration in &schema::MIGRATIONS[..6] {
            conn.execute_batch(migration).unwrap();
        }
        conn.pragma_update(None, "user_version", 6).unwrap();
        conn.execute(
            "INSERT INTO runs (run_id, created_at, lock_slot) VALUES (?1, 0, 1)",
            [run.to_string()],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO events (run_id, \"offset\", type, json) VALUES (?1, 0, 'warning', ?2)",
            params![run.to_string(), warning(run, 1).to_json().unwrap()],
        )
        .unwrap();
    }
    let err = SqliteRunStore::open(&db).unwrap_err().to_string();
    assert!(
        err.contains("runs.db") && err.contains(&run.to_string()) && err.contains("offset 0"),
        "{err}"
    );
    let conn = Connection::open(&db).unwrap();
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |row| row.get(0))
        .unwrap();
    assert_eq!(version, 6);
    let rows: i64 = conn
        .query_row("SELECT count(*) FROM events", [], |row| row.get(0))
        .unwrap();
    assert_eq!(rows, 1);
}

//! The SQLite store's one writer per run: its lock across names and
//! processes, its writer's record, and letting go of a run.

use std::path::Path;
use std::time::Duration;

use application::ports::RunStore;
use application::testing::store_conformance::run_with;
use domain::RunId;

use super::tests::cell;
use super::*;

/// Makes `run`'s row name a dead writer while `store` holds its byte: what
/// a writer that died leaves while a process it started holds the lock.
fn record_dead_writer(store: &SqliteRunStore, run: RunId) {
    let namespace = crate::store::file::holder::pid_namespace().unwrap();
    let dead = crate::store::file::holder::record(u32::MAX - 1, 1, namespace);
    lock(&store.inner.writer)
        .execute(
            "UPDATE runs SET writer = ?2 WHERE run_id = ?1",
            params![run.to_string(), dead],
        )
        .unwrap();
}

/// The database named through a symlink is the same database, with the
/// same locks: a second writer of a run is refused whatever name it uses.
#[tokio::test]
async fn a_database_named_through_a_symlink_shares_its_locks() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("real.db");
    let alias = dir.path().join("alias.db");
    let store = SqliteRunStore::open(&db).unwrap();
    std::os::unix::fs::symlink(&db, &alias).unwrap();
    let other = SqliteRunStore::open(&alias).unwrap();
    let run = RunId::new(uuid::Uuid::new_v4()).unwrap();
    let _writer = store.create_run(run).await.unwrap();
    assert!(other.has_writer(run).await.unwrap(), "seen as written");
    assert!(
        matches!(other.lock(run).await, Err(StoreError::Locked(_))),
        "a second writer through the alias"
    );
}

/// A run's byte held while its record names a dead writer is held by a
/// process that writer started (between its fork and its exec), not by a
/// writer: the probe says no writer, and a locker waits for that process
/// to let go, then says who. A record naming a live writer is refused at
/// once. A new run makes no file: the writers' one lock file holds them all.
#[tokio::test]
async fn a_dead_writers_byte_is_no_writer_and_a_live_ones_is() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.db");
    let (holder, other) = (
        SqliteRunStore::open(&db).unwrap(),
        SqliteRunStore::open(&db).unwrap(),
    );
    let run = RunId::new(uuid::Uuid::new_v4()).unwrap();
    let _held = holder.create_run(run).await.unwrap();
    assert!(other.has_writer(run).await.unwrap());
    assert!(matches!(other.lock(run).await, Err(StoreError::Locked(_))));

    record_dead_writer(&holder, run);
    assert!(
        !other.has_writer(run).await.unwrap(),
        "a dead writer's byte"
    );
    let started = std::time::Instant::now();
    match other.lock(run).await {
        Err(StoreError::Locked(why)) => assert!(why.contains("is dead"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert!(started.elapsed() >= crate::store::file::lock::ORPHAN_PATIENCE);

    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| !name.starts_with("runs.db-wal") && !name.starts_with("runs.db-shm"))
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

/// A locker waiting out a dead writer's leftover holds nothing of the
/// instance's meanwhile: another run of the same instance is created,
/// written, let go and locked again while it waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_waiting_for_a_leftover_stalls_no_other_run() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.db");
    let holder = SqliteRunStore::open(&db).unwrap();
    let other = std::sync::Arc::new(SqliteRunStore::open(&db).unwrap());
    let stuck = RunId::new(uuid::Uuid::new_v4()).unwrap();
    let _held = holder.create_run(stuck).await.unwrap();
    record_dead_writer(&holder, stuck);

    let waiting = tokio::spawn({
        let other = std::sync::Arc::clone(&other);
        async move { other.lock(stuck).await.map(drop) }
    });
    // The locker is waiting once it has met the leftover.
    while other.inner.leftover_waits.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    let (run, run_lock) = run_with(&*other, 3).await;
    drop(run_lock);
    let again = other.lock(run).await.unwrap();
    assert_eq!(other.last_offset(run).await.unwrap(), 3);
    assert!(
        !waiting.is_finished(),
        "the other run waited for the locker of a leftover's run"
    );
    drop(again);
    match waiting.await.unwrap() {
        Err(StoreError::Locked(why)) => assert!(why.contains("is dead"), "{why}"),
        other => panic!("{other:?}"),
    }
}

/// Lock slots only grow: a deleted run's byte, still held by a process
/// its writer left, is never a new run's. A released run keeps no writer
/// record (only a writer that died holding it leaves one).
#[tokio::test]
async fn slots_only_grow_and_a_release_clears_the_record() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.db");
    let store = SqliteRunStore::open(&db).unwrap();
    let slot_of = |run| cell::<i64>(&store, "lock_slot", run);
    let record_of = |run| cell::<Option<String>>(&store, "writer", run);
    let (first, held) = run_with(&store, 1).await;
    assert!(record_of(first).is_some(), "its writer is on record");
    drop(held);
    assert_eq!(record_of(first), None, "released");
    let first_slot = slot_of(first);
    store.delete_run(first).await.unwrap();
    // A process the deleted run's writer started still holds its byte.
    let leftover = writers::Writers::beside(&std::fs::canonicalize(&db).unwrap());
    assert!(leftover.try_lock(first_slot).unwrap());
    let (second, _held) = run_with(&store, 1).await;
    assert!(slot_of(second) > first_slot);
}

/// The append that pauses or settles a run clears its writer's record in
/// its own transaction, so letting go of the run writes nothing more; a
/// run that goes on under the same lock is on record again. The listing
/// columns follow each status.
#[tokio::test]
async fn the_append_that_ends_a_writers_work_clears_its_record() {
    use application::testing::store_conformance::{completed, event, new_run, started};
    use domain::EventKind;

    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.db");
    let store = SqliteRunStore::open(&db).unwrap();
    let record_of = |run| cell::<Option<String>>(&store, "writer", run);
    let status_of = |run| cell::<String>(&store, "status", run);
    let run = new_run();
    let held = store.create_run(run).await.unwrap();
    store
        .append(run, &[started(run, 1, "flow", None, 3)])
        .await
        .unwrap();
    let mine = crate::store::file::holder::this_record().map(str::to_owned);
    assert!(mine.is_some(), "this process has a record");
    assert_eq!(record_of(run), mine, "running: on record");
    let paused = EventKind::FlowPaused {
        reason: None,
        waiting: false,
    };
    store.append(run, &[event(run, 2, paused)]).await.unwrap();
    assert_eq!((status_of(run), record_of(run)), ("paused".into(), None));
    // Another instance finds the byte held and no record: held.
    let other = SqliteRunStore::open(&db).unwrap();
    assert!(
        other.has_writer(run).await.unwrap(),
        "held without a record"
    );
    assert!(matches!(other.lock(run).await, Err(StoreError::Locked(_))));
    let resumed = EventKind::FlowResumed {
        message: None,
        by: None,
    };
    store.append(run, &[event(run, 3, resumed)]).await.unwrap();
    assert_eq!((status_of(run), record_of(run)), ("running".into(), mine));
    store.append(run, &[completed(run, 4)]).await.unwrap();
    assert_eq!((status_of(run), record_of(run)), ("completed".into(), None));
    assert_eq!(cell::<String>(&store, "workflow", run), "flow");
    assert_eq!(
        cell::<Option<i64>>(&store, "started_at", run),
        Some(application::testing::store_conformance::at_minute(3).as_millis())
    );
    // Letting go writes nothing: with another process writing, a write
    // would have to wait, and the busy handler would hear of it.
    lock(&store.inner.writer)
        .busy_handler(Some(release_would_wait))
        .unwrap();
    let elsewhere = Connection::open(&db).unwrap();
    elsewhere.execute_batch("BEGIN IMMEDIATE").unwrap();
    drop(held);
    elsewhere.execute_batch("COMMIT").unwrap();
    assert!(!RELEASE_WAITED.load(std::sync::atomic::Ordering::SeqCst));
    assert!(!other.has_writer(run).await.unwrap());
}

/// The POSIX record locks this process holds on `file` (`/proc/locks`,
/// read without opening `file`: closing a descriptor of it would drop them).
fn posix_locks_on(file: &Path) -> usize {
    use std::os::unix::fs::MetadataExt;
    let inode = std::fs::metadata(file).unwrap().ino();
    let pid = std::process::id().to_string();
    std::fs::read_to_string("/proc/locks")
        .unwrap()
        .lines()
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.get(1) == Some(&"POSIX")
                && fields.get(4) == Some(&pid.as_str())
                && fields
                    .get(5)
                    .is_some_and(|at| at.ends_with(&format!(":{inode}")))
        })
        .count()
}

/// A second store of a database in this process leaves the first one's
/// locks in place. SQLite's are POSIX locks, which a process loses on a
/// file when it closes any descriptor of it; had opening the second store
/// closed one, another process would take itself for the database's last
/// connection, checkpoint and remove the WAL the first store still appends
/// to, and its flushed events would be lost to a crash.
#[test]
fn a_second_store_in_the_process_keeps_the_first_ones_locks() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.db");
    let first = SqliteRunStore::open(&db).unwrap();
    let held = posix_locks_on(&db);
    assert!(held > 0, "a store in WAL mode holds a lock on its database");
    let second = SqliteRunStore::open(&db).unwrap();
    assert_eq!(posix_locks_on(&db), held, "the first store's locks stay");
    drop(second);
    assert_eq!(posix_locks_on(&db), held);
    drop(first);
}

/// Set by [`release_would_wait`].
static RELEASE_WAITED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A busy handler that notes a write had to wait, and gives up.
fn release_would_wait(_: i32) -> bool {
    RELEASE_WAITED.store(true, std::sync::atomic::Ordering::SeqCst);
    false
}

/// Set by [`waits_for_the_lock`] once the writer connection waits.
static WRITER_WAITS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A busy handler that says when the writer waits, and keeps waiting.
fn waits_for_the_lock(_: i32) -> bool {
    WRITER_WAITS.store(true, std::sync::atomic::Ordering::SeqCst);
    std::thread::yield_now();
    true
}

/// A release whose clearing of the record waits for another process's
/// write keeps the run its own until the byte is let go: a lock taken by
/// this instance meanwhile is refused, not given a byte the release is
/// about to unlock (which would leave the run with no lock at all).
#[test]
fn a_lock_taken_while_a_release_waits_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs.db");
    let store = SqliteRunStore::open(&db).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (run, held) = rt.block_on(run_with(&store, 1));
    lock(&store.inner.writer)
        .busy_handler(Some(waits_for_the_lock))
        .unwrap();
    let elsewhere = Connection::open(&db).unwrap();
    elsewhere.execute_batch("BEGIN IMMEDIATE").unwrap();
    let release = std::thread::spawn(move || drop(held));
    while !WRITER_WAITS.load(std::sync::atomic::Ordering::SeqCst) {
        assert!(!release.is_finished(), "the release waited for nothing");
        std::thread::yield_now();
    }
    // The release waits inside its clearing of the record.
    let (tx, rx) = std::sync::mpsc::channel();
    let locker = {
        let store = store.clone();
        std::thread::spawn(move || {
            let locked = tokio::runtime::Runtime::new()
                .unwrap()
                .block_on(store.lock(run));
            let _ = tx.send(locked);
        })
    };
    let meanwhile = rx.recv_timeout(Duration::from_secs(30));
    elsewhere.execute_batch("COMMIT").unwrap();
    release.join().unwrap();
    locker.join().unwrap();
    assert!(
        matches!(meanwhile, Ok(Err(StoreError::Locked(_)))),
        "{meanwhile:?}"
    );
    lock(&store.inner.writer)
        .busy_timeout(BUSY_TIMEOUT)
        .unwrap();
    let again = rt.block_on(store.lock(run)).unwrap();
    let other = SqliteRunStore::open(&db).unwrap();
    assert!(rt.block_on(other.has_writer(run)).unwrap());
    drop(again);
}

//! One conformance suite for every `RunStore`: the contract of
//! `application::ports::RunStore`, checked the same way against each store.
//!
//! Each check is a generic async function taking a fresh [`Subject`]; the
//! `conformance!` invocation at the bottom runs every check against every
//! store. Adding a store (SQLite, PostgreSQL) is one line there plus a
//! factory function. File-store specifics (torn tails, the offset index,
//! another process following, file modes) are in `mod file_store`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use application::ports::{RunLock, RunStore, StoreError};
use domain::event::WorkflowRef;
use domain::{EventKind, Offset, RunId, RunSnapshot, RunStatus, RuntimeEvent, Timestamp};
use futures::StreamExt;
use infrastructure::{FileRunStore, FileStoreConfig, MemoryRunStore, SyncPolicy};
use serde_json::json;
use uuid::Uuid;

/// A store under test, with whatever must live as long as it (a temp dir).
struct Subject {
    store: Arc<dyn RunStore>,
    _dir: Option<tempfile::TempDir>,
}

fn memory() -> Subject {
    Subject {
        store: Arc::new(MemoryRunStore::new()),
        _dir: None,
    }
}

fn file() -> Subject {
    let dir = tempfile::tempdir().unwrap();
    let config = FileStoreConfig {
        follow_poll: Duration::from_millis(10),
        ..FileStoreConfig::default()
    };
    Subject {
        store: Arc::new(FileRunStore::open_with(dir.path(), config).unwrap()),
        _dir: Some(dir),
    }
}

/// Upper bound for anything that should happen "at once": generous so a
/// loaded CI machine does not flake, finite so a hung follower fails.
const PATIENCE: Duration = Duration::from_secs(10);

fn new_run() -> RunId {
    RunId::new(Uuid::new_v4()).unwrap()
}

fn event(run: RunId, offset: u64, kind: EventKind) -> RuntimeEvent {
    RuntimeEvent {
        id: Uuid::new_v4().to_string(),
        offset: Offset::new(offset).unwrap(),
        timestamp: Timestamp::from_millis(1_767_225_600_000 + offset as i64),
        run_id: run,
        node_id: None,
        node_run_id: None,
        kind,
        extra: Default::default(),
    }
}

fn warning(run: RunId, offset: u64) -> RuntimeEvent {
    event(
        run,
        offset,
        EventKind::Warning {
            message: format!("event {offset}"),
            details: None,
        },
    )
}

fn completed(run: RunId, offset: u64) -> RuntimeEvent {
    event(
        run,
        offset,
        EventKind::FlowCompleted {
            output: json!({"done": true}),
            duration_ms: 7,
        },
    )
}

fn warnings(run: RunId, offsets: std::ops::RangeInclusive<u64>) -> Vec<RuntimeEvent> {
    offsets.map(|o| warning(run, o)).collect()
}

fn offsets(events: &[RuntimeEvent]) -> Vec<u64> {
    events.iter().map(|e| e.offset.get()).collect()
}

/// A run holding offsets 1..=n (warnings), and its lock.
async fn run_with(store: &dyn RunStore, n: u64) -> (RunId, RunLock) {
    let run = new_run();
    let lock = store.create_run(run).await.unwrap();
    if n > 0 {
        store.append(run, &warnings(run, 1..=n)).await.unwrap();
    }
    (run, lock)
}

fn assert_conflict<T: std::fmt::Debug>(result: Result<T, StoreError>, what: &str) {
    assert!(
        matches!(result, Err(StoreError::Conflict(_))),
        "{what}: expected Conflict, got {result:?}"
    );
}

fn assert_not_found<T: std::fmt::Debug>(result: Result<T, StoreError>, run: RunId, what: &str) {
    assert!(
        matches!(result, Err(StoreError::NotFound(id)) if id == run),
        "{what}: expected NotFound({run}), got {result:?}"
    );
}

/// `Locked`, with a message that names `run`.
fn assert_locked<T: std::fmt::Debug>(result: Result<T, StoreError>, run: RunId, what: &str) {
    match result {
        Err(StoreError::Locked(message)) => {
            assert!(message.contains(&run.to_string()), "{what}: {message}");
        }
        other => panic!("{what}: expected Locked, got {other:?}"),
    }
}

fn snapshot(run: RunId, last_offset: u64, status: RunStatus) -> RunSnapshot {
    let mut s = RunSnapshot::new(run);
    s.workflow = WorkflowRef {
        extra: Default::default(),
        name: "flow".into(),
        hash: "sha256:00".into(),
    };
    s.status = status;
    s.last_offset = last_offset;
    s.state.insert("k".into(), json!([1, 2, 3]));
    s
}

// ---------------------------------------------------------------- checks

async fn create_twice_conflicts(s: Subject) {
    let run = new_run();
    let _lock = s.store.create_run(run).await.unwrap();
    assert_conflict(s.store.create_run(run).await, "second create");
    assert_eq!(s.store.last_offset(run).await.unwrap(), 0);
}

async fn offsets_must_continue_the_log(s: Subject) {
    let store = &*s.store;
    let run = new_run();
    let _lock = store.create_run(run).await.unwrap();
    assert_conflict(
        store.append(run, &[warning(run, 2)]).await,
        "first offset 2",
    );
    store.append(run, &warnings(run, 1..=3)).await.unwrap();
    store.append(run, &[warning(run, 4)]).await.unwrap();
    assert_conflict(store.append(run, &[warning(run, 6)]).await, "gap");
    assert_conflict(store.append(run, &[warning(run, 4)]).await, "duplicate");
    assert_conflict(store.append(run, &[warning(run, 1)]).await, "rewind");
    // A batch is all or nothing: a gap inside it stores none of it.
    let bad_batch = vec![warning(run, 5), warning(run, 7)];
    assert_conflict(store.append(run, &bad_batch).await, "gap inside a batch");
    // An event of another run does not belong in this log.
    let other = new_run();
    assert_conflict(
        store.append(run, &[warning(other, 5)]).await,
        "foreign event",
    );
    store.append(run, &[]).await.unwrap();
    assert_eq!(store.last_offset(run).await.unwrap(), 4);
    store.append(run, &warnings(run, 5..=6)).await.unwrap();
    let all = store.read(run, 0, 100).await.unwrap();
    assert_eq!(offsets(&all), vec![1, 2, 3, 4, 5, 6]);
}

async fn concurrent_appends_of_one_offset_admit_one(s: Subject) {
    let (run, _lock) = run_with(&*s.store, 0).await;
    let attempts = (0..8).map(|_| {
        let store = Arc::clone(&s.store);
        tokio::spawn(async move { store.append(run, &[warning(run, 1)]).await })
    });
    let results = futures::future::join_all(attempts).await;
    let ok = results.iter().filter(|r| matches!(r, Ok(Ok(_)))).count();
    assert_eq!(ok, 1, "{results:?}");
    assert_eq!(s.store.last_offset(run).await.unwrap(), 1);
}

async fn read_windows(s: Subject) {
    let store = &*s.store;
    let (run, _lock) = run_with(store, 10).await;
    let all = store.read(run, 0, usize::MAX).await.unwrap();
    assert_eq!(offsets(&all), (1..=10).collect::<Vec<_>>());
    assert_eq!(
        all,
        warnings(run, 1..=10)
            .into_iter()
            .zip(&all)
            .map(|(mut w, a)| {
                w.id.clone_from(&a.id);
                w
            })
            .collect::<Vec<_>>()
    );
    assert_eq!(
        offsets(&store.read(run, 4, 100).await.unwrap()),
        vec![5, 6, 7, 8, 9, 10]
    );
    assert_eq!(
        offsets(&store.read(run, 4, 3).await.unwrap()),
        vec![5, 6, 7]
    );
    assert_eq!(offsets(&store.read(run, 0, 1).await.unwrap()), vec![1]);
    assert_eq!(offsets(&store.read(run, 9, 5).await.unwrap()), vec![10]);
    assert!(store.read(run, 10, 5).await.unwrap().is_empty());
    assert!(store.read(run, 1_000, 5).await.unwrap().is_empty());
    assert!(
        store
            .read(run, u64::MAX, usize::MAX)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(store.read(run, 3, 0).await.unwrap().is_empty());
    let (empty, _empty_lock) = run_with(store, 0).await;
    assert!(store.read(empty, 0, 10).await.unwrap().is_empty());
}

async fn events_round_trip_exactly(s: Subject) {
    let store = &*s.store;
    let run = new_run();
    let _lock = store.create_run(run).await.unwrap();
    let mut first = warning(run, 1);
    first.node_id = Some(domain::NodeId::new("writer").unwrap());
    first.node_run_id = Some(domain::NodeRunId::new(Uuid::new_v4()));
    let written = vec![first, completed(run, 2)];
    store.append(run, &written).await.unwrap();
    assert_eq!(store.read(run, 0, 10).await.unwrap(), written);
}

async fn read_deep_in_a_long_log(s: Subject) {
    let store = &*s.store;
    let run = new_run();
    let _lock = store.create_run(run).await.unwrap();
    for start in (1..=5_000).step_by(500) {
        store
            .append(run, &warnings(run, start..=start + 499))
            .await
            .unwrap();
    }
    store.flush(run).await.unwrap();
    let got = store.read(run, 4_321, 3).await.unwrap();
    assert_eq!(offsets(&got), vec![4_322, 4_323, 4_324]);
    assert!(matches!(&got[0].kind, EventKind::Warning { message, .. } if message == "event 4322"));
    assert_eq!(
        offsets(&store.read(run, 4_999, 10).await.unwrap()),
        vec![5_000]
    );
    assert_eq!(store.last_offset(run).await.unwrap(), 5_000);
}

async fn last_offset_tracks_appends(s: Subject) {
    let store = &*s.store;
    let (run, _lock) = run_with(store, 0).await;
    assert_eq!(store.last_offset(run).await.unwrap(), 0);
    store.append(run, &warnings(run, 1..=3)).await.unwrap();
    assert_eq!(store.last_offset(run).await.unwrap(), 3);
    store.append(run, &[completed(run, 4)]).await.unwrap();
    assert_eq!(store.last_offset(run).await.unwrap(), 4);
}

async fn unknown_runs_are_not_found(s: Subject) {
    let store = &*s.store;
    let (_other, _other_lock) = run_with(store, 2).await;
    let run = new_run();
    assert_not_found(store.lock(run).await.map(|_| ()), run, "lock");
    assert_not_found(store.append(run, &[warning(run, 1)]).await, run, "append");
    assert_not_found(store.flush(run).await, run, "flush");
    assert_not_found(store.read(run, 0, 10).await, run, "read");
    assert_not_found(store.last_offset(run).await, run, "last_offset");
    assert_not_found(store.follow(run, 0).await.map(|_| ()), run, "follow");
    assert_not_found(
        store
            .save_snapshot(&snapshot(run, 0, RunStatus::Pending))
            .await,
        run,
        "save_snapshot",
    );
    assert_not_found(store.load_snapshot(run).await, run, "load_snapshot");
}

async fn snapshots_round_trip_and_overwrite(s: Subject) {
    let store = &*s.store;
    let (run, _lock) = run_with(store, 3).await;
    assert_eq!(store.load_snapshot(run).await.unwrap(), None);
    let first = snapshot(run, 2, RunStatus::Running);
    store.save_snapshot(&first).await.unwrap();
    assert_eq!(store.load_snapshot(run).await.unwrap(), Some(first));
    let second = snapshot(run, 3, RunStatus::Paused);
    store.save_snapshot(&second).await.unwrap();
    assert_eq!(store.load_snapshot(run).await.unwrap(), Some(second));
    // Snapshots are per run.
    let (other, _other_lock) = run_with(store, 0).await;
    assert_eq!(store.load_snapshot(other).await.unwrap(), None);
}

/// The size of `event` as its JSON line.
fn line_len(event: &RuntimeEvent) -> u64 {
    let mut line = Vec::new();
    event.write_json(&mut line).unwrap();
    line.len() as u64 + 1
}

/// What `append` and `save_snapshot` return: the size of what they were
/// given as encoded, large values included (the file store moves those to
/// blobs; the recorder's snapshot cadence weighs the whole).
async fn writes_report_their_encoded_size(s: Subject) {
    let store = &*s.store;
    let (run, _lock) = run_with(store, 0).await;
    assert_eq!(store.append(run, &[]).await.unwrap(), 0);
    let small = warnings(run, 1..=3);
    let expected: u64 = small.iter().map(line_len).sum();
    assert_eq!(store.append(run, &small).await.unwrap(), expected);
    let mut large = warning(run, 4);
    large.kind = EventKind::Warning {
        message: "x".repeat(200_000),
        details: None,
    };
    let reported = store.append(run, &[large.clone()]).await.unwrap();
    assert_eq!(reported, line_len(&large));
    let mut state = snapshot(run, 4, RunStatus::Running);
    assert_eq!(
        store.save_snapshot(&state).await.unwrap(),
        serde_json::to_vec(&state).unwrap().len() as u64
    );
    state.state.insert("big".into(), json!("y".repeat(200_000)));
    assert_eq!(
        store.save_snapshot(&state).await.unwrap(),
        serde_json::to_vec(&state).unwrap().len() as u64
    );
}

async fn list_runs_lists_every_run(s: Subject) {
    let store = &*s.store;
    assert!(store.list_runs().await.unwrap().is_empty());
    let (a, _a_lock) = run_with(store, 0).await;
    let (b, _b_lock) = run_with(store, 1).await;
    let (c, _c_lock) = run_with(store, 2).await;
    let mut created = vec![a, b, c];
    let mut listed = store.list_runs().await.unwrap();
    created.sort();
    listed.sort();
    assert_eq!(listed, created);
}

async fn flush_is_idempotent_and_shared(s: Subject) {
    let store = &*s.store;
    let (run, _lock) = run_with(store, 0).await;
    store.flush(run).await.unwrap();
    store.append(run, &warnings(run, 1..=5)).await.unwrap();
    store.flush(run).await.unwrap();
    store.flush(run).await.unwrap();
    store.append(run, &warnings(run, 6..=7)).await.unwrap();
    let flushes = (0..8).map(|_| store.flush(run));
    for result in futures::future::join_all(flushes).await {
        result.unwrap();
    }
    assert_eq!(store.last_offset(run).await.unwrap(), 7);
}

async fn follow_yields_history_then_live_then_ends(s: Subject) {
    let (run, _lock) = run_with(&*s.store, 3).await;
    let mut stream = s.store.follow(run, 1).await.unwrap();
    let mut seen = Vec::new();
    for _ in 0..2 {
        let next = tokio::time::timeout(PATIENCE, stream.next()).await.unwrap();
        seen.push(next.unwrap().unwrap().offset.get());
    }
    assert_eq!(seen, vec![2, 3]);
    let writer = {
        let store = Arc::clone(&s.store);
        tokio::spawn(async move {
            for o in 4..=6 {
                tokio::time::sleep(Duration::from_millis(5)).await;
                store.append(run, &[warning(run, o)]).await.unwrap();
            }
            store.append(run, &[completed(run, 7)]).await.unwrap();
        })
    };
    let rest: Vec<_> = tokio::time::timeout(PATIENCE, stream.collect::<Vec<_>>())
        .await
        .expect("follow must end after the terminal event");
    writer.await.unwrap();
    let rest: Vec<RuntimeEvent> = rest.into_iter().map(Result::unwrap).collect();
    assert_eq!(offsets(&rest), vec![4, 5, 6, 7]);
    assert!(rest[3].kind.is_terminal());
}

async fn follow_of_a_finished_run_ends_by_itself(s: Subject) {
    let store = &*s.store;
    let (run, _lock) = run_with(store, 3).await;
    store.append(run, &[completed(run, 4)]).await.unwrap();
    for (after, expected) in [
        (0, vec![1, 2, 3, 4]),
        (2, vec![3, 4]),
        (4, vec![]),
        (99, vec![]),
    ] {
        let stream = store.follow(run, after).await.unwrap();
        let got = tokio::time::timeout(PATIENCE, stream.collect::<Vec<_>>())
            .await
            .unwrap_or_else(|_| panic!("follow after {after} of a finished run must end"));
        let got: Vec<RuntimeEvent> = got.into_iter().map(Result::unwrap).collect();
        assert_eq!(offsets(&got), expected, "after {after}");
    }
}

async fn many_followers_see_everything(s: Subject) {
    let (run, _lock) = run_with(&*s.store, 0).await;
    let mut followers = Vec::new();
    for _ in 0..4 {
        let stream = s.store.follow(run, 0).await.unwrap();
        followers.push(tokio::spawn(async move {
            let events: Vec<_> = stream.collect().await;
            events
                .into_iter()
                .map(|e| e.unwrap().offset.get())
                .collect::<Vec<_>>()
        }));
    }
    for start in (1..=600).step_by(100) {
        s.store
            .append(run, &warnings(run, start..=start + 99))
            .await
            .unwrap();
        tokio::task::yield_now().await;
    }
    s.store.append(run, &[completed(run, 601)]).await.unwrap();
    for follower in followers {
        let seen = tokio::time::timeout(PATIENCE, follower)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(seen, (1..=601).collect::<Vec<_>>());
    }
}

async fn unknown_event_types_round_trip(s: Subject) {
    let store = &*s.store;
    let (run, _lock) = run_with(store, 1).await;
    let line = format!(
        r#"{{"id":"e2","offset":2,"timestamp":"2026-01-01T00:00:00.000Z","type":"future:thing","runId":"{run}","weird":{{"a":[1,2]}},"n":3}}"#
    );
    let future = RuntimeEvent::from_json(line.as_bytes()).unwrap();
    assert!(
        matches!(&future.kind, EventKind::Unknown { type_name, .. } if type_name == "future:thing")
    );
    store
        .append(run, std::slice::from_ref(&future))
        .await
        .unwrap();
    let back = store.read(run, 1, 10).await.unwrap();
    assert_eq!(back, vec![future]);
    let as_json: serde_json::Value = serde_json::from_str(&back[0].to_json().unwrap()).unwrap();
    let original: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(as_json, original);
}

async fn a_run_has_one_lock_at_a_time(s: Subject) {
    let store = &*s.store;
    let (run, created) = run_with(store, 2).await;
    assert_eq!(created.run_id(), run);
    assert_locked(store.lock(run).await, run, "a second lock");
    // Another run is another lock.
    let (_other, _other_lock) = run_with(store, 0).await;
    drop(created);
    let again = store.lock(run).await.unwrap();
    store.append(run, &[warning(run, 3)]).await.unwrap();
    assert_locked(store.lock(run).await, run, "a second lock, again");
    drop(again);
    let _third = store.lock(run).await.unwrap();
    assert_eq!(store.last_offset(run).await.unwrap(), 3);
}

async fn concurrent_lockers_get_one_lock(s: Subject) {
    let (run, created) = run_with(&*s.store, 0).await;
    drop(created);
    let attempts = (0..8).map(|_| {
        let store = Arc::clone(&s.store);
        tokio::spawn(async move { store.lock(run).await })
    });
    let results = futures::future::join_all(attempts).await;
    let won = results.iter().filter(|r| matches!(r, Ok(Ok(_)))).count();
    assert_eq!(won, 1, "{results:?}");
    for result in results {
        if let Err(e) = result.unwrap() {
            assert!(matches!(e, StoreError::Locked(_)), "{e:?}");
        }
    }
}

async fn writes_without_the_lock_are_refused_and_write_nothing(s: Subject) {
    let store = &*s.store;
    let (run, lock) = run_with(store, 2).await;
    let saved = snapshot(run, 2, RunStatus::Running);
    store.save_snapshot(&saved).await.unwrap();
    drop(lock);
    assert_locked(store.append(run, &[warning(run, 3)]).await, run, "append");
    assert_locked(
        store
            .save_snapshot(&snapshot(run, 3, RunStatus::Completed))
            .await,
        run,
        "save_snapshot",
    );
    // Nothing was written; reading needs no lock.
    assert_eq!(store.last_offset(run).await.unwrap(), 2);
    assert_eq!(offsets(&store.read(run, 0, 10).await.unwrap()), vec![1, 2]);
    assert_eq!(store.load_snapshot(run).await.unwrap(), Some(saved));
    let _lock = store.lock(run).await.unwrap();
    store.append(run, &[completed(run, 3)]).await.unwrap();
    let followed: Vec<_> = store.follow(run, 0).await.unwrap().collect().await;
    assert_eq!(followed.len(), 3);
}

async fn has_writer_tells_whether_the_run_is_locked(s: Subject) {
    let store = &*s.store;
    let (run, created) = run_with(store, 1).await;
    assert!(store.has_writer(run).await.unwrap(), "held since creation");
    // A probe takes nothing from the writer: it still writes.
    store.append(run, &[warning(run, 2)]).await.unwrap();
    drop(created);
    assert!(!store.has_writer(run).await.unwrap(), "released on drop");
    let again = store.lock(run).await.unwrap();
    assert!(store.has_writer(run).await.unwrap(), "locked again");
    drop(again);
    assert!(!store.has_writer(run).await.unwrap(), "released again");
    let unknown = new_run();
    assert_not_found(store.has_writer(unknown).await, unknown, "has_writer");
}

async fn probes_never_make_a_lock_fail(s: Subject) {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let (run, created) = run_with(&*s.store, 0).await;
    drop(created);
    let stop = Arc::new(AtomicBool::new(false));
    let probes = Arc::new(AtomicUsize::new(0));
    let prober = {
        let (store, stop, probes) = (Arc::clone(&s.store), Arc::clone(&stop), Arc::clone(&probes));
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                store.has_writer(run).await.unwrap();
                probes.fetch_add(1, Ordering::Relaxed);
                tokio::task::yield_now().await;
            }
        })
    };
    for attempt in 0..300 {
        // Every lock meets probes in flight: wait for one more before each.
        let seen = probes.load(Ordering::Relaxed);
        while probes.load(Ordering::Relaxed) == seen {
            tokio::task::yield_now().await;
        }
        match s.store.lock(run).await {
            Ok(lock) => drop(lock),
            Err(e) => panic!("lock {attempt} failed beside a probe: {e}"),
        }
    }
    stop.store(true, Ordering::Relaxed);
    prober.await.unwrap();
}

// ---------------------------------------------------------------- wiring

/// Expands to one `#[tokio::test]` per (store, check): `cargo test
/// store_conformance::file::read_windows` runs one of them.
macro_rules! conformance {
    (stores: [$($store:ident),* $(,)?], checks: $checks:tt) => {
        $( conformance!(@store $store, $checks); )*
    };
    (@store $store:ident, [$($check:ident),* $(,)?]) => {
        mod $store {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    super::$check(super::$store()).await;
                }
            )*
        }
    };
}

conformance! {
    stores: [memory, file],
    checks: [
        create_twice_conflicts,
        offsets_must_continue_the_log,
        concurrent_appends_of_one_offset_admit_one,
        read_windows,
        events_round_trip_exactly,
        read_deep_in_a_long_log,
        last_offset_tracks_appends,
        unknown_runs_are_not_found,
        snapshots_round_trip_and_overwrite,
        writes_report_their_encoded_size,
        list_runs_lists_every_run,
        flush_is_idempotent_and_shared,
        follow_yields_history_then_live_then_ends,
        follow_of_a_finished_run_ends_by_itself,
        many_followers_see_everything,
        unknown_event_types_round_trip,
        a_run_has_one_lock_at_a_time,
        concurrent_lockers_get_one_lock,
        writes_without_the_lock_are_refused_and_write_nothing,
        has_writer_tells_whether_the_run_is_locked,
        probes_never_make_a_lock_fail,
    ]
}

// ---------------------------------------------------------------- file store only

mod file_store {
    use std::fs::{self, OpenOptions};
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;
    use std::path::{Path, PathBuf};

    use super::*;

    fn config(sync: SyncPolicy) -> FileStoreConfig {
        FileStoreConfig {
            sync,
            follow_poll: Duration::from_millis(10),
        }
    }

    fn open(root: &Path) -> FileRunStore {
        FileRunStore::open_with(root, config(SyncPolicy::StepBoundary)).unwrap()
    }

    fn log_path(store: &FileRunStore, run: RunId) -> PathBuf {
        store.run_dir(run).join("events.ndjson")
    }

    fn idx_path(store: &FileRunStore, run: RunId) -> PathBuf {
        store.run_dir(run).join("events.idx")
    }

    fn append_raw(path: &Path, bytes: &[u8]) {
        let mut f = OpenOptions::new().append(true).open(path).unwrap();
        f.write_all(bytes).unwrap();
    }

    /// A run of `n` warnings written and flushed by a store that is then dropped.
    async fn written_run(root: &Path, n: u64) -> RunId {
        let store = open(root);
        let (run, _lock) = run_with(&store, n).await;
        store.flush(run).await.unwrap();
        run
    }

    async fn all(store: &FileRunStore, run: RunId) -> Vec<u64> {
        offsets(&store.read(run, 0, usize::MAX).await.unwrap())
    }

    #[tokio::test]
    async fn a_torn_last_line_is_ignored_by_readers_and_cut_by_the_next_writer() {
        let dir = tempfile::tempdir().unwrap();
        let run = written_run(dir.path(), 10).await;
        let store = open(dir.path());
        let log = log_path(&store, run);
        let intact = fs::metadata(&log).unwrap().len();
        append_raw(&log, br#"{"id":"x","offset":11,"timest"#);

        let reader = open(dir.path());
        assert_eq!(all(&reader, run).await, (1..=10).collect::<Vec<_>>());
        assert_eq!(reader.last_offset(run).await.unwrap(), 10);
        assert_eq!(
            fs::metadata(&log).unwrap().len(),
            intact + 29,
            "a reader cuts nothing"
        );

        let _lock = store.lock(run).await.unwrap();
        store.append(run, &warnings(run, 11..=12)).await.unwrap();
        store.flush(run).await.unwrap();
        let reopened = open(dir.path());
        assert_eq!(all(&reopened, run).await, (1..=12).collect::<Vec<_>>());
        let text = fs::read_to_string(&log).unwrap();
        assert_eq!(text.lines().count(), 12);
        assert!(!text.contains("timest\""));
    }

    #[tokio::test]
    async fn a_complete_last_line_that_is_not_json_is_cut_too() {
        let dir = tempfile::tempdir().unwrap();
        let run = written_run(dir.path(), 4).await;
        let store = open(dir.path());
        append_raw(&log_path(&store, run), b"\0\0garbage{\n");
        assert_eq!(all(&store, run).await, vec![1, 2, 3, 4]);
        let _lock = store.lock(run).await.unwrap();
        store.append(run, &[completed(run, 5)]).await.unwrap();
        assert_eq!(all(&open(dir.path()), run).await, vec![1, 2, 3, 4, 5]);
    }

    #[tokio::test]
    async fn a_corrupt_middle_line_is_reported_with_its_line_number() {
        let dir = tempfile::tempdir().unwrap();
        let run = written_run(dir.path(), 5).await;
        let store = open(dir.path());
        let log = log_path(&store, run);
        let text = fs::read_to_string(&log).unwrap();
        let mut lines: Vec<&str> = text.lines().collect();
        lines[2] = "{this is not json";
        fs::write(&log, lines.join("\n") + "\n").unwrap();

        let result = store.read(run, 0, 10).await;
        match result {
            Err(StoreError::BadEvent { offset: 3, detail }) => {
                assert!(detail.contains("events.ndjson line 3"), "{detail}");
            }
            other => panic!("expected BadEvent at offset 3, got {other:?}"),
        }
        assert_eq!(offsets(&store.read(run, 3, 10).await.unwrap()), vec![4, 5]);
        assert_eq!(offsets(&store.read(run, 0, 2).await.unwrap()), vec![1, 2]);
        // A follower reports the bad line in its place and goes on.
        let mut stream = store.follow(run, 0).await.unwrap();
        let mut seen = Vec::new();
        for _ in 0..5 {
            match tokio::time::timeout(PATIENCE, stream.next()).await.unwrap() {
                Some(Ok(event)) => seen.push(format!("{}", event.offset)),
                Some(Err(StoreError::BadEvent { offset, detail })) => {
                    assert!(detail.contains("events.ndjson line 3"), "{detail}");
                    seen.push(format!("bad {offset}"));
                }
                other => panic!("after {seen:?}: {other:?}"),
            }
        }
        assert_eq!(seen, ["1", "2", "bad 3", "4", "5"]);
    }

    #[tokio::test]
    async fn a_missing_stale_or_garbage_index_is_rebuilt() {
        let dir = tempfile::tempdir().unwrap();
        let run = written_run(dir.path(), 3_000).await;
        let probe = open(dir.path());
        let idx = idx_path(&probe, run);
        let good = fs::read(&idx).unwrap();
        assert_eq!(good.len(), 3_000 * 8, "flush persists the whole index");
        drop(probe);

        let mut shifted = good.clone();
        shifted.drain(800..808); // entry 100 missing: every later entry is off by one line
        let cases: Vec<(&str, Option<Vec<u8>>)> = vec![
            ("missing", None),
            (
                "garbage",
                Some((0..20_000u32).map(|i| (i * 7919 % 251) as u8).collect()),
            ),
            ("short", Some(good[..8 * 1_000].to_vec())),
            ("torn", Some(good[..8 * 2_000 + 5].to_vec())),
            ("shifted", Some(shifted)),
            (
                "too long",
                Some([good.clone(), good[8..16 * 8].to_vec()].concat()),
            ),
        ];
        for (name, contents) in cases {
            match contents {
                None => fs::remove_file(&idx).unwrap(),
                Some(bytes) => fs::write(&idx, bytes).unwrap(),
            }
            let store = open(dir.path());
            let got = store.read(run, 2_500, 3).await.unwrap();
            assert_eq!(offsets(&got), vec![2_501, 2_502, 2_503], "{name}");
            assert_eq!(store.last_offset(run).await.unwrap(), 3_000, "{name}");
            // The writer repairs the persisted index.
            let lock = store.lock(run).await.unwrap();
            store.append(run, &[warning(run, 3_001)]).await.unwrap();
            store.flush(run).await.unwrap();
            drop((lock, store));
            assert_eq!(fs::read(&idx).unwrap().len(), 3_001 * 8, "{name}");
            assert_eq!(all(&open(dir.path()), run).await.len(), 3_001, "{name}");
            // Back to 3,000 events for the next case.
            let log = log_path(&open(dir.path()), run);
            let text = fs::read_to_string(&log).unwrap();
            let cut = text.trim_end().rfind('\n').unwrap() + 1;
            fs::write(&log, &text[..cut]).unwrap();
            fs::write(&idx, &good).unwrap();
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn another_store_on_the_same_directory_sees_appends_and_can_follow() {
        let dir = tempfile::tempdir().unwrap();
        let writer = open(dir.path());
        let (run, _lock) = run_with(&writer, 3).await;
        writer.flush(run).await.unwrap();

        // Stands in for another process: its own caches, no in-process wake-ups.
        let other = open(dir.path());
        assert_eq!(all(&other, run).await, vec![1, 2, 3]);
        let follower = {
            let stream = other.follow(run, 1).await.unwrap();
            tokio::spawn(async move {
                let events: Vec<_> = stream.collect().await;
                events
                    .into_iter()
                    .map(|e| e.unwrap().offset.get())
                    .collect::<Vec<_>>()
            })
        };
        for o in 4..=1_500 {
            writer.append(run, &[warning(run, o)]).await.unwrap();
            if o % 300 == 0 {
                tokio::time::sleep(Duration::from_millis(15)).await;
            }
        }
        assert_eq!(other.last_offset(run).await.unwrap(), 1_500);
        assert_eq!(
            offsets(&other.read(run, 1_200, 2).await.unwrap()),
            vec![1_201, 1_202]
        );
        writer.append(run, &[completed(run, 1_501)]).await.unwrap();
        let seen = tokio::time::timeout(PATIENCE, follower)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(seen, (2..=1_501).collect::<Vec<_>>());
        assert_eq!(other.list_runs().await.unwrap(), vec![run]);
    }

    #[tokio::test]
    async fn another_store_on_the_same_directory_cannot_lock_or_write_a_locked_run() {
        let dir = tempfile::tempdir().unwrap();
        let writer = open(dir.path());
        let (run, lock) = run_with(&writer, 2).await;
        writer.flush(run).await.unwrap();
        let log = fs::read(log_path(&writer, run)).unwrap();

        let other = open(dir.path());
        match other.lock(run).await {
            Err(StoreError::Locked(message)) => assert_eq!(
                message,
                format!("run {run} is locked: another process is writing it")
            ),
            result => panic!("expected Locked, got {result:?}"),
        }
        assert_locked(other.append(run, &[warning(run, 3)]).await, run, "append");
        assert_locked(
            other
                .save_snapshot(&snapshot(run, 2, RunStatus::Running))
                .await,
            run,
            "save_snapshot",
        );
        assert_eq!(fs::read(log_path(&writer, run)).unwrap(), log);
        assert!(!store_file(&writer, run, "snapshot.json").exists());

        assert!(
            other.has_writer(run).await.unwrap(),
            "held by the first store"
        );
        drop(lock);
        assert!(!other.has_writer(run).await.unwrap(), "released");
        let other_lock = other.lock(run).await.unwrap();
        assert!(
            writer.has_writer(run).await.unwrap(),
            "held by the other store"
        );
        other.append(run, &[warning(run, 3)]).await.unwrap();
        assert_locked(writer.lock(run).await, run, "the first store, now");
        assert_eq!(all(&writer, run).await, vec![1, 2, 3]);

        // Back to the first store: it continues the log as it is now, not
        // as it last wrote it.
        drop(other_lock);
        let _lock = writer.lock(run).await.unwrap();
        assert_conflict(writer.append(run, &[warning(run, 3)]).await, "stale offset");
        writer.append(run, &[warning(run, 4)]).await.unwrap();
        assert_eq!(all(&open(dir.path()), run).await, vec![1, 2, 3, 4]);
    }

    fn store_file(store: &FileRunStore, run: RunId, name: &str) -> PathBuf {
        store.run_dir(run).join(name)
    }

    /// `store-writer` (a second process) on `run` of the store under `root`.
    fn second_process(root: &Path, run: RunId, args: &[&str]) -> std::process::Command {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_store-writer"));
        command.arg(root).arg(run.to_string()).args(args);
        command
    }

    #[tokio::test]
    async fn a_second_process_cannot_lock_or_write_a_locked_run() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let (run, lock) = run_with(&store, 2).await;
        store.flush(run).await.unwrap();
        let log = fs::read(log_path(&store, run)).unwrap();

        let refused = second_process(dir.path(), run, &["append", "3"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(refused.status.code(), Some(3), "{stderr}");
        assert!(
            stderr.contains(&format!(
                "lock: run {run} is locked: another process is writing it"
            )),
            "{stderr}"
        );
        assert!(
            stderr.contains(&format!("append: run {run} is not locked by this writer")),
            "{stderr}"
        );
        assert_eq!(
            fs::read(log_path(&store, run)).unwrap(),
            log,
            "nothing written"
        );

        drop(lock);
        let allowed = second_process(dir.path(), run, &["append", "3"])
            .output()
            .unwrap();
        assert!(
            allowed.status.success(),
            "{}",
            String::from_utf8_lossy(&allowed.stderr)
        );
        assert_eq!(all(&store, run).await, vec![1, 2, 3]);
    }

    #[tokio::test]
    async fn a_writer_that_dies_leaves_its_run_unlocked() {
        use std::io::{BufRead, BufReader};
        use std::process::Stdio;

        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let (run, lock) = run_with(&store, 1).await;
        drop(lock);
        let mut holder = second_process(dir.path(), run, &["hold"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut said = String::new();
        BufReader::new(holder.stdout.take().unwrap())
            .read_line(&mut said)
            .unwrap();
        assert_eq!(said, "locked\n");
        assert!(
            store.has_writer(run).await.unwrap(),
            "another process holds it"
        );
        assert_locked(store.lock(run).await, run, "while another process holds it");
        holder.kill().unwrap();
        holder.wait().unwrap();
        assert!(!store.has_writer(run).await.unwrap(), "its writer died");
        let _lock = store.lock(run).await.unwrap();
        store.append(run, &[warning(run, 2)]).await.unwrap();
    }

    #[tokio::test]
    async fn files_are_private_to_their_user() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let (run, _lock) = run_with(&store, 2).await;
        store.flush(run).await.unwrap();
        store
            .save_snapshot(&snapshot(run, 2, RunStatus::Running))
            .await
            .unwrap();
        let mode = |p: PathBuf| fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(dir.path().join("runs")), 0o700);
        assert_eq!(mode(store.run_dir(run)), 0o700);
        for name in ["events.ndjson", "events.idx", "snapshot.json", "lock"] {
            assert_eq!(mode(store.run_dir(run).join(name)), 0o600, "{name}");
        }
        assert!(!store.run_dir(run).join("snapshot.json.tmp").exists());
    }

    #[tokio::test]
    async fn an_unreadable_snapshot_is_corrupt_and_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let (run, _lock) = run_with(&store, 0).await;
        fs::write(store.run_dir(run).join("snapshot.json"), b"{\"version\":").unwrap();
        match store.load_snapshot(run).await {
            Err(StoreError::Corrupt(message)) => {
                assert!(message.contains("snapshot.json"), "{message}")
            }
            other => panic!("expected Corrupt, got {other:?}"),
        }
        store
            .save_snapshot(&snapshot(run, 0, RunStatus::Pending))
            .await
            .unwrap();
        assert!(store.load_snapshot(run).await.unwrap().is_some());
    }

    #[tokio::test]
    async fn list_runs_skips_what_is_not_a_run() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let (run, _lock) = run_with(&store, 0).await;
        fs::create_dir(dir.path().join("runs/not-a-run")).unwrap();
        fs::write(dir.path().join("runs/notes.txt"), b"hi").unwrap();
        // A v1 UUID is not a run id either.
        fs::create_dir(dir.path().join("runs/6ba7b810-9dad-11d1-80b4-00c04fd430c8")).unwrap();
        assert_eq!(store.list_runs().await.unwrap(), vec![run]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_sync_policy_keeps_the_contract() {
        for sync in [
            SyncPolicy::Always,
            SyncPolicy::StepBoundary,
            SyncPolicy::Never,
        ] {
            let dir = tempfile::tempdir().unwrap();
            let store = Arc::new(FileRunStore::open_with(dir.path(), config(sync)).unwrap());
            assert_eq!(store.sync_policy(), sync);
            let (runs, _locks): (Vec<RunId>, Vec<RunLock>) =
                futures::future::join_all((0..4).map(|_| run_with(&*store, 0)))
                    .await
                    .into_iter()
                    .unzip();
            let writers = runs.iter().map(|&run| {
                let store = Arc::clone(&store);
                tokio::spawn(async move {
                    for o in 1..=20 {
                        store.append(run, &[warning(run, o)]).await.unwrap();
                        if o % 5 == 0 {
                            store.flush(run).await.unwrap();
                        }
                    }
                })
            });
            for w in futures::future::join_all(writers).await {
                w.unwrap();
            }
            let reopened = open(dir.path());
            for run in runs {
                assert_eq!(
                    all(&reopened, run).await,
                    (1..=20).collect::<Vec<_>>(),
                    "{sync:?}"
                );
            }
        }
    }

    #[tokio::test]
    async fn a_run_directory_without_its_log_is_repaired_by_the_writer() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let run = new_run();
        fs::create_dir_all(store.run_dir(run)).unwrap();
        assert_not_found(
            store.read(run, 0, 1).await,
            run,
            "read of a half-created run",
        );
        let store = open(dir.path());
        let _lock = store.lock(run).await.unwrap();
        store.append(run, &[warning(run, 1)]).await.unwrap();
        assert_eq!(all(&store, run).await, vec![1]);
    }
}

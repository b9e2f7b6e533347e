//! One conformance suite for every [`RunStore`]: the contract written in
//! `crate::ports::store`, checked by the same functions against each store.
//!
//! A store's tests implement [`StoreHarness`] (fresh storage, a second
//! instance on it, and the store's own way to damage stored data) and
//! invoke [`store_conformance!`](crate::store_conformance), which expands to
//! one `#[tokio::test]` per check. The checks and their helpers are public
//! so store-specific tests can build on them.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::missing_panics_doc)]

use std::sync::Arc;
use std::time::Duration;

use domain::event::WorkflowRef;
use domain::{EventKind, Offset, RunId, RunSnapshot, RunStatus, RuntimeEvent, Timestamp};
use futures::StreamExt;
use serde_json::json;
use uuid::Uuid;

use crate::ports::{RunLock, RunStore, StoreError};

/// A store under test on storage of its own, which lives as long as the harness.
pub trait StoreHarness: Send + Sync + Sized + 'static {
    /// Fresh, empty storage and a store instance on it.
    fn new() -> Self;

    /// The store instance under test (the same one on every call).
    fn store(&self) -> Arc<dyn RunStore>;

    /// A second store instance on the same storage, with its own caches,
    /// handles and locks, as another process would open it; `None` when the
    /// storage is the instance (memory), which makes the checks across
    /// instances moot.
    fn another(&self) -> Option<Arc<dyn RunStore>>;

    /// Leaves a torn record after the last event of `run`, as a crash in
    /// the middle of an append would. `false` when the store's appends
    /// cannot tear (a transaction, memory): the check is then moot.
    fn tear_tail(&self, run: RunId) -> bool;

    /// Makes the stored event at `offset` of `run` unreadable (not JSON).
    /// `false` when the store keeps no encoded form that can rot (memory).
    fn corrupt_event(&self, run: RunId, offset: u64) -> bool;

    /// What the detail of a [`StoreError::BadEvent`] at `offset` names: the
    /// file and line, or the database and row.
    fn bad_event_place(&self, run: RunId, offset: u64) -> String;
}

/// The store under test, as the checks below name it.
struct Subject {
    store: Arc<dyn RunStore>,
}

/// Another instance on the storage of `h`, or its store when there is none.
fn other_or_same<H: StoreHarness>(h: &H) -> Arc<dyn RunStore> {
    h.another().unwrap_or_else(|| h.store())
}

impl Subject {
    fn of<H: StoreHarness>(h: &H) -> Self {
        Self { store: h.store() }
    }
}

/// Upper bound for anything that should happen "at once": generous so a
/// loaded CI machine does not flake, finite so a hung follower fails.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// A fresh run id.
pub fn new_run() -> RunId {
    RunId::new(Uuid::new_v4()).unwrap()
}

/// An event of `run` at `offset`.
pub fn event(run: RunId, offset: u64, kind: EventKind) -> RuntimeEvent {
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

/// A warning event of `run` at `offset`.
pub fn warning(run: RunId, offset: u64) -> RuntimeEvent {
    event(
        run,
        offset,
        EventKind::Warning {
            message: format!("event {offset}"),
            details: None,
        },
    )
}

/// The terminal `flow:completed` event of `run` at `offset`.
pub fn completed(run: RunId, offset: u64) -> RuntimeEvent {
    event(
        run,
        offset,
        EventKind::FlowCompleted {
            output: json!({"done": true}),
            duration_ms: 7,
        },
    )
}

/// Warnings of `run` at `offsets`.
pub fn warnings(run: RunId, offsets: std::ops::RangeInclusive<u64>) -> Vec<RuntimeEvent> {
    offsets.map(|o| warning(run, o)).collect()
}

/// The offsets of `events`.
pub fn offsets(events: &[RuntimeEvent]) -> Vec<u64> {
    events.iter().map(|e| e.offset.get()).collect()
}

/// A run holding offsets 1..=n (warnings), and its lock.
pub async fn run_with(store: &dyn RunStore, n: u64) -> (RunId, RunLock) {
    let run = new_run();
    let lock = store.create_run(run).await.unwrap();
    if n > 0 {
        store.append(run, &warnings(run, 1..=n)).await.unwrap();
    }
    (run, lock)
}

/// Asserts `Conflict`.
pub fn assert_conflict<T: std::fmt::Debug>(result: Result<T, StoreError>, what: &str) {
    assert!(
        matches!(result, Err(StoreError::Conflict(_))),
        "{what}: expected Conflict, got {result:?}"
    );
}

/// Asserts `NotFound(run)`.
pub fn assert_not_found<T: std::fmt::Debug>(result: Result<T, StoreError>, run: RunId, what: &str) {
    assert!(
        matches!(result, Err(StoreError::NotFound(id)) if id == run),
        "{what}: expected NotFound({run}), got {result:?}"
    );
}

/// `Locked`, with a message that names `run`.
pub fn assert_locked<T: std::fmt::Debug>(result: Result<T, StoreError>, run: RunId, what: &str) {
    match result {
        Err(StoreError::Locked(message)) => {
            assert!(message.contains(&run.to_string()), "{what}: {message}");
        }
        other => panic!("{what}: expected Locked, got {other:?}"),
    }
}

/// A snapshot of `run` with some state.
pub fn snapshot(run: RunId, last_offset: u64, status: RunStatus) -> RunSnapshot {
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

/// Conformance: Create twice conflicts.
pub async fn create_twice_conflicts<H: StoreHarness>(h: H) {
    let s = Subject::of(&h);
    let run = new_run();
    let _lock = s.store.create_run(run).await.unwrap();
    assert_conflict(s.store.create_run(run).await, "second create");
    assert_eq!(s.store.last_offset(run).await.unwrap(), 0);
}

/// Conformance: Offsets must continue the log.
pub async fn offsets_must_continue_the_log<H: StoreHarness>(h: H) {
    let s = Subject::of(&h);
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

/// Conformance: Concurrent appends of one offset admit one.
pub async fn concurrent_appends_of_one_offset_admit_one<H: StoreHarness>(h: H) {
    let s = Subject::of(&h);
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

/// Conformance: Read windows.
pub async fn read_windows<H: StoreHarness>(h: H) {
    let s = Subject::of(&h);
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

/// Conformance: Events round trip exactly.
pub async fn events_round_trip_exactly<H: StoreHarness>(h: H) {
    let s = Subject::of(&h);
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

/// Conformance: Read deep in a long log.
pub async fn read_deep_in_a_long_log<H: StoreHarness>(h: H) {
    let s = Subject::of(&h);
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

/// Conformance: Last offset tracks appends.
pub async fn last_offset_tracks_appends<H: StoreHarness>(h: H) {
    let s = Subject::of(&h);
    let store = &*s.store;
    let (run, _lock) = run_with(store, 0).await;
    assert_eq!(store.last_offset(run).await.unwrap(), 0);
    store.append(run, &warnings(run, 1..=3)).await.unwrap();
    assert_eq!(store.last_offset(run).await.unwrap(), 3);
    store.append(run, &[completed(run, 4)]).await.unwrap();
    assert_eq!(store.last_offset(run).await.unwrap(), 4);
}

/// Conformance: Unknown runs are not found.
pub async fn unknown_runs_are_not_found<H: StoreHarness>(h: H) {
    let s = Subject::of(&h);
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

/// Conformance: Snapshots round trip and overwrite.
pub async fn snapshots_round_trip_and_overwrite<H: StoreHarness>(h: H) {
    let s = Subject::of(&h);
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
/// Conformance: Writes report their encoded size.
pub async fn writes_report_their_encoded_size<H: StoreHarness>(h: H) {
    let s = Subject::of(&h);
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

/// Conformance: List runs lists every run.
pub async fn list_runs_lists_every_run<H: StoreHarness>(h: H) {
    let s = Subject::of(&h);
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

/// Conformance: Flush is idempotent and shared.
pub async fn flush_is_idempotent_and_shared<H: StoreHarness>(h: H) {
    let s = Subject::of(&h);
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

/// Conformance: Follow yields history then live then ends.
pub async fn follow_yields_history_then_live_then_ends<H: StoreHarness>(h: H) {
    let s = Subject::of(&h);
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

/// Conformance: Follow of a finished run ends by itself.
pub async fn follow_of_a_finished_run_ends_by_itself<H: StoreHarness>(h: H) {
    let s = Subject::of(&h);
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

/// Conformance: Many followers see everything.
pub async fn many_followers_see_everything<H: StoreHarness>(h: H) {
    let s = Subject::of(&h);
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

/// Conformance: Unknown event types round trip.
pub async fn unknown_event_types_round_trip<H: StoreHarness>(h: H) {
    let s = Subject::of(&h);
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

/// Conformance: A run has one lock at a time.
pub async fn a_run_has_one_lock_at_a_time<H: StoreHarness>(h: H) {
    let s = Subject::of(&h);
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

/// Conformance: Concurrent lockers get one lock.
pub async fn concurrent_lockers_get_one_lock<H: StoreHarness>(h: H) {
    let s = Subject::of(&h);
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

/// Conformance: Writes without the lock are refused and write nothing.
pub async fn writes_without_the_lock_are_refused_and_write_nothing<H: StoreHarness>(h: H) {
    let s = Subject::of(&h);
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

/// Conformance: Has writer tells whether the run is locked.
pub async fn has_writer_tells_whether_the_run_is_locked<H: StoreHarness>(h: H) {
    let s = Subject::of(&h);
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

/// Conformance: Probes never make a lock fail.
pub async fn probes_never_make_a_lock_fail<H: StoreHarness>(h: H) {
    let s = Subject::of(&h);
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

/// A crash mid-append leaves a torn record: readers never yield it (the
/// log ends before it) and the next writer continues after the last whole
/// event.
pub async fn a_torn_tail_is_never_read<H: StoreHarness>(h: H) {
    let store = h.store();
    let (run, lock) = run_with(&*store, 10).await;
    store.flush(run).await.unwrap();
    drop(lock);
    if !h.tear_tail(run) {
        return;
    }
    let reader = other_or_same(&h);
    let all = reader.read(run, 0, usize::MAX).await.unwrap();
    assert_eq!(offsets(&all), (1..=10).collect::<Vec<_>>());
    assert_eq!(reader.last_offset(run).await.unwrap(), 10);
    assert!(reader.read(run, 10, 5).await.unwrap().is_empty());

    let writer = other_or_same(&h);
    let _lock = writer.lock(run).await.unwrap();
    writer.append(run, &warnings(run, 11..=12)).await.unwrap();
    writer.append(run, &[completed(run, 13)]).await.unwrap();
    writer.flush(run).await.unwrap();
    let followed: Vec<_> = tokio::time::timeout(
        PATIENCE,
        other_or_same(&h)
            .follow(run, 0)
            .await
            .unwrap()
            .collect::<Vec<_>>(),
    )
    .await
    .unwrap();
    let followed: Vec<RuntimeEvent> = followed.into_iter().map(Result::unwrap).collect();
    assert_eq!(offsets(&followed), (1..=13).collect::<Vec<_>>());
}

/// A stored event that cannot be read is [`StoreError::BadEvent`] at its
/// offset, naming where it is; the events around it stay readable, and a
/// follower gets the error in its place and goes on.
pub async fn a_corrupt_event_is_reported_in_its_place<H: StoreHarness>(h: H) {
    let store = h.store();
    let (run, lock) = run_with(&*store, 5).await;
    store.flush(run).await.unwrap();
    drop(lock);
    if !h.corrupt_event(run, 3) {
        return;
    }
    let place = h.bad_event_place(run, 3);
    let reader = other_or_same(&h);
    match reader.read(run, 0, 10).await {
        Err(StoreError::BadEvent { offset: 3, detail }) => {
            assert!(detail.contains(&place), "{detail} should name {place}");
        }
        other => panic!("expected BadEvent at offset 3, got {other:?}"),
    }
    assert_eq!(offsets(&reader.read(run, 3, 10).await.unwrap()), vec![4, 5]);
    assert_eq!(offsets(&reader.read(run, 0, 2).await.unwrap()), vec![1, 2]);
    let mut stream = reader.follow(run, 0).await.unwrap();
    let mut seen = Vec::new();
    for _ in 0..5 {
        match tokio::time::timeout(PATIENCE, stream.next()).await.unwrap() {
            Some(Ok(event)) => seen.push(format!("{}", event.offset)),
            Some(Err(StoreError::BadEvent { offset, detail })) => {
                assert!(detail.contains(&place), "{detail}");
                seen.push(format!("bad {offset}"));
            }
            other => panic!("after {seen:?}: {other:?}"),
        }
    }
    assert_eq!(seen, ["1", "2", "bad 3", "4", "5"]);
}

/// Another store instance on the same storage (another process) reads and
/// follows what this one appends: the store polls for it.
pub async fn another_instance_sees_appends_and_follows<H: StoreHarness>(h: H) {
    let writer = h.store();
    let (run, _lock) = run_with(&*writer, 3).await;
    writer.flush(run).await.unwrap();

    let Some(other) = h.another() else {
        return;
    };
    assert_eq!(
        offsets(&other.read(run, 0, usize::MAX).await.unwrap()),
        vec![1, 2, 3]
    );
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
            writer.flush(run).await.unwrap();
            tokio::task::yield_now().await;
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

/// One writer per run across store instances: a second instance can
/// neither lock nor write a locked run, and takes over once it is released.
pub async fn another_instance_cannot_lock_or_write_a_locked_run<H: StoreHarness>(h: H) {
    let writer = h.store();
    let (run, lock) = run_with(&*writer, 2).await;
    writer.flush(run).await.unwrap();

    let Some(other) = h.another() else {
        return;
    };
    assert_locked(other.lock(run).await, run, "lock");
    assert_locked(other.append(run, &[warning(run, 3)]).await, run, "append");
    assert_locked(
        other
            .save_snapshot(&snapshot(run, 2, RunStatus::Running))
            .await,
        run,
        "save_snapshot",
    );
    assert_eq!(writer.last_offset(run).await.unwrap(), 2, "nothing written");
    assert_eq!(writer.load_snapshot(run).await.unwrap(), None);

    assert!(other.has_writer(run).await.unwrap(), "held by the first");
    drop(lock);
    assert!(!other.has_writer(run).await.unwrap(), "released");
    let other_lock = other.lock(run).await.unwrap();
    assert!(writer.has_writer(run).await.unwrap(), "held by the other");
    other.append(run, &[warning(run, 3)]).await.unwrap();
    assert_locked(writer.lock(run).await, run, "the first store, now");
    assert_eq!(
        offsets(&writer.read(run, 0, 10).await.unwrap()),
        vec![1, 2, 3]
    );

    // Back to the first: it continues the log as it is now, not as it last
    // wrote it.
    drop(other_lock);
    let _lock = writer.lock(run).await.unwrap();
    assert_conflict(writer.append(run, &[warning(run, 3)]).await, "stale offset");
    writer.append(run, &[warning(run, 4)]).await.unwrap();
    assert_eq!(
        offsets(&other_or_same(&h).read(run, 0, 10).await.unwrap()),
        vec![1, 2, 3, 4]
    );
}

/// The fold of the stored events equals the snapshot saved from them, read
/// back through another instance.
pub async fn the_fold_of_the_log_equals_the_saved_snapshot<H: StoreHarness>(h: H) {
    let store = h.store();
    let (run, _lock) = run_with(&*store, 0).await;
    let mut written = warnings(run, 1..=4);
    written[1].node_id = Some(domain::NodeId::new("writer").unwrap());
    written.push(completed(run, 5));
    store.append(run, &written[..3]).await.unwrap();
    let partial = RunSnapshot::fold(&written[..3]).unwrap();
    store.save_snapshot(&partial).await.unwrap();
    store.append(run, &written[3..]).await.unwrap();
    let whole = RunSnapshot::fold(&written).unwrap();
    store.save_snapshot(&whole).await.unwrap();
    store.flush(run).await.unwrap();

    let reader = other_or_same(&h);
    let events = reader.read(run, 0, usize::MAX).await.unwrap();
    assert_eq!(events, written);
    let folded = RunSnapshot::fold(&events).unwrap();
    assert_eq!(reader.load_snapshot(run).await.unwrap(), Some(folded));
    assert_ne!(partial, whole);
}

/// Many runs written at once each keep their own log, intact.
pub async fn many_concurrent_runs<H: StoreHarness>(h: H) {
    let store = h.store();
    let mut runs = Vec::new();
    let mut locks = Vec::new();
    for _ in 0..32 {
        let (run, lock) = run_with(&*store, 0).await;
        runs.push(run);
        locks.push(lock);
    }
    let writers = runs.iter().map(|&run| {
        let store = Arc::clone(&store);
        tokio::spawn(async move {
            for start in (1..=100).step_by(10) {
                store
                    .append(run, &warnings(run, start..=start + 9))
                    .await
                    .unwrap();
                store.flush(run).await.unwrap();
            }
            store.append(run, &[completed(run, 101)]).await.unwrap();
            store.flush(run).await.unwrap();
        })
    });
    for w in futures::future::join_all(writers).await {
        w.unwrap();
    }
    let reader = other_or_same(&h);
    for &run in &runs {
        let events = reader.read(run, 0, usize::MAX).await.unwrap();
        assert_eq!(offsets(&events), (1..=101).collect::<Vec<_>>());
        assert!(events.iter().all(|e| e.run_id == run));
    }
    let mut listed = reader.list_runs().await.unwrap();
    listed.sort();
    runs.sort();
    assert_eq!(listed, runs);
}

/// One event of several megabytes of text round-trips whole, read and
/// followed, by this instance and another.
pub async fn a_large_payload_round_trips<H: StoreHarness>(h: H) {
    let store = h.store();
    let (run, _lock) = run_with(&*store, 1).await;
    // Not one repeated byte, so a store that truncates or reorders shows.
    let text: String = (0..6 * 1024 * 1024 / 16)
        .map(|i| format!("{i:015x}\n"))
        .collect();
    let mut large = warning(run, 2);
    large.kind = EventKind::Warning {
        message: text,
        details: Some(json!({"unicode": "größe ✓"})),
    };
    store
        .append(run, &[large.clone(), completed(run, 3)])
        .await
        .unwrap();
    store.flush(run).await.unwrap();
    for reader in [store, other_or_same(&h)] {
        assert_eq!(reader.read(run, 1, 1).await.unwrap(), vec![large.clone()]);
        let followed: Vec<_> = reader.follow(run, 1).await.unwrap().collect().await;
        assert_eq!(followed.len(), 2);
        assert_eq!(followed[0].as_ref().unwrap(), &large);
    }
}

/// Expands to one `#[tokio::test]` per check of the suite, run against
/// the [`StoreHarness`](crate::testing::store_conformance::StoreHarness) `$harness`:
/// `cargo test conformance::read_windows` runs one of them.
#[macro_export]
macro_rules! store_conformance {
    ($harness:ty) => {
        $crate::store_conformance!(@checks $harness, [
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
            a_torn_tail_is_never_read,
            a_corrupt_event_is_reported_in_its_place,
            another_instance_sees_appends_and_follows,
            another_instance_cannot_lock_or_write_a_locked_run,
            the_fold_of_the_log_equals_the_saved_snapshot,
            many_concurrent_runs,
            a_large_payload_round_trips,
        ]);
    };
    (@checks $harness:ty, [$($check:ident),* $(,)?]) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $check() {
                $crate::testing::store_conformance::$check(
                    <$harness as $crate::testing::store_conformance::StoreHarness>::new(),
                )
                .await;
            }
        )*
    };
}

//! Snapshot deltas in the file store: kept after the snapshot, replaced by
//! the next one, and read back only as far as they continue it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;

use application::ports::{RunLock, RunStore, StoreError};
use application::testing::store_conformance::{delta_step, warnings};
use domain::{RunId, RunSnapshot, RunStatus};

use super::FileRunStore;

/// A run this store holds, its log of 50 events, its first snapshot saved.
async fn started() -> (tempfile::TempDir, FileRunStore, RunLock, RunSnapshot) {
    let dir = tempfile::tempdir().unwrap();
    let store = FileRunStore::open(dir.path()).unwrap();
    let run = RunId::new(uuid::Uuid::new_v4()).unwrap();
    let lock = store.create_run(run).await.unwrap();
    store.append(run, &warnings(run, 1..=50)).await.unwrap();
    let mut state = RunSnapshot::new(run);
    state.status = RunStatus::Running;
    state.last_offset = 1;
    store.save_snapshot(&state).await.unwrap();
    (dir, store, lock, state)
}

#[tokio::test]
async fn a_load_is_the_snapshot_and_the_deltas_after_it() {
    let (_dir, store, lock, mut state) = started().await;
    let run = lock.run_id();
    let deltas = store.run_dir(run).join("snapshot-deltas.ndjson");
    for (n, node) in ["a", "b", "a"].into_iter().enumerate() {
        let delta = delta_step(&mut state, node, &format!("out {n}"), 10 * (n as u64 + 1));
        assert!(store.save_snapshot_delta(&delta).await.unwrap().unwrap() > 0);
        assert_eq!(
            store.load_snapshot(run).await.unwrap().as_ref(),
            Some(&state)
        );
    }
    assert_eq!(fs::read_to_string(&deltas).unwrap().lines().count(), 3);
    // The next snapshot replaces them.
    state.last_offset = 31;
    store.save_snapshot(&state).await.unwrap();
    assert_eq!(
        fs::read(&deltas).unwrap(),
        b"",
        "the snapshot replaced the deltas"
    );
    let delta = delta_step(&mut state, "b", "later", 40);
    store.save_snapshot_delta(&delta).await.unwrap();
    assert_eq!(
        store.load_snapshot(run).await.unwrap().as_ref(),
        Some(&state)
    );
    // A delta past the end of the log (a crash kept it and lost the log's
    // end) is not applied.
    let at_forty = state.clone();
    let past = delta_step(&mut state, "c", "later", 51);
    store.save_snapshot_delta(&past).await.unwrap();
    assert_eq!(store.load_snapshot(run).await.unwrap(), Some(at_forty));
    // An ended run's final snapshot leaves none behind.
    state.status = RunStatus::Completed;
    state.last_offset = 41;
    store.save_snapshot(&state).await.unwrap();
    assert!(!deltas.exists());
    assert_eq!(store.load_snapshot(run).await.unwrap(), Some(state));
}

/// A crash can cut the last delta short, or fall between a new snapshot
/// and the removal of the deltas it replaced: the load takes the deltas
/// that continue the snapshot and stops at the first that does not.
#[tokio::test]
async fn deltas_cut_short_or_left_behind_are_not_applied() {
    let (_dir, store, lock, mut state) = started().await;
    let run = lock.run_id();
    let deltas = store.run_dir(run).join("snapshot-deltas.ndjson");
    let first = delta_step(&mut state, "a", "one", 10);
    store.save_snapshot_delta(&first).await.unwrap();
    let at_first = state.clone();
    let second = delta_step(&mut state, "b", "two", 20);
    store.save_snapshot_delta(&second).await.unwrap();
    let whole = fs::read(&deltas).unwrap();
    // Torn in the middle of the second line.
    let cut = whole.len() - 40;
    fs::write(&deltas, &whole[..cut]).unwrap();
    assert_eq!(
        store.load_snapshot(run).await.unwrap(),
        Some(at_first.clone())
    );
    // Garbage, then a delta that would continue: the chain ended before it.
    fs::write(
        &deltas,
        [&whole[..cut], b"\n".as_slice(), &whole[cut..]].concat(),
    )
    .unwrap();
    assert_eq!(store.load_snapshot(run).await.unwrap(), Some(at_first));

    // A snapshot at 20, then the old deltas back, as if its removal of them
    // had not happened: they are skipped, and deltas after them apply.
    store.save_snapshot(&state).await.unwrap();
    fs::write(&deltas, &whole).unwrap();
    assert_eq!(
        store.load_snapshot(run).await.unwrap().as_ref(),
        Some(&state)
    );
    let third = delta_step(&mut state, "c", "three", 30);
    store.save_snapshot_delta(&third).await.unwrap();
    assert_eq!(
        store.load_snapshot(run).await.unwrap().as_ref(),
        Some(&state)
    );
    // A delta that skips events the state has not seen ends the chain.
    let at_third = state.clone();
    let mut gap = delta_step(&mut state, "d", "four", 50);
    gap.base_offset = 40;
    store.save_snapshot_delta(&gap).await.unwrap();
    assert_eq!(store.load_snapshot(run).await.unwrap(), Some(at_third));
}

#[tokio::test]
async fn a_delta_needs_the_runs_lock_and_an_unreadable_file_is_skipped() {
    let (dir, store, lock, mut state) = started().await;
    let run = lock.run_id();
    let delta = delta_step(&mut state, "a", "one", 10);
    let reader = FileRunStore::open(dir.path()).unwrap();
    assert!(matches!(
        reader.save_snapshot_delta(&delta).await,
        Err(StoreError::Locked(_))
    ));
    // A directory where the deltas file goes: the snapshot alone loads.
    let before = store.load_snapshot(run).await.unwrap();
    fs::create_dir(store.run_dir(run).join("snapshot-deltas.ndjson")).unwrap();
    assert_eq!(reader.load_snapshot(run).await.unwrap(), before);
}

/// A writer that crashed leaves its deltas; the next writer's log may hold
/// other events at their offsets (a power cut lost the log's end), so its
/// first snapshot removes them before it is in place, even one that would
/// continue it.
#[tokio::test]
async fn the_next_writer_removes_the_deltas_a_crashed_one_left() {
    let (dir, store, lock, mut state) = started().await;
    let run = lock.run_id();
    let stale = delta_step(&mut state, "a", "from the crashed writer", 10);
    store.save_snapshot_delta(&stale).await.unwrap();
    drop(lock);
    drop(store);
    let next = FileRunStore::open(dir.path()).unwrap();
    let _lock = next.lock(run).await.unwrap();
    // The same offset as the snapshot the stale delta continues.
    let mut resumed = RunSnapshot::new(run);
    resumed.status = RunStatus::Running;
    resumed.last_offset = 1;
    resumed.steps_started = 7;
    next.save_snapshot(&resumed).await.unwrap();
    assert_eq!(next.load_snapshot(run).await.unwrap(), Some(resumed));
}

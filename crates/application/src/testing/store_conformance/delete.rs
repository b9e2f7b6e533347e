//! Runs appear and go whole: `delete_run` and `import_run`.

use super::*;

/// The log of `run` in `batches` batches, as `import_run` takes it.
pub fn batches(events: Vec<RuntimeEvent>, batches: usize) -> crate::ports::EventBatches {
    let size = events.len().div_ceil(batches.max(1)).max(1);
    let chunks: Vec<_> = events.chunks(size).map(|c| Ok(c.to_vec())).collect();
    futures::stream::iter(chunks).boxed()
}

/// Asserts that no reader of `store` sees `run`.
pub async fn assert_gone(store: &dyn RunStore, run: RunId, what: &str) {
    assert!(
        !store.list_runs().await.unwrap().contains(&run),
        "{what}: listed"
    );
    assert_not_found(store.read(run, 0, 10).await, run, what);
    assert_not_found(store.load_snapshot(run).await, run, what);
    assert_not_found(store.last_offset(run).await, run, what);
    assert_not_found(store.has_writer(run).await, run, what);
}

/// Conformance: A deleted run is gone for every reader, whole.
pub async fn delete_removes_the_run_whole<H: StoreHarness>(h: H) {
    let s = Subject::of(&h);
    let store = &*s.store;
    let (run, lock) = run_with(store, 3).await;
    store.append(run, &[completed(run, 4)]).await.unwrap();
    store
        .save_snapshot(&snapshot(run, 4, RunStatus::Completed))
        .await
        .unwrap();
    let (kept, _kept_lock) = run_with(store, 2).await;
    drop(lock);
    store.delete_run(run).await.unwrap();
    assert_gone(store, run, "after delete").await;
    assert_gone(&*other_or_same(&h), run, "another instance").await;
    assert_not_found(store.delete_run(run).await, run, "a second delete");
    // Other runs are untouched, and the id may be used again.
    assert_eq!(store.last_offset(kept).await.unwrap(), 2);
    let _again = store.create_run(run).await.unwrap();
    assert_eq!(store.last_offset(run).await.unwrap(), 0);
    assert_eq!(store.load_snapshot(run).await.unwrap(), None);
}

/// Conformance: A run with a writer is never deleted.
pub async fn delete_refuses_a_run_with_a_writer<H: StoreHarness>(h: H) {
    let s = Subject::of(&h);
    let store = &*s.store;
    let (run, lock) = run_with(store, 2).await;
    assert_locked(store.delete_run(run).await, run, "delete while written");
    if let Some(other) = h.another() {
        assert_locked(
            other.delete_run(run).await,
            run,
            "delete from another instance",
        );
    }
    // Still whole, still written.
    store.append(run, &[warning(run, 3)]).await.unwrap();
    assert_eq!(offsets(&store.read(run, 0, 10).await.unwrap()), [1, 2, 3]);
    drop(lock);
    let unknown = new_run();
    assert_not_found(store.delete_run(unknown).await, unknown, "unknown run");
}

/// Conformance: Import stores a whole run exactly, seen only once complete.
pub async fn import_stores_a_whole_run_exactly<H: StoreHarness>(h: H) {
    let s = Subject::of(&h);
    let store = &*s.store;
    let run = new_run();
    let mut log = warnings(run, 1..=9);
    log.push(completed(run, 10));
    let saved = snapshot(run, 10, RunStatus::Completed);
    store
        .import_run(run, batches(log.clone(), 3), Some(saved.clone()))
        .await
        .unwrap();
    assert_eq!(store.read(run, 0, 100).await.unwrap(), log);
    assert_eq!(store.load_snapshot(run).await.unwrap(), Some(saved));
    assert!(store.list_runs().await.unwrap().contains(&run));
    assert!(!store.has_writer(run).await.unwrap(), "nobody writes it");
    let other = other_or_same(&h);
    assert_eq!(other.read(run, 0, 100).await.unwrap(), log);
    // An imported run is an ordinary run: it can be locked and deleted.
    drop(store.lock(run).await.unwrap());
    store.delete_run(run).await.unwrap();
    assert_gone(store, run, "imported, then deleted").await;
    // A run without snapshot or events imports too.
    let empty = new_run();
    store
        .import_run(empty, batches(Vec::new(), 1), None)
        .await
        .unwrap();
    assert_eq!(store.last_offset(empty).await.unwrap(), 0);
    assert_eq!(store.load_snapshot(empty).await.unwrap(), None);
}

/// Conformance: An import over an existing run is refused and changes nothing.
pub async fn import_refuses_an_existing_run<H: StoreHarness>(h: H) {
    let s = Subject::of(&h);
    let store = &*s.store;
    let (run, lock) = run_with(store, 2).await;
    drop(lock);
    let result = store
        .import_run(run, batches(warnings(run, 1..=5), 1), None)
        .await;
    assert_conflict(result, "import over a run");
    assert_eq!(offsets(&store.read(run, 0, 10).await.unwrap()), [1, 2]);
}

/// Conformance: An import that fails midway leaves nothing behind.
pub async fn a_failed_import_leaves_nothing<H: StoreHarness>(h: H) {
    let s = Subject::of(&h);
    let store = &*s.store;
    let run = new_run();
    // The source fails after a first batch.
    let failing = futures::stream::iter(vec![
        Ok(warnings(run, 1..=3)),
        Err(StoreError::io_msg("the source went away")),
    ])
    .boxed();
    let result = store.import_run(run, failing, None).await;
    assert!(matches!(result, Err(StoreError::Io { .. })), "{result:?}");
    assert_gone(store, run, "after a failed import").await;
    // A log with a gap is refused as an append would refuse it.
    let mut gap = warnings(run, 1..=3);
    gap.push(warning(run, 5));
    assert_conflict(
        store.import_run(run, batches(gap, 2), None).await,
        "a log with a gap",
    );
    assert_gone(store, run, "after a refused import").await;
    // Nothing of those attempts is in the way of a good one.
    store
        .import_run(run, batches(warnings(run, 1..=4), 2), None)
        .await
        .unwrap();
    assert_eq!(store.last_offset(run).await.unwrap(), 4);
}

/// Conformance: An import keeps a large payload exactly.
pub async fn an_import_keeps_a_large_payload<H: StoreHarness>(h: H) {
    let s = Subject::of(&h);
    let store = &*s.store;
    let run = new_run();
    let big = "x".repeat(200 * 1024);
    let log = vec![
        warning(run, 1),
        event(
            run,
            2,
            EventKind::Warning {
                message: big.clone(),
                details: Some(json!({"again": big})),
            },
        ),
        completed(run, 3),
    ];
    let mut saved = snapshot(run, 3, RunStatus::Completed);
    saved.input = json!(big);
    store
        .import_run(run, batches(log.clone(), 2), Some(saved.clone()))
        .await
        .unwrap();
    assert_eq!(other_or_same(&h).read(run, 0, 10).await.unwrap(), log);
    assert_eq!(store.load_snapshot(run).await.unwrap(), Some(saved));
}

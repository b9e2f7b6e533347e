//! One writer per run: the lock, its probes, writes refused without it.

use super::*;

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

//! Damage, other instances and scale: torn tails, corrupt events, a second
//! instance on the same storage, fold = snapshot, many runs, large payloads.

use super::*;

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
    lock.release().await;
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
    other_lock.release().await;
    let _lock = writer.lock(run).await.unwrap();
    assert_conflict(writer.append(run, &[warning(run, 3)]).await, "stale offset");
    writer.append(run, &[warning(run, 4)]).await.unwrap();
    assert_eq!(
        offsets(&other_or_same(&h).read(run, 0, 10).await.unwrap()),
        vec![1, 2, 3, 4]
    );
}

/// Conformance: a lock dropped without [`RunLock::release`] frees the run
/// for another instance too, if not at once then soon, and a writer that
/// lost it there can write no more.
pub async fn a_dropped_lock_frees_the_run_for_another_instance<H: StoreHarness>(h: H) {
    let writer = h.store();
    let (run, lock) = run_with(&*writer, 1).await;
    let Some(other) = h.another() else {
        return;
    };
    drop(lock);
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let taken = loop {
        match other.lock(run).await {
            Ok(taken) => break taken,
            Err(StoreError::Locked(_)) if tokio::time::Instant::now() < deadline => {
                // Released in the background: try again shortly.
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Err(e) => panic!("the dropped lock was not released: {e}"),
        }
    };
    assert_locked(writer.append(run, &[warning(run, 2)]).await, run, "append");
    other.append(run, &[warning(run, 2)]).await.unwrap();
    drop(taken);
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

//! The log, snapshots and the list of runs: appends, reads from any offset,
//! encoded sizes, flushes.

use super::*;

/// Conformance: Create twice conflicts.
pub async fn create_twice_conflicts<H: StoreHarness>(h: H) {
    let s = Subject::of(&h);
    let run = new_run();
    let lock = s.store.create_run(run).await.unwrap();
    assert_conflict(s.store.create_run(run).await, "second create");
    assert_conflict(
        other_or_same(&h).create_run(run).await,
        "create from another instance",
    );
    assert_eq!(s.store.last_offset(run).await.unwrap(), 0);
    drop(lock);
    assert_conflict(s.store.create_run(run).await, "create once released");
    assert_eq!(s.store.read(run, 0, 10).await.unwrap(), Vec::new());
}

/// Conformance: Offsets must continue the log.
pub async fn offsets_must_continue_the_log<H: StoreHarness>(h: H) {
    let s = Subject::of(&h);
    let store = &*s.store;
    let run = new_run();
    let lock = store.create_run(run).await.unwrap();
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
    // A new writer continues the log as stored, whatever the last one knew.
    drop(lock);
    let _lock = store.lock(run).await.unwrap();
    assert_conflict(
        store.append(run, &[warning(run, 8)]).await,
        "gap after a new lock",
    );
    assert_conflict(
        store.append(run, &[warning(run, 6)]).await,
        "duplicate after a new lock",
    );
    store.append(run, &[warning(run, 7)]).await.unwrap();
    assert_eq!(store.last_offset(run).await.unwrap(), 7);
}

/// Conformance: An append that takes its events stores them as a borrowed
/// one does, empties the batch it took, and leaves a refused batch whole.
pub async fn an_owned_append_takes_its_events<H: StoreHarness>(h: H) {
    let s = Subject::of(&h);
    let store = &*s.store;
    let (run, _lock) = run_with(store, 0).await;
    let weighs = h.weighs_appends();
    let mut batch = warnings(run, 1..=3);
    let expected = batch.clone();
    let weight: u64 = if weighs {
        expected.iter().map(line_len).sum()
    } else {
        0
    };
    assert_eq!(store.append_owned(run, &mut batch).await.unwrap(), weight);
    assert!(
        batch.is_empty(),
        "the batch stored is left empty: {batch:?}"
    );
    assert_eq!(store.read(run, 0, 10).await.unwrap(), expected);

    let mut gap = vec![warning(run, 5)];
    let refused = gap.clone();
    assert_conflict(store.append_owned(run, &mut gap).await, "owned gap");
    assert_eq!(gap, refused, "a refused batch is left whole");
    let mut foreign = vec![warning(new_run(), 4)];
    assert_conflict(
        store.append_owned(run, &mut foreign).await,
        "owned foreign event",
    );
    assert_eq!(foreign.len(), 1);
    assert_eq!(store.last_offset(run).await.unwrap(), 3);

    // The same vector carries the next batch.
    batch.extend(warnings(run, 4..=5));
    store.append_owned(run, &mut batch).await.unwrap();
    assert!(batch.is_empty());
    let all = store.read(run, 0, 10).await.unwrap();
    assert_eq!(offsets(&all), vec![1, 2, 3, 4, 5]);
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
    assert_not_found(store.read(run, 0, 0).await, run, "read of none");
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
    let weighs = h.weighs_appends();
    let weight = |events: &[RuntimeEvent]| {
        if weighs {
            events.iter().map(line_len).sum()
        } else {
            0
        }
    };
    assert_eq!(store.append(run, &[]).await.unwrap(), 0);
    let small = warnings(run, 1..=3);
    assert_eq!(store.append(run, &small).await.unwrap(), weight(&small));
    let mut large = warning(run, 4);
    large.kind = EventKind::Warning {
        message: "x".repeat(200_000),
        details: None,
    };
    let large = [large];
    let reported = store.append(run, &large).await.unwrap();
    assert_eq!(reported, weight(&large));
    assert_eq!(store.read(run, 3, 1).await.unwrap(), large);
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

/// Conformance: a definition is loaded back equal by its hash, from this
/// instance and another; saving it again is harmless; an unknown hash is none.
pub async fn definitions_round_trip_by_hash<H: StoreHarness>(h: H) {
    use std::collections::BTreeMap;

    use domain::definition::Definition;

    let s = Subject::of(&h);
    let store = &*s.store;
    let definition = Definition {
        root: "/flows/main.yaml".into(),
        files: BTreeMap::from([
            (
                "/flows/main.yaml".into(),
                "name: main\nnodes: [{id: c, call_workflow: child.yaml}]\n".into(),
            ),
            (
                "/flows/child.yaml".into(),
                format!("name: child # é\n{}", "#\n".repeat(40_000)),
            ),
        ]),
    };
    let hash = store.save_definition(&definition).await.unwrap();
    assert_eq!(hash, definition.hash());
    assert_eq!(
        store.save_definition(&definition).await.unwrap(),
        hash,
        "again"
    );
    assert_eq!(
        store.load_definition(&hash).await.unwrap(),
        Some(definition.clone())
    );
    assert_eq!(
        other_or_same(&h).load_definition(&hash).await.unwrap(),
        Some(definition),
        "another instance"
    );
    let unknown = format!("sha256:{}", "0".repeat(64));
    assert_eq!(store.load_definition(&unknown).await.unwrap(), None);
    assert_eq!(
        store.load_definition("../../etc/passwd").await.unwrap(),
        None
    );
}

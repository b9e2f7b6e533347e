//! Following a run: history, then live events, then the end; many
//! followers; unknown event types kept.

use super::*;

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

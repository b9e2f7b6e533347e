//! The streaming contract in process: cursors, the seam between history
//! and live events, many and slow followers, heartbeats, the end frames.

use super::*;
use crate::serve::access::Access;

#[tokio::test]
async fn a_reconnect_with_last_event_id_gets_exactly_the_events_after_it() {
    let s = server();
    let run = s.run().await;
    run.warnings_to(5).await;
    let uri = format!("/workflows/{}/events/sse?offset=0", run.id());
    let mut first = Reader::of(s.get(&uri).await);
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(sse_id(&first.sse().await.unwrap()).unwrap());
    }
    assert_eq!(seen, [1, 2, 3]);
    drop(first);
    run.warnings_to(8).await;
    run.append(completed()).await;
    // The browser reconnects to the same URL (a stale `offset`) with the header.
    let again = s
        .request(
            Request::get(&uri)
                .header("last-event-id", "3")
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(again.status(), StatusCode::OK);
    let headers = again.headers().clone();
    assert_eq!(headers["content-type"], "text/event-stream");
    assert_eq!(headers["cache-control"], "no-cache");
    assert_eq!(headers["x-accel-buffering"], "no");
    let mut again = Reader::of(again);
    let mut ids = Vec::new();
    let end = loop {
        let event = again.sse().await.unwrap();
        match sse_id(&event) {
            Some(id) => ids.push(id),
            None => break event,
        }
    };
    assert_eq!(ids, (4..=9).collect::<Vec<_>>());
    assert_eq!(
        end,
        "event: end\ndata: {\"lastOffset\":9,\"status\":\"completed\"}"
    );
    assert_eq!(
        again.sse().await,
        None,
        "the stream ends after its end frame"
    );
}

#[tokio::test]
async fn ndjson_takes_the_offset_and_ends_with_the_terminal_frame() {
    let s = server();
    let run = s.run().await;
    run.warnings_to(4).await;
    let response = s
        .get(&format!("/workflows/{}/events?offset=2", run.id()))
        .await;
    assert_eq!(response.headers()["content-type"], "application/x-ndjson");
    assert_eq!(response.headers()["x-accel-buffering"], "no");
    let mut reader = Reader::of(response);
    assert_eq!(reader.line().await.unwrap()["offset"], 3);
    run.append(completed()).await;
    let (offsets, end) = reader.offsets_to_end().await;
    assert_eq!(offsets, [4, 5]);
    assert_eq!(
        end.unwrap(),
        json!({"type": "end", "status": "completed", "lastOffset": 5})
    );
}

#[tokio::test]
async fn a_finished_run_answers_a_caught_up_client_at_once() {
    let s = server();
    let run = s.run().await;
    let last = run.append(completed()).await;
    let sse = s
        .get(&format!("/workflows/{}/events/sse?offset={last}", run.id()))
        .await;
    assert_eq!(sse.status(), StatusCode::NO_CONTENT);
    let ndjson = s
        .get(&format!("/workflows/{}/events?offset={last}", run.id()))
        .await;
    let (offsets, end) = Reader::of(ndjson).offsets_to_end().await;
    assert!(offsets.is_empty());
    assert_eq!(end.unwrap()["status"], "completed");
    // Behind, it gets the rest and the frame.
    let behind = s
        .get(&format!("/workflows/{}/events/sse?offset=1", run.id()))
        .await;
    let mut behind = Reader::of(behind);
    assert_eq!(sse_id(&behind.sse().await.unwrap()), Some(2));
    assert!(behind.sse().await.unwrap().starts_with("event: end"));
}

#[tokio::test]
async fn an_append_between_the_subscribe_and_the_history_read_is_sent_once() {
    let s = server();
    let run = s.run().await;
    let mut client = Reader::of(s.get(&format!("/workflows/{}/events", run.id())).await);
    // The client subscribed, then read the history: offset 1.
    assert_eq!(client.line().await.unwrap()["offset"], 1);
    // Offset 2 lands after the subscribe: both the history read and the
    // broadcast carry it.
    run.append(warning(2)).await;
    assert_eq!(client.line().await.unwrap()["offset"], 2);
    // Polled once more, it has drained the history and waits on the
    // broadcast, which carries offset 2 too.
    assert!(futures::FutureExt::now_or_never(client.line()).is_none());
    run.append(completed()).await;
    let (offsets, end) = client.offsets_to_end().await;
    assert_eq!(offsets, [3], "offset 2 came twice");
    assert_eq!(end.unwrap()["lastOffset"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_racing_the_subscribes_are_seen_once_each() {
    let s = server();
    let run = Arc::new(s.run().await);
    let total = 2000u64;
    let writer = tokio::spawn({
        let run = Arc::clone(&run);
        async move {
            for n in 2..total {
                run.append(warning(n)).await;
                if n % 8 == 0 {
                    tokio::task::yield_now().await;
                }
            }
            run.append(completed()).await;
        }
    });
    let mut followers = Vec::new();
    for i in 0..40u64 {
        // Each client comes in while the log grows.
        let at = 1 + i * (total / 50);
        while run.store.last_offset(run.run_id).await.unwrap() < at {
            tokio::task::yield_now().await;
        }
        let response = s.get(&format!("/workflows/{}/events", run.id())).await;
        followers.push(tokio::spawn(async move {
            Reader::of(response).offsets_to_end().await
        }));
    }
    writer.await.unwrap();
    for follower in followers {
        let (offsets, end) = follower.await.unwrap();
        assert_eq!(offsets, (1..=total).collect::<Vec<_>>());
        assert_eq!(end.unwrap()["lastOffset"], total);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_followers_each_see_every_event_once_in_order_from_one_reader() {
    // Caps above the thousand streams (the default is 64 per token).
    let s = configured(Access::Open, |config| {
        config.limits.streams = 1000;
        config.limits.streams_per_caller = 1000;
    });
    let run = s.run().await;
    let mut followers = Vec::new();
    for _ in 0..1000 {
        let response = s.get(&format!("/workflows/{}/events", run.id())).await;
        let mut reader = Reader::of(response);
        // Each has read the history (offset 1) before the run goes on.
        assert_eq!(reader.line().await.unwrap()["offset"], 1);
        followers.push(tokio::spawn(async move { reader.offsets_to_end().await }));
    }
    let total = 300;
    run.warnings_to(total - 1).await;
    run.append(completed()).await;
    for follower in followers {
        let (offsets, end) = follower.await.unwrap();
        assert_eq!(offsets, (2..=total).collect::<Vec<_>>());
        assert_eq!(end.unwrap()["status"], "completed");
    }
    assert_eq!(s.app.hub().followers(), 1, "one store follower for the run");
}

#[tokio::test]
async fn a_slow_follower_falls_back_to_the_store_and_loses_nothing() {
    let s = server_with(None, 4, Duration::from_secs(15));
    let run = s.run().await;
    let mut slow = Reader::of(s.get(&format!("/workflows/{}/events", run.id())).await);
    let mut quick = Reader::of(s.get(&format!("/workflows/{}/events", run.id())).await);
    assert_eq!(slow.line().await.unwrap()["offset"], 1);
    assert_eq!(quick.line().await.unwrap()["offset"], 1);
    // Polled once more, it has drained the history and waits on live events.
    assert!(futures::FutureExt::now_or_never(slow.line()).is_none());
    // The slow one reads nothing while 100 events (25 times its buffer) land.
    let quick = tokio::spawn(async move { quick.offsets_to_end().await });
    run.warnings_to(100).await;
    run.append(completed()).await;
    let (offsets, _) = quick.await.unwrap();
    assert_eq!(offsets, (2..=101).collect::<Vec<_>>());
    let (offsets, end) = slow.offsets_to_end().await;
    assert_eq!(offsets, (2..=101).collect::<Vec<_>>());
    assert_eq!(end.unwrap()["lastOffset"], 101);
    assert!(s.app.hub().fallbacks() >= 1, "the slow follower fell back");
}

#[tokio::test(start_paused = true)]
async fn an_idle_stream_sends_heartbeats_without_ids() {
    let s = server_with(None, 16, Duration::from_secs(5));
    let run = s.run().await;
    let sse = s.get(&format!("/workflows/{}/events/sse", run.id())).await;
    let mut sse = Reader::of(sse);
    let ndjson = s.get(&format!("/workflows/{}/events", run.id())).await;
    let mut ndjson = Reader::of(ndjson);
    assert_eq!(sse_id(&sse.sse().await.unwrap()), Some(1));
    assert_eq!(ndjson.line().await.unwrap()["offset"], 1);
    // Each stream's silence is timed from its last frame.
    let before = tokio::time::Instant::now();
    // SSE: a named event (a page sees it; a comment it would not), without an id.
    assert_eq!(
        sse.sse().await.unwrap(),
        "event: heartbeat\ndata: {\"heartbeatMs\":5000}"
    );
    assert_eq!(ndjson.line().await.unwrap(), json!({"type": "heartbeat"}));
    let waited = before.elapsed();
    assert!(
        waited >= Duration::from_secs(5) && waited < Duration::from_secs(6),
        "{waited:?}"
    );
    let before = tokio::time::Instant::now();
    assert_eq!(ndjson.line().await.unwrap(), json!({"type": "heartbeat"}));
    let waited = before.elapsed();
    assert!(
        waited >= Duration::from_secs(5) && waited < Duration::from_secs(6),
        "{waited:?}"
    );
    // An event comes next, with its id (after the heartbeat the SSE
    // stream sent meanwhile, unread).
    run.append(warning(2)).await;
    let next = loop {
        let frame = sse.sse().await.unwrap();
        if !frame.starts_with("event: heartbeat\n") {
            break frame;
        }
    };
    assert_eq!(sse_id(&next), Some(2));
}

#[tokio::test]
async fn a_shutdown_ends_open_streams_with_their_frame() {
    let s = server();
    let run = s.run().await;
    let mut ndjson = Reader::of(s.get(&format!("/workflows/{}/events", run.id())).await);
    let mut sse = Reader::of(s.get(&format!("/workflows/{}/events/sse", run.id())).await);
    assert_eq!(ndjson.line().await.unwrap()["offset"], 1);
    assert_eq!(sse_id(&sse.sse().await.unwrap()), Some(1));
    run.append(warning(2)).await;
    s.app.shut_down().await;
    let (offsets, end) = ndjson.offsets_to_end().await;
    assert_eq!(offsets, [2]);
    assert_eq!(
        end.unwrap(),
        json!({"type": "end", "status": "running", "lastOffset": 2, "reason": "server shutting down"})
    );
    assert_eq!(sse_id(&sse.sse().await.unwrap()), Some(2));
    assert_eq!(
        sse.sse().await.unwrap(),
        "event: end\ndata: {\"lastOffset\":2,\"reason\":\"server shutting down\",\"status\":\"running\"}"
    );
    // Once shutting down, no run is started or forked (nor resumed): its
    // run would be cut off as the process exits.
    for (uri, body) in [
        ("/workflows".to_owned(), r#"{"path": "x.yaml"}"#),
        (format!("/workflows/{}/fork", run.id()), r#"{"at": 1}"#),
    ] {
        let refused = s.post(&uri, body).await;
        assert_eq!(
            refused.status(),
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "{uri}"
        );
    }
}

/// `?replay=SPEED` plays the recorded log at its pace over the speed (1 s
/// between events at speed 2: every 0.5 s), with the log's offsets, then
/// goes on live to the end; a speed that is not above 0 is refused.
#[tokio::test(start_paused = true)]
async fn a_replay_plays_the_log_at_its_recorded_pace_then_goes_live() {
    // Timed on tokio's paused clock, as its waits are: the wall clock
    // would run on while the test waits for nothing.
    let mut s = server();
    s.app = s
        .app
        .with_clock(Arc::new(application::testing::TokioClock::new()))
        .unwrap();
    let run = s.run().await;
    for k in 2..=4 {
        run.append_at(warning(k), Some(1 + (k as i64 - 1) * 1000))
            .await;
    }
    let begun = tokio::time::Instant::now();
    let mut replay = Reader::of(
        s.get(&format!("/workflows/{}/events?replay=2", run.id()))
            .await,
    );
    let mut shown = Vec::new();
    for _ in 1..=4 {
        let line = replay.line().await.unwrap();
        shown.push((
            line["offset"].as_u64().unwrap(),
            begun.elapsed().as_millis(),
        ));
    }
    assert_eq!(shown, vec![(1, 0), (2, 500), (3, 1000), (4, 1500)]);
    // Caught up: live events come as they are written.
    run.append(completed()).await;
    let (offsets, end) = replay.offsets_to_end().await;
    assert_eq!(offsets, vec![5]);
    assert_eq!(end.unwrap()["status"], "completed");

    for bad in ["0", "-1", "fast"] {
        let uri = format!("/workflows/{}/events/sse?replay={bad}", run.id());
        let message = error(s.get(&uri).await, StatusCode::BAD_REQUEST, "bad_request").await;
        assert!(
            message.contains("replay") && message.contains(bad),
            "{message}"
        );
    }
}

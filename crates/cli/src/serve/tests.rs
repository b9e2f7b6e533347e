//! The server in process: requests through the router (`oneshot`), bodies
//! read frame by frame, runs written straight to a real file store so each
//! test says exactly which event lands when.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use application::ports::{RunLock, RunStore};
use axum::body::Body;
use axum::http::{Request, StatusCode};
use domain::{EventKind, Offset, RunId, RuntimeEvent, Timestamp};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

use super::{App, Config, router};

/// A server over a fresh storage, its root the repository (for `examples/`).
struct Server {
    _dir: tempfile::TempDir,
    app: App,
}

fn server_with(token: Option<&str>, buffer: usize, heartbeat: Duration) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let app = App::new(Config {
        storage: crate::storage::Storage::Files(dir.path().join("storage")),
        root,
        token: token.map(str::to_owned),
        heartbeat,
        buffer,
    })
    .ok()
    .unwrap();
    Server { _dir: dir, app }
}

fn server() -> Server {
    server_with(None, super::BUFFER, Duration::from_secs(15))
}

impl Server {
    async fn request(&self, request: Request<Body>) -> axum::response::Response {
        router(self.app.clone()).oneshot(request).await.unwrap()
    }

    async fn get(&self, uri: &str) -> axum::response::Response {
        self.request(Request::get(uri).body(Body::empty()).unwrap())
            .await
    }

    async fn post(&self, uri: &str, body: impl Into<Body>) -> axum::response::Response {
        self.request(
            Request::post(uri)
                .header("content-type", "application/json")
                .body(body.into())
                .unwrap(),
        )
        .await
    }

    /// A new run written here, and its lock (the run has a live writer).
    async fn run(&self) -> Writer {
        let run_id: RunId = uuid_like(rand_u64()).parse().unwrap();
        let lock = self.app.store().create_run(run_id).await.unwrap();
        let writer = Writer {
            store: Arc::clone(self.app.store()),
            run_id,
            _lock: lock,
        };
        writer.append(started()).await;
        writer
    }
}

fn rand_u64() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn uuid_like(n: u64) -> String {
    format!("00000000-0000-4000-8000-{n:012x}")
}

/// The writer of a run: appends events with the next offsets.
struct Writer {
    store: Arc<dyn RunStore>,
    run_id: RunId,
    _lock: RunLock,
}

fn started() -> EventKind {
    EventKind::FlowStarted {
        workflow: Default::default(),
        input: Value::Null,
        parent_run_id: None,
        source: None,
        nodes: vec![],
        edges: vec![],
    }
}

fn warning(n: u64) -> EventKind {
    EventKind::Warning {
        message: format!("w{n}"),
        details: None,
    }
}

fn completed() -> EventKind {
    EventKind::FlowCompleted {
        output: Value::Null,
        duration_ms: 1,
    }
}

impl Writer {
    async fn append(&self, kind: EventKind) -> u64 {
        let offset = self.store.last_offset(self.run_id).await.unwrap() + 1;
        let event = RuntimeEvent {
            id: format!("e{offset}"),
            offset: Offset::new(offset).unwrap(),
            timestamp: Timestamp::from_millis(offset as i64),
            run_id: self.run_id,
            node_id: None,
            node_run_id: None,
            kind,
            extra: Default::default(),
        };
        self.store.append(self.run_id, &[event]).await.unwrap();
        offset
    }

    /// Appends warnings until the log's last offset is `last`.
    async fn warnings_to(&self, last: u64) {
        loop {
            let at = self.store.last_offset(self.run_id).await.unwrap();
            if at >= last {
                return;
            }
            self.append(warning(at + 1)).await;
        }
    }

    fn id(&self) -> String {
        self.run_id.to_string()
    }
}

/// A response body read a line (NDJSON) or an event (SSE) at a time.
struct Reader {
    body: Body,
    buffer: Vec<u8>,
}

impl Reader {
    fn of(response: axum::response::Response) -> Self {
        Self {
            body: response.into_body(),
            buffer: Vec::new(),
        }
    }

    /// The next chunk up to `separator`, without it; `None` at the end.
    async fn next_until(&mut self, separator: &[u8]) -> Option<String> {
        loop {
            if let Some(at) = self
                .buffer
                .windows(separator.len())
                .position(|w| w == separator)
            {
                let chunk: Vec<u8> = self.buffer.drain(..at + separator.len()).collect();
                return Some(String::from_utf8_lossy(&chunk[..at]).into_owned());
            }
            match self.body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buffer.extend_from_slice(&data);
                    }
                }
                _ => return None,
            }
        }
    }

    /// The next NDJSON line, parsed.
    async fn line(&mut self) -> Option<Value> {
        let line = self.next_until(b"\n").await?;
        Some(serde_json::from_str(&line).unwrap())
    }

    /// The next SSE event, as its lines.
    async fn sse(&mut self) -> Option<String> {
        self.next_until(b"\n\n").await
    }

    /// Every NDJSON line to the end: the offsets of events, then what ended it.
    async fn offsets_to_end(&mut self) -> (Vec<u64>, Option<Value>) {
        let mut offsets = Vec::new();
        while let Some(line) = self.line().await {
            match line["type"].as_str() {
                Some("end") => return (offsets, Some(line)),
                Some("heartbeat") => {}
                _ => offsets.push(line["offset"].as_u64().unwrap()),
            }
        }
        (offsets, None)
    }
}

/// The `id:` of an SSE event, if it has one.
fn sse_id(event: &str) -> Option<u64> {
    event
        .lines()
        .find_map(|l| l.strip_prefix("id: "))
        .map(|id| id.parse().unwrap())
}

async fn json_body(response: axum::response::Response) -> Value {
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&bytes).unwrap_or_else(|e| {
        panic!("{e}: {}", String::from_utf8_lossy(&bytes));
    })
}

/// Asserts `response` is the error `kind` with `status`, and returns its message.
async fn error(response: axum::response::Response, status: StatusCode, kind: &str) -> String {
    assert_eq!(response.status(), status);
    let body = json_body(response).await;
    assert_eq!(body["error"], kind, "{body}");
    body["message"].as_str().unwrap().to_owned()
}

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
    let s = server();
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
    // A body is polled as it is read: each silence is timed from its read.
    let before = tokio::time::Instant::now();
    assert_eq!(sse.sse().await.unwrap(), ": heartbeat");
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
    // An event resets the silence; it comes next, with its id.
    run.append(warning(2)).await;
    assert_eq!(sse_id(&sse.sse().await.unwrap()), Some(2));
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
}

#[tokio::test]
async fn bad_input_is_refused_with_a_json_error_never_a_panic() {
    let s = server();
    let run = s.run().await;
    let id = run.id();
    let message = error(
        s.get(&format!("/workflows/{id}/events?offset=ten")).await,
        StatusCode::BAD_REQUEST,
        "bad_request",
    )
    .await;
    assert!(message.contains("offset: `ten`"), "{message}");
    let message = error(
        s.request(
            Request::get(format!("/workflows/{id}/events/sse"))
                .header("last-event-id", "x1")
                .body(Body::empty())
                .unwrap(),
        )
        .await,
        StatusCode::BAD_REQUEST,
        "bad_request",
    )
    .await;
    assert!(message.contains("Last-Event-ID"), "{message}");
    for uri in [
        format!("/workflows/{}", uuid_like(999_999)),
        format!("/workflows/{}/events", uuid_like(999_999)),
        "/workflows/zzz".to_owned(),
        "/nowhere".to_owned(),
        "/ui/secret.txt".to_owned(),
    ] {
        error(s.get(&uri).await, StatusCode::NOT_FOUND, "not_found").await;
    }
    let message = error(
        s.post("/workflows", "{not json").await,
        StatusCode::BAD_REQUEST,
        "bad_request",
    )
    .await;
    assert!(message.contains("line 1 column 2"), "{message}");
    let message = error(
        s.post("/workflows", r#"{"path": "x", "inputs": 1}"#).await,
        StatusCode::BAD_REQUEST,
        "bad_request",
    )
    .await;
    assert!(message.contains("unknown field `inputs`"), "{message}");
    let bad = json!({"workflow": "name: x\nagents:\n  a: {provider: nope}\nsteps: [{agent: a}]\n"});
    let message = error(
        s.post("/workflows", bad.to_string()).await,
        StatusCode::BAD_REQUEST,
        "bad_request",
    )
    .await;
    assert!(
        message.starts_with("workflow:3:") && message.contains("agents.a.provider"),
        "{message}"
    );
    for path in ["../../etc/passwd", "/etc/passwd"] {
        let body = json!({ "path": path });
        error(
            s.post("/workflows", body.to_string()).await,
            StatusCode::FORBIDDEN,
            "forbidden",
        )
        .await;
    }
    let huge = format!(r#"{{"workflow": "{}"}}"#, "x".repeat(super::BODY_LIMIT + 1));
    error(
        s.post("/workflows", huge).await,
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
    )
    .await;
    let message = error(
        s.post(&format!("/workflows/{id}/commands"), "[1]").await,
        StatusCode::BAD_REQUEST,
        "bad_request",
    )
    .await;
    assert!(message.contains("must be a command"), "{message}");
    let message = error(
        s.get("/workflows?limit=lots").await,
        StatusCode::BAD_REQUEST,
        "bad_request",
    )
    .await;
    assert!(message.contains("limit"), "{message}");
}

#[tokio::test]
async fn with_a_token_every_request_carries_it() {
    let s = server_with(Some("s3cret"), 16, Duration::from_secs(15));
    error(
        s.get("/healthz").await,
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    )
    .await;
    let wrong = Request::get("/healthz")
        .header("authorization", "Bearer s3cre")
        .body(Body::empty())
        .unwrap();
    error(
        s.request(wrong).await,
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    )
    .await;
    let right = Request::get("/healthz")
        .header("authorization", "Bearer s3cret")
        .body(Body::empty())
        .unwrap();
    assert_eq!(s.request(right).await.status(), StatusCode::OK);
    assert_eq!(
        s.get("/healthz?access_token=s3cret").await.status(),
        StatusCode::OK
    );
}

#[tokio::test]
async fn a_non_loopback_bind_without_a_token_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        storage: crate::storage::Storage::Files(dir.path().join("storage")),
        root: dir.path().to_path_buf(),
        token: None,
        heartbeat: Duration::from_secs(15),
        buffer: 16,
    };
    let Err(crate::Failure::Input(e)) = super::serve("0.0.0.0:0", config).await else {
        panic!("a non-loopback bind without a token must be refused");
    };
    assert!(e.to_string().contains("--token"), "{e}");
}

#[tokio::test]
async fn a_run_started_over_http_is_listed_shown_and_streamed_to_its_end() {
    let s = server();
    let response = s
        .post("/workflows", r#"{"path": "examples/summarize.yaml"}"#)
        .await;
    assert_eq!(response.status(), StatusCode::CREATED);
    let location = response.headers()["location"].to_str().unwrap().to_owned();
    let body = json_body(response).await;
    let id = body["runId"].as_str().unwrap().to_owned();
    assert_eq!(location, format!("/workflows/{id}"));
    assert_eq!(body["urls"]["sse"], format!("/workflows/{id}/events/sse"));
    let (offsets, end) = Reader::of(s.get(&format!("{location}/events")).await)
        .offsets_to_end()
        .await;
    let last = offsets.len() as u64;
    assert_eq!(offsets, (1..=last).collect::<Vec<_>>());
    assert_eq!(end.unwrap()["status"], "completed");
    let shown = json_body(s.get(&location).await).await;
    assert_eq!(shown["status"], "completed");
    assert_eq!(shown["lastOffset"], last);
    // By a prefix, as on the command line.
    let by_prefix = json_body(s.get(&format!("/workflows/{}", &id[..8])).await).await;
    assert_eq!(by_prefix["runId"], id);
    let list = json_body(s.get("/workflows?status=completed").await).await;
    assert_eq!(list["counts"]["completed"], 1);
    assert_eq!(list["runs"][0]["runId"], id);
    assert_eq!(list["runs"][0]["workflow"], "summarize");
    assert_eq!(list["next"], Value::Null);
    let message = error(
        s.post(&format!("{location}/commands"), r#"{"type":"pause"}"#)
            .await,
        StatusCode::CONFLICT,
        "conflict",
    )
    .await;
    assert!(message.contains("has ended"), "{message}");
    let transcript = s.get(&format!("{location}/transcript")).await;
    let mut transcript = Reader::of(transcript);
    assert_eq!(transcript.line().await.unwrap()["type"], "run.started");
}

#[tokio::test]
async fn the_list_pages_newest_first_with_counts_over_every_run() {
    let s = server();
    let mut ids = Vec::new();
    for _ in 0..3 {
        let run = s.run().await;
        ids.push(run.id());
        run.append(completed()).await;
    }
    let first = json_body(s.get("/workflows?limit=2").await).await;
    assert_eq!(first["counts"]["completed"], 3);
    assert_eq!(first["runs"].as_array().unwrap().len(), 2);
    let next = first["next"].as_str().unwrap().to_owned();
    let second = json_body(s.get(&format!("/workflows?limit=2&after={next}")).await).await;
    assert_eq!(second["runs"].as_array().unwrap().len(), 1);
    assert_eq!(second["next"], Value::Null);
    let none = json_body(s.get("/workflows?status=failed").await).await;
    assert_eq!(none["runs"], json!([]));
    assert_eq!(none["counts"]["completed"], 3);
}

#[tokio::test]
async fn the_ui_is_served_from_the_binary() {
    let s = server();
    let index = s.get("/").await;
    assert_eq!(index.status(), StatusCode::OK);
    assert!(
        index.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let js = s.get("/ui/app.js").await;
    assert!(
        js.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/javascript")
    );
}

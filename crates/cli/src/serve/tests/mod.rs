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

use super::access::Access;
use super::{App, Config, router};

mod api;
mod fork;
mod security;
mod stream;

/// A server over a fresh storage, its root the repository (for `examples/`).
struct Server {
    _dir: tempfile::TempDir,
    app: App,
}

fn server_with(token: Option<&str>, buffer: usize, heartbeat: Duration) -> Server {
    let access = match token {
        Some(token) => Access::single(token),
        None => Access::Open,
    };
    configured(access, |config| {
        config.buffer = buffer;
        config.heartbeat = heartbeat;
    })
}

/// A server over a fresh storage, callers let in by `access`, its other
/// settings as `set` makes them.
fn configured(access: Access, set: impl FnOnce(&mut Config)) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let storage = crate::storage::Storage::Files(dir.path().join("storage"));
    let mut config = Config::new(storage, root, access);
    set(&mut config);
    // A file store opens without awaiting anything.
    let app = futures::executor::block_on(App::new(config)).ok().unwrap();
    Server { _dir: dir, app }
}

fn server() -> Server {
    server_with(None, super::BUFFER, Duration::from_secs(15))
}

impl Server {
    /// `request` through the router, sent to `127.0.0.1` unless it names
    /// its own host.
    async fn request(&self, mut request: Request<Body>) -> axum::response::Response {
        if !request.headers().contains_key("host") {
            request
                .headers_mut()
                .insert("host", "127.0.0.1".parse().unwrap());
        }
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
        definition: None,
        nodes: vec![],
        edges: vec![],
        started_by: None,
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
    /// Appends `kind` at the next offset, recorded `offset` ms after 1970.
    async fn append(&self, kind: EventKind) -> u64 {
        self.append_at(kind, None).await
    }

    /// Appends `kind` at the next offset, recorded at `millis` (the
    /// offset when `None`).
    async fn append_at(&self, kind: EventKind, millis: Option<i64>) -> u64 {
        let offset = self.store.last_offset(self.run_id).await.unwrap() + 1;
        let event = RuntimeEvent {
            id: format!("e{offset}"),
            offset: Offset::new(offset).unwrap(),
            timestamp: Timestamp::from_millis(millis.unwrap_or(offset as i64)),
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

/// Requests and streams are served below the priority of runs: the
/// server's threads are `HTTP_NICENESS` nicer than the thread that made
/// them (on Linux a nice value is per thread).
#[test]
fn the_servers_threads_run_below_the_runs_priority() {
    use rustix::process::getpriority_process;

    let runs = getpriority_process(None).unwrap();
    let http = super::http_runtime().unwrap();
    let served = http
        .block_on(async { tokio::spawn(async { getpriority_process(None) }).await })
        .unwrap()
        .unwrap();
    assert_eq!(served, (runs + super::HTTP_NICENESS).min(19));
    assert_eq!(
        getpriority_process(None).unwrap(),
        runs,
        "this thread is untouched"
    );
}

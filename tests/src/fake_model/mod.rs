//! A scriptable fake model server, so tests can drive the real agent CLIs
//! (Claude Code, Codex, Gemini CLI, Copilot CLI) and our own HTTP providers
//! fully offline on 127.0.0.1.
//!
//! It speaks the four streaming wire formats those clients use (Anthropic
//! Messages, OpenAI Responses, OpenAI Chat Completions, Gemini
//! `streamGenerateContent`) and picks what to answer from a keyword in the
//! newest user text, exactly as `fake_llm_server.py` in the reference material
//! does (see `scenario` for the keywords). Every request is recorded with its
//! headers and JSON body so a test can assert what a client sent.
//!
//! Routing is by path *suffix* (`…/messages`, `…/responses`, …) because the
//! clients put different prefixes in front (`/v1`, a custom base path).

mod anthropic;
mod chat;
mod gemini;
mod responses;
mod scenario;
mod sse;

use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, DefaultBodyLimit, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// One request the server received, kept so a test can check what a client
/// sent (its API key header, its model, its tools, its messages).
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    /// HTTP method, upper case (`POST`, `GET`).
    pub method: String,
    /// Path without the query string, e.g. `/v1/messages`.
    pub path: String,
    /// The raw query string (`beta=true`, `alt=sse`), empty when absent.
    pub query: String,
    /// Every header as (lower-case name, value) in arrival order; values that
    /// are not valid UTF-8 are stored lossily. Kept as a list, not a map,
    /// because repeated headers are legal and a test may want to see them.
    pub headers: Vec<(String, String)>,
    /// The client's address: requests from one address came over one
    /// connection, so a test can see whether a client reuses it.
    pub peer: std::net::SocketAddr,
    /// The body parsed as JSON; `Value::Null` when empty or not JSON (for
    /// example a compressed body), because tests only assert on JSON bodies.
    pub body: Value,
}

impl RecordedRequest {
    /// The first value of a header, by case-insensitive name, so a test can
    /// write `req.header("x-api-key")` without caring how the client spelled it.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// State shared by every connection handler.
#[derive(Default)]
struct Shared {
    /// A `std::sync::Mutex`, not a Tokio one: it is held only to push or
    /// clone, never across an `.await`.
    requests: Mutex<Vec<RecordedRequest>>,
    /// What the stateful scenarios (`RATEONCE`) remember, per server, so
    /// tests running side by side never see each other's requests.
    scenario: scenario::State,
    /// Which model calls are held open (see [`FakeModel::hold_after`]).
    hold: Mutex<Hold>,
}

/// Model calls held open: from the call numbered `after` (counting from 0)
/// on, while `on`; `seen` counts the model calls so far.
#[derive(Debug, Default)]
struct Hold {
    on: bool,
    after: usize,
    seen: usize,
}

/// A running fake model server bound to 127.0.0.1 on a free port.
///
/// It stops when dropped, so a test cannot leak a server that keeps the test
/// binary alive; start one per test (starting takes well under a millisecond).
pub struct FakeModel {
    /// The bound address, known only after binding to port 0.
    addr: std::net::SocketAddr,
    /// Shared with the handlers, so [`FakeModel::requests`] sees what they recorded.
    shared: Arc<Shared>,
    /// Tells the server to stop accepting and close connections gracefully.
    /// An `Option` so `Drop` can take it out and send once.
    shutdown: Option<oneshot::Sender<()>>,
    /// The accept loop, aborted on drop in case a client holds a connection open.
    task: JoinHandle<()>,
}

impl FakeModel {
    /// Binds 127.0.0.1:0 and starts serving on the current Tokio runtime.
    ///
    /// # Errors
    /// Returns the I/O error if the socket cannot be bound or its address read.
    pub async fn start() -> std::io::Result<FakeModel> {
        Self::start_on(std::net::SocketAddr::from(([127, 0, 0, 1], 0))).await
    }

    /// Binds `addr` (a loopback address, for the examples) and starts serving.
    ///
    /// # Errors
    /// Returns the I/O error if the socket cannot be bound or its address read.
    pub async fn start_on(addr: std::net::SocketAddr) -> std::io::Result<FakeModel> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::default());
        let app = Router::new()
            .fallback(handle)
            // Claude Code and Codex send large bodies (system prompt plus every
            // tool schema); the default 2 MB limit is a guess we do not need.
            .layer(DefaultBodyLimit::disable())
            .with_state(Arc::clone(&shared));
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let app = app.into_make_service_with_connect_info::<std::net::SocketAddr>();
            let server = axum::serve(listener, app).with_graceful_shutdown(async move {
                // Either a send or the sender being dropped means "stop".
                let _ = rx.await;
            });
            // A serve error only ends the server; the test sees it as a
            // refused connection, which is the clearest symptom available.
            let _ = server.await;
        });
        Ok(FakeModel {
            addr,
            shared,
            shutdown: Some(tx),
            task,
        })
    }

    /// The base URL to hand to a client, `http://127.0.0.1:PORT`, without a
    /// trailing slash or `/v1` (clients differ in whether they add `/v1`).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Holds model calls open, like a model that stalls mid-call: the first
    /// `after` model calls from now on are answered as usual, every later
    /// one gets its status line and headers and then nothing more, until
    /// the client goes away. A test uses it to catch an agent mid-call (to
    /// pause or kill its run there) without racing the reply. Only model
    /// calls count (`POST`s, token counts aside), not probes.
    pub fn hold_after(&self, after: usize) {
        *self
            .shared
            .hold
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Hold {
            on: true,
            after,
            seen: 0,
        };
    }

    /// Answers the model calls that come from now on again (those already
    /// held stay held).
    pub fn release(&self) {
        self.shared
            .hold
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .on = false;
    }

    /// A snapshot of every request received so far, oldest first.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Drop for FakeModel {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        self.task.abort();
    }
}

/// The single handler: record the request, then route by path suffix.
async fn handle(
    State(shared): State<Arc<Shared>>,
    ConnectInfo(peer): ConnectInfo<std::net::SocketAddr>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_owned();
    let parsed: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let recorded = RecordedRequest {
        method: method.as_str().to_owned(),
        path: path.clone(),
        query: uri.query().unwrap_or_default().to_owned(),
        headers: headers
            .iter()
            .map(|(n, v)| {
                (
                    n.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        peer,
        body: parsed.clone(),
    };
    shared
        .requests
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(recorded);
    if method == Method::POST && !path.ends_with("/count_tokens") && held(&shared) {
        return sse::held();
    }
    route(&method, &path, &parsed, &shared.scenario)
}

/// Whether this model call is one [`FakeModel::hold_after`] holds open.
fn held(shared: &Shared) -> bool {
    let mut hold = shared.hold.lock().unwrap_or_else(PoisonError::into_inner);
    if !hold.on {
        return false;
    }
    hold.seen += 1;
    hold.seen > hold.after
}

/// Chooses the wire format from the method and path suffix.
fn route(method: &Method, path: &str, body: &Value, state: &scenario::State) -> Response {
    if *method == Method::HEAD {
        return sse::status_only(StatusCode::OK);
    }
    if *method == Method::GET {
        if path.ends_with("/models") {
            return sse::json(StatusCode::OK, &model_list(), &[]);
        }
        return not_found(path);
    }
    if *method != Method::POST {
        return not_found(path);
    }
    if path.ends_with("/messages/count_tokens") {
        return sse::json(StatusCode::OK, &json!({"input_tokens": 42}), &[]);
    }
    if path.ends_with("/messages") {
        return anthropic::respond(body, state);
    }
    if path.ends_with("/responses") {
        return responses::respond(body, state);
    }
    if path.ends_with("/chat/completions") {
        return chat::respond(body, state);
    }
    if let Some((model, method)) = gemini::parse_path(path) {
        return gemini::respond(model, method, body, state);
    }
    not_found(path)
}

/// A model list that satisfies both the OpenAI and the Anthropic shape, for
/// clients that probe `/models` before their first call.
fn model_list() -> Value {
    json!({
        "object": "list",
        "data": [{
            "id": "fake-model", "object": "model", "created": 0, "owned_by": "fake",
            "type": "model", "display_name": "Fake Model"
        }],
        "has_more": false,
        "first_id": "fake-model",
        "last_id": "fake-model"
    })
}

/// Unknown endpoints (telemetry, feature flags) get a JSON 404, which the
/// real clients treat as "not available" and carry on.
fn not_found(path: &str) -> Response {
    sse::json(
        StatusCode::NOT_FOUND,
        &json!({"error": {"message": format!("not found: {path}"), "type": "not_found_error"}}),
        &[],
    )
}

//! A run's events over HTTP, from its durable log: the history after the
//! client's offset, then live events, then a terminal frame
//! (docs/http.md, "Streaming").
//!
//! The offset is the cursor: the `offset` field of each NDJSON line, the
//! `id:` of each SSE event, and `Last-Event-ID` overrides `?offset` (a
//! browser reconnects to the same URL). Frames the server makes up
//! (heartbeats, the end) carry no offset and no id.
//!
//! Fan-out: however many clients follow a run, the server follows it once
//! ([`Hub`]): one store follower per run broadcasts each event, serialized
//! once, over a bounded channel. A client subscribes first, then reads the
//! history from the store, and drops at the seam what it already sent, so
//! nothing is missed or repeated. A client that falls behind (its buffer
//! overflowed) or sees a gap reads the store from its last offset and joins
//! the broadcast again: a slow client never slows the run, nor loses an
//! event. A client that goes away only drops its subscription: the run
//! goes on, and the follower stops once no client is left.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use application::inspect::{LogRead, read_log, run_view};
use application::ports::Clock;
use application::ports::{RunStore, StoreError};
use application::query::{Unresolved, find_run};
use application::replay::{MAX_WAIT, Pace, parse_speed};
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use domain::{RunId, RuntimeEvent};
use futures::{Stream, StreamExt};
use serde::Deserialize;
use tokio::sync::broadcast;

use super::access::Granted;
use super::frame::{Frame, body, stream_headers, with_heartbeats};
use super::openapi::refusals::{BadRequest, Internal, NotFound, Unavailable};
use super::openapi::{RunPath, SseEvent};
use super::{ApiError, App};

/// Events read from the store per batch (history and fallbacks).
const BATCH: usize = 256;

/// How often a run's follower with no client left notices and stops.
const IDLE_CHECK: Duration = Duration::from_secs(1);

/// What the follower of a run broadcasts.
#[derive(Debug, Clone)]
enum Item {
    /// The next event, serialized once for every client.
    Event(Arc<Shared>),
    /// The line at this offset is not its event: clients skip it.
    Bad(u64),
}

/// One event as clients send it.
#[derive(Debug)]
struct Shared {
    offset: u64,
    json: Arc<str>,
    /// `completed`, `failed` or `cancelled` for a run's terminal event.
    end: Option<&'static str>,
}

impl Shared {
    fn of(event: &RuntimeEvent) -> Result<Self, serde_json::Error> {
        Ok(Self {
            offset: event.offset.get(),
            json: event.to_json()?.into(),
            end: terminal_status(event),
        })
    }
}

/// The status a terminal event ends its run with.
fn terminal_status(event: &RuntimeEvent) -> Option<&'static str> {
    use domain::EventKind;
    match event.kind {
        EventKind::FlowCompleted { .. } => Some("completed"),
        EventKind::FlowFailed { .. } => Some("failed"),
        EventKind::FlowCancelled { .. } => Some("cancelled"),
        _ => None,
    }
}

/// The followers of runs with clients, one per run.
pub struct Hub {
    inner: Arc<HubInner>,
}

struct HubInner {
    store: Arc<dyn RunStore>,
    /// Events buffered per client before it falls back to the store.
    capacity: usize,
    /// The broadcast of each followed run. A `std` mutex, held only to look
    /// up, insert or remove, never across an await.
    feeds: Mutex<HashMap<RunId, broadcast::Sender<Item>>>,
    /// Store followers started, and client fallbacks to the store: for
    /// tests and the benchmark.
    followers: AtomicU64,
    fallbacks: AtomicU64,
}

impl HubInner {
    fn feeds(&self) -> MutexGuard<'_, HashMap<RunId, broadcast::Sender<Item>>> {
        self.feeds.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Hub {
    /// No run followed yet; each client buffers up to `capacity` events.
    pub fn new(store: Arc<dyn RunStore>, capacity: usize) -> Self {
        Self {
            inner: Arc::new(HubInner {
                store,
                capacity: capacity.max(1),
                feeds: Mutex::new(HashMap::new()),
                followers: AtomicU64::new(0),
                fallbacks: AtomicU64::new(0),
            }),
        }
    }

    /// A subscription to `run_id`'s live events. Starts its follower, from
    /// `from` (the log's last offset, read before this call), when it has
    /// none: the caller then reads the history up to at least `from`
    /// itself, so the seam has no gap.
    fn subscribe(&self, run_id: RunId, from: u64) -> broadcast::Receiver<Item> {
        let mut feeds = self.inner.feeds();
        if let Some(feed) = feeds.get(&run_id) {
            return feed.subscribe();
        }
        let (feed, receiver) = broadcast::channel(self.inner.capacity);
        feeds.insert(run_id, feed.clone());
        self.inner.followers.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(follow(Arc::clone(&self.inner), run_id, feed, from));
        receiver
    }

    /// How many store followers were started so far.
    pub fn followers(&self) -> u64 {
        self.inner.followers.load(Ordering::Relaxed)
    }

    /// How many times a client fell behind and read the store instead.
    pub fn fallbacks(&self) -> u64 {
        self.inner.fallbacks.load(Ordering::Relaxed)
    }
}

/// The follower of one run: reads its log after `from` as it grows and
/// broadcasts each event, until the run ends, the store fails, or no
/// client is left. Its entry is removed under the same lock clients
/// subscribe under, so a client either joins it or starts the next one.
async fn follow(hub: Arc<HubInner>, run_id: RunId, feed: broadcast::Sender<Item>, from: u64) {
    let leave = |hub: &HubInner, only_if_unused: bool| {
        let mut feeds = hub.feeds();
        if only_if_unused && feed.receiver_count() > 0 {
            return false;
        }
        if feeds.get(&run_id).is_some_and(|f| f.same_channel(&feed)) {
            feeds.remove(&run_id);
        }
        true
    };
    let mut events = match hub.store.follow(run_id, from).await {
        Ok(events) => events,
        Err(e) => {
            tracing::warn!(run = %run_id, error = %e, "cannot follow the run");
            leave(&hub, false);
            return;
        }
    };
    loop {
        let next = tokio::select! {
            next = events.next() => next,
            () = tokio::time::sleep(IDLE_CHECK) => {
                if leave(&hub, true) {
                    return;
                }
                continue;
            }
        };
        let item = match next {
            Some(Ok(event)) => match Shared::of(&event) {
                Ok(shared) => Item::Event(Arc::new(shared)),
                Err(e) => {
                    tracing::warn!(run = %run_id, error = %e, "cannot serialize an event");
                    Item::Bad(event.offset.get())
                }
            },
            Some(Err(StoreError::BadEvent { offset, detail })) => {
                tracing::warn!(run = %run_id, %detail, "skipping a bad line of the log");
                Item::Bad(offset)
            }
            Some(Err(e)) => {
                tracing::warn!(run = %run_id, error = %e, "following the run failed");
                break;
            }
            // The run ended: its clients read the end from the store.
            None => break,
        };
        // No receiver is not an error: the next idle check stops us.
        let _ = feed.send(item);
    }
    leave(&hub, false);
}

/// Where a client's stream starts.
enum Opening {
    /// The run ended at `last` and the client has it all.
    Finished { status: &'static str, last: u64 },
    /// Events may come after `after`; the log held `last` when asked.
    Stream { after: u64, last: u64 },
}

/// `?offset=N`, `?replay=SPEED` (and `follow` for the transcript); other
/// parameters (the token) are not this route's business.
#[derive(Debug, Default, Deserialize)]
pub struct StreamQuery {
    offset: Option<String>,
    pub(super) follow: Option<String>,
    replay: Option<String>,
}

impl StreamQuery {
    /// The pace of `?replay=SPEED`, if asked for.
    fn pace(&self, clock: &Arc<dyn Clock>) -> Result<Option<Pace>, ApiError> {
        let Some(speed) = &self.replay else {
            return Ok(None);
        };
        let speed =
            parse_speed(speed).map_err(|e| ApiError::bad_request(format!("replay: {e}")))?;
        Ok(Some(Pace::new(Arc::clone(clock), speed, MAX_WAIT)))
    }
}

/// A cursor from the query or a header: an event offset.
fn cursor(value: &str, name: &str) -> Result<u64, ApiError> {
    value.trim().parse::<u64>().map_err(|_| {
        ApiError::bad_request(format!(
            "{name}: `{value}` is not an event offset (0, 1, 2, …)"
        ))
    })
}

/// The run named by `wanted` (an id or a unique prefix).
pub async fn resolve(app: &App, wanted: &str) -> Result<RunId, ApiError> {
    match find_run(app.store().as_ref(), wanted).await {
        Ok(id) => Ok(id),
        Err(e @ Unresolved::NoMatch(_)) => Err(ApiError::not_found(e.to_string())),
        Err(e @ Unresolved::Ambiguous(..)) => Err(ApiError::bad_request(e.to_string())),
        Err(Unresolved::Store(e)) => Err(store_error(e)),
    }
}

/// A store error as an answer: an unknown run is 404, the rest 500.
pub fn store_error(e: StoreError) -> ApiError {
    match e {
        StoreError::NotFound(_) => ApiError::not_found(e.to_string()),
        other => ApiError::internal(other.to_string()),
    }
}

/// The run, where its stream starts, and whether anything can come.
async fn open(
    app: &App,
    wanted: &str,
    query: &StreamQuery,
    headers: &HeaderMap,
) -> Result<(RunId, Opening), ApiError> {
    let run_id = resolve(app, wanted).await?;
    let after = match headers.get("last-event-id") {
        Some(value) => cursor(value.to_str().unwrap_or("?"), "Last-Event-ID")?,
        None => match &query.offset {
            Some(offset) => cursor(offset, "offset")?,
            None => 0,
        },
    };
    let store = app.store();
    let last = store.last_offset(run_id).await.map_err(store_error)?;
    if after > last {
        return Err(ApiError::bad_request(format!(
            "offset {after} is past the end of run {run_id}'s log (offset {last})"
        )));
    }
    if after == last && last > 0 {
        let tail = store.read(run_id, last - 1, 1).await.map_err(store_error)?;
        if let Some(status) = tail.first().and_then(terminal_status) {
            return Ok((run_id, Opening::Finished { status, last }));
        }
    }
    Ok((run_id, Opening::Stream { after, last }))
}

/// The frames of `run_id` after `after` (the log held `last` when the
/// client came): history, live events, the end. See the module docs.
fn frames(app: App, run_id: RunId, mut after: u64, last: u64) -> impl Stream<Item = Frame> {
    async_stream::stream! {
        let store = Arc::clone(app.store());
        let hub = app.hub();
        let mut stopping = app.stopping();
        let mut live = hub.subscribe(run_id, last);
        // Read the store (from `after` to its end) before taking live events again.
        let mut catch_up = true;
        // Why catching up is the last thing to do: the server shuts down,
        // or the run's follower stopped (the run ended, or the store failed).
        let mut closing: Option<Option<&'static str>> = None;
        let mut restarted_at: Option<u64> = None;
        loop {
            if catch_up {
                match read_log(store.as_ref(), run_id, after, BATCH).await {
                    Ok(LogRead::Events(batch)) if batch.is_empty() => {
                        catch_up = false;
                        match closing {
                            None => {}
                            Some(None) => {
                                // The follower stopped without the run's end
                                // (the store failed): follow afresh, once per
                                // offset, so a store that keeps failing ends
                                // the stream rather than spinning.
                                if restarted_at == Some(after) {
                                    return;
                                }
                                restarted_at = Some(after);
                                closing = None;
                                let last = store.last_offset(run_id).await.unwrap_or(after);
                                live = hub.subscribe(run_id, last.max(after));
                                catch_up = true;
                            }
                            Some(Some(reason)) => {
                                let status = shown_status(store.as_ref(), run_id).await;
                                yield Frame::End { status, last_offset: after, reason: Some(reason) };
                                return;
                            }
                        }
                    }
                    Ok(LogRead::Events(batch)) => {
                        for event in batch {
                            after = event.offset.get();
                            let Ok(shared) = Shared::of(&event) else {
                                continue;
                            };
                            let end = shared.end;
                            yield Frame::Event { offset: shared.offset, json: shared.json };
                            if let Some(status) = end {
                                yield Frame::End { status: status.to_owned(), last_offset: after, reason: None };
                                return;
                            }
                        }
                    }
                    Ok(LogRead::Bad { offset, detail }) => {
                        tracing::warn!(run = %run_id, %detail, "skipping a bad line of the log");
                        after = offset;
                    }
                    Err(e) => {
                        // The client sees no end frame: it reconnects from `after`.
                        tracing::warn!(run = %run_id, error = %e, "cannot read the run's log");
                        return;
                    }
                }
                continue;
            }
            let received = tokio::select! {
                biased;
                _ = stopping.wait_for(|stop| *stop) => {
                    closing = Some(Some("server shutting down"));
                    catch_up = true;
                    continue;
                }
                received = live.recv() => received,
            };
            match received {
                Ok(Item::Event(shared)) => {
                    if shared.offset <= after {
                        continue;
                    }
                    if shared.offset > after + 1 {
                        catch_up = true;
                        continue;
                    }
                    after = shared.offset;
                    yield Frame::Event { offset: shared.offset, json: Arc::clone(&shared.json) };
                    if let Some(status) = shared.end {
                        yield Frame::End { status: status.to_owned(), last_offset: after, reason: None };
                        return;
                    }
                }
                Ok(Item::Bad(offset)) if offset == after + 1 => after = offset,
                Ok(Item::Bad(offset)) if offset > after => catch_up = true,
                Ok(Item::Bad(_)) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    // Fell behind: rejoin at the broadcast's end, then read
                    // the store from where this client is.
                    live = live.resubscribe();
                    hub.inner.fallbacks.fetch_add(1, Ordering::Relaxed);
                    catch_up = true;
                }
                Err(broadcast::error::RecvError::Closed) => {
                    closing = Some(None);
                    catch_up = true;
                }
            }
        }
    }
}

/// [`frames`], or with a `pace` (`?replay=SPEED`) a replay: the history
/// after `after` up to `last` (the log's end when the client came) at the
/// pace it was recorded, then [`frames`] from there on (live events, the
/// end). The offsets are the log's, so a reconnect continues either.
fn played(
    app: App,
    run_id: RunId,
    after: u64,
    last: u64,
    pace: Option<Pace>,
) -> impl Stream<Item = Frame> {
    let Some(mut pace) = pace else {
        return frames(app, run_id, after, last).left_stream();
    };
    async_stream::stream! {
        let store = Arc::clone(app.store());
        let mut stopping = app.stopping();
        let mut after = after;
        while after < last {
            let batch = match read_log(store.as_ref(), run_id, after, BATCH).await {
                Ok(LogRead::Events(batch)) if batch.is_empty() => break,
                Ok(LogRead::Events(batch)) => batch,
                Ok(LogRead::Bad { offset, detail }) => {
                    tracing::warn!(run = %run_id, %detail, "skipping a bad line of the log");
                    after = offset;
                    continue;
                }
                Err(e) => {
                    // The client sees no end frame: it reconnects from `after`.
                    tracing::warn!(run = %run_id, error = %e, "cannot read the run's log");
                    return;
                }
            };
            for event in batch.iter().take_while(|e| e.offset.get() <= last) {
                let stopped = tokio::select! {
                    biased;
                    _ = stopping.wait_for(|stop| *stop) => true,
                    () = pace.wait(event.timestamp) => false,
                };
                if stopped {
                    let status = shown_status(store.as_ref(), run_id).await;
                    yield Frame::End { status, last_offset: after, reason: Some("server shutting down") };
                    return;
                }
                after = event.offset.get();
                let Ok(shared) = Shared::of(event) else {
                    continue;
                };
                let end = shared.end;
                yield Frame::Event { offset: shared.offset, json: shared.json };
                if let Some(status) = end {
                    yield Frame::End { status: status.to_owned(), last_offset: after, reason: None };
                    return;
                }
            }
        }
        let last = store.last_offset(run_id).await.unwrap_or(after).max(after);
        let mut rest = std::pin::pin!(frames(app, run_id, after, last));
        while let Some(frame) = rest.next().await {
            yield frame;
        }
    }
    .right_stream()
}

/// The status a stream's end names when it ends before the run does.
async fn shown_status(store: &dyn RunStore, run_id: RunId) -> String {
    match run_view(store, run_id).await {
        Ok(view) => view.status.as_str().to_owned(),
        Err(_) => "unknown".to_owned(),
    }
}

/// `GET /workflows/{id}/events?offset=N`: NDJSON.
#[utoipa::path(
    get,
    path = "/workflows/{id}/events",
    tag = "streams",
    operation_id = "streamEvents",
    summary = "Stream a run's events (NDJSON)",
    description = "The events after the cursor from the run's log, then each new event as \
        it is recorded, then after the run's terminal event a terminal frame \
        (`{\"type\":\"end\",\"status\":…,\"lastOffset\":…}`), and the body ends. One stored \
        event JSON per line, its `offset` the cursor; `{\"type\":\"heartbeat\"}` lines while \
        idle. A paused or interrupted run's stream stays open.",
    params(
        RunPath,
        ("offset" = Option<u64>, Query, description = "Send the events after this offset (default 0: the whole history)."),
        ("replay" = Option<f64>, Query, exclusive_minimum = 0,
            description = "Send the history at the pace it was recorded times this speed (each wait at most 5 s), then live."),
        ("Last-Event-ID" = Option<u64>, Header, nullable = false, description = "Overrides `offset`, as a reconnecting client sends it."),
    ),
    responses(
        (status = 200, description = "The stream: one JSON value per line.", body = String,
            content_type = "application/x-ndjson", headers(
                ("Cache-Control" = String, description = "`no-cache`."),
                ("X-Accel-Buffering" = String, description = "`no`, so a proxy does not buffer it."),
            )),
        (status = 400, response = BadRequest),
        (status = 404, response = NotFound),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    ),
    security(("bearer" = ["read"]), ("access_token" = ["read"])),
)]
pub async fn ndjson(
    State(app): State<App>,
    Extension(caller): Extension<Granted>,
    Path(id): Path<String>,
    Query(query): Query<StreamQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let pace = query.pace(app.clock())?;
    let (run_id, opening) = open(&app, &id, &query, &headers).await?;
    let slot = app.streams().take(&caller.name)?;
    let frames = match opening {
        Opening::Finished { status, last } => {
            let end = Frame::End {
                status: status.to_owned(),
                last_offset: last,
                reason: None,
            };
            futures::stream::iter([end]).left_stream()
        }
        Opening::Stream { after, last } => {
            let every = app.config().heartbeat;
            with_heartbeats(played(app, run_id, after, last, pace), every).right_stream()
        }
    };
    Ok((
        stream_headers("application/x-ndjson"),
        body(frames, Frame::ndjson, slot),
    )
        .into_response())
}

/// `GET /workflows/{id}/events/sse?offset=N`: server-sent events; a
/// client that has the whole of a finished run gets 204, which tells a
/// browser's `EventSource` not to reconnect.
#[utoipa::path(
    get,
    path = "/workflows/{id}/events/sse",
    tag = "streams",
    operation_id = "streamEventsSse",
    summary = "Stream a run's events (server-sent events)",
    description = "The same stream as `/events`, as server-sent events: each event is `id: \
        <offset>` and `data: <the stored event JSON>`; the terminal frame is `event: end`, \
        heartbeats `event: heartbeat`, neither with an `id:`.",
    params(
        RunPath,
        ("offset" = Option<u64>, Query, description = "Send the events after this offset (default 0: the whole history)."),
        ("replay" = Option<f64>, Query, exclusive_minimum = 0,
            description = "Send the history at the pace it was recorded times this speed (each wait at most 5 s), then live."),
        ("Last-Event-ID" = Option<u64>, Header, nullable = false, description = "Overrides `offset`: what a browser's `EventSource` sends when it reconnects."),
    ),
    responses(
        (status = 200, description = "The stream of server-sent events.", body = SseEvent,
            content_type = "text/event-stream", headers(
                ("Cache-Control" = String, description = "`no-cache`."),
                ("X-Accel-Buffering" = String, description = "`no`, so a proxy does not buffer it."),
            )),
        (status = 204, description = "The client has every event of a finished run: nothing more will come, and `EventSource` does not reconnect."),
        (status = 400, response = BadRequest),
        (status = 404, response = NotFound),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    ),
    security(("bearer" = ["read"]), ("access_token" = ["read"])),
)]
pub async fn sse(
    State(app): State<App>,
    Extension(caller): Extension<Granted>,
    Path(id): Path<String>,
    Query(query): Query<StreamQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let pace = query.pace(app.clock())?;
    let (run_id, opening) = open(&app, &id, &query, &headers).await?;
    let Opening::Stream { after, last } = opening else {
        return Ok(StatusCode::NO_CONTENT.into_response());
    };
    let slot = app.streams().take(&caller.name)?;
    let every = app.config().heartbeat;
    let frames = with_heartbeats(played(app, run_id, after, last, pace), every);
    Ok((
        stream_headers("text/event-stream"),
        body(frames, Frame::sse, slot),
    )
        .into_response())
}

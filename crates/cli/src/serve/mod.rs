//! `awr serve`: the HTTP API and the timeline UI, an inbound adapter over
//! the same services as the command line (docs/http.md).
//!
//! - [`runs`]: start, list and show runs, and commands to them; [`fork`]
//!   branches a new run off one;
//! - [`stream`]: a run's events (NDJSON and SSE) from its durable log, with
//!   one store follower per run fanned out to every client, or replayed at
//!   their recorded pace; [`frame`] encodes what a stream sends;
//!   [`transcript`] streams a run's transcript;
//! - [`retention`]: `--retention`, pruning finished runs periodically;
//! - [`auth`]: the bearer token a non-loopback bind requires;
//! - [`ui`]: the embedded static files of the timeline.
//!
//! The server holds one store for everything it reads and writes, so a run
//! it writes wakes its followers at once; runs other processes write are
//! followed by polling their logs. On SIGINT or SIGTERM it stops accepting,
//! pauses the runs it writes (`awr resume` continues them), ends every open
//! stream with its terminal frame, and exits 0.

mod accept;
mod auth;
mod causal;
mod error;
mod fork;
mod frame;
mod retention;
mod runs;
mod stream;
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
mod transcript;
mod ui;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use anyhow::anyhow;
use application::ports::RunStore;
use axum::Router;
use axum::routing::{get, post};
use domain::RunId;
use tokio::sync::watch;

pub use self::error::ApiError;
use self::stream::Hub;
use crate::Failure;
use crate::storage::Storage;

/// Largest request body the server reads (a workflow inline, a command).
pub const BODY_LIMIT: usize = 1024 * 1024;

/// Live events buffered per client before it falls back to the store.
pub const BUFFER: usize = 1024;

/// How long a request may take to produce its response head (streams then
/// last as long as they like).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a shutdown waits for the runs it paused and the streams it
/// ended before the process exits anyway (a run still going is then
/// interrupted, and `awr resume` continues it all the same).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// How long the streams have, once the runs are paused, to hand their last
/// frames to their clients before the process exits anyway: a client that
/// stopped reading would otherwise hold the shutdown for the whole grace.
const STREAM_DRAIN: Duration = Duration::from_secs(3);

/// How `awr serve` was asked to run.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where runs are stored.
    pub storage: Storage,
    /// The directory a `path` of `POST /workflows` must stay inside.
    pub root: PathBuf,
    /// The bearer token every request must carry, if any.
    pub token: Option<String>,
    /// How long a stream stays silent before a heartbeat.
    pub heartbeat: Duration,
    /// Live events buffered per client of a run before it falls back to
    /// reading the store.
    pub buffer: usize,
}

/// The server's state, shared by every request. Cheap to clone.
#[derive(Clone)]
pub struct App(Arc<Inner>);

struct Inner {
    config: Config,
    /// The one store of the server: its runs write to it, its streams read it.
    store: Arc<dyn RunStore>,
    /// One follower of each run with clients, fanned out to them.
    hub: Hub,
    /// Runs this process writes (started or resumed here), to pause them
    /// on shutdown.
    writing: Mutex<HashMap<RunId, tokio::task::JoinHandle<()>>>,
    /// Set once the server shuts down: open streams end with their frame.
    stopping: watch::Sender<bool>,
    /// Set when the shutdown begins: no run is started or resumed after.
    closing: std::sync::atomic::AtomicBool,
    /// The runtime runs are executed on: the one `App::new` was called on,
    /// never the (lower-priority) runtime serving requests.
    runs: tokio::runtime::Handle,
}

impl App {
    /// The state over the store of `config.storage` (created if needed).
    /// The runs it starts are executed on the runtime this is called on.
    pub fn new(mut config: Config) -> Result<Self, Failure> {
        config.root = config
            .root
            .canonicalize()
            .map_err(|e| Failure::Input(anyhow!("--root {}: {e}", config.root.display())))?;
        let store = crate::wiring::store(&config.storage)?;
        let hub = Hub::new(Arc::clone(&store), config.buffer);
        let (stopping, _) = watch::channel(false);
        Ok(Self(Arc::new(Inner {
            config,
            store,
            hub,
            writing: Mutex::new(HashMap::new()),
            stopping,
            closing: std::sync::atomic::AtomicBool::new(false),
            runs: tokio::runtime::Handle::current(),
        })))
    }

    fn config(&self) -> &Config {
        &self.0.config
    }

    fn storage(&self) -> &Storage {
        &self.0.config.storage
    }

    fn store(&self) -> &Arc<dyn RunStore> {
        &self.0.store
    }

    fn hub(&self) -> &Hub {
        &self.0.hub
    }

    fn writing(&self) -> MutexGuard<'_, HashMap<RunId, tokio::task::JoinHandle<()>>> {
        self.0
            .writing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Refuses (503) a request that would start writing a run once the
    /// shutdown has begun: its run would be cut off as the process exits.
    fn admit(&self) -> Result<(), ApiError> {
        if self.0.closing.load(std::sync::atomic::Ordering::Acquire) {
            return Err(ApiError::new(
                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                "the server is shutting down: no run is started or resumed",
            ));
        }
        Ok(())
    }

    /// Runs `run` (the writing of `run_id`) in the background until it
    /// ends, on the runs' runtime.
    fn write(&self, run_id: RunId, run: impl Future<Output = ()> + Send + 'static) {
        let app = self.clone();
        let mut writing = self.writing();
        let task = self.0.runs.spawn(async move {
            run.await;
            app.writing().remove(&run_id);
        });
        if !task.is_finished() {
            writing.insert(run_id, task);
        }
    }

    /// A receiver that turns true once the server shuts down.
    fn stopping(&self) -> watch::Receiver<bool> {
        self.0.stopping.subscribe()
    }

    /// Pauses every run this process writes and waits for them to stop,
    /// then ends every open stream (each sends its terminal frame).
    /// A request admitted just before the shutdown began may start its run
    /// after the first round: rounds go on until no run is left.
    pub async fn shut_down(&self) {
        self.0
            .closing
            .store(true, std::sync::atomic::Ordering::Release);
        loop {
            let runs: Vec<RunId> = self.writing().keys().copied().collect();
            if runs.is_empty() {
                break;
            }
            for &run_id in &runs {
                let pause = serde_json::json!({"type": "pause"});
                match crate::commands::control::deliver(self.storage(), run_id, &pause).await {
                    Ok(reply) if reply.error.is_none() => {
                        tracing::info!(run = %run_id, "paused for shutdown");
                    }
                    Ok(reply) => {
                        tracing::info!(run = %run_id, why = ?reply.error, "not paused for shutdown");
                    }
                    Err(e) => {
                        tracing::warn!(run = %run_id, error = %e, "cannot pause for shutdown");
                    }
                }
            }
            let tasks: Vec<_> = {
                let mut writing = self.writing();
                runs.iter().filter_map(|id| writing.remove(id)).collect()
            };
            for task in tasks {
                let _ = task.await;
            }
        }
        self.0.stopping.send_replace(true);
        tracing::info!(
            followers = self.hub().followers(),
            fallbacks = self.hub().fallbacks(),
            "streams ended"
        );
    }
}

/// Every route of the server, with its layers: auth (when a token is set;
/// not for the UI's static page), a body limit, a timeout on the response head, request tracing, and
/// every error as `{error, message}`.
pub fn router(app: App) -> Router {
    use tower_http::limit::RequestBodyLimitLayer;
    use tower_http::timeout::TimeoutLayer;
    use tower_http::trace::TraceLayer;

    // The page and its script and style hold no run data: served without
    // the token, so `/?token=T` can load them and pass the token on.
    let page = Router::new()
        .route("/", get(ui::index))
        .route("/ui/{file}", get(ui::file));
    let api = Router::new()
        .route("/healthz", get(healthz))
        .route("/workflows", post(runs::start).get(runs::list))
        .route("/workflows/{id}", get(runs::show))
        .route("/workflows/{id}/events", get(stream::ndjson))
        .route("/workflows/{id}/events/sse", get(stream::sse))
        .route("/workflows/{id}/commands", post(runs::command))
        .route("/workflows/{id}/fork", post(fork::fork))
        .route("/workflows/{id}/transcript", get(transcript::transcript))
        .route("/workflows/{id}/causal", get(causal::causal))
        .fallback(not_found)
        .with_state(app.clone())
        .layer(axum::middleware::from_fn_with_state(app, auth::check));
    // The JSON errors outside the limits, so their refusals are JSON too.
    page.merge(api)
        .layer(RequestBodyLimitLayer::new(BODY_LIMIT))
        .layer(TimeoutLayer::with_status_code(
            axum::http::StatusCode::REQUEST_TIMEOUT,
            REQUEST_TIMEOUT,
        ))
        .layer(axum::middleware::map_response(error::as_json))
        .layer(TraceLayer::new_for_http())
}

async fn healthz() -> axum::Json<serde_json::Value> {
    axum::Json(serde_json::json!({"status": "ok"}))
}

async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::not_found(format!("no route {}", uri.path()))
}

/// `awr serve`: binds `addr`, serves until SIGINT or SIGTERM, then shuts
/// down gracefully (see the module docs) and returns.
/// With `retention`, runs that ended longer ago than it are pruned in the
/// background (see `retention`).
pub async fn serve(addr: &str, config: Config, retention: Option<Duration>) -> Result<(), Failure> {
    let addr: SocketAddr = addr
        .parse()
        .map_err(|e| Failure::Input(anyhow!("--addr {addr}: {e}")))?;
    if !addr.ip().is_loopback() && config.token.as_deref().is_none_or(str::is_empty) {
        return Err(Failure::Input(anyhow!(
            "--addr {addr} is not a loopback address: give a token with --token or AWR_TOKEN"
        )));
    }
    let app = App::new(config)?;
    let cannot_listen = |e: std::io::Error| Failure::Input(anyhow!("cannot listen on {addr}: {e}"));
    let listener = std::net::TcpListener::bind(addr).map_err(cannot_listen)?;
    listener.set_nonblocking(true).map_err(cannot_listen)?;
    let bound = listener.local_addr().map_err(cannot_listen)?;
    let http = http_runtime()
        .map_err(|e| Failure::Run(anyhow!("cannot start the server's runtime: {e}")))?;
    let _pruner = retention.map(|age| retention::spawn(&app, age));
    crate::note(&format!("awr: listening on http://{bound}"));

    let signal = application::Cancel::new();
    let _signals = crate::signals::notify_on_signal(signal.clone(), "shutting down");
    let grace = signal.clone();
    // Accepting stops at the signal; the streams end once the runs are paused.
    let closing = {
        let app = app.clone();
        let signal = signal.clone();
        tokio::spawn(async move {
            signal.cancelled().await;
            app.shut_down().await;
        })
    };
    let router = router(app);
    let server = http.spawn(async move {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        accept::serve(listener, router, async move { signal.cancelled().await }).await
    });
    let grace = async move {
        grace.cancelled().await;
        tokio::time::sleep(SHUTDOWN_GRACE).await;
    };
    let served = async {
        let (mut server, mut closing) = (server, closing);
        tokio::select! {
            served = &mut server => {
                let _ = closing.await;
                served
            }
            _ = &mut closing => {
                // The runs are paused and their streams ended: a client
                // that does not read (its socket full) is not waited for.
                match tokio::time::timeout(STREAM_DRAIN, server).await {
                    Ok(served) => served,
                    Err(_) => {
                        crate::note("awr: a client did not take the end of its stream; closing it");
                        Ok(Ok(()))
                    }
                }
            }
        }
    };
    let outcome = tokio::select! {
        served = served => match served {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(Failure::Run(anyhow!("the server failed: {e}"))),
            Err(e) => Err(Failure::Run(anyhow!("the server failed: {e}"))),
        },
        () = grace => {
            crate::note("awr: the shutdown took too long; exiting");
            Ok(())
        }
    };
    http.shutdown_background();
    outcome
}

/// How much lower than the runs' threads the server's threads are
/// scheduled (a nice increment): on a busy machine, streaming a run to
/// many clients takes what CPU the runs leave, so the clients get their
/// events later (a slow client reads the store), never the run slower.
/// The lowest priority: at +10 a server thread sharing a core with a run
/// still took up to a tenth of it (weight 110 against 1,024), at +19 1.5 %.
const HTTP_NICENESS: i32 = 19;

/// The runtime that accepts connections and serves requests and streams,
/// with threads of their own at [`HTTP_NICENESS`]; runs are executed on the
/// caller's runtime (see [`App::write`]). On Linux a nice value is per
/// thread, so only these threads are lowered; where it is per process
/// the whole server is, which changes nothing between the two.
fn http_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .thread_name("awr-http")
        .on_thread_start(|| {
            if let Err(e) = rustix::process::nice(HTTP_NICENESS) {
                tracing::debug!(error = %e, "cannot lower the priority of a server thread");
            }
        })
        .enable_all()
        .build()
}

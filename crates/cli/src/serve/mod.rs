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
//! - [`deadlines`]: the deadlines of the runs waiting for a person;
//! - [`guard`]: Host, Origin and content-type checks, so no web page can
//!   drive the server; [`access`] and [`auth`]: the bearer tokens, each
//!   naming its caller and its scopes; [`limits`]: the caps on streams;
//!   [`accept`]: connections, their caps and TLS (docs/security.md);
//! - [`ui`]: the embedded static files of the timeline;
//! - [`openapi`]: the OpenAPI description of every route (`GET
//!   /openapi.json`, `schema/openapi.json`), generated from the handlers and
//!   the types of [`answers`], the JSON they send.
//!
//! The server holds one store for everything it reads and writes, so a run
//! it writes wakes its followers at once; runs other processes write are
//! followed by polling their logs. On SIGINT or SIGTERM it stops accepting,
//! pauses the runs it writes (`awr resume` continues them), ends every open
//! stream with its terminal frame, and exits 0.

mod accept;
pub mod access;
mod answers;
mod auth;
mod causal;
mod deadlines;
mod error;
mod flags;
mod fork;
mod frame;
pub mod guard;
pub mod limits;
pub mod mcp;
mod openapi;
mod retention;
mod router;
mod runs;
mod stream;
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
mod transcript;
mod ui;
mod workflow;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use anyhow::anyhow;
use application::ports::{Clock, ControlChannel, RunQueue, RunStore};
use domain::RunId;
use tokio::sync::watch;

pub use self::accept::TlsFiles;
use self::access::Access;
pub use self::error::ApiError;
pub use self::flags::Flags;
use self::guard::Guard;
use self::limits::{Limits, Streams};
pub use self::router::router;
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
    /// Who may call, and what each caller may do.
    pub access: Access,
    /// How long a stream stays silent before a heartbeat.
    pub heartbeat: Duration,
    /// Live events buffered per client of a run before it falls back to
    /// reading the store.
    pub buffer: usize,
    /// The hosts and origins served besides the server's own.
    pub guard: Guard,
    /// Whether a workflow a client sends may run programs on this machine
    /// (`--allow-inline-code`).
    pub allow_inline_code: bool,
    /// The caps on connections and streams.
    pub limits: Limits,
    /// Whether `POST /workflows` queues runs for workers (`--queue`)
    /// rather than running them here.
    pub queue: bool,
}

impl Config {
    /// A server of `storage`, its workflows under `root`, callers let in by
    /// `access`, everything else at its default.
    pub fn new(storage: Storage, root: PathBuf, access: Access) -> Self {
        Self {
            storage,
            root,
            access,
            heartbeat: Duration::from_secs(15),
            buffer: BUFFER,
            guard: Guard::default(),
            allow_inline_code: false,
            limits: Limits::default(),
            queue: false,
        }
    }
}

/// Where and how `awr serve` listens.
#[derive(Debug, Clone, Default)]
pub struct Listen {
    /// `--addr`.
    pub addr: String,
    /// `--tls-cert` and `--tls-key`: serve HTTPS.
    pub tls: Option<accept::TlsFiles>,
    /// A token the server made itself, shown in the page's address it prints.
    pub made_token: Option<String>,
    /// `--retention`: prune finished runs older than this in the background.
    pub retention: Option<Duration>,
}

/// The server's state, shared by every request. Cheap to clone.
#[derive(Clone)]
pub struct App(Arc<Inner>);

struct Inner {
    config: Config,
    /// The one store of the server: its runs write to it, its streams read it.
    store: Arc<dyn RunStore>,
    /// The queue `POST /workflows` submits to (`--queue`), on that store.
    queue: Option<Arc<dyn RunQueue>>,
    /// Held for the server's life: its runs share one command channel.
    _commands: Arc<dyn ControlChannel>,
    /// The time of the store's runs, and what replays wait on.
    clock: Arc<dyn Clock>,
    /// One follower of each run with clients, fanned out to them.
    hub: Hub,
    /// The streams open now, against their caps.
    streams: Arc<Streams>,
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
    pub async fn new(mut config: Config) -> Result<Self, Failure> {
        config.root = config
            .root
            .canonicalize()
            .map_err(|e| Failure::Input(anyhow!("--root {}: {e}", config.root.display())))?;
        // With a queue, the one store is the queue's: what is submitted
        // is read back through the instance that wrote it.
        let (store, queue) = match config.queue {
            true => {
                let queue = crate::wiring::queue(&config.storage, &Default::default()).await?;
                (Arc::clone(&queue) as Arc<dyn RunStore>, Some(queue))
            }
            false => (crate::wiring::store(&config.storage).await?, None),
        };
        let hub = Hub::new(Arc::clone(&store), config.buffer);
        let streams = Streams::new(config.limits);
        let (stopping, _) = watch::channel(false);
        Ok(Self(Arc::new(Inner {
            _commands: crate::wiring::control(&config.storage),
            config,
            store,
            queue,
            clock: crate::wiring::clock_and_ids().0,
            hub,
            streams,
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

    fn queue(&self) -> Option<&Arc<dyn RunQueue>> {
        self.0.queue.as_ref()
    }

    fn clock(&self) -> &Arc<dyn Clock> {
        &self.0.clock
    }

    /// The state with its time read from `clock`: a test's paused clock,
    /// so what is timed and what is waited agree. `None` once shared.
    #[cfg(test)]
    fn with_clock(mut self, clock: Arc<dyn Clock>) -> Option<Self> {
        Arc::get_mut(&mut self.0)?.clock = clock;
        Some(self)
    }

    fn hub(&self) -> &Hub {
        &self.0.hub
    }

    fn streams(&self) -> &Arc<Streams> {
        &self.0.streams
    }

    fn writing(&self) -> MutexGuard<'_, HashMap<RunId, tokio::task::JoinHandle<()>>> {
        self.0
            .writing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether this process writes `run_id` now.
    fn writes(&self, run_id: RunId) -> bool {
        self.writing().contains_key(&run_id)
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
            // Its own entry only: a task that lost the run's lock to
            // another of this server's ends first, and must not hide it.
            let mut writing = app.writing();
            if writing
                .get(&run_id)
                .is_some_and(|t| t.id() == tokio::task::id())
            {
                writing.remove(&run_id);
            }
        });
        let writes = writing.get(&run_id).is_some_and(|t| !t.is_finished());
        if !task.is_finished() && !writes {
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
        // The server's own user pauses them, as `awr pause` would.
        let by = crate::wiring::local_caller();
        loop {
            let runs: Vec<RunId> = self.writing().keys().copied().collect();
            if runs.is_empty() {
                break;
            }
            for &run_id in &runs {
                let pause = serde_json::json!({"type": "pause"});
                let paused = crate::wiring::deliver(self.storage(), run_id, &pause, by.as_ref());
                match paused.await {
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
            streams = self.streams().open(),
            followers = self.hub().followers(),
            fallbacks = self.hub().fallbacks(),
            "streams ended"
        );
    }
}

/// `awr serve`: binds `listen.addr`, serves until SIGINT or SIGTERM, then
/// shuts down gracefully (see the module docs) and returns. With
/// `listen.retention`, runs that ended longer ago than it are pruned in
/// the background (see `retention`).
///
/// Refused: `--no-auth` on an address other machines reach. Warned: no
/// token at all (on every start), and a non-loopback address without TLS.
pub async fn serve(listen: Listen, mut config: Config) -> Result<(), Failure> {
    let addr: SocketAddr = listen
        .addr
        .parse()
        .map_err(|e| Failure::Input(anyhow!("--addr {}: {e}", listen.addr)))?;
    let loopback = addr.ip().is_loopback();
    if !config.access.needs_token() {
        if !loopback {
            return Err(Failure::Input(anyhow!(
                "--addr {addr} is not a loopback address: --no-auth is refused there; give tokens with --token, --tokens FILE or AWR_TOKEN"
            )));
        }
        crate::note(
            "awr: warning: --no-auth: any program on this machine, and any web page that gets past the Host and Origin checks, may start and control runs",
        );
    }
    let tls = match &listen.tls {
        Some(files) => Some(files.acceptor().map_err(Failure::Input)?),
        None => None,
    };
    if !loopback && tls.is_none() {
        crate::note(&format!(
            "awr: warning: {addr} is reachable from other machines and served without TLS: tokens and runs cross the network in clear; give --tls-cert and --tls-key"
        ));
    }
    let cannot_listen = |e: std::io::Error| Failure::Input(anyhow!("cannot listen on {addr}: {e}"));
    let listener = std::net::TcpListener::bind(addr).map_err(cannot_listen)?;
    listener.set_nonblocking(true).map_err(cannot_listen)?;
    let bound = listener.local_addr().map_err(cannot_listen)?;
    config.guard.bound = Some(bound);
    config.guard.tls = tls.is_some();
    let limits = config.limits;
    let app = App::new(config).await?;
    let http = http_runtime()
        .map_err(|e| Failure::Run(anyhow!("cannot start the server's runtime: {e}")))?;
    let _pruner = listen.retention.map(|age| retention::spawn(&app, age));
    let _deadlines = deadlines::spawn(&app);
    let scheme = if tls.is_some() { "https" } else { "http" };
    crate::note(&format!("awr: listening on {scheme}://{bound}"));
    // The page's address, to open in a browser: a token the server made is
    // in its fragment, which no request and no Referer carries, and the
    // page moves it out of the address bar.
    let shown = match bound.ip() {
        ip if ip.is_unspecified() => {
            SocketAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), bound.port())
        }
        _ => bound,
    };
    match &listen.made_token {
        Some(token) => crate::note(&format!("awr: open {scheme}://{shown}/#token={token}")),
        None => crate::note(&format!("awr: open {scheme}://{shown}/")),
    }

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
        let shutdown = async move { signal.cancelled().await };
        accept::serve(listener, router, tls, limits, shutdown).await
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

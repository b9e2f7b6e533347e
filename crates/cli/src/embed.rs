//! The stock adapters of awr, wired into an [`application::RuntimeBuilder`]:
//! the file or SQLite store, the agent CLIs and HTTP providers, the
//! fixture-backed `mock` provider, the built-in tools, transcript files,
//! `command` nodes in a shell, commands from other processes over a Unix
//! socket, the system clock and random ids.
//!
//! The page docs/library.md shows this example as is (`cargo xtask`'s
//! tests check that it does):
//!
//! ```
//! # extern crate application as awr_application;
//! # extern crate domain as awr_domain;
//! use std::sync::Arc;
//!
//! use awr_application::RunRequest;
//! use awr_cli::storage::Storage;
//! use awr_domain::{RunStatus, WorkflowDef};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let runs = std::path::PathBuf::from("runs"); // as `awr --storage runs`
//! # let dir = tempfile::tempdir()?; // this test keeps them out of the tree
//! # let runs = dir.path().join(runs);
//! let runtime = awr_cli::embed::defaults(&Storage::Files(runs)).await?.build();
//! let yaml = "name: hello\nnodes: [{id: hello, command: echo hello}]\n";
//! let workflow = Arc::new(WorkflowDef::from_yaml(yaml)?);
//! let request = RunRequest { workflow, input: "hi".into(), source: None, started_by: None };
//! let outcome = runtime.run(request).await?;
//! assert_eq!(outcome.status, RunStatus::Completed, "{:?}", outcome.error);
//! assert_eq!(outcome.output["stdout"], "hello\n");
//! # Ok(())
//! # }
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;

use adapters_agents::MockQuery;
use adapters_agents::anthropic::AnthropicChat;
use adapters_agents::claude::ClaudeCode;
use adapters_agents::codex::Codex;
use adapters_agents::copilot::Copilot;
use adapters_agents::gemini::Gemini;
use adapters_agents::mcp::McpClients;
use adapters_agents::mock::TurnReplay;
use adapters_agents::openai::OpenAiChat;
use adapters_agents::process::{OsProcesses, Shell, ShellCommandRunner};
use std::collections::HashMap;

use application::ports::{
    Clock, ControlChannel, IdGen, RunFiles, RunQueue, RunStore, SpanSink, StoreError, Tool,
    TranscriptReader, Transcripts,
};
use application::secrets::KeyNames;
use application::tools::ToolRouter;
use application::{Runtime, RuntimeBuilder};
use domain::workflow::Provider;
use infrastructure::clock::{RandomIds, SystemClock};
use infrastructure::otlp::{Exporter, LiveExport, Metrics, Outlets, QueueSettings};
use infrastructure::store::{
    FileRunStore, PgControlOn, PgOpenError, PgRunStore, PgStoreConfig, PgTranscriptsOn,
    SqliteOpenError, SqliteRunStore,
};
use infrastructure::tools::{HttpGet, ListDir, ReadFile, WriteFile};
use infrastructure::transcript::JsonlTranscripts;
use infrastructure::{RunFilesDir, UnixControl};

use crate::storage::Storage;

/// A store that cannot be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The file store's directory (named).
    #[error("storage {storage}: {error}")]
    Files {
        /// The storage asked for.
        storage: Storage,
        /// Why it cannot be opened (in the message, so not also a source:
        /// a report of the chain would say it twice).
        error: StoreError,
    },
    /// The file store's directory does not exist or is not one (named).
    #[error(transparent)]
    Missing(StoreError),
    /// The SQLite database (its errors name the file).
    #[error(transparent)]
    Sqlite(#[from] SqliteOpenError),
    /// The PostgreSQL database (its errors name the server and database,
    /// never the password).
    #[error(transparent)]
    Postgres(#[from] PgOpenError),
    /// A queue was asked of a storage that keeps none.
    #[error(
        "storage {0}: the queue (awr submit, awr worker, awr serve --queue) needs the \
         PostgreSQL store: --storage postgres://USER@HOST[:PORT]/DATABASE"
    )]
    NoQueue(Storage),
}

/// The store `storage` names, created if needed.
pub async fn open_store(storage: &Storage) -> Result<Arc<dyn RunStore>, OpenError> {
    Ok(match storage {
        Storage::Files(dir) => {
            Arc::new(FileRunStore::open(dir).map_err(|error| OpenError::Files {
                storage: storage.clone(),
                error,
            })?)
        }
        Storage::Sqlite(db) => Arc::new(SqliteRunStore::open(db)?),
        Storage::Postgres(url) => Arc::new(PgRunStore::open(url).await?),
    })
}

/// How a process that claims runs holds them (`awr worker`'s flags).
#[derive(Debug, Clone, Default)]
pub struct Holder {
    /// Its name in the leases it takes; by default `awr@HOST:PID`.
    pub name: Option<String>,
    /// How long a lease lasts unless renewed; by default 30 s.
    pub lease: Option<std::time::Duration>,
}

/// The queue on the store `storage` names (created if needed), its leases
/// held as `holder` says. PostgreSQL only, which workers on many machines
/// share: any other storage is refused, naming what to use.
pub async fn open_queue(
    storage: &Storage,
    holder: &Holder,
) -> Result<Arc<dyn RunQueue>, OpenError> {
    let Storage::Postgres(url) = storage else {
        return Err(OpenError::NoQueue(storage.clone()));
    };
    let mut config = PgStoreConfig::default();
    if let Some(name) = &holder.name {
        config.name = name.clone();
    }
    if let Some(lease) = holder.lease {
        config.lease_ttl = lease;
    }
    Ok(Arc::new(PgRunStore::open_with(url, config).await?))
}

/// The existing store `storage` names, for reading: nothing is created.
pub async fn open_existing_store(storage: &Storage) -> Result<Arc<dyn RunStore>, OpenError> {
    Ok(match storage {
        Storage::Files(dir) => {
            Arc::new(FileRunStore::open_existing(dir).map_err(OpenError::Missing)?)
        }
        Storage::Sqlite(db) => Arc::new(SqliteRunStore::open_existing(db)?),
        Storage::Postgres(url) => Arc::new(PgRunStore::open_existing(url).await?),
    })
}

/// What the stock adapters are set up with.
#[derive(Debug, Clone)]
pub struct Stock {
    /// Key variables child processes (CLI agents, `shell`, `command`
    /// nodes) do not inherit, except those their node needs.
    pub keys: KeyNames,
    /// The directory of the workflow: `mock` fixtures are under
    /// `fixtures/<workflow name>/` there unless an agent says otherwise.
    pub workflow_dir: PathBuf,
    /// The project directory: where `command` nodes run, and the
    /// workspace tools of HTTP agents are confined to.
    pub project: PathBuf,
}

impl Default for Stock {
    /// The default key names; the working directory as workflow and project directory.
    fn default() -> Self {
        let here = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
        Self {
            keys: KeyNames::default(),
            workflow_dir: here.clone(),
            project: here,
        }
    }
}

/// `service.name` of the spans awr exports: `OTEL_SERVICE_NAME`, else `awr`.
pub fn otel_service() -> String {
    std::env::var("OTEL_SERVICE_NAME")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| infrastructure::otlp::DEFAULT_SERVICE.to_owned())
}

/// The live export of runs' spans and metrics, when the standard
/// `OTEL_EXPORTER_OTLP_*` variables ask for either
/// ([`infrastructure::otlp::wanted`], [`infrastructure::otlp::metrics_wanted`]):
/// one queue and one sending thread for the process, started at first use. A setting that cannot be used is warned about,
/// and the run goes on: telemetry never stops a run.
pub fn live_spans() -> Option<Arc<dyn SpanSink>> {
    let live = LIVE_SPANS.get_or_init(|| {
        let (spans, metrics) = (
            infrastructure::otlp::wanted(),
            infrastructure::otlp::metrics_wanted(),
        );
        if !spans && !metrics {
            return None;
        }
        let settings = QueueSettings::from_env().unwrap_or_else(|e| {
            tracing::warn!(error = %e, "using the default span queue settings");
            QueueSettings::default()
        });
        let service = otel_service();
        // Each on its own: one that cannot be set up leaves the other.
        let make = move || {
            let spans = spans
                .then(|| Exporter::new(None, None, &service))
                .transpose()
                .unwrap_or_else(|e| {
                    tracing::warn!(error = %e, "spans are not exported live; `awr trace export` sends them");
                    None
                });
            let metrics = metrics
                .then(|| Metrics::from_env(&service))
                .transpose()
                .unwrap_or_else(|e| {
                    tracing::warn!(error = %e, "metrics are not exported");
                    None
                });
            match (&spans, &metrics) {
                (None, None) => Err(infrastructure::otlp::ExportError::Build(
                    "neither spans nor metrics can be exported".into(),
                )),
                _ => Ok(Outlets { spans, metrics }),
            }
        };
        match LiveExport::start(make, settings) {
            Ok(live) => Some(live),
            Err(e) => {
                tracing::warn!(error = %e, "spans are not exported live; `awr trace export` sends them");
                None
            }
        }
    });
    live.clone().map(|live| live as Arc<dyn SpanSink>)
}

/// Sends the spans the live export holds, waiting at most `within`: what
/// a process does before it exits.
pub async fn flush_spans(within: std::time::Duration) {
    if let Some(Some(live)) = LIVE_SPANS.get() {
        live.shutdown(within).await;
    }
}

static LIVE_SPANS: std::sync::OnceLock<Option<Arc<LiveExport>>> = std::sync::OnceLock::new();

/// The stock runtime over the store `storage` names (created if needed):
/// [`stock`] with [`Stock::default`]. Swap any port on the builder.
pub async fn defaults(storage: &Storage) -> Result<RuntimeBuilder, OpenError> {
    Ok(stock(
        open_store(storage).await?,
        storage,
        &Stock::default(),
    ))
}

/// Every stock adapter, over `store` (the one `storage` names, or a
/// decorator of it): what `awr run` and `awr serve` run workflows with.
pub fn stock(store: Arc<dyn RunStore>, storage: &Storage, stock: &Stock) -> RuntimeBuilder {
    let clock = Arc::new(SystemClock);
    let ids = Arc::new(RandomIds);
    let keys = &stock.keys;
    let fixtures = stock.workflow_dir.join("fixtures");
    let mut builder = Runtime::builder(store, clock, ids)
        .provider(
            Provider::Mock,
            Arc::new(MockQuery::new(&stock.workflow_dir, fixtures)),
        )
        .provider(
            Provider::ClaudeCode,
            Arc::new(ClaudeCode::withholding(keys.clone())),
        )
        .provider(Provider::Codex, Arc::new(Codex::withholding(keys.clone())))
        .provider(
            Provider::Gemini,
            Arc::new(Gemini::withholding(keys.clone())),
        )
        .provider(
            Provider::Copilot,
            Arc::new(Copilot::withholding(keys.clone())),
        )
        .chat_model(Provider::OpenAi, Arc::new(OpenAiChat::new()))
        .chat_model(Provider::Anthropic, Arc::new(AnthropicChat::new()))
        .workspace(&stock.project)
        .transcripts(transcripts(storage))
        .commands(commands(&stock.project, keys))
        .control(control(storage))
        .processes(processes())
        .mcp(Arc::new(mcp_clients(&stock.project, keys)));
    for tool in tools(keys) {
        builder = builder.tool(tool);
    }
    builder
}

/// The MCP client: stdio servers run in `project` (or under it), withheld
/// `keys`.
pub fn mcp_clients(project: &Path, keys: &KeyNames) -> McpClients {
    McpClients::new(project, keys.clone())
}

/// `builder` with every agent, whatever its provider, served from the
/// recording in `dir` (`awr record-fixtures`): CLI and mock agents call by
/// call, HTTP agents turn by turn through the tool loop on recorded tool
/// results, every request checked. No provider is called, no tool runs,
/// no MCP server starts.
pub fn replaying(
    mut builder: RuntimeBuilder,
    dir: &Path,
    keys: &KeyNames,
    clock: Arc<dyn Clock>,
    ids: Arc<dyn IdGen>,
) -> RuntimeBuilder {
    let tools = tools(keys)
        .into_iter()
        .fold(ToolRouter::new(), ToolRouter::with);
    let mock = Arc::new(MockQuery::recording(dir).with_turns(TurnReplay {
        tools: Arc::new(tools),
        clock,
        ids,
    }));
    for provider in Provider::ALL {
        builder = builder.provider(provider, mock.clone());
    }
    builder.without_mcp()
}

/// The built-in tools an agent on an HTTP provider may be granted, `shell`
/// withholding `keys`.
pub fn tools(keys: &KeyNames) -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(ReadFile),
        Arc::new(WriteFile),
        Arc::new(ListDir),
        Arc::new(Shell::new().withholding(keys.clone())),
        Arc::new(HttpGet::new()),
    ]
}

/// The runner of `command` nodes: `sh -c` in `project` (or a `workdir`
/// inside it), in the `shell` tool's sandbox, withholding `keys`.
pub fn commands(project: &Path, keys: &KeyNames) -> Arc<ShellCommandRunner> {
    Arc::new(ShellCommandRunner::new(project).withholding(keys.clone()))
}

/// Where runs' transcripts are written: files under `transcripts/` of
/// the storage's files directory; on PostgreSQL, the database, so that no
/// machine's disk holds a part of a run.
pub fn transcripts(storage: &Storage) -> Arc<dyn Transcripts> {
    match storage {
        Storage::Postgres(url) => pg_transcripts(url),
        _ => Arc::new(JsonlTranscripts::new(storage.files())),
    }
}

/// What reads runs' transcripts back: the files or the database that
/// [`transcripts`] writes to.
pub fn transcript_reader(storage: &Storage) -> Arc<dyn TranscriptReader> {
    match storage {
        Storage::Postgres(url) => pg_transcripts(url),
        _ => Arc::new(JsonlTranscripts::new(storage.files())),
    }
}

/// The transcripts in the database at `url` that the process shares while
/// any part of it holds them (one pool of connections, not one per run),
/// held weakly as [`pg_control`] is.
fn pg_transcripts(url: &str) -> Arc<PgTranscriptsOn> {
    static SHARED: Shared<PgTranscriptsOn> = Shared::new();
    SHARED.get(url, |url| PgTranscriptsOn::new(url))
}

/// Objects per database URL that a process shares while any part of it
/// holds one: once nobody does, the next asks for a new one, so none
/// outlives the async runtime its connections were opened on.
struct Shared<T>(std::sync::OnceLock<std::sync::Mutex<HashMap<String, std::sync::Weak<T>>>>);

impl<T> Shared<T> {
    const fn new() -> Self {
        Self(std::sync::OnceLock::new())
    }

    fn get(&self, url: &str, make: impl FnOnce(&str) -> T) -> Arc<T> {
        let mut shared = self
            .0
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(found) = shared.get(url).and_then(std::sync::Weak::upgrade) {
            return found;
        }
        let made = Arc::new(make(url));
        shared.insert(url.to_owned(), Arc::downgrade(&made));
        made
    }
}

/// Where runs take commands from other processes: a socket per run under
/// `control/` of the storage's files directory; on PostgreSQL, the
/// database, so a writer on any machine takes them.
pub fn control(storage: &Storage) -> Arc<dyn ControlChannel> {
    match storage {
        // A writer may be on any machine: commands go through the database.
        Storage::Postgres(url) => pg_control(url),
        _ => Arc::new(UnixControl::new(storage.files().join("control"))),
    }
}

/// The command channel through the database at `url` that the process's
/// runs share while any of them holds it (a worker's, a server's runs),
/// rather than each open connections and a session of its own ([`Shared`]).
fn pg_control(url: &str) -> Arc<dyn ControlChannel> {
    static CHANNELS: Shared<PgControlOn> = Shared::new();
    CHANNELS.get(url, |url| PgControlOn::new(url))
}

/// What runs keep beside the store (transcripts and the blobs they name,
/// control sockets), in the storage's files directory; on PostgreSQL,
/// their transcripts in the database.
pub fn run_files(storage: &Storage) -> Arc<dyn RunFiles> {
    match storage {
        Storage::Postgres(url) => pg_transcripts(url),
        _ => Arc::new(RunFilesDir::new(storage.files())),
    }
}

/// This machine's processes, to kill what a dead writer of a run left behind.
pub fn processes() -> Arc<OsProcesses> {
    Arc::new(OsProcesses)
}

/// The directory `file` (a workflow) is in.
pub fn dir_of(file: &Path) -> PathBuf {
    file.parent().unwrap_or(Path::new(".")).to_path_buf()
}

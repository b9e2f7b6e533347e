//! The composition root of the `awr` program: with `embed.rs` of the
//! `awr_cli` library, the one place that names concrete types. The
//! terminal commands and `awr serve` get every adapter from here.

pub mod files;
mod replay;
mod run;
mod secrets;
mod worker;

pub use self::replay::replay_recording;
pub use self::run::{RunWiring, deliver, request, source_of, wire, wired_for};
pub use self::secrets::{Secrets, log_writer, redact_printed};
pub use self::worker::StockRuntimes;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::anyhow;
use application::load::LoadRules;
use application::ports::{ControlChannel, RunFiles, RunStore, TranscriptReader, Transcripts};
use application::secrets::KeyNames;
use application::tools::ToolRouter;
use awr_cli::embed;
use domain::definition::Definition;
use domain::{Caller, WorkflowDef};
use infrastructure::clock::{RandomIds, SystemClock};
use infrastructure::fs::WorkflowFiles;

use crate::Failure;
use crate::storage::Storage;

/// The store `storage` names, created if needed; one that cannot be opened
/// is a storage error (exit 2).
pub async fn store(storage: &Storage) -> Result<Arc<dyn RunStore>, Failure> {
    embed::open_store(storage)
        .await
        .map_err(|e| Failure::Input(anyhow::anyhow!(e)))
}

/// The queue on the store `storage` names, its leases held as `holder`
/// says; a storage that keeps no queue is bad input (exit 2).
pub async fn queue(
    storage: &Storage,
    holder: &embed::Holder,
) -> Result<Arc<dyn application::ports::RunQueue>, Failure> {
    embed::open_queue(storage, holder)
        .await
        .map_err(|e| Failure::Input(anyhow::anyhow!(e)))
}

/// The existing store `storage` names, for commands that only read: it
/// creates no storage, and a missing one is bad input (exit 2).
pub async fn read_store(storage: &Storage) -> Result<Arc<dyn RunStore>, Failure> {
    embed::open_existing_store(storage)
        .await
        .map_err(|e| Failure::Input(anyhow::anyhow!(e)))
}

/// Where runs take commands from other processes.
pub fn control(storage: &Storage) -> Arc<dyn ControlChannel> {
    embed::control(storage)
}

/// What runs keep beside the store: their transcripts and control sockets.
pub fn run_files(storage: &Storage) -> Arc<dyn RunFiles> {
    embed::run_files(storage)
}

/// The built-in tools an agent on an HTTP provider may be granted.
pub fn tools() -> ToolRouter {
    embed::tools(&KeyNames::default())
        .into_iter()
        .fold(ToolRouter::new(), ToolRouter::with)
}

/// The MCP client runs use for `workflow`: servers run in the working
/// directory, withheld the key variables the workflow's runs withhold.
pub fn mcp_clients(workflow: &WorkflowDef) -> impl application::ports::McpConnector {
    let project = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    embed::mcp_clients(&project, secrets::Secrets::of(workflow).keys())
}

/// Who acts through the command line: the local user, as
/// `LOGIN@HOST` (the login of the effective uid, `uid-N` when it has no
/// name), recorded in the events a command causes (`startedBy`, `by`).
/// Looked up once per process.
pub fn local_caller() -> Option<Caller> {
    static CALLER: std::sync::OnceLock<Option<Caller>> = std::sync::OnceLock::new();
    CALLER
        .get_or_init(|| {
            let login = whoami::username()
                .unwrap_or_else(|_| format!("uid-{}", rustix::process::geteuid().as_raw()));
            let host = whoami::hostname().unwrap_or_else(|_| "localhost".to_owned());
            Caller::new(format!("{login}@{host}")).ok()
        })
        .clone()
}

/// Wall clock and random ids.
pub fn clock_and_ids() -> (Arc<SystemClock>, Arc<RandomIds>) {
    (Arc::new(SystemClock), Arc::new(RandomIds))
}

/// Where runs' transcripts are written: files beside the store, or the
/// PostgreSQL database.
pub fn transcripts(storage: &Storage) -> Arc<dyn Transcripts> {
    embed::transcripts(storage)
}

/// The reader of the storage's transcripts: what `awr transcript` and
/// `awr serve` read back.
pub fn transcript_reader(storage: &Storage) -> Arc<dyn TranscriptReader> {
    embed::transcript_reader(storage)
}

/// `spans` (those that have ended) as one OTLP/JSON request.
pub fn otlp_json(spans: &[domain::trace::Span]) -> Result<String, Failure> {
    let resource = infrastructure::otlp::resource(&embed::otel_service());
    let request = infrastructure::otlp::request(spans, &resource);
    infrastructure::otlp::json(&request).map_err(|e| Failure::Input(anyhow::anyhow!(e)))
}

/// Sends spans to a collector over OTLP.
pub struct OtlpExporter(infrastructure::otlp::Exporter);

impl OtlpExporter {
    /// Sends the spans of `spans` that have ended; how many went.
    pub async fn send(&self, spans: &[domain::trace::Span]) -> Result<usize, anyhow::Error> {
        let data = infrastructure::otlp::span_data(spans);
        let count = data.len();
        self.0.export(data).await?;
        Ok(count)
    }
}

/// Whether spans carry the content of calls
/// (`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`).
pub fn captures_content() -> bool {
    infrastructure::otlp::captures_content()
}

/// An OTLP exporter to `endpoint` over `protocol`, each defaulting to what
/// the `OTEL_EXPORTER_OTLP_*` variables say; a bad setting is exit 2.
pub fn otlp_exporter(
    endpoint: Option<&str>,
    protocol: Option<&str>,
) -> Result<OtlpExporter, Failure> {
    infrastructure::otlp::Exporter::new(endpoint, protocol, &embed::otel_service())
        .map(OtlpExporter)
        .map_err(|e| Failure::Input(anyhow::anyhow!(e)))
}

/// Makes awr not dumpable, as ssh-agent does: its children (a shell, a CLI
/// agent) then cannot read its keys from `/proc/<awr pid>/environ`, nor
/// attach a debugger to it. A process with `CAP_SYS_PTRACE` (root, as a
/// rule) still can.
pub fn hide_environment() {
    #[cfg(target_os = "linux")]
    if let Err(e) =
        rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
    {
        tracing::warn!(error = %e, "cannot make awr non-dumpable; its children may read its environment");
    }
}

/// Reads and validates a workflow file and every workflow it calls (see
/// [`application::load::load_workflow`]), from disk, judging `workdir`s
/// against the current directory. Any problem is bad input (exit 2).
pub fn load_workflow(file: &Path) -> Result<Arc<WorkflowDef>, Failure> {
    load_workflow_calling(file, None, &[])
}

/// The workflow of a run from the definition it keeps (its files as they
/// were when it started), whatever the disk holds now.
pub fn load_kept(definition: &Definition) -> Result<Arc<WorkflowDef>, Failure> {
    let rules = rules(None, &[])?;
    let files = application::load::Stored::new(definition, &WorkflowFiles);
    application::load::load_workflow(&files, Path::new(&definition.root), &rules)
        .map_err(|e| Failure::Input(anyhow::Error::new(e)))
}

/// What every load checks: the project directory (the current one), the
/// built-in tools, and where calls may go.
fn rules(within: Option<&Path>, outside: &[PathBuf]) -> Result<LoadRules, Failure> {
    let project = std::env::current_dir()
        .and_then(|d| d.canonicalize())
        .map_err(|e| Failure::Input(anyhow!("cannot resolve the current directory: {e}")))?;
    Ok(LoadRules {
        project,
        tools: tools().names(),
        calls_within: within.map(Path::to_path_buf),
        calls_outside: outside.to_vec(),
    })
}

/// [`load_workflow`], with every `call_workflow` confined to `within` (a
/// server's root) when given, and kept out of `outside` (its storage). An
/// error is the loader's ([`application::load::LoadError`]).
pub fn load_workflow_calling(
    file: &Path,
    within: Option<&Path>,
    outside: &[PathBuf],
) -> Result<Arc<WorkflowDef>, Failure> {
    let rules = rules(within, outside)?;
    application::load::load_workflow(&WorkflowFiles, file, &rules)
        .map_err(|e| Failure::Input(anyhow::Error::new(e)))
}

//! The composition root: the one place that names concrete types.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use adapters_agents::anthropic::AnthropicChat;
use adapters_agents::claude::ClaudeCode;
use adapters_agents::codex::Codex;
use adapters_agents::copilot::Copilot;
use adapters_agents::gemini::Gemini;
use adapters_agents::openai::OpenAiChat;
use adapters_agents::process::{Shell, ShellCommandRunner};
use adapters_agents::{MockQuery, Providers};
use application::ports::{
    ChatModel, Clock, CommandRunner, IdGen, RunObserver, RunStore, Transcripts,
};
use application::redact::{RedactingObserver, RedactingStore, RedactingTranscripts, Redactor};
use application::secrets::KeyNames;
use application::tool_loop::ToolLoop;
use application::tools::ToolRouter;
use domain::WorkflowDef;
use domain::workflow::Provider;
use infrastructure::clock::{RandomIds, SystemClock};
use infrastructure::store::{FileRunStore, SqliteRunStore};
use infrastructure::tools::{HttpGet, ListDir, ReadFile, WriteFile};
use infrastructure::transcript::JsonlTranscripts;

use crate::Failure;
use crate::storage::Storage;
use application::ports::{ControlChannel, Processes};
use infrastructure::UnixControl;

/// The store `storage` names, created if needed; one that cannot be opened
/// is a storage error (exit 2).
pub fn store(storage: &Storage) -> Result<Arc<dyn RunStore>, Failure> {
    match storage {
        Storage::Files(dir) => FileRunStore::open(dir)
            .map(|s| Arc::new(s) as Arc<dyn RunStore>)
            .map_err(|e| Failure::Input(anyhow::anyhow!("storage {storage}: {e}"))),
        // Its errors name the database file already.
        Storage::Sqlite(db) => SqliteRunStore::open(db)
            .map(|s| Arc::new(s) as Arc<dyn RunStore>)
            .map_err(|e| Failure::Input(anyhow::anyhow!(e))),
    }
}

/// The existing store `storage` names, for commands that only read: it
/// creates no storage, and a missing one is bad input (exit 2).
pub fn read_store(storage: &Storage) -> Result<Arc<dyn RunStore>, Failure> {
    match storage {
        Storage::Files(dir) => FileRunStore::open_existing(dir)
            .map(|s| Arc::new(s) as Arc<dyn RunStore>)
            .map_err(|e| Failure::Input(anyhow::anyhow!(e))),
        Storage::Sqlite(db) => SqliteRunStore::open_existing(db)
            .map(|s| Arc::new(s) as Arc<dyn RunStore>)
            .map_err(|e| Failure::Input(anyhow::anyhow!(e))),
    }
}

/// Where runs take commands from other processes: a socket per run under
/// `control/` of the storage's files directory.
pub fn control(storage: &Storage) -> Arc<dyn ControlChannel> {
    Arc::new(UnixControl::new(storage.files().join("control")))
}

/// What runs keep beside the store (transcripts and the blobs they name,
/// control sockets), in the storage's files directory.
pub fn run_files(storage: &Storage) -> Arc<dyn application::ports::RunFiles> {
    Arc::new(infrastructure::RunFilesDir::new(storage.files()))
}

/// This machine's processes, to kill what a dead writer left behind.
pub fn processes() -> Arc<dyn Processes> {
    Arc::new(adapters_agents::process::OsProcesses)
}

/// Providers for a workflow loaded from `workflow_dir`: mock fixtures are
/// under `fixtures/<workflow name>/` there unless an agent says otherwise.
/// HTTP agents run their tools in awr's working directory (or their
/// `workdir`, taken inside it): that directory is the workspace the file
/// tools are confined to. Child processes (CLI agents, `shell`) do not
/// inherit the key variables `secrets` names, except those their node needs.
pub fn providers(
    workflow_dir: &Path,
    secrets: &Secrets,
    clock: Arc<dyn Clock>,
    ids: Arc<dyn IdGen>,
) -> Providers {
    let default_fixtures = workflow_dir.join("fixtures");
    let workspace = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let keys = secrets.keys.clone();
    let router = Arc::new(tool_set(keys.clone()));
    let tool_loop = |model: Arc<dyn ChatModel>| {
        let tool_loop = ToolLoop::new(
            model,
            Arc::clone(&router),
            workspace.clone(),
            Arc::clone(&clock),
            Arc::clone(&ids),
        );
        Arc::new(tool_loop)
    };
    Providers::new()
        .with_mock(Arc::new(MockQuery::new(workflow_dir, default_fixtures)))
        .with(
            Provider::ClaudeCode,
            Arc::new(ClaudeCode::withholding(keys.clone())),
        )
        .with(Provider::Codex, Arc::new(Codex::withholding(keys.clone())))
        .with(
            Provider::Gemini,
            Arc::new(Gemini::withholding(keys.clone())),
        )
        .with(Provider::Copilot, Arc::new(Copilot::withholding(keys)))
        .with(Provider::OpenAi, tool_loop(Arc::new(OpenAiChat::new())))
        .with(
            Provider::Anthropic,
            tool_loop(Arc::new(AnthropicChat::new())),
        )
}

/// The built-in tools an agent on an HTTP provider may be granted.
pub fn tools() -> ToolRouter {
    tool_set(KeyNames::default())
}

/// The built-in tools, `shell` withholding `keys`.
fn tool_set(keys: KeyNames) -> ToolRouter {
    ToolRouter::new()
        .with(Arc::new(ReadFile))
        .with(Arc::new(WriteFile))
        .with(Arc::new(ListDir))
        .with(Arc::new(Shell::new().withholding(keys)))
        .with(Arc::new(HttpGet::new()))
}

/// The runner of `command` nodes: `sh -c` in the project directory (awr's
/// working directory) or a `workdir` inside it, in the `shell` tool's
/// sandbox, withholding the key variables `secrets` names.
pub fn commands(secrets: &Secrets) -> Arc<dyn CommandRunner> {
    let project = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    Arc::new(ShellCommandRunner::new(project).withholding(secrets.keys.clone()))
}

/// Wall clock and random ids.
pub fn clock_and_ids() -> (Arc<SystemClock>, Arc<RandomIds>) {
    (Arc::new(SystemClock), Arc::new(RandomIds))
}

/// Transcript files under `transcripts/` of the storage's files directory
/// (whatever the store: transcripts stay files).
pub fn transcripts(storage: &Storage) -> Arc<JsonlTranscripts> {
    Arc::new(JsonlTranscripts::new(storage.files()))
}

/// The key variables of a run and the redactor of their values: everything
/// a run writes (events, snapshot, transcript, progress, its output) goes
/// through it, and it becomes the redactor of logs and the last error.
pub struct Secrets {
    keys: KeyNames,
    redactor: Redactor,
}

impl Secrets {
    /// The key names `workflow` configures and the values awr's environment
    /// and the workflow's agents give them.
    pub fn of(workflow: &WorkflowDef) -> Self {
        let keys = KeyNames::of_workflow(workflow);
        let redactor = Redactor::new(keys.secret_values(env_vars(), Some(workflow)));
        set_printed(&redactor);
        Self { keys, redactor }
    }

    /// `store`, redacting what is written to it.
    pub fn store(&self, store: Arc<dyn RunStore>) -> Arc<dyn RunStore> {
        if self.redactor.is_empty() {
            return store;
        }
        Arc::new(RedactingStore::new(store, self.redactor.clone()))
    }

    /// `transcripts`, redacting every line.
    pub fn transcripts(&self, transcripts: Arc<dyn Transcripts>) -> Arc<dyn Transcripts> {
        if self.redactor.is_empty() {
            return transcripts;
        }
        Arc::new(RedactingTranscripts::new(
            transcripts,
            self.redactor.clone(),
        ))
    }

    /// `observer`, shown redacted events.
    pub fn observer(&self, observer: Arc<dyn RunObserver>) -> Arc<dyn RunObserver> {
        if self.redactor.is_empty() {
            return observer;
        }
        Arc::new(RedactingObserver::new(observer, self.redactor.clone()))
    }

    /// `value` redacted, for printing.
    pub fn value(&self, mut value: serde_json::Value) -> serde_json::Value {
        self.redactor.value(&mut value);
        value
    }
}

/// The redactor of what awr prints besides a run's records (logs, the last
/// error): process-wide, as the log subscriber is. Built from awr's
/// environment at first use; a run's [`Secrets`] replace it with theirs,
/// which also know the workflow's configured key names.
static PRINTED: std::sync::RwLock<Option<Redactor>> = std::sync::RwLock::new(None);

fn printed() -> Redactor {
    if let Ok(guard) = PRINTED.read()
        && let Some(redactor) = guard.as_ref()
    {
        return redactor.clone();
    }
    let redactor = Redactor::new(KeyNames::default().secret_values(env_vars(), None));
    set_printed(&redactor);
    redactor
}

fn set_printed(redactor: &Redactor) {
    if let Ok(mut guard) = PRINTED.write() {
        *guard = Some(redactor.clone());
    }
}

/// `text` (an error about to be printed, whatever command it came from)
/// with key values redacted.
pub fn redact_printed(text: &str) -> String {
    printed().text(text).into_owned()
}

/// Where logs go: stderr, key values redacted. The log subscriber formats
/// each event whole and writes it in one call, so no value is split.
pub fn log_writer() -> RedactedStderr {
    RedactedStderr(printed())
}

/// Stderr through the process-wide redactor.
pub struct RedactedStderr(Redactor);

impl std::io::Write for RedactedStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        std::io::stderr().write_all(self.0.text(&text).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// awr's environment, the variables that are text.
fn env_vars() -> impl Iterator<Item = (String, String)> {
    std::env::vars_os()
        .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
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

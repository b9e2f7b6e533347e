//! A runtime wired for one workflow, and for a run already on record:
//! what the terminal and the server both execute runs and commands with.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::anyhow;
use application::ports::{CommandReply, RunObserver, RunStore};
use application::{ExecutorError, RunRequest, Runtime};
use awr_cli::embed::{self, Stock};
use domain::workflow::{McpServerDef, McpTransport, Timeout};
use domain::{Caller, EventKind, RunId, WorkflowDef};
use serde_json::Value;

use super::Secrets;
use crate::Failure;
use crate::storage::Storage;

/// The runtime wired for one workflow, and the secrets it keeps out of
/// everything it writes and shows.
pub struct RunWiring {
    /// Runs, resumes, forks and commands runs of the workflow.
    pub runtime: Runtime,
    /// The workflow's key values, masked in what is written or shown.
    pub secrets: Secrets,
}

/// The runtime for `workflow` (read from `file`) writing to `store`, with
/// `observer` shown its events (redacted), and with every agent served
/// from the recording in `replay` when given. The server shares one store
/// among its runs and followers, so its appends wake them at once.
pub fn wire(
    storage: &Storage,
    store: Arc<dyn RunStore>,
    file: &Path,
    workflow: &WorkflowDef,
    observer: Option<Arc<dyn RunObserver>>,
    replay: Option<&Path>,
) -> RunWiring {
    let secrets = Secrets::of(workflow);
    let project = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let stock = Stock {
        keys: secrets.keys().clone(),
        workflow_dir: embed::dir_of(file),
        project,
    };
    // Everything the run writes and shows is redacted.
    let mut builder = embed::stock(secrets.store(store), storage, &stock)
        .transcripts(secrets.transcripts(super::transcripts(storage)));
    if let Some(observer) = observer {
        builder = builder.observer(secrets.observer(observer));
    }
    if let Some(live) = embed::live_spans() {
        builder = builder.spans(secrets.spans(live));
    }
    if let Some(dir) = replay {
        let (clock, ids) = super::clock_and_ids();
        builder = embed::replaying(builder, dir, secrets.keys(), clock, ids);
    } else if let Some(server) = permission_prompt(storage) {
        builder = builder.permission_prompt(server);
    }
    RunWiring {
        runtime: builder.build(),
        secrets,
    }
}

/// This program as awr's permission prompt on `storage` (`awr mcp
/// --permission-prompt`), for Claude Code agents whose grants ask a
/// person. The storage goes in its environment, not on a command line.
/// `None` when this program cannot say where it is.
fn permission_prompt(storage: &Storage) -> Option<McpServerDef> {
    let exe = std::env::current_exe().ok()?;
    Some(McpServerDef {
        transport: McpTransport::Stdio {
            command: exe.display().to_string(),
            args: vec!["mcp".to_owned(), "--permission-prompt".to_owned()],
            env: [("AWR_STORAGE".to_owned(), storage.value())].into(),
            cwd: None,
        },
        startup_timeout: Timeout(std::time::Duration::from_secs(30)),
        // A person may take days: the agent's own timeout bounds the wait.
        tool_timeout: Timeout(std::time::Duration::from_secs(365 * 24 * 3600)),
    })
}

/// What to run: `workflow`, read from `file`, on `input`, started by `by`.
pub fn request(
    workflow: Arc<WorkflowDef>,
    input: Value,
    file: &Path,
    by: Option<Caller>,
) -> RunRequest {
    RunRequest {
        workflow,
        input,
        source: Some(source_of(file)),
        started_by: by,
    }
}

/// The workflow file as `flow:started` records it: its canonical path, so
/// `awr resume` finds it from any directory (the path as given when it
/// cannot be resolved).
pub fn source_of(file: &Path) -> String {
    std::fs::canonicalize(file)
        .unwrap_or_else(|_| file.to_path_buf())
        .display()
        .to_string()
}

/// Where the definition of `run_id` is.
enum Origin {
    /// A file on disk: the one given, or `flow:started`'s `source` of a run
    /// that keeps no definition.
    File(PathBuf),
    /// The definition the run keeps, by its hash, and the file it was
    /// read from, should the storage have lost it (a log copied without it).
    Kept(String, Option<PathBuf>),
}

/// Where the definition of `run_id` is: `given`, else the definition
/// `flow:started` names, else its `source`.
async fn origin(
    store: &dyn RunStore,
    run_id: RunId,
    given: Option<&Path>,
) -> Result<Origin, Failure> {
    if let Some(file) = given {
        return Ok(Origin::File(file.to_path_buf()));
    }
    let first = store
        .read(run_id, 0, 1)
        .await
        .map_err(|e| Failure::Input(crate::about_run(run_id, e.into())))?;
    let upgraded = application::queue::upgraded_to(store, run_id)
        .await
        .map_err(|e| Failure::Input(crate::about_run(run_id, e.into())))?;
    if let Some(hash) = upgraded {
        return Ok(Origin::Kept(hash, None));
    }
    match first.first().map(|e| &e.kind) {
        Some(EventKind::FlowStarted {
            definition: Some(hash),
            source,
            ..
        }) => Ok(Origin::Kept(
            hash.clone(),
            source.as_ref().map(PathBuf::from),
        )),
        Some(EventKind::FlowStarted {
            source: Some(source),
            ..
        }) => Ok(Origin::File(PathBuf::from(source))),
        Some(EventKind::FlowStarted { .. }) => Err(Failure::Input(anyhow!(
            "run {run_id} does not record its workflow file; name it with --workflow FILE"
        ))),
        _ => Err(Failure::Input(anyhow!(
            "run {run_id} never started; there is nothing to continue"
        ))),
    }
}

/// The workflow of `run_id` (from `given`, else from the definition the run
/// keeps, else from where `flow:started` says it was read) and the runtime
/// wired for it, writing to `store` (`None`: a store of its own over the
/// existing storage), with `observer` shown its events.
pub async fn wired_for(
    storage: &Storage,
    run_id: RunId,
    given: Option<&Path>,
    store: Option<Arc<dyn RunStore>>,
    observer: Option<Arc<dyn RunObserver>>,
) -> Result<(Arc<WorkflowDef>, RunWiring), Failure> {
    let store = match store {
        Some(store) => store,
        None => super::read_store(storage).await?,
    };
    let about = |e: Failure| match e {
        Failure::Input(e) => Failure::Input(e.context(format!("the workflow of run {run_id}"))),
        other => other,
    };
    let (file, workflow) = match origin(store.as_ref(), run_id, given).await? {
        Origin::File(file) => {
            let workflow = super::load_workflow(&file).map_err(about)?;
            (file, workflow)
        }
        Origin::Kept(hash, source) => {
            let kept = store
                .load_definition(&hash)
                .await
                .map_err(|e| Failure::Input(crate::about_run(run_id, e.into())))?;
            match (kept, source) {
                (Some(definition), _) => {
                    let workflow = super::load_kept(&definition).map_err(about)?;
                    (PathBuf::from(&definition.root), workflow)
                }
                // Lost with a copy of the log: the file, if it is still the
                // same (the resume checks its hash).
                (None, Some(file)) => {
                    tracing::warn!(run = %run_id, definition = %hash, file = %file.display(), "the storage does not hold the run's definition; reading its file");
                    let workflow = super::load_workflow(&file).map_err(about)?;
                    (file, workflow)
                }
                (None, None) => {
                    return Err(Failure::Input(anyhow!(
                        "run {run_id} names definition {hash}, which the storage does not hold; \
                         name the workflow with --workflow FILE"
                    )));
                }
            }
        }
    };
    let wired = wire(storage, store, &file, &workflow, observer, None);
    Ok((workflow, wired))
}

/// Gives the raw command `raw`, sent by `by`, to `run_id`: to the process
/// writing it, or recorded here when none does. The command line and the
/// server both send commands this way; either way it is on record, with
/// its sender, before the answer.
pub async fn deliver(
    storage: &Storage,
    run_id: RunId,
    raw: &Value,
    by: Option<&Caller>,
) -> Result<CommandReply, ExecutorError> {
    let store = super::store(storage)
        .await
        .map_err(|e| ExecutorError::Refused(format!("{:#}", e.error())))?;
    let (clock, ids) = super::clock_and_ids();
    // A command calls no agent: the runtime needs no provider.
    let runtime = Runtime::builder(store, clock, ids)
        .control(super::control(storage))
        .processes(embed::processes())
        .build();
    let storage = storage.clone();
    let load = async move || {
        wired_for(&storage, run_id, None, None, None)
            .await
            .map(|(workflow, _)| workflow)
            .map_err(|e| ExecutorError::Refused(format!("{:#}", e.error())))
    };
    runtime.command(run_id, raw, by, load).await
}

//! `awr run` and `awr validate`.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, anyhow};
use application::ports::RunObserver;
use application::{Cancel, RunOutcome, Runtime};
use domain::{RunId, RunStatus, WorkflowDef};
use serde_json::Value;

use crate::signals::Signals;
use crate::storage::Storage;
use crate::{Failure, progress::Progress, wiring};

/// `awr validate FILE [--connect]`: the workflow loads as for a run, and
/// every mock fixture file it would be served from parses (a run reads each
/// only when its node runs); with `connect`, its MCP servers answer and
/// list every tool granted of them.
pub async fn validate(file: &Path, connect: bool) -> Result<(), Failure> {
    let workflow = wiring::load_workflow(file)?;
    for fixture in application::load::mock_fixtures(file, &workflow) {
        wiring::files::fixture_calls(&fixture)
            .map_err(|e| Failure::Input(anyhow!("{}: {e}", file.display())))?;
    }
    if connect {
        let connector = wiring::mcp_clients(&workflow);
        let problems = application::mcp::check_connected(&connector, &workflow).await;
        if !problems.is_empty() {
            let lines: Vec<String> = (problems.iter())
                .map(|p| format!("{}: {p}", file.display()))
                .collect();
            return Err(Failure::Input(anyhow!("{}", lines.join("\n"))));
        }
    }
    crate::say(&format!(
        "{}: ok ({}, {}, {})",
        file.display(),
        counted(workflow.agents.len(), "agent"),
        counted(workflow.nodes.len(), "node"),
        counted(workflow.edges.len(), "edge")
    ))
}

/// `1 agent`, `2 agents`.
fn counted(n: usize, thing: &str) -> String {
    match n {
        1 => format!("1 {thing}"),
        n => format!("{n} {thing}s"),
    }
}

/// What `awr run` was given as input.
#[derive(Debug, Clone, Copy)]
pub enum Input<'a> {
    /// None: the workflow's own `input`, else `null`.
    Default,
    /// `--input`: JSON text, or `@FILE` to read JSON from a file.
    Json(&'a str),
    /// `--input-text`: the text itself, as a string.
    Text(&'a str),
}

/// The run's input. JSON that does not parse is an error naming the problem,
/// never silently a string: a string is asked for with `--input-text`.
pub fn parse_input(input: Input<'_>, workflow: &WorkflowDef) -> Result<Value, Failure> {
    let raw = match input {
        Input::Default => return Ok(workflow.input.clone().unwrap_or(Value::Null)),
        Input::Text(text) => return Ok(Value::String(text.to_owned())),
        Input::Json(raw) => raw,
    };
    let (text, origin) = match raw.strip_prefix('@') {
        Some(path) => (
            wiring::files::read_text(Path::new(path), wiring::files::MAX_INPUT_FILE)
                .map_err(|e| Failure::Input(anyhow!("--input @{path}: {e}")))?,
            format!("--input @{path}"),
        ),
        None => (raw.to_owned(), "--input".to_owned()),
    };
    let input = WorkflowDef::input_from_json(&text).map_err(|e| match e.classify() {
        // JSON, but not a value awr takes as written (a duplicate key).
        serde_json::error::Category::Data => Failure::Input(anyhow!("{origin}: {e}")),
        _ => Failure::Input(anyhow!(
            "{origin}: not JSON: {e} (to pass text as a string, use --input-text)"
        )),
    })?;
    if let Some(big) = domain::output::oversized_integer(&text) {
        return Err(Failure::Input(anyhow!(
            "{origin}: the integer {big} does not fit in 64 bits and would lose digits; pass it as a string"
        )));
    }
    WorkflowDef::check_input(&input).map_err(|e| Failure::Input(anyhow!("{origin}: {e}")))?;
    Ok(input)
}

/// `awr run FILE [--input JSON | --input-text TEXT] [--replay-from DIR]`.
pub async fn run(
    storage: &Storage,
    file: &Path,
    input: Input<'_>,
    replay_from: Option<&Path>,
) -> Result<(), Failure> {
    // Everything that can be wrong with the input is checked before the store is touched.
    let workflow = wiring::load_workflow(file)?;
    let input = parse_input(input, &workflow)?;
    if let Some(dir) = replay_from {
        crate::terminal::verify::check_recording(dir)?;
    }
    let wired = match replay_from {
        Some(dir) => Wired::replaying(storage, file, &workflow, dir).await?,
        None => Wired::new(storage, file, &workflow).await?,
    };
    let run_id = wired
        .runtime
        .create()
        .await
        .context("cannot create the run")
        .map_err(Failure::Input)?;
    crate::note(&format!("run {run_id}"));
    let cancel = Cancel::new();
    let signals = crate::signals::cancel_on_signal(cancel.clone());
    let request = wiring::request(workflow, input, file, wiring::local_caller());
    let outcome = match wired.runtime.run_created(run_id, request, cancel).await {
        Ok(outcome) => outcome,
        Err(e) => return Err(failed(storage, &wired.runtime, run_id, e).await),
    };
    if let Some(dir) = replay_from
        && outcome.status == RunStatus::Completed
    {
        // Calls the recording holds and the run never made: it did not
        // replay what was recorded, whatever it printed.
        let events = crate::terminal::verify::run_events(wired.runtime.store(), run_id).await?;
        if let Some(report) = crate::terminal::verify::against_recording(dir, &events)? {
            return Err(Failure::Run(anyhow!(
                "run {run_id} did not replay {}: {}",
                dir.display(),
                report.message()
            )));
        }
    }
    wired.finish(outcome, &signals)
}

/// A run that could not go on. When its storage failed, not the run (its
/// log, or its transcript beside it), it is left as a crash leaves it, to
/// resume; but one of which nothing was recorded (its first event could
/// not be written: a full disk) has nothing to resume, and is removed with
/// its files rather than listed `pending` for ever.
pub async fn failed(
    storage: &Storage,
    runtime: &Runtime,
    run_id: RunId,
    e: application::ExecutorError,
) -> Failure {
    use application::ExecutorError;
    let stored = matches!(e, ExecutorError::Store(_) | ExecutorError::Transcript(_));
    let error = crate::about_run(run_id, e.into());
    if !stored {
        return Failure::Run(error);
    }
    let hint = match runtime.discard_if_unstarted(run_id).await {
        true => {
            // Its transcript, made with it: nothing is left of the run.
            if let Err(e) = wiring::run_files(storage).remove(run_id).await {
                tracing::warn!(run = %run_id, error = %e, "the run is removed but not all its files");
            }
            "; nothing of the run was recorded, and it is removed".to_owned()
        }
        false => format!("; the run is left to resume: awr resume {run_id}"),
    };
    Failure::Run(anyhow!("{error:#}{hint}"))
}

/// The runtime wired for one workflow, with its progress display on
/// stderr (`awr run`, `resume`, `fork`, `record-fixtures`), and the
/// secrets it must keep out of what it shows.
pub struct Wired {
    pub runtime: Runtime,
    progress: Arc<Progress>,
    secrets: wiring::Secrets,
}

impl Wired {
    /// The runtime for `workflow` (read from `file`) over the storage,
    /// showing its progress on stderr.
    pub async fn new(
        storage: &Storage,
        file: &Path,
        workflow: &WorkflowDef,
    ) -> Result<Self, Failure> {
        Self::build(storage, file, workflow, None).await
    }

    /// As [`Wired::new`], every agent served from the recording in `dir`.
    pub async fn replaying(
        storage: &Storage,
        file: &Path,
        workflow: &WorkflowDef,
        dir: &Path,
    ) -> Result<Self, Failure> {
        Self::build(storage, file, workflow, Some(dir)).await
    }

    async fn build(
        storage: &Storage,
        file: &Path,
        workflow: &WorkflowDef,
        replay: Option<&Path>,
    ) -> Result<Self, Failure> {
        let store = wiring::store(storage).await?;
        let progress = Arc::new(Progress::new());
        let observer: Arc<dyn RunObserver> = progress.clone();
        let wired = wiring::wire(storage, store, file, workflow, Some(observer), replay);
        Ok(Self::shown(wired, progress))
    }

    /// The workflow of the run `run_id` on record and the runtime wired for
    /// it, as [`wiring::wired_for`], showing its progress on stderr.
    pub async fn for_run(
        storage: &Storage,
        run_id: RunId,
        given: Option<&Path>,
    ) -> Result<(Arc<WorkflowDef>, Self), Failure> {
        let progress = Arc::new(Progress::new());
        let observer: Arc<dyn RunObserver> = progress.clone();
        let (workflow, wired) =
            wiring::wired_for(storage, run_id, given, None, Some(observer)).await?;
        Ok((workflow, Self::shown(wired, progress)))
    }

    fn shown(wired: wiring::RunWiring, progress: Arc<Progress>) -> Self {
        Self {
            runtime: wired.runtime,
            progress,
            secrets: wired.secrets,
        }
    }

    /// `value` with the run's key values masked, for what is written beside
    /// the run (a recording's manifest).
    pub fn redacted(&self, value: Value) -> Value {
        self.secrets.value(value)
    }

    /// Shows how a run ended: its output on stdout, or why it did not
    /// complete, with the exit code that says so.
    pub fn finish(&self, outcome: RunOutcome, signals: &Signals) -> Result<(), Failure> {
        self.progress.finish();
        let run_id = outcome.run_id;
        let why = |default: &str| outcome.error.clone().unwrap_or_else(|| default.to_owned());
        match outcome.status {
            RunStatus::Completed => print_output(&self.secrets.value(outcome.output)),
            RunStatus::Cancelled => Err(Failure::Cancelled(
                signals.exit_code(),
                anyhow!("run {run_id} cancelled: {}", why("no reason given")),
            )),
            RunStatus::Paused => Err(Failure::Paused(anyhow!(
                "run {run_id} paused ({}); continue it with `awr resume {run_id}`",
                why("no reason given")
            ))),
            RunStatus::Waiting => Err(Failure::Waiting(anyhow!(
                "run {run_id} is waiting for an answer: see `awr approvals --run {run_id}`, \
                 then `awr approve {run_id} --node-run ID` or `awr reject {run_id} --node-run ID`"
            ))),
            _ => Err(Failure::Run(anyhow!(
                "run {run_id} failed: {}",
                why("unknown error")
            ))),
        }
    }
}

fn print_output(output: &Value) -> Result<(), Failure> {
    match output {
        Value::String(text) => crate::say(text),
        other => {
            crate::say(&serde_json::to_string_pretty(other).unwrap_or_else(|_| other.to_string()))
        }
    }
}

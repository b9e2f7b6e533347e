//! `awr fork RUN --at OFFSET [--input JSON]`: a new run that branches off
//! RUN after its event at OFFSET and runs from there (docs/storage.md,
//! Fork). It prints what `awr run` prints, with the same exit codes.

use application::fork::ForkRequest;
use application::{Cancel, ExecutorError};
use domain::{RunId, WorkflowDef};

use super::inspect::resolve_run;
use super::run::{Input, Wired, parse_input};
use crate::Failure;
use crate::storage::Storage;

/// `awr fork RUN --at OFFSET [--input JSON]`.
pub async fn fork(
    storage: &Storage,
    run: &str,
    at: u64,
    input: Option<&str>,
) -> Result<(), Failure> {
    let parent = resolve_run(storage, run).await?;
    let (workflow, wired) = Wired::for_run(storage, parent, None).await?;
    let input = input
        .map(|raw| parse_input(Input::Json(raw), &workflow))
        .transpose()?;
    let run_id = make(&wired, parent, at, input, &workflow).await?;
    crate::note(&format!("run {run_id}"));
    let cancel = Cancel::new();
    let signals = crate::signals::cancel_on_signal(cancel.clone());
    let outcome = wired
        .runtime
        .run_fork(run_id, workflow, cancel)
        .await
        .map_err(|e| Failure::Run(crate::about_run(run_id, e.into())))?;
    wired.finish(outcome, &signals)
}

/// Makes the fork of `parent` at `at` with `wired`'s executor; a request
/// that cannot be carried out is bad input (exit 2), and no run is made.
pub async fn make(
    wired: &Wired,
    parent: RunId,
    at: u64,
    input: Option<serde_json::Value>,
    workflow: &WorkflowDef,
) -> Result<RunId, Failure> {
    let request = ForkRequest {
        parent,
        at,
        input,
        by: crate::wiring::local_caller(),
    };
    wired
        .runtime
        .fork(request, workflow)
        .await
        .map_err(|e: ExecutorError| Failure::Input(crate::about_run(parent, e.into())))
}

//! `awr resume`, `awr recover`, and the commands to a run: `send`, `reply`,
//! `pause`, `cancel` (design §7).
//!
//! A run is continued from its log by the same executor that started it;
//! the workflow file is read again from where `flow:started` says it was
//! (`--workflow` names another copy), and must be the same definition.

use std::path::Path;

use anyhow::{Context, anyhow};
use application::ports::{Clock, StoreError};
use application::{ExecutorError, query};
use domain::{EventKind, RunId};
use serde_json::{Value, json};

use super::inspect::resolve_run;
use super::run::Wired;
use crate::storage::Storage;
use crate::{Failure, wiring};

/// An executor error as the CLI reports it, naming the run once: refusals,
/// a held lock and an unknown run are bad input (exit 2), anything else a
/// runtime failure (exit 1).
pub(crate) fn failure(run_id: RunId, error: ExecutorError) -> Failure {
    // Records that cannot be read are a storage error (exit 2), as for the
    // reading commands: the run did not fail, it could not be continued.
    let input = matches!(
        error,
        ExecutorError::Refused(_)
            | ExecutorError::Store(
                StoreError::Locked(_)
                    | StoreError::NotFound(_)
                    | StoreError::Corrupt(_)
                    | StoreError::BadEvent { .. }
            )
    );
    let error = crate::about_run(run_id, error.into());
    if input {
        Failure::Input(error)
    } else {
        Failure::Run(error)
    }
}

/// `awr resume RUN [--message TEXT] [--workflow FILE]`.
pub async fn resume(
    storage: &Storage,
    run: &str,
    message: Option<String>,
    given: Option<&Path>,
) -> Result<(), Failure> {
    let run_id = resolve_run(storage, run).await?;
    parent_continues(storage, run_id).await?;
    go_on(storage, run_id, given, Some(message)).await
}

/// Refuses a child run (`call_workflow`) whose parent has not ended and
/// still waits on it: the parent's resume continues it, under the parent's
/// node run that waits on it; resumed alone, it would end with no parent to
/// take its outcome. A child the parent left (its attempt retried with a
/// new child) is the user's to resume.
async fn parent_continues(storage: &Storage, run_id: RunId) -> Result<(), Failure> {
    let store = wiring::read_store(storage).await?;
    let about = |e: StoreError| Failure::Input(crate::about_run(run_id, e.into()));
    let first = store.read(run_id, 0, 1).await.map_err(about)?;
    let Some(EventKind::FlowStarted {
        parent_run_id: Some(parent),
        ..
    }) = first.first().map(|e| &e.kind)
    else {
        return Ok(());
    };
    let parent = *parent;
    // A parent that cannot be read, or is gone, leaves the child to itself.
    let Ok(view) = application::inspect::run_view(store.as_ref(), parent).await else {
        return Ok(());
    };
    if let application::inspect::ShownStatus::Recorded(status) = view.status
        && status.is_terminal()
    {
        return Ok(());
    }
    let waits_on_it = (view.snapshot.node_runs.values()).any(|r| r.child == Some(run_id));
    if !waits_on_it {
        return Ok(());
    }
    Err(Failure::Input(anyhow!(
        "run {run_id} is a child run of {parent} (call_workflow), which is {}: \
         resume the parent (`awr resume {parent}`), which continues it",
        view.status.as_str()
    )))
}

/// `awr resume RUN --upgrade FILE [--message TEXT]`: goes on under the
/// edited definition in `file`, when every node in flight is in it.
pub async fn upgrade(
    storage: &Storage,
    run: &str,
    message: Option<String>,
    file: &Path,
) -> Result<(), Failure> {
    let run_id = resolve_run(storage, run).await?;
    parent_continues(storage, run_id).await?;
    let (workflow, wired) = Wired::for_run(storage, run_id, Some(file)).await?;
    let cancel = application::Cancel::new();
    let signals = crate::signals::cancel_on_signal(cancel.clone());
    let by = wiring::local_caller();
    let source = Some(wiring::source_of(file));
    let outcome = wired
        .runtime
        .upgrade(run_id, workflow, source, message, by, cancel)
        .await;
    wired.finish(outcome.map_err(|e| failure(run_id, e))?, &signals)
}

/// Continues `run_id`: resumed with `message` (`Some`), or recovered.
pub(crate) async fn go_on(
    storage: &Storage,
    run_id: RunId,
    given: Option<&Path>,
    message: Option<Option<String>>,
) -> Result<(), Failure> {
    let (workflow, wired) = Wired::for_run(storage, run_id, given).await?;
    let cancel = application::Cancel::new();
    let signals = crate::signals::cancel_on_signal(cancel.clone());
    let runtime = &wired.runtime;
    let outcome = match message {
        Some(message) => {
            let by = wiring::local_caller();
            runtime.resume(run_id, workflow, message, by, cancel).await
        }
        None => runtime.recover(run_id, workflow, cancel).await,
    };
    wired.finish(outcome.map_err(|e| failure(run_id, e))?, &signals)
}

/// `awr recover [--all]`: lists the interrupted runs (a non-terminal,
/// unpaused run no process writes); with `--all`, resumes each in turn.
/// A run whose records cannot be read is named on stderr (exit 2), never
/// left out in silence.
pub async fn recover(storage: &Storage, all: bool) -> Result<(), Failure> {
    let store = wiring::read_store(storage).await?;
    let found = query::interrupted_runs(store.as_ref())
        .await
        .context("cannot list the runs")
        .map_err(Failure::Input)?;
    for run in &found.unreadable {
        if let Err(e) = &run.view {
            let e = anyhow!("{e}");
            crate::report(&Failure::Input(crate::about_run(run.run_id(), e)));
        }
    }
    let unreadable = || match found.unreadable.len() {
        0 => Ok(()),
        n => Err(Failure::Input(anyhow!("{n} run(s) cannot be read"))),
    };
    let (clock, _) = wiring::clock_and_ids();
    let now = clock.now();
    let overdue = query::overdue_runs(store.as_ref(), now)
        .await
        .context("cannot list the runs")
        .map_err(Failure::Input)?;
    if found.runs.is_empty() && overdue.is_empty() {
        crate::note("no interrupted run, and no waiting run past a deadline");
        return unreadable();
    }
    let mut failed = 0usize;
    // Waiting runs whose deadline passed while nothing ran: continued, so
    // each `on_timeout` fires (docs/approvals.md).
    for waiting in &overdue {
        let run_id = waiting.run_id();
        if !all {
            let view = waiting.view.as_ref().ok();
            let name = view.map_or("?", |v| v.snapshot.workflow.name.as_str());
            crate::say(&format!("{run_id}  {name}  waiting, a question to settle"))?;
            continue;
        }
        match go_on(storage, run_id, None, None).await {
            Ok(()) => {}
            Err(Failure::Waiting(_)) => crate::note(&format!("run {run_id} is waiting")),
            Err(Failure::Paused(_)) => crate::note(&format!("run {run_id} is paused")),
            Err(e) => {
                crate::report(&e.map(|e| crate::about_run(run_id, e)));
                failed += 1;
            }
        }
    }
    for interrupted in &found.runs {
        let run_id = interrupted.run.run_id();
        if !all {
            let view = interrupted.run.view.as_ref().ok();
            let name = view.map_or("?", |v| v.snapshot.workflow.name.as_str());
            crate::say(&format!("{run_id}  {name}  interrupted"))?;
            continue;
        }
        if let Some(parent) = interrupted.goes_on_with {
            crate::note(&format!("run {run_id} goes on with its parent {parent}"));
            continue;
        }
        match go_on(storage, run_id, None, None).await {
            Ok(()) => {}
            // A pause its dead writer had begun, finished: what was asked.
            Err(Failure::Paused(_)) => crate::note(&format!("run {run_id} is paused")),
            Err(Failure::Waiting(_)) => crate::note(&format!("run {run_id} is waiting")),
            Err(e) => {
                crate::report(&e.map(|e| crate::about_run(run_id, e)));
                failed += 1;
            }
        }
    }
    match failed {
        0 => unreadable(),
        n => Err(Failure::Run(anyhow!("{n} run(s) did not complete"))),
    }
}

/// A command for `awr send|reply|pause|cancel`.
#[derive(Debug)]
pub enum Command<'a> {
    /// `send` or `reply` (`kind`) to one node run.
    Message {
        kind: &'static str,
        node_run: &'a str,
        message: &'a str,
    },
    Pause,
    Cancel {
        reason: Option<&'a str>,
    },
}

impl Command<'_> {
    /// The raw command, recorded as sent.
    fn raw(&self) -> Value {
        match self {
            Command::Message {
                kind,
                node_run,
                message,
            } => json!({ "type": kind, "nodeRunId": node_run, "message": message }),
            Command::Pause => json!({ "type": "pause" }),
            Command::Cancel { reason: Some(r) } => json!({ "type": "cancel", "reason": r }),
            Command::Cancel { reason: None } => json!({ "type": "cancel" }),
        }
    }
}

/// `awr send|reply|pause|cancel RUN ...`: the command goes to the process
/// writing the run, or is recorded here when none does. Accepted: exit 0;
/// rejected: the recorded reason, exit 2.
pub async fn command(storage: &Storage, run: &str, command: Command<'_>) -> Result<(), Failure> {
    let run_id = resolve_run(storage, run).await?;
    let by = wiring::local_caller();
    let reply = wiring::deliver(storage, run_id, &command.raw(), by.as_ref())
        .await
        .map_err(|e| failure(run_id, e))?;
    match reply.error {
        None => crate::say(&format!(
            "run {run_id}: accepted (command:received at offset {})",
            reply.offset
        )),
        Some(error) => Err(Failure::Input(anyhow!(
            "run {run_id}: rejected (command:received at offset {}): {error}",
            reply.offset
        ))),
    }
}

//! How a stopped run is continued ([`Continue`]), whether a definition
//! may continue it ([`resumable`]), and the refusal of one that ended
//! ([`Executor::ended_or`]).

use domain::{Caller, RunId, RunSnapshot, RunStatus, WorkflowDef};

use super::{Executor, ExecutorError};
use crate::ports::StoreError;

/// How a stopped run is continued.
pub(crate) enum Continue {
    /// Asked for (`awr resume`, by its caller): the agents in flight are
    /// told the message.
    Resume(String, Option<Caller>),
    /// Found interrupted (`awr recover`; a worker taking a dead worker's
    /// run over, named here): see [`Executor::recover`](super::Executor::recover).
    Recover(Option<Caller>),
    /// A fork just made (see [`crate::fork`]): its `flow:forked` stands for
    /// the `flow:resumed`.
    Fork,
    /// Asked for on another definition (`awr resume --upgrade`), read
    /// from the file named (its `source`, if any): as `Resume`, after
    /// `flow:upgraded`.
    Upgrade(String, Option<Caller>, Option<String>),
}

/// Whether `state` is a run that `workflow` may continue: the definition it
/// runs, or with `upgrade`, any definition that has every node in flight.
pub(crate) fn resumable(
    state: &RunSnapshot,
    workflow: &WorkflowDef,
    upgrade: bool,
) -> Result<(), ExecutorError> {
    let run_id = state.run_id;
    if state.last_offset == 0 || state.status == RunStatus::Pending {
        return Err(ExecutorError::Refused(format!(
            "run {run_id} never started; there is nothing to resume"
        )));
    }
    if state.status.is_terminal() {
        return Err(ExecutorError::Refused(format!(
            "run {run_id} has ended ({}); there is nothing to resume",
            state.status.as_str()
        )));
    }
    if upgrade {
        let mut in_flight: Vec<&str> = state
            .node_runs
            .values()
            .map(|run| run.node_id.as_str())
            .collect();
        in_flight.sort_unstable();
        in_flight.dedup();
        let missing: Vec<&str> = in_flight
            .into_iter()
            .filter(|node| !workflow.nodes.iter().any(|n| n.id.as_str() == *node))
            .collect();
        if !missing.is_empty() {
            return Err(ExecutorError::Refused(format!(
                "run {run_id} cannot go on under `{}` ({}): node{} `{}` {} in flight and not in it",
                workflow.name,
                workflow.hash,
                if missing.len() == 1 { "" } else { "s" },
                missing.join("`, `"),
                if missing.len() == 1 { "is" } else { "are" },
            )));
        }
        return Ok(());
    }
    if state.workflow.hash != workflow.hash {
        return Err(ExecutorError::Refused(format!(
            "run {run_id} started with workflow `{}` of hash {}, and this definition's hash is {}: \
             it changed since the run started",
            state.workflow.name, state.workflow.hash, workflow.hash
        )));
    }
    Ok(())
}

impl Executor {
    /// The refusal of a run that has ended (`… has ended (STATUS); then`)
    /// in place of `error`, the store's failure to lock it, when the run
    /// reads as ended: an ended run stays ended, so what it is told does
    /// not depend on whether this process may write its storage.
    pub(super) async fn ended_or(
        &self,
        run_id: RunId,
        error: StoreError,
        then: &str,
    ) -> ExecutorError {
        if matches!(error, StoreError::Locked(_) | StoreError::NotFound(_)) {
            return error.into();
        }
        match crate::inspect::current_snapshot(self.ports.store.as_ref(), run_id).await {
            Ok(state) if state.status.is_terminal() => ExecutorError::Refused(format!(
                "run {run_id} has ended ({}); {then}",
                state.status.as_str()
            )),
            _ => error.into(),
        }
    }
}

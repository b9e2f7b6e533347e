//! `awr approve`, `awr reject` and `awr approvals` (docs/approvals.md).
//!
//! An answer is a command to the run, judged and recorded as any other: to
//! the process writing it, or here when none does. A run that was
//! `waiting` for it then goes on in this process, through the resume path.

use anyhow::anyhow;
use application::query;
use domain::RunStatus;
use serde_json::{Value, json};

use super::control::{failure, go_on};
use super::inspect::resolve_run;
use crate::storage::Storage;
use crate::{Failure, wiring};

/// `awr approve RUN --node-run ID [--data JSON]` (`Ok(data)`) or `awr
/// reject RUN --node-run ID [--reason TEXT]` (`Err(reason)`). Refused:
/// the recorded reason, exit 2. Accepted by a run that was waiting: the
/// run goes on here, and the exit code is its own (as `awr resume`'s).
pub async fn answer(
    storage: &Storage,
    run: &str,
    node_run: &str,
    answer: Result<Option<&str>, Option<&str>>,
) -> Result<(), Failure> {
    let run_id = resolve_run(storage, run).await?;
    let raw = match answer {
        Ok(data) => {
            let data: Value = match data {
                Some(text) => serde_json::from_str(text)
                    .map_err(|e| Failure::Input(anyhow!("--data is not JSON: {e}")))?,
                None => Value::Null,
            };
            let mut raw = json!({"type": "approve", "nodeRunId": node_run});
            if !data.is_null() {
                raw["data"] = data;
            }
            raw
        }
        Err(reason) => {
            let mut raw = json!({"type": "reject", "nodeRunId": node_run});
            if let Some(reason) = reason {
                raw["reason"] = json!(reason);
            }
            raw
        }
    };
    let by = wiring::local_caller();
    let reply = wiring::deliver(storage, run_id, &raw, by.as_ref())
        .await
        .map_err(|e| failure(run_id, e))?;
    if let Some(error) = reply.error {
        return Err(Failure::Input(anyhow!(
            "run {run_id}: rejected (command:received at offset {}): {error}",
            reply.offset
        )));
    }
    crate::note(&format!(
        "run {run_id}: accepted (command:received at offset {})",
        reply.offset
    ));
    let store = wiring::read_store(storage).await?;
    let state = application::inspect::current_snapshot(store.as_ref(), run_id)
        .await
        .map_err(|e| Failure::Input(crate::about_run(run_id, e.into())))?;
    if state.status != RunStatus::Waiting {
        // Its writer resolves the answer; a paused run, once resumed.
        return Ok(());
    }
    // Nothing runs it: it goes on here, unless another answer's process
    // took it first (this answer is on record, and that writer settles it).
    match go_on(storage, run_id, None, Some(None)).await {
        Ok(()) => Ok(()),
        Err(failure @ Failure::Input(_)) => {
            match application::inspect::waits_unwritten(store.as_ref(), run_id).await {
                Ok(false) => {
                    crate::note(&format!("run {run_id} goes on in another process"));
                    Ok(())
                }
                _ => Err(failure),
            }
        }
        Err(other) => Err(other),
    }
}

/// `awr approvals [--run RUN] [--json]`: the questions waiting for an
/// answer, a line each: run, node run, node, deadline and the prompt's
/// first line; with `--json`, each whole, as an object per line.
pub async fn list(storage: &Storage, run: Option<&str>, json: bool) -> Result<(), Failure> {
    let store = wiring::read_store(storage).await?;
    let open = match run {
        Some(run) => {
            let run_id = resolve_run(storage, run).await?;
            let state = application::inspect::current_snapshot(store.as_ref(), run_id)
                .await
                .map_err(|e| Failure::Input(crate::about_run(run_id, e.into())))?;
            query::questions_of(&state)
        }
        None => {
            let (open, unreadable) = query::open_questions(store.as_ref())
                .await
                .map_err(|e| Failure::Input(anyhow!("cannot list the runs: {e}")))?;
            for listed in &unreadable {
                if let Err(e) = &listed.view {
                    let e = anyhow!("{e}");
                    crate::report(&Failure::Input(crate::about_run(listed.run_id(), e)));
                }
            }
            open
        }
    };
    if open.is_empty() && !json {
        crate::note("no question waits for an answer");
    }
    for question in &open {
        let line = match json {
            true => serde_json::to_string(question).map_err(|e| Failure::Run(e.into()))?,
            false => {
                let deadline = question
                    .deadline
                    .map_or_else(|| "-".to_owned(), |d| d.to_string());
                let prompt = question.prompt.lines().next().unwrap_or_default();
                format!(
                    "{}  {}  {}  {}  {deadline}  {prompt}",
                    question.run_id,
                    question.node_run_id,
                    question.node_id,
                    question.status.as_str(),
                )
            }
        };
        crate::say(&line)?;
    }
    Ok(())
}

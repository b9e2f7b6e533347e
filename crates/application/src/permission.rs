//! A CLI agent's own requests to use a tool, as awr approvals
//! (docs/approvals.md): Claude Code asks its permission prompt tool, which
//! awr's MCP server serves by sending the run an `ask` command for the
//! agent's node run. The run's writer judges it by the agent's grants:
//! refused (not granted), accepted with no question (its grant does not
//! ask for these arguments), or accepted with its node run's
//! `approval:requested` right after it. [`answer`] reads which from the
//! record, and waits there for the person's answer.

use std::sync::Arc;

use domain::{EventKind, NodeRunId, RunId};
use futures::StreamExt;

use crate::inspect::{Followed, follow_run};
use crate::ports::{Clock, RunStore, StoreError};
use crate::run::conversation::rejected;

/// What the agent is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// It may make the call.
    Allow,
    /// It may not, and why (a person's rejection, with their reason).
    Deny(String),
}

/// The verdict on the `ask` of node run `node_run` of run `run_id` that
/// was accepted at offset `accepted_at`: allowed at once when no question
/// follows it, else the answer to that question, waited for on the record.
/// A run that stops first denies it.
pub async fn answer(
    store: Arc<dyn RunStore>,
    clock: Arc<dyn Clock>,
    run_id: RunId,
    node_run: NodeRunId,
    accepted_at: u64,
) -> Result<Verdict, StoreError> {
    // The step that accepted it is stored before its sender hears of it:
    // its question, if it put one, is the very next event.
    let next = store.read(run_id, accepted_at, 1).await?;
    let asked = next.first().is_some_and(|e| {
        e.node_run_id == Some(node_run)
            && matches!(e.kind, EventKind::ApprovalRequested { tool: Some(_), .. })
    });
    if !asked {
        return Ok(Verdict::Allow);
    }
    let mut events = follow_run(store, clock, run_id, accepted_at + 1).await?;
    while let Some(item) = events.next().await {
        let event = match item {
            Ok(Followed::Event(event)) => event,
            Ok(Followed::End(_)) => break,
            Err(StoreError::BadEvent { .. }) => continue,
            Err(e) => return Err(e),
        };
        match &event.kind {
            EventKind::ApprovalResolved {
                approved,
                reason,
                by,
                how,
                ..
            } if event.node_run_id == Some(node_run) => {
                return Ok(match (approved, how.as_str()) {
                    (true, _) => Verdict::Allow,
                    (false, "answered") => Verdict::Deny(rejected(by.as_ref(), reason.as_deref())),
                    // Nobody answered: the run stopped first.
                    (false, _) => Verdict::Deny(format!(
                        "this tool call was not run: {}",
                        reason.as_deref().unwrap_or("nobody answered")
                    )),
                });
            }
            _ => {}
        }
    }
    Ok(Verdict::Deny(
        "the run stopped before a person answered".to_owned(),
    ))
}

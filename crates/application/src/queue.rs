//! Submitting runs to a queue (`awr submit`, `POST /workflows` on a server
//! with `--queue`), and finding the definition a run continues from, as a
//! worker on any machine does.

use std::sync::Arc;

use domain::definition::Definition;
use domain::{Caller, EventKind, RunId, WorkflowDef};
use serde_json::Value;

use crate::ports::{EventFilter, IdGen, RunQueue, RunStore, StoreError, Submission};

/// What to submit: a workflow loaded from `source`, its input, who asks
/// and how urgently.
#[derive(Debug, Clone)]
pub struct SubmitRequest {
    /// The workflow, loaded as for a run.
    pub workflow: Arc<WorkflowDef>,
    /// The file it was read from: its definition (this file and every file
    /// it calls) is stored with the run under this name.
    pub source: String,
    /// The run's input.
    pub input: Value,
    /// Who submits it.
    pub by: Option<Caller>,
    /// Claimed before runs of a lower priority.
    pub priority: i32,
}

/// Queues a new run of `request` and returns its id at once: its
/// definition is stored first, so the submission never names one the
/// store lacks, and any worker continues from the store alone.
pub async fn submit(
    queue: &dyn RunQueue,
    ids: &dyn IdGen,
    request: SubmitRequest,
) -> Result<RunId, StoreError> {
    let definition = Definition::of(&request.workflow, &request.source);
    let hash = queue.save_definition(&definition).await?;
    // As the executor makes them: version 4 ids only.
    let run_id = loop {
        if let Ok(id) = RunId::new(ids.uuid()) {
            break id;
        }
    };
    let submission = Submission {
        definition: hash,
        workflow: request.workflow.name.clone(),
        input: request.input,
        source: Some(request.source),
        submitted_by: request.by,
        priority: request.priority,
    };
    queue.submit(run_id, &submission).await?;
    Ok(run_id)
}

/// The hash of the definition `run_id` continues from: the one its last
/// `flow:upgraded` names, else its `flow:started`'s. `None` when it keeps
/// none (a run started before definitions were kept, or from no file).
pub async fn kept_definition(
    store: &dyn RunStore,
    run_id: RunId,
) -> Result<Option<String>, StoreError> {
    if let Some(hash) = upgraded_to(store, run_id).await? {
        return Ok(Some(hash));
    }
    let first = store.read(run_id, 0, 1).await?;
    Ok(match first.into_iter().next().map(|e| e.kind) {
        Some(EventKind::FlowStarted { definition, .. }) => definition,
        _ => None,
    })
}

/// The definition the run's last `flow:upgraded` names, if it was upgraded.
pub async fn upgraded_to(
    store: &dyn RunStore,
    run_id: RunId,
) -> Result<Option<String>, StoreError> {
    let filter = EventFilter {
        types: vec!["flow:upgraded".to_owned()],
        ..EventFilter::default()
    };
    let mut last = None;
    let mut after = 0;
    loop {
        let batch = store.read_matching(run_id, after, &filter, 256).await?;
        let Some(end) = batch.last() else {
            return Ok(last);
        };
        after = end.offset.get();
        for event in &batch {
            if let EventKind::FlowUpgraded { definition, .. } = &event.kind {
                last = definition.clone();
            }
        }
    }
}

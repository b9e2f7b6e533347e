//! Migration: copying every run from one store to another, losslessly.
//!
//! - Each run is copied whole through [`RunStore::import_run`]: the target
//!   shows it only once complete, so a crash midway leaves no partial run.
//!   Events and the snapshot are stored by the target exactly as its own
//!   writer would store them, so their JSON is the source's byte for byte.
//! - The source run is locked for the copy: a run being written is skipped
//!   (and reported), and none can start writing it meanwhile.
//! - A run the target has already, to the same offset, is skipped, so a
//!   migration that stopped is finished by running it again; if its
//!   transcript did not make it, the transcript is copied then. One whose
//!   log differs in length there (a copy gone stale) is refused, not left
//!   looking done.
//! - A run whose snapshot is ahead of its log (events missing) is refused.
//! - The run's files ([`RunFiles`]: transcript and the blobs it names) are
//!   copied after the run, the transcript last and whole.

use std::sync::Arc;

use domain::{EventKind, RunId};
use futures::StreamExt;

use crate::ports::{EventBatches, RunFiles, RunStore, StoreError};

/// Events read per batch from the source.
const BATCH: usize = 1024;

/// What happened to one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Migrated {
    /// Copied whole, and its transcript if it had one.
    Copied {
        /// Events copied.
        events: u64,
        /// Whether a transcript was copied.
        transcript: bool,
    },
    /// The target has it already (its missing transcript was copied, if so).
    Present {
        /// Whether its transcript was copied now.
        transcript: bool,
    },
    /// Not copied: it is being written, or could not be read or written.
    Refused(String),
}

/// Copies every run of `from` into `to`, calling `on_run` after each, in
/// the order of run ids. Only a source that cannot list its runs fails the
/// whole migration; anything else is reported per run.
pub async fn migrate(
    from: Arc<dyn RunStore>,
    from_files: &dyn RunFiles,
    to: &dyn RunStore,
    to_files: &dyn RunFiles,
    mut on_run: impl FnMut(RunId, &Migrated),
) -> Result<Vec<(RunId, Migrated)>, StoreError> {
    let mut ids = from.list_runs().await?;
    ids.sort();
    let mut done = Vec::with_capacity(ids.len());
    for run_id in ids {
        let outcome = match copy_run(&from, from_files, to, to_files, run_id).await {
            Ok(outcome) => outcome,
            Err(e) => Migrated::Refused(e.to_string()),
        };
        on_run(run_id, &outcome);
        done.push((run_id, outcome));
    }
    Ok(done)
}

async fn copy_run(
    from: &Arc<dyn RunStore>,
    from_files: &dyn RunFiles,
    to: &dyn RunStore,
    to_files: &dyn RunFiles,
    run_id: RunId,
) -> Result<Migrated, StoreError> {
    match to.last_offset(run_id).await {
        Ok(there) => {
            // The same run, unless one of the two went on after the copy
            // (a resume in the source): a stale copy is not passed as done.
            let here = from.last_offset(run_id).await?;
            if here != there {
                return Ok(Migrated::Refused(format!(
                    "run {run_id} is in the target up to offset {there}, and its log here goes to {here}: the two differ; not replaced (remove it from the target to copy it again)"
                )));
            }
            copy_definition(from.as_ref(), to, run_id).await?;
            let transcript = copy_files(from_files, to_files, run_id, true).await?;
            return Ok(Migrated::Present { transcript });
        }
        Err(StoreError::NotFound(_)) => {}
        Err(e) => return Err(e),
    }
    // A queued run is a submission, not a log: only its queue's database
    // holds it, and locking it would keep it from the workers.
    if from.queued(run_id).await?.is_some() {
        return Ok(Migrated::Refused(format!(
            "run {run_id} is queued and no worker has started it: a queue stays in its database; \
             not copied (copy it once it has run, or submit it again there)"
        )));
    }
    let lock = match from.lock(run_id).await {
        Ok(lock) => lock,
        Err(StoreError::Locked(_)) => {
            return Ok(Migrated::Refused(format!(
                "run {run_id} is being written; not copied (run migrate again once it stops)"
            )));
        }
        Err(e) => return Err(e),
    };
    let events = from.last_offset(run_id).await?;
    let snapshot = from.load_snapshot(run_id).await?;
    // A snapshot ahead of the log: events it reflects are gone (a log cut
    // short). Copied, the run would be as unreadable there as here.
    if let Some(saved) = &snapshot
        && saved.last_offset > events
    {
        return Ok(Migrated::Refused(format!(
            "run {run_id}: its snapshot reflects events up to offset {}, and its log ends at offset {events}: events are missing; not copied",
            saved.last_offset
        )));
    }
    // The definition first: once the run is there, it can be resumed there.
    copy_definition(from.as_ref(), to, run_id).await?;
    to.import_run(run_id, batches(Arc::clone(from), run_id), snapshot)
        .await?;
    drop(lock);
    let transcript = copy_files(from_files, to_files, run_id, false).await?;
    Ok(Migrated::Copied { events, transcript })
}

/// Copies the workflow definition the run's `flow:started` names, if any
/// (saving one the target has changes nothing).
async fn copy_definition(
    from: &dyn RunStore,
    to: &dyn RunStore,
    run_id: RunId,
) -> Result<(), StoreError> {
    let first = from.read(run_id, 0, 1).await?;
    let Some(EventKind::FlowStarted {
        definition: Some(hash),
        ..
    }) = first.first().map(|e| &e.kind)
    else {
        return Ok(());
    };
    match from.load_definition(hash).await? {
        Some(definition) => {
            to.save_definition(&definition).await?;
        }
        None => {
            tracing::warn!(run = %run_id, definition = %hash, "the run's definition is not in the source; copied without it");
        }
    }
    Ok(())
}

/// Copies the run's files unless `only_missing` and the target has them.
async fn copy_files(
    from: &dyn RunFiles,
    to: &dyn RunFiles,
    run_id: RunId,
    only_missing: bool,
) -> Result<bool, StoreError> {
    if only_missing && to.has_transcript(run_id).await? {
        return Ok(false);
    }
    match from.export(run_id).await? {
        Some(files) => {
            to.import(run_id, files).await?;
            Ok(true)
        }
        None => Ok(false),
    }
}

/// The whole log of `run_id` in `from`, in batches.
fn batches(from: Arc<dyn RunStore>, run_id: RunId) -> EventBatches {
    futures::stream::unfold(Some(0u64), move |after| {
        let from = Arc::clone(&from);
        async move {
            let after = after?;
            match from.read(run_id, after, BATCH).await {
                Ok(batch) if batch.is_empty() => None,
                Ok(batch) => {
                    let last = batch.last().map_or(after, |e| e.offset.get());
                    Some((Ok(batch), Some(last)))
                }
                Err(e) => Some((Err(e), None)),
            }
        }
    })
    .boxed()
}

//! What [`RunStore::query_runs`](super::RunStore::query_runs) and
//! [`RunStore::read_matching`](super::RunStore::read_matching) are asked and
//! answer: runs by recorded status, workflow and start time, newest first;
//! one run's events by kind, node and time.
//!
//! The scans here are the default of every store: correct on any store,
//! at the cost of reading each run (or each event of the run). A store with
//! indexes (SQLite) answers the same questions from them.

use std::cmp::Reverse;

use domain::{EventKind, NodeId, RunId, RunStatus, RuntimeEvent, Timestamp};

use super::{RunStore, StoreError};

/// Events read per batch by the scans.
const SCAN_BATCH: usize = 1024;

/// Which runs [`RunStore::query_runs`](super::RunStore::query_runs) returns:
/// every condition given must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunQuery {
    /// Recorded statuses wanted; empty: any. (`interrupted` is not recorded:
    /// it is a `running` run nothing writes, told by the run's lock.)
    pub statuses: Vec<RunStatus>,
    /// The workflow's name, exactly.
    pub workflow: Option<String>,
    /// Only runs started at or after this instant (a run not started yet
    /// has no start, and is left out).
    pub started_since: Option<Timestamp>,
    /// Only runs after this place in the order (the last run of the
    /// previous page): keyset paging, stable while runs are added.
    pub after: Option<RunCursor>,
    /// At most this many runs.
    pub limit: Option<usize>,
}

/// A run's place in the order of a query: newest first, that is by start
/// descending (runs not started last), then by id descending.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RunCursor {
    /// When the run started (`flow:started`), if it did.
    pub started_at: Option<Timestamp>,
    /// The run.
    pub run_id: RunId,
}

/// What a store knows of a run without folding its log: enough to select
/// it and list it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSummary {
    /// The run.
    pub run_id: RunId,
    /// The status its log records; `None` when the store cannot read the
    /// run's records (the reader reports the corruption).
    pub status: Option<RunStatus>,
    /// The workflow's name (`flow:started`).
    pub workflow: Option<String>,
    /// When it started.
    pub started_at: Option<Timestamp>,
    /// Its last event's time as far as the store tracks it (at least the
    /// last change of status).
    pub updated_at: Option<Timestamp>,
    /// The run that called this one, for a child run (`call_workflow`).
    pub parent: Option<RunId>,
}

impl RunSummary {
    /// A run with no event yet: `pending`.
    pub fn new(run_id: RunId) -> Self {
        Self {
            run_id,
            status: Some(RunStatus::Pending),
            workflow: None,
            started_at: None,
            updated_at: None,
            parent: None,
        }
    }

    /// A run the store cannot read.
    pub fn unreadable(run_id: RunId) -> Self {
        Self {
            status: None,
            ..Self::new(run_id)
        }
    }

    /// The summary's place in the order of a query.
    pub fn cursor(&self) -> RunCursor {
        RunCursor {
            started_at: self.started_at,
            run_id: self.run_id,
        }
    }

    /// Applies one event, as `RunSnapshot::apply` changes the same fields
    /// (the conformance suite checks that they agree). Returns whether the
    /// event changes the run's status, workflow or start: what an index of
    /// runs must record.
    pub fn apply(&mut self, event: &RuntimeEvent) -> bool {
        self.updated_at = Some(event.timestamp);
        let status = match &event.kind {
            EventKind::FlowStarted {
                workflow,
                parent_run_id,
                ..
            } => {
                self.workflow = Some(workflow.name.clone());
                self.started_at = Some(event.timestamp);
                self.parent = *parent_run_id;
                RunStatus::Running
            }
            EventKind::FlowPaused { waiting: true, .. } => RunStatus::Waiting,
            EventKind::FlowPaused { .. } => RunStatus::Paused,
            EventKind::FlowResumed { .. } => RunStatus::Running,
            EventKind::FlowCompleted { .. } => RunStatus::Completed,
            EventKind::FlowFailed { .. } => RunStatus::Failed,
            EventKind::FlowCancelled { .. } => RunStatus::Cancelled,
            _ => return false,
        };
        self.status = Some(status);
        true
    }
}

impl RunQuery {
    /// Whether `run` meets every condition but the paging ones.
    pub fn matches(&self, run: &RunSummary) -> bool {
        let status =
            self.statuses.is_empty() || run.status.is_some_and(|s| self.statuses.contains(&s));
        let workflow = self
            .workflow
            .as_ref()
            .is_none_or(|w| run.workflow.as_ref() == Some(w));
        let since = self
            .started_since
            .is_none_or(|t| run.started_at.is_some_and(|s| s >= t));
        status && workflow && since
    }

    /// Whether the query selects by anything (a run the store cannot read
    /// is only returned by a query that selects nothing).
    pub fn selects(&self) -> bool {
        !self.statuses.is_empty() || self.workflow.is_some() || self.started_since.is_some()
    }
}

/// Which events [`RunStore::read_matching`](super::RunStore::read_matching)
/// returns: every condition given must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventFilter {
    /// Event types (`node:failed`, ...); empty: any.
    pub types: Vec<String>,
    /// The node the event is about.
    pub node: Option<NodeId>,
    /// Only events at or after this instant.
    pub since: Option<Timestamp>,
}

impl EventFilter {
    /// Whether the filter lets every event through.
    pub fn is_empty(&self) -> bool {
        self.types.is_empty() && self.node.is_none() && self.since.is_none()
    }

    /// Whether `event` passes.
    pub fn matches(&self, event: &RuntimeEvent) -> bool {
        (self.types.is_empty() || self.types.iter().any(|t| t == event.kind.type_name()))
            && self
                .node
                .as_ref()
                .is_none_or(|n| event.node_id.as_ref() == Some(n))
            && self.since.is_none_or(|t| event.timestamp >= t)
    }
}

/// [`RunStore::query_runs`](super::RunStore::query_runs) by reading every
/// run: its saved snapshot brought up to date with the events after it,
/// and its first event (the parent). A run that cannot be read is
/// [`RunSummary::unreadable`].
pub async fn scan_runs<S: RunStore + ?Sized>(
    store: &S,
    query: &RunQuery,
) -> Result<Vec<RunSummary>, StoreError> {
    let mut found = Vec::new();
    for run_id in store.list_runs().await? {
        let summary = match summarize(store, run_id).await {
            Ok(summary) => summary,
            Err(StoreError::NotFound(_)) => continue,
            Err(e) => {
                tracing::debug!(run = %run_id, error = %e, "run unreadable");
                RunSummary::unreadable(run_id)
            }
        };
        let wanted = if summary.status.is_some() {
            query.matches(&summary)
        } else {
            !query.selects()
        };
        if wanted && query.after.is_none_or(|after| summary.cursor() < after) {
            found.push(summary);
        }
    }
    found.sort_by_key(|s| Reverse(s.cursor()));
    if let Some(limit) = query.limit {
        found.truncate(limit);
    }
    Ok(found)
}

/// One run's summary, read from its records.
async fn summarize<S: RunStore + ?Sized>(
    store: &S,
    run_id: RunId,
) -> Result<RunSummary, StoreError> {
    let mut summary = RunSummary::new(run_id);
    let mut after = 0;
    // An unreadable snapshot is rebuilt from the log, as readers do.
    let saved = match store.load_snapshot(run_id).await {
        Ok(saved) => saved,
        Err(StoreError::Corrupt(_)) => None,
        Err(e) => return Err(e),
    };
    if let Some(saved) = saved
        && saved.run_id == run_id
    {
        summary.status = Some(saved.status);
        summary.workflow = (saved.started_at.is_some()).then(|| saved.workflow.name.clone());
        summary.started_at = saved.started_at;
        summary.updated_at = saved.updated_at;
        after = saved.last_offset;
    }
    if after > 0 {
        // The parent is only in `flow:started`.
        if let Some(EventKind::FlowStarted { parent_run_id, .. }) =
            store.read(run_id, 0, 1).await?.first().map(|e| &e.kind)
        {
            summary.parent = *parent_run_id;
        }
    }
    loop {
        let events = store.read(run_id, after, SCAN_BATCH).await?;
        let Some(last) = events.last() else {
            return Ok(summary);
        };
        after = last.offset.get();
        for event in &events {
            summary.apply(event);
        }
    }
}

/// [`RunStore::read_matching`](super::RunStore::read_matching) by reading
/// the run's events after `after` in batches and keeping those `filter`
/// lets through. Matches before a bad line are returned first; a read that
/// would start with one is [`StoreError::BadEvent`].
pub async fn scan_events<S: RunStore + ?Sized>(
    store: &S,
    run_id: RunId,
    mut after: u64,
    filter: &EventFilter,
    limit: usize,
) -> Result<Vec<RuntimeEvent>, StoreError> {
    let mut found = Vec::new();
    loop {
        let batch = match store.read(run_id, after, SCAN_BATCH).await {
            Ok(batch) => batch,
            // The good events before the bad line first; the bad line once
            // it is next, unless matches are waiting to be returned.
            Err(StoreError::BadEvent { offset, .. }) if offset > after + 1 => {
                let before = usize::try_from(offset - after - 1).unwrap_or(SCAN_BATCH);
                store.read(run_id, after, before.min(SCAN_BATCH)).await?
            }
            Err(StoreError::BadEvent { .. }) if !found.is_empty() => return Ok(found),
            Err(e) => return Err(e),
        };
        let Some(last) = batch.last() else {
            return Ok(found);
        };
        after = last.offset.get();
        found.extend(batch.into_iter().filter(|e| filter.matches(e)));
        if found.len() >= limit {
            found.truncate(limit);
            return Ok(found);
        }
    }
}

//! Finding runs by the status users see (`interrupted` included), workflow
//! and start time, newest first: what `awr runs` and `GET /workflows` list.
//!
//! The store selects by what it records ([`RunStore::query_runs`], served
//! by an index where the store has one); each run selected is then read as
//! `awr show` reads it ([`run_view`]), which checks its log and tells
//! `running` from `interrupted` by its lock. So a page costs the index
//! lookup plus one read per run listed, never a read of every run.

use domain::{RunId, RunStatus, Timestamp};

use crate::inspect::{RunView, ShownStatus, run_view};
use crate::ports::{RunCursor, RunQuery, RunStore, RunSummary, StoreError};

/// Which runs to list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunFilter {
    /// Statuses as shown; empty: any.
    pub statuses: Vec<ShownStatus>,
    /// The workflow's name.
    pub workflow: Option<String>,
    /// Only runs started at or after this instant.
    pub started_since: Option<Timestamp>,
    /// Only runs after this one in the order (the last of the previous page).
    pub after: Option<RunCursor>,
    /// At most this many runs.
    pub limit: Option<usize>,
}

/// A run listed: what the store selected it by, and its state as read
/// from its log (or why that failed: the run is then listed `corrupt`).
#[derive(Debug)]
pub struct Listed {
    /// What the store's index holds of the run.
    pub summary: RunSummary,
    /// Its state and the status shown.
    pub view: Result<RunView, StoreError>,
}

impl Listed {
    /// The run.
    pub fn run_id(&self) -> RunId {
        self.summary.run_id
    }

    /// The status shown, `corrupt` when the run cannot be read.
    pub fn status(&self) -> &'static str {
        match &self.view {
            Ok(view) => view.status.as_str(),
            Err(_) => "corrupt",
        }
    }
}

/// The name a status is shown by, parsed: the recorded statuses and
/// `interrupted`.
pub fn parse_status(name: &str) -> Option<ShownStatus> {
    let recorded = RunStatus::ALL;
    if name == "interrupted" {
        return Some(ShownStatus::Interrupted);
    }
    recorded
        .into_iter()
        .find(|s| s.as_str() == name)
        .map(ShownStatus::Recorded)
}

/// Every status name [`parse_status`] knows, for messages.
pub const STATUS_NAMES: &[&str] = &[
    "pending",
    "running",
    "paused",
    "completed",
    "failed",
    "cancelled",
    "interrupted",
];

/// The runs `filter` selects, newest first. `running` and `interrupted`
/// are both recorded `running`: the store selects those and the lock
/// tells them apart, so the store is asked again for more until `limit`
/// runs are found or none is left.
pub async fn find_runs(
    store: &dyn RunStore,
    filter: &RunFilter,
) -> Result<Vec<Listed>, StoreError> {
    if filter.limit == Some(0) {
        return Ok(Vec::new());
    }
    let mut statuses: Vec<RunStatus> = filter
        .statuses
        .iter()
        .map(|s| match s {
            ShownStatus::Recorded(status) => *status,
            ShownStatus::Interrupted => RunStatus::Running,
        })
        .collect();
    statuses.sort_by_key(|s| s.as_str());
    statuses.dedup();
    let mut query = RunQuery {
        statuses,
        workflow: filter.workflow.clone(),
        started_since: filter.started_since,
        after: filter.after,
        limit: filter.limit,
    };
    let mut listed = Vec::new();
    loop {
        let batch = store.query_runs(&query).await?;
        let exhausted = query.limit.is_none_or(|limit| batch.len() < limit);
        query.after = batch.last().map(RunSummary::cursor).or(query.after);
        for summary in batch {
            let view = match run_view(store, summary.run_id).await {
                // Gone since it was selected (pruned): not listed.
                Err(StoreError::NotFound(_)) => continue,
                view => view,
            };
            let shown = match &view {
                Ok(view) => filter.statuses.is_empty() || filter.statuses.contains(&view.status),
                // Selected by what the store records: listed, as corrupt.
                Err(_) => true,
            };
            if shown {
                listed.push(Listed { summary, view });
            }
            if filter.limit.is_some_and(|limit| listed.len() >= limit) {
                return Ok(listed);
            }
        }
        if exhausted {
            return Ok(listed);
        }
    }
}

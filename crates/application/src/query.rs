//! Finding runs by the status users see (`interrupted` included), workflow
//! and start time, newest first: what `awr runs` and `GET /workflows` list.
//!
//! The store selects by what it records ([`RunStore::query_runs`], served
//! by an index where the store has one); each run selected is then read as
//! `awr show` reads it ([`run_view`]), which checks its log and tells
//! `running` from `interrupted` by its lock. So a page costs the index
//! lookup plus one read per run listed, never a read of every run.

use domain::{RunId, RunSnapshot, RunStatus, Timestamp};

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

/// Why a run id or prefix names no single run.
#[derive(Debug, thiserror::Error)]
pub enum Unresolved {
    /// No run's id starts with it.
    #[error("no run matches `{0}`")]
    NoMatch(String),
    /// Several runs' ids start with it.
    #[error("`{0}` matches {1} runs; give more of the id")]
    Ambiguous(String, usize),
    /// The runs cannot be listed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The run a user named by its id or a unique prefix of it: the command
/// line and the HTTP server both name runs this way. A whole id is taken
/// as it is, whether or not the store holds the run.
pub async fn find_run(store: &dyn RunStore, wanted: &str) -> Result<RunId, Unresolved> {
    if let Ok(id) = wanted.parse::<RunId>() {
        return Ok(id);
    }
    let runs = store.list_runs().await?;
    let matches: Vec<RunId> = runs
        .into_iter()
        .filter(|id| !wanted.is_empty() && id.to_string().starts_with(wanted))
        .collect();
    match matches.as_slice() {
        [one] => Ok(*one),
        [] => Err(Unresolved::NoMatch(wanted.to_owned())),
        _ => Err(Unresolved::Ambiguous(wanted.to_owned(), matches.len())),
    }
}

/// The name a status is shown by, parsed: the recorded statuses,
/// `interrupted` and `queued`.
pub fn parse_status(name: &str) -> Option<ShownStatus> {
    let recorded = RunStatus::ALL;
    match name {
        "interrupted" => return Some(ShownStatus::Interrupted),
        "queued" => return Some(ShownStatus::Queued),
        _ => {}
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
    "waiting",
    "completed",
    "failed",
    "cancelled",
    "interrupted",
    "queued",
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
            // Recorded as a run with no event yet.
            ShownStatus::Queued => RunStatus::Pending,
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

/// How many runs are in each status as shown: what `GET /workflows`
/// counts over every run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatusCounts {
    /// Created, with no event yet.
    pub pending: u64,
    /// Submitted to a queue, not started by a worker yet.
    pub queued: u64,
    /// Being written by a process.
    pub running: u64,
    /// Recorded `running`, with no process writing them.
    pub interrupted: u64,
    /// Stopped at a safe point; resumable.
    pub paused: u64,
    /// Stopped until a person answers.
    pub waiting: u64,
    /// Finished successfully.
    pub completed: u64,
    /// Finished with an error.
    pub failed: u64,
    /// Cancelled.
    pub cancelled: u64,
    /// Whose records cannot be read.
    pub corrupt: u64,
}

impl StatusCounts {
    fn add(&mut self, status: Option<ShownStatus>) {
        let count = match status {
            None => &mut self.corrupt,
            Some(ShownStatus::Interrupted) => &mut self.interrupted,
            Some(ShownStatus::Queued) => &mut self.queued,
            Some(ShownStatus::Recorded(status)) => match status {
                RunStatus::Pending => &mut self.pending,
                RunStatus::Running => &mut self.running,
                RunStatus::Paused => &mut self.paused,
                RunStatus::Waiting => &mut self.waiting,
                RunStatus::Completed => &mut self.completed,
                RunStatus::Failed => &mut self.failed,
                RunStatus::Cancelled => &mut self.cancelled,
            },
        };
        *count += 1;
    }
}

/// The statuses shown of `runs`, counted from what the store records
/// ([`RunStore::query_runs`]), without reading their logs: only the runs
/// recorded `running` are probed for a writer, and one whose probe fails
/// is counted `running` (nothing says its writer is gone); those recorded
/// `pending` are asked for a submission (`queued`).
pub async fn count_runs(store: &dyn RunStore, runs: &[RunSummary]) -> StatusCounts {
    let mut counts = StatusCounts::default();
    for run in runs {
        let shown = match run.status {
            Some(RunStatus::Running) if matches!(store.has_writer(run.run_id).await, Ok(false)) => {
                Some(ShownStatus::Interrupted)
            }
            Some(RunStatus::Pending) if matches!(store.queued(run.run_id).await, Ok(Some(_))) => {
                Some(ShownStatus::Queued)
            }
            status => status.map(ShownStatus::Recorded),
        };
        counts.add(shown);
    }
    counts
}

/// An interrupted run, as `awr recover` finds it.
#[derive(Debug)]
pub struct InterruptedRun {
    /// The run, read.
    pub run: Listed,
    /// Its parent (`call_workflow`), when the parent is interrupted too:
    /// the parent's resume waits for this run, which must not go on by
    /// itself.
    pub goes_on_with: Option<RunId>,
}

/// What [`interrupted_runs`] found.
#[derive(Debug, Default)]
pub struct Interrupted {
    /// The interrupted runs, by run id.
    pub runs: Vec<InterruptedRun>,
    /// The runs whose records cannot be read, with why: never left out in
    /// silence, since one of them may be interrupted too.
    pub unreadable: Vec<Listed>,
}

/// Every run recorded `running` that no process writes, each read as
/// `awr show` reads it, and every run that cannot be read.
pub async fn interrupted_runs(store: &dyn RunStore) -> Result<Interrupted, StoreError> {
    let mut found = Interrupted::default();
    let mut runs = Vec::new();
    for listed in find_runs(store, &RunFilter::default()).await? {
        match &listed.view {
            Err(_) => found.unreadable.push(listed),
            Ok(view) if view.status == ShownStatus::Interrupted => runs.push(listed),
            Ok(_) => {}
        }
    }
    let ids: std::collections::HashSet<RunId> = runs.iter().map(Listed::run_id).collect();
    found.runs = runs
        .into_iter()
        .map(|run| InterruptedRun {
            goes_on_with: run.summary.parent.filter(|p| ids.contains(p)),
            run,
        })
        .collect();
    found.runs.sort_by_key(|r| r.run.run_id());
    found.unreadable.sort_by_key(Listed::run_id);
    Ok(found)
}

/// A question an `approval` node run (or an agent's tool call) asked and
/// nobody has answered yet.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OpenQuestion {
    /// The run.
    pub run_id: RunId,
    /// Its workflow's name.
    pub workflow: String,
    /// The run's status as recorded (`waiting` when nothing else runs).
    pub status: RunStatus,
    /// The node run that asks: what an answer names.
    pub node_run_id: domain::NodeRunId,
    /// Its node.
    pub node_id: domain::NodeId,
    /// What the person is shown.
    pub prompt: String,
    /// The schema an approval's data must meet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema: Option<serde_json::Value>,
    /// When its `on_timeout` applies.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Timestamp>,
    /// The tool call asked about, when an agent's call waits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<domain::event::AskedCall>,
}

/// The open questions of `state`, oldest node run first.
pub fn questions_of(state: &RunSnapshot) -> Vec<OpenQuestion> {
    let mut open: Vec<OpenQuestion> = (state.node_runs.iter())
        .filter_map(|(run, current)| {
            let question = current.approval.as_ref().filter(|q| q.answer.is_none())?;
            Some(OpenQuestion {
                run_id: state.run_id,
                workflow: state.workflow.name.clone(),
                status: state.status,
                node_run_id: *run,
                node_id: current.node_id.clone(),
                prompt: question.prompt.clone(),
                schema: question.schema.clone(),
                deadline: question.deadline,
                tool: question.tool.clone(),
            })
        })
        .collect();
    let started = |q: &OpenQuestion| {
        state
            .node_runs
            .get(&q.node_run_id)
            .and_then(|r| r.started_at)
    };
    open.sort_by_key(|q| (started(q), q.node_run_id));
    open
}

/// The open questions of every run that may have one (`running`, `paused`,
/// `waiting`), newest run first; runs that cannot be read are returned
/// apart, to be named.
pub async fn open_questions(
    store: &dyn RunStore,
) -> Result<(Vec<OpenQuestion>, Vec<Listed>), StoreError> {
    let filter = RunFilter {
        statuses: [RunStatus::Running, RunStatus::Paused, RunStatus::Waiting]
            .map(ShownStatus::Recorded)
            .to_vec(),
        ..RunFilter::default()
    };
    let mut open = Vec::new();
    let mut unreadable = Vec::new();
    for listed in find_runs(store, &filter).await? {
        match &listed.view {
            Ok(view) => open.extend(questions_of(&view.snapshot)),
            Err(_) => unreadable.push(listed),
        }
    }
    Ok((open, unreadable))
}

/// The runs `waiting` with a question to settle at `now`: one past its
/// deadline, or one answered whose run was not continued (the process that
/// recorded the answer died first). `awr recover` continues them, so that
/// each `on_timeout` fires, once, and no answer stays unacted on.
pub async fn overdue_runs(store: &dyn RunStore, now: Timestamp) -> Result<Vec<Listed>, StoreError> {
    let filter = RunFilter {
        statuses: vec![ShownStatus::Recorded(RunStatus::Waiting)],
        ..RunFilter::default()
    };
    let mut overdue: Vec<Listed> = find_runs(store, &filter)
        .await?
        .into_iter()
        .filter(|listed| {
            listed
                .view
                .as_ref()
                .is_ok_and(|view| crate::run::due_at(&view.snapshot).is_some_and(|at| at <= now))
        })
        .collect();
    overdue.sort_by_key(Listed::run_id);
    Ok(overdue)
}

/// Every run `waiting` with a question to settle some time (see
/// [`overdue_runs`]), with the offset of its last event and when that is:
/// what a server watching its store acts on, and sleeps until.
pub async fn waiting_due(store: &dyn RunStore) -> Result<Vec<(RunId, u64, Timestamp)>, StoreError> {
    let filter = RunFilter {
        statuses: vec![ShownStatus::Recorded(RunStatus::Waiting)],
        ..RunFilter::default()
    };
    let runs = find_runs(store, &filter).await?;
    Ok((runs.iter())
        .filter_map(|listed| {
            let view = listed.view.as_ref().ok()?;
            let at = crate::run::due_at(&view.snapshot)?;
            Some((listed.run_id(), view.snapshot.last_offset, at))
        })
        .collect())
}

//! The JSON answers of the API, as types: the handlers build them, and the
//! OpenAPI description (`openapi`) reads their schemas from them, so what
//! is described is what is sent.
//!
//! Each struct declares its fields in alphabetical order: that is the
//! order `serde_json::json!` (a sorted map) wrote them in before these
//! types, and clients may have compared bytes.

use application::query::{Listed, StatusCounts};
use domain::{RunId, Timestamp};
use serde::Serialize;
use utoipa::ToSchema;

/// `GET /healthz`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// Always `ok`: the server answers.
    #[schema(value_type = String, pattern = "^ok$", example = "ok")]
    pub status: &'static str,
}

impl Health {
    /// The one answer.
    pub const OK: Self = Self { status: "ok" };
}

/// The URLs of a run's resources.
#[derive(Debug, Serialize, ToSchema)]
pub struct Urls {
    /// `POST` a command here.
    pub commands: String,
    /// Its events, NDJSON.
    pub events: String,
    /// The run (its snapshot).
    #[serde(rename = "self")]
    pub this: String,
    /// Its events, server-sent events.
    pub sse: String,
    /// Its exchange transcript, NDJSON.
    pub transcript: String,
}

impl Urls {
    /// The URLs of `run_id`.
    pub fn of(run_id: RunId) -> Self {
        let base = format!("/workflows/{run_id}");
        Self {
            commands: format!("{base}/commands"),
            events: format!("{base}/events"),
            sse: format!("{base}/events/sse"),
            transcript: format!("{base}/transcript"),
            this: base,
        }
    }
}

/// `201` of `POST /workflows`: the run exists, and runs in the server or
/// waits in the queue.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Started {
    /// The new run.
    #[schema(value_type = String, format = Uuid)]
    pub run_id: RunId,
    /// `running`: the run was just started here; `queued` (a server
    /// started with `--queue`): it waits for a worker.
    #[schema(value_type = String, pattern = "^(running|queued)$", example = "running")]
    pub status: &'static str,
    /// Where its resources are.
    pub urls: Urls,
}

impl Started {
    /// The answer for `run_id`, just started.
    pub fn new(run_id: RunId) -> Self {
        Self {
            run_id,
            status: "running",
            urls: Urls::of(run_id),
        }
    }

    /// The answer for `run_id`, just queued.
    pub fn queued(run_id: RunId) -> Self {
        Self {
            status: "queued",
            ..Self::new(run_id)
        }
    }
}

/// Where a fork branches off.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ForkPoint {
    /// The offset of the parent's last event the fork keeps.
    #[schema(minimum = 1)]
    pub offset: u64,
    /// The parent run.
    #[schema(value_type = String, format = Uuid)]
    pub run_id: RunId,
}

/// `201` of `POST /workflows/{id}/fork`: the fork exists and runs in the
/// server.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Forked {
    /// The run and offset it was forked from.
    pub forked_from: ForkPoint,
    /// The new run.
    #[schema(value_type = String, format = Uuid)]
    pub run_id: RunId,
    /// Always `running`: the fork was just started.
    #[schema(value_type = String, pattern = "^running$", example = "running")]
    pub status: &'static str,
    /// Where its resources are.
    pub urls: Urls,
}

/// `202` of `POST /workflows/{id}/commands`: the run took the command.
#[derive(Debug, Serialize, ToSchema)]
pub struct Accepted {
    /// Always `true` (a refusal is an error answer).
    pub accepted: bool,
    /// The offset of its `command:received` (of `flow:resumed` for a
    /// resume the server carries out).
    #[schema(minimum = 1)]
    pub offset: u64,
}

impl Accepted {
    /// Accepted, on record at `offset`.
    pub fn at(offset: u64) -> Self {
        Self {
            accepted: true,
            offset,
        }
    }
}

/// `200` of `GET /workflows`: one page of runs, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct RunList {
    /// How many runs have each status, over every run whatever the filter.
    pub counts: Counts,
    /// The `after=` of the next page; `null` on the last.
    #[schema(format = Uuid, required = true)]
    pub next: Option<String>,
    /// The runs of this page.
    pub runs: Vec<Row>,
}

/// How many runs have each status. The six usual ones are always named;
/// `pending`, `queued` and `corrupt` only when some run has them.
#[derive(Debug, Default, Serialize, ToSchema)]
pub struct Counts {
    /// Stopped by a user.
    pub cancelled: u64,
    /// Finished successfully.
    pub completed: u64,
    /// Whose records cannot be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub corrupt: Option<u64>,
    /// Finished with an error.
    pub failed: u64,
    /// Recorded `running`, with no process writing them.
    pub interrupted: u64,
    /// Stopped at a safe point; resumable.
    pub paused: u64,
    /// Created, with no event yet.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub pending: Option<u64>,
    /// Submitted to the queue, not started by a worker yet.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub queued: Option<u64>,
    /// Being written by a process.
    pub running: u64,
    /// Stopped until a person answers (docs/approvals.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub waiting: Option<u64>,
}

impl From<StatusCounts> for Counts {
    /// `pending`, `queued`, `waiting` and `corrupt` are left out when there
    /// are none.
    fn from(counts: StatusCounts) -> Self {
        let some = |n: u64| (n > 0).then_some(n);
        Self {
            cancelled: counts.cancelled,
            completed: counts.completed,
            corrupt: some(counts.corrupt),
            failed: counts.failed,
            interrupted: counts.interrupted,
            paused: counts.paused,
            pending: some(counts.pending),
            queued: some(counts.queued),
            running: counts.running,
            waiting: some(counts.waiting),
        }
    }
}

/// One run of the list. A run whose records cannot be read is `corrupt`,
/// with only its id and parent known.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    /// The offset of its last event.
    #[schema(required = true)]
    pub last_offset: Option<u64>,
    /// The run that called this one, for a child run (`call_workflow`).
    #[schema(value_type = Option<String>, format = Uuid, required = true)]
    pub parent_run_id: Option<RunId>,
    /// The run.
    #[schema(value_type = String, format = Uuid)]
    pub run_id: RunId,
    /// When it started.
    #[schema(value_type = Option<String>, format = DateTime, required = true)]
    pub started_at: Option<Timestamp>,
    /// Its status as shown (`interrupted`: recorded `running`, no writer).
    #[schema(value_type = super::openapi::ListedStatus)]
    pub status: &'static str,
    /// When its last event was recorded.
    #[schema(value_type = Option<String>, format = DateTime, required = true)]
    pub updated_at: Option<Timestamp>,
    /// The workflow's name.
    #[schema(required = true)]
    pub workflow: Option<String>,
}

impl Row {
    /// The row of `run`.
    pub fn of(run: &Listed) -> Self {
        let snapshot = run.view.as_ref().ok().map(|v| &v.snapshot);
        Self {
            last_offset: snapshot.map(|s| s.last_offset),
            parent_run_id: run.summary.parent,
            run_id: run.run_id(),
            started_at: snapshot.and_then(|s| s.started_at),
            status: run.status(),
            updated_at: snapshot.and_then(|s| s.updated_at),
            workflow: snapshot.map(|s| s.workflow.name.clone()),
        }
    }
}

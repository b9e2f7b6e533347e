//! Schemas the description needs that no handler's type gives: what a
//! handler reads or writes as free JSON (a command, which the domain
//! parses and records even when it is not one; the snapshot, the domain's
//! own type; a workflow, as text or an object), and the names of statuses
//! sent as plain strings. They are described, never built: hence
//! `dead_code` allowed on each.

use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use utoipa::{IntoParams, ToSchema};

/// The `{id}` of a run's routes.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
pub struct RunPath {
    /// A run id, or a unique prefix of one (as on the command line).
    #[param(example = "0b6d2a7e-3c4f-4a5b-8c6d-7e8f9a0b1c2d")]
    id: String,
}

/// A run's status as shown: the status its log records, or `interrupted`
/// for a run recorded `running` that no process writes.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
pub enum ShownStatus {
    Pending,
    Running,
    Paused,
    Waiting,
    Completed,
    Failed,
    Cancelled,
    Interrupted,
    Queued,
}

/// A run's status in a list: as shown, or `corrupt` when its records
/// cannot be read.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
pub enum ListedStatus {
    Pending,
    Running,
    Paused,
    Waiting,
    Completed,
    Failed,
    Cancelled,
    Interrupted,
    Queued,
    Corrupt,
}

/// A workflow sent inline: its text (YAML or JSON), or a JSON object.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub enum WorkflowSource {
    /// The workflow file's text, YAML or JSON.
    Text(String),
    /// The workflow as a JSON object.
    Object(BTreeMap<String, Value>),
}

/// A command to a run, as the domain serializes it (`RuntimeCommand`).
#[derive(Serialize, ToSchema)]
#[serde(tag = "type", rename_all = "camelCase")]
#[schema(example = json!({"type": "cancel", "reason": "from the UI"}))]
#[allow(dead_code)]
pub enum CommandBody {
    /// Stop at the next safe point; `resume` continues.
    Pause,
    /// Stop for good.
    Cancel {
        /// Why, for the record.
        #[schema(nullable = false)]
        reason: Option<String>,
    },
    /// Continue a paused or interrupted run.
    Resume {
        /// What to tell the agents that were running (default `continue`).
        #[schema(nullable = false)]
        message: Option<String>,
    },
    /// A message for one running node run's agent, read after its turn.
    #[serde(rename_all = "camelCase")]
    Send {
        /// The node run it is for.
        #[schema(format = Uuid)]
        node_run_id: String,
        /// The text.
        message: String,
    },
    /// Approve what an `approval` node run asks (docs/approvals.md); a
    /// run that was waiting for it goes on in the server's process.
    #[serde(rename_all = "camelCase")]
    Approve {
        /// The node run that asks.
        #[schema(format = Uuid)]
        node_run_id: String,
        /// The answer's data, checked against the approval's schema.
        #[schema(nullable = false)]
        data: Option<Value>,
    },
    /// Reject what an `approval` node run asks; a run that was waiting for
    /// it goes on in the server's process.
    #[serde(rename_all = "camelCase")]
    Reject {
        /// The node run that asks.
        #[schema(format = Uuid)]
        node_run_id: String,
        /// Why, for the record and the workflow.
        #[schema(nullable = false)]
        reason: Option<String>,
    },
    /// The answer to a question one node run's agent asked.
    #[serde(rename_all = "camelCase")]
    Reply {
        /// The node run it is for.
        #[schema(format = Uuid)]
        node_run_id: String,
        /// The text.
        message: String,
    },
}

/// Which workflow a run runs.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub struct WorkflowRef {
    /// Its `name:`.
    name: String,
    /// `sha256:<hex>` of the file's bytes.
    hash: String,
}

/// A run's snapshot: its state as of its last event (docs/events.md), as
/// `awr show RUN --json` prints it. Besides the fields named here, it has
/// those the run needs (`input`, `startedAt`, `startedBy`, `updatedAt`,
/// `failure`, `nodeRuns`, `forEach`, `spent`, `forkedFrom`, ...).
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
pub struct Snapshot {
    /// The snapshot's schema version.
    version: u32,
    /// The run.
    #[schema(format = Uuid)]
    run_id: String,
    /// The workflow it runs.
    workflow: WorkflowRef,
    /// Its status as shown.
    status: ShownStatus,
    /// The output of each node that finished, by node id.
    outputs: BTreeMap<String, Value>,
    /// The workflow's own state.
    state: BTreeMap<String, Value>,
    /// The status of each node, by node id.
    node_status: BTreeMap<String, String>,
    /// The status of each edge.
    edge_status: BTreeMap<String, String>,
    /// How often each loop edge fired.
    loop_counters: BTreeMap<String, u32>,
    /// Accepted messages not yet read by their node run.
    inbox: Vec<Value>,
    /// The provider session of each agent node, by node id.
    agent_sessions: BTreeMap<String, String>,
    /// The offset of the last event it reflects.
    last_offset: u64,
}

/// One server-sent event of `GET /workflows/{id}/events/sse`, as a client
/// parses it. (In OpenAPI 3.1 the schema of a `text/event-stream` is that of
/// each event, not of the body.)
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub enum SseEvent {
    /// An event of the run's log.
    Event(SseRunEvent),
    /// The terminal frame: the run ended, or the server shuts down.
    End(SseEnd),
    /// Sent after a silence, so a client tells a quiet run from a dead
    /// connection.
    Heartbeat(SseHeartbeat),
}

/// An event of the run's log.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub struct SseRunEvent {
    /// `message`, the default type (`EventSource.onmessage` gets it).
    #[schema(nullable = false, pattern = "^message$")]
    event: Option<String>,
    /// The event's offset: the cursor a reconnecting client sends back
    /// (`Last-Event-ID`).
    #[schema(pattern = "^[1-9][0-9]*$")]
    id: String,
    /// The stored event's JSON (docs/events.md).
    #[schema(content_media_type = "application/json")]
    data: String,
}

/// The terminal frame, with no `id`.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub struct SseEnd {
    /// `end`.
    #[schema(pattern = "^end$")]
    event: String,
    /// `{"status", "lastOffset", "reason"?}`: how the run ended (or what it
    /// is now, and why the stream ends before it).
    #[schema(content_media_type = "application/json")]
    data: String,
}

/// A heartbeat, with no `id`.
#[derive(Serialize, ToSchema)]
#[allow(dead_code)]
pub struct SseHeartbeat {
    /// `heartbeat`.
    #[schema(pattern = "^heartbeat$")]
    event: String,
    /// `{"heartbeatMs": N}`: the silence after which one is sent.
    #[schema(content_media_type = "application/json")]
    data: String,
}

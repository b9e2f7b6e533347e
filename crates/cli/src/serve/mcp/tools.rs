//! The tools of awr's MCP server: each one's arguments (whose JSON Schema
//! is generated from the type they are parsed into, so the two cannot
//! disagree), its answer's schema, the scope it needs, and what it does.

use std::sync::Arc;

use domain::{Caller, RuntimeCommand};
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::super::access::Scope;
use super::super::fork::{ForkBody, fork_run};
use super::super::runs::{ListQuery, StartBody, command_run, list_runs, show_run, start_run};
use super::super::{ApiError, App};
use super::{Refusal, reads};

/// Every tool, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Name {
    StartRun,
    GetRun,
    ListRuns,
    WaitRun,
    EventsSince,
    TranscriptSince,
    SendMessage,
    Reply,
    Pause,
    Cancel,
    Resume,
    Fork,
    ListApprovals,
    Approve,
    Reject,
}

impl Name {
    const ALL: [Name; 15] = [
        Name::StartRun,
        Name::GetRun,
        Name::ListRuns,
        Name::WaitRun,
        Name::EventsSince,
        Name::TranscriptSince,
        Name::SendMessage,
        Name::Reply,
        Name::Pause,
        Name::Cancel,
        Name::Resume,
        Name::Fork,
        Name::ListApprovals,
        Name::Approve,
        Name::Reject,
    ];

    pub(super) fn as_str(self) -> &'static str {
        match self {
            Name::StartRun => "start_run",
            Name::GetRun => "get_run",
            Name::ListRuns => "list_runs",
            Name::WaitRun => "wait_run",
            Name::EventsSince => "events_since",
            Name::TranscriptSince => "transcript_since",
            Name::SendMessage => "send_message",
            Name::Reply => "reply",
            Name::Pause => "pause",
            Name::Cancel => "cancel",
            Name::Resume => "resume",
            Name::Fork => "fork",
            Name::ListApprovals => "list_approvals",
            Name::Approve => "approve",
            Name::Reject => "reject",
        }
    }

    pub(super) fn of(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|n| n.as_str() == name)
    }

    /// What the caller's token must allow: what the tool's HTTP route needs.
    pub(super) fn scope(self) -> Scope {
        match self {
            Name::StartRun => Scope::Start,
            Name::GetRun
            | Name::ListRuns
            | Name::WaitRun
            | Name::EventsSince
            | Name::TranscriptSince
            | Name::ListApprovals => Scope::Read,
            Name::Approve | Name::Reject => Scope::Approve,
            Name::SendMessage
            | Name::Reply
            | Name::Pause
            | Name::Cancel
            | Name::Resume
            | Name::Fork => Scope::Control,
        }
    }
}

/// `start_run`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct StartArgs {
    /// A workflow file under the server's root directory. Give this or `workflow`.
    path: Option<String>,
    /// The workflow itself: its YAML or JSON text, or a JSON object. It may
    /// not run programs or reach the server's files unless the server allows it.
    workflow: Option<Value>,
    /// The run's input; absent: the workflow's own `input`.
    input: Option<Value>,
}

/// The run a tool is about.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RunArgs {
    /// The run's id, or a unique prefix of it.
    run_id: String,
}

/// `list_runs`'s arguments.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ListArgs {
    /// Only runs with one of these statuses (`running`, `completed`, `failed`,
    /// `cancelled`, `paused`, `waiting`, `interrupted`, `pending`, `queued`).
    status: Option<Vec<String>>,
    /// Only runs of the workflow with this name.
    workflow: Option<String>,
    /// Only runs started then or later: an RFC 3339 time, or a duration ago (`2h`).
    since: Option<String>,
    /// Runs per page, 1 to 1000 (default 100).
    limit: Option<u32>,
    /// The `next` of the previous page.
    after: Option<String>,
}

/// `send_message`'s and `reply`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct MessageArgs {
    /// The run's id, or a unique prefix of it.
    run_id: String,
    /// The node run (one execution of a node) the message is for, as its
    /// events name it.
    node_run_id: String,
    /// The text.
    message: String,
}

/// `cancel`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CancelArgs {
    /// The run's id, or a unique prefix of it.
    run_id: String,
    /// Why, for the record.
    reason: Option<String>,
}

/// `resume`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ResumeArgs {
    /// The run's id, or a unique prefix of it.
    run_id: String,
    /// What to tell the agents that were running (default `continue`).
    message: Option<String>,
}

/// `fork`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ForkArgs {
    /// The run to fork, or a unique prefix of its id.
    run_id: String,
    /// The offset of the run's last event the fork keeps: from 1, before
    /// its terminal event.
    #[schemars(range(min = 1))]
    at: u64,
    /// The input of what runs after the fork point; absent: the run's.
    input: Option<Value>,
}

/// `list_approvals`'s arguments.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ApprovalsArgs {
    /// Only this run's (its id, or a unique prefix of it); absent: every run's.
    run_id: Option<String>,
}

/// `approve`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ApproveArgs {
    /// The run's id, or a unique prefix of it.
    run_id: String,
    /// The approval node run that asks, as `list_approvals` names it.
    node_run_id: String,
    /// The answer's data, which must meet the approval's schema.
    data: Option<Value>,
}

/// `reject`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RejectArgs {
    /// The run's id, or a unique prefix of it.
    run_id: String,
    /// The approval node run that asks, as `list_approvals` names it.
    node_run_id: String,
    /// Why, for the record and the workflow.
    reason: Option<String>,
}

/// Every tool, as `tools/list` tells them.
pub(super) fn list() -> Vec<Tool> {
    Name::ALL.into_iter().map(spec).collect()
}

fn spec(name: Name) -> Tool {
    let (description, input, output) = match name {
        Name::StartRun => (
            "Start a workflow run, from a file under the server's root (`path`) or inline \
             (`workflow`), as `awr run` would. Answers at once with the run's id; \
             `wait_run` waits for it.",
            schema::<StartArgs>(),
            started(),
        ),
        Name::GetRun => (
            "A run's state: its status, its nodes' statuses and outputs, as `awr show \
             RUN --json` prints it.",
            schema::<RunArgs>(),
            object(
                &["runId", "status"],
                json!({"runId": id(), "status": text()}),
            ),
        ),
        Name::ListRuns => (
            "Runs newest first, a page at a time, with the count of each status.",
            schema::<ListArgs>(),
            object(
                &["counts", "next", "runs"],
                json!({"counts": {"type": "object"}, "next": {"type": ["string", "null"]},
                    "runs": {"type": "array", "items": {"type": "object"}}}),
            ),
        ),
        Name::WaitRun => (
            "Waits until the run ends or pauses, or until `timeoutSeconds` (at most \
             50) pass, and answers with its status then. Never blocks longer: call it \
             again to go on waiting.",
            schema::<reads::WaitArgs>(),
            object(
                &["runId", "status", "done", "timedOut", "lastOffset"],
                json!({"runId": id(), "status": text(), "done": {"type": "boolean"},
                    "timedOut": {"type": "boolean"}, "lastOffset": count(),
                    "output": {}, "error": {}}),
            ),
        ),
        Name::EventsSince => (
            "A page of a run's event log after an offset, oldest first, optionally of \
             some types only; `nextOffset` pages on.",
            schema::<reads::EventsArgs>(),
            object(
                &["events", "nextOffset", "lastOffset", "more"],
                json!({"events": {"type": "array", "items": {"type": "object"}},
                    "nextOffset": count(), "lastOffset": count(), "more": {"type": "boolean"}}),
            ),
        ),
        Name::TranscriptSince => (
            "A page of a run's exchange transcript after a `seq`, oldest first; \
             `nextSeq` pages on.",
            schema::<reads::TranscriptArgs>(),
            object(
                &["lines", "nextSeq", "more"],
                json!({"lines": {"type": "array", "items": {"type": "object"}},
                    "nextSeq": count(), "more": {"type": "boolean"}}),
            ),
        ),
        Name::SendMessage => (
            "Sends a message to one running node run (its next agent turn reads it).",
            schema::<MessageArgs>(),
            accepted(),
        ),
        Name::Reply => (
            "Answers a question a node run asked.",
            schema::<MessageArgs>(),
            accepted(),
        ),
        Name::Pause => (
            "Pauses a run at its next safe point; `resume` continues it.",
            schema::<RunArgs>(),
            accepted(),
        ),
        Name::Cancel => (
            "Cancels a run for good.",
            schema::<CancelArgs>(),
            accepted(),
        ),
        Name::Resume => (
            "Continues a paused or interrupted run (in this server's process when no \
             process writes it).",
            schema::<ResumeArgs>(),
            accepted(),
        ),
        Name::Fork => (
            "Starts a new run from a run's state at an offset of its log, as `awr fork` does.",
            schema::<ForkArgs>(),
            object(
                &["runId", "status", "forkedFrom"],
                json!({"runId": id(), "status": text(), "forkedFrom": {"type": "object"}}),
            ),
        ),
        Name::ListApprovals => (
            "The questions approval nodes asked that wait for a person's answer: \
             each with its run, its node run (what `approve` and `reject` name), \
             the prompt, the schema of an approval's data, and the deadline.",
            schema::<ApprovalsArgs>(),
            object(
                &["approvals"],
                json!({"approvals": {"type": "array", "items": {"type": "object",
                    "required": ["runId", "nodeRunId", "nodeId", "prompt", "status"]}}}),
            ),
        ),
        Name::Approve => (
            "Approves what an approval node run asks, with data meeting its schema; \
             a run that waited for it goes on. An answer is taken once.",
            schema::<ApproveArgs>(),
            accepted(),
        ),
        Name::Reject => (
            "Rejects what an approval node run asks, with a reason; a run that \
             waited for it goes on. An answer is taken once.",
            schema::<RejectArgs>(),
            accepted(),
        ),
    };
    let reads = name.scope() == Scope::Read;
    let annotations = ToolAnnotations::new()
        .read_only(reads)
        .destructive(name == Name::Cancel)
        .open_world(false);
    Tool::new(name.as_str(), description, Arc::new(input))
        .with_raw_output_schema(Arc::new(output))
        .with_annotations(annotations)
}

/// The input schema of `T`, without its dialect line.
fn schema<T: JsonSchema>() -> JsonObject {
    let mut schema = match schemars::schema_for!(T).to_value() {
        Value::Object(schema) => schema,
        _ => JsonObject::new(),
    };
    schema.remove("$schema");
    schema
}

fn object(required: &[&str], properties: Value) -> JsonObject {
    let mut schema = JsonObject::new();
    schema.insert("type".into(), json!("object"));
    schema.insert("properties".into(), properties);
    schema.insert("required".into(), json!(required));
    schema
}

fn id() -> Value {
    json!({"type": "string", "format": "uuid"})
}

fn text() -> Value {
    json!({"type": "string"})
}

fn count() -> Value {
    json!({"type": "integer", "minimum": 0})
}

fn started() -> JsonObject {
    object(
        &["runId", "status"],
        json!({"runId": id(), "status": {"enum": ["running", "queued"]}, "urls": {"type": "object"}}),
    )
}

fn accepted() -> JsonObject {
    object(
        &["accepted", "offset"],
        json!({"accepted": {"type": "boolean"}, "offset": count()}),
    )
}

/// Parses a tool's arguments, naming the field at fault.
fn parse<T: DeserializeOwned>(tool: Name, arguments: Value) -> Result<T, Refusal> {
    serde_path_to_error::deserialize(arguments).map_err(|e| {
        let at = e.path().to_string();
        let place = match at.as_str() {
            "." => String::new(),
            at => format!(" at `{at}`"),
        };
        Refusal::Input(format!(
            "{}: bad arguments{place}: {}",
            tool.as_str(),
            e.inner()
        ))
    })
}

/// An answer as JSON.
fn answer(value: impl serde::Serialize) -> Result<Value, Refusal> {
    serde_json::to_value(value).map_err(|e| ApiError::internal(e.to_string()).into())
}

/// Runs `tool` with `arguments` for `by`; `cancelled` fires when the
/// client gives up on the call.
pub(super) async fn call(
    app: &App,
    by: Caller,
    tool: Name,
    arguments: Value,
    cancelled: &CancellationToken,
) -> Result<Value, Refusal> {
    match tool {
        Name::StartRun => {
            let args: StartArgs = parse(tool, arguments)?;
            let body = StartBody {
                path: args.path,
                workflow: args.workflow,
                input: args.input,
                priority: None,
            };
            answer(start_run(app, by, body).await?)
        }
        Name::GetRun => {
            let args: RunArgs = parse(tool, arguments)?;
            let shown = show_run(app, &args.run_id).await?;
            serde_json::from_str(&shown).map_err(|e| ApiError::internal(e.to_string()).into())
        }
        Name::ListRuns => {
            let args: ListArgs = parse(tool, arguments)?;
            let query = ListQuery {
                status: args.status.map(|s| s.join(",")),
                workflow: args.workflow,
                since: args.since,
                limit: args.limit.map(|n| n.to_string()),
                after: args.after,
            };
            answer(list_runs(app, query).await?)
        }
        Name::WaitRun => reads::wait(app, &by, parse(tool, arguments)?, cancelled).await,
        Name::EventsSince => reads::events(app, parse(tool, arguments)?).await,
        Name::TranscriptSince => reads::transcript(app, parse(tool, arguments)?).await,
        Name::SendMessage | Name::Reply => {
            let args: MessageArgs = parse(tool, arguments)?;
            let kind = match tool {
                Name::Reply => "reply",
                _ => "send",
            };
            let raw = json!({"type": kind, "nodeRunId": args.node_run_id, "message": args.message});
            answer(command_run(app, by, &args.run_id, raw).await?)
        }
        Name::Pause => {
            let args: RunArgs = parse(tool, arguments)?;
            command(app, by, &args.run_id, RuntimeCommand::Pause).await
        }
        Name::Cancel => {
            let args: CancelArgs = parse(tool, arguments)?;
            let cancel = RuntimeCommand::Cancel {
                reason: args.reason,
            };
            command(app, by, &args.run_id, cancel).await
        }
        Name::Resume => {
            let args: ResumeArgs = parse(tool, arguments)?;
            let resume = RuntimeCommand::Resume {
                message: args.message,
            };
            command(app, by, &args.run_id, resume).await
        }
        Name::ListApprovals => {
            reads::approvals(app, parse::<ApprovalsArgs>(tool, arguments)?.run_id).await
        }
        Name::Approve => {
            let args: ApproveArgs = parse(tool, arguments)?;
            let mut raw = json!({"type": "approve", "nodeRunId": args.node_run_id});
            if let Some(data) = args.data {
                raw["data"] = data;
            }
            answer(command_run(app, by, &args.run_id, raw).await?)
        }
        Name::Reject => {
            let args: RejectArgs = parse(tool, arguments)?;
            let mut raw = json!({"type": "reject", "nodeRunId": args.node_run_id});
            if let Some(reason) = args.reason {
                raw["reason"] = json!(reason);
            }
            answer(command_run(app, by, &args.run_id, raw).await?)
        }
        Name::Fork => {
            let args: ForkArgs = parse(tool, arguments)?;
            let body = ForkBody {
                at: args.at,
                input: args.input,
            };
            answer(fork_run(app, by, &args.run_id, body).await?)
        }
    }
}

/// Gives the run `run_id` names `command`, as `POST …/commands` would.
async fn command(
    app: &App,
    by: Caller,
    run_id: &str,
    command: RuntimeCommand,
) -> Result<Value, Refusal> {
    let raw = serde_json::to_value(&command).map_err(|e| ApiError::internal(e.to_string()))?;
    answer(command_run(app, by, run_id, raw).await?)
}

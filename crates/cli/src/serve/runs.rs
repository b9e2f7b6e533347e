//! Runs over HTTP: start one, list them, show one, give one a command. Each
//! goes through what the command line uses (loading a workflow, the
//! executor, `inspect`, `control::deliver`), so both behave the same.

use application::inspect::{run_view, writer_gone};
use application::ports::RunQuery;
use application::query::{RunFilter, STATUS_NAMES, count_runs, find_runs, parse_status};
use application::{Cancel, ExecutorError};
use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, Path as UrlPath, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use domain::{Caller, EventKind, RunId, RuntimeCommand, WorkflowDef};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::Value;

use super::access::Granted;
use super::answers::{Accepted, Counts, Row, RunList, Started};
use super::error::parse_body;
use super::openapi::refusals::{BadRequest, Conflict, Forbidden, Internal, NotFound, Unavailable};
use super::openapi::{CommandBody, RunPath, Snapshot, WorkflowSource};
use super::stream::{resolve, store_error};
use super::workflow::{Draft, confined, refusal, refuse_host_reach, storage_places};
use super::{ApiError, App};
use crate::Failure;
use crate::forms::Since;
use crate::wiring::load_workflow_calling;
use crate::wiring::{deliver, request, source_of, wire, wired_for};
use application::queue::SubmitRequest;

/// Runs listed per page unless `limit` says otherwise, and at most.
const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 1000;

/// The body of `POST /workflows`: one of `path` and `workflow`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"path": "examples/summarize.yaml", "input": "- fact one\n- fact two"}))]
pub(crate) struct StartBody {
    /// A workflow file, under the server's root (`--root`).
    pub(crate) path: Option<String>,
    /// The workflow itself: its text (YAML or JSON), or a JSON object.
    /// It may not run programs or reach files of the server's machine
    /// unless the server was started with `--allow-inline-code`.
    #[schema(value_type = Option<WorkflowSource>)]
    pub(crate) workflow: Option<Value>,
    /// The run's input; absent or `null`: the workflow's own `input`.
    /// Nested at most 100 levels deep.
    pub(crate) input: Option<Value>,
    /// On a server started with `--queue`: claimed by workers before runs
    /// of a lower priority (default 0). Refused by any other server.
    pub(crate) priority: Option<i32>,
}

/// `POST /workflows`: loads the workflow as `awr run` does and starts it
/// in this process, or queues it for workers (`--queue`); `201` once the
/// run exists.
#[utoipa::path(
    post,
    path = "/workflows",
    tag = "runs",
    operation_id = "startRun",
    summary = "Start a run",
    description = "Loads the workflow (a file under `--root` by `path`, or inline) and \
        checks it as `awr run` does, then runs it in the server's process. The run goes \
        on whatever happens to the client. A server started with `--queue` queues it \
        instead, for workers (`awr worker`) to run, and answers at once with status \
        `queued`.",
    request_body = StartBody,
    responses(
        (status = 201, description = "The run exists, and is running or queued.", body = Started,
            headers(("Location" = String, description = "The run's URL: `/workflows/{id}`."))),
        (status = 400, response = BadRequest),
        (status = 403, response = Forbidden),
        (status = 404, response = NotFound),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    ),
    security(("bearer" = ["start"])),
)]
pub async fn start(
    State(app): State<App>,
    Extension(caller): Extension<Granted>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let body: StartBody = parse_body(&body)?;
    Ok(created(start_run(&app, caller.name, body).await?))
}

/// Starts (or queues) the run `body` asks for, for `by`: what `POST
/// /workflows` and the MCP tool `start_run` do.
pub(crate) async fn start_run(app: &App, by: Caller, body: StartBody) -> Result<Started, ApiError> {
    app.admit()?;
    let root = &app.config().root;
    let storage = storage_places(app.storage());
    let (file, draft) = match (body.path, body.workflow) {
        (Some(path), None) => (confined(root, &storage, &path)?, None),
        (None, Some(workflow)) => {
            let draft = Draft::write(app.storage(), workflow)?;
            (draft.path().to_path_buf(), Some(draft))
        }
        _ => {
            return Err(ApiError::bad_request(
                "give one of `path` (a workflow file under the server's root) and `workflow` (its YAML or JSON)",
            ));
        }
    };
    // What a client sends calls no file outside the root (root is
    // canonical), nor any in the storage.
    let workflow = load_workflow_calling(&file, Some(root), &storage)
        .map_err(|e| refusal(&e, draft.as_ref().map(Draft::path), root))?;
    let file = match draft {
        Some(draft) => {
            if !app.config().allow_inline_code {
                refuse_host_reach(&workflow)?;
            }
            draft.keep()?
        }
        None => file,
    };
    let input = match body.input {
        Some(input) if !input.is_null() => input,
        _ => workflow.input.clone().unwrap_or(Value::Null),
    };
    WorkflowDef::check_input(&input).map_err(|e| ApiError::bad_request(format!("input: {e}")))?;
    if let Some(queue) = app.queue() {
        let request = SubmitRequest {
            workflow,
            source: source_of(&file),
            input,
            by: Some(by),
            priority: body.priority.unwrap_or(0),
        };
        let ids = crate::wiring::clock_and_ids().1;
        let run_id = application::queue::submit(queue.as_ref(), ids.as_ref(), request)
            .await
            .map_err(|e| ApiError::internal(format!("cannot queue the run: {e}")))?;
        return Ok(Started::queued(run_id));
    }
    if body.priority.is_some() {
        return Err(ApiError::bad_request(
            "priority: this server runs what it starts at once; only one started with --queue queues runs",
        ));
    }
    let wired = wire(
        app.storage(),
        std::sync::Arc::clone(app.store()),
        &file,
        &workflow,
        None,
        None,
    );
    let run_id = wired
        .runtime
        .create()
        .await
        .map_err(|e| ApiError::internal(format!("cannot create the run: {e}")))?;
    let request = request(workflow, input, &file, Some(by));
    app.write(run_id, async move {
        match wired
            .runtime
            .run_created(run_id, request, Cancel::new())
            .await
        {
            Ok(outcome) => {
                tracing::info!(run = %run_id, status = outcome.status.as_str(), "run ended");
            }
            Err(e) => {
                // Nothing recorded (its first event found the disk full):
                // nothing to resume, so no run left `pending` for ever.
                let removed = wired.runtime.discard_if_unstarted(run_id).await;
                tracing::warn!(run = %run_id, error = %e, removed, "run failed");
            }
        }
    });
    Ok(Started::new(run_id))
}

/// `201`, with the new run's URL.
fn created(started: Started) -> Response {
    (
        StatusCode::CREATED,
        [(header::LOCATION, format!("/workflows/{}", started.run_id))],
        Json(started),
    )
        .into_response()
}

/// The query of `GET /workflows`. Each is read as text and checked here,
/// so a bad value is a 400 naming it; the description says what is valid.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only runs with one of these statuses.
    #[param(value_type = Option<Vec<super::openapi::ShownStatus>>, style = Form, explode = false, min_items = 1)]
    pub(crate) status: Option<String>,
    /// Only runs of the workflow with this name.
    pub(crate) workflow: Option<String>,
    /// Only runs started then or later: an RFC 3339 time, or a duration
    /// ago (`2h`, `7d`).
    #[param(example = "2h")]
    pub(crate) since: Option<String>,
    /// Runs per page: 1 to 1000 (default 100).
    #[param(value_type = Option<u32>, minimum = 1, maximum = 1000)]
    pub(crate) limit: Option<String>,
    /// The `next` of the previous page: the runs after that one.
    #[param(value_type = Option<String>, format = Uuid)]
    pub(crate) after: Option<String>,
}

/// `GET /workflows?status=S&workflow=NAME&since=T&limit=N&after=ID`: newest
/// first, selected as `awr runs` selects (`application::query`), with the
/// count of each status over every run.
#[utoipa::path(
    get,
    path = "/workflows",
    tag = "runs",
    operation_id = "listRuns",
    summary = "List runs",
    description = "Runs newest first, selected as `awr runs` selects, a page at a time, \
        with the count of each status over every run.",
    params(ListQuery),
    responses(
        (status = 200, description = "A page of runs.", body = RunList),
        (status = 400, response = BadRequest),
        (status = 500, response = Internal),
    ),
    security(("bearer" = ["read"]), ("access_token" = ["read"])),
)]
pub async fn list(
    State(app): State<App>,
    Query(query): Query<ListQuery>,
) -> Result<Json<RunList>, ApiError> {
    Ok(Json(list_runs(&app, query).await?))
}

/// A page of runs as `query` selects them: what `GET /workflows` and the
/// MCP tool `list_runs` answer.
pub(crate) async fn list_runs(app: &App, query: ListQuery) -> Result<RunList, ApiError> {
    let limit = match query.limit.as_deref() {
        None => DEFAULT_LIMIT,
        Some(text) => match text.parse::<usize>() {
            Ok(n) if (1..=MAX_LIMIT).contains(&n) => n,
            _ => {
                return Err(ApiError::bad_request(format!(
                    "limit: `{text}` is not a number from 1 to {MAX_LIMIT}"
                )));
            }
        },
    };
    let mut statuses = Vec::new();
    for name in query
        .status
        .as_deref()
        .map(|s| s.split(','))
        .into_iter()
        .flatten()
    {
        statuses.push(parse_status(name).ok_or_else(|| {
            ApiError::bad_request(format!(
                "status: `{name}` is not a status ({})",
                STATUS_NAMES.join(", ")
            ))
        })?);
    }
    let started_since = match query.since.as_deref() {
        None | Some("") => None,
        Some(text) => {
            let since =
                Since::parse(text).map_err(|e| ApiError::bad_request(format!("since: {e}")))?;
            Some(since.resolve(app.clock().now()))
        }
    };
    let store = app.store();
    // Counts over every run, from what the store records: only the runs
    // recorded `running` are probed for a writer.
    let every = store
        .query_runs(&RunQuery::default())
        .await
        .map_err(store_error)?;
    let counts = Counts::from(count_runs(store.as_ref(), &every).await);
    let after = match query.after.as_deref() {
        None | Some("") => None,
        Some(after) => match every.iter().find(|r| r.run_id.to_string() == after) {
            Some(run) => Some(run.cursor()),
            None => {
                return Err(ApiError::bad_request(format!(
                    "after: no run `{after}` in this list"
                )));
            }
        },
    };
    let filter = RunFilter {
        statuses,
        workflow: query.workflow.filter(|w| !w.is_empty()),
        started_since,
        after,
        // One more than the page tells whether another page follows.
        limit: Some(limit + 1),
    };
    let mut listed = find_runs(store.as_ref(), &filter)
        .await
        .map_err(store_error)?;
    let next = if listed.len() > limit {
        listed.truncate(limit);
        listed.last().map(|run| run.run_id().to_string())
    } else {
        None
    };
    Ok(RunList {
        counts,
        next,
        runs: listed.iter().map(Row::of).collect(),
    })
}

/// `GET /workflows/{id}`: the snapshot, as `awr show RUN --json` prints it.
#[utoipa::path(
    get,
    path = "/workflows/{id}",
    tag = "runs",
    operation_id = "showRun",
    summary = "Show a run",
    description = "The run's snapshot, as `awr show RUN --json` prints it, its `status` as \
        shown (`interrupted` for a run recorded `running` that no process writes).",
    params(RunPath),
    responses(
        (status = 200, description = "The run's snapshot.", body = Snapshot),
        (status = 400, response = BadRequest),
        (status = 404, response = NotFound),
        (status = 500, response = Internal),
    ),
    security(("bearer" = ["read"]), ("access_token" = ["read"])),
)]
pub async fn show(
    State(app): State<App>,
    UrlPath(id): UrlPath<String>,
) -> Result<Response, ApiError> {
    let body = show_run(&app, &id).await?;
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}

/// The run `id` names, as `awr show RUN --json` prints it: what `GET
/// /workflows/{id}` and the MCP tool `get_run` answer.
pub(crate) async fn show_run(app: &App, id: &str) -> Result<String, ApiError> {
    let run_id = resolve(app, id).await?;
    app.store().last_offset(run_id).await.map_err(store_error)?;
    let view = run_view(app.store().as_ref(), run_id)
        .await
        .map_err(store_error)?;
    view.to_json()
        .map_err(|e| ApiError::internal(e.to_string()))
}

/// An executor's refusal or failure as an answer.
fn executor_error(e: ExecutorError) -> ApiError {
    match e {
        ExecutorError::Refused(why) => ApiError::conflict(why),
        ExecutorError::Store(e @ application::ports::StoreError::Locked(_)) => {
            ApiError::conflict(e.to_string())
        }
        ExecutorError::Store(e) => store_error(e),
        other => ApiError::internal(other.to_string()),
    }
}

/// `POST /workflows/{id}/commands`: a [`RuntimeCommand`] as JSON. It goes
/// where `awr pause|cancel|send|reply` sends it; a `resume` of a run no
/// process writes continues it here. `202 {accepted, offset}`, or the
/// reason it was refused (400 for a command that is not one, 409 for one
/// the run cannot take now; recorded, `offset` says where).
#[utoipa::path(
    post,
    path = "/workflows/{id}/commands",
    tag = "runs",
    operation_id = "commandRun",
    summary = "Give a run a command",
    description = "`pause`, `cancel`, `resume`, `send`, `reply`, `approve` or `reject` (which \
        the `approve` scope may send too), as the CLI's commands: to \
        the process writing the run, or recorded by the server when none does. A `resume` \
        of a paused or interrupted run continues it in the server's process. A command the \
        run refuses is recorded all the same and answered 409 (400 when it is not a command \
        at all), `offset` saying where; a command to an ended run is 409 and recorded nowhere.",
    params(RunPath),
    request_body = CommandBody,
    responses(
        (status = 202, description = "The run took the command.", body = Accepted),
        (status = 400, response = BadRequest),
        (status = 404, response = NotFound),
        (status = 409, response = Conflict),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    ),
    security(("bearer" = ["control"]), ("bearer" = ["approve"])),
)]
pub async fn command(
    State(app): State<App>,
    Extension(caller): Extension<Granted>,
    UrlPath(id): UrlPath<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let raw: Value = parse_body(&body)?;
    // `approve` answers questions and commands nothing else.
    let answers = RuntimeCommand::parse(&raw).is_ok_and(|c| c.approval_of().is_some());
    if !answers && !caller.scopes.allow(super::access::Scope::Control) {
        return Err(super::auth::control_needed(&caller));
    }
    let accepted = command_run(&app, caller.name, &id, raw).await?;
    Ok((StatusCode::ACCEPTED, Json(accepted)).into_response())
}

/// Gives the run `id` names the command `raw`, from `by`: what `POST
/// /workflows/{id}/commands` and the MCP command tools do.
pub(crate) async fn command_run(
    app: &App,
    by: Caller,
    id: &str,
    raw: Value,
) -> Result<Accepted, ApiError> {
    if !raw.is_object() {
        return Err(ApiError::bad_request(
            r#"the body must be a command: {"type": "pause" | "cancel" | "resume" | "send" | "reply" | "approve" | "reject", ...}"#,
        ));
    }
    let run_id = resolve(app, id).await?;
    let store = app.store();
    store.last_offset(run_id).await.map_err(store_error)?;
    let parsed = RuntimeCommand::parse(&raw);
    if let Ok(RuntimeCommand::Resume { message }) = &parsed
        && writer_gone(
            store.as_ref(),
            app.clock().as_ref(),
            run_id,
            PAUSED_WRITER_GRACE,
        )
        .await
        .map_err(store_error)?
    {
        return resume(app, run_id, message.clone(), by).await;
    }
    let reply = deliver(app.storage(), run_id, &raw, Some(&by))
        .await
        .map_err(executor_error)?;
    let answers = parsed.as_ref().is_ok_and(|c| c.approval_of().is_some());
    if reply.error.is_none() && answers {
        // A run that waited for this answer goes on in this process.
        let state = application::inspect::current_snapshot(store.as_ref(), run_id)
            .await
            .map_err(store_error)?;
        if state.status == domain::RunStatus::Waiting
            && let Err(e) = resume(app, run_id, None, by).await
        {
            // Another answer's process continued it first: this answer is
            // on record, and its writer settles it.
            let stranded = application::inspect::waits_unwritten(store.as_ref(), run_id)
                .await
                .map_err(store_error)?;
            if stranded {
                return Err(e);
            }
        }
    }
    match reply.error {
        None => Ok(Accepted::at(reply.offset)),
        Some(why) if parsed.is_err() => Err(ApiError::bad_request(why).recorded_at(reply.offset)),
        Some(why) => Err(ApiError::conflict(why).recorded_at(reply.offset)),
    }
}

/// How long a `resume` of a run on record as paused waits for its writer,
/// which has recorded the pause, to let go of the run.
const PAUSED_WRITER_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Starts continuing `run_id` in this process, as `awr recover` would (by
/// nobody: the runtime itself, at a deadline), without waiting for it: the
/// run may go on for hours. An error: its definition cannot be read.
pub(crate) async fn recover(app: &App, run_id: RunId) -> Result<(), ApiError> {
    app.admit()?;
    let store = std::sync::Arc::clone(app.store());
    let (workflow, wired) = wired_for(app.storage(), run_id, None, Some(store), None)
        .await
        .map_err(|e| ApiError::internal(format!("{:#}", e.error())))?;
    app.write(run_id, async move {
        // Another process continuing it first (`Locked`) is no failure.
        if let Err(e) = wired.runtime.recover(run_id, workflow, Cancel::new()).await {
            tracing::info!(run = %run_id, error = %e, "a waiting run past a deadline was not continued here");
        }
    });
    Ok(())
}

/// Continues `run_id` in this process, as `awr resume` would; answers once
/// its `flow:resumed` is on record (or why it was refused).
async fn resume(
    app: &App,
    run_id: RunId,
    message: Option<String>,
    by: Caller,
) -> Result<Accepted, ApiError> {
    app.admit()?;
    let store = std::sync::Arc::clone(app.store());
    let (workflow, wired) = wired_for(app.storage(), run_id, None, Some(store.clone()), None)
        .await
        .map_err(|e| match e {
            Failure::Input(e) => ApiError::conflict(format!("{e:#}")),
            other => ApiError::internal(format!("{:#}", other.error())),
        })?;
    let from = store.last_offset(run_id).await.map_err(store_error)?;
    let mut events = store.follow(run_id, from).await.map_err(store_error)?;
    let (done, ended) = tokio::sync::oneshot::channel();
    app.write(run_id, async move {
        let outcome = wired
            .runtime
            .resume(run_id, workflow, message, Some(by), Cancel::new())
            .await;
        if let Err(e) = &outcome {
            tracing::warn!(run = %run_id, error = %e, "resume failed");
        }
        let _ = done.send(outcome.map(|o| o.status));
    });
    let resumed = async {
        while let Some(event) = events.next().await {
            if let Ok(event) = event
                && matches!(event.kind, EventKind::FlowResumed { .. })
            {
                return Some(event.offset.get());
            }
        }
        None
    };
    let offset = tokio::select! {
        biased;
        Some(offset) = resumed => offset,
        ended = ended => match ended {
            Ok(Err(e)) => return Err(executor_error(e)),
            _ => return Err(ApiError::conflict(format!("run {run_id} was not resumed"))),
        },
    };
    Ok(Accepted::at(offset))
}

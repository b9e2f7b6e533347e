//! `POST /workflows/{id}/fork`: `awr fork` over HTTP. The fork is made
//! here (a bad request makes no run), then runs in this process; `201`
//! answers with the new run, as `POST /workflows` does.

use std::sync::Arc;

use application::fork::ForkRequest;
use application::{Cancel, ExecutorError};
use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, Path as UrlPath, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use domain::Caller;
use serde::Deserialize;
use serde_json::Value;

use super::access::Granted;
use super::answers::{ForkPoint, Forked, Urls};
use super::error::parse_body;
use super::openapi::RunPath;
use super::openapi::refusals::{BadRequest, Conflict, Internal, NotFound, Unavailable};
use super::stream::{resolve, store_error};
use super::{ApiError, App};
use crate::Failure;
use crate::wiring::wired_for;

/// The body of `POST /workflows/{id}/fork`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"at": 12, "input": "Sodium-ion batteries in 2026"}))]
pub(crate) struct ForkBody {
    /// The offset of the parent's last event the fork keeps: from 1,
    /// before the parent's terminal event.
    #[schema(minimum = 1)]
    pub(crate) at: u64,
    /// The input of what runs after the fork point; absent or `null`: the
    /// parent's.
    pub(crate) input: Option<Value>,
}

/// `POST /workflows/{id}/fork` with `{"at": N, "input"?: ...}`.
#[utoipa::path(
    post,
    path = "/workflows/{id}/fork",
    tag = "runs",
    operation_id = "forkRun",
    summary = "Fork a run",
    description = "A new run from this run's state at offset `at`, as `awr fork RUN --at N` \
        makes it, run in the server's process. An `at` of 0, beyond the log or at its \
        terminal event is 400, and so is a workflow file changed since the run started; \
        no run is made then.",
    params(RunPath),
    request_body = ForkBody,
    responses(
        (status = 201, description = "The fork exists and is running.", body = Forked,
            headers(("Location" = String, description = "The fork's URL: `/workflows/{id}`."))),
        (status = 400, response = BadRequest),
        (status = 404, response = NotFound),
        (status = 409, response = Conflict),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    ),
    security(("bearer" = ["control"])),
)]
pub async fn fork(
    State(app): State<App>,
    Extension(caller): Extension<Granted>,
    UrlPath(id): UrlPath<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let body: ForkBody = parse_body(&body)?;
    let forked = fork_run(&app, caller.name, &id, body).await?;
    let location = format!("/workflows/{}", forked.run_id);
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        Json(forked),
    )
        .into_response())
}

/// Forks the run `id` names as `body` says, for `by`, and runs the fork
/// here: what `POST /workflows/{id}/fork` and the MCP tool `fork` do.
pub(crate) async fn fork_run(
    app: &App,
    by: Caller,
    id: &str,
    body: ForkBody,
) -> Result<Forked, ApiError> {
    app.admit()?;
    let parent = resolve(app, id).await?;
    let store = Arc::clone(app.store());
    store.last_offset(parent).await.map_err(store_error)?;
    let (workflow, wired) = wired_for(app.storage(), parent, None, Some(store), None)
        .await
        .map_err(|e| match e {
            Failure::Input(e) => ApiError::conflict(format!("{e:#}")),
            other => ApiError::internal(format!("{:#}", other.error())),
        })?;
    let request = ForkRequest {
        parent,
        at: body.at,
        input: body.input.filter(|i| !i.is_null()),
        by: Some(by),
    };
    let run_id = wired
        .runtime
        .fork(request, &workflow)
        .await
        .map_err(|e| match e {
            ExecutorError::Refused(why) => ApiError::bad_request(why),
            ExecutorError::Store(e) => store_error(e),
            other => ApiError::internal(other.to_string()),
        })?;
    app.write(run_id, async move {
        match wired
            .runtime
            .run_fork(run_id, workflow, Cancel::new())
            .await
        {
            Ok(outcome) => {
                tracing::info!(run = %run_id, status = outcome.status.as_str(), "fork ended");
            }
            Err(e) => tracing::warn!(run = %run_id, error = %e, "fork failed"),
        }
    });
    Ok(Forked {
        forked_from: ForkPoint {
            offset: body.at,
            run_id: parent,
        },
        run_id,
        status: "running",
        urls: Urls::of(run_id),
    })
}

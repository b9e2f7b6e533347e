//! `GET /workflows/{id}/causal`: a run's causal events (seed 002) over HTTP,
//! the lines `awr causal RUN` prints.

use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};

use super::openapi::RunPath;
use super::openapi::refusals::{BadRequest, Internal, NotFound};
use super::stream::{resolve, store_error};
use super::{ApiError, App};

/// `GET /workflows/{id}/causal`: one RFC 8785 JSON line per causal event,
/// parents first, projected from the run's log as it is now (a run in
/// flight shows what it has done so far).
#[utoipa::path(
    get,
    path = "/workflows/{id}/causal",
    tag = "runs",
    operation_id = "causalEvents",
    summary = "A run's causal events (NDJSON)",
    description = "Who sent what to whom: the run's causal events, one RFC 8785 JSON line \
        each, parents first, as `awr causal RUN` prints them, projected from the run's log \
        as it is at the request. Each validates against `schema/causal-event.schema.json`.",
    params(RunPath),
    responses(
        (status = 200, description = "The causal events: one JSON object per line.", body = String,
            content_type = "application/x-ndjson"),
        (status = 400, response = BadRequest),
        (status = 404, response = NotFound),
        (status = 500, response = Internal),
    ),
    security(("bearer" = ["read"]), ("access_token" = ["read"])),
)]
pub async fn causal(State(app): State<App>, Path(id): Path<String>) -> Result<Response, ApiError> {
    let run_id = resolve(&app, &id).await?;
    let events = app
        .store()
        .read(run_id, 0, usize::MAX)
        .await
        .map_err(store_error)?;
    if events.is_empty() {
        return Err(ApiError::not_found(format!("run {run_id} has no events")));
    }
    let mut body = Vec::new();
    for event in domain::causal::project(&events, &run_id.to_string()) {
        let line = domain::canonical::jcs(&event).map_err(|e| ApiError::internal(e.to_string()))?;
        body.extend_from_slice(&line);
        body.push(b'\n');
    }
    Ok(([(header::CONTENT_TYPE, "application/x-ndjson")], body).into_response())
}

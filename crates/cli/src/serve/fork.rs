//! `POST /workflows/{id}/fork`: `awr fork` over HTTP. The fork is made
//! here (a bad request makes no run), then runs in this process; `201`
//! answers with the new run, as `POST /workflows` does.

use std::sync::Arc;

use application::fork::ForkRequest;
use application::{Cancel, ExecutorError};
use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path as UrlPath, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::error::parse_body;
use super::runs::urls;
use super::stream::{resolve, store_error};
use super::{ApiError, App};
use crate::Failure;
use crate::commands::control::wired_for;

/// The body of `POST /workflows/{id}/fork`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ForkBody {
    /// The offset of the parent's last event the fork keeps (from 1).
    at: u64,
    /// The input of what runs after the fork point; absent or null: the
    /// parent's.
    input: Option<Value>,
}

/// `POST /workflows/{id}/fork` with `{"at": N, "input"?: ...}`.
pub async fn fork(
    State(app): State<App>,
    UrlPath(id): UrlPath<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    app.admit()?;
    let body: ForkBody = parse_body(&body)?;
    let parent = resolve(&app, &id).await?;
    let store = Arc::clone(app.store());
    store.last_offset(parent).await.map_err(store_error)?;
    let (workflow, wired) = wired_for(app.storage(), parent, None, Some(store))
        .await
        .map_err(|e| match e {
            Failure::Input(e) => ApiError::conflict(format!("{e:#}")),
            other => ApiError::internal(format!("{:#}", other.error())),
        })?;
    let request = ForkRequest {
        parent,
        at: body.at,
        input: body.input.filter(|i| !i.is_null()),
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
    let body = json!({
        "runId": run_id,
        "status": "running",
        "forkedFrom": {"runId": parent, "offset": body.at},
        "urls": urls(run_id),
    });
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, format!("/workflows/{run_id}"))],
        Json(body),
    )
        .into_response())
}

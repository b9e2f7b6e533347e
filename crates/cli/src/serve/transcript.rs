//! `GET /workflows/{id}/transcript`: a run's exchange transcript over HTTP.

use axum::extract::{Extension, Path, Query, State};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;

use super::access::Granted;
use super::frame::{Frame, body, stream_headers, with_heartbeats};
use super::openapi::RunPath;
use super::openapi::refusals::{BadRequest, Internal, NotFound, Unavailable};
use super::stream::{StreamQuery, resolve};
use super::{ApiError, App};
use application::transcript::{Follow, Line, transcript_lines};

/// `GET /workflows/{id}/transcript[?follow=true]`: the transcript's lines
/// as stored (NDJSON); with `follow`, then new lines until the run's
/// `run.completed` or until no process writes the run (heartbeats
/// meanwhile), or the server shuts down.
#[utoipa::path(
    get,
    path = "/workflows/{id}/transcript",
    tag = "streams",
    operation_id = "streamTranscript",
    summary = "A run's exchange transcript (NDJSON)",
    description = "The transcript's lines as stored, one per line; with `follow=true`, then \
        each line as it is written, until the run's `run.completed` line or until no \
        process writes the run, with `{\"type\":\"heartbeat\"}` lines while idle.",
    params(
        RunPath,
        ("follow" = Option<bool>, Query, description = "Go on with the lines written after the request (`true`, `1` or empty; `false` or `0`: not)."),
    ),
    responses(
        (status = 200, description = "The transcript: one JSON value per line.", body = String,
            content_type = "application/x-ndjson", headers(
                ("Cache-Control" = String, description = "`no-cache`."),
                ("X-Accel-Buffering" = String, description = "`no`, so a proxy does not buffer it."),
            )),
        (status = 400, response = BadRequest),
        (status = 404, response = NotFound),
        (status = 500, response = Internal),
        (status = 503, response = Unavailable),
    ),
    security(("bearer" = ["read"]), ("access_token" = ["read"])),
)]
pub async fn transcript(
    State(app): State<App>,
    Extension(caller): Extension<Granted>,
    Path(id): Path<String>,
    Query(query): Query<StreamQuery>,
) -> Result<Response, ApiError> {
    let follow = match query.follow.as_deref() {
        None | Some("false" | "0") => false,
        Some("true" | "1" | "") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "follow: `{other}` is not true or false"
            )));
        }
    };
    let run_id = resolve(&app, &id).await?;
    let follow = follow.then(|| Follow {
        store: std::sync::Arc::clone(app.store()),
        clock: std::sync::Arc::clone(app.clock()),
    });
    // The slot first: a client at its cap makes the server read nothing.
    let slot = app.streams().take(&caller.name)?;
    let reader = crate::wiring::transcript_reader(app.storage());
    let transcript = transcript_lines(reader, run_id, follow)
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .ok_or_else(|| ApiError::not_found(format!("run {run_id} has no transcript")))?;
    let mut stopping = app.stopping();
    let transcript = transcript
        .filter_map(move |line| async move {
            match line {
                Ok(Line::Event(event)) => match serde_json::to_string(&event) {
                    Ok(json) => Some(Frame::Event {
                        offset: event.seq,
                        json: json.into(),
                    }),
                    Err(_) => None,
                },
                Ok(Line::Bad(problem)) => {
                    tracing::warn!(run = %run_id, %problem, "skipping a bad line of the transcript");
                    None
                }
                Err(e) => {
                    tracing::warn!(run = %run_id, error = %e, "cannot read the transcript");
                    None
                }
            }
        })
        .take_until(async move {
            let _ = stopping.wait_for(|stop| *stop).await;
        });
    let every = app.config().heartbeat;
    Ok((
        stream_headers("application/x-ndjson"),
        body(with_heartbeats(transcript, every), Frame::ndjson, slot),
    )
        .into_response())
}

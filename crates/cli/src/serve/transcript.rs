//! `GET /workflows/{id}/transcript`: a run's exchange transcript over HTTP.

use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;

use super::frame::{Frame, body, stream_headers, with_heartbeats};
use super::stream::{StreamQuery, resolve};
use super::{ApiError, App};
use crate::commands::transcript::{Line, lines};

/// `GET /workflows/{id}/transcript[?follow=true]`: the transcript's lines
/// as stored (NDJSON); with `follow`, then new lines until the run's
/// `run.completed` or until no process writes the run (heartbeats
/// meanwhile), or the server shuts down.
pub async fn transcript(
    State(app): State<App>,
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
    let path = infrastructure::transcript_path(app.storage().files(), run_id);
    if !path.exists() {
        return Err(ApiError::not_found(format!(
            "run {run_id} has no transcript"
        )));
    }
    let mut stopping = app.stopping();
    let follow = follow.then(|| (std::sync::Arc::clone(app.store()), run_id));
    let transcript = lines(path, follow)
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
        body(with_heartbeats(transcript, every), Frame::ndjson),
    )
        .into_response())
}

//! What a stream sends a client ([`Frame`]), encoded as NDJSON lines or
//! SSE events, and the body that carries them: the frames ready together
//! in one chunk, a heartbeat after each silence (docs/http.md, "Streaming").

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, header};
use futures::{Stream, StreamExt};
use serde_json::json;

use super::limits::Slot;

/// Most frames sent to a client in one body chunk.
const CHUNK_FRAMES: usize = 512;

/// What a client is sent.
#[derive(Debug, Clone)]
pub enum Frame {
    /// An event of the log, as stored.
    Event { offset: u64, json: Arc<str> },
    /// Nothing more will come: the run ended with `status`, or the server
    /// shuts down (`reason`) and the run is `status` now.
    End {
        status: String,
        last_offset: u64,
        reason: Option<&'static str>,
    },
    /// Nothing happened for a while; the connection is alive.
    Heartbeat {
        /// The silence after which one is sent (the page's watchdog reads it).
        every: Duration,
    },
}

impl Frame {
    /// Appends the frame as one NDJSON line.
    pub(super) fn ndjson(&self, out: &mut Vec<u8>) {
        match self {
            Frame::Event { json, .. } => out.extend_from_slice(json.as_bytes()),
            Frame::End { .. } => {
                let mut end = self.end_json();
                end["type"] = "end".into();
                out.extend_from_slice(end.to_string().as_bytes());
            }
            Frame::Heartbeat { .. } => out.extend_from_slice(br#"{"type":"heartbeat"}"#),
        }
        out.push(b'\n');
    }

    /// Appends the frame as one SSE event. Every field is one line: event
    /// JSON is compact (a newline inside a string is escaped), and an id is
    /// digits. A heartbeat is a named event (`heartbeat`, no id) with the
    /// interval, not a comment: a browser's `EventSource` drops comments,
    /// and a page needs to see heartbeats to tell a quiet run from a dead
    /// connection.
    pub(super) fn sse(&self, out: &mut Vec<u8>) {
        match self {
            Frame::Event { offset, json } => {
                out.extend_from_slice(b"id: ");
                out.extend_from_slice(offset.to_string().as_bytes());
                out.extend_from_slice(b"\ndata: ");
                out.extend_from_slice(json.as_bytes());
                out.push(b'\n');
            }
            Frame::End { .. } => {
                out.extend_from_slice(b"event: end\ndata: ");
                out.extend_from_slice(self.end_json().to_string().as_bytes());
                out.push(b'\n');
            }
            Frame::Heartbeat { every } => {
                out.extend_from_slice(b"event: heartbeat\ndata: ");
                let data = json!({"heartbeatMs": every.as_millis()});
                out.extend_from_slice(data.to_string().as_bytes());
                out.push(b'\n');
            }
        }
        out.push(b'\n');
    }

    fn end_json(&self) -> serde_json::Value {
        match self {
            Frame::End {
                status,
                last_offset,
                reason,
            } => {
                let mut end = json!({"status": status, "lastOffset": last_offset});
                if let Some(reason) = reason {
                    end["reason"] = (*reason).into();
                }
                end
            }
            _ => serde_json::Value::Null,
        }
    }
}

/// `frames`, with a heartbeat whenever it stays silent for `every`.
pub(super) fn with_heartbeats<S>(frames: S, every: Duration) -> impl Stream<Item = Frame>
where
    S: Stream<Item = Frame>,
{
    async_stream::stream! {
        let mut frames = std::pin::pin!(frames);
        loop {
            match tokio::time::timeout(every, frames.next()).await {
                Ok(Some(frame)) => yield frame,
                Ok(None) => return,
                Err(_) => yield Frame::Heartbeat { every },
            }
        }
    }
}

/// The body of a stream of frames, each encoded by `encode`. The frames
/// ready at once (a batch of history, live events that came while the
/// client's last chunk was being written) go out as one chunk: a client
/// costs a write per batch, not per event, and the busier the run, the
/// larger the batches. The body holds its stream's `slot` until it ends.
pub(super) fn body<S>(frames: S, encode: fn(&Frame, &mut Vec<u8>), slot: Slot) -> Body
where
    S: Stream<Item = Frame> + Send + 'static,
{
    Body::from_stream(frames.ready_chunks(CHUNK_FRAMES).map(move |batch| {
        let _held = &slot;
        let mut out = Vec::new();
        for frame in &batch {
            encode(frame, &mut out);
        }
        Ok::<_, Infallible>(Bytes::from(out))
    }))
}

/// Headers of every stream: no caching, no buffering by a proxy.
pub(super) fn stream_headers(content_type: &'static str) -> [(header::HeaderName, HeaderValue); 3] {
    [
        (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
        (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        (
            header::HeaderName::from_static("x-accel-buffering"),
            HeaderValue::from_static("no"),
        ),
    ]
}

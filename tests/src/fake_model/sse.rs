//! Response building shared by the four wire formats: JSON replies, SSE
//! frames, ids, and the way text is cut into deltas. Kept in one place so the
//! formats differ only in their event shapes, not in framing details.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use serde_json::Value;

/// A JSON reply with optional extra headers (`retry-after`, request ids).
pub(super) fn json(status: StatusCode, body: &Value, extra: &[(&'static str, String)]) -> Response {
    let mut resp = Response::new(Body::from(body.to_string()));
    *resp.status_mut() = status;
    let headers = resp.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    for (name, value) in extra {
        if let Ok(value) = HeaderValue::from_str(value) {
            headers.insert(HeaderName::from_static(name), value);
        }
    }
    resp
}

/// A JSON reply cut in half (status 200): the non-streaming form of
/// `CUTSTREAM`, a body that ends before the document does.
pub(super) fn cut_json(body: &Value) -> Response {
    let text = body.to_string();
    let mut cut = text.len() / 2;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut resp = Response::new(Body::from(text[..cut].to_owned()));
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

/// An empty reply, for `HEAD` probes.
pub(super) fn status_only(status: StatusCode) -> Response {
    let mut resp = Response::new(Body::empty());
    *resp.status_mut() = status;
    resp
}

/// A `text/event-stream` reply sending each frame as its own body chunk, as a
/// real server flushes each event. The connection stays open for the next
/// request, as with the real APIs, so clients that reuse it are tested too.
pub(super) fn stream(frames: Vec<String>) -> Response {
    stream_of(futures::stream::iter(
        frames.into_iter().map(Ok::<String, Infallible>),
    ))
}

/// A `text/event-stream` reply with `chunks` as its body.
fn stream_of(
    chunks: impl futures::Stream<Item = Result<String, Infallible>> + Send + 'static,
) -> Response {
    let mut resp = Response::new(Body::from_stream(chunks));
    let headers = resp.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

/// A `text/event-stream` reply whose body never sends a byte nor ends:
/// a model stalled mid-call. It lasts until the client goes away.
pub(super) fn held() -> Response {
    stream_of(futures::stream::pending::<Result<String, Infallible>>())
}

/// One SSE frame: an optional `event:` line, one `data:` line, a blank line.
/// `crlf` reproduces Gemini's `\r\n` line endings, which clients must accept.
pub(super) fn frame(event: Option<&str>, data: &Value, crlf: bool) -> String {
    raw_frame(event, &data.to_string(), crlf)
}

/// Like [`frame`] but with data that is not JSON (Chat Completions' `[DONE]`).
pub(super) fn raw_frame(event: Option<&str>, data: &str, crlf: bool) -> String {
    let nl = if crlf { "\r\n" } else { "\n" };
    let mut out = String::new();
    if let Some(event) = event {
        out.push_str(&format!("event: {event}{nl}"));
    }
    out.push_str(&format!("data: {data}{nl}{nl}"));
    out
}

/// Cuts text into words with their trailing whitespace, so concatenating the
/// deltas gives back the text; clients that re-join deltas are exercised.
pub(super) fn words(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut current = String::new();
    let mut in_space = false;
    for c in text.trim_start().chars() {
        if !c.is_whitespace() && in_space {
            out.push(std::mem::take(&mut current));
            in_space = false;
        }
        in_space |= c.is_whitespace();
        current.push(c);
    }
    if !current.is_empty() {
        out.push(current);
    }
    if out.is_empty() {
        out.push(text.to_owned());
    }
    out
}

/// Cuts a JSON argument string into 12-character pieces (on char boundaries),
/// so clients must concatenate partial JSON before parsing it.
pub(super) fn pieces(s: &str) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    chars.chunks(12).map(|c| c.iter().collect()).collect()
}

/// A fresh id with the provider's prefix (`msg_`, `call_`, …). A counter, not
/// randomness: unique within the process is all the clients need.
pub(super) fn id(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!("{prefix}{:020x}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Seconds since the epoch, for the `created` fields; 0 if the clock is
/// before 1970, which no client checks.
pub(super) fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Converts the scenario's status, falling back to 500 (never hit: the
/// scenario only produces 400, 429 and 500).
pub(super) fn status_code(status: u16) -> StatusCode {
    StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_rejoin_to_the_text() {
        let w = words("Hello from  the fake server.");
        assert_eq!(w, ["Hello ", "from  ", "the ", "fake ", "server."]);
        assert_eq!(w.concat(), "Hello from  the fake server.");
    }

    #[test]
    fn pieces_rejoin_to_the_string() {
        let s = r#"{"command":"echo hi","description":"Print hi"}"#;
        assert_eq!(pieces(s).concat(), s);
        assert!(pieces(s).iter().all(|p| p.chars().count() <= 12));
    }
}

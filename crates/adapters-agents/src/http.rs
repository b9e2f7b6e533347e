//! What the HTTP providers share: the [`ChatModel`](application::ports::ChatModel)
//! that sends a turn ([`chat`]), the client, the API key, the mapping of
//! HTTP failures onto [`ChatError`] kinds, and the SSE framing.
//!
//! The API key is read from the environment variable the agent names, at the
//! moment of the call, and goes nowhere but into a request header: no error
//! message, event or log line here ever contains it.

mod chat;

pub use chat::HttpChat;
pub(crate) use chat::{ChatApi, Headers};

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use application::ports::{ChatError, ChatEvent, ChatStream, StopReason, TurnEnd};
use domain::event::Usage;
use domain::workflow::AgentDef;
use eventsource_stream::{Event, Eventsource};
use futures::{Stream, StreamExt};
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use reqwest::{RequestBuilder, Response, StatusCode, Url};
use serde_json::{Value, json};

/// How long connecting may take before the attempt counts as a network error.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// One client per process: it pools connections across turns and runs.
pub(crate) fn client() -> Result<reqwest::Client, ChatError> {
    static CLIENT: OnceLock<Result<reqwest::Client, String>> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            // reqwest is built without a default crypto provider (ring is
            // lighter to build than aws-lc); an earlier install is fine.
            let _ = rustls::crypto::ring::default_provider().install_default();
            reqwest::Client::builder()
                .connect_timeout(CONNECT_TIMEOUT)
                .user_agent(concat!("awr/", env!("CARGO_PKG_VERSION")))
                .build()
                .map_err(|e| e.to_string())
        })
        .clone()
        .map_err(|e| ChatError::Config(format!("cannot build the HTTP client: {e}")))
}

/// Where API keys come from: a lookup by variable name. The process
/// environment in production ([`KeySource::env`]); tests pass their own,
/// since a test cannot safely change its process's environment.
#[derive(Clone)]
pub struct KeySource(Arc<Lookup>);

/// A variable name in, its value out.
type Lookup = dyn Fn(&str) -> Option<String> + Send + Sync;

impl KeySource {
    /// Reads the process environment.
    pub fn env() -> Self {
        Self(Arc::new(|name| std::env::var(name).ok()))
    }

    /// Looks keys up with `lookup`.
    pub fn from_fn(lookup: impl Fn(&str) -> Option<String> + Send + Sync + 'static) -> Self {
        Self(Arc::new(lookup))
    }

    /// The key in the variable named by the agent's `api_key_env` (else
    /// its provider's usual one). `Ok(None)` when that default variable is
    /// unset but a `base_url` is given: a local server needs no key.
    /// Otherwise a missing key is an error naming the variable, never a value.
    pub(crate) fn key(&self, agent: &AgentDef) -> Result<Option<String>, ChatError> {
        let Some(var) = agent.key_env() else {
            return Err(ChatError::Config(format!(
                "provider `{}` takes no API key",
                agent.provider.as_str()
            )));
        };
        match (self.0)(var) {
            Some(key) if !key.trim().is_empty() => Ok(Some(key.trim().to_owned())),
            _ if agent.api_key_env.is_none() && agent.base_url.is_some() => Ok(None),
            _ => Err(ChatError::Config(format!(
                "the API key variable `{var}` is not set (set it, or name another with `api_key_env`)"
            ))),
        }
    }
}

/// A header carrying `key`, marked sensitive so no `Debug` output shows it.
pub(crate) fn key_header(key: &str, agent: &AgentDef) -> Result<HeaderValue, ChatError> {
    let mut value = HeaderValue::from_str(key).map_err(|_| {
        let var = agent.key_env().unwrap_or("api_key_env");
        ChatError::Config(format!(
            "the API key in `{var}` has characters a header cannot carry"
        ))
    })?;
    value.set_sensitive(true);
    Ok(value)
}

impl Default for KeySource {
    fn default() -> Self {
        Self::env()
    }
}

impl std::fmt::Debug for KeySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeySource")
    }
}

/// `base_url` of the agent (else `default`) joined with `path`, checked
/// here so a typo is a configuration error rather than a network one. The
/// URL is left out of the message: it may carry credentials.
pub(crate) fn endpoint(agent: &AgentDef, default: &str, path: &str) -> Result<Url, ChatError> {
    let base = agent.base_url.as_deref().unwrap_or(default);
    let joined = format!(
        "{}/{}",
        base.trim_end_matches('/'),
        path.trim_start_matches('/')
    );
    let url = Url::parse(&joined)
        .map_err(|e| ChatError::Config(format!("`base_url` does not make a valid URL ({e})")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(ChatError::Config(format!(
            "`base_url` must start with http:// or https:// (it starts with `{}:`)",
            url.scheme()
        )));
    }
    Ok(url)
}

/// POSTs a JSON `body` with the provider's `headers` (its key, its
/// version) and [`send`]s it: how every HTTP provider sends a turn.
pub(crate) async fn post_json(
    agent: &AgentDef,
    url: Url,
    headers: Vec<(HeaderName, HeaderValue)>,
    body: impl Into<reqwest::Body>,
) -> Result<Response, ChatError> {
    let mut builder = client()?
        .post(url)
        .header(CONTENT_TYPE, "application/json")
        .body(body);
    for (name, value) in headers {
        builder = builder.header(name, value);
    }
    send(builder, agent).await
}

/// Sends a request; a non-success status becomes the matching [`ChatError`]
/// with the provider's own message.
pub(crate) async fn send(request: RequestBuilder, agent: &AgentDef) -> Result<Response, ChatError> {
    let request = match agent.timeout {
        Some(timeout) => request.timeout(timeout.0),
        None => request,
    };
    let response = request
        .header(ACCEPT, "text/event-stream")
        .send()
        .await
        .map_err(network)?;
    let status = response.status();
    if status.is_success() {
        return expect_stream(response).await;
    }
    let retry_after = retry_after(response.headers());
    // The body of an error is small; one that cannot be read says nothing more than its status.
    let body = response.text().await.unwrap_or_default();
    Err(status_error(status, &body, retry_after))
}

/// A success that is a JSON document instead of an event stream (a server
/// that ignored `stream: true`, or one that reports errors with status 200)
/// is refused with what it said, rather than read as a stream that ended.
async fn expect_stream(response: Response) -> Result<Response, ChatError> {
    let is_json = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("application/json"));
    if !is_json {
        return Ok(response);
    }
    let status = response.status().as_u16();
    let text = response.text().await.map_err(network)?;
    let said = error_message(&text).unwrap_or_else(|| "an empty body".to_owned());
    Err(ChatError::Api {
        status: Some(status),
        message: format!("expected an event stream, got JSON: {said}"),
        retryable: false,
    })
}

/// The error for an HTTP failure status: 429 is a rate limit, 5xx (and 529,
/// Anthropic's "overloaded") may be retried, any other 4xx fails at once.
pub(crate) fn status_error(
    status: StatusCode,
    body: &str,
    retry_after: Option<Duration>,
) -> ChatError {
    let message = error_message(body).unwrap_or_else(|| {
        status
            .canonical_reason()
            .unwrap_or("no error message")
            .to_owned()
    });
    if status == StatusCode::TOO_MANY_REQUESTS {
        return ChatError::RateLimited {
            message,
            retry_after,
        };
    }
    ChatError::Api {
        status: Some(status.as_u16()),
        message,
        retryable: status.is_server_error() || status.as_u16() == 529,
    }
}

/// The provider's message in an error body: `{"error": {"message": ...}}`
/// (OpenAI and Anthropic alike), `{"error": "..."}` or `{"message": ...}`
/// (some compatible servers), else the body's text, shortened.
pub(crate) fn error_message(body: &str) -> Option<String> {
    let text = body.trim();
    if text.is_empty() {
        return None;
    }
    let Ok(json) = serde_json::from_str::<Value>(text) else {
        return Some(text.chars().take(500).collect());
    };
    let error = json.get("error").unwrap_or(&json);
    error
        .get("message")
        .and_then(Value::as_str)
        .or_else(|| error.as_str())
        .map(str::to_owned)
        .or_else(|| Some(text.chars().take(500).collect()))
}

/// `retry-after-ms` (OpenAI) or `retry-after` in seconds. The HTTP-date form
/// is not honoured: the backoff then applies.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(ms) = header("retry-after-ms").and_then(|v| v.trim().parse::<f64>().ok()) {
        return Duration::try_from_secs_f64(ms / 1000.0).ok();
    }
    header("retry-after")
        .and_then(|v| v.trim().parse::<f64>().ok())
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
}

/// A failure of the connection or of reading the stream.
pub(crate) fn network(error: reqwest::Error) -> ChatError {
    let what = if error.is_timeout() {
        "timed out"
    } else if error.is_connect() {
        "could not connect"
    } else {
        "connection failed"
    };
    // Without the URL: it may carry credentials in its query or user info.
    ChatError::Network(format!("{what}: {}", error.without_url()))
}

/// The response body as server-sent events; a broken connection or bad
/// UTF-8 ends it with a network error.
pub(crate) fn events(response: Response) -> impl Stream<Item = Result<Event, ChatError>> + Send {
    response.bytes_stream().eventsource().map(|item| {
        item.map_err(|e| match e {
            eventsource_stream::EventStreamError::Transport(e) => network(e),
            other => ChatError::Network(format!("the event stream is malformed: {other}")),
        })
    })
}

/// Fails `events` as a network error when `idle` passes without its next
/// item.
pub(crate) fn idle_limited<S>(
    events: S,
    idle: Duration,
) -> impl Stream<Item = Result<Event, ChatError>> + Send
where
    S: Stream<Item = Result<Event, ChatError>> + Send + 'static,
{
    async_stream::stream! {
        let mut events = Box::pin(events);
        loop {
            match tokio::time::timeout(idle, events.next()).await {
                Ok(Some(item)) => yield item,
                Ok(None) => return,
                Err(_) => {
                    yield Err(silent(idle));
                    return;
                }
            }
        }
    }
}

/// The error of a server that sent nothing for `idle`.
pub(crate) fn silent(idle: Duration) -> ChatError {
    ChatError::Network(format!(
        "timed out: the server sent nothing for {} s (set the agent's `timeout` to wait longer)",
        idle.as_secs_f64()
    ))
}

/// How long a finished turn waits for the rest of its response: the end of
/// the body, so the connection goes back to the pool and the next turn
/// skips a new connection (and TLS handshake). A server that holds the
/// connection open after the turn costs at most this, once.
const DRAIN: Duration = Duration::from_millis(200);

/// One streamed turn's decoder, fed one server-sent event at a time.
pub(crate) trait TurnDecoder: Send + 'static {
    /// Decodes one event.
    fn on_event(&mut self, event: &Event) -> Result<Vec<ChatEvent>, ChatError>;
    /// Whether the turn is over.
    fn is_done(&self) -> bool;
    /// The stream ended: ends the turn, or says it was cut.
    fn finish(self) -> Result<Vec<ChatEvent>, ChatError>;
}

/// Drives `decoder` over `events`: yields what it decodes, stops at the
/// first error, and once the turn is over reads the response to its end
/// (within [`DRAIN`]) before the last events go out.
pub(crate) fn decode<D, S>(mut decoder: D, events: S) -> ChatStream
where
    D: TurnDecoder,
    S: Stream<Item = Result<Event, ChatError>> + Send + 'static,
{
    Box::pin(async_stream::stream! {
        let mut events = Box::pin(events);
        while let Some(item) = events.next().await {
            match item.and_then(|e| decoder.on_event(&e)) {
                Ok(decoded) => {
                    if decoder.is_done() {
                        let rest = async { while events.next().await.is_some() {} };
                        // Whatever comes after the end is ignored; only the
                        // connection's reuse is at stake.
                        let _ = tokio::time::timeout(DRAIN, rest).await;
                    }
                    for event in decoded {
                        yield Ok(event);
                    }
                }
                Err(error) => {
                    yield Err(error);
                    return;
                }
            }
            if decoder.is_done() {
                return;
            }
        }
        match decoder.finish() {
            Ok(decoded) => {
                for event in decoded {
                    yield Ok(event);
                }
            }
            Err(error) => yield Err(error),
        }
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    /// A model's arguments are parsed, unless they nest too deeply for the
    /// log to read back: then they stay the text the model sent.
    #[test]
    fn tool_arguments_too_deep_for_the_log_stay_text() {
        assert_eq!(
            call_input(r#"{"path": "a"}"#.into(), None),
            serde_json::json!({"path": "a"})
        );
        let deep = format!("{}{}", "[".repeat(127), "]".repeat(127));
        assert_eq!(call_input(deep.clone(), None), Value::String(deep));
    }

    #[test]
    fn statuses_map_to_kinds() {
        let body = r#"{"error": {"message": "slow down", "type": "rate_limit_error"}}"#;
        let e = status_error(
            StatusCode::TOO_MANY_REQUESTS,
            body,
            Some(Duration::from_secs(2)),
        );
        assert_eq!(
            e,
            ChatError::RateLimited {
                message: "slow down".into(),
                retry_after: Some(Duration::from_secs(2))
            }
        );
        assert_eq!(e.kind(), domain::ErrorKind::RateLimit);
        let e = status_error(StatusCode::INTERNAL_SERVER_ERROR, "", None);
        assert!(e.is_transient());
        assert_eq!(e.to_string(), "API error (HTTP 500): Internal Server Error");
        let e = status_error(StatusCode::BAD_REQUEST, r#"{"error": "bad model"}"#, None);
        assert!(!e.is_transient());
        assert_eq!(e.to_string(), "API error (HTTP 400): bad model");
        let overloaded = StatusCode::from_u16(529).unwrap();
        assert!(status_error(overloaded, "{}", None).is_transient());
    }

    #[test]
    fn retry_after_reads_seconds_and_milliseconds() {
        let mut headers = HeaderMap::new();
        assert_eq!(retry_after(&headers), None);
        headers.insert("retry-after", HeaderValue::from_static("3"));
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(3)));
        headers.insert("retry-after-ms", HeaderValue::from_static("250"));
        assert_eq!(retry_after(&headers), Some(Duration::from_millis(250)));
        let mut dated = HeaderMap::new();
        dated.insert(
            "retry-after",
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(retry_after(&dated), None);
    }

    #[test]
    fn a_missing_key_names_the_variable_only() {
        let keys = KeySource::from_fn(|name| (name == "MY_KEY").then(|| "sk-secret".to_owned()));
        let mut agent = AgentDef::new(domain::workflow::Provider::OpenAi);
        assert!(keys.key(&agent).is_err());
        agent.api_key_env = Some("MY_KEY".into());
        assert_eq!(keys.key(&agent).unwrap().as_deref(), Some("sk-secret"));
        agent.api_key_env = Some("OTHER_KEY".into());
        agent.base_url = Some("http://127.0.0.1:9/v1".into());
        let e = keys.key(&agent).unwrap_err();
        assert!(e.to_string().contains("`OTHER_KEY`"), "{e}");
        assert!(!e.to_string().contains("sk-"), "{e}");
        // A local server with the default variable unset: no key, no error.
        agent.api_key_env = None;
        assert_eq!(keys.key(&agent).unwrap(), None);
        let header = key_header("sk-secret", &agent).unwrap();
        assert!(!format!("{header:?}").contains("sk-secret"));
        assert!(key_header("bad\nkey", &agent).is_err());
    }

    #[test]
    fn endpoints_join_cleanly_and_refuse_what_is_not_http() {
        let mut agent = AgentDef::new(domain::workflow::Provider::OpenAi);
        let url = endpoint(&agent, "https://api.openai.com/v1", "chat/completions").unwrap();
        assert_eq!(url.as_str(), "https://api.openai.com/v1/chat/completions");
        agent.base_url = Some("http://127.0.0.1:9/v1/".into());
        let url = endpoint(&agent, "x", "/chat/completions").unwrap();
        assert_eq!(url.as_str(), "http://127.0.0.1:9/v1/chat/completions");
        agent.base_url = Some("ftp://user:pw@host".into());
        let e = endpoint(&agent, "x", "v1/messages").unwrap_err();
        assert!(
            matches!(&e, ChatError::Config(m) if !m.contains("pw")),
            "{e}"
        );
        agent.base_url = Some("localhost:8080/v1".into());
        assert!(endpoint(&agent, "x", "v1").is_err());
    }
}

/// How much of unreadable data an error message quotes: enough to recognise
/// an HTML error page or a proxy's banner, not a whole page.
const QUOTE_CHARS: usize = 200;

/// `data`, trimmed and shortened to [`QUOTE_CHARS`].
pub(crate) fn quote(data: &str) -> String {
    let mut chars = data.trim().chars();
    let mut quoted: String = chars.by_ref().take(QUOTE_CHARS).collect();
    if chars.next().is_some() {
        quoted.push('…');
    }
    quoted
}

/// Data a decoder cannot read: the server is not speaking the API (a
/// proxy's page, a wrong `base_url`), which a retry will not fix.
pub(crate) fn unreadable(message: String) -> ChatError {
    ChatError::Api {
        status: None,
        message,
        retryable: false,
    }
}

/// A tool call's input from the JSON text the model streamed: none at all
/// means no arguments (or the input given whole at the start, when an
/// object); text that is not JSON stays a string, for the tool loop's
/// schema check to refuse with a reason the model can act on.
pub(crate) fn call_input(raw: String, given: Option<Value>) -> Value {
    if raw.trim().is_empty() {
        return match given {
            Some(input) if input.is_object() => input,
            _ => json!({}),
        };
    }
    // Arguments nested too deeply for the log to read back stay their text.
    match serde_json::from_str(&raw) {
        Ok(input) if !domain::output::nests_deeper(&input, domain::output::MAX_DEPTH) => input,
        _ => Value::String(raw),
    }
}

/// What a streamed turn learns besides its content, kept until its end.
#[derive(Debug, Default)]
pub(crate) struct TurnMeta {
    /// Token counts so far.
    pub usage: Usage,
    /// The model that answers.
    pub model: Option<String>,
    /// The provider's id of the response.
    pub response_id: Option<String>,
    /// Why the model stopped, once said.
    pub stop: Option<StopReason>,
    /// A tool call was emitted: the stop reason when a server gives none.
    pub called: bool,
}

impl TurnMeta {
    /// The [`ChatEvent::End`] of the turn.
    pub fn end(&mut self) -> ChatEvent {
        let stop = self.stop.take().unwrap_or(if self.called {
            StopReason::ToolUse
        } else {
            StopReason::EndTurn
        });
        ChatEvent::End(TurnEnd {
            stop,
            usage: std::mem::take(&mut self.usage),
            model: self.model.take(),
            response_id: self.response_id.take(),
        })
    }
}

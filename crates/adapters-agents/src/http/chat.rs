//! [`HttpChat`]: the one [`ChatModel`] of every HTTP provider. A provider
//! brings only its [`ChatApi`] (where the API is, the body and headers of
//! a turn) and its turn decoder; sending a turn is the same for all.

use std::marker::PhantomData;
use std::time::Duration;

use application::ports::{ChatError, ChatModel, ChatRequest, ChatStream};
use async_trait::async_trait;
use domain::workflow::AgentDef;
use reqwest::header::{HeaderName, HeaderValue};
use serde_json::Value;

use super::{KeySource, TurnDecoder};

/// A request's headers.
pub(crate) type Headers = Vec<(HeaderName, HeaderValue)>;

/// What an HTTP provider holds of its own, implemented by its turn decoder.
pub(crate) trait ChatApi: TurnDecoder + Default {
    /// The provider's name, as [`ChatModel::provider`] gives it.
    const PROVIDER: &'static str;
    /// Where the API is when the agent sets no `base_url`.
    const DEFAULT_BASE_URL: &'static str;
    /// The streamed turn's endpoint, below the base URL.
    const PATH: &'static str;

    /// The JSON body of one streamed turn; a configuration error when the
    /// agent's settings cannot make one (no model).
    fn body(request: &ChatRequest) -> Result<Value, ChatError>;

    /// The headers of a turn: the API key, when there is one, as a
    /// sensitive header ([`super::key_header`]), and what else the API wants.
    fn headers(key: Option<&str>, agent: &AgentDef) -> Result<Headers, ChatError>;
}

/// Runs model turns on the HTTP API of `A`.
///
/// Holds no key, only where to look it up: the key is read at each turn, so
/// a rotated key is picked up without a restart, and `Debug` cannot show it.
#[derive(Debug)]
pub struct HttpChat<A> {
    /// Where the API key comes from (the environment, or a test's lookup).
    keys: KeySource,
    /// How long a turn of an agent without a `timeout` may wait for the
    /// server's next byte ([`IDLE_TIMEOUT`]).
    idle: Duration,
    /// The API (its turn decoder).
    api: PhantomData<fn() -> A>,
}

/// How long a turn with no `timeout` of its own waits for the response, or
/// for the stream's next event, before it fails as a network error: a
/// server that stalls, or a connection lost without a reset, would
/// otherwise hold the run for good. Ten minutes, as the providers' own
/// SDKs allow a whole request; a slower server needs a `timeout`.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(600);

impl<A> Default for HttpChat<A> {
    fn default() -> Self {
        Self::with_keys(KeySource::default())
    }
}

impl<A> HttpChat<A> {
    /// Reads API keys from the process environment.
    pub fn new() -> Self {
        Self::with_keys(KeySource::env())
    }

    /// Reads API keys from `keys` (tests cannot safely set environment
    /// variables).
    pub fn with_keys(keys: KeySource) -> Self {
        Self {
            keys,
            idle: IDLE_TIMEOUT,
            api: PhantomData,
        }
    }

    /// Waits `idle` instead of [`IDLE_TIMEOUT`] for a server that sends
    /// nothing.
    pub fn with_idle_timeout(mut self, idle: Duration) -> Self {
        self.idle = idle;
        self
    }
}

impl<A> Clone for HttpChat<A> {
    fn clone(&self) -> Self {
        Self::with_keys(self.keys.clone()).with_idle_timeout(self.idle)
    }
}

#[async_trait]
impl<A: ChatApi> ChatModel for HttpChat<A> {
    fn provider(&self) -> &'static str {
        A::PROVIDER
    }

    /// Settings that cannot work (no model, a bad `base_url`, no key) fail
    /// here, in that order, before any request.
    async fn turn(&self, request: ChatRequest) -> Result<ChatStream, ChatError> {
        let agent = &request.agent;
        let body = A::body(&request)?;
        let url = super::endpoint(agent, A::DEFAULT_BASE_URL, A::PATH)?;
        let key = self.keys.key(agent)?;
        let headers = A::headers(key.as_deref(), agent)?;
        // An agent's own `timeout` bounds the whole turn (see `send`).
        let idle = agent.timeout.is_none().then_some(self.idle);
        let sent = super::post_json(agent, url, headers, body.to_string());
        let Some(idle) = idle else {
            return Ok(super::decode(A::default(), super::events(sent.await?)));
        };
        let response = tokio::time::timeout(idle, sent)
            .await
            .map_err(|_| super::silent(idle))??;
        let events = super::idle_limited(super::events(response), idle);
        Ok(super::decode(A::default(), events))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::time::Instant;

    use domain::workflow::Provider;
    use futures::StreamExt;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;
    use crate::http::KeySource;
    use crate::normalize::testing::chat_request;
    use crate::openai::OpenAiChat;

    /// A server on 127.0.0.1 that reads a request, writes `head` (nothing,
    /// or a response's headers) and then says nothing more, holding the
    /// connection open; the base URL of an agent that talks to it.
    async fn stalling(head: &'static str) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((mut socket, _)) = listener.accept().await {
                let mut buf = vec![0u8; 64 * 1024];
                let _ = socket.read(&mut buf).await;
                socket.write_all(head.as_bytes()).await.unwrap();
                held.push(socket);
            }
        });
        format!("http://{addr}/v1")
    }

    fn agent(base_url: String, timeout: Option<Duration>) -> AgentDef {
        AgentDef {
            model: Some("gpt-test".to_owned()),
            base_url: Some(base_url),
            timeout: timeout.map(domain::workflow::Timeout),
            ..AgentDef::new(Provider::OpenAi)
        }
    }

    /// `future`'s output, or a failure after 10 s: a turn that waits for
    /// good fails the test instead of hanging it.
    async fn within<T>(future: impl std::future::Future<Output = T>) -> T {
        tokio::time::timeout(Duration::from_secs(10), future)
            .await
            .expect("the turn waited on a silent server")
    }

    fn chat(idle: Duration) -> OpenAiChat {
        OpenAiChat::with_keys(KeySource::from_fn(|_| Some("sk-test".to_owned())))
            .with_idle_timeout(idle)
    }

    /// No answer at all, then headers and no event: each turn fails as a
    /// network error (which a run retries) once the idle time passes,
    /// instead of waiting for good.
    #[tokio::test]
    async fn a_server_that_stalls_fails_the_turn_after_the_idle_time() {
        let idle = Duration::from_millis(300);
        let started = Instant::now();
        let quiet = stalling("").await;
        let error = within(chat(idle).turn(chat_request(agent(quiet, None))))
            .await
            .err()
            .expect("a turn with no response");
        assert!(
            matches!(&error, ChatError::Network(m) if m.contains("sent nothing for 0.3 s")),
            "{error:?}"
        );
        let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n";
        let headers_only = stalling(head).await;
        let mut stream = within(chat(idle).turn(chat_request(agent(headers_only, None))))
            .await
            .unwrap();
        let item = within(stream.next()).await.expect("an item");
        assert!(
            matches!(&item, Err(ChatError::Network(m)) if m.contains("sent nothing")),
            "{item:?}"
        );
        assert!(stream.next().await.is_none(), "the stream ends");
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    /// An agent's own `timeout` is what bounds its turn: the idle time does
    /// not cut it shorter.
    #[tokio::test]
    async fn an_agents_timeout_replaces_the_idle_time() {
        let quiet = stalling("").await;
        let started = Instant::now();
        let limited = agent(quiet, Some(Duration::from_millis(600)));
        let error = within(chat(Duration::from_millis(50)).turn(chat_request(limited)))
            .await
            .err()
            .expect("a turn with no response");
        assert!(
            matches!(&error, ChatError::Network(m) if m.contains("timed out")),
            "{error:?}"
        );
        assert!(!format!("{error:?}").contains("sent nothing"), "{error:?}");
        assert!(started.elapsed() >= Duration::from_millis(600));
    }
}

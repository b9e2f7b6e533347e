//! The `openai` provider: any OpenAI-compatible Chat Completions server.
//!
//! Chat Completions (`POST {base_url}/chat/completions`, streamed) rather
//! than the newer Responses API because it is the one dialect every
//! compatible server speaks: OpenAI itself, llama.cpp, vLLM, Ollama, LM
//! Studio, DeepSeek, OpenRouter. `base_url` includes the version path
//! (`https://api.openai.com/v1`, `http://127.0.0.1:8080/v1`), as
//! `OPENAI_BASE_URL` does for the OpenAI SDKs, so a URL copied from a
//! server's docs works as it is.
//!
//! `wire` turns a [`ChatRequest`] into the request body; [`ChunkDecoder`] reads
//! the streamed chunks back into [`ChatEvent`]s and is pure, so it is tested
//! on canned streams; [`OpenAiChat`] is the [`ChatModel`] that joins the two
//! over the client and error mapping shared by the HTTP providers.
//!
//! [`ChatEvent`]: application::ports::ChatEvent

mod decode;
mod wire;

pub use decode::ChunkDecoder;

use application::ports::{ChatError, ChatModel, ChatRequest, ChatStream};
use async_trait::async_trait;
use reqwest::header::{ACCEPT, CONTENT_TYPE};
use serde_json::Value;

use crate::http::{self, KeySource};

/// The public endpoint, used when the agent sets no `base_url`.
const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// The variable the key is read from when the agent names none.
const DEFAULT_KEY_ENV: &str = "OPENAI_API_KEY";

/// Runs agent turns on an OpenAI-compatible Chat Completions server.
///
/// Holds no key, only where to look it up: the key is read at each turn, so
/// a rotated key is picked up without a restart, and it cannot leak through
/// `Debug`.
#[derive(Debug, Clone, Default)]
pub struct OpenAiChat {
    /// Where the API key comes from (the environment, or a test's lookup).
    keys: KeySource,
}

impl OpenAiChat {
    /// Reads API keys from the process environment.
    pub fn new() -> Self {
        Self::with_keys(KeySource::env())
    }

    /// Reads API keys from `keys`.
    pub fn with_keys(keys: KeySource) -> Self {
        Self { keys }
    }

    /// The JSON body sent for `request`; public so what is sent can be
    /// inspected without a server.
    ///
    /// # Errors
    /// [`ChatError::Config`] when the agent names no model.
    pub fn body(request: &ChatRequest) -> Result<Value, ChatError> {
        wire::request_body(request)
    }
}

#[async_trait]
impl ChatModel for OpenAiChat {
    fn provider(&self) -> &'static str {
        "openai"
    }

    async fn turn(&self, request: ChatRequest) -> Result<ChatStream, ChatError> {
        let agent = &request.agent;
        let body = wire::request_body(&request)?;
        let key = self.keys.key(agent, DEFAULT_KEY_ENV)?;
        let url = endpoint(agent)?;
        let mut builder = http::client()?
            .post(url)
            .header(ACCEPT, "text/event-stream")
            // reqwest is built without its `json` feature; `Value`'s
            // Display is its JSON text.
            .header(CONTENT_TYPE, "application/json")
            .body(body.to_string());
        if let Some(key) = key {
            // `bearer_auth` marks the header sensitive, so it is redacted
            // from reqwest's own Debug output too.
            builder = builder.bearer_auth(key);
        }
        let response = http::send(builder, agent).await?;
        if is_json(&response) {
            // A server that ignored `stream: true` (some proxies do), or one
            // that reports an error with status 200: say what it said rather
            // than "the stream ended before the turn finished".
            let status = response.status().as_u16();
            let text = response.text().await.map_err(http::network)?;
            let said = http::error_message(&text).unwrap_or_else(|| "an empty body".to_owned());
            return Err(ChatError::Api {
                status: Some(status),
                message: format!("expected an event stream, got JSON: {said}"),
                retryable: false,
            });
        }
        Ok(decode::decode(http::events(response)))
    }
}

/// The Chat Completions URL, checked here so a bad `base_url` is a
/// configuration error rather than a "network error" from the client. The
/// URL itself is left out of the message: it may carry credentials.
fn endpoint(agent: &domain::workflow::AgentDef) -> Result<reqwest::Url, ChatError> {
    let url = http::endpoint(agent, DEFAULT_BASE_URL, "chat/completions");
    let url = reqwest::Url::parse(&url)
        .map_err(|e| ChatError::Config(format!("`base_url` does not make a valid URL ({e})")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(ChatError::Config(format!(
            "`base_url` must start with http:// or https:// (it starts with `{}:`)",
            url.scheme()
        )));
    }
    Ok(url)
}

/// Whether the response is a JSON document instead of an event stream.
fn is_json(response: &reqwest::Response) -> bool {
    response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("application/json"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use domain::workflow::{AgentDef, Provider};

    fn request(agent: AgentDef) -> ChatRequest {
        ChatRequest {
            agent,
            system: String::new(),
            messages: vec![application::ports::ChatMessage::User("hi".into())],
            tools: vec![],
        }
    }

    #[tokio::test]
    async fn configuration_errors_come_before_any_request() {
        let keys = KeySource::from_fn(|_| Some("sk-test-secret".to_owned()));
        let chat = OpenAiChat::with_keys(keys);
        assert_eq!(chat.provider(), "openai");
        let agent = AgentDef::new(Provider::OpenAi);
        let Err(e) = chat.turn(request(agent.clone())).await else {
            panic!("a turn without a model must fail");
        };
        assert!(
            matches!(&e, ChatError::Config(m) if m.contains("`model`")),
            "{e}"
        );
        let mut agent = agent;
        agent.model = Some("gpt-test".into());
        agent.base_url = Some("localhost:8080/v1".into());
        let Err(e) = chat.turn(request(agent)).await else {
            panic!("a base_url without a scheme must fail");
        };
        assert!(matches!(&e, ChatError::Config(_)), "{e}");
        assert!(!format!("{e:?} {chat:?}").contains("sk-test-secret"));
    }

    #[tokio::test]
    async fn a_missing_key_names_the_variable() {
        let chat = OpenAiChat::with_keys(KeySource::from_fn(|_| None));
        let mut agent = AgentDef::new(Provider::OpenAi);
        agent.model = Some("gpt-test".into());
        let Err(e) = chat.turn(request(agent)).await else {
            panic!("a turn without a key must fail");
        };
        assert!(e.to_string().contains("`OPENAI_API_KEY`"), "{e}");
    }
}

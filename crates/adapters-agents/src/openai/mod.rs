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
//! on canned streams; [`OpenAiChat`] (the shared `HttpChat`) is the
//! [`ChatModel`] that joins the two over the client and error mapping shared
//! by the HTTP providers.
//!
//! [`ChatEvent`]: application::ports::ChatEvent
//! [`ChatModel`]: application::ports::ChatModel

mod decode;
mod wire;

pub use decode::ChunkDecoder;

use application::ports::{ChatError, ChatRequest};
use domain::workflow::AgentDef;
use reqwest::header::AUTHORIZATION;
use serde_json::Value;

use crate::http::{self, ChatApi, Headers, HttpChat};

/// Runs agent turns on an OpenAI-compatible Chat Completions server.
pub type OpenAiChat = HttpChat<ChunkDecoder>;

impl OpenAiChat {
    /// The JSON body sent for `request`; public so what is sent can be
    /// inspected without a server.
    ///
    /// # Errors
    /// [`ChatError::Config`] when the agent names no model.
    pub fn body(request: &ChatRequest) -> Result<Value, ChatError> {
        wire::request_body(request)
    }
}

impl ChatApi for ChunkDecoder {
    const PROVIDER: &'static str = "openai";
    /// The public endpoint, used when the agent sets no `base_url`.
    const DEFAULT_BASE_URL: &'static str = "https://api.openai.com/v1";
    const PATH: &'static str = "chat/completions";

    fn body(request: &ChatRequest) -> Result<Value, ChatError> {
        wire::request_body(request)
    }

    fn headers(key: Option<&str>, agent: &AgentDef) -> Result<Headers, ChatError> {
        let mut headers = Vec::new();
        if let Some(key) = key {
            let bearer = http::key_header(&format!("Bearer {key}"), agent)?;
            headers.push((AUTHORIZATION, bearer));
        }
        Ok(headers)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::http::KeySource;
    use application::ports::ChatModel;
    use domain::workflow::Provider;

    use crate::normalize::testing::assert_refused;

    #[tokio::test]
    async fn configuration_errors_come_before_any_request() {
        let secret = KeySource::from_fn(|_| Some("sk-test-secret".to_owned()));
        let chat = OpenAiChat::with_keys(secret);
        assert_eq!(chat.provider(), "openai");
        let no_model = AgentDef::new(Provider::OpenAi);
        let model = Some("gpt-test".to_owned());
        let base_url = Some("localhost:8080/v1".to_owned());
        let no_scheme = AgentDef {
            model,
            base_url,
            ..no_model.clone()
        };
        let cases = [(no_model, "`model`"), (no_scheme, "`base_url`")];
        let errors = assert_refused(&chat, cases).await;
        assert!(!format!("{errors:?} {chat:?}").contains("sk-test-secret"));
        let chat = OpenAiChat::with_keys(KeySource::from_fn(|_| None));
        let no_key = AgentDef {
            model: Some("gpt-test".to_owned()),
            ..AgentDef::new(Provider::OpenAi)
        };
        let _ = assert_refused(&chat, [(no_key, "`OPENAI_API_KEY`")]).await;
    }
}

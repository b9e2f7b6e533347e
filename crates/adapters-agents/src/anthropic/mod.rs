//! The `anthropic` provider: the Anthropic Messages API, streamed.
//!
//! An HTTP provider leaves the tool loop to the runtime, so this module only
//! speaks the wire format: `wire` builds the `POST /v1/messages` body from
//! the conversation, [`MessagesDecoder`] reads the streamed answer into
//! [`ChatEvent`](application::ports::ChatEvent)s, and [`AnthropicChat`] (the
//! shared `HttpChat`) sends a turn (client, key, error statuses, SSE
//! framing). Decoding is pure, so it is tested on canned
//! streams; the whole adapter end to end against the fake model server.

mod decode;
mod wire;

pub use decode::MessagesDecoder;

use application::ports::{ChatError, ChatRequest};
use domain::workflow::AgentDef;
use reqwest::header::{HeaderName, HeaderValue};
use serde_json::Value;

use crate::http::{self, ChatApi, Headers, HttpChat};

/// The API version this adapter's wire format follows; the API requires it.
const API_VERSION: &str = "2023-06-01";

/// Runs model turns on the Anthropic Messages API.
pub type AnthropicChat = HttpChat<MessagesDecoder>;

impl ChatApi for MessagesDecoder {
    const PROVIDER: &'static str = "anthropic";
    /// The public API; `base_url` replaces it without the `/v1`, as
    /// `ANTHROPIC_BASE_URL` does for Anthropic's own clients.
    const DEFAULT_BASE_URL: &'static str = "https://api.anthropic.com";
    const PATH: &'static str = "v1/messages";

    fn body(request: &ChatRequest) -> Result<Value, ChatError> {
        let model = request.agent.model.as_deref().ok_or_else(|| {
            ChatError::Config(
                "`model` is not set (the Anthropic API needs one, e.g. `claude-sonnet-4-5`)".into(),
            )
        })?;
        Ok(wire::request_body(request, model))
    }

    fn headers(key: Option<&str>, agent: &AgentDef) -> Result<Headers, ChatError> {
        let mut headers = vec![(
            HeaderName::from_static("anthropic-version"),
            HeaderValue::from_static(API_VERSION),
        )];
        if let Some(key) = key {
            let key = http::key_header(key, agent)?;
            headers.push((HeaderName::from_static("x-api-key"), key));
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
    async fn settings_that_cannot_work_fail_before_any_request() {
        let chat = AnthropicChat::with_keys(KeySource::from_fn(|_| None));
        let no_model = AgentDef::new(Provider::Anthropic);
        let model = Some("claude-test".to_owned());
        let no_key = AgentDef {
            model,
            ..no_model.clone()
        };
        let base_url = Some("not a url".to_owned());
        let bad_url = AgentDef {
            base_url,
            ..no_key.clone()
        };
        let cases = [
            (no_model, "`model` is not set"),
            (no_key, "`ANTHROPIC_API_KEY`"),
            (bad_url, "`base_url`"),
        ];
        let _ = assert_refused(&chat, cases).await;
    }

    #[test]
    fn debug_shows_no_key() {
        let chat = AnthropicChat::with_keys(KeySource::from_fn(|_| Some("sk-ant-secret".into())));
        assert_eq!(chat.provider(), "anthropic");
        assert!(!format!("{chat:?}").contains("secret"));
    }
}

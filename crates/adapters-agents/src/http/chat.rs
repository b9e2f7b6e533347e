//! [`HttpChat`]: the one [`ChatModel`] of every HTTP provider. A provider
//! brings only its [`ChatApi`] (where the API is, the body and headers of
//! a turn) and its turn decoder; sending a turn is the same for all.

use std::marker::PhantomData;

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
#[derive(Debug, Default)]
pub struct HttpChat<A> {
    /// Where the API key comes from (the environment, or a test's lookup).
    keys: KeySource,
    /// The API (its turn decoder).
    api: PhantomData<fn() -> A>,
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
            api: PhantomData,
        }
    }
}

impl<A> Clone for HttpChat<A> {
    fn clone(&self) -> Self {
        Self::with_keys(self.keys.clone())
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
        let response = super::post_json(agent, url, headers, body.to_string()).await?;
        Ok(super::decode(A::default(), super::events(response)))
    }
}

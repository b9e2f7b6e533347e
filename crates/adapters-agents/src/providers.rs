//! [`Providers`]: the one `QueryFn` the runner sees, routing each call by the
//! agent's `provider:` to the adapter that serves it.

use std::sync::Arc;

use application::ports::{AgentRequest, AgentStream, QueryError, QueryFn};
use async_trait::async_trait;
use domain::workflow::Provider;

/// Routes calls to the configured provider adapters.
#[derive(Clone, Default)]
pub struct Providers {
    mock: Option<Arc<dyn QueryFn>>,
}

impl Providers {
    /// No provider configured yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Serves `provider: mock` with the given adapter.
    #[must_use]
    pub fn with_mock(mut self, mock: Arc<dyn QueryFn>) -> Self {
        self.mock = Some(mock);
        self
    }
}

#[async_trait]
impl QueryFn for Providers {
    async fn query(&self, request: AgentRequest) -> Result<AgentStream, QueryError> {
        let provider = request.agent.provider;
        let adapter = match provider {
            Provider::Mock => self.mock.as_ref(),
        };
        match adapter {
            Some(adapter) => adapter.query(request).await,
            None => Err(QueryError::Config(format!(
                "agent `{}`: provider `{}` is not configured in this program",
                request.agent_name,
                provider.as_str()
            ))),
        }
    }
}

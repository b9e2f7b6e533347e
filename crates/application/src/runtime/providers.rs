//! [`Providers`]: which adapter serves each `provider:` an agent names.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use domain::workflow::Provider;

use crate::ports::{AgentRequest, AgentStream, QueryError, QueryFn};

/// Routes each agent call by the agent's `provider:` to the [`QueryFn`]
/// that serves it: the one `QueryFn` the executor sees.
#[derive(Clone, Default)]
pub struct Providers {
    served: HashMap<Provider, Arc<dyn QueryFn>>,
}

impl Providers {
    /// No provider served yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Serves `provider` with `adapter`, replacing what served it before.
    #[must_use]
    pub fn with(mut self, provider: Provider, adapter: Arc<dyn QueryFn>) -> Self {
        self.served.insert(provider, adapter);
        self
    }

    /// Serves `provider: mock` with `adapter`.
    #[must_use]
    pub fn with_mock(self, adapter: Arc<dyn QueryFn>) -> Self {
        self.with(Provider::Mock, adapter)
    }
}

#[async_trait]
impl QueryFn for Providers {
    async fn query(&self, request: AgentRequest) -> Result<AgentStream, QueryError> {
        let provider = request.agent.provider;
        match self.served.get(&provider) {
            Some(adapter) => adapter.query(request).await,
            None => Err(QueryError::Config(format!(
                "agent `{}`: provider `{}` is not configured in this program",
                request.agent_name,
                provider.as_str()
            ))),
        }
    }
}

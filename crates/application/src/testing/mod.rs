//! Test support for implementations of the ports, compiled for this crate's
//! tests and for consumers that enable the `testing` feature.
//!
//! With it, [`crate::ports`] also holds a `mockall` mock of every port
//! (`MockQueryFn`, `MockRunStore`, `MockTool`, ...): a program tests what it
//! built on awr without a real agent.
//!
//! ```
//! # extern crate domain as awr_domain;
//! use std::sync::Arc;
//!
//! use awr_application::ports::{AgentMessage, AgentResult, MockQueryFn};
//! use awr_application::{RunRequest, Runtime};
//! use awr_domain::workflow::Provider;
//! use awr_domain::{RunStatus, WorkflowDef};
//! use awr_infrastructure::clock::{RandomIds, SystemClock};
//! use awr_infrastructure::store::MemoryRunStore;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // The writer is asked once, about the input; the editor is never asked.
//! let mut agents = MockQueryFn::new();
//! agents
//!     .expect_query()
//!     .withf(|request| request.agent_name == "writer" && request.prompt.contains("otters"))
//!     .times(1)
//!     .returning(|_| {
//!         let done = AgentMessage::Completed(AgentResult { text: "a draft".into(), ..Default::default() });
//!         Ok(Box::pin(futures::stream::iter([Ok(done)])))
//!     });
//! let runtime = Runtime::builder(Arc::new(MemoryRunStore::new()), Arc::new(SystemClock), Arc::new(RandomIds))
//!     .provider(Provider::Mock, Arc::new(agents))
//!     .build();
//! let yaml = "name: w\nagents: {writer: {provider: mock}, editor: {provider: mock}}\n\
//!             nodes: [{id: draft, agent: writer}, {id: edit, agent: editor}]\n\
//!             edges: [{from: draft, to: edit, when: 'false'}]\n";
//! let workflow = Arc::new(WorkflowDef::from_yaml(yaml)?);
//! let outcome = runtime.run(RunRequest { workflow, input: "otters".into(), source: None, started_by: None }).await?;
//! assert_eq!(outcome.status, RunStatus::Completed, "{:?}", outcome.error);
//! // (the mock checks `times(1)` when the runtime drops it)
//! # Ok(())
//! # }
//! ```

pub mod store_conformance;

use std::time::Duration;

use domain::Timestamp;
use futures::future::BoxFuture;

use crate::ports::Clock;

/// Wall time that follows tokio's clock, so a test with paused time
/// (`#[tokio::test(start_paused = true)]`) sees every wait of the code
/// under test pass at once and still reads the time it would have taken.
#[derive(Debug, Clone)]
pub struct TokioClock {
    start: tokio::time::Instant,
}

impl TokioClock {
    /// A clock that reads 2026-01-01T00:00:00Z now.
    pub fn new() -> Self {
        Self {
            start: tokio::time::Instant::now(),
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Timestamp {
        let elapsed = i64::try_from(self.start.elapsed().as_millis()).unwrap_or(i64::MAX);
        Timestamp::from_millis(1_767_225_600_000_i64.saturating_add(elapsed))
    }

    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep(duration))
    }
}

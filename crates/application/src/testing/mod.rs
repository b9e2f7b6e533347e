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

//! The ports: every way the application reaches the outside world.

mod clock;
mod observer;
mod query;
mod store;

pub use clock::{Clock, IdGen};
#[cfg(test)]
pub use clock::{MockClock, MockIdGen};
#[cfg(test)]
pub use query::MockQueryFn;
#[cfg(test)]
pub use store::MockRunStore;
pub use observer::RunObserver;
pub use query::{AgentMessage, AgentRequest, AgentResult, AgentStream, QueryError, QueryFn};
pub use store::{EventStream, RunStore, StoreError};

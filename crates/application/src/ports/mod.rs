//! The ports: every way the application reaches the outside world.

mod clock;
mod observer;
mod query;
mod store;

pub use clock::{Clock, IdGen};
#[cfg(test)]
pub use clock::{MockClock, MockIdGen};
pub use observer::RunObserver;
#[cfg(test)]
pub use query::MockQueryFn;
pub use query::{AgentMessage, AgentRequest, AgentResult, AgentStream, QueryError, QueryFn};
#[cfg(test)]
pub use store::MockRunStore;
pub use store::{EventStream, RunStore, StoreError};

//! The pure core of awr: the vocabulary every other crate speaks.
//!
//! Everything here is data and rules — ids that cannot hold an invalid value,
//! the workflow definition and its validation, the run event log's
//! [`RuntimeEvent`] union, the [`RunSnapshot`] and the pure fold that derives
//! it from events, and the [`RuntimeCommand`]s a user may send.
//!
//! Architecture invariant: this crate does no IO. It depends on no async
//! runtime, touches no file, socket or process, and never reads the clock:
//! time and fresh ids arrive as values from the outside (the application's
//! `Clock` and `IdGen` ports), so a replay can pin them.

pub mod caller;
pub mod canonical;
pub mod causal;
pub mod command;
pub mod condition;
pub mod definition;
pub mod error_kind;
pub mod event;
pub mod ids;
mod json_out;
pub mod output;
pub mod pricing;
pub mod recording;
pub mod snapshot;
pub mod time;
pub mod trace;
pub mod transcript;
pub mod workflow;

pub use caller::Caller;
pub use command::RuntimeCommand;
pub use error_kind::ErrorKind;
pub use event::{EventKind, RuntimeEvent};
pub use ids::{IdError, NodeId, NodeRunId, Offset, RunId, SessionId};
pub use snapshot::{EdgeStatus, JsonText, NodeStatus, RunSnapshot, RunStatus, Stopping};
pub use time::Timestamp;
pub use workflow::{WorkflowDef, WorkflowError};

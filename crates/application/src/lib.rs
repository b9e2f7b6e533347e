//! Ports and services: what awr does, independent of how it stores or whom it calls.
//!
//! - [`ports`]: the async traits the outside world implements — [`ports::RunStore`]
//!   (event log + snapshots), [`ports::QueryFn`] (one agent invocation),
//!   [`ports::Clock`] and [`ports::IdGen`] (so replays can pin time and ids),
//!   [`ports::RunObserver`] (live presentation). Each port's error enum sits beside it.
//! - [`run`]: the [`run::Executor`], which executes a validated workflow
//!   graph; a run's whole state is the fold of its event log (design §5.1).
//! - [`fork`]: [`Executor::fork`], a new run that branches off another at
//!   one of its offsets and goes on through the executor's resume path.
//! - [`load`]: [`load::load_workflow`], which reads a workflow and every
//!   workflow it calls through the [`ports::WorkflowSource`] port, and
//!   refuses a bad file, a call cycle or a chain too deep before anything runs.
//! - [`runtime`]: [`Runtime`], the one entry point of a program that embeds
//!   awr, built from ports only; the command line and `awr serve` use it too.
//! - [`secrets`] and [`redact`]: which variables hold keys, what a child
//!   process may see of them, and decorators that keep their values out of
//!   every record written.
//!
//! Feature `testing`: the `mockall` mocks of every port (`ports::MockRunStore`,
//! `ports::MockQueryFn`, ...) and the store conformance suite
//! (`testing::store_conformance`), for the tests of a program that embeds awr
//! or implements a port.
//!
//! Architecture invariant: this crate names no concrete store, provider, file
//! path or clock. The composition root (`cli`, test harnesses) wires those in.

pub mod fork;
pub mod inspect;
pub mod load;
pub mod mcp;
pub mod migrate;
pub mod permission;
pub mod ports;
pub mod query;
pub mod queue;
pub mod recording;
pub mod redact;
pub mod replay;
pub mod retention;
pub mod run;
pub mod runtime;
pub mod secrets;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod tool_loop;
pub mod tools;
pub mod trace;
pub mod transcript;
pub mod worker;

pub use run::{Cancel, CheckpointPolicy, Executor, ExecutorError, RunOutcome, RunRequest};
pub use runtime::{Runtime, RuntimeBuilder};

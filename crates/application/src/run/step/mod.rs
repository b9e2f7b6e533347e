//! The executor's transitions as pure functions of the folded state: no
//! IO, no clock, no tokio. Each returns what to record (and what the
//! driver must do next); the driver records it and carries it out. One
//! file per transition, each with table tests of its own.
//!
//! - [`command`]: what a command received records, and the stop it asks
//!   for;
//! - [`ended`]: what a node run's end records, and its node's edges;
//! - [`stop`]: how a run that stops before it completes records its stop
//!   (a node failure, a budget, a cancellation).
//!
//! The scheduler, `run::decide`, is the first of them; the others still
//! decide inside the driver (`run/driver/`) and move here one by one.

pub(crate) mod command;
pub(crate) mod ended;
pub(crate) mod stop;

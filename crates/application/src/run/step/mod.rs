//! The executor's transitions as pure functions of the folded state: no
//! IO, no clock, no tokio. Each returns what to record (and what the
//! driver must do next); the driver records it and carries it out. One
//! file per transition, each with table tests of its own.
//!
//! - [`budget`]: the first budget the state has crossed, and when the next
//!   deadline falls;
//! - [`command`]: what a command received records, and the stop it asks
//!   for;
//! - [`ended`]: what a node run's end records, and its node's edges;
//! - [`pause`]: which node runs a pause stops at once, and how it ends;
//! - [`resume`]: what a continued run finishes first: the stop or the step
//!   its last writer died in;
//! - [`retry`]: whether a failed attempt is tried again, and after what
//!   wait;
//! - [`stop`]: how a run that stops before it completes records its stop
//!   (a node failure, a budget, a cancellation).
//!
//! The scheduler, `run::decide`, is the first of them; the others still
//! decide inside the driver (`run/driver/`) and move here one by one.

pub(crate) mod budget;
pub(crate) mod command;
pub(crate) mod ended;
pub(crate) mod pause;
pub(crate) mod resume;
pub(crate) mod retry;
pub(crate) mod stop;

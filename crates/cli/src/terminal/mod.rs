//! The terminal front end: one module per group of subcommands, each
//! parsing its arguments, calling the application services and the
//! composition root, and presenting the answer. `awr serve` (`serve/`) is
//! the other front end over the same services; neither uses the other.

pub mod approvals;
pub mod causal;
pub mod control;
pub mod fork;
pub mod inspect;
pub mod migrate;
pub mod prune;
pub mod query;
pub mod queue;
pub mod record;
pub mod run;
pub mod trace;
pub mod transcript;
pub mod verify;

//! One module per group of subcommands.

pub mod causal;
pub mod control;
pub mod fork;
pub mod inspect;
pub mod migrate;
pub mod prune;
pub mod query;
pub mod record;
pub mod run;
pub mod transcript;
pub mod verify;

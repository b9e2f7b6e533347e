//! One module per group of subcommands.

pub mod control;
pub mod inspect;
pub mod migrate;
pub mod prune;
pub mod run;
pub mod transcript;

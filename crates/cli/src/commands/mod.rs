//! One module per group of subcommands.

pub mod control;
pub mod fork;
pub mod inspect;
pub mod run;
pub mod transcript;

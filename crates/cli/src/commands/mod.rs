//! One module per group of subcommands.

pub mod inspect;
pub mod run;
pub mod transcript;

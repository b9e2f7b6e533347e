//! awr's composition root as a library: the stock adapters, wired into an
//! [`application::Runtime`] by one call ([`embed::defaults`]), and the
//! `--storage` forms ([`storage::Storage`]).
//!
//! The `awr` program builds every run it writes through [`embed::stock`];
//! a program that embeds awr starts from the same builder and swaps the
//! ports it wants (docs/library.md).

pub mod embed;
pub mod storage;

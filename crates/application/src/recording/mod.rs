//! Record and replay, in one place: a run's log projected into a recording
//! ([`project`]), the requests and model turns a recording keeps and how a
//! replay's are compared with them ([`request`], [`turns`]), the ids a
//! replay mints ([`SeededIds`]), the canonical form two replays are
//! compared by ([`canonical`]), and the first-divergence report
//! ([`report`]). The formats are seed 001 §7 and docs/determinism.md.
//!
//! `awr record-fixtures` and `awr verify-determinism` are built on these,
//! and a program can call them the same way (docs/library.md); the mock
//! provider only serves a recording's fixtures.

pub mod canonical;
mod ids;
pub mod project;
pub mod report;
pub mod request;
pub mod turns;

pub use ids::SeededIds;

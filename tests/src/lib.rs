//! Test support shared by the end-to-end suite (the one `e2e` binary).
//!
//! It is a library, not a module inside `e2e`, so that other test binaries or
//! benches can reuse it; it holds only harness code, never product code.

pub mod fake_model;

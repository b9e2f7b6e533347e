//! Test support for implementations of the ports, compiled for this crate's
//! tests and for consumers that enable the `testing` feature.

pub mod store_conformance;

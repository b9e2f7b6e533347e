//! The end-to-end suite, one binary: each module is one area.

mod store_conformance;

//! Holds nothing: this package exists for its one test binary, `e2e`
//! (compiled once, so the whole end-to-end suite links once on small machines).

//! Links `awr` with packed relative relocations (`DT_RELR`) on Linux.
//!
//! The program is position-independent, so the loader patches each of its
//! ~42,000 pointers at start. Stored as `RELA`, that table is 24 bytes a
//! pointer (1 MB), all of it read, and kept resident, by every run; packed,
//! it is a few kilobytes. glibc reads the packed form since 2.36.

fn main() {
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if os == "linux" && env == "gnu" {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}

//! Links `awr` with packed relative relocations (`DT_RELR`) where the C
//! library reads them.
//!
//! The program is position-independent, so the loader patches each of its
//! ~42,000 pointers at start. Stored as `RELA`, that table is 24 bytes a
//! pointer (1 MB), all of it read, and kept resident, by every run; packed,
//! it is a few kilobytes. glibc reads the packed form since 2.36, and the
//! linker marks a packed program as needing it (`GLIBC_ABI_DT_RELR`), so an
//! older glibc would refuse to start it: the table is packed only for a
//! build on the machine it runs on, with glibc 2.36 or later. (The answer
//! is kept with the build: a target directory moved to an older system is
//! built again from clean.)

use std::env::var;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if packs_relocations() {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}

/// Whether this build is for this Linux machine, whose glibc is 2.36 or later.
fn packs_relocations() -> bool {
    let is = |key: &str, value: &str| var(key).is_ok_and(|v| v == value);
    let native = var("TARGET")
        .ok()
        .zip(var("HOST").ok())
        .is_some_and(|(t, h)| t == h);
    if !(native && is("CARGO_CFG_TARGET_OS", "linux") && is("CARGO_CFG_TARGET_ENV", "gnu")) {
        return false;
    }
    let Ok(out) = std::process::Command::new("getconf")
        .arg("GNU_LIBC_VERSION")
        .output()
    else {
        return false;
    };
    glibc_at_least(&String::from_utf8_lossy(&out.stdout), (2, 36))
}

/// Whether `getconf GNU_LIBC_VERSION`'s answer (`glibc 2.36`) is `least` or later.
fn glibc_at_least(answer: &str, least: (u32, u32)) -> bool {
    let Some(version) = answer.trim().strip_prefix("glibc ") else {
        return false;
    };
    let mut parts = version.split('.').map(|part| part.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor) >= least,
        _ => false,
    }
}

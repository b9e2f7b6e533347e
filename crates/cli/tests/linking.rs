//! How `awr` is linked (`build.rs`): its relocations packed exactly where
//! the C library it runs on reads them.

#![cfg(all(target_os = "linux", target_env = "gnu"))]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

/// `getconf GNU_LIBC_VERSION` as (major, minor).
fn glibc() -> (u32, u32) {
    let out = Command::new("getconf")
        .arg("GNU_LIBC_VERSION")
        .output()
        .expect("getconf");
    let text = String::from_utf8(out.stdout).unwrap();
    let version = text.trim().strip_prefix("glibc ").expect("a glibc version");
    let mut parts = version.split('.').map(|p| p.parse().unwrap());
    (parts.next().unwrap(), parts.next().unwrap())
}

#[test]
fn awr_packs_its_relocations_where_glibc_reads_them_and_starts() {
    let awr = env!("CARGO_BIN_EXE_awr");
    let dynamic = Command::new("readelf")
        .args(["--dynamic", awr])
        .output()
        .expect("readelf (binutils)");
    assert!(dynamic.status.success());
    let dynamic = String::from_utf8(dynamic.stdout).unwrap();
    let packed = dynamic.contains("(RELR)");
    assert_eq!(packed, glibc() >= (2, 36), "{dynamic}");
    let version = Command::new(awr).arg("--version").output().unwrap();
    assert!(version.status.success(), "{version:?}");
}

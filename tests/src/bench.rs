//! What the benches share: where criterion writes, and the raw file and
//! line every figure is judged against.

use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Where criterion writes its results: `criterion/` in the target
/// directory, which is `CARGO_TARGET_DIR` or the one the bench binary
/// (`<target>/<profile>/deps/<bench>-*`) runs from. `cargo xtask
/// bench-report` reads the figures a bench writes there.
pub fn criterion_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            let exe = std::env::current_exe().ok()?;
            Some(exe.parent()?.parent()?.parent()?.to_path_buf())
        })
        .unwrap_or_else(|| PathBuf::from("target"))
        .join("criterion")
}

/// A file opened for appending (0600, created if need be), as a run's log
/// is: the raw reference's file.
///
/// # Panics
/// When the file cannot be opened: a bench has no caller to report to.
pub fn append_file(path: &Path) -> File {
    #[allow(clippy::expect_used)]
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .expect("raw file")
}

/// A 300-byte line, about an event's: what a raw `write` + `fdatasync`
/// writes.
pub fn raw_line() -> Vec<u8> {
    [b'x'; 299].into_iter().chain([b'\n']).collect()
}

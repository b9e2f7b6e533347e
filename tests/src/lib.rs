//! Test support shared by the end-to-end suite (the one `e2e` binary).
//!
//! It is a library, not a module inside `e2e`, so that other test binaries or
//! benches can reuse it; it holds only harness code, never product code.

pub mod bench;
pub mod fake_model;
pub mod otlp;
pub mod serve;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The `awr` binary, built once per test process.
///
/// The binary belongs to another package, so cargo does not hand its path to
/// a test binary; it is built here (cargo has released its build lock by
/// the time tests run) and found next to the test's own executable.
///
/// # Panics
/// When it cannot be built.
#[allow(clippy::expect_used)]
pub fn awr_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("workspace root");
        let mut build = Command::new(cargo);
        build
            .args(["build", "--quiet", "-p", "cli", "--bin", "awr"])
            .current_dir(root);
        // What cargo sets for this test binary is not the build's
        // environment: a build script that watches one of them (ring's
        // watches CARGO_MANIFEST_DIR) would rebuild, and all that depends
        // on it, on every run of the suite.
        for (name, _) in std::env::vars_os() {
            let name = name.to_string_lossy();
            let set_for_the_test = ["CARGO_PKG_", "CARGO_BIN_EXE_"]
                .iter()
                .any(|prefix| name.starts_with(prefix))
                || [
                    "CARGO_MANIFEST_DIR",
                    "CARGO_MANIFEST_PATH",
                    "CARGO_MANIFEST_LINKS",
                    "CARGO_CRATE_NAME",
                    "CARGO_BIN_NAME",
                    "CARGO_PRIMARY_PACKAGE",
                    "CARGO_TARGET_TMPDIR",
                    "CARGO_RUSTC_CURRENT_DIR",
                ]
                .contains(&name.as_ref());
            if set_for_the_test {
                build.env_remove(name.as_ref());
            }
        }
        let status = build.status().expect("cargo build -p cli");
        assert!(status.success(), "building awr failed");
        let exe = std::env::current_exe().expect("current exe");
        // target/<profile>/deps/<test>-<hash> -> target/<profile>/awr
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("target profile dir");
        profile_dir.join("awr")
    })
}

/// Says that the running test skipped its checks, why, and the command that
/// runs it for real: `SKIPPED <test>: <reason>; run it with: <command>`.
///
/// A skipped test still counts as passed in libtest's summary, and libtest
/// hides what a passing test prints; so this writes to the process's stderr
/// itself, not through `eprintln!` (which the harness captures), and the
/// line shows in `cargo test`'s output. The test's name is its thread's,
/// which libtest sets.
pub fn skipped(reason: &str, command: &str) {
    use std::io::Write;
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("a test");
    let _ = writeln!(
        std::io::stderr().lock(),
        "SKIPPED {test}: {reason}; run it with: {command}"
    );
}

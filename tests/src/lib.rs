//! Test support shared by the end-to-end suite (the one `e2e` binary).
//!
//! It is a library, not a module inside `e2e`, so that other test binaries or
//! benches can reuse it; it holds only harness code, never product code.

pub mod bench;
pub mod fake_model;
pub mod serve;

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

//! Developer tasks, run as `cargo xtask <task>` (an alias in `.cargo/config.toml`).
//!
//! - `ci`: exactly what `.ci/run` runs — format check, clippy, the test suite.
//! - `bench`: every criterion benchmark; figures go to `docs/performance.md`.
//!
//! The tidy test (`src/tidy.rs`) lives here too, so `cargo test` enforces
//! the architecture's invariants on every run.

use std::process::{Command, ExitCode};

use anyhow::{Context, bail};

#[cfg(test)]
mod tidy;

fn main() -> ExitCode {
    let task = std::env::args().nth(1).unwrap_or_default();
    let result = match task.as_str() {
        "ci" => ci(),
        "bench" => bench(),
        _ => {
            eprintln!("usage: cargo xtask <ci|bench>");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask {task}: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The checks of `.ci/run`, in its order.
fn ci() -> anyhow::Result<()> {
    cargo(&["fmt", "--all", "--check"])?;
    cargo(&[
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ])?;
    cargo(&["test", "--workspace"])
}

/// Every benchmark of the workspace.
fn bench() -> anyhow::Result<()> {
    cargo(&["bench", "--workspace"])
}

fn cargo(args: &[&str]) -> anyhow::Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(&cargo)
        .args(args)
        .status()
        .with_context(|| format!("cannot start {cargo}"))?;
    if !status.success() {
        bail!("`cargo {}` failed ({status})", args.join(" "));
    }
    Ok(())
}

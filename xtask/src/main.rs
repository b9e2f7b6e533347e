//! Developer tasks, run as `cargo xtask <task>` (an alias in `.cargo/config.toml`).
//!
//! - `ci`: exactly what `.ci/run` runs — format check, clippy, the test suite.
//! - `bench`: every criterion benchmark, then the derived per-step figures
//!   (`bench-report` prints those again from the last results).
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
        "bench-report" => report(),
        _ => {
            eprintln!("usage: cargo xtask <ci|bench|bench-report>");
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

/// Every benchmark of the workspace, then the derived per-step figures.
fn bench() -> anyhow::Result<()> {
    cargo(&["bench", "--workspace"])?;
    report()
}

/// Every figure `cargo bench` left that has a raw reference beside it.
fn report() -> anyhow::Result<()> {
    report_steps()?;
    report_http()
}

/// Median of one criterion benchmark, in microseconds.
fn median_us(group: &str, id: &str) -> anyhow::Result<f64> {
    let path = format!("target/criterion/{group}/{id}/new/estimates.json");
    let text = std::fs::read_to_string(&path).with_context(|| format!("read {path}"))?;
    let json: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("parse {path}"))?;
    json["median"]["point_estimate"]
        .as_f64()
        .map(|ns| ns / 1_000.0)
        .with_context(|| format!("{path}: no median"))
}

/// Prints the runner's marginal cost per step, `(t200 - t20) / 180`, beside
/// the raw sync figures of the same run (see `tests/benches/runner.rs`).
fn report_steps() -> anyhow::Result<()> {
    let sync = median_us("raw", "write_300B_fdatasync")?;
    let step_bytes = median_us("raw", "write_5x300B_fdatasync")?;
    println!("raw: write 300 B + fdatasync        {sync:>9.1} µs");
    println!("raw: write 5 x 300 B + fdatasync    {step_bytes:>9.1} µs");
    for name in ["stub_sync_never", "stub_sync_step", "mock_sync_never"] {
        let short = median_us("run", &format!("{name}_20"))?;
        let long = median_us("run", &format!("{name}_200"))?;
        let per_step = (long - short) / 180.0;
        println!(
            "{name:<20} per step {per_step:>9.1} µs   ({:.2} x one fdatasync, {:.2} x the raw write+sync of a step)",
            per_step / sync,
            per_step / step_bytes
        );
    }
    Ok(())
}

/// Prints each HTTP provider's turn beside the raw round trip of the same
/// run (see `tests/benches/http.rs`); skipped when that bench has not run.
fn report_http() -> anyhow::Result<()> {
    for provider in ["openai", "anthropic"] {
        let Ok(raw) = median_us("http_turn", &format!("{provider}_raw")) else {
            continue;
        };
        println!("{provider}: raw POST + read          {raw:>9.1} µs");
        for what in ["raw_sse", "adapter", "tool_loop"] {
            let us = median_us("http_turn", &format!("{provider}_{what}"))?;
            println!(
                "{provider}: {what:<24} {us:>9.1} µs   ({:.2} x raw)",
                us / raw
            );
        }
    }
    Ok(())
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

//! Developer tasks, run as `cargo xtask <task>` (an alias in `.cargo/config.toml`).
//!
//! - `test`: the whole test suite, with what it drives: checks that `jq`,
//!   Node.js and Chromium are here, installing them where `apt-get` can
//!   (`src/needs.rs`), installs the pinned agent CLIs (`.ci/install-agent-clis`), then
//!   runs `cargo test --workspace` with both required, so none of their tests
//!   can pass by skipping; then the library's examples (`cargo run --example`,
//!   each asserting what it shows); then docs/library.md's first program as a
//!   crate of its own outside the workspace (`src/consumer.rs`); then the
//!   timeline page's tests (`tests/ui`) in the system Chromium.
//! - `tidy`: the architecture's rules the compiler does not check (no
//!   import cycles, waits through `Clock`, processes through
//!   `group::spawn`, concrete types in the composition root; `src/arch.rs`).
//! - `ci`: format check, clippy, `tidy`, the API docs (`-D warnings`), then
//!   `test`; `.ci/run` runs this on a fresh machine, so the two cannot
//!   drift apart.
//! - `bench`: every criterion benchmark, then the derived per-step figures
//!   (`bench-report` prints those again from the last results).
//!   `bench --peers [--runs N] [--rounds R]`: instead, awr beside entelix
//!   and LangGraph on the same chain of agents, round by round
//!   (`src/peers.rs`).
//! - `fuzz-api`: schemathesis against a live `awr serve`, from its OpenAPI
//!   description (`src/fuzz_api.rs`); `.ci/run` runs it after `ci`.
//! - `consumer`: only the step of `test` that builds and runs
//!   docs/library.md's first program outside the workspace.
//!
//! The tidy test (`src/tidy.rs`) lives here too, so `cargo test` enforces
//! the architecture's invariants on every run.

use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::sync::OnceLock;

use anyhow::{Context, bail};

mod arch;
mod consumer;
mod fuzz_api;
mod needs;
mod peers;
mod postgres;
#[cfg(test)]
mod tidy;

fn main() -> ExitCode {
    let task = std::env::args().nth(1).unwrap_or_default();
    let result = match task.as_str() {
        "ci" => ci(),
        "test" => test(),
        "tidy" => arch::tidy(&workspace_root()),
        "consumer" => target_dir().and_then(|target| consumer::run(&workspace_root(), target)),
        "bench" if std::env::args().any(|a| a == "--peers") => {
            let args: Vec<String> = std::env::args().skip(2).collect();
            target_dir().and_then(|target| peers::run(&workspace_root(), target, &args))
        }
        "bench" => bench(),
        "bench-report" => report(),
        "fuzz-api" => fuzz_api::fuzz_api(),
        _ => {
            eprintln!(
                "usage: cargo xtask <test|ci|tidy|bench [--peers]|bench-report|fuzz-api|consumer>"
            );
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

/// The checks CI runs (`.ci/run` calls this): format, lints, the whole suite.
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
    arch::tidy(&workspace_root())?;
    docs()?;
    disk_report();
    let tested = test();
    if tested.is_err() {
        disk_report();
    }
    tested
}

/// Prints the free space where the build and the tests write: a suite
/// that fails on a full disk says so in CI's log, not only in its errors.
fn disk_report() {
    let mut df = Command::new("df");
    df.arg("-Ph")
        .arg(workspace_root())
        .arg(std::env::temp_dir());
    if let Err(e) = run(df, "df") {
        eprintln!("xtask: cannot tell the free disk space: {e:#}");
    }
}

/// The API documentation builds without a warning: a broken or private
/// intra-doc link fails CI, not a reader.
fn docs() -> anyhow::Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut command = Command::new(&cargo);
    command
        .args(["doc", "--no-deps", "--workspace"])
        .env("RUSTDOCFLAGS", "-D warnings")
        .current_dir(workspace_root());
    run(command, "cargo doc --no-deps --workspace")
}

/// The whole test suite: the tests that drive `jq`, the genuine agent
/// CLIs and PostgreSQL are required, not skipped. The PostgreSQL server is
/// a throwaway one, stopped when the suite ends, passed or not.
fn test() -> anyhow::Result<()> {
    needs::ensure()?;
    let clis = agent_clis()?;
    let mcp_python = installed(".ci/install-mcp-python", "python3 with venv and pip")?;
    let mcp_conformance = installed(".ci/install-mcp-conformance", "npm")?;
    let postgres = postgres::Cluster::start(&std::env::temp_dir())?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut command = Command::new(&cargo);
    command
        .args(["test", "--workspace"])
        .env("AWR_REQUIRE_JQ", "1")
        .env("AWR_AGENT_CLIS", &clis)
        .env("AWR_MCP_PYTHON", &mcp_python)
        .env("AWR_MCP_CONFORMANCE", &mcp_conformance)
        .env("AWR_TEST_POSTGRES", postgres.url())
        .env("AWR_TEST_POSTGRES_RESTART", postgres.restart_command())
        .env("AWR_REQUIRE_POSTGRES", "1");
    run(command, "cargo test --workspace")?;
    drop(postgres);
    examples()?;
    consumer::run(&workspace_root(), target_dir()?)?;
    ui_tests()
}

/// The library's examples (`crates/cli/examples`), each swapping the
/// adapter it names and asserting what it shows (docs/library.md).
const EXAMPLES: [&str; 4] = [
    "embed_query_fn",
    "embed_transcript_sink",
    "embed_store",
    "embed_subscriber",
];

/// Runs every example of [`EXAMPLES`]; one that exits non-zero fails the suite.
fn examples() -> anyhow::Result<()> {
    for example in EXAMPLES {
        cargo(&["run", "--quiet", "-p", "cli", "--example", example])?;
    }
    Ok(())
}

/// The timeline page's tests (`tests/ui`, `node --test`): its fold, and the
/// page in the system Chromium against the `awr` built here. Chromium is
/// required: without it these tests fail, they do not skip.
fn ui_tests() -> anyhow::Result<()> {
    cargo(&["build", "-p", "cli", "--bin", "awr"])?;
    let target = criterion_dir()?.parent().context("no target directory")?;
    let dir = workspace_root().join("tests/ui");
    let mut npm = Command::new("npm");
    npm.args(["ci", "--no-audit", "--no-fund"])
        .current_dir(&dir)
        .env("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1");
    run(npm, "npm ci (tests/ui)")?;
    let mut node = Command::new("node");
    node.args(["--test", "--test-concurrency=1"])
        .current_dir(&dir)
        .env("AWR_BIN", target.join("debug/awr"))
        .env("AWR_UI_ARTIFACTS", target.join("ui-artifacts"));
    run(node, "node --test (tests/ui)")
}

/// Installs the pinned agent CLIs (a no-op when the cache holds them) and
/// returns the directory of their executables.
fn agent_clis() -> anyhow::Result<String> {
    installed(".ci/install-agent-clis", "node and npm")
}

/// Runs the install script `script` (of the repository; a no-op when its
/// cache holds what it installs, pinned) and returns the path it prints;
/// `needs` says what it needs, for its failure.
fn installed(script: &str, needs: &str) -> anyhow::Result<String> {
    let script = workspace_root().join(script);
    let out = Command::new(&script)
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("cannot start {}", script.display()))?;
    if !out.status.success() {
        bail!(
            "{} failed ({}); it needs {needs}",
            script.display(),
            out.status
        );
    }
    let path = String::from_utf8(out.stdout)
        .with_context(|| format!("{} printed a path that is not UTF-8", script.display()))?
        .trim()
        .to_owned();
    if path.is_empty() {
        bail!("{} printed no path", script.display());
    }
    Ok(path)
}

/// The workspace root: the parent of this crate's directory.
fn workspace_root() -> std::path::PathBuf {
    let xtask = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    xtask.parent().unwrap_or(xtask).to_path_buf()
}

/// Every benchmark of the workspace, then the derived per-step figures.
fn bench() -> anyhow::Result<()> {
    // The PostgreSQL bench's server, syncing commits as in use.
    let postgres = postgres::Cluster::start_with(&std::env::temp_dir(), true)?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut command = Command::new(&cargo);
    command
        .args(["bench", "--workspace"])
        .env("AWR_TEST_POSTGRES", postgres.url());
    run(command, "cargo bench --workspace")?;
    drop(postgres);
    report()
}

/// Every figure `cargo bench` left that has a raw reference beside it.
fn report() -> anyhow::Result<()> {
    let dir = criterion_dir()?;
    if !dir.is_dir() {
        bail!(
            "no benchmark results in {}: run `cargo xtask bench` first",
            dir.display()
        );
    }
    report_cadence()?;
    report_runner_interleaved()?;
    report_cli_steps()?;
    report_steps()?;
    report_fan_out()?;
    report_http()?;
    report_resume()?;
    report_serve_followers()?;
    report_group_commit()?;
    report_postgres()?;
    report_workers()
}

/// Prints the runs/s of 1, 2, 4 and 8 workers, the events per write
/// transaction, and what a follower costs a run (see
/// `tests/benches/workers.rs`); skipped when that bench has not run.
fn report_workers() -> anyhow::Result<()> {
    let Some((_, json)) = figures("workers")? else {
        return Ok(());
    };
    for k in [1, 2, 4, 8] {
        let figure = &json[format!("workers_{k}")];
        let runs = figure["runs_per_s"].as_f64().unwrap_or(f64::NAN);
        let per = figure["events_per_transaction"]
            .as_f64()
            .unwrap_or(f64::NAN);
        println!(
            "workers: {k} worker(s): {runs:>7.1} runs/s, {per:.2} events per write transaction"
        );
    }
    let follower = &json["follower"];
    let ratio = follower["ratio"].as_f64().unwrap_or(f64::NAN);
    println!("workers: a run followed by `awr events --follow`: {ratio:.2} x its time alone");
    Ok(())
}

/// Prints a durable step on the PostgreSQL store as a ratio to one raw
/// single-row `INSERT … COMMIT` on the same server, taken in turn with it
/// (see `tests/benches/postgres.rs`); skipped when that bench has not run.
fn report_postgres() -> anyhow::Result<()> {
    let Some((path, json)) = figures("postgres")? else {
        return Ok(());
    };
    let Some(steps) = json["steps"].as_object() else {
        bail!("{}: no step figures", path.display());
    };
    for (name, figure) in steps {
        let us = figure["median_us"].as_f64().unwrap_or(f64::NAN);
        let ratio = figure["ratio"].as_f64().unwrap_or(f64::NAN);
        println!("postgres: {name:<14} {us:>8.1} µs   ({ratio:.2} x one raw INSERT … COMMIT)");
    }
    Ok(())
}

/// Prints the events/s of one run with 0, 100 and 1,000 HTTP followers and
/// the slowdown beside none (see `tests/benches/serve.rs`); skipped when
/// that bench has not run.
fn report_serve_followers() -> anyhow::Result<()> {
    const EVENTS: f64 = 25_000.0;
    let Ok(alone) = median_us("serve_followers", "followers_0") else {
        return Ok(());
    };
    for n in [0, 100, 1000] {
        let us = median_us("serve_followers", &format!("followers_{n}"))?;
        println!(
            "serve: one run, {n:>4} followers   {:>9.0} events/s   ({:+.1} % time beside none)",
            EVENTS / (us / 1e6),
            (us / alone - 1.0) * 100.0
        );
    }
    Ok(())
}

/// Prints steps of 1, 10 and 100 concurrent runs and a run's fixed cost,
/// with their syncs, as ratios to a raw `fdatasync` taken in turn with them
/// (see `tests/benches/group_commit.rs`); skipped when that bench has not run.
fn report_group_commit() -> anyhow::Result<()> {
    let Some((path, json)) = figures("group_commit")? else {
        return Ok(());
    };
    let Some(figures) = json["interleaved"].as_object() else {
        bail!("{}: no interleaved figures", path.display());
    };
    for (name, figure) in figures {
        let us = figure["median_us"].as_f64().unwrap_or(f64::NAN);
        let ratio = figure["ratio"].as_f64().unwrap_or(f64::NAN);
        let syncs = figure["syncs_per_boundary"]
            .as_f64()
            .map(|s| format!("; {s:.3} syncs per step boundary"))
            .unwrap_or_default();
        let per_step = figure["per_boundary_ratio"]
            .as_f64()
            .map(|r| format!("; per step {r:.2} x"))
            .unwrap_or_default();
        println!(
            "group commit: {name:<20} {us:>9.1} µs   ({ratio:.2} x one fdatasync{per_step}{syncs})"
        );
    }
    Ok(())
}

/// Prints, for runs of 100 to 10,000 steps, the bytes written beside the
/// log's size and the state load beside a raw parse of the same bytes (see
/// `tests/benches/cadence.rs`); skipped when that bench has not run.
fn report_cadence() -> anyhow::Result<()> {
    let Some((_, runs)) = figures("cadence")? else {
        return Ok(());
    };
    for steps in ["100", "2000", "10000"] {
        let run = &runs[steps];
        if !run.is_object() {
            // A bench run limited to other sizes (`CADENCE_STEPS`).
            println!("cadence {steps:>5} steps: not measured in the last run of the bench");
            continue;
        }
        let n = |key: &str| run[key].as_f64().unwrap_or(f64::NAN);
        // Figures of a bench from before deltas have none: zero.
        let deltas = |key: &str| run[key].as_f64().unwrap_or(0.0);
        let log = n("log_bytes");
        let written = log + n("snapshot_bytes") + deltas("delta_bytes");
        println!(
            "cadence {steps:>5} steps: log {:.2} MB, log + {} snapshots + {} deltas {:.2} MB \
             ({:.2} x the log, target <= 3)",
            log / 1e6,
            n("snapshots"),
            deltas("deltas"),
            written / 1e6,
            written / log
        );
        println!(
            "  state load at its worst ({:.0} KB snapshot, {} deltas of {:.0} KB, a tail of {} events) \
             {:>9.1} µs (snapshot and deltas {:.1} + tail {:.1}; {:.2} x the raw parse, {:.1} µs)",
            n("snapshot_len") / 1e3,
            deltas("load_deltas"),
            deltas("load_deltas_len") / 1e3,
            n("tail_events"),
            n("load_us"),
            n("snapshot_us"),
            n("tail_us"),
            n("load_us") / n("raw_us"),
            n("raw_us")
        );
        println!(
            "  the same bytes read and scanned, nothing built {:>9.1} µs ({:.2} x); \
             an ended run (final snapshot, no tail) {:.1} µs",
            n("scan_us"),
            n("load_us") / n("scan_us"),
            n("ended_us")
        );
        println!(
            "  until the state is in hand (its drop left out): {:.1} µs at its worst, \
             {:.1} µs for the ended run",
            n("load_kept_us"),
            n("ended_kept_us")
        );
    }
    Ok(())
}

/// Prints the time from `Executor::resume` to the provider call for an
/// interrupted 100-step run, its parts, and the raw figures of the same run
/// (see `tests/benches/resume.rs`); skipped when that bench has not run.
fn report_resume() -> anyhow::Result<()> {
    let Ok(sync) = median_us("resume_raw", "write_300B_fdatasync") else {
        return Ok(());
    };
    let snapshot = median_us("resume_raw", "read_parse_snapshot")?;
    let tail = median_us("resume_raw", "read_parse_tail")?;
    println!("raw: read + parse snapshot (JSON)   {snapshot:>9.1} µs");
    println!("raw: read log + parse its tail      {tail:>9.1} µs");
    println!("raw: write 300 B + fdatasync        {sync:>9.1} µs");
    for wiring in ["bare", "as_awr"] {
        let us = median_us("resume", &format!("{wiring}_100_steps"))?;
        println!(
            "resume {wiring:<7} to the provider call {us:>9.1} µs   ({:.2} x the 1 ms target, {:.2} x one fdatasync, {:.2} x the raw parse of snapshot + tail)",
            us / 1_000.0,
            us / sync,
            us / (snapshot + tail)
        );
        let path = criterion_file(&format!("resume/parts_{wiring}.json"))?;
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let parts: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("parse {}", path.display()))?;
        if let Some(parts) = parts["parts"].as_object() {
            for (what, part) in parts {
                let us = part["median_us"].as_f64().unwrap_or_default();
                println!("  {what:<24} {us:>9.1} µs");
            }
        }
    }
    Ok(())
}

/// Prints a fan-out of three 1-second agents beside one such agent alone:
/// independent branches should cost one agent's time, not three.
fn report_fan_out() -> anyhow::Result<()> {
    let Ok(one) = median_us("fan_out", "agents_1s_1") else {
        return Ok(());
    };
    let three = median_us("fan_out", "agents_1s_3")?;
    println!("fan-out: one 1 s agent               {:>9.3} s", one / 1e6);
    println!(
        "fan-out: three 1 s agents in parallel {:>9.3} s   ({:.2} x one agent)",
        three / 1e6,
        three / one
    );
    Ok(())
}

/// Where criterion writes its results: `criterion/` in the target
/// directory (see [`target_dir`]).
fn criterion_dir() -> anyhow::Result<&'static PathBuf> {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    if let Some(dir) = DIR.get() {
        return Ok(dir);
    }
    let dir = target_dir()?.join("criterion");
    Ok(DIR.get_or_init(|| dir))
}

/// The target directory cargo uses (`CARGO_TARGET_DIR`, a configured
/// `target-dir`, or `target/` in the workspace), as `cargo metadata`
/// reports it, so tasks find what cargo built whatever the target
/// directory and working directory.
fn target_dir() -> anyhow::Result<&'static PathBuf> {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    if let Some(dir) = DIR.get() {
        return Ok(dir);
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(&cargo)
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(workspace_root())
        .output()
        .context("cannot start `cargo metadata`")?;
    if !out.status.success() {
        bail!(
            "`cargo metadata` failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let metadata: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("`cargo metadata` printed no JSON")?;
    let target = metadata["target_directory"]
        .as_str()
        .context("`cargo metadata` names no target directory")?;
    Ok(DIR.get_or_init(|| PathBuf::from(target)))
}

/// A file of criterion's results, `criterion/<rest>`.
fn criterion_file(rest: &str) -> anyhow::Result<PathBuf> {
    Ok(criterion_dir()?.join(rest))
}

/// The `figures.json` a bench of ours wrote beside criterion's results,
/// and its path; `None` when that bench has not run.
fn figures(bench: &str) -> anyhow::Result<Option<(PathBuf, serde_json::Value)>> {
    let path = criterion_file(&format!("{bench}/figures.json"))?;
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Ok(None);
    };
    let json = serde_json::from_str(&text).with_context(|| format!("parse {}", path.display()))?;
    Ok(Some((path, json)))
}

/// Median of one criterion benchmark, in microseconds.
fn median_us(group: &str, id: &str) -> anyhow::Result<f64> {
    let path = criterion_file(&format!("{group}/{id}/new/estimates.json"))?;
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("read {}", path.display()))?;
    let path = path.display();
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
    // Both raw figures, or a run of the bench limited by a filter.
    let (Ok(sync), Ok(step_bytes)) = (
        median_us("raw", "write_300B_fdatasync"),
        median_us("raw", "write_5x300B_fdatasync"),
    ) else {
        return Ok(());
    };
    println!("raw: write 300 B + fdatasync        {sync:>9.1} µs");
    println!("raw: write 5 x 300 B + fdatasync    {step_bytes:>9.1} µs");
    for name in ["stub_sync_never", "stub_sync_step", "mock_sync_never"] {
        let (Ok(short), Ok(long)) = (
            median_us("run", &format!("{name}_20")),
            median_us("run", &format!("{name}_200")),
        ) else {
            println!("{name:<20} not measured in the last run of the bench");
            continue;
        };
        let per_step = (long - short) / 180.0;
        println!(
            "{name:<20} per step {per_step:>9.1} µs   ({:.2} x one fdatasync, {:.2} x the raw write+sync of a step)",
            per_step / sync,
            per_step / step_bytes
        );
    }
    Ok(())
}

/// Prints the runner's steps taken in turn with the raw sync, pass by pass
/// (see `tests/benches/runner.rs`); skipped when that bench has not run.
fn report_runner_interleaved() -> anyhow::Result<()> {
    let Some((_, json)) = figures("runner")? else {
        return Ok(());
    };
    let raw = json["raw_fdatasync_us"].as_f64().unwrap_or(f64::NAN);
    println!("interleaved: raw write 300 B + fdatasync {raw:>9.1} µs");
    for name in ["stub_sync_step", "stub_sync_never"] {
        let step = json[name]["per_step_us"].as_f64().unwrap_or(f64::NAN);
        let ratio = json[name]["ratio"].as_f64().unwrap_or(f64::NAN);
        println!(
            "interleaved: {name:<20} per step {step:>9.1} µs   ({ratio:.2} x the fdatasync of the same pass)"
        );
    }
    let floor = &json["record_floor"];
    let n = |key: &str| floor[key].as_f64().unwrap_or(f64::NAN);
    println!(
        "interleaved: a step's record by serde_json {:>6.1} µs (sync off is {:.2} x it; \
         the writes alone {:.1} µs, {:.0} B of snapshot a step)",
        n("per_step_us"),
        n("sync_never_over_floor"),
        n("writes_us"),
        n("snapshot_bytes_per_step")
    );
    Ok(())
}

/// Prints a durable step through the whole `awr run` at 100, 1,000 and
/// 10,000 steps beside the raw sync of the same passes (see
/// `tests/benches/cli_steps.rs`); skipped when that bench has not run.
fn report_cli_steps() -> anyhow::Result<()> {
    let Some((_, json)) = figures("cli_steps")? else {
        return Ok(());
    };
    let raw = json["raw_fdatasync_us"].as_f64().unwrap_or(f64::NAN);
    println!("awr run: raw write 300 B + fdatasync {raw:>9.1} µs");
    let own = &json["step_bytes_sync"];
    if let (Some(us), Some(ratio)) = (own["us"].as_f64(), own["ratio"].as_f64()) {
        println!(
            "awr run: a step's own log bytes ({} + {} B) + fdatasync {us:>9.1} µs ({ratio:.2} x the 300 B one)",
            own["writes"][0], own["writes"][1]
        );
    }
    for n in [100, 1_000, 10_000] {
        let figure = &json[format!("chain_{n}")];
        let step = figure["per_step_us"].as_f64().unwrap_or(f64::NAN);
        let ratio = figure["ratio"].as_f64().unwrap_or(f64::NAN);
        let marginal = figure["marginal_us"]
            .as_f64()
            .zip(figure["marginal_ratio"].as_f64())
            .map(|(us, r)| format!("; marginal {us:.1} µs, {r:.2} x"))
            .unwrap_or_default();
        let rss = figure["max_rss_kb"]
            .as_f64()
            .map(|kb| format!("; max RSS {:.1} MB", kb / 1024.0))
            .unwrap_or_default();
        println!(
            "awr run: {n:>6} steps, per step {step:>9.1} µs   ({ratio:.2} x one fdatasync{marginal}{rss})"
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

/// `cargo ARGS` in the workspace, from whatever directory xtask was run.
fn cargo(args: &[&str]) -> anyhow::Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut command = Command::new(&cargo);
    command.args(args).current_dir(workspace_root());
    run(command, &format!("cargo {}", args.join(" ")))
}

/// Runs `command` to its end; `what` names it in the error.
fn run(mut command: Command, what: &str) -> anyhow::Result<()> {
    let status = command
        .status()
        .with_context(|| format!("cannot start `{what}`"))?;
    if !status.success() {
        bail!("`{what}` failed ({status})");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    //! CI and `cargo xtask ci` are one list of steps, kept here.

    #![allow(clippy::unwrap_used)]

    use super::{EXAMPLES, criterion_dir, workspace_root};

    /// Every example of the library is run by `cargo xtask test`.
    #[test]
    fn every_example_is_run() {
        let dir = workspace_root().join("crates/cli/examples");
        let mut found: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| {
                let name = e.unwrap().file_name().into_string().unwrap();
                name.strip_suffix(".rs").map(str::to_owned)
            })
            .collect();
        found.sort();
        let mut listed: Vec<String> = EXAMPLES.iter().map(|e| (*e).to_owned()).collect();
        listed.sort();
        assert_eq!(
            found,
            listed,
            "EXAMPLES must name every file of {}",
            dir.display()
        );
    }

    /// The report reads criterion's results where cargo put them: in the
    /// target directory `cargo metadata` names, not `./target`.
    #[test]
    fn criterion_results_are_looked_for_in_cargos_target_directory() {
        let dir = criterion_dir().unwrap();
        assert!(dir.ends_with("criterion"), "{}", dir.display());
        let target = dir.parent().unwrap();
        let expected = match std::env::var_os("CARGO_TARGET_DIR") {
            Some(t) => std::path::PathBuf::from(t),
            None => workspace_root().join("target"),
        };
        assert_eq!(
            target.canonicalize().unwrap(),
            expected.canonicalize().unwrap()
        );
    }

    /// `.ci/run` only prepares the machine and hands over to `cargo xtask
    /// ci`, then `cargo xtask fuzz-api`: a step added to one cannot be
    /// missing from the other.
    #[test]
    fn ci_run_calls_xtask_ci_and_runs_no_cargo_step_of_its_own() {
        let script = std::fs::read_to_string(workspace_root().join(".ci/run")).unwrap_or_default();
        let cargo_lines: Vec<&str> = script
            .lines()
            .map(str::trim)
            .filter(|l| !l.starts_with('#'))
            .filter(|l| l.split_whitespace().any(|word| word == "cargo"))
            .collect();
        assert_eq!(
            cargo_lines,
            ["cargo xtask ci", "exec cargo xtask fuzz-api"],
            "{script}"
        );
    }
}

//! awr's harness of the peers bench (`cargo xtask bench --peers`, which
//! runs it beside the entelix and LangGraph harnesses of `bench/peers/`).
//!
//! The work: a chain of 3 agents, each answering 300 bytes at once, run N
//! times through the library's entry point (`Runtime::builder`, then
//! `Runtime::run`), each a new run. Every run is timed alone, its creation
//! included; the figure is a run's cost / 3, the median over the N runs.
//!
//! `--config file`: the file store, synced at step boundaries (the
//! default); `--config sqlite`: the SQLite store, the same policy;
//! `--config memory`: `MemoryRunStore`. The storage is made in a fresh
//! directory before the first run is timed and removed after the last one.
//! Prints one JSON line of results.
//!
//! Usage: `peers --config file|sqlite|memory [--runs N]`. Run by `cargo
//! bench` without `--config`, it measures nothing and says so.

#![allow(clippy::expect_used)] // a benchmark has no caller to hand an error to

use std::sync::Arc;
use std::time::Instant;

use application::ports::{
    AgentMessage, AgentRequest, AgentResult, AgentStream, QueryError, QueryFn, RunStore,
};
use application::{RunRequest, Runtime};
use async_trait::async_trait;
use domain::RunStatus;
use domain::workflow::Provider;
use infrastructure::{
    FileRunStore, FileStoreConfig, MemoryRunStore, RandomIds, SqliteRunStore, SystemClock,
};
use serde_json::json;

/// Steps of the chain.
const STEPS: usize = 3;
/// Bytes of each agent's answer.
const ANSWER_BYTES: usize = 300;

/// An agent that answers 300 bytes at once.
struct Answer300;

#[async_trait]
impl QueryFn for Answer300 {
    async fn query(&self, request: AgentRequest) -> Result<AgentStream, QueryError> {
        let mut text = format!("answer of {}: ", request.agent_name);
        text.extend(std::iter::repeat_n('x', ANSWER_BYTES - text.len()));
        let done = AgentMessage::Completed(AgentResult {
            text,
            num_turns: 1,
            ..AgentResult::default()
        });
        Ok(Box::pin(futures::stream::iter([Ok(done)])))
    }
}

/// The value at fraction `p` of `sorted`.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    let last = sorted.len().saturating_sub(1);
    let at = (p * last as f64).round() as usize;
    sorted.get(at.min(last)).copied().unwrap_or(f64::NAN)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut config, mut runs) = (None, 1_000usize);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--config" => config = args.next(),
            "--runs" => runs = args.next().and_then(|n| n.parse().ok()).expect("--runs N"),
            _ => {} // `cargo bench` passes `--bench` and any filter
        }
    }
    let Some(config) = config else {
        println!("peers: measured by `cargo xtask bench --peers`, beside entelix and LangGraph");
        return;
    };
    let dir = tempfile::Builder::new()
        .prefix("peers-awr-")
        .tempdir()
        .expect("tempdir");
    let (name, durability, store): (_, _, Arc<dyn RunStore>) = match config.as_str() {
        "file" => (
            "awr-file",
            "file store, SyncPolicy::StepBoundary: each step's events fdatasync'd \
             before the next step starts (a new run's first sync: its directory \
             and the runs directory fsync'd too)",
            Arc::new(
                FileRunStore::open_with(dir.path().join("runs"), FileStoreConfig::default())
                    .expect("file store"),
            ),
        ),
        "sqlite" => (
            "awr-sqlite",
            "SQLite store, SyncPolicy::StepBoundary: appends commit without a sync \
             (WAL, synchronous=NORMAL); each step boundary fdatasyncs the WAL before \
             the next step starts",
            Arc::new(SqliteRunStore::open(dir.path().join("runs.db")).expect("sqlite store")),
        ),
        "memory" => (
            "awr-memory",
            "MemoryRunStore: nothing on disk",
            Arc::new(MemoryRunStore::new()),
        ),
        other => panic!("usage: peers --config file|sqlite|memory [--runs N], not {other}"),
    };
    // Current-thread, as `awr run` drives its run.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let runtime = Runtime::builder(store, Arc::new(SystemClock), Arc::new(RandomIds))
        .provider(Provider::Mock, Arc::new(Answer300))
        .build();
    let workflow = Arc::new(awr_tests::bench::chain("peers", "provider: mock", STEPS));
    let mut per_step = Vec::with_capacity(runs);
    let started = Instant::now();
    for run in 0..runs {
        let request = RunRequest {
            workflow: Arc::clone(&workflow),
            input: json!("go"),
            source: None,
            started_by: None,
        };
        let t = Instant::now();
        let outcome = rt.block_on(runtime.run(request)).expect("run");
        per_step.push(t.elapsed().as_secs_f64() * 1e6 / STEPS as f64);
        assert_eq!(
            outcome.status,
            RunStatus::Completed,
            "run {run}: {:?}",
            outcome.error
        );
        let text = outcome.output.as_str().or(outcome.output["text"].as_str());
        assert_eq!(
            text.map(str::len),
            Some(ANSWER_BYTES),
            "run {run}: {}",
            outcome.output
        );
    }
    let wall = started.elapsed().as_secs_f64();
    drop((runtime, rt));
    dir.close().expect("remove the storage");
    per_step.sort_by(f64::total_cmp);
    let line = json!({
        "config": name,
        "system": format!("awr {}", env!("CARGO_PKG_VERSION")),
        "durability": durability,
        "runs": runs,
        "steps_per_run": STEPS,
        "answer_bytes": ANSWER_BYTES,
        "per_step_us_median": percentile(&per_step, 0.5),
        "per_step_us_p10": percentile(&per_step, 0.1),
        "per_step_us_p90": percentile(&per_step, 0.9),
        "wall_s": wall,
    });
    println!("{line}");
}

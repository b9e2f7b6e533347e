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
//! Two more configurations time no awr code at all: what a run of this
//! chain costs the disk under awr's durability contract, with nothing else
//! (see [`floor`]). `--config floor-file`: the file store's writes and syncs;
//! `--config floor-sqlite`: the SQLite store's commits and syncs. No store
//! can be faster than its floor on the same disk, so a target below it is
//! out of reach without a change of the contract.
//!
//! Usage: `peers --config file|sqlite|memory|floor-file|floor-sqlite [--runs N]`.
//! Run by `cargo bench` without `--config`, it measures nothing and says so.

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
    if let Some(floor) = floor::Floor::named(&config) {
        let (per_step, wall) = floor.measure(dir.path(), runs);
        dir.close().expect("remove the storage");
        report(
            floor.name(),
            floor.durability(),
            "awr's durability floor",
            runs,
            per_step,
            wall,
        );
        return;
    }
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
    let system = format!("awr {}", env!("CARGO_PKG_VERSION"));
    report(name, durability, &system, runs, per_step, wall);
}

/// Prints a configuration's JSON line: the median and spread of its runs'
/// per-step times (µs).
fn report(
    name: &str,
    durability: &str,
    system: &str,
    runs: usize,
    mut per_step: Vec<f64>,
    wall: f64,
) {
    per_step.sort_by(f64::total_cmp);
    let line = json!({
        "config": name,
        "system": system,
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

/// What a run of the chain costs the disk under awr's durability contract
/// (design §4) and nothing else: no runtime, no JSON, no lock. The bytes
/// are those awr's log writes for this chain, in the same `write`s, and
/// the syncs fall where awr's fall: `flow:started` made durable before the
/// first step (with the new run's directory entries), then each step's
/// events at its boundary, the agent's call start written before the call.
mod floor {
    use std::fs::{DirBuilder, File, OpenOptions};
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    use std::path::Path;
    use std::time::Instant;

    use super::STEPS;

    /// The `write`s of a run's log, one list per sync, as awr's file store
    /// issues them for this chain (`strace -f -e write,fdatasync` of
    /// `peers --config file`): `flow:started`; then for each step its
    /// start and the agent's call start, on record before the call, and
    /// its answer, end and the next step's start (the last: the run's end).
    pub const SYNCED_WRITES: [&[usize]; 4] =
        [&[340], &[314, 359, 2071], &[657, 2074], &[658, 1739]];

    /// The two kinds of floor.
    pub enum Floor {
        File,
        Sqlite,
    }

    impl Floor {
        pub fn named(config: &str) -> Option<Self> {
            match config {
                "floor-file" => Some(Self::File),
                "floor-sqlite" => Some(Self::Sqlite),
                _ => None,
            }
        }

        pub fn name(&self) -> &'static str {
            match self {
                Self::File => "floor-file",
                Self::Sqlite => "floor-sqlite",
            }
        }

        pub fn durability(&self) -> &'static str {
            match self {
                Self::File => {
                    "awr-file's syncs alone: a new directory and log, flow:started \
                     fdatasync'd with both directories fsync'd, then each step's writes \
                     fdatasync'd at its boundary"
                }
                Self::Sqlite => {
                    "awr-sqlite's commits alone: one table keyed by an integer, WAL, \
                     synchronous=NORMAL; a run's 8 commits (its creation, then awr's \
                     writes as rows), the WAL fdatasync'd at awr's 4 sync points"
                }
            }
        }

        /// Times `runs` runs in `dir`: each run's cost / 3, in µs, and the
        /// wall time of them all, in seconds.
        pub fn measure(&self, dir: &Path, runs: usize) -> (Vec<f64>, f64) {
            let mut sqlite = match self {
                Self::File => None,
                Self::Sqlite => Some(Sqlite::open(dir)),
            };
            let bytes = vec![b'x'; 4096];
            let runs_dir = dir.join("runs");
            DirBuilder::new()
                .mode(0o700)
                .create(&runs_dir)
                .expect("runs directory");
            let mut per_step = Vec::with_capacity(runs);
            let started = Instant::now();
            for run in 0..runs {
                let t = Instant::now();
                match sqlite.as_mut() {
                    None => file_run(&runs_dir, run, &bytes),
                    Some(db) => db.run(run, &bytes),
                }
                per_step.push(t.elapsed().as_secs_f64() * 1e6 / STEPS as f64);
            }
            (per_step, started.elapsed().as_secs_f64())
        }
    }

    /// One run on the file store's floor.
    fn file_run(runs_dir: &Path, run: usize, bytes: &[u8]) {
        let dir = runs_dir.join(format!("{run:08}-0000-4000-8000-000000000000"));
        DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .expect("run directory");
        let mut log = OpenOptions::new()
            .append(true)
            .create_new(true)
            .mode(0o600)
            .open(dir.join("events.ndjson"))
            .expect("log");
        for (i, writes) in SYNCED_WRITES.iter().enumerate() {
            for &n in *writes {
                log.write_all(&bytes[..n]).expect("write");
            }
            log.sync_data().expect("fdatasync");
            if i == 0 {
                for d in [&dir, runs_dir] {
                    File::open(d)
                        .and_then(|d| d.sync_all())
                        .expect("fsync a directory");
                }
            }
        }
    }

    /// The SQLite store's floor: one connection, one table.
    struct Sqlite {
        conn: rusqlite::Connection,
        wal: Option<File>,
        wal_path: std::path::PathBuf,
    }

    impl Sqlite {
        fn open(dir: &Path) -> Self {
            let path = dir.join("floor.db");
            let conn = rusqlite::Connection::open(&path).expect("open");
            conn.execute_batch(
                "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; \
                 CREATE TABLE rows (id INTEGER PRIMARY KEY, run INTEGER NOT NULL, body BLOB NOT NULL);",
            )
            .expect("schema");
            Self {
                conn,
                wal: None,
                wal_path: dir.join("floor.db-wal"),
            }
        }

        /// A run: its creation as a row of its own, then each of awr's
        /// writes of a step's events a commit (a step's first one: the
        /// agent's call start, and its events before it), the WAL synced
        /// where the file store syncs the log.
        fn run(&mut self, run: usize, bytes: &[u8]) {
            self.commit(run, &[100], bytes);
            for writes in SYNCED_WRITES {
                match writes {
                    [last] => self.commit(run, &[*last], bytes),
                    [before @ .., last] => {
                        self.commit(run, before, bytes);
                        self.commit(run, &[*last], bytes);
                    }
                    [] => {}
                }
                let wal = self
                    .wal
                    .get_or_insert_with(|| File::open(&self.wal_path).expect("wal"));
                wal.sync_data().expect("fdatasync the WAL");
            }
        }

        fn commit(&mut self, run: usize, rows: &[usize], bytes: &[u8]) {
            let tx = self
                .conn
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .expect("begin");
            for &n in rows {
                tx.prepare_cached("INSERT INTO rows (run, body) VALUES (?1, ?2)")
                    .and_then(|mut s| s.execute(rusqlite::params![run as i64, &bytes[..n]]))
                    .expect("insert");
            }
            tx.commit().expect("commit");
        }
    }
}

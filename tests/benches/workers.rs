//! Workers on PostgreSQL: runs per second with 1, 2, 4 and 8 `awr worker`
//! processes, the events each committed transaction carries under that
//! load, and the cost of a follower.
//!
//! - `runs_per_s_K`: 200 queued runs of `examples/summarize.yaml` (mock
//!   agents; each run's own definition, input and lease) claimed and run
//!   to their end by K workers of the default concurrency (4), from the
//!   workers' start to the last `flow:completed`.
//! - `events_per_transaction_K`: the events written over the transactions
//!   that wrote meanwhile (transaction ids handed out, from
//!   `pg_current_snapshot()`): appends, snapshots, claims, heartbeats and
//!   the syncs of step boundaries all count.
//! - `follower`: one worker runs a chain of 300 mock agents, alone and
//!   then followed from its first event by `awr events --follow` (a
//!   process of its own, woken by `NOTIFY`); the ratio of the two times is
//!   what a follower costs the run.
//!
//! The server is the one `AWR_TEST_POSTGRES` names (`cargo xtask bench`
//! starts one with `fsync` on). Figures go to
//! `target/criterion/workers/figures.json` for `cargo xtask bench-report`.

#![allow(clippy::expect_used)] // a benchmark has no caller to hand an error to

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

/// Queued runs per worker count.
const RUNS: u64 = 200;

/// Steps of the chain the follower follows.
const CHAIN: usize = 300;

/// Passes of the follower figure (alone, followed), whose medians are compared.
const PASSES: usize = 3;

struct Bench {
    awr: PathBuf,
    base: String,
    dir: tempfile::TempDir,
}

impl Bench {
    /// A fresh database on the server, as a URL.
    fn database(&self) -> String {
        let name = format!("awr_bench_{}", uuid::Uuid::new_v4().simple());
        query(&self.base, &format!("CREATE DATABASE {name}"));
        let (server, _) = self.base.rsplit_once('/').expect("a postgres:// URL");
        format!("{server}/{name}")
    }

    fn awr(&self, url: &str, args: &[&str]) -> Command {
        let mut command = Command::new(&self.awr);
        command
            .arg("--storage")
            .arg(url)
            .args(args)
            .current_dir(repo_root())
            .env_remove("AWR_STORAGE")
            .env("XDG_STATE_HOME", self.dir.path().join("state"))
            .stdin(Stdio::null());
        command
    }

    /// `awr submit FLOW`: the run id.
    fn submit(&self, url: &str, flow: &str) -> String {
        let out = self
            .awr(url, &["submit", flow])
            .output()
            .expect("awr submit");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    fn worker(&self, url: &str, name: &str) -> Child {
        self.awr(url, &["worker", "--name", name, "--poll", "20ms"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn awr worker")
    }
}

/// The first column of the first row of `sql`, as text (none: empty).
fn query(url: &str, sql: &str) -> String {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .expect("connect");
        tokio::spawn(connection);
        let rows = client.query(sql, &[]).await.expect("query");
        rows.first().map(|row| row.get(0)).unwrap_or_default()
    })
}

fn count(url: &str, sql: &str) -> u64 {
    query(url, sql).parse().expect("a count")
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

/// Stops the workers (SIGTERM: they drain) and waits for them.
fn stop(workers: Vec<Child>) {
    for worker in &workers {
        let _ = Command::new("kill")
            .args(["-TERM", &worker.id().to_string()])
            .status();
    }
    for mut worker in workers {
        let _ = worker.wait();
    }
}

/// Waits until `url` has `n` completed runs, looking every 20 ms over one
/// connection (a connection per look would cost the server a backend
/// each, and the figure with it).
fn completed(url: &str, n: u64) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .expect("connect");
        tokio::spawn(connection);
        let statement = client
            .prepare("SELECT count(*) FROM awr_events WHERE kind = 'flow:completed'")
            .await
            .expect("prepare");
        let deadline = Instant::now() + Duration::from_secs(600);
        loop {
            let done: i64 = client
                .query_one(&statement, &[])
                .await
                .expect("count")
                .get(0);
            if u64::try_from(done).unwrap_or(0) >= n {
                return;
            }
            assert!(Instant::now() < deadline, "the runs did not complete");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
}

/// Transaction ids the cluster has handed out so far: one per transaction
/// that wrote (reads take none), whoever ran it.
fn xids(url: &str) -> u64 {
    count(url, "SELECT pg_snapshot_xmax(pg_current_snapshot())::text")
}

/// Runs/s of `k` workers over [`RUNS`] queued runs, and events per write
/// transaction.
fn throughput(bench: &Bench, k: usize) -> (f64, f64) {
    let url = bench.database();
    bench.submit(&url, "examples/summarize.yaml");
    query(
        &url,
        &format!(
            "INSERT INTO awr_runs (run_id, status, submission, priority) \
             SELECT gen_random_uuid(), 'queued', r.submission, 0 \
             FROM awr_runs AS r, generate_series(1, {}) RETURNING 'x'",
            RUNS - 1
        ),
    );
    let events_before = count(&url, "SELECT count(*)::text FROM awr_events");
    let before = xids(&url);
    let start = Instant::now();
    let workers: Vec<Child> = (0..k)
        .map(|i| bench.worker(&url, &format!("w{i}")))
        .collect();
    completed(&url, RUNS);
    let took = start.elapsed().as_secs_f64();
    let after = xids(&url);
    stop(workers);
    let events = count(&url, "SELECT count(*)::text FROM awr_events") - events_before;
    let per_transaction = events as f64 / after.saturating_sub(before).max(1) as f64;
    (RUNS as f64 / took, per_transaction)
}

/// Seconds one worker takes over the chain, followed or not.
fn chain_run(bench: &Bench, flow: &str, followed: bool) -> f64 {
    let url = bench.database();
    let run = bench.submit(&url, flow);
    let follower = followed.then(|| {
        bench
            .awr(&url, &["events", &run, "--follow", "--json"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn awr events --follow")
    });
    let start = Instant::now();
    let worker = bench.worker(&url, "chain");
    completed(&url, 1);
    let took = start.elapsed().as_secs_f64();
    stop(vec![worker]);
    if let Some(mut follower) = follower {
        let _ = follower.wait();
    }
    took
}

fn main() {
    let Ok(base) = std::env::var("AWR_TEST_POSTGRES") else {
        eprintln!("workers bench skipped: no server (`cargo xtask bench` starts one)");
        return;
    };
    let bench = Bench {
        awr: std::env::var_os("AWR_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(awr_tests::bench::release_awr),
        base,
        dir: tempfile::tempdir().expect("a scratch directory"),
    };
    let mut out = serde_json::Map::new();
    for k in [1, 2, 4, 8] {
        let (runs_per_s, per_transaction) = throughput(&bench, k);
        println!(
            "workers: {k} worker(s): {runs_per_s:>7.1} runs/s, {per_transaction:.2} events per write transaction"
        );
        out.insert(
            format!("workers_{k}"),
            json!({"runs_per_s": runs_per_s, "events_per_transaction": per_transaction}),
        );
    }
    awr_tests::bench::mock_chain(bench.dir.path(), CHAIN);
    let flow = bench.dir.path().join(format!("chain{CHAIN}.yaml"));
    let flow = flow.to_str().expect("a UTF-8 path");
    let (mut alone, mut followed) = (Vec::new(), Vec::new());
    for _ in 0..PASSES {
        alone.push(chain_run(&bench, flow, false));
        followed.push(chain_run(&bench, flow, true));
    }
    let (alone, followed) = (
        awr_tests::bench::median(&alone),
        awr_tests::bench::median(&followed),
    );
    let ratio = followed / alone;
    println!(
        "workers: a {CHAIN}-step run: {alone:.2} s alone, {followed:.2} s followed ({ratio:.2} x)"
    );
    out.insert(
        "follower".into(),
        json!({"steps": CHAIN, "alone_s": alone, "followed_s": followed, "ratio": ratio}),
    );
    let dir = awr_tests::bench::criterion_dir().join("workers");
    std::fs::create_dir_all(&dir).expect("the figures' directory");
    std::fs::write(
        dir.join("figures.json"),
        serde_json::to_vec_pretty(&serde_json::Value::Object(out)).expect("JSON"),
    )
    .expect("write the figures");
}

//! The runtime's own cost per step, beside the raw figure it is judged against.
//!
//! A step is one agent node of a chain, run by the real runner on the real
//! file store. `stub` agents answer at once (the runtime's cost alone);
//! `mock` agents are the fixture provider reading its JSON files.
//!
//! Each configuration runs a 20-step and a 200-step chain; creating the run
//! (its directory and log) is set-up, outside the timing. A run still pays
//! fixed costs (its first snapshot file, the first and last events), and
//! creating a file on ext4 costs anything from 10 µs to a few hundred
//! depending on what the filesystem deleted recently; the per-step cost is
//! therefore the *marginal* one, `(t200 - t20) / 180`, which those fixed
//! costs cancel out of. `cargo xtask bench` prints it.
//! Reference in the same run: `write` + `fdatasync` of a 300-byte line.
//! The interleaved passes also time each policy with its spans exported
//! live (OTLP/HTTP to a receiver on 127.0.0.1 that takes every request):
//! what the live export adds to a step.

#![allow(clippy::expect_used)] // a benchmark has no caller to hand an error to

use awr_tests::bench::{Counting, Stub, chain};
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use adapters_agents::{MockQuery, Providers};
use application::ports::{
    AgentMessage, AgentRequest, AgentResult, AgentStream, QueryError, QueryFn,
};
use application::{Executor, RunRequest};
use async_trait::async_trait;
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use domain::{RunId, WorkflowDef};
use infrastructure::{FileRunStore, FileStoreConfig, RandomIds, SyncPolicy, SystemClock};
use serde_json::{Value, json};

/// Chain lengths measured; the marginal cost per step is their difference.
const LENGTHS: [usize; 2] = [20, 200];

/// An agent that answers after a fixed time, like a model that thinks.
struct Slow(std::time::Duration);

#[async_trait]
impl QueryFn for Slow {
    async fn query(&self, request: AgentRequest) -> Result<AgentStream, QueryError> {
        let wait = self.0;
        let done = AgentMessage::Completed(AgentResult {
            text: format!("answer of {}", request.node_id),
            num_turns: 1,
            ..AgentResult::default()
        });
        Ok(Box::pin(futures::stream::once(async move {
            tokio::time::sleep(wait).await;
            Ok(done)
        })))
    }
}

/// `width` agents side by side between nothing and nothing: a fan-out.
fn fan_out(width: usize) -> WorkflowDef {
    let mut yaml = String::from("name: fan-out\nagents:\n  a: {provider: mock}\nnodes:\n");
    for i in 0..width {
        yaml += &format!("  - {{id: n{i}, agent: a}}\n");
    }
    WorkflowDef::from_yaml(&yaml).expect("fan-out workflow")
}

fn write_fixtures(dir: &Path, steps: usize) {
    let fx = dir.join("fx");
    std::fs::create_dir_all(&fx).expect("fixture dir");
    for i in 0..steps {
        let body = json!({"calls": [{"output": {"text": format!("answer {i}"), "sessionId": format!("s{i}"),
            "usage": {"inputTokens": 100, "outputTokens": 50}},
            "events": [{"type": "agent:start", "sessionId": format!("s{i}")},
                       {"type": "agent:text:delta", "content": "answer "},
                       {"type": "agent:text:delta", "content": format!("{i}")}]}]});
        std::fs::write(fx.join(format!("a{i}.json")), body.to_string()).expect("fixture");
    }
}

fn store(dir: &Path, name: &str, sync: SyncPolicy) -> Arc<FileRunStore> {
    let config = FileStoreConfig {
        sync,
        ..FileStoreConfig::default()
    };
    Arc::new(FileRunStore::open_with(dir.join(name), config).expect("store"))
}

/// Times whole runs of `workflow`; creating each run (a directory and a
/// file) is set-up, outside the timing.
fn time_runs(
    b: &mut criterion::Bencher<'_>,
    rt: &tokio::runtime::Runtime,
    runner: &Executor,
    workflow: &Arc<WorkflowDef>,
) {
    b.iter_batched(
        || rt.block_on(runner.create()).expect("create"),
        |id| {
            let req = RunRequest {
                workflow: Arc::clone(workflow),
                input: json!("go"),
                source: None,
                started_by: None,
            };
            rt.block_on(runner.run(id, req)).expect("run")
        },
        BatchSize::PerIteration,
    )
}

fn bench_runner(c: &mut Criterion) {
    // Current-thread, as `awr run` drives its one run.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    write_fixtures(dir.path(), LENGTHS[1]);

    let mut group = c.benchmark_group("run");
    group.sample_size(10);
    for steps in LENGTHS {
        let workflow = Arc::new(chain("bench", "provider: mock, fixtures: fx", steps));
        for (name, sync) in [
            ("stub_sync_never", SyncPolicy::Never),
            ("stub_sync_step", SyncPolicy::StepBoundary),
        ] {
            let runner = Executor::new(
                store(dir.path(), name, sync),
                Arc::new(Stub),
                Arc::new(SystemClock),
                Arc::new(RandomIds),
            );
            group.bench_function(format!("{name}/{steps}"), |b| {
                time_runs(b, &rt, &runner, &workflow)
            });
        }
        let mock_store = store(dir.path(), "mock", SyncPolicy::Never);
        group.bench_function(format!("mock_sync_never/{steps}"), |b| {
            b.iter_batched(
                || {
                    // A fresh provider per run: its call counters start at 0 again.
                    let mock = MockQuery::new(dir.path(), dir.path());
                    let runner = Executor::new(
                        mock_store.clone(),
                        Arc::new(Providers::new().with_mock(Arc::new(mock))),
                        Arc::new(SystemClock),
                        Arc::new(RandomIds),
                    );
                    let id = rt.block_on(runner.create()).expect("create");
                    (runner, id)
                },
                |(runner, id)| {
                    let req = RunRequest {
                        workflow: Arc::clone(&workflow),
                        input: json!("go"),
                        source: None,
                        started_by: None,
                    };
                    rt.block_on(runner.run(id, req)).expect("run")
                },
                BatchSize::PerIteration,
            )
        });
    }
    group.finish();

    // The raw figure a durable step is judged against.
    let mut raw = c.benchmark_group("raw");
    raw.sample_size(30);
    let path = dir.path().join("raw.log");
    let mut file = awr_tests::bench::append_file(&path);
    let line = awr_tests::bench::raw_line();
    raw.bench_function("write_300B_fdatasync", |b| {
        b.iter(|| {
            file.write_all(&line).expect("write");
            file.sync_data().expect("fdatasync");
        })
    });
    // What one step of the runner writes: five event lines of ~300 bytes, one sync.
    raw.bench_function("write_5x300B_fdatasync", |b| {
        b.iter(|| {
            for _ in 0..5 {
                file.write_all(&line).expect("write");
            }
            file.sync_data().expect("fdatasync");
        })
    });
    // The same, plus replacing a small file by rename as a snapshot write does:
    // shows what a per-step rename adds to the journal commit of the sync.
    let snap = dir.path().join("snap.json");
    let snap_tmp = dir.path().join("snap.json.tmp");
    raw.bench_function("write_300B_rename_fdatasync", |b| {
        b.iter(|| {
            file.write_all(&line).expect("write");
            std::fs::write(&snap_tmp, &line).expect("tmp");
            std::fs::rename(&snap_tmp, &snap).expect("rename");
            file.sync_data().expect("fdatasync");
        })
    });
    raw.finish();

    let figures = interleaved(&rt, dir.path(), &mut file, &line);
    let out = awr_tests::bench::criterion_dir().join("runner");
    if std::fs::create_dir_all(&out).is_ok() {
        let _ = std::fs::write(out.join("figures.json"), figures.to_string());
    }
}

/// What a step records, as untyped JSON: the raw reference of the runtime's
/// own cost. Taken from a 200-step stub run (sync off): its log's lines and
/// its final snapshot, with the bytes per step of each that the run wrote.
struct Record {
    /// The log's lines, one `write` per step's worth of them.
    steps: Vec<Vec<Value>>,
    snapshot: Value,
    snapshot_len: f64,
    /// Snapshot bytes a step wrote, marginal over the 20- and 200-step runs.
    snapshot_per_step: f64,
}

impl Record {
    fn probe(rt: &tokio::runtime::Runtime, dir: &Path, workflows: &[Arc<WorkflowDef>; 2]) -> Self {
        let counted = |steps: usize| {
            let inner =
                Arc::unwrap_or_clone(store(dir, &format!("record-{steps}"), SyncPolicy::Never));
            let store = Arc::new(Counting::new(inner));
            let runner = Executor::new(
                store.clone(),
                Arc::new(Stub),
                Arc::new(SystemClock),
                Arc::new(RandomIds),
            );
            let workflow = workflows[usize::from(steps == LENGTHS[1])].clone();
            let id: RunId = rt.block_on(runner.create()).expect("create");
            let req = RunRequest {
                workflow,
                input: json!("go"),
                source: None,
                started_by: None,
            };
            rt.block_on(runner.run(id, req)).expect("run");
            let run_dir = store.inner.run_dir(id);
            (store.snapshots.load(Ordering::Relaxed) as f64, run_dir)
        };
        let (short, _) = counted(LENGTHS[0]);
        let (long, run_dir) = counted(LENGTHS[1]);
        let log = std::fs::read_to_string(run_dir.join("events.ndjson")).expect("log");
        let lines: Vec<Value> = log
            .lines()
            .map(|l| serde_json::from_str(l).expect("log line"))
            .collect();
        let per_step = lines.len().div_ceil(LENGTHS[1]);
        let snapshot = std::fs::read(run_dir.join("snapshot.json")).expect("snapshot");
        Self {
            steps: lines.chunks(per_step).map(<[Value]>::to_vec).collect(),
            snapshot_len: snapshot.len() as f64,
            snapshot: serde_json::from_slice(&snapshot).expect("snapshot"),
            snapshot_per_step: (long - short) / (LENGTHS[1] - LENGTHS[0]) as f64,
        }
    }

    /// µs a step's record costs: its lines serialized into a reused buffer
    /// and written in one `write`, and its share of snapshot bytes
    /// serialized and written the same way; then the same bytes written
    /// again, serialized already (what no encoder can go below).
    fn floor(&self, file: &mut std::fs::File) -> Floor {
        let mut buf = Vec::with_capacity(64 * 1024);
        let mut written = Vec::with_capacity(self.steps.len());
        let start = std::time::Instant::now();
        for lines in &self.steps {
            buf.clear();
            for line in lines {
                serde_json::to_writer(&mut buf, line).expect("line");
                buf.push(b'\n');
            }
            file.write_all(&buf).expect("write");
            written.push(buf.len());
        }
        let log = start.elapsed().as_secs_f64() * 1e6 / self.steps.len() as f64;
        let start = std::time::Instant::now();
        buf.clear();
        serde_json::to_writer(&mut buf, &self.snapshot).expect("snapshot");
        file.write_all(&buf).expect("write");
        let share = self.snapshot_per_step / self.snapshot_len;
        let serialized = log + start.elapsed().as_secs_f64() * 1e6 * share;
        // The same bytes again, already serialized: the `write`s alone.
        let snapshot = std::mem::take(&mut buf);
        let line = vec![b'x'; written.iter().copied().max().unwrap_or(0)];
        let start = std::time::Instant::now();
        for len in &written {
            file.write_all(&line[..*len]).expect("write");
        }
        let log = start.elapsed().as_secs_f64() * 1e6 / self.steps.len() as f64;
        let start = std::time::Instant::now();
        file.write_all(&snapshot).expect("write");
        let writes = log + start.elapsed().as_secs_f64() * 1e6 * share;
        file.set_len(0).expect("truncate");
        Floor { serialized, writes }
    }
}

/// A step's record, in µs: serialized by serde_json and written, or only
/// written.
struct Floor {
    serialized: f64,
    writes: f64,
}

/// Passes of the interleaved measurement.
const PASSES: usize = 40;

/// The step's figures taken in turn with the raw sync, one sample of each
/// per pass: a sync on this kind of VM drifts by 2-5 x within a minute, so
/// a ratio of medians taken minutes apart says more about the disk than
/// about the runtime. Each pass times a raw `write` + `fdatasync`, then a
/// 20-step and a 200-step run of each sync policy; its step is the
/// marginal `(t200 - t20) / 180`, its ratio that over the pass's own raw
/// sync. Medians over the passes, printed and returned.
fn interleaved(
    rt: &tokio::runtime::Runtime,
    dir: &Path,
    file: &mut std::fs::File,
    line: &[u8],
) -> serde_json::Value {
    let workflows = LENGTHS.map(|steps| Arc::new(chain("bench", "provider: mock", steps)));
    let collector = awr_tests::otlp::Receiver::http();
    let url = collector.url.clone();
    let live = infrastructure::otlp::LiveExport::start(
        move || {
            let (url, http) = (Some(url.as_str()), Some("http/protobuf"));
            Ok(infrastructure::otlp::Outlets {
                spans: Some(infrastructure::otlp::Exporter::new(url, http, "awr-bench")?),
                metrics: Some(infrastructure::otlp::Metrics::new(url, http, "awr-bench")?),
            })
        },
        Default::default(),
    )
    .expect("live export");
    let policies = [
        ("stub_sync_step", SyncPolicy::StepBoundary, false),
        ("stub_sync_never", SyncPolicy::Never, false),
        ("stub_sync_step_exported", SyncPolicy::StepBoundary, true),
        ("stub_sync_never_exported", SyncPolicy::Never, true),
    ];
    let runners: Vec<_> = policies
        .iter()
        .map(|(name, sync, exported)| {
            let store = store(dir, &format!("interleaved-{name}"), *sync);
            let runner = Executor::new(
                store,
                Arc::new(Stub),
                Arc::new(SystemClock),
                Arc::new(RandomIds),
            );
            let runner = match exported {
                true => runner.with_spans(live.clone()),
                false => runner,
            };
            (*name, runner)
        })
        .collect();
    let time_run = |runner: &Executor, workflow: &Arc<WorkflowDef>| {
        let id = rt.block_on(runner.create()).expect("create");
        let req = RunRequest {
            workflow: Arc::clone(workflow),
            input: json!("go"),
            source: None,
            started_by: None,
        };
        let start = std::time::Instant::now();
        rt.block_on(runner.run(id, req)).expect("run");
        start.elapsed().as_secs_f64() * 1e6
    };
    let record = Record::probe(rt, dir, &workflows);
    let mut record_file = awr_tests::bench::append_file(&dir.join("record.ndjson"));
    let mut floors = Vec::with_capacity(PASSES);
    let mut writes = Vec::with_capacity(PASSES);
    let mut raw = Vec::with_capacity(PASSES);
    let mut steps: Vec<Vec<f64>> = vec![Vec::with_capacity(PASSES); runners.len()];
    let mut ratios: Vec<Vec<f64>> = vec![Vec::with_capacity(PASSES); runners.len()];
    for _ in 0..PASSES {
        let start = std::time::Instant::now();
        file.write_all(line).expect("write");
        file.sync_data().expect("fdatasync");
        let sync = start.elapsed().as_secs_f64() * 1e6;
        raw.push(sync);
        for (i, (_, runner)) in runners.iter().enumerate() {
            let [short, long] = [0, 1].map(|k| time_run(runner, &workflows[k]));
            let per_step = (long - short) / (LENGTHS[1] - LENGTHS[0]) as f64;
            steps[i].push(per_step);
            ratios[i].push(per_step / sync);
        }
    }
    // After the passes, not among them: these writes are never synced, and
    // with ext4's ordered data the next journal commit (a pass's syncs)
    // would write them first.
    for _ in 0..PASSES {
        let floor = record.floor(&mut record_file);
        floors.push(floor.serialized);
        writes.push(floor.writes);
    }
    let median = awr_tests::bench::median;
    let raw = median(&raw);
    println!("interleaved, {PASSES} passes (medians):");
    println!("  raw write 300 B + fdatasync  {raw:>9.1} µs");
    let mut out = serde_json::Map::new();
    out.insert("raw_fdatasync_us".into(), json!(raw));
    for (i, (name, _)) in runners.iter().enumerate() {
        let (step, ratio) = (median(&steps[i]), median(&ratios[i]));
        println!("  {name:<28} {step:>9.1} µs per step, {ratio:.2} x the pass's fdatasync");
        out.insert(
            (*name).into(),
            json!({ "per_step_us": step, "ratio": ratio }),
        );
    }
    // What the live export adds: each pass's exported step over its plain
    // one (`policies` above: 2 and 3 over 0 and 1).
    for (plain, exported) in [(0, 2), (1, 3)] {
        let added: Vec<f64> = (steps[exported].iter().zip(&steps[plain]))
            .map(|(e, p)| e / p - 1.0)
            .collect();
        let added = median(&added) * 100.0;
        let name = runners[exported].0;
        println!("  {name:<28} adds {added:>5.1} % to a step");
        out.insert(format!("{name}_added_percent"), json!(added));
    }
    // The export's work on the run's thread, against a durable step: what
    // it adds with sync off (nothing but that work differs) over the
    // durable step. The durable pair's own ratio is a difference of two
    // steps that wait on the disk, and swings with it by more than that.
    let added: Vec<f64> = (0..steps[1].len())
        .map(|i| (steps[3][i] - steps[1][i]) / steps[0][i])
        .collect();
    let added = median(&added) * 100.0;
    println!("  export's work on the run's thread {added:>5.1} % of a durable step");
    out.insert("export_work_of_durable_step_percent".into(), json!(added));
    rt.block_on(live.shutdown(std::time::Duration::from_secs(10)));
    let received = collector.trace_requests();
    println!("  export requests received      {received}");
    // `steps[1]`: sync off (`policies` above).
    let (floor, writes) = (median(&floors), median(&writes));
    let over = median(&steps[1]) / floor;
    println!(
        "  record floor (serde_json)    {floor:>9.1} µs per step; sync off is {over:.2} x it \
         ({:.0} B of snapshot a step; the writes alone {writes:.1} µs)",
        record.snapshot_per_step
    );
    out.insert(
        "record_floor".into(),
        json!({ "per_step_us": floor, "sync_never_over_floor": over, "writes_us": writes,
                "snapshot_bytes_per_step": record.snapshot_per_step }),
    );
    serde_json::Value::Object(out)
}

/// Independent branches run at the same time: three agents that each take
/// one second, beside one such agent alone (the raw figure: a fan-out of N
/// should cost about one agent's time, not N).
fn bench_fan_out(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let runner = Executor::new(
        store(dir.path(), "fan-out", SyncPolicy::StepBoundary),
        Arc::new(Slow(std::time::Duration::from_secs(1))),
        Arc::new(SystemClock),
        Arc::new(RandomIds),
    );
    let mut group = c.benchmark_group("fan_out");
    group.sample_size(10);
    group.warm_up_time(std::time::Duration::from_millis(500));
    group.measurement_time(std::time::Duration::from_secs(12));
    for width in [1, 3] {
        let workflow = Arc::new(fan_out(width));
        group.bench_function(format!("agents_1s/{width}"), |b| {
            time_runs(b, &rt, &runner, &workflow)
        });
    }
    group.finish();
}

criterion_group!(benches, bench_runner, bench_fan_out);
criterion_main!(benches);

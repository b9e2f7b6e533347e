//! Durable steps of many runs at once (group commit), and what a run costs
//! before its first step, beside the raw syncs they are judged against.
//!
//! Timed on the real `FileRunStore` (sync at step boundaries, as `awr`
//! opens it) on a multi-thread runtime of one worker per core, as `awr`
//! builds it:
//! - `group_commit/runs_N`: N runs (1, 10, 100), each a task that takes
//!   steps of five ~300-byte events (one `append`) and a `flush`, the step
//!   boundary. The time is per round, one step of every run; the runs are
//!   created and take their first step outside the timing. The store's sync
//!   counter gives the syncs per step boundary.
//! - `run_fixed_cost/first_step`: `create_run`, then a first step that also
//!   saves the run's first snapshot, as the runner's first checkpoint does;
//!   `run_fixed_cost/later_step`: a step of a run that has taken one; the
//!   difference is the fixed cost of a run.
//!
//! Raw references in the same run (`group_commit_raw`): `write` of a 300-byte
//! line + `fdatasync`; the same line into each of 1, 10 or 100 files, then one
//! `syncfs`; into 10 files, then an `fdatasync` of each.
//!
//! Syncs on this shared VM drift by several times within a minute (other
//! processes write to the same disk), so criterion's figures, each taken in
//! its own stretch of seconds, make poor ratios. After them the bench takes
//! every figure again in turn, one sample of each per pass, and prints the
//! medians of those passes as ratios to the raw `fdatasync`; they and the
//! syncs counted go to `target/criterion/group_commit/figures.json` for
//! `cargo xtask bench-report`.

#![allow(clippy::expect_used)] // a benchmark has no caller to hand an error to

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use application::ports::{RunLock, RunStore};
use criterion::{Criterion, criterion_group, criterion_main};
use domain::{EventKind, Offset, RunId, RunSnapshot, RuntimeEvent, Timestamp};
use infrastructure::FileRunStore;
use serde_json::json;
use tokio::runtime::Runtime;

/// Concurrent runs measured.
const RUNS: [usize; 3] = [1, 10, 100];

/// Events a step appends (node started, agent output, node completed...).
const EVENTS_PER_STEP: u64 = 5;

fn event(run: RunId, offset: u64) -> RuntimeEvent {
    RuntimeEvent {
        id: format!("e{offset}"),
        offset: Offset::new(offset).expect("offset"),
        timestamp: Timestamp::from_millis(0),
        run_id: run,
        node_id: None,
        node_run_id: None,
        kind: EventKind::AgentTextDelta {
            content: "x".repeat(200),
            extra: Default::default(),
        },
        extra: Default::default(),
    }
}

/// One run being driven: its lock and last offset.
struct Run {
    id: RunId,
    last: u64,
    _lock: RunLock,
}

impl Run {
    async fn create(store: &FileRunStore) -> Self {
        let id = RunId::new(uuid::Uuid::new_v4()).expect("run id");
        let lock = store.create_run(id).await.expect("create");
        Self {
            id,
            last: 0,
            _lock: lock,
        }
    }

    /// One step: its events in one append, then the step boundary.
    async fn step(&mut self, store: &FileRunStore, snapshot: bool) {
        let events: Vec<_> = (self.last + 1..=self.last + EVENTS_PER_STEP)
            .map(|o| event(self.id, o))
            .collect();
        self.last += EVENTS_PER_STEP;
        store.append(self.id, &events).await.expect("append");
        if snapshot {
            let mut state = RunSnapshot::new(self.id);
            state.last_offset = self.last;
            store.save_snapshot(&state).await.expect("snapshot");
        }
        store.flush(self.id).await.expect("flush");
    }
}

/// Syncs counted per figure, for the report.
#[derive(Default)]
struct Counted {
    syncs: u64,
    boundaries: u64,
}

impl Counted {
    fn per_boundary(&self) -> f64 {
        self.syncs as f64 / self.boundaries.max(1) as f64
    }
}

/// `iters` rounds of `n` runs stepping at once; returns the time taken.
fn rounds(
    rt: &Runtime,
    store: &FileRunStore,
    n: usize,
    iters: u64,
    counted: &mut Counted,
) -> Duration {
    let runs = rt.block_on(async {
        let mut runs = Vec::with_capacity(n);
        for _ in 0..n {
            let mut run = Run::create(store).await;
            run.step(store, true).await;
            runs.push(run);
        }
        runs
    });
    let before = store.syncs().total();
    let start = Instant::now();
    rt.block_on(async {
        let tasks: Vec<_> = runs
            .into_iter()
            .map(|mut run| {
                let store = store.clone();
                tokio::spawn(async move {
                    for _ in 0..iters {
                        run.step(&store, false).await;
                    }
                    run
                })
            })
            .collect();
        for task in tasks {
            drop(task.await.expect("run task"));
        }
    });
    let took = start.elapsed();
    counted.syncs += store.syncs().total() - before;
    counted.boundaries += n as u64 * iters;
    took
}

fn bench_group_commit(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut report = serde_json::Map::new();

    let mut group = c.benchmark_group("group_commit");
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    for n in RUNS {
        let store = FileRunStore::open(dir.path().join(format!("runs_{n}"))).expect("store");
        let mut counted = Counted::default();
        group.bench_function(format!("runs_{n}"), |b| {
            b.iter_custom(|iters| rounds(&rt, &store, n, iters, &mut counted))
        });
        println!(
            "group_commit/runs_{n}: {:.3} syncs per step boundary ({} syncs, {} boundaries)",
            counted.per_boundary(),
            counted.syncs,
            counted.boundaries
        );
        report.insert(
            format!("runs_{n}"),
            json!({ "syncs_per_boundary": counted.per_boundary() }),
        );
    }
    group.finish();

    // A lone run's fixed cost: creating it and its first step, beside a later step.
    let mut fixed = c.benchmark_group("run_fixed_cost");
    fixed.sample_size(30);
    fixed.warm_up_time(Duration::from_secs(1));
    let store = FileRunStore::open(dir.path().join("fixed")).expect("store");
    let mut first = Counted::default();
    fixed.bench_function("first_step", |b| {
        b.iter_custom(|iters| {
            let mut took = Duration::ZERO;
            for _ in 0..iters {
                let before = store.syncs().total();
                let start = Instant::now();
                let run = rt.block_on(async {
                    let mut run = Run::create(&store).await;
                    run.step(&store, true).await;
                    run
                });
                took += start.elapsed();
                first.syncs += store.syncs().total() - before;
                first.boundaries += 1;
                drop(run);
            }
            took
        })
    });
    let mut run = rt.block_on(async {
        let mut run = Run::create(&store).await;
        run.step(&store, true).await;
        run
    });
    fixed.bench_function("later_step", |b| {
        b.iter(|| rt.block_on(run.step(&store, false)))
    });
    fixed.finish();
    println!(
        "run_fixed_cost/first_step: {:.3} syncs for creating a run and its first step",
        first.per_boundary()
    );
    report.insert(
        "first_step".into(),
        json!({ "syncs": first.per_boundary() }),
    );

    // The raw syncs the figures above are judged against.
    let mut raw = c.benchmark_group("group_commit_raw");
    raw.sample_size(30);
    raw.warm_up_time(Duration::from_secs(1));
    let line = awr_tests::bench::raw_line();
    let raw_dir = dir.path().join("raw");
    std::fs::create_dir(&raw_dir).expect("raw dir");
    let mut one = awr_tests::bench::append_file(&raw_dir.join("one.log"));
    raw.bench_function("write_300B_fdatasync", |b| {
        b.iter(|| {
            one.write_all(&line).expect("write");
            one.sync_data().expect("fdatasync");
        })
    });
    let fs = File::open(&raw_dir).expect("raw dir");
    for n in RUNS {
        let files: Vec<File> = (0..n)
            .map(|i| awr_tests::bench::append_file(&raw_dir.join(format!("{n}-{i}.log"))))
            .collect();
        raw.bench_function(format!("write_300B_x{n}_syncfs"), |b| {
            b.iter(|| {
                for mut file in &files {
                    file.write_all(&line).expect("write");
                }
                rustix::fs::syncfs(&fs).expect("syncfs");
            })
        });
        if n == 10 {
            raw.bench_function("write_300B_x10_fdatasync_each", |b| {
                b.iter(|| {
                    for mut file in &files {
                        file.write_all(&line).expect("write");
                        file.sync_data().expect("fdatasync");
                    }
                })
            });
        }
    }
    raw.finish();

    report.insert("interleaved".into(), interleaved(&rt, dir.path(), &line));
    let out = awr_tests::bench::criterion_dir().join("group_commit");
    if std::fs::create_dir_all(&out).is_ok() {
        let body = serde_json::Value::Object(report).to_string();
        let _ = std::fs::write(out.join("figures.json"), body);
    }
}

/// Passes of the interleaved measurement.
const PASSES: usize = 60;

/// Every figure once per pass, `PASSES` times; medians in µs, each with its
/// ratio to the raw `fdatasync`.
fn interleaved(rt: &Runtime, dir: &Path, line: &[u8]) -> serde_json::Value {
    let root = dir.join("interleaved");
    let store = FileRunStore::open(root.join("store")).expect("store");
    let raw_dir = root.join("raw");
    std::fs::create_dir_all(&raw_dir).expect("raw dir");
    let fs = File::open(&raw_dir).expect("raw dir");
    let files: Vec<Vec<File>> = RUNS
        .iter()
        .map(|&n| {
            (0..n)
                .map(|i| awr_tests::bench::append_file(&raw_dir.join(format!("{n}-{i}.log"))))
                .collect()
        })
        .collect();
    let mut fleets: Vec<Vec<Run>> = RUNS
        .iter()
        .map(|&n| {
            rt.block_on(async {
                let mut runs = Vec::with_capacity(n);
                for _ in 0..n {
                    let mut run = Run::create(&store).await;
                    run.step(&store, true).await;
                    runs.push(run);
                }
                runs
            })
        })
        .collect();
    let mut lone = rt.block_on(async {
        let mut run = Run::create(&store).await;
        run.step(&store, true).await;
        run
    });
    let mut samples: std::collections::BTreeMap<String, Vec<f64>> = Default::default();
    let mut note = |name: String, took: Duration| {
        samples
            .entry(name)
            .or_default()
            .push(took.as_secs_f64() * 1e6);
    };
    let mut syncs: std::collections::BTreeMap<String, (u64, u64)> = Default::default();
    for _ in 0..PASSES {
        let start = Instant::now();
        let mut one = &files[0][0];
        one.write_all(line).expect("write");
        one.sync_data().expect("fdatasync");
        note("raw_fdatasync".into(), start.elapsed());
        for (n, group) in RUNS.iter().zip(&files) {
            let start = Instant::now();
            for mut file in group {
                file.write_all(line).expect("write");
            }
            rustix::fs::syncfs(&fs).expect("syncfs");
            note(format!("raw_syncfs_{n}_dirty"), start.elapsed());
        }
        for (n, fleet) in RUNS.iter().zip(&mut fleets) {
            let before = store.syncs().total();
            let start = Instant::now();
            rt.block_on(async {
                let runs = std::mem::take(fleet);
                let tasks: Vec<_> = runs
                    .into_iter()
                    .map(|mut run| {
                        let store = store.clone();
                        tokio::spawn(async move {
                            run.step(&store, false).await;
                            run
                        })
                    })
                    .collect();
                for task in tasks {
                    fleet.push(task.await.expect("run task"));
                }
            });
            note(format!("runs_{n}_round"), start.elapsed());
            let counted = syncs.entry(format!("runs_{n}")).or_default();
            counted.0 += store.syncs().total() - before;
            counted.1 += *n as u64;
        }
        let before = store.syncs().total();
        let start = Instant::now();
        let run = rt.block_on(async {
            let mut run = Run::create(&store).await;
            run.step(&store, true).await;
            run
        });
        note("first_step".into(), start.elapsed());
        let counted = syncs.entry("first_step".into()).or_default();
        counted.0 += store.syncs().total() - before;
        counted.1 += 1;
        drop(run);
        let start = Instant::now();
        rt.block_on(lone.step(&store, false));
        note("later_step".into(), start.elapsed());
    }
    let median = awr_tests::bench::median;
    let raw = median(&samples["raw_fdatasync"]);
    println!("interleaved, {PASSES} passes (median µs, ratio to the raw fdatasync):");
    let mut out = serde_json::Map::new();
    for (name, v) in &samples {
        let us = median(v);
        let mut figure = json!({ "median_us": us, "ratio": us / raw });
        let mut line = format!("  {name:<22} {us:>9.1} µs  {:>6.2} x", us / raw);
        if let Some(n) = name
            .strip_prefix("runs_")
            .and_then(|rest| rest.strip_suffix("_round"))
            .and_then(|n| n.parse::<f64>().ok())
        {
            // A round is one step of each of the n runs.
            figure["per_boundary_ratio"] = json!(us / n / raw);
            line += &format!(", per step {:.1} µs = {:.2} x", us / n, us / n / raw);
        }
        let key = name.strip_suffix("_round").unwrap_or(name);
        if let Some((n, boundaries)) = syncs.get(key) {
            let per = *n as f64 / *boundaries as f64;
            figure["syncs_per_boundary"] = json!(per);
            line += &format!(", {per:.3} syncs per step boundary");
        }
        println!("{line}");
        out.insert(name.clone(), figure);
    }
    serde_json::Value::Object(out)
}

criterion_group!(benches, bench_group_commit);
criterion_main!(benches);

//! `awr show RUN --json` of a run of 10 and of 10,000 steps, beside the
//! state load it starts with.
//!
//! Set-up, outside the timing: the real executor runs a chain of stub
//! agents to its end on the real file store (sync off).
//!
//! Timed, each over a store opened anew, as a new `awr` process opens it:
//! - `load`: `inspect::run_view`, the state load (the snapshot read and
//!   parsed, the tail folded) that every reader starts with;
//! - `json`: `run_view`, then the snapshot written with its shown status by
//!   the snapshot's own writer (`RunSnapshot::write_json_shown`), as `awr
//!   show --json` and `GET /workflows/{id}` write it;
//! - `value`: `run_view`, then the snapshot turned into a
//!   `serde_json::Value`, its status replaced and the value pretty-printed:
//!   how `awr show --json` wrote it before, kept as the reference the
//!   direct writer is judged against.
//!
//! The medians and the ratio of each to `load` are printed after the group.

#![allow(clippy::expect_used)] // a benchmark has no caller to hand an error to

use awr_tests::bench::{Stub, chain, median};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use application::inspect::{RunView, run_view};
use application::{Executor, RunRequest};
use criterion::{Criterion, criterion_group, criterion_main};
use domain::RunId;
use infrastructure::{FileRunStore, FileStoreConfig, RandomIds, SyncPolicy, SystemClock};
use serde_json::json;

/// Run lengths measured, in steps.
const LENGTHS: [usize; 2] = [10, 10_000];

/// Samples of each figure printed after the group.
const SAMPLES: usize = 30;

fn open(dir: &Path) -> FileRunStore {
    let config = FileStoreConfig {
        sync: SyncPolicy::Never,
        ..FileStoreConfig::default()
    };
    FileRunStore::open_with(dir, config).expect("store")
}

/// A completed run of `steps` steps under `dir`.
fn run_chain(rt: &tokio::runtime::Runtime, dir: &Path, steps: usize) -> RunId {
    let executor = Executor::new(
        Arc::new(open(dir)),
        Arc::new(Stub),
        Arc::new(SystemClock),
        Arc::new(RandomIds),
    );
    let run_id = rt.block_on(executor.create()).expect("create");
    let request = RunRequest {
        workflow: Arc::new(chain("show-bench", "provider: claude-code", steps)),
        input: json!("go"),
        source: None,
        started_by: None,
    };
    rt.block_on(executor.run(run_id, request)).expect("run");
    run_id
}

/// The state load, over a store opened anew.
fn load(rt: &tokio::runtime::Runtime, dir: &Path, run: RunId) -> RunView {
    let store = open(dir);
    rt.block_on(run_view(&store, run)).expect("run_view")
}

/// What `awr show --json` prints now.
fn direct(view: &RunView) -> Vec<u8> {
    let mut out = Vec::with_capacity(4096);
    view.snapshot
        .write_json_shown(&mut out, view.status.as_str())
        .expect("write");
    out
}

/// What `awr show --json` printed before: a `Value`, pretty-printed.
fn through_value(view: &RunView) -> String {
    let mut value = serde_json::to_value(&view.snapshot).expect("to_value");
    if let Some(map) = value.as_object_mut() {
        map.insert("status".into(), view.status.as_str().into());
    }
    serde_json::to_string_pretty(&value).expect("pretty")
}

/// The median wall time of `f`, in ms, over [`SAMPLES`] calls.
fn time_ms(mut f: impl FnMut()) -> f64 {
    let samples: Vec<f64> = (0..SAMPLES)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    median(&samples)
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut figures = Vec::new();
    for steps in LENGTHS {
        let dir = tempfile::tempdir().expect("tempdir");
        let run = run_chain(&rt, dir.path(), steps);
        // The two writers say the same thing.
        let view = load(&rt, dir.path(), run);
        let written: serde_json::Value =
            serde_json::from_slice(&direct(&view)).expect("direct JSON");
        let before: serde_json::Value =
            serde_json::from_str(&through_value(&view)).expect("value JSON");
        assert_eq!(written, before, "the direct writer changed the document");

        let mut group = c.benchmark_group(format!("show/{steps}"));
        group.sample_size(20);
        group.bench_function("load", |b| b.iter(|| load(&rt, dir.path(), run)));
        group.bench_function("json", |b| {
            b.iter(|| direct(&load(&rt, dir.path(), run)));
        });
        group.bench_function("value", |b| {
            b.iter(|| through_value(&load(&rt, dir.path(), run)));
        });
        group.finish();

        let loaded = time_ms(|| {
            load(&rt, dir.path(), run);
        });
        let json = time_ms(|| {
            direct(&load(&rt, dir.path(), run));
        });
        let value = time_ms(|| {
            through_value(&load(&rt, dir.path(), run));
        });
        figures.push((steps, loaded, json, value, direct(&view).len()));
    }
    for (steps, loaded, json, value, bytes) in figures {
        println!(
            "show {steps:>6} steps ({bytes} B): load {loaded:.3} ms; --json now {json:.3} ms \
             ({:.2} x the load); through a Value {value:.3} ms ({:.2} x)",
            json / loaded,
            value / loaded
        );
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);

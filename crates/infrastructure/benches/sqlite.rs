//! The SQLite store's durable step beside the file store's and beside raw
//! SQLite, measured the same way in the same run:
//!
//! | operation                                         | what it is                           |
//! |---------------------------------------------------|--------------------------------------|
//! | `sqlite_store_append_flush`                       | SQLite store, sync at step boundaries|
//! | `sqlite_store_append_sync_always`                 | SQLite store, a sync per append      |
//! | `file_store_append_flush`                         | file store, sync at step boundaries  |
//! | `raw_sqlite_insert_commit_full`                   | one-row transaction, WAL, `synchronous=FULL` |
//! | `sqlite_store_append_no_sync`                     | SQLite store, `SyncPolicy::Never`    |
//!
//! Run with `cargo bench -p awr-infrastructure --bench sqlite`; results are in
//! `docs/performance.md` ("SQLite store").

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use application::ports::RunStore;
use awr_infrastructure::{
    FileRunStore, FileStoreConfig, SqliteRunStore, SqliteStoreConfig, SyncPolicy,
};
use criterion::{Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use domain::{EventKind, NodeId, Offset, RunId, RuntimeEvent, Timestamp};
use tokio::runtime::Runtime;
use uuid::Uuid;

fn event(run: RunId, offset: u64) -> RuntimeEvent {
    RuntimeEvent {
        id: Uuid::new_v4().to_string(),
        offset: Offset::new(offset).unwrap(),
        timestamp: Timestamp::from_millis(1_767_225_600_000),
        run_id: run,
        node_id: Some(NodeId::new("writer").unwrap()),
        node_run_id: None,
        kind: EventKind::Warning {
            message: "a step's worth of text ".repeat(10),
            details: None,
        },
        extra: Default::default(),
    }
}

/// Times `iters` steps (one append, then a flush) of one fresh run.
fn time_steps(rt: &Runtime, store: &dyn RunStore, iters: u64) -> Duration {
    rt.block_on(async {
        let run = RunId::new(Uuid::new_v4()).unwrap();
        let _lock = store.create_run(run).await.unwrap();
        store.flush(run).await.unwrap();
        let start = Instant::now();
        for i in 1..=iters {
            store.append(run, &[event(run, i)]).await.unwrap();
            store.flush(run).await.unwrap();
        }
        start.elapsed()
    })
}

fn sqlite(path: &Path, sync: SyncPolicy) -> SqliteRunStore {
    let config = SqliteStoreConfig {
        sync,
        ..SqliteStoreConfig::default()
    };
    SqliteRunStore::open_with(path, config).unwrap()
}

/// Times `iters` one-row insert transactions on a bare WAL database with
/// `synchronous=FULL`: what SQLite itself costs for a durable row.
fn time_raw(path: &Path, iters: u64) -> Duration {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.query_row("PRAGMA journal_mode=WAL", [], |_| Ok(()))
        .unwrap();
    conn.pragma_update(None, "synchronous", "FULL").unwrap();
    conn.execute_batch("CREATE TABLE IF NOT EXISTS t (k INTEGER PRIMARY KEY, v TEXT)")
        .unwrap();
    let line = event(RunId::new(Uuid::new_v4()).unwrap(), 1)
        .to_json()
        .unwrap();
    let mut insert = conn.prepare("INSERT INTO t (v) VALUES (?1)").unwrap();
    let start = Instant::now();
    for _ in 0..iters {
        insert.execute([&line]).unwrap();
    }
    start.elapsed()
}

fn durable_step(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut group = c.benchmark_group("sqlite_step");
    group.throughput(Throughput::Elements(1));
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(20);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(4));

    let step_boundary = sqlite(&dir.path().join("step.db"), SyncPolicy::StepBoundary);
    group.bench_function("sqlite_store_append_flush", |b| {
        b.iter_custom(|iters| time_steps(&rt, &step_boundary, iters));
    });
    let always = sqlite(&dir.path().join("always.db"), SyncPolicy::Always);
    group.bench_function("sqlite_store_append_sync_always", |b| {
        b.iter_custom(|iters| time_steps(&rt, &always, iters));
    });
    let files =
        FileRunStore::open_with(dir.path().join("files"), FileStoreConfig::default()).unwrap();
    group.bench_function("file_store_append_flush", |b| {
        b.iter_custom(|iters| time_steps(&rt, &files, iters));
    });
    let raw = dir.path().join("raw.db");
    group.bench_function("raw_sqlite_insert_commit_full", |b| {
        b.iter_custom(|iters| time_raw(&raw, iters));
    });
    let never = sqlite(&dir.path().join("never.db"), SyncPolicy::Never);
    group.bench_function("sqlite_store_append_no_sync", |b| {
        b.iter_custom(|iters| time_steps(&rt, &never, iters));
    });
    group.finish();
}

criterion_group!(benches, durable_step);
criterion_main!(benches);

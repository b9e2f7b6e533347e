//! `awr runs --status failed --limit 10` over 5,000 runs: the file store
//! (which reads every run to select) beside SQLite (which searches its
//! `runs_by_status_started` index and reads only the 10 runs listed).
//!
//! Set-up, outside the timing: 5,000 finished runs written through each
//! store (`flow:started`, `node:started`, an `agent:text` of ~300 bytes,
//! `node:completed` or `node:failed`, then `flow:completed` or
//! `flow:failed`; one in ten failed; the snapshot saved at the end, as the
//! recorder leaves a finished run), over five workflow names.
//!
//! Timed: what the command does after parsing its flags: open the store
//! over existing storage (`open_existing`, as every reading command does)
//! and `application::query::find_runs`, which selects and then reads each
//! run listed as `awr show` would. With `QUERIES_BENCH_DIR=DIR` the stores
//! are written to `DIR/files` and `DIR/runs.db` and kept, so the `awr`
//! command itself can be timed on them.

#![allow(clippy::expect_used, clippy::unwrap_used)] // a benchmark has no caller to hand an error to

use std::path::Path;
use std::sync::Arc;

use application::inspect::ShownStatus;
use application::ports::RunStore;
use application::query::{RunFilter, find_runs};
use criterion::{Criterion, criterion_group, criterion_main};
use domain::event::WorkflowRef;
use domain::{EventKind, NodeId, Offset, RunId, RunSnapshot, RunStatus, RuntimeEvent, Timestamp};
use infrastructure::{
    FileRunStore, FileStoreConfig, SqliteRunStore, SqliteStoreConfig, SyncPolicy,
};
use serde_json::json;

/// Runs in each store.
const RUNS: usize = 5_000;

/// Writes `RUNS` finished runs through `store`.
async fn populate(store: &dyn RunStore) {
    let text = "x".repeat(300);
    let node = NodeId::new("work").unwrap();
    for i in 0..RUNS {
        let run = RunId::new(uuid::Uuid::new_v4()).unwrap();
        let lock = store.create_run(run).await.unwrap();
        let failed = i % 10 == 3;
        let base = 1_767_225_600_000 + i as i64 * 60_000;
        let kinds = [
            EventKind::FlowStarted {
                workflow: WorkflowRef {
                    name: format!("flow-{}", i % 5),
                    hash: "sha256:00".into(),
                    extra: Default::default(),
                },
                input: json!({"n": i}),
                parent_run_id: None,
                source: None,
                definition: None,
                nodes: vec![node.clone()],
                edges: vec![],
                started_by: None,
            },
            EventKind::NodeStarted {
                input: json!({"n": i}).into(),
                attempt: Some(1),
                item: None,
                items: None,
            },
            EventKind::AgentText {
                content: text.clone(),
                extra: Default::default(),
            },
            if failed {
                EventKind::NodeFailed {
                    error: "boom".into(),
                    continued: false,
                }
            } else {
                EventKind::NodeCompleted {
                    output: json!({"data": "ok"}),
                }
            },
            if failed {
                EventKind::FlowFailed {
                    error: "boom".into(),
                    failed_node: Some(node.clone()),
                    duration_ms: 4,
                }
            } else {
                EventKind::FlowCompleted {
                    output: json!("ok"),
                    duration_ms: 4,
                }
            },
        ];
        let events: Vec<RuntimeEvent> = kinds
            .into_iter()
            .enumerate()
            .map(|(k, kind)| RuntimeEvent {
                id: uuid::Uuid::new_v4().to_string(),
                offset: Offset::new(k as u64 + 1).unwrap(),
                timestamp: Timestamp::from_millis(base + k as i64),
                run_id: run,
                node_id: (k > 0 && k < 4).then(|| node.clone()),
                node_run_id: None,
                kind,
                extra: Default::default(),
            })
            .collect();
        store.append(run, &events).await.unwrap();
        let snapshot = RunSnapshot::fold(&events).unwrap();
        store.save_snapshot(&snapshot).await.unwrap();
        drop(lock);
    }
}

/// `--status failed --limit 10`.
fn filter() -> RunFilter {
    RunFilter {
        statuses: vec![ShownStatus::Recorded(RunStatus::Failed)],
        limit: Some(10),
        ..RunFilter::default()
    }
}

fn bench_queries(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let temp = tempfile::tempdir().unwrap();
    let dir = std::env::var_os("QUERIES_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| temp.path().to_path_buf());
    let files = dir.join("files");
    let db = dir.join("runs.db");
    let never = SyncPolicy::Never;
    rt.block_on(async {
        let file: Arc<dyn RunStore> = Arc::new(
            FileRunStore::open_with(
                &files,
                FileStoreConfig {
                    sync: never,
                    ..FileStoreConfig::default()
                },
            )
            .unwrap(),
        );
        populate(file.as_ref()).await;
        let sqlite: Arc<dyn RunStore> = Arc::new(
            SqliteRunStore::open_with(
                &db,
                SqliteStoreConfig {
                    sync: never,
                    ..SqliteStoreConfig::default()
                },
            )
            .unwrap(),
        );
        populate(sqlite.as_ref()).await;
    });

    let mut group = c.benchmark_group("runs_failed_limit_10_of_5000");
    group.sample_size(10);
    group.bench_function("file_store", |b| {
        b.iter(|| rt.block_on(query(&files, false)));
    });
    group.bench_function("sqlite_store", |b| {
        b.iter(|| rt.block_on(query(&db, true)));
    });
    group.finish();
}

/// Opens the storage at `at` and lists what the command would.
async fn query(at: &Path, sqlite: bool) -> usize {
    let store: Arc<dyn RunStore> = if sqlite {
        Arc::new(SqliteRunStore::open_existing(at).unwrap())
    } else {
        Arc::new(FileRunStore::open_existing(at).unwrap())
    };
    let listed = find_runs(store.as_ref(), &filter()).await.unwrap();
    assert_eq!(listed.len(), 10);
    assert!(listed.iter().all(|r| r.status() == "failed"));
    listed.len()
}

criterion_group!(benches, bench_queries);
criterion_main!(benches);

//! The runtime's own cost per step, beside the raw figures it is judged against.
//!
//! A step is one agent node of a 20-node chain, run by the real runner on the
//! real file store. `stub` agents answer at once (the runtime's cost alone);
//! `mock` agents are the fixture provider reading its JSON files. Reported
//! per step (each iteration is one whole run, divided by 20 via throughput).
//! Reference figures in the same run: one `fdatasync` of a 300-byte append.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;

use adapters_agents::{MockQuery, Providers};
use application::ports::{
    AgentMessage, AgentRequest, AgentResult, AgentStream, QueryError, QueryFn,
};
use application::{RunRequest, WorkflowRunner};
use async_trait::async_trait;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use domain::WorkflowDef;
use infrastructure::{FileRunStore, FileStoreConfig, RandomIds, SyncPolicy, SystemClock};
use serde_json::json;

const STEPS: u64 = 20;

/// An agent that answers at once: what is measured is the runtime alone.
struct Stub;

#[async_trait]
impl QueryFn for Stub {
    async fn query(&self, request: AgentRequest) -> Result<AgentStream, QueryError> {
        let done = AgentMessage::Completed(AgentResult {
            text: format!("answer of {}", request.node_id),
            num_turns: 1,
            ..AgentResult::default()
        });
        Ok(Box::pin(futures::stream::iter([Ok(done)])))
    }
}

fn chain() -> WorkflowDef {
    let mut yaml = String::from("name: bench\nagents:\n");
    for i in 0..STEPS {
        yaml += &format!("  a{i}: {{provider: mock, system_prompt: 'agent {i}', fixtures: fx}}\n");
    }
    yaml += "steps:\n";
    for i in 0..STEPS {
        yaml += &format!("  - agent: a{i}\n");
    }
    WorkflowDef::from_yaml(&yaml).expect("bench workflow")
}

fn write_fixtures(dir: &Path) {
    let fx = dir.join("fx");
    std::fs::create_dir_all(&fx).expect("fixture dir");
    for i in 0..STEPS {
        let body = json!({"calls": [{"output": {"text": format!("answer {i}"), "sessionId": format!("s{i}"),
            "usage": {"inputTokens": 100, "outputTokens": 50}},
            "events": [{"type": "agent:start", "sessionId": format!("s{i}")},
                       {"type": "agent:text:delta", "content": "answer "},
                       {"type": "agent:text:delta", "content": format!("{i}")}]}]});
        std::fs::write(fx.join(format!("a{i}.json")), body.to_string()).expect("fixture");
    }
}

fn bench_runner(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let workflow = Arc::new(chain());
    let dir = tempfile::tempdir().expect("tempdir");
    write_fixtures(dir.path());

    let mut group = c.benchmark_group("step");
    group.throughput(Throughput::Elements(STEPS));
    group.sample_size(20);

    for (name, sync) in [
        ("stub_sync_never", SyncPolicy::Never),
        ("stub_sync_step", SyncPolicy::StepBoundary),
    ] {
        let store = Arc::new(
            FileRunStore::open_with(
                dir.path().join(name),
                FileStoreConfig {
                    sync,
                    ..FileStoreConfig::default()
                },
            )
            .expect("store"),
        );
        let runner = WorkflowRunner::new(
            store,
            Arc::new(Stub),
            Arc::new(SystemClock),
            Arc::new(RandomIds),
        );
        group.bench_function(name, |b| {
            b.iter(|| {
                rt.block_on(async {
                    let id = runner.create().await.expect("create");
                    let req = RunRequest {
                        workflow: Arc::clone(&workflow),
                        input: json!("go"),
                    };
                    runner.run(id, req).await.expect("run")
                })
            })
        });
    }

    let store = Arc::new(
        FileRunStore::open_with(
            dir.path().join("mock"),
            FileStoreConfig {
                sync: SyncPolicy::Never,
                ..FileStoreConfig::default()
            },
        )
        .expect("store"),
    );
    group.bench_function("mock_fixtures_sync_never", |b| {
        b.iter(|| {
            rt.block_on(async {
                // A fresh provider per run: its call counters start at 0 again.
                let providers =
                    Providers::new().with_mock(Arc::new(MockQuery::new(dir.path(), dir.path())));
                let runner = WorkflowRunner::new(
                    store.clone(),
                    Arc::new(providers),
                    Arc::new(SystemClock),
                    Arc::new(RandomIds),
                );
                let id = runner.create().await.expect("create");
                let req = RunRequest {
                    workflow: Arc::clone(&workflow),
                    input: json!("go"),
                };
                runner.run(id, req).await.expect("run")
            })
        })
    });
    group.finish();

    // The raw figure a durable step is judged against: one fdatasync of a 300-byte append.
    let mut raw = c.benchmark_group("raw");
    raw.sample_size(30);
    let path = dir.path().join("raw.log");
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&path)
        .expect("raw file");
    let line = [b'x'; 299]
        .iter()
        .copied()
        .chain([b'\n'])
        .collect::<Vec<u8>>();
    raw.bench_function("write_300B_fdatasync", |b| {
        b.iter(|| {
            file.write_all(&line).expect("write");
            file.sync_data().expect("fdatasync");
        })
    });
    raw.finish();
}

criterion_group!(benches, bench_runner);
criterion_main!(benches);

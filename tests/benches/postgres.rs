//! A durable step on the PostgreSQL store beside the raw figure it is
//! judged against: one single-row `INSERT` committed on its own, on the
//! same server, through the same client library.
//!
//! - `raw_insert`: `INSERT INTO t (body) VALUES ($1)` of a 300-byte text,
//!   autocommitted, prepared once: one round trip and one commit.
//! - `step_5_events`: a step of five ~300-byte events, one `append` (one
//!   fenced statement: the run's row moved on, five rows in, a `NOTIFY`)
//!   and a `flush`, the step boundary, on `PgRunStore`.
//! - `step_1_event`: the same with one event.
//!
//! The server is the one `AWR_TEST_POSTGRES` names (`cargo xtask bench`
//! starts a throwaway one with `fsync` on, so a commit is a real sync). The
//! machine is shared and noisy: the figures are taken in turn, one sample
//! of each per pass, and the medians of the passes are compared. They go to
//! `target/criterion/postgres/figures.json` for `cargo xtask bench-report`.

#![allow(clippy::expect_used)] // a benchmark has no caller to hand an error to

use std::time::Instant;

use application::ports::RunStore;
use domain::{EventKind, Offset, RunId, RuntimeEvent, Timestamp};
use infrastructure::store::{PgRunStore, PgStoreConfig};
use serde_json::json;

/// Operations one sample times.
const OPS: usize = 100;

/// Passes, each one sample of every figure.
const PASSES: usize = 15;

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

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// Microseconds per operation of `OPS` runs of `op`.
async fn sample<F: AsyncFnMut()>(mut op: F) -> f64 {
    let start = Instant::now();
    for _ in 0..OPS {
        op().await;
    }
    start.elapsed().as_secs_f64() * 1e6 / OPS as f64
}

fn main() {
    let Ok(base) = std::env::var("AWR_TEST_POSTGRES") else {
        eprintln!("postgres bench skipped: no server (`cargo xtask bench` starts one)");
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(bench(&base));
}

async fn bench(base: &str) {
    let (admin, connection) = tokio_postgres::connect(base, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    let name = format!("awr_bench_{}", uuid::Uuid::new_v4().simple());
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .expect("create the database");
    let (server, _) = base.rsplit_once('/').expect("a postgres:// URL");
    let url = format!("{server}/{name}");

    let (raw, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    raw.batch_execute("CREATE TABLE t (id bigserial PRIMARY KEY, body text NOT NULL)")
        .await
        .expect("create the table");
    let insert = raw
        .prepare("INSERT INTO t (body) VALUES ($1)")
        .await
        .expect("prepare");
    let body = "x".repeat(300);

    let store = PgRunStore::open_with(&url, PgStoreConfig::default())
        .await
        .expect("open the store");
    let run_five = RunId::new(uuid::Uuid::new_v4()).expect("a run id");
    let run_one = RunId::new(uuid::Uuid::new_v4()).expect("a run id");
    let _five = store.create_run(run_five).await.expect("create");
    let _one = store.create_run(run_one).await.expect("create");
    let (mut next_five, mut next_one) = (1u64, 1u64);

    let mut figures: Vec<(&str, Vec<f64>)> = vec![
        ("raw_insert", Vec::new()),
        ("step_5_events", Vec::new()),
        ("step_1_event", Vec::new()),
    ];
    // One pass first, untimed: connections opened, statements prepared.
    for pass in 0..=PASSES {
        let raw_us = sample(async || {
            raw.execute(&insert, &[&body]).await.expect("insert");
        })
        .await;
        let five_us = sample(async || {
            let events: Vec<_> = (next_five..next_five + 5)
                .map(|o| event(run_five, o))
                .collect();
            store.append(run_five, &events).await.expect("append");
            store.flush(run_five).await.expect("flush");
            next_five += 5;
        })
        .await;
        let one_us = sample(async || {
            store
                .append(run_one, &[event(run_one, next_one)])
                .await
                .expect("append");
            store.flush(run_one).await.expect("flush");
            next_one += 1;
        })
        .await;
        if pass > 0 {
            figures[0].1.push(raw_us);
            figures[1].1.push(five_us);
            figures[2].1.push(one_us);
        }
    }

    let raw_median = median(figures[0].1.clone());
    let mut out = serde_json::Map::new();
    for (name, samples) in figures {
        let us = median(samples);
        let ratio = us / raw_median;
        println!("postgres: {name:<14} {us:>8.1} µs   ({ratio:.2} x one raw INSERT … COMMIT)");
        out.insert(name.into(), json!({"median_us": us, "ratio": ratio}));
    }
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/criterion/postgres");
    let dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(|t| std::path::PathBuf::from(t).join("criterion/postgres"))
        .unwrap_or(dir);
    std::fs::create_dir_all(&dir).expect("the figures' directory");
    std::fs::write(
        dir.join("figures.json"),
        serde_json::to_vec_pretty(&json!({ "steps": out })).expect("JSON"),
    )
    .expect("write the figures");
    // Leave the server as found (FORCE ends the store's sessions).
    drop(store);
    let _ = admin
        .batch_execute(&format!("DROP DATABASE {name} WITH (FORCE)"))
        .await;
}

//! Followers of one run over HTTP: the rate a run records its events at
//! with 0, 100 and 1,000 clients streaming it from `awr serve` (issue:
//! at most 10 % slower at 1,000).
//!
//! Set-up: the release `awr serve` on 127.0.0.1, and a workflow whose first
//! step waits for a gate file and whose second is a mock agent streaming
//! `EVENTS` text deltas. Each iteration starts the run over HTTP, connects
//! the followers (NDJSON, each read to its end on its own task), waits
//! until each has received the run's first event, opens the gate, and waits
//! until every follower has its terminal frame (with none, until the run
//! ends). Timed: the run's own clock, from the gate step's `node:completed`
//! to `flow:completed` in its log, so what is measured is how fast the run
//! records events while the followers read them, not the clients.

#![allow(clippy::expect_used, clippy::unwrap_used)] // a benchmark has no caller to hand an error to

use std::path::Path;
use std::time::Duration;

use awr_tests::serve::Served;
use criterion::{Criterion, criterion_group, criterion_main};
use domain::{EventKind, RuntimeEvent};
use futures::StreamExt;
use serde_json::{Value, json};

/// Text deltas the agent streams: the run records about this many events.
const EVENTS: usize = 25_000;

/// The workflow and its fixture under `dir`; the gate is `dir/gate`.
fn workflow(dir: &Path) {
    std::fs::write(
        dir.join("burst.yaml"),
        format!(
            "name: burst\nagents:\n  writer: {{provider: mock}}\nsteps:\n  - id: gate\n    command: 'while [ ! -f {} ]; do sleep 0.005; done'\n  - agent: writer\n",
            dir.join("gate").display()
        ),
    )
    .unwrap();
    let deltas: Vec<Value> = (0..EVENTS)
        .map(|i| json!({"type": "agent:text:delta", "content": format!("token {i} ")}))
        .collect();
    let fixture = json!({"calls": [{"output": {"text": "done", "usage": {"inputTokens": 1, "outputTokens": 1}}, "events": deltas}]});
    let fixtures = dir.join("fixtures/burst");
    std::fs::create_dir_all(&fixtures).unwrap();
    std::fs::write(fixtures.join("writer.json"), fixture.to_string()).unwrap();
}

/// One run with `followers` clients; the time the run took to record its
/// events after the gate, and how many it recorded.
async fn one_run(
    http: &reqwest::Client,
    base: &str,
    dir: &Path,
    followers: usize,
) -> (Duration, usize) {
    let _ = std::fs::remove_file(dir.join("gate"));
    let started = http
        .post(format!("{base}/workflows"))
        .header("content-type", "application/json")
        .body(json!({"path": "burst.yaml"}).to_string())
        .send()
        .await
        .unwrap();
    let started: Value = serde_json::from_str(&started.text().await.unwrap()).unwrap();
    let run = started["runId"].as_str().unwrap().to_owned();
    let url = format!("{base}/workflows/{run}/events");
    let (ready, mut readies) = tokio::sync::mpsc::channel::<()>(followers.max(1));
    let mut tasks = Vec::new();
    for _ in 0..followers {
        let response = http.get(&url).send().await.unwrap();
        let ready = ready.clone();
        tasks.push(tokio::spawn(async move {
            let mut body = response.bytes_stream();
            let mut told = false;
            // Each follower checks that it got offsets 1, 2, ... in order,
            // each once, then the terminal frame.
            let (mut pending, mut next, mut ended) = (Vec::new(), 1u64, false);
            while let Some(Ok(chunk)) = body.next().await {
                if !told {
                    told = true;
                    let _ = ready.send(()).await;
                }
                pending.extend_from_slice(&chunk);
                let mut start = 0;
                while let Some(end) = pending[start..].iter().position(|&b| b == b'\n') {
                    let line = &pending[start..start + end];
                    match offset_of(line) {
                        Some(offset) => {
                            assert_eq!(offset, next, "a follower's offsets go 1, 2, ...");
                            next += 1;
                        }
                        None => ended |= line.ends_with(br#""type":"end"}"#),
                    }
                    start += end + 1;
                }
                pending.drain(..start);
            }
            assert!(ended, "a follower got no terminal frame");
            next - 1
        }));
    }
    for _ in 0..followers {
        readies.recv().await.unwrap();
    }
    std::fs::write(dir.join("gate"), "").unwrap();
    let mut received = Vec::new();
    for task in tasks {
        received.push(task.await.unwrap());
    }
    // The log, once the run has ended (with no follower, wait for it here).
    let events = loop {
        let body = http.get(&url).send().await.unwrap().text().await.unwrap();
        if body.contains("\"type\":\"end\"") {
            break body;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let events: Vec<RuntimeEvent> = events
        .lines()
        .filter_map(|l| RuntimeEvent::from_json(l.as_bytes()).ok())
        .collect();
    let gate = events
        .iter()
        .position(|e| matches!(e.kind, EventKind::NodeCompleted { .. }))
        .expect("the gate step completed");
    for got in received {
        assert_eq!(got as usize, events.len(), "a follower got every event");
    }
    let last = events.last().unwrap();
    let took = last.timestamp.millis_since(events[gate].timestamp);
    (Duration::from_millis(took.max(1)), events.len() - gate - 1)
}

/// The `offset` of an event's NDJSON line; `None` for a frame of the
/// server's (the end, a heartbeat).
fn offset_of(line: &[u8]) -> Option<u64> {
    let key = br#""offset":"#;
    let at = line.windows(key.len()).position(|w| w == key)? + key.len();
    let digits = line[at..].iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&line[at..at + digits])
        .ok()?
        .parse()
        .ok()
}

fn followers(c: &mut Criterion) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    workflow(dir.path());
    let awr = awr_tests::bench::release_awr();
    // A thousand streams of one token: above the caps' defaults.
    let caps = ["--max-streams", "1100", "--max-streams-per-token", "1100"];
    let server = Served::start(&awr, dir.path().join("storage"), dir.path(), &caps);
    // The clients stand for browsers on other machines: on this one, they
    // take what CPU the server leaves, as the server's threads take what
    // the run leaves (awr serve lowers its own priority the same way).
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .on_thread_start(|| {
            let _ = rustix::process::nice(10);
        })
        .enable_all()
        .build()
        .unwrap();
    let http = server.client();
    let mut group = c.benchmark_group("serve_followers");
    // One run per sample: with 1,000 followers a run streams 5 million
    // lines, seconds of wall time for a timed fraction of a second.
    group.sample_size(10);
    group.sampling_mode(criterion::SamplingMode::Flat);
    group.warm_up_time(Duration::from_millis(1));
    group.measurement_time(Duration::from_millis(1));
    for n in [0usize, 100, 1000] {
        group.bench_function(format!("followers_{n}"), |b| {
            b.iter_custom(|iters| {
                runtime.block_on(async {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let (took, events) = one_run(&http, &server.base, dir.path(), n).await;
                        assert!(events >= EVENTS, "{events} events recorded");
                        total += took;
                    }
                    total
                })
            });
        });
    }
    group.finish();
}

criterion_group!(benches, followers);
criterion_main!(benches);

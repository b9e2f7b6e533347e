//! Transcript recorder benchmarks (design §11: "a stalled live subscriber
//! costs the writer under 10 % of its rate"), each beside its raw reference,
//! measured the same way in the same run:
//!
//! | recorder operation                                   | raw reference                      |
//! |------------------------------------------------------|------------------------------------|
//! | `append` of a ~370-byte line, no subscriber          | one `write()` of the same line; serde_json of the event alone; cloning the draft |
//! | `append`, 1 subscriber, stalled (never reads)        | `append` with no subscriber        |
//! | `append`, 16 subscribers: 1 stalled, 15 draining     | `append` with no subscriber        |
//! | `append`, 256 subscribers: 1 stalled, 255 draining   | `append` with no subscriber        |
//!
//! Draining subscribers are tasks on a 2-worker multi-thread runtime calling
//! `recv` in a loop; the writer appends from the benchmark thread. The file
//! is truncated before each sample so it stays small (O_APPEND writes go to
//! the new end).
//!
//! After the criterion group, no subscriber and one stalled subscriber take
//! turns in short rounds and their medians are printed side by side: the
//! fairest comparison on a machine whose load comes and goes.
//!
//! Run with `cargo bench -p awr-infrastructure --bench transcript`; results are
//! summarized in `docs/performance.md` ("Transcript"). About a minute once
//! built.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use application::ports::Transcript;
use awr_infrastructure::JsonlTranscript;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use domain::transcript::{
    ContentBlock, ExchangeDraft, ExchangeEvent, ExchangeType, Fidelity, message_payload,
};
use domain::{RunId, Timestamp};
use tokio::runtime::Runtime;
use tokio::task::JoinHandle;
use uuid::Uuid;

/// Subscriber counts measured; in each, one subscriber is stalled.
const SUBSCRIBERS: [usize; 3] = [1, 16, 256];

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A streamed piece of assistant text: about 300 bytes as a line.
fn sample_draft() -> ExchangeDraft {
    let blocks = [ContentBlock::Text {
        text: "The quick brown fox jumps over the lazy dog; the transcript keeps \
               every word the agent says, verbatim, for replay."
            .to_owned(),
        fidelity: Fidelity::AgentEmitted,
        extra: Default::default(),
    }];
    ExchangeDraft {
        child_run_id: None,
        kind: ExchangeType::MessageAssistant,
        path: "analyze.writer".to_owned(),
        iteration: 0,
        timestamp: Timestamp::from_millis(1_767_225_600_000),
        payload: message_payload("assistant", &blocks),
    }
}

fn open_append(path: &Path) -> File {
    OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .unwrap()
}

/// A recorder over `path` plus a handle to truncate the file between samples.
fn recorder(path: &Path) -> (Arc<JsonlTranscript>, File) {
    let file = open_append(path);
    let truncate = file.try_clone().unwrap();
    let run = RunId::new(Uuid::new_v4()).unwrap();
    let t = JsonlTranscript::from_file_for_tests(file, path, run, None);
    (Arc::new(t), truncate)
}

/// Subscribes `n` subscribers: the first is stalled (kept, never read), the
/// others drain on the runtime until the recorder closes.
fn subscribe(
    rt: &Runtime,
    t: &JsonlTranscript,
    n: usize,
) -> (
    Option<awr_infrastructure::TranscriptSubscriber>,
    Vec<JoinHandle<u64>>,
) {
    if n == 0 {
        return (None, Vec::new());
    }
    let stalled = t.subscribe();
    let drainers = (1..n)
        .map(|_| {
            let mut sub = t.subscribe();
            rt.spawn(async move {
                let mut got = 0u64;
                while sub.recv().await.is_some() {
                    got += 1;
                }
                got
            })
        })
        .collect();
    (Some(stalled), drainers)
}

/// Times `iters` appends. Each draft is cloned in the loop, as a runner
/// builds each line just before appending it: drafts built ahead would be
/// cold in cache and cost more to serialize than any real line does. The
/// clone is measured on its own as `raw_draft_clone`.
fn timed_appends(rt: &Runtime, t: &JsonlTranscript, draft: &ExchangeDraft, iters: u64) -> Duration {
    rt.block_on(async {
        let start = Instant::now();
        for _ in 0..iters {
            std::hint::black_box(t.append(draft.clone()).await.unwrap());
        }
        start.elapsed()
    })
}

fn append(c: &mut Criterion) {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let draft = sample_draft();
    let sample = ExchangeEvent {
        seq: 1_000,
        run_id: RunId::new(Uuid::new_v4()).unwrap(),
        parent_run_id: None,
        child_run_id: None,
        kind: draft.kind.clone(),
        path: draft.path.clone(),
        iteration: 0,
        timestamp: draft.timestamp,
        payload: draft.payload.clone(),
        extra: Default::default(),
    };
    let mut line = serde_json::to_vec(&sample).unwrap();
    line.push(b'\n');
    println!("transcript line: {} bytes", line.len());

    let mut group = c.benchmark_group("transcript_append");
    group.sample_size(20);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(3));
    group.throughput(Throughput::Elements(1));

    let raw_path = dir.path().join("raw.jsonl");
    let mut raw = open_append(&raw_path);
    group.bench_function("raw_write", |b| {
        b.iter_custom(|iters| {
            raw.set_len(0).unwrap();
            let start = Instant::now();
            for _ in 0..iters {
                let n = raw.write(&line).unwrap();
                assert_eq!(n, line.len());
            }
            start.elapsed()
        });
    });
    group.bench_function("raw_serialize", |b| {
        let mut buf = Vec::with_capacity(512);
        b.iter(|| {
            buf.clear();
            serde_json::to_writer(&mut buf, std::hint::black_box(&sample)).unwrap();
            buf.len()
        });
    });

    group.bench_function("raw_draft_clone", |b| {
        b.iter(|| std::hint::black_box(draft.clone()));
    });

    for n in std::iter::once(0).chain(SUBSCRIBERS) {
        let path = dir.path().join(format!("subs-{n}.jsonl"));
        let (t, file) = recorder(&path);
        let (stalled, drainers) = subscribe(&rt, &t, n);
        let name = match n {
            0 => "recorder_0_subscribers".to_owned(),
            1 => "recorder_1_stalled".to_owned(),
            n => format!("recorder_{n}_subscribers_1_stalled"),
        };
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                file.set_len(0).unwrap();
                timed_appends(&rt, &t, &draft, iters)
            });
        });
        let stats = t.stats();
        rt.block_on(t.close());
        let received: u64 = drainers.into_iter().map(|h| rt.block_on(h).unwrap()).sum();
        if let Some(stalled) = &stalled {
            let draining_drops = stats.dropped_total - stalled.dropped();
            println!(
                "  {n} subscribers: {} lines written; stalled dropped {}; the {} draining received {received}, dropped {draining_drops}",
                stats.written,
                stalled.dropped(),
                n - 1,
            );
        }
    }
    group.finish();
    interleaved_stalled_cost(&rt, dir.path(), &draft);
}

/// Criterion measures one benchmark after the other, so load that comes and
/// goes can make either look slower. Here the writer with no subscriber and
/// the writer with one stalled subscriber take turns in short rounds.
fn interleaved_stalled_cost(rt: &Runtime, dir: &Path, draft: &ExchangeDraft) {
    const ROUNDS: usize = 60;
    const PER_ROUND: u64 = 20_000;
    let (bare, bare_file) = recorder(&dir.join("turns-0.jsonl"));
    let (stalled, stalled_file) = recorder(&dir.join("turns-1.jsonl"));
    let _held = stalled.subscribe();
    // Fill the stalled subscriber's buffer before measuring.
    timed_appends(rt, &stalled, draft, 1_000);
    let mut times = [Vec::new(), Vec::new()];
    for _ in 0..ROUNDS {
        for (i, (t, file)) in [(&bare, &bare_file), (&stalled, &stalled_file)]
            .into_iter()
            .enumerate()
        {
            file.set_len(0).unwrap();
            let took = timed_appends(rt, t, draft, PER_ROUND);
            times[i].push(took.as_secs_f64() * 1e9 / PER_ROUND as f64);
        }
    }
    for t in &mut times {
        t.sort_by(f64::total_cmp);
    }
    let (a, b) = (times[0][ROUNDS / 2], times[1][ROUNDS / 2]);
    println!(
        "append, interleaved ({ROUNDS} rounds of {PER_ROUND}), median ns/line: \
         0 subscribers {a:.0}, 1 stalled {b:.0}: stalled costs {:+.1} % of the writer's time",
        (b / a - 1.0) * 100.0
    );
}

criterion_group!(benches, append);
criterion_main!(benches);

//! Snapshot cadence: the bytes a run writes beside its log's size, and the
//! state load (saved snapshot + the tail folded after it) beside a raw read
//! and parse of the same bytes as untyped JSON, for runs of 100, 2,000 and
//! 10,000 steps (design §5.1: total bytes stay linear in the run).
//!
//! Set-up, outside the timing: the real executor runs a chain of stub agents
//! on the real file store (sync off, which changes what is synced, not what
//! is written). A store wrapper sums the bytes `append`, `save_snapshot`
//! and `save_snapshot_delta` report, and notes where each snapshot was
//! taken. The `state:saved` markers of the log then say where each
//! snapshot or delta was saved, and the worst moment for a state load is
//! rebuilt in a fresh store: the snapshot, the deltas after it, and the
//! log up to the offset just before the next save, at the gap that leaves
//! the most events beyond the snapshot (every delta before a snapshot is
//! due, and a tail) — the most the cadence lets a load read and fold.
//!
//! Timed: `inspect::current_snapshot` over that store, opened once (`warm`:
//! the snapshot read and parsed, the tail read and folded) and opened anew
//! each time as a new process would (`fresh`: also the log's index loaded).
//! Raw, in the same run: reading `snapshot.json` and the tail's bytes and
//! parsing them as untyped JSON. Figures are printed after each group and
//! written to `target/criterion/cadence/figures.json` for
//! `cargo xtask bench-report`.

#![allow(clippy::expect_used)] // a benchmark has no caller to hand an error to

use awr_tests::bench::{Counting, Stub, chain, median};
use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use application::inspect::current_snapshot;
use application::ports::RunStore;
use application::{Executor, RunRequest};
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use domain::snapshot::Changes;
use domain::{EventKind, RunId, RunSnapshot, RuntimeEvent};
use infrastructure::{FileRunStore, FileStoreConfig, RandomIds, SyncPolicy, SystemClock};
use serde::de::IgnoredAny;
use serde_json::{Value, json};

/// Run lengths measured, in steps.
const LENGTHS: [usize; 3] = [100, 2_000, 10_000];

/// The run lengths to set up: [`LENGTHS`], or those `CADENCE_STEPS` lists
/// (`CADENCE_STEPS=2000`), so a profile of one length is not swamped by
/// the set-up of the others.
fn lengths() -> Vec<usize> {
    match std::env::var("CADENCE_STEPS") {
        Ok(list) => list
            .split(',')
            .map(|n| {
                n.trim()
                    .parse()
                    .expect("CADENCE_STEPS: a list of step counts")
            })
            .collect(),
        Err(_) => LENGTHS.to_vec(),
    }
}

fn open(dir: &Path) -> FileRunStore {
    let config = FileStoreConfig {
        sync: SyncPolicy::Never,
        ..FileStoreConfig::default()
    };
    FileRunStore::open_with(dir, config).expect("store")
}

/// What one completed run wrote.
struct Written {
    run_id: RunId,
    events: Vec<RuntimeEvent>,
    /// The log as encoded (before large values moved to blobs: the 10,000
    /// steps of the definition in `flow:started` are one).
    log_bytes: u64,
    /// What the run's directory holds at the end (log, index, snapshot,
    /// the blobs its snapshots' large values went to).
    disk_bytes: u64,
    snapshot_bytes: u64,
    snapshots: u64,
    delta_bytes: u64,
    deltas: u64,
    /// Where each snapshot (not delta) was taken.
    snapshot_offsets: Vec<u64>,
}

fn run_chain(rt: &tokio::runtime::Runtime, dir: &Path, steps: usize) -> Written {
    let store = Arc::new(Counting::new(open(dir)));
    let executor = Executor::new(
        store.clone(),
        Arc::new(Stub),
        Arc::new(SystemClock),
        Arc::new(RandomIds),
    );
    let run_id = rt.block_on(executor.create()).expect("create");
    let request = RunRequest {
        workflow: Arc::new(chain("cadence-bench", "provider: claude-code", steps)),
        input: json!("go"),
        source: None,
        started_by: None,
    };
    rt.block_on(executor.run(run_id, request)).expect("run");
    let mut events = Vec::new();
    loop {
        let batch = rt
            .block_on(store.read(run_id, events.len() as u64, 10_000))
            .expect("read");
        if batch.is_empty() {
            break;
        }
        events.extend(batch);
    }
    let run_dir = store.inner.run_dir(run_id);
    Written {
        run_id,
        events,
        log_bytes: store.log.load(Ordering::Relaxed),
        disk_bytes: disk_bytes(&run_dir),
        snapshot_bytes: store.snapshots.load(Ordering::Relaxed),
        snapshots: store.saves.load(Ordering::Relaxed),
        delta_bytes: store.deltas.load(Ordering::Relaxed),
        deltas: store.delta_saves.load(Ordering::Relaxed),
        snapshot_offsets: store
            .snapshot_offsets
            .lock()
            .map(|o| o.clone())
            .expect("offsets"),
    }
}

/// The offsets snapshots and deltas were saved at: those the markers
/// name, and the end (the final snapshot, which no marker follows).
fn saved_offsets(events: &[RuntimeEvent]) -> Vec<u64> {
    let mut at: Vec<u64> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::StateSaved { snapshot_offset } => Some(snapshot_offset.get()),
            _ => None,
        })
        .collect();
    at.push(events.len() as u64);
    at
}

/// The worst moment for a load: the snapshot at `base`, the deltas saved
/// at `deltas` after it (the last at `saved`), the log up to `upto`.
struct Worst {
    base: u64,
    deltas: Vec<u64>,
    saved: u64,
    upto: u64,
}

/// Of the gaps between saves, the one that leaves a load the most events
/// beyond its snapshot.
fn worst_moment(saved: &[u64], snapshots: &[u64]) -> Worst {
    saved
        .windows(2)
        .map(|w| {
            let base = snapshots.iter().copied().filter(|&s| s <= w[0]).max();
            let base = base.unwrap_or(0);
            Worst {
                base,
                deltas: saved
                    .iter()
                    .copied()
                    .filter(|&d| d > base && d <= w[0])
                    .collect(),
                saved: w[0],
                upto: w[1],
            }
        })
        .max_by_key(|w| w.upto - w.base)
        .unwrap_or(Worst {
            base: 0,
            deltas: Vec::new(),
            saved: 0,
            upto: 0,
        })
}

/// Rebuilds that moment in a new store at `dir`: the snapshot, then each
/// delta, then the log. The snapshot's and the deltas' sizes.
fn rebuild(
    rt: &tokio::runtime::Runtime,
    dir: &Path,
    written: &Written,
    worst: &Worst,
) -> (u64, u64) {
    let store = open(dir);
    let run_id = written.run_id;
    let upto = usize::try_from(worst.upto).expect("offset");
    let base = usize::try_from(worst.base).expect("offset");
    rt.block_on(async {
        let lock = store.create_run(run_id).await.expect("create");
        for batch in written.events[..upto].chunks(1_000) {
            store.append(run_id, batch).await.expect("append");
        }
        let mut state = RunSnapshot::new(run_id);
        for event in &written.events[..base] {
            state.apply(event);
        }
        let bytes = store.save_snapshot(&state).await.expect("snapshot");
        let (mut from, mut delta_bytes) = (base, 0);
        for &at in &worst.deltas {
            let at = usize::try_from(at).expect("offset");
            let mut changes = Changes::default();
            for event in &written.events[from..at] {
                state.apply(event);
                changes.note(event);
            }
            let delta = state.delta(from as u64, &changes);
            let saved = store.save_snapshot_delta(&delta).await.expect("delta");
            delta_bytes += saved.expect("the file store keeps deltas");
            from = at;
        }
        drop(lock);
        (bytes, delta_bytes)
    })
}

/// Byte position of the line of `offset + 1` in the log at `path`.
fn line_start(path: &Path, offset: u64) -> u64 {
    let log = std::fs::read(path).expect("log");
    let skip = usize::try_from(offset).expect("offset");
    if skip == 0 {
        return 0;
    }
    log.iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .nth(skip - 1)
        .map_or(log.len() as u64, |(i, _)| i as u64 + 1)
}

/// Reads and parses the blobs `value` refers to (`{"$blob": "sha256:<hex>"}`),
/// beside the snapshot in `blobs/sha256-<hex>`.
fn raw_blobs(value: &Value, blobs: &Path, out: &mut Vec<Value>) {
    match value {
        Value::Object(map) => {
            if let Some(hex) = map.get("$blob").and_then(Value::as_str) {
                let file = blobs.join(hex.replace(':', "-"));
                let bytes = std::fs::read(file).expect("read blob");
                out.push(serde_json::from_slice(&bytes).expect("parse blob"));
                return;
            }
            map.values().for_each(|v| raw_blobs(v, blobs, out));
        }
        Value::Array(items) => items.iter().for_each(|v| raw_blobs(v, blobs, out)),
        _ => {}
    }
}

/// The lines of `snapshot-deltas.ndjson` beside `snapshot`, if any.
fn delta_lines(snapshot: &Path) -> Vec<u8> {
    std::fs::read(snapshot.with_file_name("snapshot-deltas.ndjson")).unwrap_or_default()
}

/// The raw load: `snapshot.json` with the blobs it refers to, the deltas
/// after it and the tail's lines, read and parsed as untyped JSON (no hash
/// checked).
fn raw_load(snapshot: &Path, log: &Path, tail_start: u64) -> (Value, Vec<Value>) {
    let bytes = std::fs::read(snapshot).expect("read snapshot");
    let state: Value = serde_json::from_slice(&bytes).expect("parse snapshot");
    let mut parts = Vec::new();
    raw_blobs(&state, &snapshot.with_file_name("blobs"), &mut parts);
    let deltas = delta_lines(snapshot);
    for line in deltas.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        parts.push(serde_json::from_slice(line).expect("parse delta"));
    }
    let mut file = std::fs::File::open(log).expect("open log");
    file.seek(SeekFrom::Start(tail_start)).expect("seek");
    let mut tail = Vec::new();
    file.read_to_end(&mut tail).expect("read tail");
    let events = tail
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice::<Value>(l).expect("parse line"))
        .chain(parts)
        .collect();
    (state, events)
}

/// The least a load of the same bytes can do: `snapshot.json`, the deltas
/// and the tail's lines read and checked as JSON, nothing built
/// (`IgnoredAny`).
fn raw_scan(snapshot: &Path, log: &Path, tail_start: u64) -> usize {
    let bytes = std::fs::read(snapshot).expect("read snapshot");
    serde_json::from_slice::<IgnoredAny>(&bytes).expect("scan snapshot");
    let deltas = delta_lines(snapshot);
    for line in deltas.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        serde_json::from_slice::<IgnoredAny>(line).expect("scan delta");
    }
    let mut file = std::fs::File::open(log).expect("open log");
    file.seek(SeekFrom::Start(tail_start)).expect("seek");
    let mut tail = Vec::new();
    file.read_to_end(&mut tail).expect("read tail");
    let mut lines = 0;
    for line in tail.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        serde_json::from_slice::<IgnoredAny>(line).expect("scan line");
        lines += 1;
    }
    lines
}

/// Times state loads of `run_id` from `store`: each one whole, the state
/// dropped (`whole`), and until the state is in hand, its drop left out
/// (`kept`): a resume keeps the state it loads.
fn time_loads(
    b: &mut criterion::Bencher<'_>,
    rt: &tokio::runtime::Runtime,
    store: &FileRunStore,
    run_id: RunId,
    whole: &mut Vec<f64>,
    kept: &mut Vec<f64>,
) {
    b.iter_custom(|iters| {
        let start = std::time::Instant::now();
        for _ in 0..iters {
            let one = std::time::Instant::now();
            let state = rt.block_on(current_snapshot(store, run_id)).expect("load");
            kept.push(one.elapsed().as_nanos() as f64);
            drop(state);
            whole.push(one.elapsed().as_nanos() as f64);
        }
        start.elapsed()
    })
}

/// Medians of the load's two parts: the snapshot read and parsed, the
/// tail after it read and folded, in µs.
fn split(
    rt: &tokio::runtime::Runtime,
    store: &FileRunStore,
    run_id: RunId,
    saved: u64,
) -> (f64, f64) {
    let (mut snapshot, mut tail) = (Vec::new(), Vec::new());
    for _ in 0..31 {
        let start = std::time::Instant::now();
        let mut state = rt
            .block_on(store.load_snapshot(run_id))
            .expect("load")
            .unwrap_or_else(|| RunSnapshot::new(run_id));
        snapshot.push(start.elapsed().as_nanos() as f64);
        let start = std::time::Instant::now();
        let mut after = saved;
        loop {
            let batch = rt.block_on(store.read(run_id, after, 1_000)).expect("read");
            let Some(last) = batch.last() else { break };
            after = last.offset.get();
            batch.iter().for_each(|e| state.apply(e));
        }
        tail.push(start.elapsed().as_nanos() as f64);
    }
    (median(&snapshot) / 1e3, median(&tail) / 1e3)
}

/// Bytes of the files under `dir`, recursively: what the run left on disk.
fn disk_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries
            .filter_map(Result::ok)
            .map(|e| match e.file_type() {
                Ok(t) if t.is_dir() => disk_bytes(&e.path()),
                _ => e.metadata().map_or(0, |m| m.len()),
            })
            .sum()
    })
}

fn bench_cadence(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut figures = BTreeMap::new();
    let mut group = c.benchmark_group("cadence");
    group.sample_size(30);
    for steps in lengths() {
        let written = run_chain(&rt, &dir.path().join(format!("run{steps}")), steps);
        let offsets = saved_offsets(&written.events);
        let worst = worst_moment(&offsets, &written.snapshot_offsets);
        let scratch = dir.path().join(format!("load{steps}"));
        let (snapshot_len, deltas_len) = rebuild(&rt, &scratch, &written, &worst);
        let run_dir = open(&scratch).run_dir(written.run_id);
        let log = run_dir.join("events.ndjson");
        let snapshot = run_dir.join("snapshot.json");
        let tail_start = line_start(&log, worst.saved);
        let tail_bytes = std::fs::metadata(&log).expect("log").len() - tail_start;
        let total = written.log_bytes + written.snapshot_bytes + written.delta_bytes;
        println!(
            "cadence/{steps}: log {} B, {} snapshots {} B, {} deltas {} B, total {total} B = \
             {:.2} x the log ({} B on disk at the end, {:.2} x); the most beyond a snapshot: \
             the snapshot of offset {} ({snapshot_len} B), {} deltas ({deltas_len} B) to offset \
             {}, a tail of {} events ({tail_bytes} B)",
            written.log_bytes,
            written.snapshots,
            written.snapshot_bytes,
            written.deltas,
            written.delta_bytes,
            total as f64 / written.log_bytes as f64,
            written.disk_bytes,
            written.disk_bytes as f64 / written.log_bytes as f64,
            worst.base,
            worst.deltas.len(),
            worst.saved,
            worst.upto - worst.saved,
        );

        let warm = open(&scratch);
        let (mut warm_ns, mut warm_kept_ns) = (Vec::new(), Vec::new());
        group.bench_function(format!("load_warm/{steps}"), |b| {
            time_loads(
                b,
                &rt,
                &warm,
                written.run_id,
                &mut warm_ns,
                &mut warm_kept_ns,
            )
        });
        group.bench_function(format!("load_fresh/{steps}"), |b| {
            b.iter_batched(
                || open(&scratch),
                |store| rt.block_on(current_snapshot(&store, written.run_id)),
                BatchSize::PerIteration,
            )
        });
        let mut raw_ns = Vec::new();
        group.bench_function(format!("raw_load/{steps}"), |b| {
            b.iter_custom(|iters| {
                let start = std::time::Instant::now();
                for _ in 0..iters {
                    let one = std::time::Instant::now();
                    raw_load(&snapshot, &log, tail_start);
                    raw_ns.push(one.elapsed().as_nanos() as f64);
                }
                start.elapsed()
            })
        });
        // A run that ended (or paused) wrote its final snapshot: its load
        // is that snapshot with no tail, what `awr inspect` and a resume
        // after a pause read.
        let ended = open(&dir.path().join(format!("run{steps}")));
        let (mut ended_ns, mut ended_kept_ns) = (Vec::new(), Vec::new());
        group.bench_function(format!("load_ended/{steps}"), |b| {
            time_loads(
                b,
                &rt,
                &ended,
                written.run_id,
                &mut ended_ns,
                &mut ended_kept_ns,
            )
        });
        let mut scan_ns = Vec::new();
        group.bench_function(format!("raw_scan/{steps}"), |b| {
            b.iter_custom(|iters| {
                let start = std::time::Instant::now();
                for _ in 0..iters {
                    let one = std::time::Instant::now();
                    raw_scan(&snapshot, &log, tail_start);
                    scan_ns.push(one.elapsed().as_nanos() as f64);
                }
                start.elapsed()
            })
        });
        let warm_us = median(&warm_ns) / 1e3;
        let raw_us = median(&raw_ns) / 1e3;
        let scan_us = median(&scan_ns) / 1e3;
        let ended_us = median(&ended_ns) / 1e3;
        let ended_kept_us = median(&ended_kept_ns) / 1e3;
        let warm_kept_us = median(&warm_kept_ns) / 1e3;
        let (snapshot_us, tail_us) = split(&rt, &warm, written.run_id, worst.saved);
        println!(
            "cadence/{steps}: state load {warm_us:.1} µs (snapshot {snapshot_us:.1} µs, tail {tail_us:.1} µs), \
             raw read + parse of the same bytes {raw_us:.1} µs ({:.2} x raw), \
             read + scan {scan_us:.1} µs ({:.2} x the scan)",
            warm_us / raw_us,
            warm_us / scan_us
        );
        println!(
            "cadence/{steps}: an ended run (its final snapshot, no tail) loads in {ended_us:.1} µs; \
             until the state is in hand (dropped after): {ended_kept_us:.1} µs, at the longest tail {warm_kept_us:.1} µs"
        );
        figures.insert(
            steps.to_string(),
            json!({
                "log_bytes": written.log_bytes,
                "disk_bytes": written.disk_bytes,
                "snapshot_bytes": written.snapshot_bytes,
                "snapshots": written.snapshots,
                "delta_bytes": written.delta_bytes,
                "deltas": written.deltas,
                "load_deltas": worst.deltas.len(),
                "load_deltas_len": deltas_len,
                "events": written.events.len(),
                "tail_events": worst.upto - worst.saved,
                "tail_bytes": tail_bytes,
                "snapshot_len": snapshot_len,
                "load_us": warm_us,
                "snapshot_us": snapshot_us,
                "tail_us": tail_us,
                "raw_us": raw_us,
                "scan_us": scan_us,
                "ended_us": ended_us,
                "ended_kept_us": ended_kept_us,
                "load_kept_us": warm_kept_us,
            }),
        );
    }
    group.finish();
    let out = awr_tests::bench::criterion_dir().join("cadence");
    if std::fs::create_dir_all(&out).is_ok() {
        let _ = std::fs::write(
            out.join("figures.json"),
            Value::Object(figures.into_iter().collect()).to_string(),
        );
    }
}

criterion_group!(benches, bench_cadence);
criterion_main!(benches);

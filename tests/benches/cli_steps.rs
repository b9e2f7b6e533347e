//! A durable step through the whole `awr run`, beside one `fdatasync`.
//!
//! The release `awr` runs chains of 100, 1,000 and 10,000 mock agents (one
//! fixture file per node) on the file store with the default sync policy,
//! each run a process of its own on a fresh storage directory: everything a
//! user's run pays per step (the mock reading its fixture, the transcript,
//! progress lines, the log's sync, snapshots on the amortized rule). The
//! raw reference is a 300-byte `write` + `fdatasync` on the same
//! filesystem, taken in the same pass as the runs, since syncs on a shared
//! VM drift by several times within a minute. Per step: a run's whole time
//! over its steps, and the marginal `(t(n) - t(100)) / (n - 100)`, which
//! the process's start and the run's fixed costs cancel out of; flat in
//! steps means both stay the same from 1,000 to 10,000 steps. Then each
//! length runs once more under GNU time for its peak memory (max RSS).
//!
//! `cargo bench -p awr-tests --bench cli_steps` (with `AWR_BIN=PATH`, of
//! another build of `awr`); `cargo xtask bench-report` prints the figures
//! again.

#![allow(clippy::expect_used)] // a benchmark has no caller to hand an error to

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use awr_tests::bench::median;
use serde_json::json;

/// Chain lengths; the first is the base of the marginal figures.
const LENGTHS: [usize; 3] = [100, 1_000, 10_000];

/// Passes: each runs every length once and takes its raw syncs.
const PASSES: usize = 5;

/// Raw syncs per pass (their median is the pass's reference).
const RAW_SYNCS: usize = 50;

/// The wall time of one `awr run` of `chain<n>` on a fresh storage, in µs.
fn run(awr: &Path, dir: &Path, n: usize) -> f64 {
    let storage = dir.join(format!("storage-{n}"));
    let _ = std::fs::remove_dir_all(&storage);
    let start = Instant::now();
    awr_run(awr, dir, &storage, n);
    let took = start.elapsed().as_secs_f64() * 1e6;
    let _ = std::fs::remove_dir_all(&storage);
    took
}

/// `awr --storage <storage> run chain<n>.yaml` in `dir`, to its end.
fn awr_run(awr: &Path, dir: &Path, storage: &Path, n: usize) {
    let out = std::process::Command::new(awr)
        .arg("--storage")
        .arg(storage)
        .args(["run", &format!("chain{n}.yaml")])
        .current_dir(dir)
        .output()
        .expect("start awr");
    assert!(
        out.status.success(),
        "awr run chain{n}.yaml: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// What one step of a run of `chain<n>` adds to its log, in the two
/// `write`s a step makes before its sync (its `agent:start`, on record
/// before the call; then the rest of its events): their mean sizes, from
/// one untimed run.
fn step_writes(awr: &Path, dir: &Path, n: usize) -> [usize; 2] {
    let storage = dir.join("storage-probe");
    awr_run(awr, dir, &storage, n);
    let runs = std::fs::read_dir(storage.join("runs")).expect("runs");
    let run = runs.flatten().next().expect("one run").path();
    let log = std::fs::read_to_string(run.join("events.ndjson")).expect("log");
    let _ = std::fs::remove_dir_all(&storage);
    let starts: Vec<usize> = log
        .lines()
        .filter(|l| l.contains(r#""type":"agent:start""#))
        .map(|l| l.len() + 1)
        .collect();
    let start = starts.iter().sum::<usize>() / starts.len().max(1);
    [start, (log.len() / n).saturating_sub(start)]
}

/// The maximum resident set of one `awr run` of `chain<n>`, in KB.
fn max_rss_kb(time: &Path, awr: &Path, dir: &Path, n: usize) -> u64 {
    let storage = dir.join(format!("storage-rss-{n}"));
    let report = dir.join("rss.txt");
    let out = std::process::Command::new(time)
        .args(["-f", "%M", "-o"])
        .arg(&report)
        .arg(awr)
        .arg("--storage")
        .arg(&storage)
        .args(["run", &format!("chain{n}.yaml")])
        .current_dir(dir)
        .output()
        .expect("start GNU time");
    assert!(out.status.success(), "awr run chain{n}.yaml under time");
    let _ = std::fs::remove_dir_all(&storage);
    let text = std::fs::read_to_string(&report).expect("time's report");
    text.trim().parse().expect("a number of KB")
}

fn main() {
    // `AWR_BIN` measures another build (an older one, to compare).
    let awr = std::env::var_os("AWR_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(awr_tests::bench::release_awr);
    let dir = tempfile::tempdir().expect("tempdir");
    for n in LENGTHS {
        awr_tests::bench::mock_chain(dir.path(), n);
    }
    let mut file = awr_tests::bench::append_file(&dir.path().join("raw.log"));
    let line = awr_tests::bench::raw_line();
    let mut raw = Vec::new();
    // A step's own bytes made durable as the run makes them: the floor of
    // a durable step with this record, whatever the runtime around it.
    let writes = step_writes(&awr, dir.path(), LENGTHS[1]);
    let lines = writes.map(|len| vec![b'x'; len]);
    let mut own = Vec::new();
    // Per length: the whole run's time per step, and its ratio to the pass's sync.
    let mut whole: Vec<Vec<(f64, f64)>> = vec![Vec::new(); LENGTHS.len()];
    let mut marginal: Vec<Vec<(f64, f64)>> = vec![Vec::new(); LENGTHS.len()];
    for _ in 0..PASSES {
        let syncs: Vec<f64> = (0..RAW_SYNCS)
            .map(|_| {
                let start = Instant::now();
                file.write_all(&line).expect("write");
                file.sync_data().expect("fdatasync");
                start.elapsed().as_secs_f64() * 1e6
            })
            .collect();
        let sync = median(&syncs);
        raw.push(sync);
        let syncs: Vec<f64> = (0..RAW_SYNCS)
            .map(|_| {
                let start = Instant::now();
                for line in &lines {
                    file.write_all(line).expect("write");
                }
                file.sync_data().expect("fdatasync");
                start.elapsed().as_secs_f64() * 1e6
            })
            .collect();
        own.push((median(&syncs), median(&syncs) / sync));
        let times = LENGTHS.map(|n| run(&awr, dir.path(), n));
        for (i, n) in LENGTHS.iter().enumerate() {
            let step = times[i] / *n as f64;
            whole[i].push((step, step / sync));
            if i > 0 {
                let step = (times[i] - times[0]) / (n - LENGTHS[0]) as f64;
                marginal[i].push((step, step / sync));
            }
        }
    }
    let raw = median(&raw);
    let pick = |v: &[(f64, f64)]| {
        let steps: Vec<f64> = v.iter().map(|f| f.0).collect();
        let ratios: Vec<f64> = v.iter().map(|f| f.1).collect();
        (median(&steps), median(&ratios))
    };
    println!("cli steps, {PASSES} passes (medians):");
    println!("  raw write 300 B + fdatasync   {raw:>9.1} µs");
    let (own_us, own_ratio) = pick(&own);
    println!(
        "  a step's log bytes, {} + {} B in 2 writes, + fdatasync {own_us:>9.1} µs, {own_ratio:.2} x the 300 B one",
        writes[0], writes[1]
    );
    let mut figures = serde_json::Map::new();
    figures.insert("raw_fdatasync_us".into(), json!(raw));
    figures.insert(
        "step_bytes_sync".into(),
        json!({"writes": writes, "us": own_us, "ratio": own_ratio}),
    );
    for (i, n) in LENGTHS.iter().enumerate() {
        let (step, ratio) = pick(&whole[i]);
        println!(
            "  {n:>6} steps, whole run       {step:>9.1} µs per step, {ratio:.2} x the pass's fdatasync"
        );
        let mut figure = json!({"steps": n, "per_step_us": step, "ratio": ratio});
        if i > 0 {
            let (step, ratio) = pick(&marginal[i]);
            println!(
                "  {n:>6} steps, marginal        {step:>9.1} µs per step, {ratio:.2} x the pass's fdatasync"
            );
            figure["marginal_us"] = json!(step);
            figure["marginal_ratio"] = json!(ratio);
        }
        figures.insert(format!("chain_{n}"), figure);
    }
    // The peak memory of a run of each length, by GNU time in runs of
    // their own (its fork and exec would weigh on the timed runs).
    let time = Path::new("/usr/bin/time");
    if time.exists() {
        for n in LENGTHS {
            let kb = max_rss_kb(time, &awr, dir.path(), n);
            println!(
                "  {n:>6} steps, max RSS        {:>9.1} MB",
                kb as f64 / 1024.0
            );
            figures[&format!("chain_{n}")]["max_rss_kb"] = json!(kb);
        }
    } else {
        println!("  max RSS: not measured, no GNU time at /usr/bin/time");
    }
    let out = awr_tests::bench::criterion_dir().join("cli_steps");
    if std::fs::create_dir_all(&out).is_ok() {
        let _ = std::fs::write(
            out.join("figures.json"),
            serde_json::Value::Object(figures).to_string(),
        );
    }
}

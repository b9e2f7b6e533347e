//! `awr replay`: a recorded run's events again, as `awr events` prints
//! them, paced by their recorded timestamps over `--speed`, each wait at
//! most `--max-wait`; nothing runs again and nothing is written.

use std::time::{Duration, Instant};

use crate::util::Awr;

/// Replay prints exactly what `awr events` prints, on both stores, and
/// leaves the log as it was.
#[test]
fn a_replay_shows_the_log_as_events_does_and_writes_nothing() {
    for awr in [Awr::new(), Awr::sqlite()] {
        let run = awr.completed_run("examples/summarize.yaml");
        let before = awr.events(&run);
        for json in [false, true] {
            let mut events = vec!["events", &run];
            let mut replay = vec!["replay", &run, "--speed", "1000"];
            if json {
                events.push("--json");
                replay.push("--json");
            }
            let (events, replay) = (awr.run(&events), awr.run_within(60, &replay));
            assert_eq!(replay.code, 0, "{}", replay.stderr);
            assert_eq!(replay.stdout, events.stdout);
            assert!(!replay.stdout.is_empty());
        }
        let filtered = awr.run_within(60, &["replay", &run, "--type", "node:completed"]);
        assert_eq!(filtered.code, 0, "{}", filtered.stderr);
        // The header, then the two events.
        assert_eq!(filtered.stdout.lines().count(), 3, "{}", filtered.stdout);
        assert_eq!(awr.events(&run), before, "a replay writes nothing");
    }
}

/// Events recorded an hour apart are replayed `--max-wait` apart: the
/// replay takes at least that per gap, and not hours.
#[test]
fn long_gaps_are_capped_by_max_wait() {
    let awr = Awr::new();
    let run = awr.completed_run("examples/summarize.yaml");
    let log = awr.run_dir(&run).join("events.ndjson");
    let text = std::fs::read_to_string(&log).unwrap();
    let mut lines = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let mut event: serde_json::Value = serde_json::from_str(line).unwrap();
        event["timestamp"] = format!("2026-01-01T{:02}:00:00.000Z", i % 24).into();
        lines.push(event.to_string());
    }
    std::fs::write(&log, lines.join("\n") + "\n").unwrap();
    // The index and the snapshot no longer match the log: rebuilt, refolded.
    let _ = std::fs::remove_file(awr.run_dir(&run).join("events.idx"));
    let _ = std::fs::remove_file(awr.run_dir(&run).join("snapshot.json"));

    let gaps = lines.len().min(24) - 1;
    let started = Instant::now();
    let out = awr.run_within(60, &["replay", &run, "--max-wait", "0.05"]);
    let took = started.elapsed();
    assert_eq!(out.code, 0, "{}", out.stderr);
    // The header, then a line an event.
    assert_eq!(out.stdout.lines().count(), 1 + lines.len());
    assert!(
        took >= Duration::from_millis(50) * gaps as u32,
        "{gaps} gaps of an hour, each waited 50 ms: {took:?}"
    );
}

/// A speed or a wait that is not a number above 0 (at least 0 for the
/// wait) is a usage error naming the option; an unknown run is exit 2.
#[test]
fn bad_speeds_and_unknown_runs_are_refused() {
    let awr = Awr::new();
    let run = awr.completed_run("examples/summarize.yaml");
    for (option, value) in [
        ("--speed", "0"),
        ("--speed", "-2"),
        ("--speed", "fast"),
        ("--max-wait", "-1"),
    ] {
        let out = awr.run(&["replay", &run, option, value]);
        assert_eq!(out.code, 2, "{option} {value}: {}", out.stderr);
        assert!(
            out.stderr.contains(option) && out.stderr.contains(value),
            "{}",
            out.stderr
        );
    }
    let out = awr.run(&["replay", "ffffffff"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("no run matches"), "{}", out.stderr);
}

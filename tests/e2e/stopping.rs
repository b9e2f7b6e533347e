//! A stop that a kill cuts short is finished by whoever continues the run.
//!
//! Between the event that decides a run stops (a cancel or pause command,
//! `budget:exceeded`) and the event that ends it, the writer winds its node
//! runs down. Each test stops a real run, then resumes every prefix of its
//! log that holds the decision but not the end (what a kill at that point
//! leaves): the resume must finish the same stop, never start an agent or
//! command again, never undo a cancel.

use std::path::Path;
use std::process::Stdio;

use domain::{EventKind, RunSnapshot, RuntimeEvent};

use crate::cancel::{wait_exit, wait_for};
use crate::crash::{Reaper, awr_within, check_snapshot, only_run, parse};
use crate::util::Awr;

/// Two command nodes side by side that wait; each one answers at once when
/// it runs again (its marker file exists), so a resumed run can complete.
fn two_waiting_nodes(awr: &Awr, budget: &str) -> std::path::PathBuf {
    let marks = awr.dir.path();
    let node = |id: &str| {
        let mark = marks.join(format!("{id}.mark"));
        format!(
            "  - {{id: {id}, command: 'if [ -e {m} ]; then echo done-{id}; else touch {m}; sleep 30; fi'}}\n",
            m = mark.display()
        )
    };
    let yaml = format!("name: stopping\n{budget}nodes:\n{}{}", node("x"), node("y"));
    awr.write("flow.yaml", &yaml)
}

/// Runs `flow` in a child, waits until both nodes run, stops it with
/// `stop`, and returns the run's id, its log and awr's exit code.
fn stopped_run(awr: &Awr, flow: &Path, stop: impl FnOnce(&str, u32)) -> (String, String, i32) {
    let mut reaper = Reaper {
        child: None,
        pids: awr.dir.path().join("pids"),
    };
    let child = awr
        .command(&["run", flow.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let child = reaper.child.insert(child);
    let marks = awr.dir.path();
    wait_for(20, "both nodes to start", || {
        marks.join("x.mark").exists() && marks.join("y.mark").exists()
    });
    let run = only_run(awr).unwrap();
    stop(&run, pid);
    let code = wait_exit(child, 30, "awr run to end");
    let log = std::fs::read_to_string(awr.run_dir(&run).join("events.ndjson")).unwrap();
    (run, log, code)
}

/// The prefixes of `full` (in lines) that hold the event `decides` picks
/// and not the last event.
fn cut_points(full: &[RuntimeEvent], decides: impl Fn(&EventKind) -> bool) -> Vec<usize> {
    let at = full
        .iter()
        .position(|e| decides(&e.kind))
        .expect("the stop's decision is on record");
    (at + 1..full.len()).collect()
}

/// `awr ARGS` on a fresh store holding the first `k` lines of `full` as
/// the log of `run`; returns the exit code, the prefix's events and the
/// whole log after.
fn from_prefix(
    run: &str,
    full: &str,
    k: usize,
    args: &[&str],
) -> (i32, usize, Vec<RuntimeEvent>, String) {
    let awr = Awr::new();
    let dir = awr.run_dir(run);
    std::fs::create_dir_all(&dir).unwrap();
    let prefix: String = full.split_inclusive('\n').take(k).collect();
    std::fs::write(dir.join("events.ndjson"), &prefix).unwrap();
    let pids = awr.dir.path().join("pids");
    let out = awr_within(&awr, &pids, args).unwrap();
    let after = std::fs::read_to_string(dir.join("events.ndjson")).unwrap();
    assert!(after.starts_with(&prefix), "the log lost its prefix");
    let log = parse(&after).unwrap();
    check_snapshot(&awr, run, &log, true).unwrap();
    (out.code, k, log, out.stderr)
}

/// Nothing started after the first `k` events: no node run, attempt,
/// agent call or process.
fn nothing_started_after(log: &[RuntimeEvent], k: usize, what: &str) {
    let started: Vec<&str> = log[k..]
        .iter()
        .map(|e| e.kind.type_name())
        .filter(|t| ["node:started", "agent:start", "process:started"].contains(t))
        .collect();
    assert!(started.is_empty(), "{what}: started again: {started:?}");
}

#[test]
fn a_cancel_cut_short_by_a_kill_is_finished_by_the_resume() {
    let awr = Awr::new();
    let flow = two_waiting_nodes(&awr, "");
    let (run, full, code) = stopped_run(&awr, &flow, |_, pid| {
        let sent = std::process::Command::new("kill")
            .args(["-INT", &pid.to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
    });
    assert_eq!(code, 130, "SIGINT cancels the run");
    let events = parse(&full).unwrap();
    let reason = match &events.last().unwrap().kind {
        EventKind::FlowCancelled { reason: Some(r) } => r.clone(),
        other => panic!("the run did not end cancelled: {other:?}"),
    };
    // The signal is recorded as the cancel command it is, before any node run ends.
    let cuts = cut_points(
        &events,
        |k| matches!(k, EventKind::CommandReceived { command, accepted: true, .. } if command["type"] == "cancel"),
    );
    assert!(
        cuts.len() >= 3,
        "the cancel precedes both node runs' ends: {cuts:?}"
    );
    for k in cuts {
        let (code, k, log, stderr) = from_prefix(&run, &full, k, &["resume", &run]);
        let what = format!("the log cut after line {k}");
        assert_eq!(code, 130, "{what}: `awr resume` exit: {stderr}");
        nothing_started_after(&log, k, &what);
        assert!(
            !log[k..]
                .iter()
                .any(|e| matches!(e.kind, EventKind::FlowResumed { .. })),
            "{what}: a cancel is finished, not resumed"
        );
        match &log.last().unwrap().kind {
            EventKind::FlowCancelled { reason: Some(r) } => assert_eq!(r, &reason, "{what}"),
            other => panic!("{what}: ended with {other:?}"),
        }
        let state = RunSnapshot::fold(&log).unwrap();
        assert!(state.node_runs.is_empty(), "{what}: node runs left open");
        assert!(state.stopping.is_none(), "{what}");
    }
}

#[test]
fn a_budget_stop_cut_short_by_a_kill_is_finished_by_the_resume() {
    let awr = Awr::new();
    let flow = two_waiting_nodes(&awr, "budget: {deadline: 300ms}\n");
    let (run, full, code) = stopped_run(&awr, &flow, |_, _| {});
    assert_eq!(code, 1, "the deadline fails the run");
    let events = parse(&full).unwrap();
    let original = RunSnapshot::fold(&events).unwrap().failure.unwrap();
    let cuts = cut_points(&events, |k| matches!(k, EventKind::BudgetExceeded { .. }));
    assert!(cuts.len() >= 3, "{cuts:?}");
    for k in cuts {
        let (code, k, log, stderr) = from_prefix(&run, &full, k, &["resume", &run]);
        let what = format!("the log cut after line {k}");
        assert_eq!(code, 1, "{what}: `awr resume` exit: {stderr}");
        nothing_started_after(&log, k, &what);
        let exceeded = log
            .iter()
            .filter(|e| matches!(e.kind, EventKind::BudgetExceeded { .. }))
            .count();
        assert_eq!(exceeded, 1, "{what}: the budget stop is recorded once");
        assert!(matches!(
            log.last().unwrap().kind,
            EventKind::FlowFailed { .. }
        ));
        let state = RunSnapshot::fold(&log).unwrap();
        assert_eq!(state.failure.as_ref(), Some(&original), "{what}");
        assert!(state.node_runs.is_empty(), "{what}: node runs left open");
    }
}

#[test]
fn a_pause_cut_short_is_finished_by_recover_and_undone_by_resume() {
    let awr = Awr::new();
    let flow = two_waiting_nodes(&awr, "");
    let (run, full, code) = stopped_run(&awr, &flow, |run, _| {
        let out = awr.run(&["pause", run]);
        assert_eq!(out.code, 0, "awr pause: {}", out.stderr);
    });
    assert_eq!(code, 3, "a paused run exits 3");
    let events = parse(&full).unwrap();
    assert!(matches!(
        events.last().unwrap().kind,
        EventKind::FlowPaused { .. }
    ));
    let cuts = cut_points(
        &events,
        |k| matches!(k, EventKind::CommandReceived { command, accepted: true, .. } if command["type"] == "pause"),
    );
    assert!(!cuts.is_empty());
    for k in cuts {
        let what = format!("the log cut after line {k}");
        // Nobody asked the run to go on: recovering it finishes the pause.
        let (code, k, log, stderr) = from_prefix(&run, &full, k, &["recover", "--all"]);
        assert_eq!(code, 0, "{what}: `awr recover --all` exit: {stderr}");
        nothing_started_after(&log, k, &what);
        assert!(
            matches!(log.last().unwrap().kind, EventKind::FlowPaused { .. }),
            "{what}: recover ended with {:?}",
            log.last().unwrap().kind
        );
        // `awr resume` is that request: the run goes on and completes.
        let (code, _, log, stderr) = from_prefix(&run, &full, k, &["resume", &run]);
        assert_eq!(code, 0, "{what}: `awr resume` exit: {stderr}");
        let state = RunSnapshot::fold(&log).unwrap();
        assert_eq!(state.status.as_str(), "completed", "{what}");
        assert_eq!(
            state.outputs["x"].data().unwrap()["stdout"],
            "done-x\n",
            "{what}"
        );
        assert_eq!(
            state.outputs["y"].data().unwrap()["stdout"],
            "done-y\n",
            "{what}"
        );
    }
}

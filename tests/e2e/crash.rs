//! The crash harness: `awr run` is killed with SIGKILL at random points of
//! mock, fake-CLI and `command` workflows, then `awr resume` continues it.
//! Each trial checks that the log is a clean prefix (nothing acknowledged
//! lost, offsets without a gap), that the run was shown `interrupted`, that
//! the resume completes it, that the fold of its log is its saved snapshot,
//! that its outputs are those of an uninterrupted run, and that no process
//! of the dead run survives.
//!
//! The kill points come from a seed, printed first; `AWR_CRASH_SEED=N`
//! replays a seed, `AWR_CRASH_TRIAL=I` only its trial `I`. A kill point is
//! a number of lines the log must hold before the kill (a condition on the
//! log, not a delay), so it lands mid-run however fast the machine is.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use domain::{EventKind, RunId, RunSnapshot, RuntimeEvent};
use proptest::prelude::RngExt;
use proptest::test_runner::{RngAlgorithm, TestRng};
use serde_json::{Value, json};

use crate::cancel::gone;
use crate::util::{Awr, repo_root};

/// Trials that must be killed mid-run (a run that ended before its kill
/// does not count).
const MID_RUN: usize = 100;
/// Trials at most, mid-run or not.
const MAX_TRIALS: usize = 200;
/// Trials at once: each is a few short processes, most of them waiting.
const WORKERS: usize = 3;
/// How long any one step of a trial may take before it is a failure.
const LIMIT: Duration = Duration::from_secs(60);

/// A fake Claude Code: records its pid and its background child's in
/// `$CRASH_PIDS`, prints its session (the one awr chose or resumes), then
/// an answer and its result, a little apart. A kill of awr between its
/// lines leaves the background child behind unless the resume kills it.
const FAKE_CLAUDE: &str = r#"#!/bin/sh
echo $$ >> "$CRASH_PIDS"
sleep 300 >/dev/null 2>&1 &
echo $! >> "$CRASH_PIDS"
session=none
while [ $# -gt 0 ]; do
  case "$1" in --session-id|--resume) session="$2"; shift ;; esac
  shift
done
echo '{"type":"system","subtype":"init","session_id":"'"$session"'","model":"m"}'
sleep 0.05
echo '{"type":"assistant","message":{"id":"m1","content":[{"type":"text","text":"working"}]}}'
sleep 0.05
echo '{"type":"result","subtype":"success","is_error":false,"result":"done","session_id":"'"$session"'","num_turns":1,"duration_ms":5,"usage":{"input_tokens":10,"output_tokens":4}}'
"#;

/// A fake Claude Code that fails when its prompt says "refuse-me", and
/// when it resumes a session that did (a real CLI remembers its
/// conversation); `MARKS` is the directory where it notes those sessions.
/// The word is not hex: a word that is ("bad") also matched one uuid in
/// ~140 passed as session ids, failing a good item now and then.
const PICKY_CLAUDE: &str = r#"#!/bin/sh
session=none
case "$*" in *refuse-me*) bad=1 ;; esac
while [ $# -gt 0 ]; do
  case "$1" in --session-id|--resume) session="$2"; shift ;; esac
  shift
done
[ -n "$bad" ] && touch "MARKS/bad.$session"
if [ -e "MARKS/bad.$session" ]; then
  echo '{"type":"result","subtype":"error_during_execution","is_error":true,"result":"refused","session_id":"'"$session"'","num_turns":1}'
else
  echo '{"type":"result","subtype":"success","is_error":false,"result":"fine","session_id":"'"$session"'","num_turns":1}'
fi
"#;

/// Three fake-CLI agents: one, then two side by side.
fn fake_cli_flow(exe: &Path) -> String {
    format!(
        "name: fake-cli\nagents:\n  coder: {{provider: claude-code, executable: '{}'}}\nnodes:\n  - {{id: plan, agent: coder}}\n  - {{id: build, agent: coder}}\n  - {{id: check, agent: coder}}\nedges:\n  - {{from: plan, to: build}}\n  - {{from: plan, to: check}}\n",
        exe.display()
    )
}

/// Two `command` steps, each leaving a background child to its group.
const COMMAND_FLOW: &str = r#"name: commands
nodes:
  - id: fetch
    command: 'echo $$ >> "$CRASH_PIDS"; sleep 300 >/dev/null 2>&1 & echo $! >> "$CRASH_PIDS"; sleep 0.05; echo fetched'
  - id: build
    command: 'echo $$ >> "$CRASH_PIDS"; sleep 300 >/dev/null 2>&1 & echo $! >> "$CRASH_PIDS"; sleep 0.05; echo built'
edges:
  - {from: fetch, to: build}
"#;

/// A workflow under test and what an uninterrupted run of it does.
struct Flow {
    name: &'static str,
    file: PathBuf,
    /// Lines of an uninterrupted run's log.
    lines: usize,
    /// Outputs of an uninterrupted run ([`outputs`]).
    expected: Value,
}

/// How the run ended, its output and each node's output data.
fn outputs(log: &[RuntimeEvent], state: &RunSnapshot) -> Value {
    let output = match log.last().map(|e| &e.kind) {
        Some(EventKind::FlowCompleted { output, .. }) => output.clone(),
        _ => Value::Null,
    };
    let nodes: serde_json::Map<String, Value> = state
        .outputs
        .iter()
        .map(|(node, out)| (node.to_string(), out.data().unwrap()))
        .collect();
    json!({
        "status": state.status.as_str(),
        "failure": state.failure.as_ref().map(|f| json!({"node": f.node, "error": f.error})),
        "output": output,
        "nodes": nodes,
    })
}

/// Parses every line of a log, checking its offsets run 1..n.
pub(crate) fn parse(text: &str) -> Result<Vec<RuntimeEvent>, String> {
    let mut events = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let event: RuntimeEvent = serde_json::from_str(line)
            .map_err(|e| format!("line {} is not an event ({e}): {line}", i + 1))?;
        if event.offset.get() != i as u64 + 1 {
            return Err(format!(
                "line {} has offset {}: a gap",
                i + 1,
                event.offset.get()
            ));
        }
        events.push(event);
    }
    Ok(events)
}

/// Counts the lines of a growing file, reading only what was added.
struct LineCounter {
    path: PathBuf,
    file: Option<File>,
    lines: usize,
}

impl LineCounter {
    fn count(&mut self) -> usize {
        if self.file.is_none() {
            self.file = File::open(&self.path).ok();
        }
        if let Some(file) = &mut self.file {
            // The log only grows: what was read stays counted.
            let mut buf = Vec::new();
            let _ = file.read_to_end(&mut buf);
            self.lines += buf.iter().filter(|b| **b == b'\n').count();
        }
        self.lines
    }
}

/// Kills what a trial started if it ends early (a failed check).
pub(crate) struct Reaper {
    pub(crate) child: Option<Child>,
    pub(crate) pids: PathBuf,
}

impl Drop for Reaper {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
        for pid in pids(&self.pids) {
            if !gone(&pid) {
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", &pid])
                    .status();
            }
        }
    }
}

fn pids(file: &Path) -> Vec<String> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// Waits (polling, 200 µs apart: a mock run lasts a few milliseconds) until
/// `done` holds; false after [`LIMIT`].
fn poll(mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + LIMIT;
    while !done() {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    true
}

/// Runs `awr ARGS` with the trial's `$CRASH_PIDS`, to its end within [`LIMIT`].
pub(crate) fn awr_within(
    awr: &Awr,
    pid_file: &Path,
    args: &[&str],
) -> Result<crate::util::Output, String> {
    let mut child = awr
        .command(args)
        .env("CRASH_PIDS", pid_file)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start awr: {e}"))?;
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let mut status = None;
    if !poll(|| {
        status = child.try_wait().ok().flatten();
        status.is_some()
    }) {
        let _ = child.kill();
        let _ = child.wait();
        return Err(format!(
            "`awr {}` did not end within {LIMIT:?}",
            args.join(" ")
        ));
    }
    Ok(crate::util::Output {
        code: status.and_then(|s| s.code()).unwrap_or(-1),
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    })
}

/// The only run of a store.
pub(crate) fn only_run(awr: &Awr) -> Result<String, String> {
    match awr.run_ids().as_slice() {
        [run] => Ok(run.clone()),
        other => Err(format!("expected one run, found {other:?}")),
    }
}

/// The saved snapshot is the fold of the log up to its `lastOffset`
/// (design §4.2: the tail after it is folded on top of it); `resumed`: one
/// is saved (the first step boundary after a resume always saves one,
/// while the stop saves one only when the amortized rule asks).
pub(crate) fn check_snapshot(
    awr: &Awr,
    run: &str,
    log: &[RuntimeEvent],
    resumed: bool,
) -> Result<(), String> {
    let id: RunId = run.parse().map_err(|e| format!("run id {run}: {e:?}"))?;
    let path = awr.run_dir(run).join("snapshot.json");
    let Ok(bytes) = std::fs::read(&path) else {
        return if resumed {
            Err("no snapshot after the resume".into())
        } else {
            Ok(())
        };
    };
    let saved = RunSnapshot::from_json(&bytes, id).map_err(|e| format!("snapshot.json: {e}"))?;
    let upto = usize::try_from(saved.last_offset).unwrap_or(usize::MAX);
    let prefix = log.get(..upto).ok_or_else(|| {
        format!(
            "the snapshot names offset {upto}, past the log's {}",
            log.len()
        )
    })?;
    let folded = RunSnapshot::fold(prefix).ok_or("the log folds to nothing")?;
    if folded != saved {
        return Err(format!(
            "fold(log[..{upto}]) differs from snapshot.json:\n fold:  {folded:?}\n saved: {saved:?}"
        ));
    }
    Ok(())
}

/// How a trial ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// Killed mid-run, resumed, completed.
    Resumed,
    /// The run had completed before the kill.
    EndedFirst,
}

/// What one trial saw besides its ending.
struct Seen {
    ending: Ending,
    torn: bool,
}

/// One trial: run `flow`, kill awr once its log holds `kill_at` lines,
/// check, resume, check.
fn trial(flow: &Flow, kill_at: usize) -> Result<Seen, String> {
    let awr = Awr::new();
    let pid_file = awr.dir.path().join("pids");
    let child = awr
        .command(&["run", flow.file.to_str().expect("utf-8 path")])
        .env("CRASH_PIDS", &pid_file)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start awr: {e}"))?;
    let mut reaper = Reaper {
        child: Some(child),
        pids: pid_file.clone(),
    };
    let child = reaper.child.as_mut().expect("just set");

    // The kill point: the log holds `kill_at` lines, or awr ended first.
    let mut counter: Option<LineCounter> = None;
    let mut exited = false;
    let reached = poll(|| {
        if child.try_wait().ok().flatten().is_some() {
            exited = true;
            return true;
        }
        let counter = match &mut counter {
            Some(c) => c,
            None => match awr.run_ids().pop() {
                Some(run) => counter.insert(LineCounter {
                    path: awr.run_dir(&run).join("events.ndjson"),
                    file: None,
                    lines: 0,
                }),
                None => return false,
            },
        };
        counter.count() >= kill_at
    });
    if !reached {
        return Err(format!("the log never reached {kill_at} lines"));
    }
    if !exited {
        child.kill().map_err(|e| format!("kill -9: {e}"))?;
    }
    child.wait().map_err(|e| format!("wait: {e}"))?;
    reaper.child = None;

    // (1) What the dead writer left: whole lines, offsets 1..n.
    let run = only_run(&awr)?;
    let log_path = awr.run_dir(&run).join("events.ndjson");
    let left = std::fs::read(&log_path).map_err(|e| format!("the log: {e}"))?;
    let whole_len = left.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    let torn = whole_len < left.len();
    let before = String::from_utf8(left[..whole_len].to_vec())
        .map_err(|e| format!("the log is not UTF-8: {e}"))?;
    let before_log = parse(&before).map_err(|e| format!("the log at the kill: {e}"))?;
    check_snapshot(&awr, &run, &before_log, false)
        .map_err(|e| format!("the state at the kill: {e}"))?;

    let at_kill = before_log.len();
    let ending = after_kill(flow, &awr, &pid_file, &run, &before, &before_log, exited)
        .map_err(|e| format!("(the log held {at_kill} lines at the kill) {e}"))?;
    Ok(Seen { ending, torn })
}

/// Checks (2) to (6) of a trial, from the log `before` the dead writer left.
fn after_kill(
    flow: &Flow,
    awr: &Awr,
    pid_file: &Path,
    run: &str,
    before: &str,
    before_log: &[RuntimeEvent],
    exited: bool,
) -> Result<Ending, String> {
    let log_path = awr.run_dir(run).join("events.ndjson");
    // (2) Shown interrupted, unless it had completed.
    let shown = awr_within(awr, pid_file, &["show", run, "--json"])?;
    let status: Value = serde_json::from_str(&shown.stdout)
        .map_err(|e| format!("`awr show --json` ({e}): {}{}", shown.stdout, shown.stderr))?;
    let ending = match status["status"].as_str() {
        Some("interrupted") => {
            // (3) The resume completes it.
            let resumed = awr_within(awr, pid_file, &["resume", run])?;
            if resumed.code != 0 {
                return Err(format!(
                    "`awr resume` exited {}: {}",
                    resumed.code, resumed.stderr
                ));
            }
            Ending::Resumed
        }
        Some("completed") if exited || before_log.last().is_some_and(|e| e.kind.is_terminal()) => {
            Ending::EndedFirst
        }
        other => return Err(format!("shown {other:?} after the kill, not `interrupted`")),
    };

    // (1) Nothing acknowledged lost: the log goes on from what was there.
    let after = std::fs::read_to_string(&log_path).map_err(|e| format!("the log: {e}"))?;
    if !after.starts_with(before) {
        return Err("the log after the resume does not begin with the log at the kill".into());
    }
    let log = parse(&after).map_err(|e| format!("the log after the resume: {e}"))?;
    // (4) fold(log) = snapshot.
    check_snapshot(awr, run, &log, ending == Ending::Resumed)?;
    let state = RunSnapshot::fold(&log).ok_or("the log folds to nothing")?;
    if state.status.as_str() != "completed" {
        return Err(format!("the run ended {:?}", state.status));
    }
    // (5) The outputs of an uninterrupted run.
    let got = outputs(&log, &state);
    if got != flow.expected {
        return Err(format!(
            "outputs differ from an uninterrupted run's:\n got:      {got}\n expected: {}",
            flow.expected
        ));
    }
    // (6) No process of the dead run (nor of the resume) survives.
    let mut survivors = Vec::new();
    for pid in pids(pid_file) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !gone(&pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if !gone(&pid) {
            survivors.push(pid);
        }
    }
    if !survivors.is_empty() {
        return Err(format!("processes survived: {survivors:?}"));
    }
    Ok(ending)
}

/// Runs `flow` uninterrupted: its log's length and its outputs.
fn baseline(name: &'static str, file: PathBuf) -> Flow {
    let awr = Awr::new();
    let pid_file = awr.dir.path().join("pids");
    let _reaper = Reaper {
        child: None,
        pids: pid_file.clone(),
    };
    let out = awr_within(&awr, &pid_file, &["run", file.to_str().unwrap()]).unwrap();
    assert_eq!(out.code, 0, "{name}: {}", out.stderr);
    let run = only_run(&awr).unwrap();
    let text = std::fs::read_to_string(awr.run_dir(&run).join("events.ndjson")).unwrap();
    let log = parse(&text).unwrap();
    let state = RunSnapshot::fold(&log).unwrap();
    check_snapshot(&awr, &run, &log, false).unwrap();
    for pid in pids(&pid_file) {
        crate::cancel::wait_for(10, &format!("{name}: process {pid} to end"), || gone(&pid));
    }
    Flow {
        name,
        file,
        lines: log.len(),
        expected: outputs(&log, &state),
    }
}

/// The workflows under test, written under `scratch` where they are not
/// examples: the mock examples, a fake-CLI workflow and a `command` one.
/// `for-each` runs one item at a time here: the mock provider serves a
/// node's recorded calls in the order they are made, and items side by
/// side make them in any order, even without a crash.
fn workflows(scratch: &Path) -> Vec<(&'static str, PathBuf)> {
    use std::os::unix::fs::PermissionsExt;
    let exe = scratch.join("fake-claude");
    std::fs::write(&exe, FAKE_CLAUDE).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let fake = scratch.join("fake-cli.yaml");
    std::fs::write(&fake, fake_cli_flow(&exe)).unwrap();
    let commands = scratch.join("commands.yaml");
    std::fs::write(&commands, COMMAND_FLOW).unwrap();
    let examples = repo_root().join("examples");
    let for_each = scratch.join("for-each.yaml");
    let yaml = std::fs::read_to_string(examples.join("for-each.yaml")).unwrap();
    let serial = yaml.replace("max_concurrency: 2", "max_concurrency: 1");
    assert_ne!(
        serial, yaml,
        "for-each.yaml no longer says `max_concurrency: 2`"
    );
    std::fs::write(&for_each, serial).unwrap();
    let fixtures = scratch.join("fixtures/for-each");
    std::fs::create_dir_all(&fixtures).unwrap();
    for entry in std::fs::read_dir(examples.join("fixtures/for-each")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), fixtures.join(entry.file_name())).unwrap();
    }
    vec![
        ("judge-refine", examples.join("judge-refine.yaml")),
        ("fan-out", examples.join("fan-out.yaml")),
        ("for-each", for_each),
        ("fake-cli", fake),
        ("commands", commands),
    ]
}

fn seed() -> u64 {
    match std::env::var("AWR_CRASH_SEED") {
        Ok(s) => s.trim().parse().expect("AWR_CRASH_SEED is a number"),
        Err(_) => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            (now.as_nanos() as u64) ^ u64::from(std::process::id()).rotate_left(32)
        }
    }
}

/// Trial `n`'s random source: the same for the same seed and trial.
fn rng(seed: u64, n: usize) -> TestRng {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    bytes[8..16].copy_from_slice(&(n as u64).to_le_bytes());
    TestRng::from_seed(RngAlgorithm::ChaCha, &bytes)
}

#[test]
fn kill_9_at_random_points_then_resume_completes_with_nothing_lost_and_no_orphans() {
    let seed = seed();
    eprintln!("crash harness: seed {seed} (replay with AWR_CRASH_SEED={seed})");
    let only: Option<usize> = std::env::var("AWR_CRASH_TRIAL")
        .ok()
        .map(|t| t.trim().parse().expect("AWR_CRASH_TRIAL is a number"));
    let started = Instant::now();

    let scratch = tempfile::tempdir().unwrap();
    let flows = workflows(scratch.path());
    let flows: Vec<Flow> = std::thread::scope(|s| {
        let handles: Vec<_> = flows
            .into_iter()
            .map(|(name, file)| s.spawn(move || baseline(name, file)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let baselines = started.elapsed();

    let next = AtomicUsize::new(only.unwrap_or(0));
    let mid_run = AtomicUsize::new(0);
    let results = Mutex::new(Vec::new());
    let plan = |n: usize| {
        let flow = &flows[n % flows.len()];
        // At least the first line; never the last (the run would be over).
        let kill_at = rng(seed, n).random_range(1..flow.lines.saturating_sub(1).max(2));
        (flow, kill_at)
    };
    std::thread::scope(|s| {
        for _ in 0..WORKERS {
            s.spawn(|| {
                loop {
                    if mid_run.load(Ordering::SeqCst) >= MID_RUN && only.is_none() {
                        return;
                    }
                    let n = next.fetch_add(1, Ordering::SeqCst);
                    if n >= MAX_TRIALS || only.is_some_and(|o| o != n) {
                        return;
                    }
                    let (flow, kill_at) = plan(n);
                    let t = Instant::now();
                    let result = trial(flow, kill_at);
                    if matches!(
                        result,
                        Ok(Seen {
                            ending: Ending::Resumed,
                            ..
                        })
                    ) {
                        mid_run.fetch_add(1, Ordering::SeqCst);
                    }
                    results.lock().unwrap().push((
                        n,
                        flow.name,
                        kill_at,
                        flow.lines,
                        t.elapsed(),
                        result,
                    ));
                }
            });
        }
    });

    let mut results = results.into_inner().unwrap();
    results.sort_by_key(|r| r.0);
    let mut failures = Vec::new();
    let (mut resumed, mut ended, mut torn) = (0, 0, 0);
    let mut per_flow: std::collections::BTreeMap<&str, (usize, usize)> = Default::default();
    for (n, name, kill_at, lines, _took, result) in &results {
        match result {
            Ok(seen) => {
                let entry = per_flow.entry(name).or_default();
                match seen.ending {
                    Ending::Resumed => {
                        resumed += 1;
                        entry.0 += 1;
                    }
                    Ending::EndedFirst => {
                        ended += 1;
                        entry.1 += 1;
                    }
                }
                torn += usize::from(seen.torn);
            }
            Err(e) => failures.push(format!(
                "trial {n} (AWR_CRASH_SEED={seed} AWR_CRASH_TRIAL={n}), workflow {name}, \
                 killed once the log held {kill_at} of {lines} lines: {e}"
            )),
        }
    }
    eprintln!(
        "crash harness: seed {seed}: {} trials, {resumed} killed mid-run and resumed, {ended} \
         completed before the kill, {torn} with a torn last line, {} failed; \
         per workflow (resumed, ended first): {per_flow:?}; baselines {baselines:?}, all {:?}",
        results.len(),
        failures.len(),
        started.elapsed()
    );
    assert!(
        failures.is_empty(),
        "seed {seed}: {} of {} trials failed:\n{}",
        failures.len(),
        results.len(),
        failures.join("\n")
    );
    if only.is_none() {
        assert!(
            resumed >= MID_RUN,
            "seed {seed}: only {resumed} of {} trials were killed mid-run",
            results.len()
        );
    }
}

/// Resumes the run whose log is the first `k` lines of `full` (what a kill
/// after its `k`-th event leaves, with no snapshot yet): it must complete
/// with the outputs of the uninterrupted run. Returns the log it completed.
fn resume_prefix(flow: &Flow, run: &str, full: &str, k: usize) -> Result<String, String> {
    let prefix: String = full.split_inclusive('\n').take(k).collect();
    resume_log(flow, run, &prefix)
}

/// Resumes the run whose log is `prefix` ([`resume_prefix`]).
fn resume_log(flow: &Flow, run: &str, prefix: &str) -> Result<String, String> {
    let awr = Awr::new();
    let pid_file = awr.dir.path().join("pids");
    let _reaper = Reaper {
        child: None,
        pids: pid_file.clone(),
    };
    let dir = awr.run_dir(run);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    std::fs::write(dir.join("events.ndjson"), prefix).map_err(|e| e.to_string())?;
    let resumed = awr_within(&awr, &pid_file, &["resume", run])?;
    let code = if flow.expected["status"] == "failed" {
        1
    } else {
        0
    };
    if resumed.code != code {
        return Err(format!(
            "`awr resume` exited {}: {}",
            resumed.code, resumed.stderr
        ));
    }
    let after = std::fs::read_to_string(dir.join("events.ndjson")).map_err(|e| e.to_string())?;
    if !after.starts_with(prefix) {
        return Err("the log does not begin with the prefix".into());
    }
    let log = parse(&after)?;
    check_snapshot(&awr, run, &log, true)?;
    let state = RunSnapshot::fold(&log).ok_or("the log folds to nothing")?;
    let got = outputs(&log, &state);
    if got != flow.expected {
        return Err(format!(
            "outputs differ from an uninterrupted run's:\n got:      {got}\n expected: {}",
            flow.expected
        ));
    }
    Ok(after)
}

/// Every point a kill can leave a log at, without the luck of timing: the
/// log of an uninterrupted run cut after each of its events is resumed,
/// and completes as the uninterrupted run did. (A writer killed between a
/// node's end and the routing of its edges once left those edges
/// undecided forever, and the nodes after it skipped.)
#[test]
fn a_run_resumed_from_any_prefix_of_its_log_completes_as_if_uninterrupted() {
    let scratch = tempfile::tempdir().unwrap();
    // The fake CLI takes a tenth of a second a call: the random trials cover it.
    let mut flows: Vec<(&str, PathBuf)> = workflows(scratch.path())
        .into_iter()
        .filter(|(name, _)| ["judge-refine", "fan-out", "commands"].contains(name))
        .collect();
    // A node failure that stops the run stops it after a resume too.
    let fails = scratch.path().join("fails.yaml");
    std::fs::write(
        &fails,
        "name: fails\nnodes:\n  - {id: build, command: 'exit 3'}\n  - {id: ship, command: 'echo shipped'}\nedges:\n  - {from: build, to: ship}\n",
    )
    .unwrap();
    flows.push(("fails", fails));
    // An item's failure stops the run and names its item after a resume too.
    use std::os::unix::fs::PermissionsExt;
    let fails_on_item = scratch.path().join("fails-on-item.yaml");
    let picky = scratch.path().join("picky-claude");
    let marks = scratch.path().to_str().unwrap();
    std::fs::write(&picky, PICKY_CLAUDE.replace("MARKS", marks)).unwrap();
    std::fs::set_permissions(&picky, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(
        &fails_on_item,
        format!(
            "name: fails-on-item\nagents:\n  coder: {{provider: claude-code, executable: '{}'}}\nnodes:\n  - {{id: each, agent: coder, retry: {{max_attempts: 1}}, for_each: {{items: '[\"good\", \"refuse-me\"]', max_concurrency: 1}}}}\n",
            picky.display()
        ),
    )
    .unwrap();
    flows.push(("fails-on-item", fails_on_item));
    // A failure the run goes on past is routed like a success.
    flows.push((
        "build-and-test",
        repo_root().join("examples/build-and-test.yaml"),
    ));
    let failures = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for (name, file) in flows {
            let failures = &failures;
            s.spawn(move || {
                let awr = Awr::new();
                let pid_file = awr.dir.path().join("pids");
                let out = awr_within(&awr, &pid_file, &["run", file.to_str().unwrap()]).unwrap();
                let code = if name.starts_with("fails") { 1 } else { 0 };
                assert_eq!(out.code, code, "{name}: {}", out.stderr);
                let run = only_run(&awr).unwrap();
                let full =
                    std::fs::read_to_string(awr.run_dir(&run).join("events.ndjson")).unwrap();
                let log = parse(&full).unwrap();
                let state = RunSnapshot::fold(&log).unwrap();
                let flow = Flow {
                    name,
                    file,
                    lines: log.len(),
                    expected: outputs(&log, &state),
                };
                for k in 1..flow.lines {
                    if let Err(e) = resume_prefix(&flow, &run, &full, k) {
                        failures.lock().unwrap().push(format!(
                            "{}: the log cut after line {k} of {} ({}): {e}",
                            flow.name,
                            flow.lines,
                            log[k - 1].kind.type_name()
                        ));
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Cuts of a resume's own events ([`a_resume_cut_off_in_turn_is_resumed_and_completes_as_if_uninterrupted`]).
const SECOND_CUTS: usize = 4;

/// A resume killed in its turn: the log an uninterrupted run leaves cut
/// after each event, resumed, then the resumed log cut after each of the
/// first [`SECOND_CUTS`] events the resume wrote (where it decides how the
/// node runs in flight go on: a later cut is a first cut of another log),
/// resumed again, completes as the uninterrupted run did. (A
/// provider call cut off by a crash, whose redo was cut off in turn before
/// it began, was once made under the node's next call index: the mock
/// provider has no answer for it, and the run failed.)
#[test]
fn a_resume_cut_off_in_turn_is_resumed_and_completes_as_if_uninterrupted() {
    let file = repo_root().join("examples/summarize.yaml");
    let awr = Awr::new();
    let pid_file = awr.dir.path().join("pids");
    let out = awr_within(&awr, &pid_file, &["run", file.to_str().unwrap()]).unwrap();
    assert_eq!(out.code, 0, "{}", out.stderr);
    let run = only_run(&awr).unwrap();
    let full = std::fs::read_to_string(awr.run_dir(&run).join("events.ndjson")).unwrap();
    let log = parse(&full).unwrap();
    let state = RunSnapshot::fold(&log).unwrap();
    let flow = Flow {
        name: "summarize",
        file,
        lines: log.len(),
        expected: outputs(&log, &state),
    };
    let failures = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for k in 1..flow.lines {
            let (flow, run, full, failures) = (&flow, &run, &full, &failures);
            s.spawn(move || {
                let resumed = match resume_prefix(flow, run, full, k) {
                    Ok(resumed) => resumed,
                    Err(e) => return failures.lock().unwrap().push(format!("cut at {k}: {e}")),
                };
                let lines = resumed.split_inclusive('\n').count();
                for j in k + 1..lines.min(k + 1 + SECOND_CUTS) {
                    if let Err(e) = resume_prefix(flow, run, &resumed, j) {
                        failures
                            .lock()
                            .unwrap()
                            .push(format!("cut at {k}, then at {j} of {lines}: {e}"));
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A node's process that lives on after its writer is killed: the first
/// time it starts a background child and waits; when it runs again (the
/// resume) it finishes. `$CRASH_PIDS` gets the pids of the first time.
const HANGS_ONCE: &str = r#"if [ -e "$CRASH_PIDS.again" ]; then
  ANSWER
else
  touch "$CRASH_PIDS.again"
  sleep 300 >/dev/null 2>&1 &
  echo $$ $! >> "$CRASH_PIDS"
  wait
fi"#;

/// Kills `awr run FLOW` once its node's processes are up, cuts the log
/// before its first `process:started` (what a kill between starting a
/// process and recording it leaves), resumes: the processes must be gone.
fn resume_kills_unrecorded(flow: &str) {
    let awr = Awr::new();
    let pid_file = awr.dir.path().join("pids");
    let mut reaper = Reaper {
        child: None,
        pids: pid_file.clone(),
    };
    let file = awr.write("flow.yaml", flow);
    let child = awr
        .command(&["run", file.to_str().unwrap()])
        .env("CRASH_PIDS", &pid_file)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let child = reaper.child.insert(child);
    assert!(
        poll(|| pids(&pid_file).len() == 2),
        "the node's processes never started"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    reaper.child = None;
    let started = pids(&pid_file);
    assert!(
        started.iter().all(|p| !gone(p)),
        "alive after awr died: {started:?}"
    );

    let run = only_run(&awr).unwrap();
    let dir = awr.run_dir(&run);
    let log = std::fs::read_to_string(dir.join("events.ndjson")).unwrap();
    let kept: String = log
        .split_inclusive('\n')
        .take_while(|l| !l.contains(r#""type":"process:started""#))
        .collect();
    std::fs::write(dir.join("events.ndjson"), &kept).unwrap();
    let _ = std::fs::remove_file(dir.join("events.idx"));
    let _ = std::fs::remove_file(dir.join("snapshot.json"));

    let resumed = awr_within(&awr, &pid_file, &["resume", &run]).unwrap();
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    for pid in &started {
        crate::cancel::wait_for(10, &format!("process {pid} of the dead run to end"), || {
            gone(pid)
        });
    }
}

#[test]
fn a_resume_kills_the_command_processes_of_the_dead_writer() {
    resume_kills_unrecorded(&format!(
        "name: hang\nnodes:\n  - id: build\n    command: |\n{}\n",
        HANGS_ONCE
            .replace("ANSWER", "echo built")
            .lines()
            .map(|l| format!("      {l}"))
            .collect::<Vec<_>>()
            .join("\n")
    ));
}

#[test]
fn a_resume_kills_the_agent_processes_of_the_dead_writer_it_never_recorded() {
    use std::os::unix::fs::PermissionsExt;
    let scratch = tempfile::tempdir().unwrap();
    let exe = scratch.path().join("fake-claude");
    let result = r#"echo '{"type":"result","subtype":"success","is_error":false,"result":"done","num_turns":1,"usage":{"input_tokens":1,"output_tokens":1}}'"#;
    std::fs::write(
        &exe,
        format!("#!/bin/sh\n{}\n", HANGS_ONCE.replace("ANSWER", result)),
    )
    .unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    resume_kills_unrecorded(&format!(
        "name: hang\nagents:\n  coder: {{provider: claude-code, executable: '{}'}}\nsteps: [{{agent: coder}}]\n",
        exe.display()
    ));
}

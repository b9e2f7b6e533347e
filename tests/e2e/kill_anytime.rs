//! The kill harness: `awr run` of a fake-CLI workflow is killed with
//! SIGKILL at a random moment, then at once, with the real binary, `awr
//! runs` and `awr show` must say what the run is, and `awr resume` must take
//! it to its end:
//!
//! - a run whose first event was never written is absent (neither listed
//!   nor shown: `show` says it is not found), never a run "with no events"
//!   that nothing can show or resume;
//! - a run that began is `interrupted` the moment its writer is dead, never
//!   `running` (a CLI agent it was starting must not keep its lock), and
//!   `awr resume` completes it;
//! - a run that ended before the kill is `completed`.
//!
//! Kill moments come in three kinds, taken in turn: a delay after the start
//! drawn over the whole run (from before its first event to past its end);
//! one drawn over twice the time the run takes to write its first event,
//! when awr creates it; and a delay of at most [`SPAWN_SPAN`] after one of
//! its `agent:start` events, when awr is starting the CLI's process (a
//! condition on the log, then a delay). The killed `awr run` runs at the idle scheduling priority
//! (`chrt --idle`, when there is one) beside the other trials: a run on a
//! busy machine, whose children wait for a CPU, so a kill finds a child
//! between its fork and its exec as often as a loaded machine does, and the
//! checks (at normal priority) find it still there. A moment is a random
//! delay, not a wait for a condition: every check waits for the processes
//! it runs, never on time.
//!
//! Bounded and fast by default ([`DEFAULT_KILLS`] kills, about ten seconds);
//! `AWR_KILLS=500` is the long mode, `AWR_KILL_SEED=N` replays a seed, and
//! `AWR_KILL_BIN=PATH` kills another build of awr (an older one, to see the
//! defects this harness was written for).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use proptest::prelude::RngExt;
use proptest::test_runner::{RngAlgorithm, TestRng};
use serde_json::Value;

use crate::crash::Reaper;
use crate::util::{Awr, Output, repo_root};

/// Kills of a default `cargo test` run.
const DEFAULT_KILLS: usize = 40;
/// Trials at once: the load the idle-priority runs wait behind.
const WORKERS: usize = 3;
/// How long any one command of a trial may take before it is a failure.
const LIMIT: Duration = Duration::from_secs(60);
/// Kills after an `agent:start` land at most this long after it: the
/// agent's process is started within it.
const SPAWN_SPAN: Duration = Duration::from_millis(4);
/// The agents of the workflow, each one start of the fake CLI.
const AGENTS: usize = 3;

/// A fake Claude Code (its stream-json lines): notes its pid in
/// `$CRASH_PIDS`, prints its session (the one awr chose, or resumes), then
/// an answer and its result a little apart, so kills land while it runs as
/// well as while awr starts it.
const FAKE_CLAUDE: &str = r#"#!/bin/sh
echo $$ >> "$CRASH_PIDS"
session=none
while [ $# -gt 0 ]; do
  case "$1" in --session-id|--resume) session="$2"; shift ;; esac
  shift
done
echo '{"type":"system","subtype":"init","session_id":"'"$session"'","model":"m"}'
sleep 0.01
echo '{"type":"assistant","message":{"id":"m1","content":[{"type":"text","text":"working"}]}}'
echo '{"type":"result","subtype":"success","is_error":false,"result":"done","session_id":"'"$session"'","num_turns":1,"duration_ms":5,"usage":{"input_tokens":10,"output_tokens":4}}'
"#;

/// [`AGENTS`] agent steps in a chain, each a start of the fake CLI.
fn flow(exe: &Path) -> String {
    format!(
        "name: kill-anytime\nagents:\n  coder: {{provider: claude-code, executable: '{}'}}\nnodes:\n  - {{id: plan, agent: coder}}\n  - {{id: build, agent: coder}}\n  - {{id: check, agent: coder}}\nedges:\n  - {{from: plan, to: build}}\n  - {{from: build, to: check}}\n",
        exe.display()
    )
}

/// The awr under test: `AWR_KILL_BIN`, else this tree's.
fn bin() -> PathBuf {
    std::env::var_os("AWR_KILL_BIN")
        .map_or_else(|| crate::util::awr_bin().to_path_buf(), PathBuf::from)
}

/// `awr --storage STORAGE ARGS` of the scratch `awr`, its agents noting
/// their pids in `pids`.
fn command(awr: &Awr, pids: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(bin());
    command
        .arg("--storage")
        .arg(awr.storage())
        .args(args)
        .current_dir(repo_root())
        .env_remove("AWR_STORAGE")
        .env("CRASH_PIDS", pids)
        .stdin(Stdio::null());
    command
}

/// Whether `chrt` (util-linux) can run a command at the idle priority.
fn has_chrt() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        Command::new("chrt")
            .args(["--idle", "0", "true"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// `awr run FILE` at the idle priority (see the module's doc); `chrt`
/// execs awr, so the child is awr itself.
fn idle_run(awr: &Awr, pids: &Path, file: &Path) -> Command {
    let run = command(awr, pids, &["run", file.to_str().expect("a UTF-8 path")]);
    if !has_chrt() {
        return run;
    }
    let mut idle = Command::new("chrt");
    idle.args(["--idle", "0"])
        .arg(run.get_program())
        .args(run.get_args());
    for (name, value) in run.get_envs() {
        match value {
            Some(value) => idle.env(name, value),
            None => idle.env_remove(name),
        };
    }
    idle.current_dir(repo_root()).stdin(Stdio::null());
    idle
}

/// Runs `command` to its end (within [`LIMIT`]), its output read.
fn within(mut command: Command) -> Result<Output, String> {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {command:?}: {e}"))?;
    let out = read_on_a_thread(child.stdout.take());
    let err = read_on_a_thread(child.stderr.take());
    let deadline = Instant::now() + LIMIT;
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("{command:?} did not end within {LIMIT:?}"));
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    Ok(Output {
        code: status.code().unwrap_or(-1),
        stdout: out.recv_timeout(LIMIT).unwrap_or_default(),
        stderr: err.recv_timeout(LIMIT).unwrap_or_default(),
    })
}

/// Reads `pipe` to its end on a thread.
fn read_on_a_thread(pipe: Option<impl Read + Send + 'static>) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_string(&mut text);
        }
        let _ = tx.send(text);
    });
    rx
}

/// How long an uninterrupted run takes, at the priority of the trials.
#[derive(Debug, Clone, Copy)]
struct Timing {
    /// From `awr run` to its exit.
    run: Duration,
    /// From `awr run` to its first event in the log.
    first_event: Duration,
}

/// When to kill.
#[derive(Debug, Clone, Copy)]
enum Moment {
    /// This long after the start.
    After(Duration),
    /// This long after the run's `n`-th `agent:start` (1-based).
    AfterAgentStart(usize, Duration),
}

/// What a trial found once its run was killed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Found {
    /// Killed before its first event: no run.
    Absent,
    /// Killed mid-run: shown `interrupted`, then resumed to its end.
    Resumed,
    /// The run had ended before the kill.
    EndedFirst,
}

/// The lines of the only run's log so far (none before it appears).
fn log_lines(awr: &Awr) -> Vec<String> {
    let Some(run) = awr.run_ids().pop() else {
        return Vec::new();
    };
    std::fs::read_to_string(awr.run_dir(&run).join("events.ndjson"))
        .map(|text| text.lines().map(str::to_owned).collect())
        .unwrap_or_default()
}

/// Waits for `moment` (or for awr to end first); then kills awr (unless
/// it ended) and reaps it. Whether it had ended.
fn kill_at(awr: &Awr, child: &mut Child, moment: Moment) -> Result<bool, String> {
    let ended = |child: &mut Child| child.try_wait().map(|s| s.is_some());
    let delay = match moment {
        Moment::After(delay) => delay,
        Moment::AfterAgentStart(n, delay) => {
            let deadline = Instant::now() + LIMIT;
            loop {
                if ended(child).map_err(|e| e.to_string())? {
                    break;
                }
                let lines = log_lines(awr);
                let starts = lines
                    .iter()
                    .filter(|l| l.contains(r#""type":"agent:start""#));
                if starts.count() >= n
                    && lines
                        .last()
                        .is_some_and(|l| l.contains(r#""type":"agent:start""#))
                {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(format!("agent start {n} never came"));
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            delay
        }
    };
    std::thread::sleep(delay);
    let was_over = ended(child).map_err(|e| e.to_string())?;
    if !was_over {
        child.kill().map_err(|e| format!("kill -9: {e}"))?;
    }
    child.wait().map_err(|e| format!("wait: {e}"))?;
    Ok(was_over)
}

/// The run ids `awr runs --json` lists (none when the storage was never
/// made).
fn listed(awr: &Awr, pids: &Path) -> Result<Vec<String>, String> {
    if !awr.storage().exists() {
        return Ok(Vec::new());
    }
    let out = within(command(awr, pids, &["runs", "--json"]))?;
    if out.code != 0 {
        return Err(format!("`awr runs` exited {}: {}", out.code, out.stderr));
    }
    out.stdout
        .lines()
        .map(|line| {
            let row: Value = serde_json::from_str(line)
                .map_err(|e| format!("`awr runs --json`: {e}: {line}"))?;
            row["id"]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("`awr runs --json` row without an id: {line}"))
        })
        .collect()
}

/// What the killed run's log held (for failure messages): its lines and
/// the type of the last.
fn log_summary(awr: &Awr, run: &str) -> String {
    let Ok(text) = std::fs::read_to_string(awr.run_dir(run).join("events.ndjson")) else {
        return "no log".into();
    };
    let last = text
        .lines()
        .last()
        .and_then(|l| serde_json::from_str::<Value>(l).ok())
        .and_then(|e| e["type"].as_str().map(str::to_owned))
        .unwrap_or_else(|| "none".into());
    format!("{} events, the last `{last}`", text.lines().count())
}

/// `awr show RUN --json`: its `status`, or how it failed.
fn shown(awr: &Awr, pids: &Path, run: &str) -> Result<Result<String, Output>, String> {
    let show = within(command(awr, pids, &["show", run, "--json"]))?;
    if show.code != 0 {
        return Ok(Err(show));
    }
    let value: Value = serde_json::from_str(&show.stdout)
        .map_err(|e| format!("`awr show --json`: {e}: {}", show.stdout))?;
    Ok(Ok(value["status"].as_str().unwrap_or("?").to_owned()))
}

/// One trial: start the run, kill it at `moment`, check it at once,
/// resume it.
fn trial(file: &Path, moment: Moment) -> Result<Found, String> {
    let awr = Awr::new();
    let pids = awr.dir.path().join("pids");
    let child = idle_run(&awr, &pids, file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start awr: {e}"))?;
    let mut reaper = Reaper {
        child: Some(child),
        pids: pids.clone(),
    };
    let child = reaper.child.as_mut().expect("just set");
    let stderr = read_on_a_thread(child.stderr.take());
    let ended = kill_at(&awr, child, moment)?;
    reaper.child = None;

    // At once: listed and shown as what it is.
    let runs = listed(&awr, &pids)?;
    let said = stderr
        .recv_timeout(LIMIT)
        .map_err(|_| "awr's stderr stayed open after its death".to_owned())?;
    let printed = said
        .lines()
        .find_map(|l| l.strip_prefix("run "))
        .map(|id| id.trim().to_owned());
    let run = match (runs.as_slice(), &printed) {
        ([], None) => return Ok(Found::Absent),
        ([], Some(id)) => {
            return match shown(&awr, &pids, id)? {
                Err(show) if show.code == 2 && show.stderr.contains("not found") => {
                    Ok(Found::Absent)
                }
                Err(show) => Err(format!(
                    "run {id} is not listed, and `awr show` exited {}: {}",
                    show.code,
                    show.stderr.trim_end()
                )),
                Ok(status) => Err(format!("run {id} is not listed, yet shown `{status}`")),
            };
        }
        ([one], _) => one.clone(),
        (many, _) => return Err(format!("several runs listed: {many:?}")),
    };
    if printed.as_ref().is_some_and(|p| *p != run) {
        return Err(format!("listed {run}, printed {printed:?}"));
    }
    let found = match shown(&awr, &pids, &run)? {
        Err(show) => {
            return Err(format!(
                "`awr show` of the killed run ({}) exited {}: {}",
                log_summary(&awr, &run),
                show.code,
                show.stderr.trim_end()
            ));
        }
        Ok(status) => match status.as_str() {
            "interrupted" if !ended => Found::Resumed,
            // Ended, or killed as it exited after its last event.
            "completed" => return Ok(Found::EndedFirst),
            other => {
                return Err(format!(
                    "shown `{other}` after the kill ({}; awr had {}ended)",
                    log_summary(&awr, &run),
                    if ended { "" } else { "not " }
                ));
            }
        },
    };

    // Every run that began resumes to its end.
    let resumed = within(command(&awr, &pids, &["resume", &run]))?;
    if resumed.code != 0 {
        return Err(format!(
            "`awr resume` ({}) exited {}: {}",
            log_summary(&awr, &run),
            resumed.code,
            resumed.stderr.trim_end()
        ));
    }
    match shown(&awr, &pids, &run)? {
        Ok(status) if status == "completed" => Ok(found),
        Ok(status) => Err(format!("shown `{status}` after the resume")),
        Err(show) => Err(format!(
            "`awr show` after the resume exited {}: {}",
            show.code,
            show.stderr.trim_end()
        )),
    }
}

/// How long an uninterrupted run takes at the priority of the trials: the
/// longest of three, after one untimed (the binary built first, so no
/// build is timed, and read once, so a binary just rebuilt is not timed
/// from a cold page cache).
fn baseline(file: &Path) -> Timing {
    bin();
    let timings: Vec<Timing> = (0..4)
        .map(|_| {
            let awr = Awr::new();
            let pids = awr.dir.path().join("pids");
            let t = Instant::now();
            let child = idle_run(&awr, &pids, file)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let mut reaper = Reaper {
                child: Some(child),
                pids: pids.clone(),
            };
            let child = reaper.child.as_mut().unwrap();
            let mut first_event = None;
            let status = loop {
                if first_event.is_none() && !log_lines(&awr).is_empty() {
                    first_event = Some(t.elapsed());
                }
                if let Some(status) = child.try_wait().unwrap() {
                    break status;
                }
                assert!(t.elapsed() < LIMIT, "an uninterrupted run took {LIMIT:?}");
                std::thread::sleep(Duration::from_micros(200));
            };
            reaper.child = None;
            assert!(status.success(), "an uninterrupted run: {status:?}");
            Timing {
                run: t.elapsed(),
                first_event: first_event.unwrap_or_else(|| t.elapsed()),
            }
        })
        .skip(1)
        .collect();
    Timing {
        run: timings.iter().map(|t| t.run).max().unwrap_or_default(),
        first_event: timings
            .iter()
            .map(|t| t.first_event)
            .max()
            .unwrap_or_default(),
    }
}

fn seed() -> u64 {
    match std::env::var("AWR_KILL_SEED") {
        Ok(s) => s.trim().parse().expect("AWR_KILL_SEED is a number"),
        Err(_) => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            (now.as_nanos() as u64) ^ u64::from(std::process::id()).rotate_left(32)
        }
    }
}

/// How many kills: `AWR_KILLS`, else [`DEFAULT_KILLS`].
fn kills() -> usize {
    std::env::var("AWR_KILLS").ok().map_or(DEFAULT_KILLS, |n| {
        n.trim().parse().expect("AWR_KILLS is a number")
    })
}

/// Kill `n`'s moment, from the seed: in turn, anywhere over the run's
/// length and a fifth more, around its creation, just after an agent's
/// start.
fn moment(seed: u64, n: usize, timing: Timing) -> Moment {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    bytes[8..16].copy_from_slice(&(n as u64).to_le_bytes());
    let mut rng = TestRng::from_seed(RngAlgorithm::ChaCha, &bytes);
    let micros = |span: Duration, rng: &mut TestRng| {
        let span = u64::try_from(span.as_micros()).unwrap_or(u64::MAX).max(1);
        Duration::from_micros(rng.random_range(0..span))
    };
    match n % 3 {
        0 => Moment::After(micros(timing.run * 6 / 5, &mut rng)),
        1 => Moment::After(micros(timing.first_event * 2, &mut rng)),
        _ => {
            let agent = rng.random_range(1..=AGENTS);
            Moment::AfterAgentStart(agent, micros(SPAWN_SPAN, &mut rng))
        }
    }
}

#[test]
fn a_run_killed_at_any_moment_is_shown_whole_or_not_at_all_and_resumes_to_its_end() {
    let seed = seed();
    let kills = kills();
    eprintln!("kill harness: seed {seed}, {kills} kills (replay with AWR_KILL_SEED={seed})");
    let started = Instant::now();
    let scratch = tempfile::tempdir().unwrap();
    let exe = scratch.path().join("fake-claude");
    std::fs::write(&exe, FAKE_CLAUDE).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let file: PathBuf = scratch.path().join("flow.yaml");
    std::fs::write(&file, flow(&exe)).unwrap();
    let timing = baseline(&file);

    let next = AtomicUsize::new(0);
    let results = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..WORKERS {
            s.spawn(|| {
                loop {
                    let n = next.fetch_add(1, Ordering::SeqCst);
                    if n >= kills {
                        return;
                    }
                    let moment = moment(seed, n, timing);
                    let result = trial(&file, moment);
                    results.lock().unwrap().push((n, moment, result));
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap();
    results.sort_by_key(|r| r.0);
    let count = |f: Found| {
        results
            .iter()
            .filter(|r| r.2.as_ref().is_ok_and(|x| *x == f))
            .count()
    };
    let failures: Vec<String> = results
        .iter()
        .filter_map(|(n, moment, r)| {
            r.as_ref()
                .err()
                .map(|e| format!("kill {n} ({moment:?}; AWR_KILL_SEED={seed}): {e}"))
        })
        .collect();
    eprintln!(
        "kill harness: seed {seed}: {kills} kills of a {:?} run (first event at {:?}){}: {} \
         absent, {} interrupted and resumed, {} ended first, {} failed; {:?} in all",
        timing.run,
        timing.first_event,
        if has_chrt() { " at idle priority" } else { "" },
        count(Found::Absent),
        count(Found::Resumed),
        count(Found::EndedFirst),
        failures.len(),
        started.elapsed()
    );
    assert!(
        failures.is_empty(),
        "seed {seed}: {} of {kills} kills failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

//! SIGINT and SIGTERM during a CLI agent: the run ends with `flow:cancelled`
//! as its last event, no process of the agent's group survives, a follower
//! of the log ends, and awr exits 130 / 143.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use domain::{EventKind, RuntimeEvent};

use crate::util::Awr;

/// Polls `done` every 20 ms until it holds, failing after `secs` seconds.
pub(crate) fn wait_for(secs: u64, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !done() {
        assert!(Instant::now() < deadline, "waited {secs} s for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What `found` gives once it gives something, waited for (as [`wait_for`])
/// at most `secs`.
pub(crate) fn wait_for_value<T>(secs: u64, what: &str, mut found: impl FnMut() -> Option<T>) -> T {
    let mut value = None;
    wait_for(secs, what, || {
        value = found();
        value.is_some()
    });
    value.expect("found")
}

/// True once `pid` no longer runs (absent, or a zombie nobody reaped yet).
pub(crate) fn gone(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim()
            .starts_with('Z'),
    }
}

pub(crate) fn wait_exit(child: &mut Child, secs: u64, what: &str) -> i32 {
    let mut code = None;
    wait_for(secs, what, || {
        code = child.try_wait().expect("wait");
        code.is_some()
    });
    code.and_then(|s| s.code()).unwrap_or(-1)
}

/// Starts a run whose fake Claude Code prints its session, starts a
/// grandchild, and waits; returns awr, the run's directory and the pids.
pub(crate) fn start(awr: &Awr) -> (Child, std::path::PathBuf, String, String) {
    let dir = awr.dir.path();
    let (agent_pid, grandchild_pid) = (dir.join("agent.pid"), dir.join("grandchild.pid"));
    let script = format!(
        "#!/bin/sh\necho $$ > '{a}'\necho '{{\"type\":\"system\",\"subtype\":\"init\",\"session_id\":\"s-cancel\",\"model\":\"m\"}}'\nsleep 60 &\necho $! > '{g}'\nwait\n",
        a = agent_pid.display(),
        g = grandchild_pid.display()
    );
    let flow = awr.claude_flow("cancel", &script, "");
    let child = awr
        .command(&["run", flow.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn awr");
    wait_for(20, "the agent's grandchild to start", || {
        std::fs::read_to_string(&grandchild_pid).is_ok_and(|p| p.trim().parse::<u32>().is_ok())
    });
    let run = awr.run_ids().pop().expect("a run");
    let run_dir = awr.run_dir(&run);
    wait_for(20, "the agent's session in the log", || {
        awr.events_so_far(&run)
            .iter()
            .any(|e| e["type"] == "agent:start")
    });
    let read = |p: &Path| std::fs::read_to_string(p).unwrap().trim().to_owned();
    (child, run_dir, read(&agent_pid), read(&grandchild_pid))
}

fn cancel_with(signal: &str, expected_code: i32) {
    let awr = Awr::new();
    let (mut child, run_dir, agent, grandchild) = start(&awr);
    let run = run_dir.file_name().unwrap().to_str().unwrap().to_owned();
    let mut follower = awr
        .command(&["events", &run, "--follow"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the follower");
    let status = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let code = wait_exit(&mut child, 20, "awr to end after the signal");
    assert_eq!(code, expected_code, "exit code after SIG{signal}");
    assert!(gone(&agent), "the agent process {agent} survived");
    assert!(
        gone(&grandchild),
        "the agent's grandchild {grandchild} survived"
    );
    let log = awr.runtime_events(&run);
    let last = log.last().expect("events");
    assert!(
        matches!(&last.kind, EventKind::FlowCancelled { reason: Some(r) } if r.contains(&format!("SIG{signal}"))),
        "last event: {last:?}"
    );
    assert!(log.iter().any(|e| matches!(&e.kind,
        EventKind::NodeFailed { error, .. } if error.starts_with("cancelled"))));
    let follow_code = wait_exit(&mut follower, 20, "the follower to end");
    assert_eq!(follow_code, 0, "the follower ends quietly");
    let show = awr.run(&["show", &run]);
    assert!(show.stdout.contains("cancelled"), "{}", show.stdout);
}

#[test]
fn sigint_during_a_cli_agent_cancels_the_run_and_kills_its_group() {
    cancel_with("INT", 130);
}

#[test]
fn sigterm_during_a_cli_agent_cancels_the_run_and_kills_its_group() {
    cancel_with("TERM", 143);
}

#[test]
fn a_second_sigint_exits_at_once_and_leaves_a_clean_log() {
    let awr = Awr::new();
    let (mut child, run_dir, _agent, _grandchild) = start(&awr);
    for _ in 0..2 {
        let status = std::process::Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }
    let code = wait_exit(&mut child, 20, "awr to end after two signals");
    assert_eq!(code, 130);
    // Every line that reached the log is whole: the log is a clean prefix.
    let text = std::fs::read_to_string(run_dir.join("events.ndjson")).unwrap();
    assert!(text.ends_with('\n'));
    for (i, line) in text.lines().enumerate() {
        let event: RuntimeEvent = serde_json::from_str(line).unwrap();
        assert_eq!(event.offset.get(), i as u64 + 1);
    }
}

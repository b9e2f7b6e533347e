//! Runs on another machine. Commands: a worker writes the run, and
//! `pause`, `cancel` and `resume` come from a process that shares only the
//! database with it (its own files directory, so no socket of the
//! writer's); each is recorded once, by the writer, and answered. A CLI
//! agent taken over on another machine starts a new attempt.

use serde_json::Value;

use crate::cancel::{wait_exit, wait_for};
use crate::util::Awr;
use crate::workers::{
    completed, epochs_never_go_back, events, gated_flow, of_type, submit, terminate, worker,
};

/// `awr ARGS` as a process on another machine: the same database, a files
/// directory of its own.
fn elsewhere(awr: &Awr, args: &[&str]) -> crate::util::Output {
    let state = awr.dir.path().join("elsewhere");
    let out = awr
        .command(args)
        .env("XDG_STATE_HOME", &state)
        .output()
        .expect("run awr");
    crate::util::Output::from(out)
}

fn received(log: &[Value]) -> Vec<Value> {
    of_type(log, "command:received")
}

#[test]
fn pause_resume_and_cancel_reach_a_writer_through_the_database() {
    let Some(awr) = Awr::postgres() else {
        return;
    };
    let (flow, gate) = gated_flow(&awr);
    let paused = submit(&awr, &[&flow]);
    let cancelled = submit(&awr, &[&flow]);
    let mut writer = worker(&awr, "writer");
    wait_for(30, "the worker to start both runs", || {
        [&paused, &cancelled]
            .iter()
            .all(|run| !of_type(&events(&awr, run), "node:started").is_empty())
    });

    let pause = elsewhere(&awr, &["pause", &paused]);
    assert_eq!(pause.code, 0, "{}", pause.stderr);
    wait_for(30, "the run to pause", || {
        events(&awr, &paused)
            .last()
            .is_some_and(|e| e["type"] == "flow:paused")
    });
    let cancel = elsewhere(&awr, &["cancel", &cancelled, "--reason", "from afar"]);
    assert_eq!(cancel.code, 0, "{}", cancel.stderr);
    wait_for(30, "the run to be cancelled", || {
        events(&awr, &cancelled)
            .last()
            .is_some_and(|e| e["type"] == "flow:cancelled")
    });
    for (run, kind) in [(&paused, "pause"), (&cancelled, "cancel")] {
        let log = events(&awr, run);
        let commands = received(&log);
        assert_eq!(commands.len(), 1, "{run}: {commands:?}");
        assert_eq!(commands[0]["command"]["type"], kind, "{}", commands[0]);
        assert_eq!(commands[0]["accepted"], true, "{}", commands[0]);
        epochs_never_go_back(&awr, run);
    }
    let cancelled_log = events(&awr, &cancelled);
    let end = cancelled_log.last().unwrap();
    assert!(end.to_string().contains("from afar"), "{end}");

    // A paused run is nobody's: a resume from afar runs it there.
    std::fs::write(&gate, "").expect("open the gate");
    let resume = elsewhere(&awr, &["resume", &paused]);
    assert_eq!(resume.code, 0, "{}", resume.stderr);
    assert!(completed(&awr, &paused));
    terminate(&writer);
    assert_eq!(wait_exit(&mut writer, 30, "the worker to drain"), 0);
    // Nothing was left in the commands table.
    let left = crate::pg::strings(
        awr.postgres_url().unwrap(),
        "SELECT count(*)::text FROM awr_commands",
        None,
    );
    assert_eq!(left, ["0"]);
}

/// A CLI agent keeps its session on the disk of the machine that ran it.
/// Its run, taken over by a worker on another machine, starts the agent's
/// node run again as a new attempt (a new session), and `agent:start` says
/// why. (The other machine is played by renaming the one on record.)
#[test]
fn a_cli_agent_taken_over_on_another_machine_starts_a_new_attempt_and_says_why() {
    let Some(awr) = Awr::postgres() else {
        return;
    };
    let gate = awr.dir.path().join("go");
    let calls = awr.dir.path().join("calls.log");
    let script = format!(
        r#"#!/bin/sh
echo "$*" >> '{calls}'
sid=""
while [ $# -gt 0 ]; do
  case "$1" in
    --session-id|--resume) sid="$2"; shift ;;
  esac
  shift
done
echo '{{"type":"system","subtype":"init","session_id":"'"$sid"'","model":"m"}}'
while [ ! -f '{gate}' ]; do sleep 0.02; done
printf '%s\n' '{{"type":"result","subtype":"success","is_error":false,"result":"done","session_id":"'"$sid"'","num_turns":1,"duration_ms":5,"usage":{{"input_tokens":3,"output_tokens":2}}}}'
"#,
        calls = calls.display(),
        gate = gate.display(),
    );
    let flow = awr.claude_flow("elsewhere", &script, "");
    let run = submit(&awr, &[flow.to_str().unwrap(), "--input-text", "hello"]);
    let mut first = worker(&awr, "first");
    wait_for(30, "the agent's process on record", || {
        !of_type(&events(&awr, &run), "process:started").is_empty()
    });
    first.kill().expect("SIGKILL the worker");
    first.wait().expect("reap it");
    let started = of_type(&events(&awr, &run), "process:started");
    assert!(started[0]["host"].is_string(), "{}", started[0]);
    // The session was on another machine than the next worker's.
    let url = awr.postgres_url().unwrap();
    let renamed = crate::pg::strings(
        url,
        "UPDATE awr_events SET body = regexp_replace(body, '\"host\":\"[^\"]*\"', '\"host\":\"elsewhere\"') \
         WHERE run_id::text = $1 AND kind = 'process:started' RETURNING 'x'",
        Some(&run),
    );
    assert_eq!(
        renamed.len(),
        started.len(),
        "the machine on record renamed"
    );
    crate::pg::strings(
        url,
        "DELETE FROM awr_snapshots WHERE run_id::text = $1 RETURNING 'x'",
        Some(&run),
    );
    std::fs::write(&gate, "").expect("open the gate");
    let mut second = worker(&awr, "second");
    wait_for(30, "the run to complete", || completed(&awr, &run));
    terminate(&second);
    assert_eq!(wait_exit(&mut second, 30, "the worker to drain"), 0);

    let log = events(&awr, &run);
    let attempts: Vec<Value> = of_type(&log, "node:started")
        .iter()
        .map(|e| e["attempt"].clone())
        .collect();
    assert_eq!(attempts, [1, 2]);
    let starts = of_type(&log, "agent:start");
    assert_eq!(starts.len(), 2, "{starts:?}");
    assert!(starts[0].get("restart").is_none(), "{}", starts[0]);
    let why = starts[1]["restart"].as_str().unwrap_or_default();
    assert!(
        why.contains("`elsewhere`") && why.contains("new attempt"),
        "{}",
        starts[1]
    );
    assert_ne!(starts[0]["sessionId"], starts[1]["sessionId"]);
    // The CLI was asked for a new session, never to resume the other one.
    let asked = std::fs::read_to_string(&calls).unwrap();
    assert!(!asked.contains("--resume"), "{asked}");
    epochs_never_go_back(&awr, &run);
}

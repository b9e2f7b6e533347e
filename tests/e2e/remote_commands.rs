//! Commands to a run written on another machine: a worker writes the run,
//! and `pause`, `cancel` and `resume` come from a process that shares only
//! the database with it (its own files directory, so no socket of the
//! writer's). Each command is recorded once, by the writer, and answered.

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

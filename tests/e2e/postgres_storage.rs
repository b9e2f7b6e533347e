//! `--storage postgres://…`: the examples run on the PostgreSQL store, the
//! commands that read, follow, pause, resume, recover, fork and prune a run
//! work on it unchanged, and a server that cannot be reached is a clear
//! storage error that never shows the password.

use std::process::{Command, Stdio};

use application::ports::RunStore;
use domain::RunSnapshot;
use infrastructure::store::PgRunStore;
use serde_json::Value;

use crate::util::{Awr, awr_bin, examples, run_id_of};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_example_runs_on_postgres_and_reads_back_through_the_commands() {
    let Some(a) = Awr::postgres() else {
        return;
    };
    let mut mains = Vec::new();
    for example in examples() {
        let out = a.run(&["run", &example]);
        assert_eq!(out.code, 0, "{example}: {}", out.stderr);
        mains.push((example, run_id_of(&out)));
    }
    // Nothing went to a storage directory, nor beside it: the runs and
    // their transcripts are in the database.
    assert!(!a.storage().exists());
    let state = a.dir.path().join("state");
    let on_disk: Vec<_> = walkdir(&state);
    assert!(on_disk.is_empty(), "files on this machine: {on_disk:?}");

    let store = PgRunStore::open_existing(a.postgres_url().unwrap())
        .await
        .unwrap();
    let runs = store.list_runs().await.unwrap();
    assert!(runs.len() >= mains.len(), "{runs:?}");
    for run in &runs {
        let log = store.read(*run, 0, usize::MAX).await.unwrap();
        let folded = RunSnapshot::fold(&log).unwrap();
        let saved = store.load_snapshot(*run).await.unwrap().unwrap();
        assert_eq!(folded, saved, "run {run}");
        assert!(
            folded.status.is_terminal(),
            "run {run}: {:?}",
            folded.status
        );
        assert!(!store.has_writer(*run).await.unwrap(), "run {run} released");
    }

    let listed = a.run(&["runs"]);
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    for (example, run) in &mains {
        assert!(
            listed.stdout.contains(&run[..8]),
            "{example}: {}",
            listed.stdout
        );
        assert_eq!(a.show_json(run)["status"], "completed", "{example}");
        let events = a.run(&["events", run, "--json"]);
        assert_eq!(events.code, 0, "{example}: {}", events.stderr);
        assert_eq!(
            events.stdout.lines().count(),
            a.events(run).len(),
            "{example}"
        );
        let transcript = a.run(&["transcript", run]);
        assert_eq!(transcript.code, 0, "{example}: {}", transcript.stderr);
        assert!(!transcript.stdout.is_empty(), "{example}");
    }
}

/// A run written by one process is followed by another, paused from a
/// third, and resumed from a fourth, through the database: the follower
/// sees every event once, in order, up to the pause, and ends there (no
/// process writes the run any more); one started after the resume reads
/// the rest from its offset to the end.
#[test]
fn a_live_run_on_postgres_is_followed_paused_and_resumed_by_other_processes() {
    let Some(awr) = Awr::postgres() else {
        return;
    };
    let mut live = crate::commands::start_on(awr);
    let run = live.run.clone();
    let follower = live
        .awr
        .command(&["events", &run, "--follow", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    let out = live.awr(&["pause", &run]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let (code, _, report) = live.wait();
    assert_eq!(code, 3, "a paused run exits 3: {report}");
    assert_eq!(live.awr.show_json(&run)["status"], "paused");

    let followed = follower.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&followed.stderr);
    assert!(followed.status.success(), "{stderr}");
    assert!(stderr.contains("is paused"), "{stderr}");
    let lines = json_lines(&followed.stdout);
    let paused_at = live.awr.events(&run).len() as u64;
    assert_eq!(offsets(&lines), (1..=paused_at).collect::<Vec<_>>());
    assert_eq!(lines.last().unwrap()["type"], "flow:paused");

    let resumed = live.awr.run_within(60, &["resume", &run]);
    assert_eq!(resumed.code, 0, "{}{}", resumed.stdout, resumed.stderr);
    assert_eq!(live.awr.show_json(&run)["status"], "completed");
    let after = paused_at.to_string();
    let rest = live.awr.run_within(
        30,
        &["events", &run, "--follow", "--json", "--offset", &after],
    );
    assert_eq!(rest.code, 0, "{}", rest.stderr);
    let lines = json_lines(rest.stdout.as_bytes());
    let end = live.awr.events(&run).len() as u64;
    assert_eq!(offsets(&lines), (paused_at + 1..=end).collect::<Vec<_>>());
    assert_eq!(lines.last().unwrap()["type"], "flow:completed");
}

fn json_lines(out: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn offsets(lines: &[Value]) -> Vec<u64> {
    lines
        .iter()
        .map(|e| e["offset"].as_u64().unwrap())
        .collect()
}

/// A run whose process is killed is interrupted at once (its session went
/// with it), not when its lease expires, and `awr recover --all` finishes it.
#[test]
fn a_killed_run_on_postgres_is_listed_and_finished_by_recover() {
    let Some(awr) = Awr::postgres() else {
        return;
    };
    let mut live = crate::commands::start_on(awr);
    let run = live.run.clone();
    live.kill_writer();
    crate::cancel::wait_for(10, "the dead writer's lease to go", || {
        live.awr.show_json(&run)["status"] == "interrupted"
    });
    let listed = live.awr(&["recover"]);
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    assert!(
        listed.stdout.contains(&run),
        "{}{}",
        listed.stdout,
        listed.stderr
    );

    let recovered = live.awr.run_within(60, &["recover", "--all"]);
    assert_eq!(
        recovered.code, 0,
        "{}{}",
        recovered.stdout, recovered.stderr
    );
    assert_eq!(live.awr.show_json(&run)["status"], "completed");
    let events = live.awr.events(&run);
    assert_eq!(events.last().unwrap()["type"], "flow:completed");
    let starts = crate::util::of_type(&events, "agent:start");
    assert_eq!(starts.len(), 2, "the first call and its resume: {events:?}");
}

#[test]
fn a_run_on_postgres_is_forked_and_pruned() {
    let Some(a) = Awr::postgres() else {
        return;
    };
    let run = a.completed_run("examples/research-pipeline.yaml");
    let fork = a.run(&["fork", &run, "--at", "5"]);
    assert_eq!(fork.code, 0, "{}", fork.stderr);
    let copy = run_id_of(&fork);
    assert_ne!(copy, run);
    assert_eq!(a.show_json(&copy)["status"], "completed");

    let pruned = a.run(&["prune", "--older-than", "0s"]);
    assert_eq!(pruned.code, 0, "{}{}", pruned.stdout, pruned.stderr);
    assert!(a.run_ids().is_empty(), "{:?}", a.run_ids());
    let listed = a.run(&["runs"]);
    assert!(!listed.stdout.contains(&run[..8]), "{}", listed.stdout);
}

#[test]
fn an_unreachable_server_is_a_storage_error_without_the_password() {
    // Nothing listens on port 1 of the loopback.
    let url = "postgres://me:s3cret@127.0.0.1:1/awr?connect_timeout=5";
    for args in [&["runs"][..], &["run", "examples/summarize.yaml"][..]] {
        let out = Command::new(awr_bin())
            .arg("--storage")
            .arg(url)
            .args(args)
            .current_dir(crate::util::repo_root())
            .env_remove("AWR_STORAGE")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("127.0.0.1:1/awr"), "{stderr}");
        assert!(!stderr.contains("s3cret"), "{stderr}");
    }
}

#[test]
fn a_database_without_runs_is_read_as_such_and_left_alone() {
    let Some(a) = Awr::postgres() else {
        return;
    };
    let out = a.run(&["runs"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("holds no awr runs"), "{}", out.stderr);
    let tables = crate::pg::strings(
        a.postgres_url().unwrap(),
        "SELECT table_name::text FROM information_schema.tables WHERE table_schema = 'public'",
        None,
    );
    assert!(tables.is_empty(), "a read creates nothing: {tables:?}");
}

/// Every file under `dir` (none when it does not exist).
fn walkdir(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(walkdir(&path));
        } else {
            found.push(path);
        }
    }
    found
}

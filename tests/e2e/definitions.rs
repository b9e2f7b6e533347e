//! A run keeps the workflow definition it started with (its files, by
//! content hash), and resume reads that copy: editing or deleting the file
//! on disk no longer blocks `awr resume`, on any store, nor after a
//! migration to another.

use serde_json::Value;

use crate::util::Awr;

/// Starts a run whose agent waits, pauses it, then edits and deletes its
/// workflow file; `awr resume` finishes it from the definition it keeps.
fn resumes_without_its_file(awr: Awr) -> crate::commands::Live {
    let mut live = crate::commands::start_on(awr);
    let run = live.run.clone();
    let out = live.awr(&["pause", &run]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let (code, _, report) = live.wait();
    assert_eq!(code, 3, "a paused run exits 3: {report}");
    let flow = live.awr.dir.path().join("flow.yaml");
    std::fs::write(&flow, "name: edited\nnodes: [{id: other, command: echo}]\n").unwrap();
    std::fs::remove_file(&flow).unwrap();

    let started = live.awr.events(&run)[0].clone();
    let hash = started["definition"]
        .as_str()
        .expect("flow:started names its definition");
    assert!(hash.starts_with("sha256:"), "{started}");
    live
}

fn finish(live: &crate::commands::Live) {
    let run = &live.run;
    let resumed = live.awr.run_within(60, &["resume", run]);
    assert_eq!(resumed.code, 0, "{}{}", resumed.stdout, resumed.stderr);
    assert_eq!(live.awr.show_json(run)["status"], "completed");
    let events = live.awr.events(run);
    let last: &Value = events.last().unwrap();
    assert_eq!(last["type"], "flow:completed");
}

#[test]
fn a_run_on_files_resumes_from_its_definition_when_its_file_is_gone() {
    let live = resumes_without_its_file(Awr::new());
    let kept = live.awr.storage().join("definitions");
    assert_eq!(
        std::fs::read_dir(&kept).unwrap().count(),
        1,
        "one file, by hash"
    );
    finish(&live);
}

#[test]
fn a_run_on_sqlite_resumes_from_its_definition_when_its_file_is_gone() {
    finish(&resumes_without_its_file(Awr::sqlite()));
}

#[test]
fn a_run_on_postgres_resumes_from_its_definition_when_its_file_is_gone() {
    let Some(awr) = Awr::postgres() else {
        return;
    };
    finish(&resumes_without_its_file(awr));
}

/// A migration takes the definition along: the copy resumes in the target
/// with the file gone.
#[test]
fn a_migrated_run_resumes_from_its_definition_in_the_target() {
    let live = resumes_without_its_file(Awr::new());
    let target = live.awr.dir.path().join("copy.db");
    let target = format!("sqlite:{}", target.display());
    let source = live.awr.storage().display().to_string();
    let out = live.awr(&["migrate", "--from", &source, "--to", &target]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let resumed = std::process::Command::new(crate::util::awr_bin())
        .args(["--storage", &target, "resume", &live.run])
        .current_dir(crate::util::repo_root())
        .env_remove("AWR_STORAGE")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let resumed = crate::util::Output::from(resumed);
    assert_eq!(resumed.code, 0, "{}{}", resumed.stdout, resumed.stderr);
}

/// A paused run, its workflow file, and that file's text.
fn paused() -> (crate::commands::Live, std::path::PathBuf, String) {
    let mut live = crate::commands::start_on(Awr::new());
    let run = live.run.clone();
    let out = live.awr(&["pause", &run]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let (code, _, report) = live.wait();
    assert_eq!(code, 3, "a paused run exits 3: {report}");
    let flow = live.awr.dir.path().join("flow.yaml");
    let text = std::fs::read_to_string(&flow).unwrap();
    (live, flow, text)
}

/// `awr resume --upgrade` goes on under an edited definition that keeps the
/// node in flight, runs what it adds, and records both hashes; the run's
/// state names the new definition from then on.
#[test]
fn a_run_goes_on_under_an_upgraded_definition_that_keeps_its_node_in_flight() {
    let (live, flow, text) = paused();
    let run = &live.run;
    let edited = text.replace(
        "steps: [{agent: coder}]",
        "steps: [{agent: coder}, {id: added, command: echo upgraded}]",
    );
    assert_ne!(edited, text);
    let new = live.awr.write("flow-v2.yaml", &edited);
    let out = live
        .awr
        .run_within(60, &["resume", run, "--upgrade", new.to_str().unwrap()]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("upgraded"),
        "the added step ran: {}",
        out.stdout
    );

    let events = live.awr.events(run);
    let upgraded = crate::util::of_type(&events, "flow:upgraded");
    assert_eq!(upgraded.len(), 1, "{events:?}");
    let first = &events[0];
    assert_eq!(upgraded[0]["from"]["hash"], first["workflow"]["hash"]);
    assert_ne!(upgraded[0]["to"]["hash"], upgraded[0]["from"]["hash"]);
    assert_ne!(upgraded[0]["definition"], first["definition"]);
    assert!(upgraded[0]["by"].is_string(), "{}", upgraded[0]);
    let at = |kind: &str| events.iter().position(|e| e["type"] == kind).unwrap();
    assert!(at("flow:upgraded") < at("flow:resumed"));
    assert_eq!(live.awr.show_json(run)["status"], "completed");
    std::fs::remove_file(&flow).unwrap();
    std::fs::remove_file(&new).unwrap();
    // The run's definition now is the upgraded one: what its snapshot names.
    assert_eq!(
        live.awr.show_json(run)["workflow"]["hash"],
        upgraded[0]["to"]["hash"],
    );
}

/// An edited definition without the node in flight is refused (exit 2),
/// naming the node, and nothing is recorded.
#[test]
fn an_upgrade_without_the_node_in_flight_is_refused_naming_it() {
    let (live, _flow, _) = paused();
    let run = &live.run;
    let before = live.awr.events(run).len();
    let new = live.awr.write(
        "other.yaml",
        "name: commands\nnodes: [{id: other, command: echo other}]\n",
    );
    let out = live
        .awr
        .run_within(60, &["resume", run, "--upgrade", new.to_str().unwrap()]);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("`coder`"), "{}", out.stderr);
    assert_eq!(live.awr.events(run).len(), before, "nothing recorded");
    assert_eq!(live.awr.show_json(run)["status"], "paused");
    // The run still goes on under its own definition.
    let resumed = live.awr.run_within(60, &["resume", run]);
    assert_eq!(resumed.code, 0, "{}{}", resumed.stdout, resumed.stderr);
}

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

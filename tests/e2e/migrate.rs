//! `awr migrate`: runs copied between the file store and SQLite or
//! PostgreSQL, either way, byte for byte (events, snapshot, transcript and the blobs of large
//! values), runs already there skipped, runs being written refused.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use application::ports::RunStore;
use infrastructure::FileRunStore;

use crate::util::{Awr, Output, awr_bin, repo_root};

/// `awr ARGS` from the repository root, whatever the storage.
fn awr(args: &[&str]) -> Output {
    awr_in(&std::env::temp_dir(), args)
}

/// `awr ARGS` whose files beside a PostgreSQL store go under `state`.
fn awr_in(state: &Path, args: &[&str]) -> Output {
    let out = std::process::Command::new(awr_bin())
        .args(args)
        .env("XDG_STATE_HOME", state)
        .current_dir(repo_root())
        .env_remove("AWR_STORAGE")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run awr");
    Output::from(out)
}

/// Every file under `dir` (relative path → bytes), but the files a store
/// derives or uses for locking (`events.idx`, `lock`).
fn files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                if name == "events.idx" || name == "lock" {
                    continue;
                }
                let rel = path.strip_prefix(root).unwrap().to_path_buf();
                out.insert(rel, std::fs::read(&path).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

#[test]
fn file_to_sqlite_to_file_keeps_every_byte() {
    let a = Awr::new();
    let db = a.dir.path().join("copy.db");
    there_and_back(&a, &format!("sqlite:{}", db.display()));
}

#[test]
fn file_to_postgres_to_file_keeps_every_byte() {
    let Some(url) = crate::pg::fresh_database() else {
        return;
    };
    there_and_back(&Awr::new(), &url);
}

/// Copies the runs of `a` to `target` and back to a new directory, and
/// checks that every byte came back.
fn there_and_back(a: &Awr, target: &str) {
    let state = a.dir.path().join("state");
    let awr = |args: &[&str]| awr_in(&state, args);
    let big = a.write(
        "big.json",
        &serde_json::to_string(&"y".repeat(100 * 1024)).unwrap(),
    );
    let big_run = a.run(&[
        "run",
        "examples/summarize.yaml",
        "--input",
        &format!("@{}", big.display()),
    ]);
    assert_eq!(big_run.code, 0, "{}", big_run.stderr);
    a.completed_run("examples/market-brief.yaml");
    a.completed_run("examples/fan-out.yaml");
    let source = a.storage();
    let before = files(&source.join("runs"));
    assert!(
        before
            .keys()
            .any(|p| p.to_string_lossy().contains("/blobs/sha256-")),
        "a value over 64 KiB went to a blob: {:?}",
        before.keys().collect::<Vec<_>>()
    );
    // A run that stopped leaves no replaced snapshot behind, whether or
    // not its stop saved one.
    assert!(
        !before.keys().any(|p| p.ends_with("snapshot.json.tmp")),
        "{:?}",
        before.keys().collect::<Vec<_>>()
    );
    let transcripts = files(&source.join("transcripts"));
    assert!(transcripts.len() >= 4, "a parent, its child and two more");

    let sqlite = target.to_owned();
    let back = a.dir.path().join("back");
    let source_arg = source.display().to_string();
    let back_arg = back.display().to_string();

    let there = awr(&["migrate", "--from", &source_arg, "--to", &sqlite]);
    assert_eq!(there.code, 0, "{}", there.stderr);
    // On PostgreSQL the transcripts and their blobs went to the database:
    // this machine's disk holds no part of a run.
    if target.starts_with("postgres") {
        assert!(
            !state.exists() || files(&state).is_empty(),
            "nothing on disk: {:?}",
            files(&state).keys().collect::<Vec<_>>()
        );
    }
    assert_eq!(
        there.stdout.matches("copied ").count(),
        transcripts.len(),
        "{}",
        there.stdout
    );
    // The target store shows the runs through the ordinary commands.
    let listed = awr(&["--storage", &sqlite, "runs"]);
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    assert_eq!(
        listed.stdout.matches("completed").count(),
        transcripts.len()
    );

    let home = awr(&["migrate", "--from", &sqlite, "--to", &back_arg]);
    assert_eq!(home.code, 0, "{}", home.stderr);
    assert_eq!(files(&back.join("runs")), before, "runs/ byte for byte");
    assert_eq!(files(&back.join("transcripts")), transcripts, "transcripts");

    // Again: every run is there already, and nothing changes.
    let again = awr(&["migrate", "--from", &sqlite, "--to", &back_arg]);
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert_eq!(again.stdout.matches("present ").count(), transcripts.len());
    assert_eq!(files(&back.join("runs")), before);

    let same = awr(&["migrate", "--from", &sqlite, "--to", &sqlite]);
    assert_eq!(same.code, 2, "{}", same.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_being_written_is_not_copied_and_the_exit_code_says_so() {
    let a = Awr::new();
    let done = a.completed_run("examples/summarize.yaml");
    let written = a.completed_run("examples/fan-out.yaml");
    let store = FileRunStore::open(a.storage()).unwrap();
    let lock = store.lock(written.parse().unwrap()).await.unwrap();
    let db = a.dir.path().join("copy.db");
    let sqlite = format!("sqlite:{}", db.display());
    let out = awr(&[
        "migrate",
        "--from",
        &a.storage().display().to_string(),
        "--to",
        &sqlite,
    ]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stdout.contains(&format!("copied {done}")),
        "{}",
        out.stdout
    );
    assert!(
        out.stderr.contains(&format!("run {written} not copied"))
            && out.stderr.contains("being written"),
        "{}",
        out.stderr
    );
    let show = awr(&["--storage", &sqlite, "show", &written]);
    assert_eq!(show.code, 2, "not in the target: {}", show.stdout);
    // Once the writer is gone, running migrate again finishes the job.
    drop(lock);
    let again = awr(&[
        "migrate",
        "--from",
        &a.storage().display().to_string(),
        "--to",
        &sqlite,
    ]);
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert!(
        again.stdout.contains(&format!("copied {written}")),
        "{}",
        again.stdout
    );
    assert!(
        again.stdout.contains(&format!("present {done}")),
        "{}",
        again.stdout
    );
}

/// A run copied earlier whose log went on in the source since is not
/// passed as `present`: the stale copy is named and the exit code says so.
/// A run whose log lost events its snapshot reflects is not copied.
#[tokio::test]
async fn a_stale_copy_and_a_log_cut_short_are_refused() {
    let a = Awr::new();
    let run = a.completed_run("examples/summarize.yaml");
    let cut = a.completed_run("examples/triage.yaml");
    let source = a.storage().display().to_string();
    let db = a.dir.path().join("copy.db");
    let sqlite = format!("sqlite:{}", db.display());
    // The triage run's last event cut off: its snapshot (saved as a longer
    // run's would be) is ahead of its log.
    a.save_snapshot(&cut);
    let log = a.run_dir(&cut).join("events.ndjson");
    let text = std::fs::read_to_string(&log).unwrap();
    let kept = text.trim_end().rsplit_once('\n').unwrap().0;
    std::fs::write(&log, format!("{kept}\n")).unwrap();
    std::fs::remove_file(a.run_dir(&cut).join("events.idx")).ok();

    let first = awr(&["migrate", "--from", &source, "--to", &sqlite]);
    assert_eq!(first.code, 2, "{}", first.stderr);
    assert!(
        first.stdout.contains(&format!("copied {run}")),
        "{}",
        first.stdout
    );
    assert!(
        first.stderr.contains(&format!("run {cut}")) && first.stderr.contains("events are missing"),
        "{}",
        first.stderr
    );

    // The source's log goes on after the copy.
    let store = FileRunStore::open(a.storage()).unwrap();
    let id = run.parse().unwrap();
    let next = store.last_offset(id).await.unwrap() + 1;
    let line = format!(
        r#"{{"id":"0c1d2e3f-4a5b-4c6d-8e7f-000000000028","offset":{next},"timestamp":"2026-11-22T09:30:28.036Z","runId":"{run}","type":"warning","message":"later"}}"#
    );
    let event = domain::RuntimeEvent::from_json(line.as_bytes()).unwrap();
    let lock = store.lock(id).await.unwrap();
    store.append(id, &[event]).await.unwrap();
    store.flush(id).await.unwrap();
    drop(lock);

    let again = awr(&["migrate", "--from", &source, "--to", &sqlite]);
    assert_eq!(again.code, 2, "{}", again.stderr);
    assert!(
        again.stderr.contains(&format!("run {run}"))
            && again
                .stderr
                .contains(&format!("in the target up to offset {}", next - 1))
            && again.stderr.contains(&format!("goes to {next}")),
        "{}",
        again.stderr
    );
    assert!(
        !again.stdout.contains(&format!("present {run}")),
        "{}",
        again.stdout
    );
}

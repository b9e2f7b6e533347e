//! The readers of the three records (event log, snapshot, transcript) driven
//! through `awr` on files from older and newer writers, corrupt files and
//! files that are not files: they keep what they cannot interpret, report
//! what is broken with its file and line, and never print a status the log
//! contradicts.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::util::{Awr, Output, repo_root, run_id_of};

const OLDER: &str = "11111111-1111-4111-8111-111111111111";
const NEWER: &str = "22222222-2222-4222-8222-222222222222";

fn fixture(name: &str) -> PathBuf {
    repo_root().join("tests/fixtures/records").join(name)
}

/// Copies a fixture into the storage as `runs/<run>/<file>` (or, for a
/// transcript, `transcripts/<run>.jsonl`).
fn install(awr: &Awr, run: &str, name: &str) {
    let target = if name.starts_with("transcript") {
        awr.storage()
            .join("transcripts")
            .join(format!("{run}.jsonl"))
    } else if name.starts_with("snapshot") {
        awr.run_dir(run).join("snapshot.json")
    } else {
        awr.run_dir(run).join("events.ndjson")
    };
    std::fs::create_dir_all(target.parent().unwrap()).unwrap();
    std::fs::copy(fixture(name), target).unwrap();
}

fn lines_of(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn json_lines(out: &Output) -> Vec<Value> {
    out.stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn assert_exit(out: &Output, code: i32, needle: &str) {
    assert_eq!(
        out.code, code,
        "stdout:\n{}\nstderr:\n{}",
        out.stdout, out.stderr
    );
    assert!(
        out.stderr.contains(needle),
        "stderr lacks `{needle}`:\n{}",
        out.stderr
    );
    assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
}

#[test]
fn event_logs_of_older_and_newer_writers_are_read_and_shown_whole() {
    let awr = Awr::new();
    install(&awr, OLDER, "events-older.ndjson");
    install(&awr, NEWER, "events-newer.ndjson");

    let older = awr.run(&["events", OLDER, "--json"]);
    assert_eq!(older.code, 0, "{}", older.stderr);
    assert_eq!(json_lines(&older).len(), 6);
    let show = awr.run(&["show", OLDER]);
    assert_eq!(show.code, 0, "{}", show.stderr);
    assert!(show.stdout.contains("completed"), "{}", show.stdout);

    let newer = awr.run(&["events", NEWER, "--json"]);
    assert_eq!(newer.code, 0, "{}", newer.stderr);
    let printed = json_lines(&newer);
    let written: Vec<Value> = lines_of(&fixture("events-newer.ndjson"))
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(printed, written, "every field of every line is kept");
    let human = awr.run(&["events", NEWER]);
    assert_eq!(human.code, 0, "{}", human.stderr);
    assert!(human.stdout.contains("agent:hologram"), "{}", human.stdout);
    assert!(human.stdout.contains("cacheHit"), "{}", human.stdout);
}

#[test]
fn snapshots_of_older_and_newer_writers_are_read_and_kept() {
    let awr = Awr::new();
    install(&awr, OLDER, "events-older.ndjson");
    install(&awr, OLDER, "snapshot-older.json");
    install(&awr, NEWER, "events-newer.ndjson");
    install(&awr, NEWER, "snapshot-newer.json");

    let older = awr.run(&["show", OLDER, "--json"]);
    assert_eq!(older.code, 0, "{}", older.stderr);
    let s: Value = serde_json::from_str(&older.stdout).unwrap();
    assert_eq!(s["status"], "completed", "the stale snapshot is caught up");
    assert_eq!(s["lastOffset"], 6);
    assert_eq!(s["nodeStatus"]["a"], "done");
    assert_eq!(s["agentSessions"]["a"], "s-1");

    let newer = awr.run(&["show", NEWER, "--json"]);
    assert_eq!(newer.code, 0, "{}", newer.stderr);
    let s: Value = serde_json::from_str(&newer.stdout).unwrap();
    assert_eq!(s["status"], "completed");
    assert_eq!(s["leases"]["holder"], "worker-7", "unknown fields are kept");
}

#[test]
fn transcripts_of_older_and_newer_writers_are_read_and_shown_whole() {
    let awr = Awr::new();
    install(&awr, OLDER, "transcript-older.jsonl");
    install(&awr, NEWER, "transcript-newer.jsonl");

    let older = awr.run(&["transcript", OLDER, "--json"]);
    assert_eq!(older.code, 0, "{}", older.stderr);
    assert_eq!(json_lines(&older).len(), 3);

    let newer = awr.run(&["transcript", NEWER, "--json"]);
    assert_eq!(newer.code, 0, "{}", newer.stderr);
    let written: Vec<Value> = lines_of(&fixture("transcript-newer.jsonl"))
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        json_lines(&newer),
        written,
        "every field of every line is kept"
    );
    let human = awr.run(&["transcript", NEWER]);
    assert_eq!(human.code, 0, "{}", human.stderr);
    assert!(human.stdout.contains("message.system"), "{}", human.stdout);
    assert!(human.stdout.contains("[image]"), "{}", human.stdout);
}

#[test]
fn a_bad_event_line_is_reported_with_its_line_and_the_rest_is_shown() {
    let awr = Awr::new();
    let run = awr.completed_run("examples/research-pipeline.yaml");
    let log = awr.run_dir(&run).join("events.ndjson");
    let mut lines = lines_of(&log);
    let total = lines.len();
    lines[2] = "{not json".into();
    std::fs::write(&log, lines.join("\n") + "\n").unwrap();
    let _ = std::fs::remove_file(awr.run_dir(&run).join("snapshot.json"));

    let events = awr.run(&["events", &run, "--json"]);
    assert_exit(&events, 2, "events.ndjson line 3");
    assert_eq!(
        events.stdout.lines().count(),
        total - 1,
        "{}",
        events.stdout
    );

    // Following a run reads the same: the bad line is named, the rest printed, exit 2 at the end.
    let followed = awr.run_within(20, &["events", &run, "--follow", "--json"]);
    assert_exit(&followed, 2, "events.ndjson line 3");
    assert!(
        followed.stdout == events.stdout,
        "follow printed {} lines, a plain read {}",
        followed.stdout.lines().count(),
        events.stdout.lines().count()
    );
    let followed = awr.run_within(20, &["events", &run, "--follow"]);
    assert_exit(&followed, 2, "events.ndjson line 3");
    assert!(
        followed.stdout.contains("flow:completed"),
        "{}",
        followed.stdout
    );

    let show = awr.run(&["show", &run]);
    assert_exit(&show, 2, "events.ndjson line 3");
    assert!(!show.stdout.contains("completed"), "{}", show.stdout);
}

#[test]
fn a_bad_transcript_line_is_reported_with_its_line_and_the_rest_is_shown() {
    let awr = Awr::new();
    let run = awr.completed_run("examples/research-pipeline.yaml");
    let path = awr
        .storage()
        .join("transcripts")
        .join(format!("{run}.jsonl"));
    let mut lines = lines_of(&path);
    let total = lines.len();
    lines[1] = "{\"seq\": \"two\"}".into();
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();

    let out = awr.run(&["transcript", &run, "--json"]);
    assert_exit(&out, 2, &format!("{run}.jsonl:2"));
    assert_eq!(out.stdout.lines().count(), total - 1);
}

#[test]
fn duplicate_missing_or_out_of_order_offsets_are_corruption() {
    type Edit = fn(&mut Vec<String>);
    let edits: [(&str, Edit); 3] = [
        ("duplicate", |l| l.insert(3, l[2].clone())),
        ("missing", |l| {
            l.remove(2);
        }),
        ("out of order", |l| l.swap(2, 3)),
    ];
    for (what, edit) in edits {
        let awr = Awr::new();
        let run = awr.completed_run("examples/research-pipeline.yaml");
        let log = awr.run_dir(&run).join("events.ndjson");
        let mut lines = lines_of(&log);
        edit(&mut lines);
        std::fs::write(&log, lines.join("\n") + "\n").unwrap();
        let _ = std::fs::remove_file(awr.run_dir(&run).join("events.idx"));
        let _ = std::fs::remove_file(awr.run_dir(&run).join("snapshot.json"));
        let show = awr.run(&["show", &run]);
        assert_eq!(show.code, 2, "{what}: {}{}", show.stdout, show.stderr);
        assert!(show.stderr.contains("offset"), "{what}: {}", show.stderr);
        let events = awr.run(&["events", &run, "--json"]);
        assert_eq!(events.code, 2, "{what}: {}", events.stderr);
    }
}

#[test]
fn duplicate_or_out_of_order_seq_in_a_transcript_is_corruption() {
    let awr = Awr::new();
    let run = awr.completed_run("examples/research-pipeline.yaml");
    let path = awr
        .storage()
        .join("transcripts")
        .join(format!("{run}.jsonl"));
    let mut lines = lines_of(&path);
    lines.insert(2, lines[1].clone());
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let out = awr.run(&["transcript", &run, "--json"]);
    assert_exit(&out, 2, "seq");
}

#[test]
fn a_snapshot_the_log_contradicts_is_never_reported_as_the_state() {
    // A snapshot of another run.
    let awr = Awr::new();
    let a = awr.completed_run("examples/research-pipeline.yaml");
    let b = awr.completed_run("examples/research-pipeline.yaml");
    std::fs::copy(awr.save_snapshot(&a), awr.run_dir(&b).join("snapshot.json")).unwrap();
    assert_exit(&awr.run(&["show", &b]), 2, &a);

    // A log truncated below the snapshot's lastOffset (a run this short
    // saves none of its own: one is saved as a longer run's would be).
    let awr = Awr::new();
    let run = awr.completed_run("examples/research-pipeline.yaml");
    awr.save_snapshot(&run);
    let log = awr.run_dir(&run).join("events.ndjson");
    let lines = lines_of(&log);
    std::fs::write(&log, lines[..lines.len() / 2].join("\n") + "\n").unwrap();
    let show = awr.run(&["show", &run]);
    assert_exit(&show, 2, "lastOffset");
    let runs = awr.run(&["runs"]);
    assert_eq!(runs.code, 2, "{}", runs.stderr);
    let row = runs.stdout.lines().find(|l| l.starts_with(&run)).unwrap();
    assert!(row.contains("corrupt"), "{row}");

    // A log that belongs to another run.
    let awr = Awr::new();
    let a = awr.completed_run("examples/research-pipeline.yaml");
    let b = awr.completed_run("examples/research-pipeline.yaml");
    std::fs::copy(
        awr.run_dir(&a).join("events.ndjson"),
        awr.run_dir(&b).join("events.ndjson"),
    )
    .unwrap();
    let _ = std::fs::remove_file(awr.run_dir(&b).join("events.idx"));
    let _ = std::fs::remove_file(awr.run_dir(&b).join("snapshot.json"));
    assert_exit(&awr.run(&["show", &b]), 2, &a);
    assert_exit(&awr.run(&["events", &b]), 2, &a);

    // A snapshot whose status the event at its lastOffset contradicts.
    let awr = Awr::new();
    let run = awr.completed_run("examples/research-pipeline.yaml");
    let path = awr.save_snapshot(&run);
    let mut snapshot: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    snapshot["status"] = "failed".into();
    std::fs::write(&path, snapshot.to_string()).unwrap();
    assert_exit(&awr.run(&["show", &run]), 2, "snapshot");

    // A stale snapshot is caught up from the log.
    let awr = Awr::new();
    let run = awr.completed_run("examples/research-pipeline.yaml");
    let path = awr.save_snapshot(&run);
    let mut snapshot: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    snapshot["status"] = "running".into();
    snapshot["lastOffset"] = 1.into();
    snapshot["updatedAt"] = snapshot["startedAt"].clone();
    std::fs::write(&path, snapshot.to_string()).unwrap();
    let show = awr.run(&["show", &run]);
    assert_eq!(show.code, 0, "{}", show.stderr);
    assert!(show.stdout.contains("completed"), "{}", show.stdout);
}

#[test]
fn show_of_a_failed_run_names_the_node_and_its_error() {
    let awr = Awr::new();
    let flow = awr.api_error_flow();
    let out = awr.run(&["run", flow.to_str().unwrap()]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    let run = run_id_of(&out);
    let show = awr.run(&["show", &run]);
    assert_eq!(show.code, 0, "{}", show.stderr);
    let error = show
        .stdout
        .lines()
        .find(|l| l.starts_with("error"))
        .unwrap_or_else(|| panic!("no error line:\n{}", show.stdout));
    assert!(
        error.contains("a") && error.contains("slow down"),
        "{error}"
    );
    let s = awr.show_json(&run);
    assert_eq!(s["failure"]["node"], "a", "{s}");
}

#[test]
fn no_temporary_snapshot_is_left_after_a_run() {
    let awr = Awr::new();
    let run = awr.completed_run("examples/research-pipeline.yaml");
    let left: Vec<_> = std::fs::read_dir(awr.run_dir(&run))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!left.iter().any(|n| n.ends_with(".tmp")), "{left:?}");
}

#[test]
fn read_only_commands_on_a_missing_storage_exit_2_and_create_nothing() {
    let awr = Awr::new();
    let id = "00000000-0000-4000-8000-000000000000";
    for args in [
        vec!["runs"],
        vec!["show", id],
        vec!["events", id],
        vec!["transcript", id],
    ] {
        let out = awr.run(&args);
        assert_exit(&out, 2, "storage");
        assert!(
            !awr.storage().exists(),
            "`awr {}` created it",
            args.join(" ")
        );
    }
}

/// A FIFO at `path` (made by `mkfifo`).
fn fifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn workflow_files_that_are_not_regular_or_too_big_are_refused_at_once() {
    let awr = Awr::new();
    let pipe = awr.dir.path().join("flow.yaml");
    fifo(&pipe);
    let zero = awr.dir.path().join("zero.yaml");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    let big = awr.dir.path().join("big.yaml");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(1 << 30)
        .unwrap();
    for (path, needle) in [
        (&pipe, "not a regular file"),
        (&zero, "not a regular file"),
        (&big, "limit"),
    ] {
        let p = path.to_str().unwrap();
        assert_exit(&awr.run_within(20, &["validate", p]), 2, needle);
        assert_exit(&awr.run_within(20, &["run", p]), 2, needle);
    }
    let ok = awr.write(
        "ok.yaml",
        "name: ok\nagents:\n  a: {provider: mock, fixtures: fx}\nsteps: [{agent: a}]\n",
    );
    awr.write("fx/a.json", r#"{"calls": []}"#);
    let input = format!("@{}", zero.display());
    let out = awr.run_within(20, &["run", ok.to_str().unwrap(), "--input", &input]);
    assert_exit(&out, 2, "not a regular file");
}

#[test]
fn run_files_that_are_not_regular_files_are_errors_not_hangs() {
    for file in ["events.ndjson", "snapshot.json", "events.idx", "transcript"] {
        let awr = Awr::new();
        let run = awr.completed_run("examples/research-pipeline.yaml");
        let path = if file == "transcript" {
            awr.storage()
                .join("transcripts")
                .join(format!("{run}.jsonl"))
        } else {
            awr.run_dir(&run).join(file)
        };
        // A short run keeps no `events.idx` and no `snapshot.json`: the
        // FIFO then stands where a reader looks for one.
        match std::fs::remove_file(&path) {
            Err(e)
                if ["events.idx", "snapshot.json"].contains(&file)
                    && e.kind() == std::io::ErrorKind::NotFound => {}
            other => other.unwrap(),
        }
        fifo(&path);
        let out = if file == "transcript" {
            awr.run_within(20, &["transcript", &run])
        } else {
            awr.run_within(20, &["show", &run])
        };
        if file == "events.idx" {
            // Derived data: a bad index is ignored and rebuilt from the log.
            assert_eq!(out.code, 0, "{file}: {}", out.stderr);
        } else {
            assert_exit(&out, 2, "not a regular file");
        }
    }
}

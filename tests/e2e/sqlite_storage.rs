//! `--storage sqlite:PATH`: every example runs on the SQLite store, and the
//! commands that read a run (`runs`, `show`, `events`, `transcript`) work on
//! it unchanged, through the store port.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use application::ports::RunStore;
use domain::RunSnapshot;
use infrastructure::SqliteRunStore;

use crate::util::{Awr, Output, awr_bin, examples, repo_root, run_id_of};

/// `awr --storage sqlite:DB ARGS` from the repository root.
fn awr(db: &Path, args: &[&str]) -> Output {
    let out = Command::new(awr_bin())
        .arg("--storage")
        .arg(format!("sqlite:{}", db.display()))
        .args(args)
        .current_dir(repo_root())
        .env_remove("AWR_STORAGE")
        .stdin(Stdio::null())
        .output()
        .expect("run awr");
    Output::from(out)
}

#[tokio::test]
async fn every_example_runs_on_sqlite_and_reads_back_through_the_commands() {
    let dir = tempfile::tempdir().unwrap();
    let db: PathBuf = dir.path().join("awr.db");
    let mut mains = Vec::new();
    for example in examples() {
        let out = awr(&db, &["run", &example]);
        assert_eq!(out.code, 0, "{example}: {}", out.stderr);
        mains.push((example, run_id_of(&out)));
    }
    // Nothing went to a storage directory: the runs are in the database,
    // transcripts and control sockets in the files beside it.
    assert!(
        !repo_root()
            .join("storage")
            .join("runs")
            .join(&mains[0].1)
            .exists()
    );
    assert!(dir.path().join("awr.db-files/transcripts").is_dir());

    let store = SqliteRunStore::open_existing(&db).unwrap();
    let runs = store.list_runs().await.unwrap();
    assert!(runs.len() >= mains.len(), "{runs:?}");
    for run in &runs {
        let log = store.read(*run, 0, usize::MAX).await.unwrap();
        let folded = RunSnapshot::fold(&log).unwrap();
        // A run this short saves no snapshot; one that is saved is the fold.
        if let Some(saved) = store.load_snapshot(*run).await.unwrap() {
            assert_eq!(folded, saved, "run {run}");
        }
        assert!(
            folded.status.is_terminal(),
            "run {run}: {:?}",
            folded.status
        );
    }

    let listed = awr(&db, &["runs"]);
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    for (example, run) in &mains {
        assert!(
            listed.stdout.contains(&run[..8]),
            "{example}: {}",
            listed.stdout
        );

        let show = awr(&db, &["show", run, "--json"]);
        assert_eq!(show.code, 0, "{example}: {}", show.stderr);
        let shown: serde_json::Value = serde_json::from_str(&show.stdout).unwrap();
        assert_eq!(shown["status"], "completed", "{example}");

        let events = awr(&db, &["events", run, "--json"]);
        assert_eq!(events.code, 0, "{example}: {}", events.stderr);
        let id = run.parse().unwrap();
        let stored = store.read(id, 0, usize::MAX).await.unwrap();
        let lines: Vec<&str> = events.stdout.lines().collect();
        assert_eq!(lines.len(), stored.len(), "{example}");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(lines[0]).unwrap()["type"],
            "flow:started"
        );

        let transcript = awr(&db, &["transcript", run]);
        assert_eq!(transcript.code, 0, "{example}: {}", transcript.stderr);
    }
}

#[test]
fn a_database_from_a_newer_awr_is_a_storage_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("awr.db");
    drop(SqliteRunStore::open(&db).unwrap());
    let newer = infrastructure::SCHEMA_VERSION + 1;
    rusqlite::Connection::open(&db)
        .unwrap()
        .pragma_update(None, "user_version", newer)
        .unwrap();
    for args in [&["runs"][..], &["run", "examples/summarize.yaml"][..]] {
        let out = awr(&db, args);
        assert_eq!(out.code, 2, "{args:?}: {}", out.stderr);
        assert!(out.stderr.contains("awr.db"), "{}", out.stderr);
        assert!(
            out.stderr.contains(&format!("schema version {newer}")),
            "{}",
            out.stderr
        );
        assert_eq!(
            out.stderr.matches("schema version").count(),
            1,
            "said once: {}",
            out.stderr
        );
    }
    let missing = awr(&dir.path().join("none.db"), &["runs"]);
    assert_eq!(missing.code, 2, "{}", missing.stderr);
    assert_eq!(
        missing.stderr.matches("none.db").count(),
        1,
        "said once: {}",
        missing.stderr
    );
    assert!(
        !dir.path().join("none.db").exists(),
        "a read creates nothing"
    );
}

#[test]
fn an_unknown_storage_scheme_is_a_usage_error() {
    let out = Command::new(awr_bin())
        .args(["--storage", "mysql://localhost/awr", "runs"])
        .env_remove("AWR_STORAGE")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("mysql://"), "{stderr}");
}

/// The control socket of a live run on SQLite (in `PATH-files/control/`)
/// takes a pause, and `awr resume` continues the run from the database.
#[test]
fn a_live_run_on_sqlite_pauses_through_its_socket_and_resumes_to_the_end() {
    let mut live = crate::commands::start_on(Awr::sqlite());
    let run = live.run.clone();
    assert!(live.awr.dir.path().join("awr.db-files/control").is_dir());
    let out = live.awr(&["pause", &run]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let (code, _, report) = live.wait();
    assert_eq!(code, 3, "a paused run exits 3: {report}");
    assert_eq!(live.awr.show_json(&run)["status"], "paused");
    assert_eq!(live.awr.events(&run).last().unwrap()["type"], "flow:paused");

    let resumed = live.awr.run_within(60, &["resume", &run]);
    assert_eq!(resumed.code, 0, "{}{}", resumed.stdout, resumed.stderr);
    assert_eq!(live.awr.show_json(&run)["status"], "completed");
    assert_eq!(
        live.awr.events(&run).last().unwrap()["type"],
        "flow:completed"
    );
}

/// A run on SQLite whose process is killed is shown interrupted, listed by
/// `awr recover`, and finished by `awr recover --all` from the database.
#[test]
fn a_killed_run_on_sqlite_is_listed_and_finished_by_recover() {
    let mut live = crate::commands::start_on(Awr::sqlite());
    let run = live.run.clone();
    live.kill_writer();
    assert_eq!(live.awr.show_json(&run)["status"], "interrupted");
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
    let quiet = live.awr(&["recover"]);
    assert!(!quiet.stdout.contains(&run), "{}", quiet.stdout);
}

/// `store-writer` (a second process) on `run` of the database `db`.
fn second_process(db: &Path, run: domain::RunId, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_store-writer"));
    command
        .arg(format!("sqlite:{}", db.display()))
        .arg(run.to_string())
        .args(args);
    command
}

/// One writer per run holds across processes on SQLite too, the lock of a
/// writer that dies is released by the kernel, and a follower here sees
/// what another process appends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_process_is_refused_followed_and_released_when_it_dies() {
    use application::testing::store_conformance::{PATIENCE, run_with};
    use futures::StreamExt;
    use infrastructure::SqliteStoreConfig;

    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("awr.db");
    let config = SqliteStoreConfig {
        follow_poll: std::time::Duration::from_millis(10),
        ..SqliteStoreConfig::default()
    };
    let store = SqliteRunStore::open_with(&db, config).unwrap();
    let (run, lock) = run_with(&store, 1).await;

    let refused = second_process(&db, run, &["append", "2"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "run {run} is locked: another process is writing it"
        )),
        "{stderr}"
    );
    assert_eq!(store.last_offset(run).await.unwrap(), 1, "nothing written");

    let mut follower = store.follow(run, 1).await.unwrap();
    drop(lock);
    let allowed = second_process(&db, run, &["append", "2"]).output().unwrap();
    assert!(
        allowed.status.success(),
        "{}",
        String::from_utf8_lossy(&allowed.stderr)
    );
    let next = tokio::time::timeout(PATIENCE, follower.next())
        .await
        .expect("the follower sees the other process's append")
        .unwrap()
        .unwrap();
    assert_eq!(next.offset.get(), 2);

    let holder = second_process(&db, run, &["hold"]);
    crate::util::a_dead_holder_releases_its_run(&store, run, holder).await;
    let _lock = store.lock(run).await.unwrap();
}

/// A database on a read-only medium (an archive, a backup) is read by the
/// commands that only read, and a command that would write is refused,
/// naming the file. The medium is a read-only bind mount in a mount
/// namespace of the command's own (`unshare`), gone with it.
#[test]
fn a_database_on_a_read_only_medium_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("awr.db");
    let out = awr(&db, &["run", "examples/summarize.yaml"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let run = run_id_of(&out);
    let ro = dir.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    // Bind the directory read-only over `ro`, show that nothing can be
    // written there, then run awr on the database through it.
    let script = r#"mount --bind "$1" "$2" && mount -o remount,bind,ro "$2" \
        && ! touch "$2/probe" 2>/dev/null && shift 2 && exec "$@""#;
    let storage = std::ffi::OsString::from(format!("sqlite:{}", ro.join("awr.db").display()));
    let read_only = |args: &[&str]| {
        let mut all = vec![
            dir.path().as_os_str(),
            ro.as_os_str(),
            awr_bin().as_os_str(),
            std::ffi::OsStr::new("--storage"),
            storage.as_os_str(),
        ];
        all.extend(args.iter().map(std::ffi::OsStr::new));
        crate::util::in_mount_namespace(script, &all)
    };
    let runs = read_only(&["runs"]);
    assert_eq!(runs.code, 0, "{}", runs.stderr);
    assert!(runs.stdout.contains(&run), "{}", runs.stdout);
    let show = read_only(&["show", &run, "--json"]);
    assert_eq!(show.code, 0, "{}", show.stderr);
    let state: serde_json::Value = serde_json::from_str(&show.stdout).unwrap();
    assert_eq!(state["status"], "completed");
    let events = read_only(&["events", &run]);
    assert_eq!(events.code, 0, "{}", events.stderr);
    assert!(
        events.stdout.contains("flow:completed"),
        "{}",
        events.stdout
    );

    let write = read_only(&["run", "examples/summarize.yaml"]);
    assert_eq!(write.code, 2, "{}", write.stderr);
    assert!(
        write.stderr.contains("awr.db") && write.stderr.contains("Read-only file system"),
        "{}",
        write.stderr
    );
    let names = std::fs::read_dir(dir.path()).unwrap().count();
    assert_eq!(
        names, 4,
        "awr.db, its -files and -writers, ro: nothing left beside"
    );
}

/// `awr --storage sqlite:DB ARGS` as user `uid` (`setpriv`, util-linux;
/// the tests run as root), in `dir`, with the copy of awr at `bin`: one
/// that user can run wherever the build is.
fn as_user(uid: u32, bin: &Path, db: &Path, dir: &Path, args: &[&str]) -> Output {
    let out = Command::new("setpriv")
        .arg(format!("--reuid={uid}"))
        .arg(format!("--regid={uid}"))
        .arg("--clear-groups")
        .arg(bin)
        .arg("--storage")
        .arg(format!("sqlite:{}", db.display()))
        .args(args)
        .current_dir(dir)
        .env_remove("AWR_STORAGE")
        .stdin(Stdio::null())
        .output()
        .expect("run setpriv (util-linux)");
    Output::from(out)
}

const NOBODY: u32 = 65534;

/// Sets `path`'s permission bits.
fn chmod(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A copy of awr in `dir` that any user may run.
fn awr_copy(dir: &Path) -> PathBuf {
    let bin = dir.join("awr");
    std::fs::copy(awr_bin(), &bin).unwrap();
    chmod(&bin, 0o755);
    bin
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<std::ffi::OsString> {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    names
}

/// Another user's archive: a database whose file and directory this user
/// may read but not write is read, and nothing is made beside it (the
/// database is read `immutable`).
#[test]
fn another_users_database_is_read_without_writing_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("archive");
    std::fs::create_dir(&archive).unwrap();
    let db = archive.join("awr.db");
    let out = awr(&db, &["run", "examples/summarize.yaml"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let run = run_id_of(&out);
    let bin = awr_copy(dir.path());
    chmod(dir.path(), 0o755);
    chmod(&archive, 0o755);
    chmod(&db, 0o644);
    let before = names(&archive);
    let runs = as_user(NOBODY, &bin, &db, &archive, &["runs"]);
    assert_eq!(runs.code, 0, "{}", runs.stderr);
    assert!(runs.stdout.contains(&run), "{}", runs.stdout);
    let show = as_user(NOBODY, &bin, &db, &archive, &["show", &run, "--json"]);
    assert_eq!(show.code, 0, "{}", show.stderr);
    let state: serde_json::Value = serde_json::from_str(&show.stdout).unwrap();
    assert_eq!(state["status"], "completed");
    assert_eq!(names(&archive), before, "nothing made beside the database");
}

/// In a directory both may write, a user who may only read the database
/// reads it and leaves no file of SQLite's behind: one owned by the reader
/// (its `-shm` index, its `-wal`) kept the owner from writing the database
/// again (`attempt to write a readonly database`).
#[test]
fn a_reader_leaves_nothing_that_keeps_the_owner_from_writing() {
    const OWNER: u32 = 1001;
    let dir = tempfile::tempdir().unwrap();
    chmod(dir.path(), 0o777);
    let bin = awr_copy(dir.path());
    let db = dir.path().join("awr.db");
    let flow = repo_root().join("examples/summarize.yaml");
    let flow = flow.to_str().unwrap();
    let first = as_user(OWNER, &bin, &db, dir.path(), &["run", flow]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    chmod(&db, 0o644);
    let before = names(dir.path());
    let runs = as_user(NOBODY, &bin, &db, dir.path(), &["runs"]);
    assert_eq!(runs.code, 0, "{}", runs.stderr);
    assert!(runs.stdout.contains(&run_id_of(&first)), "{}", runs.stdout);
    assert_eq!(names(dir.path()), before, "nothing left by the reader");
    let again = as_user(OWNER, &bin, &db, dir.path(), &["run", flow]);
    assert_eq!(again.code, 0, "the owner writes again: {}", again.stderr);
}

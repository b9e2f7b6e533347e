//! The file store beyond the conformance suite (which every store runs in
//! its own crate, `application::testing::store_conformance`): what only
//! files have (the offset index, file modes, a torn line that is whole) and
//! what needs a second real process (`store-writer`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use application::ports::{RunLock, RunStore, StoreError};
use application::testing::store_conformance::{
    assert_not_found, completed, new_run, offsets, run_with, snapshot, warning,
};
use domain::{RunId, RunStatus};
use infrastructure::{FileRunStore, FileStoreConfig, SyncPolicy};

fn config(sync: SyncPolicy) -> FileStoreConfig {
    FileStoreConfig {
        sync,
        follow_poll: Duration::from_millis(10),
    }
}

fn open(root: &Path) -> FileRunStore {
    FileRunStore::open_with(root, config(SyncPolicy::StepBoundary)).unwrap()
}

fn log_path(store: &FileRunStore, run: RunId) -> PathBuf {
    store.run_dir(run).join("events.ndjson")
}

fn idx_path(store: &FileRunStore, run: RunId) -> PathBuf {
    store.run_dir(run).join("events.idx")
}

fn append_raw(path: &Path, bytes: &[u8]) {
    let mut f = OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(bytes).unwrap();
}

/// A run of `n` warnings written and flushed by a store that is then dropped.
async fn written_run(root: &Path, n: u64) -> RunId {
    let store = open(root);
    let (run, _lock) = run_with(&store, n).await;
    store.flush(run).await.unwrap();
    run
}

async fn all(store: &FileRunStore, run: RunId) -> Vec<u64> {
    offsets(&store.read(run, 0, usize::MAX).await.unwrap())
}

#[tokio::test]
async fn a_complete_last_line_that_is_not_json_is_cut_too() {
    let dir = tempfile::tempdir().unwrap();
    let run = written_run(dir.path(), 4).await;
    let store = open(dir.path());
    append_raw(&log_path(&store, run), b"\0\0garbage{\n");
    assert_eq!(all(&store, run).await, vec![1, 2, 3, 4]);
    let _lock = store.lock(run).await.unwrap();
    store.append(run, &[completed(run, 5)]).await.unwrap();
    assert_eq!(all(&open(dir.path()), run).await, vec![1, 2, 3, 4, 5]);
}

#[tokio::test]
async fn a_missing_stale_or_garbage_index_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let run = written_run(dir.path(), 3_000).await;
    let probe = open(dir.path());
    let idx = idx_path(&probe, run);
    let good = fs::read(&idx).unwrap();
    assert_eq!(good.len(), 3_000 * 8, "flush persists the whole index");
    drop(probe);

    let mut shifted = good.clone();
    shifted.drain(800..808); // entry 100 missing: every later entry is off by one line
    let cases: Vec<(&str, Option<Vec<u8>>)> = vec![
        ("missing", None),
        (
            "garbage",
            Some((0..20_000u32).map(|i| (i * 7919 % 251) as u8).collect()),
        ),
        ("short", Some(good[..8 * 1_000].to_vec())),
        ("torn", Some(good[..8 * 2_000 + 5].to_vec())),
        ("shifted", Some(shifted)),
        (
            "too long",
            Some([good.clone(), good[8..16 * 8].to_vec()].concat()),
        ),
    ];
    for (name, contents) in cases {
        match contents {
            None => fs::remove_file(&idx).unwrap(),
            Some(bytes) => fs::write(&idx, bytes).unwrap(),
        }
        let store = open(dir.path());
        let got = store.read(run, 2_500, 3).await.unwrap();
        assert_eq!(offsets(&got), vec![2_501, 2_502, 2_503], "{name}");
        assert_eq!(store.last_offset(run).await.unwrap(), 3_000, "{name}");
        // The writer repairs the persisted index.
        let lock = store.lock(run).await.unwrap();
        store.append(run, &[warning(run, 3_001)]).await.unwrap();
        store.flush(run).await.unwrap();
        drop((lock, store));
        assert_eq!(fs::read(&idx).unwrap().len(), 3_001 * 8, "{name}");
        assert_eq!(all(&open(dir.path()), run).await.len(), 3_001, "{name}");
        // Back to 3,000 events for the next case.
        let log = log_path(&open(dir.path()), run);
        let text = fs::read_to_string(&log).unwrap();
        let cut = text.trim_end().rfind('\n').unwrap() + 1;
        fs::write(&log, &text[..cut]).unwrap();
        fs::write(&idx, &good).unwrap();
    }
}

/// `store-writer` (a second process) on `run` of the store under `root`.
fn second_process(root: &Path, run: RunId, args: &[&str]) -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_store-writer"));
    command.arg(root).arg(run.to_string()).args(args);
    command
}

#[tokio::test]
async fn a_second_process_cannot_lock_or_write_a_locked_run() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let (run, lock) = run_with(&store, 2).await;
    store.flush(run).await.unwrap();
    let log = fs::read(log_path(&store, run)).unwrap();

    let refused = second_process(dir.path(), run, &["append", "3"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "lock: run {run} is locked: another process is writing it"
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("append: run {run} is not locked by this writer")),
        "{stderr}"
    );
    assert_eq!(
        fs::read(log_path(&store, run)).unwrap(),
        log,
        "nothing written"
    );

    drop(lock);
    let allowed = second_process(dir.path(), run, &["append", "3"])
        .output()
        .unwrap();
    assert!(
        allowed.status.success(),
        "{}",
        String::from_utf8_lossy(&allowed.stderr)
    );
    assert_eq!(all(&store, run).await, vec![1, 2, 3]);
}

#[tokio::test]
async fn a_writer_that_dies_leaves_its_run_unlocked() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let (run, lock) = run_with(&store, 1).await;
    drop(lock);
    let holder = second_process(dir.path(), run, &["hold"]);
    crate::util::a_dead_holder_releases_its_run(&store, run, holder).await;
    let _lock = store.lock(run).await.unwrap();
    store.append(run, &[warning(run, 2)]).await.unwrap();
}

#[tokio::test]
async fn a_short_run_keeps_no_index_and_a_long_one_does() {
    let dir = tempfile::tempdir().unwrap();
    let short = written_run(dir.path(), 200).await;
    let long = written_run(dir.path(), 300).await;
    let store = open(dir.path());
    assert!(!idx_path(&store, short).exists());
    assert!(idx_path(&store, long).exists());
    // Both read whole, the short one by a scan of its log.
    assert_eq!(all(&store, short).await, (1..=200).collect::<Vec<_>>());
    assert_eq!(all(&store, long).await, (1..=300).collect::<Vec<_>>());
}

#[tokio::test]
async fn files_are_private_to_their_user() {
    let dir = tempfile::tempdir().unwrap();
    // Long enough to keep an `events.idx`, which its writer leaves on close.
    let run = written_run(dir.path(), 300).await;
    let store = open(dir.path());
    let _lock = store.lock(run).await.unwrap();
    store
        .save_snapshot(&snapshot(run, 2, RunStatus::Running))
        .await
        .unwrap();
    let mode = |p: PathBuf| fs::metadata(&p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(dir.path().join("runs")), 0o700);
    assert_eq!(mode(store.run_dir(run)), 0o700);
    for name in ["events.ndjson", "events.idx", "snapshot.json"] {
        assert_eq!(mode(store.run_dir(run).join(name)), 0o600, "{name}");
    }
    // The writer locks the log itself: no lock file beside it.
    assert!(!store.run_dir(run).join("lock").exists());
    assert!(!store.run_dir(run).join("snapshot.json.tmp").exists());
}

#[tokio::test]
async fn an_unreadable_snapshot_is_corrupt_and_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let (run, _lock) = run_with(&store, 0).await;
    fs::write(store.run_dir(run).join("snapshot.json"), b"{\"version\":").unwrap();
    match store.load_snapshot(run).await {
        Err(StoreError::Corrupt(message)) => {
            assert!(message.contains("snapshot.json"), "{message}")
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    store
        .save_snapshot(&snapshot(run, 0, RunStatus::Pending))
        .await
        .unwrap();
    assert!(store.load_snapshot(run).await.unwrap().is_some());
}

#[tokio::test]
async fn list_runs_skips_what_is_not_a_run() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let (run, _lock) = run_with(&store, 0).await;
    fs::create_dir(dir.path().join("runs/not-a-run")).unwrap();
    fs::write(dir.path().join("runs/notes.txt"), b"hi").unwrap();
    // A v1 UUID is not a run id either.
    fs::create_dir(dir.path().join("runs/6ba7b810-9dad-11d1-80b4-00c04fd430c8")).unwrap();
    assert_eq!(store.list_runs().await.unwrap(), vec![run]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_sync_policy_keeps_the_contract() {
    for sync in [
        SyncPolicy::Always,
        SyncPolicy::StepBoundary,
        SyncPolicy::Never,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(FileRunStore::open_with(dir.path(), config(sync)).unwrap());
        assert_eq!(store.sync_policy(), sync);
        let (runs, _locks): (Vec<RunId>, Vec<RunLock>) =
            futures::future::join_all((0..4).map(|_| run_with(&*store, 0)))
                .await
                .into_iter()
                .unzip();
        let writers = runs.iter().map(|&run| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                for o in 1..=20 {
                    store.append(run, &[warning(run, o)]).await.unwrap();
                    if o % 5 == 0 {
                        store.flush(run).await.unwrap();
                    }
                }
            })
        });
        for w in futures::future::join_all(writers).await {
            w.unwrap();
        }
        let reopened = open(dir.path());
        for run in runs {
            assert_eq!(
                all(&reopened, run).await,
                (1..=20).collect::<Vec<_>>(),
                "{sync:?}"
            );
        }
    }
}

#[tokio::test]
async fn a_run_directory_without_its_log_is_repaired_by_the_writer() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let run = new_run();
    fs::create_dir_all(store.run_dir(run)).unwrap();
    assert_not_found(
        store.read(run, 0, 1).await,
        run,
        "read of a half-created run",
    );
    let store = open(dir.path());
    let _lock = store.lock(run).await.unwrap();
    store.append(run, &[warning(run, 1)]).await.unwrap();
    assert_eq!(all(&store, run).await, vec![1]);
}

/// `awr run` failed (exit 1, echoed by the script as `run exited 1`) on a
/// full disk, and said that nothing of the run was recorded and it is gone.
fn assert_removed_for_a_full_disk(stdout: &str, stderr: &str) {
    assert!(stdout.contains("run exited 1"), "{stdout}{stderr}");
    assert!(
        stderr.contains("No space left on device")
            && stderr.contains("nothing of the run was recorded, and it is removed"),
        "{stderr}"
    );
}

/// A full disk at a run's first event: `awr run` fails (exit 1), says that
/// nothing of the run was recorded, and leaves no run behind, where one was
/// listed `pending` for ever and `awr resume` could only answer that it
/// never started. The disk is a 300 KiB tmpfs in a mount namespace of the
/// commands' own (`unshare`, util-linux), gone with it.
#[test]
fn a_run_whose_first_event_finds_the_disk_full_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let disk = dir.path().join("disk");
    fs::create_dir(&disk).unwrap();
    let input = dir.path().join("input.json");
    fs::write(&input, serde_json::to_string(&"y".repeat(400_000)).unwrap()).unwrap();
    // Both commands in the one namespace: the run, then the listing.
    let script = r#"mount -t tmpfs -o size=300k tmpfs "$1" || exit 99
        "$2" --storage "$1/st" run examples/summarize.yaml --input "@$3"
        echo "run exited $?"
        "$2" --storage "$1/st" runs"#;
    let out = crate::util::in_mount_namespace(
        script,
        &[
            disk.as_os_str(),
            crate::util::awr_bin().as_os_str(),
            input.as_os_str(),
        ],
    );
    let (stdout, stderr) = (&out.stdout, &out.stderr);
    assert_removed_for_a_full_disk(stdout, stderr);
    assert!(
        !stderr.contains("awr resume"),
        "no resume offered: {stderr}"
    );
    let listed: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("run exited"))
        .collect();
    assert_eq!(listed.len(), 2, "the header alone, no run: {stdout}");
}

/// A disk so full that the run's first transcript line fails before its
/// log is written: the same as a log that fails, nothing left behind, its
/// directory and its empty transcript removed too.
#[test]
fn a_run_whose_first_transcript_line_finds_the_disk_full_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let disk = dir.path().join("disk");
    fs::create_dir(&disk).unwrap();
    let script = r#"mount -t tmpfs -o size=4k tmpfs "$1" || exit 99
        "$2" --storage "$1/st" run examples/summarize.yaml
        echo "run exited $?"
        find "$1/st/runs" "$1/st/transcripts" -mindepth 1 -printf 'left %P\n'"#;
    let out = crate::util::in_mount_namespace(
        script,
        &[disk.as_os_str(), crate::util::awr_bin().as_os_str()],
    );
    let (stdout, stderr) = (&out.stdout, &out.stderr);
    assert_removed_for_a_full_disk(stdout, stderr);
    assert!(!stdout.contains("left "), "nothing left: {stdout}");
}

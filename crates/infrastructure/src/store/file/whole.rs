//! Runs that appear and go whole: [`RunStore::import_run`] and
//! [`RunStore::delete_run`] of the file store, each made visible to readers
//! by one `rename` of the run's directory.
//!
//! - Import builds the run in a staging directory beside `runs/`
//!   (`<root>/.import-XXXX/runs/<run-id>`, written by an ordinary file store
//!   there, so its files are exactly those `append` and `save_snapshot`
//!   write), makes it durable, and renames it to `runs/<run-id>` with
//!   `RENAME_NOREPLACE`: a run that appeared meanwhile is a conflict, never
//!   overwritten. Before the rename readers see nothing (`list_runs` reads
//!   `runs/` only).
//! - Delete takes the run's lock (so a writer refuses it and none can
//!   start), renames `runs/<run-id>` to the hidden tombstone
//!   `runs/.deleted-<run-id>-<nonce>` (not a run id, so no reader lists or
//!   opens it), syncs `runs/`, and only then removes the tombstone's files.
//! - What a crash leaves (tombstones, staging directories whose importer is
//!   gone) is removed by the first `list_runs`, import or delete of the
//!   next store instance.

use std::fs;
use std::io;
use std::path::Path;
use std::sync::atomic::Ordering;

use application::ports::{EventBatches, RunStore, StoreError};
use domain::{RunId, RunSnapshot};
use futures::StreamExt;
use rustix::fs::{CWD, RenameFlags, renameat_with};
use rustix::io::Errno;

use super::log::io_err;
use super::{FileRunStore, FileStoreConfig, SyncPolicy, lock};

/// Name prefix of a deleted run's directory, inside `runs/`.
const TOMBSTONE_PREFIX: &str = ".deleted-";

/// Name prefix of an import's staging directory, inside the store's root.
const STAGING_PREFIX: &str = ".import-";

impl FileRunStore {
    pub(super) async fn delete_whole(&self, run_id: RunId) -> Result<(), StoreError> {
        self.sweep_once().await;
        let inner = &self.inner;
        let handle = inner.handle(run_id)?;
        // Held until the directory is gone from `runs/`: a writer refuses
        // the deletion, and none can start in the middle of it.
        let run_lock = super::lock::take(std::sync::Arc::clone(&handle))?;
        let tombstone = inner.runs_dir.join(format!(
            "{TOMBSTONE_PREFIX}{run_id}-{}",
            uuid::Uuid::new_v4().simple()
        ));
        fs::rename(&handle.paths.dir, &tombstone)
            .map_err(|e| io_err("delete (rename)", &handle.paths.dir, e))?;
        lock(&inner.handles).remove(&run_id);
        drop(run_lock);
        drop(handle);
        // Durable before any file goes: a crash from here on finds the run
        // gone, never half there.
        if inner.config.sync != SyncPolicy::Never {
            sync_dir(&inner.runs_dir)?;
        }
        remove_tree(tombstone).await;
        Ok(())
    }

    pub(super) async fn import_whole(
        &self,
        run_id: RunId,
        mut events: EventBatches,
        snapshot: Option<RunSnapshot>,
    ) -> Result<(), StoreError> {
        self.sweep_once().await;
        let inner = &self.inner;
        let target = inner.runs_dir.join(run_id.to_string());
        if fs::symlink_metadata(&target).is_ok() {
            return Err(StoreError::Conflict(format!("run {run_id} already exists")));
        }
        // Removed on every early return; a crash leaves it to the sweep.
        let staging = tempfile::Builder::new()
            .prefix(STAGING_PREFIX)
            .tempdir_in(&inner.root)
            .map_err(|e| io_err("create a staging directory in", &inner.root, e))?;
        let stage = FileRunStore::open_with(
            staging.path(),
            FileStoreConfig {
                sync: inner.config.sync,
                ..FileStoreConfig::default()
            },
        )?;
        let run_lock = stage.create_run(run_id).await?;
        while let Some(batch) = events.next().await {
            stage.append(run_id, &batch?).await?;
        }
        if let Some(snapshot) = snapshot {
            if snapshot.run_id != run_id {
                return Err(StoreError::Conflict(format!(
                    "run {run_id}: the snapshot is of run {}",
                    snapshot.run_id
                )));
            }
            stage.save_snapshot(&snapshot).await?;
        }
        // The log, its blobs and directory entries (a new run's first flush
        // syncs the file system, snapshot included).
        stage.flush(run_id).await?;
        let staged = stage.run_dir(run_id);
        // Still locked while it moves: a sweep by another process takes a
        // staged run whose lock nobody holds for a crash's leftover.
        match renameat_with(CWD, &staged, CWD, &target, RenameFlags::NOREPLACE) {
            Ok(()) => {}
            Err(Errno::EXIST | Errno::NOTEMPTY) => {
                return Err(StoreError::Conflict(format!("run {run_id} already exists")));
            }
            Err(e) => return Err(io_err("move into place", &target, io::Error::from(e))),
        }
        drop(run_lock);
        if inner.config.sync != SyncPolicy::Never {
            sync_dir(&inner.runs_dir)?;
        }
        Ok(())
    }

    /// Removes what crashed imports and deletions left, once per store
    /// instance: tombstones in `runs/`, and staging directories whose run
    /// is no longer locked by an importer.
    pub(super) async fn sweep_once(&self) {
        if self.inner.swept.swap(true, Ordering::AcqRel) {
            return;
        }
        let inner = &self.inner;
        for entry in read_dir_names(&inner.runs_dir) {
            if entry.starts_with(TOMBSTONE_PREFIX) {
                remove_tree(inner.runs_dir.join(entry)).await;
            }
        }
        for entry in read_dir_names(&inner.root) {
            if !entry.starts_with(STAGING_PREFIX) {
                continue;
            }
            let staging = inner.root.join(&entry);
            if staging_in_use(&staging) {
                continue;
            }
            remove_tree(staging).await;
        }
    }
}

/// Whether an importer still writes the staged run in `staging`: it is
/// young (an importer may be between creating the run's directory, its log
/// and its lock), or its run's lock is held.
fn staging_in_use(staging: &Path) -> bool {
    // Old enough, with no lock held, it was left by a crash.
    let young = fs::metadata(staging)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_none_or(|age| age < crate::blobs::STALE_TEMP_AGE);
    if young {
        return true;
    }
    let runs = read_dir_names(&staging.join("runs"));
    let Some(run) = runs.first() else {
        return false;
    };
    let Ok(run_id) = run.parse::<RunId>() else {
        return false;
    };
    let log = staging.join("runs").join(run).join("events.ndjson");
    super::lock::probe_file(&log, run_id).unwrap_or(true)
}

fn read_dir_names(dir: &Path) -> Vec<String> {
    match fs::read_dir(dir) {
        Ok(entries) => entries
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// Removes a directory tree no reader can reach any more, off the async
/// threads; a failure is logged (the next sweep tries again).
async fn remove_tree(dir: std::path::PathBuf) {
    let result = tokio::task::spawn_blocking(move || match fs::remove_dir_all(&dir) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err((dir, e)),
        _ => Ok(()),
    })
    .await;
    if let Ok(Err((dir, e))) = result {
        tracing::warn!(dir = %dir.display(), error = %e, "cannot remove a deleted run's files; the next prune tries again");
    }
}

/// `fsync` of a directory, so a rename in it is durable.
fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_err("sync", dir, e))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use application::testing::store_conformance::{new_run, run_with};

    use super::*;

    /// What a crash between the rename and the removal leaves (a tombstone),
    /// and an import that died before its rename (a staging directory an
    /// hour old whose run nobody locks), are invisible to readers and swept
    /// by the next deletion; a staging directory whose importer is alive,
    /// or that is younger, is left alone.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn crash_leftovers_are_invisible_and_swept() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileRunStore::open(dir.path()).unwrap();
        let runs = dir.path().join("runs");
        let dead = new_run();
        let tombstone = runs.join(format!("{TOMBSTONE_PREFIX}{dead}-0"));
        fs::create_dir_all(&tombstone).unwrap();
        fs::write(tombstone.join("events.ndjson"), "{\"half").unwrap();
        // A crashed import's staging directory, and a live one.
        let crashed = dir.path().join(format!("{STAGING_PREFIX}crashed"));
        let crashed_store = FileRunStore::open(&crashed).unwrap();
        drop(run_with(&crashed_store, 2).await.1);
        // Old enough to be a crash's: a young one may be an importer's
        // between creating its run and locking it.
        let young_crash = dir.path().join(format!("{STAGING_PREFIX}young"));
        let young_store = FileRunStore::open(&young_crash).unwrap();
        drop(run_with(&young_store, 2).await.1);
        let two_hours_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(7200);
        fs::File::open(&crashed)
            .unwrap()
            .set_modified(two_hours_ago)
            .unwrap();
        let live = dir.path().join(format!("{STAGING_PREFIX}live"));
        let live_store = FileRunStore::open(&live).unwrap();
        let (_, live_lock) = run_with(&live_store, 2).await;

        assert!(store.list_runs().await.unwrap().is_empty());
        let (run, lock) = run_with(&store, 1).await;
        drop(lock);
        store.delete_run(run).await.unwrap();
        assert!(!tombstone.exists(), "tombstone swept");
        assert!(!crashed.exists(), "crashed staging swept");
        assert!(live.exists(), "a live import is left alone");
        assert!(young_crash.exists(), "a young one is left alone");
        assert_eq!(read_dir_names(&runs), Vec::<String>::new());
        drop(live_lock);
    }
}

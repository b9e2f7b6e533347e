//! One writer per run: the run's `lock` file, `flock`ed exclusively.
//!
//! `flock` locks belong to an open file description, so a second store
//! instance (even in this process) and a second process are refused alike,
//! and the kernel releases the lock when the holder's file is closed,
//! including when the process dies: a crashed writer never leaves a run
//! locked. The lock is taken without waiting (`LOCK_NB`): a run that is
//! being written is an error to report, not a queue to join. The file is
//! opened close-on-exec, so an agent process a run spawns does not inherit
//! (and keep) its lock.
//!
//! Whether a run has a writer ([`probe`]) is asked with a shared `flock`,
//! released at once, rather than by reading `/proc/locks`: it is one
//! syscall on the run's own file, exact for this process's locks too,
//! independent of procfs and mount namespaces, and portable beyond Linux.
//! Its cost is that a locker can meet the probe's shared lock for an
//! instant; `lock_file` tells that apart from a writer and tries again.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};

use application::ports::{RunLock, StoreError};
use domain::RunId;
use rustix::fs::{FlockOperation, flock};
use rustix::io::Errno;

use super::RunHandle;
use super::log::{FILE_MODE, RunPaths};
use crate::store::{locked_elsewhere, locked_here, not_locked};

/// This store's hold on one run: the locked file while a [`RunLock`] lives.
#[derive(Debug, Default)]
pub(super) struct WriterSlot(RwLock<Option<LockedFile>>);

impl WriterSlot {
    /// Proof that this store holds the run's lock, kept for the length of a
    /// write so the lock cannot be released halfway through it.
    pub(super) fn held(
        &self,
        paths: &RunPaths,
    ) -> Result<RwLockReadGuard<'_, Option<LockedFile>>, StoreError> {
        let slot = self.0.read().unwrap_or_else(PoisonError::into_inner);
        if slot.is_none() {
            return Err(not_locked(paths.run_id));
        }
        Ok(slot)
    }
}

/// What a file store's [`RunLock`] holds: dropping it closes the lock file,
/// which releases the `flock`.
struct Held(Arc<RunHandle>);

impl Drop for Held {
    /// Syncs and closes the log as its writer first (closing persists the
    /// index), so the next writer finds it durable and complete, and so
    /// that this store, reading or writing the run later, reopens the log
    /// and catches up with what others appended meanwhile instead of
    /// trusting what it last wrote.
    fn drop(&mut self) {
        let handle = &self.0;
        let mut slot = handle
            .writer
            .0
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let log = handle
            .log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(log) = log {
            handle.sync_on_release(&log);
        }
        drop(slot.take());
    }
}

/// Takes the lock of the run of `handle`, whose directory exists.
pub(super) fn take(handle: Arc<RunHandle>) -> Result<RunLock, StoreError> {
    let run_id = handle.paths.run_id;
    {
        // Held while locking, so two lockers in this store cannot both try.
        let mut slot = handle
            .writer
            .0
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        // Refused before touching the file: a second `flock` through a new
        // descriptor would be refused too, but as if another process held it.
        if slot.is_some() {
            return Err(locked_here(run_id));
        }
        *slot = Some(lock_file(&handle.paths)?);
    }
    Ok(RunLock::new(run_id, Held(handle)))
}

/// Whether anyone holds the run's lock: a shared `flock` on a descriptor of
/// our own, taken without waiting and released at once, is refused exactly
/// while some descriptor holds the exclusive one (this store's included).
/// Creates nothing: no `lock` file means no writer ever locked the run.
pub(super) fn probe(paths: &RunPaths) -> Result<bool, StoreError> {
    probe_file(&paths.lock, paths.run_id)
}

/// [`probe`] of the lock file `path` of `run_id`: shared by every store that
/// locks runs with a file (the SQLite store keeps one per run too).
pub(in crate::store) fn probe_file(path: &Path, run_id: RunId) -> Result<bool, StoreError> {
    let file = match crate::fs::open_regular(path) {
        Ok(file) => file,
        Err(crate::fs::FileReadError::NotFound { .. }) => return Ok(false),
        Err(e) => {
            return Err(StoreError::Io(format!(
                "cannot probe the lock of run {run_id}: {e}"
            )));
        }
    };
    match flock(&file, FlockOperation::NonBlockingLockShared) {
        // Closing the file releases the shared lock; unlocking first makes
        // the window in which a writer's `lock` meets it as short as it gets.
        Ok(()) => {
            let _ = flock(&file, FlockOperation::Unlock);
            Ok(false)
        }
        Err(Errno::WOULDBLOCK) => Ok(true),
        Err(e) => Err(StoreError::Io(format!(
            "cannot probe {}: {}",
            path.display(),
            std::io::Error::from(e)
        ))),
    }
}

/// How long a locker waits out probes ([`probe`]) holding the shared lock:
/// each holds it for microseconds, so this bound is only reached when probes
/// keep arriving back to back.
const PROBE_PATIENCE: Duration = Duration::from_millis(100);

/// Pause between attempts while probes hold the shared lock.
const PROBE_RETRY: Duration = Duration::from_micros(200);

/// Opens (creating it if needed) and locks the run's `lock` file.
///
/// The exclusive lock is refused both by a writer (exclusive) and by a
/// probe (shared, for an instant). A shared attempt of our own tells them
/// apart: refused, a writer holds the run and that is `Locked` at once;
/// granted, only probes were in the way, so it is dropped and the
/// exclusive lock tried again, for at most [`PROBE_PATIENCE`].
fn lock_file(paths: &RunPaths) -> Result<LockedFile, StoreError> {
    lock_path(&paths.lock, paths.run_id)
}

/// [`lock_file`] of the lock file `path` of `run_id`, created (0600) if
/// needed: shared by every store that locks runs with a file.
pub(in crate::store) fn lock_path(path: &Path, run_id: RunId) -> Result<LockedFile, StoreError> {
    let mut options = OpenOptions::new();
    options.read(true).write(true).create(true).mode(FILE_MODE);
    let file = crate::fs::open_regular_with(options, path)
        .map_err(|e| StoreError::Io(format!("cannot lock run {run_id}: {e}")))?;
    let deadline = Instant::now() + PROBE_PATIENCE;
    loop {
        match flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(LockedFile(file)),
            Err(Errno::WOULDBLOCK) => {}
            Err(e) => return Err(flock_err(path, e)),
        }
        match flock(&file, FlockOperation::NonBlockingLockShared) {
            Ok(()) => {
                // Only probes: drop our shared lock and try again.
                flock(&file, FlockOperation::Unlock).map_err(|e| flock_err(path, e))?;
            }
            Err(Errno::WOULDBLOCK) => return Err(locked_elsewhere(run_id)),
            Err(e) => return Err(flock_err(path, e)),
        }
        if Instant::now() >= deadline {
            tracing::warn!(run = %run_id, "probes kept the run's lock busy; giving up");
            return Err(locked_elsewhere(run_id));
        }
        std::thread::sleep(PROBE_RETRY);
    }
}

/// A lock file this process holds the exclusive lock of, released when
/// dropped. Released by an explicit unlock, not only by closing: a child
/// process forked by another thread holds a copy of every descriptor until
/// it execs, and the lock belongs to the open file, which closing our copy
/// leaves open, so the run would look locked for that instant; an unlock
/// releases it whatever copies there are.
#[derive(Debug)]
pub(in crate::store) struct LockedFile(File);

impl Drop for LockedFile {
    fn drop(&mut self) {
        if let Err(e) = flock(&self.0, FlockOperation::Unlock) {
            tracing::warn!(error = %std::io::Error::from(e), "cannot unlock a run's lock file; closing it");
        }
    }
}

fn flock_err(path: &Path, e: Errno) -> StoreError {
    StoreError::Io(format!(
        "cannot lock {}: {}",
        path.display(),
        std::io::Error::from(e)
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A released lock is free at once, even while a copy of its
    /// descriptor lives on (as in a child forked by another thread, until
    /// it execs): a duplicate shares the open file, as a fork's copy does.
    #[test]
    fn a_released_lock_is_free_while_a_copy_of_its_descriptor_lives() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        let run: RunId = "00000000-0000-4000-8000-000000000001".parse().unwrap();
        let held = lock_path(&path, run).unwrap();
        let copy = held.0.try_clone().unwrap();
        assert!(probe_file(&path, run).unwrap(), "held");
        drop(held);
        assert!(!probe_file(&path, run).unwrap(), "released");
        let again = lock_path(&path, run);
        assert!(again.is_ok(), "{again:?}");
        drop(copy);
    }
}

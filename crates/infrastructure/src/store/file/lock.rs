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

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard};

use application::ports::{RunLock, StoreError};
use rustix::fs::{FlockOperation, flock};
use rustix::io::Errno;

use super::RunHandle;
use super::log::{FILE_MODE, RunPaths};
use crate::store::{locked_elsewhere, locked_here, not_locked};

/// This store's hold on one run: the locked file while a [`RunLock`] lives.
#[derive(Debug, Default)]
pub(super) struct WriterSlot(RwLock<Option<File>>);

impl WriterSlot {
    /// Proof that this store holds the run's lock, kept for the length of a
    /// write so the lock cannot be released halfway through it.
    pub(super) fn held(
        &self,
        paths: &RunPaths,
    ) -> Result<RwLockReadGuard<'_, Option<File>>, StoreError> {
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

/// Opens (creating it if needed) and locks the run's `lock` file.
fn lock_file(paths: &RunPaths) -> Result<File, StoreError> {
    let mut options = OpenOptions::new();
    options.read(true).write(true).create(true).mode(FILE_MODE);
    let file = crate::fs::open_regular_with(options, &paths.lock)
        .map_err(|e| StoreError::Io(format!("cannot lock run {}: {e}", paths.run_id)))?;
    match flock(&file, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(file),
        Err(Errno::WOULDBLOCK) => Err(locked_elsewhere(paths.run_id)),
        Err(e) => Err(StoreError::Io(format!(
            "cannot lock {}: {}",
            paths.lock.display(),
            std::io::Error::from(e)
        ))),
    }
}

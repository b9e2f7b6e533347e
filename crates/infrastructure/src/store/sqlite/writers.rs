//! One writer per run without a file per run: a lock on one byte of
//! `<db>-writers`, the byte at the run's `lock_slot` (a number the `runs`
//! row is given when it is inserted).
//!
//! The locks are open file description (OFD) byte-range locks
//! (`F_OFD_SETLK`): like a `flock`, they belong to the open file, so a
//! second store instance (even in this process) and a second process are
//! refused alike, and the kernel releases them when the holder's file is
//! closed, including when the process dies. Unlike a `flock` on a file per
//! run, a new run creates no file (on ext4 an inode allocation cost a short
//! run as much as a sync), and whether a run has a writer is asked with
//! `F_OFD_GETLK`, which takes no lock: a probe never gets in a locker's way.
//!
//! The writer's record (see `file::holder`) is the `runs.writer` column,
//! written when the lock is taken and cleared by the append that pauses
//! or settles the run (or at release): a lock held while the record names a
//! dead process is held by a process that inherited the writer's
//! descriptor between its fork and its exec, not by a writer.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, fcntl};
use nix::libc;

use super::FILE_MODE;

/// The lock file of one database, opened once per store instance.
#[derive(Debug)]
pub(super) struct Writers {
    path: PathBuf,
    /// Opened on first use: a read-only store finds the file once a writer
    /// has made it.
    file: OnceLock<File>,
}

impl Writers {
    /// The lock file beside the database's real file `real`.
    pub(super) fn beside(real: &Path) -> Self {
        let mut path = real.as_os_str().to_owned();
        path.push("-writers");
        Self {
            path: PathBuf::from(path),
            file: OnceLock::new(),
        }
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// The file, opened (and created, 0600) now if it is not yet; `None`
    /// when it does not exist and cannot be made (a read-only store before
    /// any writer made it): then nobody holds a run. Any other failure (a
    /// file this user may not read) is an error, never "no writer".
    fn file(&self) -> io::Result<Option<&File>> {
        if let Some(file) = self.file.get() {
            return Ok(Some(file));
        }
        let mut options = OpenOptions::new();
        options.read(true).write(true).create(true).mode(FILE_MODE);
        let opened = crate::fs::open_regular_with(options, &self.path)
            .or_else(|_| crate::fs::open_regular(&self.path));
        match opened {
            Ok(file) => {
                let _ = self.file.set(file);
                Ok(self.file.get())
            }
            Err(crate::fs::FileReadError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Locks byte `slot` without waiting: `false` when another open file
    /// holds it. This store's own locks never refuse it: the caller keeps
    /// track of those.
    pub(super) fn try_lock(&self, slot: i64) -> io::Result<bool> {
        let file = self.file()?.ok_or_else(|| io::Error::from(Errno::EROFS))?;
        match fcntl(file, FcntlArg::F_OFD_SETLK(&range(libc::F_WRLCK, slot))) {
            Ok(_) => Ok(true),
            Err(Errno::EAGAIN | Errno::EACCES) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Releases byte `slot`: released whatever copies of the descriptor a
    /// child forked meanwhile still holds (closing ours would not).
    pub(super) fn unlock(&self, slot: i64) {
        let Some(file) = self.file.get() else {
            return;
        };
        if let Err(e) = fcntl(file, FcntlArg::F_OFD_SETLK(&range(libc::F_UNLCK, slot))) {
            tracing::warn!(file = %self.path.display(), slot, error = %e, "cannot release a run's lock");
        }
    }

    /// Whether an open file other than this store's holds byte `slot`.
    pub(super) fn held_elsewhere(&self, slot: i64) -> io::Result<bool> {
        let Some(file) = self.file()? else {
            return Ok(false);
        };
        let mut probe = range(libc::F_WRLCK, slot);
        fcntl(file, FcntlArg::F_OFD_GETLK(&mut probe))?;
        Ok(i32::from(probe.l_type) != libc::F_UNLCK)
    }
}

/// A lock request of `kind` on byte `slot`.
fn range(kind: libc::c_int, slot: i64) -> libc::flock {
    libc::flock {
        // The lock kinds and `SEEK_SET` are small constants.
        l_type: kind as libc::c_short,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: slot,
        l_len: 1,
        // Must be 0 for OFD locks.
        l_pid: 0,
    }
}

/// A run's byte, locked by this store: released when dropped.
#[derive(Debug)]
pub(super) struct SlotLock {
    writers: Arc<Writers>,
    slot: i64,
}

impl SlotLock {
    pub(super) fn new(writers: Arc<Writers>, slot: i64) -> Self {
        Self { writers, slot }
    }
}

impl Drop for SlotLock {
    fn drop(&mut self) {
        self.writers.unlock(self.slot);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Two opens of the file (two store instances) exclude each other per
    /// byte, the same open never refuses itself, a probe sees only others'
    /// locks and takes none, and an unlock frees the byte at once.
    #[test]
    fn bytes_are_locked_per_open_file_and_probed_without_a_lock() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("runs.db");
        let (a, b) = (Writers::beside(&real), Writers::beside(&real));
        assert!(a.try_lock(7).unwrap());
        assert!(a.try_lock(7).unwrap(), "its own lock");
        assert!(!b.try_lock(7).unwrap(), "another open file's");
        assert!(b.try_lock(8).unwrap(), "another byte");
        assert!(b.held_elsewhere(7).unwrap());
        assert!(!a.held_elsewhere(7).unwrap(), "its own");
        for _ in 0..3 {
            assert!(b.held_elsewhere(7).unwrap(), "a probe leaves it held");
        }
        a.unlock(7);
        assert!(!b.held_elsewhere(7).unwrap());
        assert!(b.try_lock(7).unwrap());
        assert_eq!(a.path(), dir.path().join("runs.db-writers"));
    }
}

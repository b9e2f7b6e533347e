//! One writer per run: the run's log, `flock`ed exclusively through a
//! descriptor of its own (the log needs no lock file beside it: a new run
//! creates one file fewer, which on a busy ext4 disk cost a short run about
//! as much as a sync). Readers of the log take no lock.
//!
//! `flock` locks belong to an open file description, so a second store
//! instance (even in this process) and a second process are refused alike,
//! and the kernel releases the lock when the holder's file is closed,
//! including when the process dies. The lock is taken without waiting
//! (`LOCK_NB`): a run that is being written is an error to report, not a
//! queue to join. The file is opened close-on-exec, so an agent process a
//! run spawns does not keep its lock past its exec.
//!
//! Whether a run has a writer ([`probe`]) is asked with a shared `flock`,
//! released at once, rather than by reading `/proc/locks`: it is one
//! syscall on the run's own file, exact for this process's locks too,
//! independent of procfs and mount namespaces, and portable beyond Linux.
//! Its cost is that a locker can meet the probe's shared lock for an
//! instant; `lock_file` tells that apart from a writer and tries again.
//!
//! A held lock is a live writer only if the writer recorded on the log
//! lives (see `holder`): a writer killed while a child it was starting
//! had not yet exec'd leaves its lock to that child for a moment. The probe
//! then says no writer, and a locker waits (at most [`ORPHAN_PATIENCE`])
//! for that child to let go, instead of refusing the run to its resume.

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
use super::holder::{self, Record};
use super::log::{FILE_MODE, RunPaths};
use crate::store::{locked_by_leftover, locked_elsewhere, locked_here, not_locked};

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
        handle.release_snapshot();
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
        *slot = Some(lock_path(&handle.paths.log, run_id)?);
    }
    Ok(RunLock::new(run_id, Held(handle)))
}

/// Whether anyone holds the run's lock: a shared `flock` on a descriptor of
/// our own, taken without waiting and released at once, is refused exactly
/// while some descriptor holds the exclusive one (this store's included).
/// Creates nothing: no log means no writer.
pub(super) fn probe(paths: &RunPaths) -> Result<bool, StoreError> {
    probe_file(&paths.log, paths.run_id)
}

/// [`probe`] of the locked file `path` of `run_id`.
pub(in crate::store) fn probe_file(path: &Path, run_id: RunId) -> Result<bool, StoreError> {
    let file = match crate::fs::open_regular(path) {
        Ok(file) => file,
        Err(crate::fs::FileReadError::NotFound { .. }) => return Ok(false),
        Err(e) => {
            return Err(StoreError::io(
                format!("cannot probe the lock of run {run_id}"),
                e.into(),
            ));
        }
    };
    let deadline = Instant::now() + RECORD_PATIENCE;
    loop {
        match flock(&file, FlockOperation::NonBlockingLockShared) {
            // Closing the file releases the shared lock; unlocking first makes
            // the window in which a writer's `lock` meets it as short as it gets.
            Ok(()) => {
                let _ = flock(&file, FlockOperation::Unlock);
                return Ok(false);
            }
            Err(Errno::WOULDBLOCK) => {}
            Err(e) => {
                return Err(StoreError::io(
                    format!("cannot probe {}", path.display()),
                    e.into(),
                ));
            }
        }
        match holder::read_record(&file) {
            Record::Writer { alive: false, .. } => {}
            Record::Unknown | Record::Writer { alive: true, .. } => return Ok(true),
        }
        // Held, and its record names a dead writer: a process that
        // inherited the dead writer's descriptor holds it, or a new writer
        // took it an instant ago and writes its record next. The latter
        // shows within microseconds; the former is no writer.
        if Instant::now() >= deadline {
            return Ok(false);
        }
        std::thread::sleep(PROBE_RETRY);
    }
}

/// How long a probe that finds the lock held under a dead writer's record
/// waits for a new writer's record before it says no writer: a writer
/// writes its record right after it takes the lock, in the same call.
pub(in crate::store) const RECORD_PATIENCE: Duration = Duration::from_millis(50);

/// How long a locker waits for the lock of a dead writer to be let go by
/// the process that inherited it (a child in the instant between its fork
/// and its exec, which closes the descriptor): milliseconds, even on a
/// loaded machine; a process that keeps it longer is reported.
pub(in crate::store) const ORPHAN_PATIENCE: Duration = Duration::from_secs(2);

/// How long a locker waits out probes ([`probe`]) holding the shared lock:
/// each holds it for microseconds, so this bound is only reached when probes
/// keep arriving back to back. Seconds, not milliseconds: on a loaded
/// machine a prober can be descheduled while it holds the shared lock, and
/// a writer is told apart at once anyway (its lock refuses the shared one).
const PROBE_PATIENCE: Duration = Duration::from_secs(2);

/// Pause between attempts while probes hold the shared lock.
pub(in crate::store) const PROBE_RETRY: Duration = Duration::from_micros(200);

/// Opens (creating it, 0600, if needed) and locks the file `path` of
/// `run_id` (its log), and records this process as its writer (see
/// `holder`).
///
/// The exclusive lock is refused both by a writer (exclusive) and by a
/// probe (shared, for an instant). A shared attempt of our own tells them
/// apart: refused, a writer holds the run and that is `Locked` at once,
/// unless the writer the file records is dead (then it is tried again for
/// at most [`ORPHAN_PATIENCE`], see the module's doc); granted, only probes
/// were in the way, so it is dropped and the exclusive lock tried again,
/// for at most [`PROBE_PATIENCE`].
pub(in crate::store) fn lock_path(path: &Path, run_id: RunId) -> Result<LockedFile, StoreError> {
    lock_waiting(path, run_id, ORPHAN_PATIENCE)
}

/// [`lock_path`], waiting at most `orphan_patience` for a dead writer's
/// lock to be let go.
fn lock_waiting(
    path: &Path,
    run_id: RunId,
    orphan_patience: Duration,
) -> Result<LockedFile, StoreError> {
    let mut options = OpenOptions::new();
    options.read(true).write(true).create(true).mode(FILE_MODE);
    let file = crate::fs::open_regular_with(options, path)
        .map_err(|e| StoreError::io(format!("cannot lock run {run_id}"), e.into()))?;
    let started = Instant::now();
    loop {
        match flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {
                holder::write_record(&file);
                return Ok(LockedFile(file));
            }
            Err(Errno::WOULDBLOCK) => {}
            Err(e) => return Err(flock_err(path, e)),
        }
        let dead_writer = match flock(&file, FlockOperation::NonBlockingLockShared) {
            Ok(()) => {
                // Only probes: drop our shared lock and try again.
                flock(&file, FlockOperation::Unlock).map_err(|e| flock_err(path, e))?;
                None
            }
            Err(Errno::WOULDBLOCK) => match holder::read_record(&file) {
                // A dead writer's lock, kept by a process that inherited
                // it: wait for that process to exec or exit.
                Record::Writer { pid, alive: false } => Some(pid),
                Record::Unknown | Record::Writer { alive: true, .. } => {
                    return Err(locked_elsewhere(run_id));
                }
            },
            Err(e) => return Err(flock_err(path, e)),
        };
        let waited = started.elapsed();
        match dead_writer {
            Some(pid) if waited >= orphan_patience => {
                tracing::warn!(run = %run_id, writer = pid, "the dead writer's lock is still held; giving up");
                return Err(locked_by_leftover(run_id, pid));
            }
            None if waited >= PROBE_PATIENCE => {
                tracing::warn!(run = %run_id, "probes kept the run's lock busy; giving up");
                return Err(locked_elsewhere(run_id));
            }
            _ => {}
        }
        std::thread::sleep(PROBE_RETRY);
    }
}

/// A file (a run's log, opened for its lock alone) this process holds the
/// exclusive lock of, released when dropped. Released by an explicit unlock, not only by closing: a child
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
    StoreError::io(format!("cannot lock {}", path.display()), e.into())
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

    /// Polls `done` (1 ms apart) until it holds; fails after 20 s.
    fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !done() {
            assert!(Instant::now() < deadline, "waited 20 s for {what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// A writer killed while a process it started still held a copy of its
    /// lock's descriptor (every child holds one between its fork and its
    /// exec) leaves the lock held, but by no writer: the probe says so, and
    /// a locker waits for that process to let go rather than refusing the
    /// run. `flock` (util-linux) stands in for the writer: it locks the file
    /// and starts a command with the descriptor, as a writer starting an
    /// agent does until the agent execs; the command waits for a gate.
    #[test]
    fn a_dead_writers_lock_kept_by_a_process_it_started_is_no_writer() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        let gate = dir.path().join("gate");
        let run: RunId = "00000000-0000-4000-8000-000000000002".parse().unwrap();
        std::fs::write(&path, "").unwrap();
        let started = dir.path().join("started");
        // The child says it runs before it waits: `flock` locks, then
        // forks it, and a writer killed before that fork leaves no holder.
        let wait_for_gate = format!(
            ": > '{}'; while [ ! -e '{}' ]; do sleep 0.01; done",
            started.display(),
            gate.display()
        );
        let mut writer = std::process::Command::new("flock")
            .args(["--exclusive", "--nonblock"])
            .arg(&path)
            .args(["sh", "-c", &wait_for_gate])
            .spawn()
            .unwrap();
        // No record yet (an older awr writes none): the lock is the evidence.
        wait_until("the writer's lock", || probe_file(&path, run).unwrap());
        wait_until("the writer's child", || started.exists());
        let pid = writer.id();
        let (_, ticks) = holder::state_and_start(pid).unwrap();
        let namespace = holder::pid_namespace().unwrap();
        holder::set_record(&path, &holder::record(pid, ticks, namespace));
        assert!(probe_file(&path, run).unwrap(), "its writer lives");
        assert!(
            matches!(lock_path(&path, run), Err(StoreError::Locked(m)) if m.contains("another process")),
            "a live writer's run is refused at once"
        );

        writer.kill().unwrap();
        writer.wait().unwrap();
        let raw = std::fs::File::open(&path).unwrap();
        assert_eq!(
            flock(&raw, FlockOperation::NonBlockingLockShared),
            Err(Errno::WOULDBLOCK),
            "the writer's child still holds the lock"
        );
        assert!(!probe_file(&path, run).unwrap(), "but no writer does");
        let refused = lock_waiting(&path, run, Duration::from_millis(20));
        assert!(
            matches!(&refused, Err(StoreError::Locked(m)) if m.contains(&format!("process {pid}) is dead"))),
            "{refused:?}"
        );

        // Once the child lets go (an exec, an exit), a locker takes the run,
        // and records itself.
        let taker = std::thread::spawn(move || lock_path(&path, run));
        std::fs::write(&gate, "").unwrap();
        let taken = taker.join().unwrap();
        assert!(taken.is_ok(), "{taken:?}");
        let taken = taken.unwrap();
        assert_eq!(
            holder::read_record(&taken.0),
            holder::Record::Writer {
                pid: std::process::id(),
                alive: true
            }
        );
    }
}

//! A run's one writer, as this store instance sees it: taking the run's
//! lock (a new run's, or an existing one's), its writer's record in the
//! `runs` row, what the instance knows of a run it holds, and letting go.
//! The lock itself is a byte of `<db>-writers` (see `writers`).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use application::ports::{RunLock, StoreError};
use domain::RunId;
use rusqlite::{Connection, OptionalExtension, params};

use super::super::file::holder::{self, Record};
use super::super::file::lock::{ORPHAN_PATIENCE, PROBE_RETRY, RECORD_PATIENCE};
use super::super::file::sync::off_the_runtime;
use super::super::{locked_by_leftover, locked_elsewhere, locked_here, not_locked};
use super::connect::WriteTx;
use super::rows::{exists, next_slot, now_millis};
use super::writers::{self, SlotLock};
use super::{HeldState, Inner, SyncPolicy, lock, sql_err};

/// A run this instance holds: its locked byte, its slot, and its last
/// offset once known. Nobody else appends to a held run, and a run with a
/// writer cannot be deleted, so an append needs no query for where the log
/// ends.
#[derive(Debug)]
pub(super) struct HeldRun {
    _lock: writers::SlotLock,
    /// The run's `lock_slot`: the high bits of its events' keys.
    pub(super) slot: i64,
    /// The last offset on record: `None` until this instance's first
    /// append since taking the lock reads it, and again after an append
    /// that failed.
    pub(super) last: Option<u64>,
    /// Whether the row may hold this writer's record, which letting go of
    /// the run clears: not once the append that settled or paused the run
    /// cleared it (see `query::RecordChange`).
    pub(super) recorded: bool,
}

/// What one attempt at a run's lock found.
pub(super) enum Attempt {
    /// The run's lock, this instance's now.
    Taken(RunLock),
    /// The run's byte, held under the record of a dead writer (process
    /// `pid`): by a process it started, which lets go once it execs or ends.
    Leftover(u32),
}

/// What a SQLite store's [`RunLock`] holds: dropping it syncs what this
/// instance left unsynced (as a flush would) and releases the run's byte.
struct Held {
    inner: Arc<Inner>,
    run_id: RunId,
}

impl Drop for Held {
    fn drop(&mut self) {
        if self.inner.config.sync == SyncPolicy::StepBoundary
            && let Err(e) = off_the_runtime(|| self.inner.sync())
        {
            tracing::warn!(run = %self.run_id, error = %e, "cannot sync a released run");
        }
        // The writer connection first, as `append` takes them: no write of
        // this run is in flight when the lock goes.
        let writer = lock(&self.inner.writer);
        // The record is cleared before the byte is let go, so a clear never
        // meets the record of the run's next writer. The run stays in
        // `held` meanwhile (the clear may wait for another process's write):
        // this instance's own lock never refuses the byte, so only the map
        // keeps a second locker here out until the byte is free.
        let recorded = lock(&self.inner.held)
            .get(&self.run_id)
            .is_none_or(|held| held.recorded);
        if recorded {
            self.inner.clear_writer(&writer, self.run_id);
        }
        // One statement: the byte is unlocked (the entry dropped) while the
        // map is still locked.
        lock(&self.inner.held).remove(&self.run_id);
    }
}

impl Inner {
    /// What the record of the run's last writer says of it.
    fn holder(&self, run_id: RunId) -> Record {
        let record: Option<Option<String>> = lock(&self.reader)
            .prepare_cached("SELECT writer FROM runs WHERE run_id = ?1")
            .and_then(|mut stmt| {
                stmt.query_row([run_id.to_string()], |row| row.get(0))
                    .optional()
            })
            .unwrap_or_default();
        record
            .flatten()
            .map_or(Record::Unknown, |text| holder::judge(text.as_bytes()))
    }

    /// Whether a writer holds the run: this instance, or another whose
    /// lock is on the run's byte and whose record does not name a dead
    /// process. A record naming a dead one while the byte is held is given
    /// [`RECORD_PATIENCE`] to be replaced by a new writer's.
    pub(super) fn has_writer(&self, run_id: RunId) -> Result<bool, StoreError> {
        if lock(&self.held).contains_key(&run_id) {
            return Ok(true);
        }
        let slot = self.slot(&lock(&self.reader), run_id)?;
        let deadline = Instant::now() + RECORD_PATIENCE;
        loop {
            let held = self.writers.held_elsewhere(slot).map_err(|e| {
                self.writers_err(&format!("cannot probe the lock of run {run_id}"), e)
            })?;
            if !held {
                return Ok(false);
            }
            match self.holder(run_id) {
                Record::Writer { alive: false, .. } => {}
                Record::Unknown | Record::Writer { alive: true, .. } => return Ok(true),
            }
            if Instant::now() >= deadline {
                return Ok(false);
            }
            std::thread::sleep(PROBE_RETRY);
        }
    }

    /// An error of the writers' lock file: `what` failed, naming the file.
    fn writers_err(&self, what: &str, e: std::io::Error) -> StoreError {
        StoreError::io(format!("{what} ({})", self.writers.path().display()), e)
    }

    /// One attempt at the run's byte for this instance: `true` when it is
    /// locked now, `false` when the record names a dead writer (a process
    /// it started still holds the byte, until it execs or ends), refused
    /// when a writer holds it.
    fn try_slot(&self, run_id: RunId, slot: i64) -> Result<Option<u32>, StoreError> {
        let locked = self
            .writers
            .try_lock(slot)
            .map_err(|e| self.writers_err(&format!("cannot lock run {run_id}"), e))?;
        if locked {
            return Ok(None);
        }
        match self.holder(run_id) {
            Record::Writer { pid, alive: false } => Ok(Some(pid)),
            Record::Unknown | Record::Writer { alive: true, .. } => Err(locked_elsewhere(run_id)),
        }
    }

    /// Whether a locker that found the run's byte held by a dead writer's
    /// leftover (process `pid`'s) since `started` may try again: for at
    /// most [`ORPHAN_PATIENCE`], then it is told who holds the run.
    pub(super) fn leftover_patience(
        &self,
        run_id: RunId,
        pid: u32,
        started: Instant,
    ) -> Result<(), StoreError> {
        #[cfg(test)]
        self.leftover_waits.fetch_add(1, Ordering::SeqCst);
        if started.elapsed() >= ORPHAN_PATIENCE {
            tracing::warn!(run = %run_id, writer = pid, "the dead writer's lock is still held; giving up");
            return Err(locked_by_leftover(run_id, pid));
        }
        Ok(())
    }

    /// Clears the run's writer record as its writer lets go (on `conn`,
    /// the writer connection it holds): a record outlives its writer only
    /// when the writer dies holding the run, which is what a record naming
    /// a dead process is taken to mean. Not a commit to sync: the record is
    /// evidence for the living, not part of the run.
    pub(super) fn clear_writer(&self, conn: &Connection, run_id: RunId) {
        let cleared = conn
            .prepare_cached(
                "UPDATE runs SET writer = NULL WHERE run_id = ?1 AND writer IS NOT NULL",
            )
            .and_then(|mut stmt| stmt.execute([run_id.to_string()]));
        if let Err(e) = cleared {
            tracing::warn!(run = %run_id, error = %e, "cannot clear the writer record of a released run");
        }
    }

    /// Records this process as the run's writer; a failure leaves the lock
    /// as the only evidence (safe), and is logged.
    fn record_writer(&self, run_id: RunId) {
        let Some(record) = holder::this_record() else {
            return;
        };
        let written = lock(&self.writer)
            .prepare_cached("UPDATE runs SET writer = ?2 WHERE run_id = ?1")
            .and_then(|mut stmt| stmt.execute(params![run_id.to_string(), record]));
        if let Err(e) = written {
            tracing::warn!(run = %run_id, error = %e, "cannot record the writer of a run");
        }
    }

    /// Creates the run locked by this instance: its row, given the next
    /// byte of the writers' file and this process's record, is committed
    /// only once that byte is locked, so nobody else writes the run first.
    pub(super) fn create(self: &Arc<Self>, run_id: RunId) -> Result<RunLock, StoreError> {
        let path = &self.path;
        let what = || format!("create run {run_id}");
        // The writer connection first, as appends take them.
        let conn = lock(&self.writer);
        let mut held = lock(&self.held);
        if held.contains_key(&run_id) {
            return Err(StoreError::Conflict(format!("run {run_id} already exists")));
        }
        let tx = match WriteTx::begin(&conn) {
            Ok(tx) => tx,
            // A run that exists is a `Conflict` even where nothing can be
            // written (a read-only database, a writer elsewhere too long).
            Err(e) => {
                if exists(&lock(&self.reader), path, run_id)? {
                    return Err(StoreError::Conflict(format!("run {run_id} already exists")));
                }
                return Err(sql_err(path, "begin a run's creation", e));
            }
        };
        let slot = next_slot(&tx, path)?;
        let inserted = tx
            .prepare_cached(
                "INSERT INTO runs (run_id, created_at, status, lock_slot, writer) \
                 VALUES (?1, ?2, 'pending', ?3, ?4) ON CONFLICT (run_id) DO NOTHING",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    run_id.to_string(),
                    now_millis(),
                    slot,
                    holder::this_record()
                ])
            })
            .map_err(|e| sql_err(path, &what(), e))?;
        if inserted == 0 {
            return Err(StoreError::Conflict(format!("run {run_id} already exists")));
        }
        // A byte never given out before (slots only grow): nobody holds it.
        if let Some(pid) = self.try_slot(run_id, slot)? {
            return Err(locked_by_leftover(run_id, pid));
        }
        let slot_lock = SlotLock::new(Arc::clone(&self.writers), slot);
        tx.commit().map_err(|e| sql_err(path, &what(), e))?;
        held.insert(
            run_id,
            HeldRun {
                _lock: slot_lock,
                slot,
                last: Some(0),
                recorded: true,
            },
        );
        self.committed.fetch_add(1, Ordering::AcqRel);
        drop((held, conn));
        Ok(RunLock::new(
            run_id,
            Held {
                inner: Arc::clone(self),
                run_id,
            },
        ))
    }

    /// Takes the lock of the run for this instance, waiting out a dead
    /// writer's leftover (see [`Inner::leftover_patience`]) on this thread;
    /// `NotFound` for no such run.
    pub(super) fn take_lock(self: &Arc<Self>, run_id: RunId) -> Result<RunLock, StoreError> {
        let started = Instant::now();
        loop {
            match self.try_take_lock(run_id)? {
                Attempt::Taken(run_lock) => return Ok(run_lock),
                Attempt::Leftover(pid) => self.leftover_patience(run_id, pid, started)?,
            }
            std::thread::sleep(PROBE_RETRY);
        }
    }

    /// One attempt at the lock of the run for this instance; `NotFound`
    /// for no such run. A wait for a dead writer's leftover is the
    /// caller's, between attempts: it holds nothing of the instance's
    /// meanwhile, so its other runs go on.
    pub(super) fn try_take_lock(self: &Arc<Self>, run_id: RunId) -> Result<Attempt, StoreError> {
        let mut slot = self.slot(&lock(&self.reader), run_id)?;
        {
            // Held while locking: the instance's own lock never refuses it,
            // so two lockers here are told apart by this map alone.
            let mut held = lock(&self.held);
            if held.contains_key(&run_id) {
                return Err(locked_here(run_id));
            }
            let mut tries = 0;
            let slot_lock = loop {
                if let Some(pid) = self.try_slot(run_id, slot)? {
                    return Ok(Attempt::Leftover(pid));
                }
                let slot_lock = SlotLock::new(Arc::clone(&self.writers), slot);
                // Another process may have deleted the run between the
                // lookup of its slot and the lock (a deletion takes the lock
                // first), and made it again under a new slot: what is locked
                // now is the run's slot as it stands, or nothing.
                let now = self.slot(&lock(&self.reader), run_id)?;
                if now == slot {
                    break slot_lock;
                }
                tries += 1;
                if tries >= 3 {
                    return Err(locked_elsewhere(run_id));
                }
                slot = now;
            };
            held.insert(
                run_id,
                HeldRun {
                    _lock: slot_lock,
                    slot,
                    last: None,
                    recorded: true,
                },
            );
        }
        self.record_writer(run_id);
        Ok(Attempt::Taken(RunLock::new(
            run_id,
            Held {
                inner: Arc::clone(self),
                run_id,
            },
        )))
    }

    /// Refuses a write to a run this instance does not hold.
    pub(super) fn check_held(&self, run_id: RunId) -> Result<(), StoreError> {
        if lock(&self.held).contains_key(&run_id) {
            Ok(())
        } else {
            Err(not_locked(run_id))
        }
    }

    /// What this instance knows of a run it holds (its slot, its last
    /// offset when known, whether its row holds the writer's record); a
    /// write to any other run is refused.
    pub(super) fn held_run(&self, run_id: RunId) -> Result<HeldState, StoreError> {
        match lock(&self.held).get(&run_id) {
            Some(held) => Ok(HeldState {
                slot: held.slot,
                last: held.last,
                recorded: held.recorded,
            }),
            None => Err(not_locked(run_id)),
        }
    }
}

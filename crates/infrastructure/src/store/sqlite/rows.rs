//! The operations of one database behind [`super::SqliteRunStore`]: a run's
//! lock, appends in one transaction each, syncs shared by flushes, and
//! reads, each on the connection the store keeps for it.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use application::ports::StoreError;
use domain::{RunId, RuntimeEvent};
use rusqlite::{Connection, OptionalExtension, params};

use tokio::sync::Notify;

use super::super::check_continuation;
use super::super::row::{event_json, offset_param, row_event};
use super::connect::WriteTx;
use super::{HeldState, Inner, READ_BUDGET, lock, slot_keys, sql_err};

/// The highest lock slot: an event's key holds its run's slot above its
/// offset's 32 bits (schema 7), and the end of its range, the next slot's
/// first key, must be a positive 64-bit integer too.
pub(super) const MAX_SLOT: i64 = (1 << 31) - 2;

/// The next lock slot, given out in `conn`'s transaction: slots only grow,
/// so a deleted run's byte (which a process it started may still hold for
/// a moment) is never a new run's.
pub(super) fn next_slot(conn: &Connection, path: &Path) -> Result<i64, StoreError> {
    let slot: i64 = conn
        .prepare_cached("UPDATE writer_slots SET last = last + 1 WHERE id = 1 RETURNING last")
        .and_then(|mut stmt| stmt.query_row([], |row| row.get(0)))
        .map_err(|e| sql_err(path, "give out a lock slot", e))?;
    if !(1..=MAX_SLOT).contains(&slot) {
        return Err(StoreError::io_msg(format!(
            "{}: no run can be added: the database has given out all {MAX_SLOT} run slots",
            path.display()
        )));
    }
    Ok(slot)
}

/// The key (`id`) of the events row of `offset` in the run at `slot`: the
/// slot above the offset's 32 bits, so a run's rows are one range in the
/// order of its log.
pub(super) fn event_key(
    path: &Path,
    run_id: RunId,
    slot: i64,
    offset: u64,
) -> Result<i64, StoreError> {
    match u32::try_from(offset) {
        Ok(offset) if offset > 0 && (1..=MAX_SLOT).contains(&slot) => {
            Ok(slot << 32 | i64::from(offset))
        }
        _ => Err(StoreError::io_msg(format!(
            "{}: run {run_id} cannot hold event {offset}: a run of the SQLite store holds \
             at most {} events",
            path.display(),
            u32::MAX
        ))),
    }
}

/// Up to `?3` events of run `?1` after offset `?2`, in order: one range of
/// the primary key, the run's slot looked up in the statement itself.
const _: () = assert!(MAX_SLOT == 2_147_483_646, "READ_SQL spells MAX_SLOT out");

/// A slot outside `1..=MAX_SLOT` (2^31 − 2) selects nothing, and the empty
/// answer's lookup of the run reports it.
pub(super) const READ_SQL: &str = "SELECT \"offset\", json FROM run_events \
     WHERE id > (SELECT (lock_slot << 32) + ?2 FROM runs \
         WHERE run_id = ?1 AND lock_slot BETWEEN 1 AND 2147483646) \
     AND id < (SELECT (lock_slot + 1) << 32 FROM runs \
         WHERE run_id = ?1 AND lock_slot BETWEEN 1 AND 2147483646) \
     ORDER BY id LIMIT ?3";

/// The last offset on record of the run at `slot` (0: none).
fn last_of_slot(
    conn: &Connection,
    path: &Path,
    run_id: RunId,
    slot: i64,
) -> Result<u64, StoreError> {
    let (first, end) = slot_keys(slot);
    let last: Option<i64> = conn
        .prepare_cached(
            "SELECT \"offset\" FROM run_events WHERE id >= ?1 AND id < ?2 ORDER BY id DESC LIMIT 1",
        )
        .and_then(|mut stmt| stmt.query_row([first, end], |row| row.get(0)).optional())
        .map_err(|e| sql_err(path, &format!("read the last offset of run {run_id}"), e))?;
    Ok(last.and_then(|l| u64::try_from(l).ok()).unwrap_or(0))
}

/// Whether `run_id` is a run of the database.
pub(super) fn exists(conn: &Connection, path: &Path, run_id: RunId) -> Result<bool, StoreError> {
    conn.prepare_cached("SELECT 1 FROM runs WHERE run_id = ?1")
        .and_then(|mut stmt| stmt.exists([run_id.to_string()]))
        .map_err(|e| sql_err(path, &format!("look up run {run_id}"), e))
}

pub(super) fn now_millis() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

impl Inner {
    pub(super) fn require(&self, conn: &Connection, run_id: RunId) -> Result<(), StoreError> {
        if exists(conn, &self.path, run_id)? {
            Ok(())
        } else {
            Err(StoreError::NotFound(run_id))
        }
    }

    /// The run's slot: the byte of the writers' lock file its writer
    /// locks (see `writers`), and the high bits of its events' keys.
    pub(super) fn slot(&self, conn: &Connection, run_id: RunId) -> Result<i64, StoreError> {
        let slot: Option<Option<i64>> = conn
            .prepare_cached("SELECT lock_slot FROM runs WHERE run_id = ?1")
            .and_then(|mut stmt| {
                stmt.query_row([run_id.to_string()], |row| row.get(0))
                    .optional()
            })
            .map_err(|e| sql_err(&self.path, &format!("look up the lock of run {run_id}"), e))?;
        match slot {
            None => Err(StoreError::NotFound(run_id)),
            Some(None) => Err(StoreError::Corrupt(format!(
                "{}: run {run_id} has no lock_slot",
                self.path.display()
            ))),
            Some(Some(slot)) if (1..=MAX_SLOT).contains(&slot) => Ok(slot),
            // Its keys would be another run's (a slot past 2^32 wraps onto
            // one), or none: nothing is read, written or deleted by it.
            Some(Some(slot)) => Err(StoreError::Corrupt(format!(
                "{}: run {run_id} has lock_slot {slot}, outside 1 to {MAX_SLOT}",
                self.path.display()
            ))),
        }
    }

    pub(super) fn notify(&self, run_id: RunId) -> Arc<Notify> {
        let mut notifies = lock(&self.notifies);
        if notifies.len() >= 256 {
            notifies.retain(|_, n| Arc::strong_count(n) > 1);
        }
        Arc::clone(notifies.entry(run_id).or_default())
    }

    pub(super) fn wake(&self, run_id: RunId) {
        if let Some(n) = lock(&self.notifies).get(&run_id) {
            n.notify_waiters();
        }
    }

    pub(super) fn append(&self, run_id: RunId, events: &[RuntimeEvent]) -> Result<u64, StoreError> {
        let conn = lock(&self.writer);
        let state = match self.held_run(run_id) {
            Ok(state) => state,
            Err(not_held) => {
                self.require(&conn, run_id)?;
                return Err(not_held);
            }
        };
        let appended = self.append_held(&conn, run_id, state, events);
        // Whatever failed, the next append reads where the log ends.
        let new_last = appended.as_ref().ok().and_then(|_| events.last());
        if let Some(held) = lock(&self.held).get_mut(&run_id) {
            held.last = match new_last {
                Some(event) => Some(event.offset.get()),
                None if appended.is_ok() => state.last,
                None => None,
            };
            // After a failure the row may hold the record or not (a commit
            // that failed may still have reached the WAL): the release
            // clears it, to be sure.
            held.recorded = appended.as_ref().map_or(true, |&(_, recorded)| recorded);
        }
        drop(conn);
        if new_last.is_some() {
            self.wake(run_id);
        }
        appended.map(|(bytes, _)| bytes)
    }

    /// [`Inner::append`] to a run this instance holds, as `state` has it;
    /// returns the bytes appended and whether the row holds the writer's
    /// record after it.
    fn append_held(
        &self,
        conn: &Connection,
        run_id: RunId,
        state: HeldState,
        events: &[RuntimeEvent],
    ) -> Result<(u64, bool), StoreError> {
        let (slot, known) = (state.slot, state.last);
        let path = &self.path;
        let tx = WriteTx::begin(conn).map_err(|e| sql_err(path, "begin an append", e))?;
        let last = match known {
            Some(last) => last,
            None => last_of_slot(&tx, path, run_id, slot)?,
        };
        // A run with events exists (a deletion takes them with it), and so
        // does one this instance created; another without is looked up, in
        // the append's own transaction: a statement before it would be a
        // read transaction of its own.
        if last == 0 && known.is_none() {
            self.require(&tx, run_id)?;
        }
        check_continuation(run_id, last, events)?;
        if events.is_empty() {
            return Ok((0, state.recorded));
        }
        let mut bytes = 0;
        {
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO run_events (id, run_id, \"offset\", type, node_id, json, ts) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                )
                .map_err(|e| sql_err(path, "prepare an append", e))?;
            let id = run_id.to_string();
            let mut buf = Vec::with_capacity(256);
            for event in events {
                let key = event_key(path, run_id, slot, event.offset.get())?;
                let json = event_json(run_id, event, &mut buf)?;
                bytes += json.len() as u64 + 1;
                insert
                    .execute(params![
                        key,
                        id,
                        offset_param(event.offset.get()),
                        event.kind.type_name(),
                        event.node_id.as_ref().map(|n| n.as_str()),
                        json,
                        event.timestamp.as_millis()
                    ])
                    .map_err(|e| match e.sqlite_error_code() {
                        // Its key is taken: the log holds this offset already.
                        Some(rusqlite::ErrorCode::ConstraintViolation) => {
                            StoreError::Conflict(format!(
                                "{}: run {run_id} already has an event at offset {}",
                                path.display(),
                                event.offset
                            ))
                        }
                        _ => sql_err(path, &format!("append to run {run_id}"), e),
                    })?;
            }
        }
        let recorded = super::query::index_run(&tx, path, run_id, events, state.recorded)?;
        tx.commit()
            .map_err(|e| sql_err(path, &format!("commit an append to run {run_id}"), e))?;
        self.committed.fetch_add(1, Ordering::AcqRel);
        Ok((bytes, recorded))
    }

    /// Syncs the WAL if this instance committed anything since the last
    /// sync. Blocking.
    ///
    /// The commits are in the `-wal` file already (`synchronous=NORMAL`
    /// writes them and syncs nothing): an `fdatasync` of that file makes
    /// them durable, which is what `synchronous=FULL` does at a commit,
    /// without a commit of its own (its WAL pages and header). The file is
    /// opened once (see `Inner::wal`). Should it not open, a marker commit
    /// with `synchronous=FULL` syncs it.
    pub(super) fn sync(&self) -> Result<(), StoreError> {
        let conn = lock(&self.writer);
        // Under the writer lock no commit is in flight: this covers them all.
        let upto = self.committed.load(Ordering::Acquire);
        if self.synced.load(Ordering::Acquire) >= upto {
            return Ok(());
        }
        let mut wal = lock(&self.wal);
        if wal.is_none() {
            let path = self.wal_path(&conn);
            match std::fs::File::open(&path) {
                Ok(file) => *wal = Some(file),
                Err(e) => {
                    tracing::debug!(file = %path.display(), error = %e, "no WAL file to sync; syncing by a commit");
                    conn.execute_batch(
                        "PRAGMA synchronous=FULL; \
                         UPDATE sync_marks SET n = n + 1 WHERE id = 1; \
                         PRAGMA synchronous=NORMAL;",
                    )
                    .map_err(|e| sql_err(&self.path, "sync", e))?;
                }
            }
        }
        if let Some(file) = wal.as_ref() {
            file.sync_data()
                .map_err(|e| super::errors::io_err("sync", &self.wal_path(&conn), e))?;
        }
        self.synced.fetch_max(upto, Ordering::AcqRel);
        Ok(())
    }

    /// The database's write-ahead log: beside the file as SQLite names it
    /// on `conn` (symlinks resolved), which need not be the path the store
    /// was given.
    fn wal_path(&self, conn: &Connection) -> std::path::PathBuf {
        let mut wal = match conn.path().filter(|p| !p.is_empty()) {
            Some(db) => std::ffi::OsString::from(db),
            None => self.path.clone().into_os_string(),
        };
        wal.push("-wal");
        wal.into()
    }

    pub(super) fn read(
        &self,
        run_id: RunId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<RuntimeEvent>, StoreError> {
        let path = &self.path;
        let conn = lock(&self.reader);
        if limit == 0 || after >= i64::MAX as u64 {
            self.slot(&conn, run_id)?;
            return Ok(Vec::new());
        }
        // The run's slot is looked up in the statement itself: a lookup
        // first would be a read transaction of its own.
        let mut stmt = conn
            .prepare_cached(READ_SQL)
            .map_err(|e| sql_err(path, "prepare a read", e))?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let within = after.min(u64::from(u32::MAX));
        let mut rows = stmt
            .query(params![run_id.to_string(), offset_param(within), limit])
            .map_err(|e| sql_err(path, &format!("read run {run_id}"), e))?;
        let mut events = Vec::new();
        let mut expected = after + 1;
        let mut bytes = 0;
        while let Some(row) = rows
            .next()
            .map_err(|e| sql_err(path, &format!("read run {run_id}"), e))?
        {
            let bad = |detail: String| StoreError::BadEvent {
                offset: expected,
                detail: format!(
                    "{} events row (run {run_id}, offset {expected}): {detail}",
                    path.display()
                ),
            };
            let offset: i64 = row.get(0).map_err(|e| bad(e.to_string()))?;
            if u64::try_from(offset).ok() != Some(expected) {
                return Err(bad(format!("missing (the next row is offset {offset})")));
            }
            let json = row.get_ref(1).map_err(|e| bad(e.to_string()))?;
            let json = json.as_bytes().map_err(|e| bad(e.to_string()))?;
            let event = row_event(json, run_id, expected).map_err(bad)?;
            bytes += json.len();
            events.push(event);
            expected += 1;
            if bytes >= READ_BUDGET {
                break;
            }
        }
        // Only an empty answer asks whether the run exists: a lookup first
        // would be a read transaction of its own on every read that finds
        // events (an empty one pays it after, as before).
        if events.is_empty() {
            self.slot(&conn, run_id)?;
        }
        Ok(events)
    }

    pub(super) fn last(&self, run_id: RunId) -> Result<u64, StoreError> {
        let conn = lock(&self.reader);
        let slot = self.slot(&conn, run_id)?;
        last_of_slot(&conn, &self.path, run_id, slot)
    }
}

//! The operations of one database behind [`super::SqliteRunStore`]: a run's
//! lock, appends in one transaction each, syncs shared by flushes, and
//! reads, each on the connection the store keeps for it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use application::ports::{RunLock, StoreError};
use domain::{RunId, RuntimeEvent};
use rusqlite::{Connection, TransactionBehavior, params};
use std::fs::DirBuilder;
use std::os::unix::fs::DirBuilderExt;

use tokio::sync::Notify;

use super::super::file::lock::lock_path;
use super::super::row::{event_json, offset_param, row_event};
use super::super::{check_continuation, locked_here, not_locked};
use super::{DIR_MODE, Held, Inner, READ_BUDGET, io_err, lock, sql_err};

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

    pub(super) fn lock_file(&self, run_id: RunId) -> PathBuf {
        self.locks_dir.join(run_id.to_string())
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

    /// Takes the run's lock file for this instance.
    pub(super) fn take_lock(self: &Arc<Self>, run_id: RunId) -> Result<RunLock, StoreError> {
        let mut held = lock(&self.held);
        if held.contains_key(&run_id) {
            return Err(locked_here(run_id));
        }
        DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(&self.locks_dir)
            .map_err(|e| io_err("create", &self.locks_dir, e))?;
        let file = lock_path(&self.lock_file(run_id), run_id)?;
        held.insert(run_id, file);
        Ok(RunLock::new(
            run_id,
            Held {
                inner: Arc::clone(self),
                run_id,
            },
        ))
    }

    /// Refuses a write to a run this instance does not hold.
    pub(super) fn check_held(&self, run_id: RunId) -> Result<(), StoreError> {
        if lock(&self.held).contains_key(&run_id) {
            Ok(())
        } else {
            Err(not_locked(run_id))
        }
    }

    pub(super) fn append(&self, run_id: RunId, events: &[RuntimeEvent]) -> Result<u64, StoreError> {
        let path = &self.path;
        let mut conn = lock(&self.writer);
        self.require(&conn, run_id)?;
        self.check_held(run_id)?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| sql_err(path, "begin an append", e))?;
        let last = last_offset(&tx, path, run_id)?;
        check_continuation(run_id, last, events)?;
        if events.is_empty() {
            return Ok(0);
        }
        let mut bytes = 0;
        {
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO events (run_id, \"offset\", type, node_id, json, ts) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )
                .map_err(|e| sql_err(path, "prepare an append", e))?;
            let id = run_id.to_string();
            let mut buf = Vec::with_capacity(256);
            for event in events {
                let json = event_json(run_id, event, &mut buf)?;
                bytes += json.len() as u64 + 1;
                insert
                    .execute(params![
                        id,
                        offset_param(event.offset.get()),
                        event.kind.type_name(),
                        event.node_id.as_ref().map(|n| n.as_str()),
                        json,
                        event.timestamp.as_millis()
                    ])
                    .map_err(|e| sql_err(path, &format!("append to run {run_id}"), e))?;
            }
        }
        super::query::index_run(&tx, path, run_id, events)?;
        tx.commit()
            .map_err(|e| sql_err(path, &format!("commit an append to run {run_id}"), e))?;
        self.committed.fetch_add(1, Ordering::AcqRel);
        drop(conn);
        self.wake(run_id);
        Ok(bytes)
    }

    /// Syncs the WAL if this instance committed anything since the last
    /// sync. Blocking.
    ///
    /// The commits are in the `-wal` file already (`synchronous=NORMAL`
    /// writes them and syncs nothing): an `fdatasync` of that file makes
    /// them durable, which is what `synchronous=FULL` does at a commit,
    /// without a commit of its own (its WAL pages and header). Should the
    /// file not open, a marker commit with `synchronous=FULL` syncs it.
    pub(super) fn sync(&self) -> Result<(), StoreError> {
        let conn = lock(&self.writer);
        // Under the writer lock no commit is in flight: this covers them all.
        let upto = self.committed.load(Ordering::Acquire);
        if self.synced.load(Ordering::Acquire) >= upto {
            return Ok(());
        }
        let wal = self.wal_path();
        match std::fs::File::open(&wal) {
            Ok(file) => file
                .sync_data()
                .map_err(|e| super::errors::io_err("sync", &wal, e))?,
            Err(e) => {
                tracing::debug!(file = %wal.display(), error = %e, "no WAL file to sync; syncing by a commit");
                conn.execute_batch(
                    "PRAGMA synchronous=FULL; \
                     UPDATE sync_marks SET n = n + 1 WHERE id = 1; \
                     PRAGMA synchronous=NORMAL;",
                )
                .map_err(|e| sql_err(&self.path, "sync", e))?;
            }
        }
        self.synced.fetch_max(upto, Ordering::AcqRel);
        Ok(())
    }

    /// The database's write-ahead log.
    fn wal_path(&self) -> std::path::PathBuf {
        let mut wal = self.path.clone().into_os_string();
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
        self.require(&conn, run_id)?;
        if limit == 0 || after >= i64::MAX as u64 {
            return Ok(Vec::new());
        }
        let mut stmt = conn
            .prepare_cached(
                "SELECT \"offset\", json FROM events WHERE run_id = ?1 AND \"offset\" > ?2 \
                 ORDER BY \"offset\" LIMIT ?3",
            )
            .map_err(|e| sql_err(path, "prepare a read", e))?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut rows = stmt
            .query(params![run_id.to_string(), offset_param(after), limit])
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
        Ok(events)
    }

    pub(super) fn last(&self, run_id: RunId) -> Result<u64, StoreError> {
        let conn = lock(&self.reader);
        self.require(&conn, run_id)?;
        last_offset(&conn, &self.path, run_id)
    }
}

pub(super) fn last_offset(
    conn: &Connection,
    path: &Path,
    run_id: RunId,
) -> Result<u64, StoreError> {
    let last: Option<i64> = conn
        .prepare_cached("SELECT MAX(\"offset\") FROM events WHERE run_id = ?1")
        .and_then(|mut stmt| stmt.query_row([run_id.to_string()], |row| row.get(0)))
        .map_err(|e| sql_err(path, &format!("read the last offset of run {run_id}"), e))?;
    Ok(last.and_then(|l| u64::try_from(l).ok()).unwrap_or(0))
}

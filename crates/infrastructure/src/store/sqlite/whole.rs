//! Runs that appear and go whole in the SQLite store: an import is one
//! transaction (the whole log, the snapshot and the `runs` row), and so is
//! a deletion, so readers see a run all there or not at all.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use application::ports::{EventBatches, StoreError};
use domain::{RunId, RunSnapshot};
use futures::StreamExt;
use rusqlite::{TransactionBehavior, params};

use super::super::check_continuation;
use super::super::file::sync::off_the_runtime;
use super::super::row::{event_json, offset_param};
use super::rows::{exists, now_millis};
use super::{Inner, SyncPolicy, lock, sql_err};

/// One event row, encoded before the transaction begins.
struct Row {
    offset: i64,
    kind: String,
    node_id: Option<String>,
    json: String,
}

/// The snapshot's row and the `runs` columns copied from it.
pub(super) struct SnapshotRow {
    pub json: String,
    pub status: Option<String>,
    pub workflow: String,
    pub started_at: Option<i64>,
    pub updated_at: Option<i64>,
}

impl SnapshotRow {
    /// `snapshot` as `save_snapshot` stores it.
    pub(super) fn of(snapshot: &RunSnapshot) -> Result<Self, StoreError> {
        let json = snapshot.to_json_string().map_err(|e| {
            StoreError::io(
                format!("cannot serialize the snapshot of run {}", snapshot.run_id),
                e.into(),
            )
        })?;
        Ok(Self {
            json,
            status: serde_json::to_value(snapshot.status)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned)),
            workflow: snapshot.workflow.name.clone(),
            started_at: snapshot.started_at.map(|t| t.as_millis()),
            updated_at: snapshot.updated_at.map(|t| t.as_millis()),
        })
    }
}

impl Inner {
    /// Deletes the run in one transaction, holding its lock meanwhile,
    /// then its lock file.
    pub(super) fn delete_whole(self: &Arc<Self>, run_id: RunId) -> Result<(), StoreError> {
        self.require(&lock(&self.reader), run_id)?;
        let run_lock = self.take_lock(run_id)?;
        {
            let mut conn = lock(&self.writer);
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(|e| sql_err(&self.path, "begin a deletion", e))?;
            let id = run_id.to_string();
            tx.execute("DELETE FROM events WHERE run_id = ?1", [&id])
                .and_then(|_| tx.execute("DELETE FROM snapshots WHERE run_id = ?1", [&id]))
                .and_then(|_| tx.execute("DELETE FROM snapshot_deltas WHERE run_id = ?1", [&id]))
                .and_then(|_| tx.execute("DELETE FROM runs WHERE run_id = ?1", [&id]))
                .and_then(|_| tx.commit())
                .map_err(|e| sql_err(&self.path, &format!("delete run {run_id}"), e))?;
            self.committed.fetch_add(1, Ordering::AcqRel);
        }
        // Durable before the caller removes what lies beside the run (its
        // transcript): a machine crash never brings back a run without it.
        if self.config.sync == SyncPolicy::StepBoundary {
            off_the_runtime(|| self.sync())?;
        }
        drop(run_lock);
        match std::fs::remove_file(self.lock_file(run_id)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                tracing::warn!(run = %run_id, error = %e, "cannot remove a deleted run's lock file");
            }
            _ => {}
        }
        self.wake(run_id);
        Ok(())
    }

    /// Gathers and encodes the whole run, then stores it in one transaction.
    pub(super) async fn import_whole(
        self: &Arc<Self>,
        run_id: RunId,
        mut events: EventBatches,
        snapshot: Option<RunSnapshot>,
    ) -> Result<(), StoreError> {
        if exists(&lock(&self.reader), &self.path, run_id)? {
            return Err(StoreError::Conflict(format!("run {run_id} already exists")));
        }
        let mut rows = Vec::new();
        let mut last = 0;
        let mut first_at = None;
        let mut buf = Vec::with_capacity(256);
        while let Some(batch) = events.next().await {
            let batch = batch?;
            last = check_continuation(run_id, last, &batch)?;
            for event in &batch {
                let json = event_json(run_id, event, &mut buf)?.to_owned();
                first_at.get_or_insert(event.timestamp.as_millis());
                rows.push(Row {
                    offset: offset_param(event.offset.get()),
                    kind: event.kind.type_name().to_owned(),
                    node_id: event.node_id.as_ref().map(|n| n.as_str().to_owned()),
                    json,
                });
            }
        }
        let snapshot = match snapshot {
            Some(s) if s.run_id != run_id => {
                return Err(StoreError::Conflict(format!(
                    "run {run_id}: the snapshot is of run {}",
                    s.run_id
                )));
            }
            Some(s) => Some(SnapshotRow::of(&s)?),
            None => None,
        };
        let created_at = first_at.unwrap_or_else(now_millis);
        let inner = Arc::clone(self);
        off_the_runtime(move || inner.insert_whole(run_id, created_at, &rows, snapshot.as_ref()))
    }

    fn insert_whole(
        &self,
        run_id: RunId,
        created_at: i64,
        rows: &[Row],
        snapshot: Option<&SnapshotRow>,
    ) -> Result<(), StoreError> {
        let path = &self.path;
        let id = run_id.to_string();
        let what = format!("import run {run_id}");
        let mut conn = lock(&self.writer);
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| sql_err(path, "begin an import", e))?;
        let inserted = tx
            .execute(
                "INSERT INTO runs (run_id, created_at) VALUES (?1, ?2) \
                 ON CONFLICT (run_id) DO NOTHING",
                params![id, created_at],
            )
            .map_err(|e| sql_err(path, &what, e))?;
        if inserted == 0 {
            return Err(StoreError::Conflict(format!("run {run_id} already exists")));
        }
        {
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO events (run_id, \"offset\", type, node_id, json) \
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                )
                .map_err(|e| sql_err(path, &what, e))?;
            for row in rows {
                insert
                    .execute(params![id, row.offset, row.kind, row.node_id, row.json])
                    .map_err(|e| sql_err(path, &what, e))?;
            }
        }
        if let Some(s) = snapshot {
            tx.execute(
                "INSERT INTO snapshots (run_id, json) VALUES (?1, ?2)",
                params![id, s.json],
            )
            .and_then(|_| {
                tx.execute(
                    "UPDATE runs SET status = ?2, workflow = ?3, started_at = ?4, \
                     updated_at = ?5 WHERE run_id = ?1",
                    params![id, s.status, s.workflow, s.started_at, s.updated_at],
                )
            })
            .map_err(|e| sql_err(path, &what, e))?;
        }
        tx.commit().map_err(|e| sql_err(path, &what, e))?;
        self.committed.fetch_add(1, Ordering::AcqRel);
        drop(conn);
        if self.config.sync == SyncPolicy::StepBoundary {
            self.sync()?;
        }
        Ok(())
    }
}

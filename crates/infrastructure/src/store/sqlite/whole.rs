//! Runs that appear and go whole in the SQLite store: an import is one
//! transaction (the whole log, the snapshot and the `runs` row), and so is
//! a deletion, so readers see a run all there or not at all.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use application::ports::{EventBatches, RunSummary, StoreError};
use domain::{RunId, RunSnapshot, RunStatus};
use futures::StreamExt;
use rusqlite::{TransactionBehavior, params};

use super::super::file::sync::off_the_runtime;
use super::super::row::{event_json, offset_param};
use super::super::{check_continuation, not_locked};
use super::rows::{exists, now_millis};
use super::{Inner, SyncPolicy, lock, slot_keys, sql_err};

/// One event row, encoded before the transaction begins.
struct Row {
    offset: i64,
    kind: String,
    node_id: Option<String>,
    json: String,
    ts: i64,
}

/// A snapshot's JSON, as `save_snapshot` stores it.
fn snapshot_json(snapshot: &RunSnapshot) -> Result<String, StoreError> {
    snapshot.to_json_string().map_err(|e| {
        StoreError::io(
            format!("cannot serialize the snapshot of run {}", snapshot.run_id),
            e.into(),
        )
    })
}

impl Inner {
    /// Deletes the run in one transaction, holding its lock meanwhile.
    pub(super) fn delete_whole(self: &Arc<Self>, run_id: RunId) -> Result<(), StoreError> {
        self.require(&lock(&self.reader), run_id)?;
        let run_lock = self.take_lock(run_id)?;
        {
            let mut conn = lock(&self.writer);
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(|e| sql_err(&self.path, "begin a deletion", e))?;
            let id = run_id.to_string();
            // The slot the lock checked: the run's own range, whatever the row
            // says by now.
            let slot = lock(&self.held).get(&run_id).map(|held| held.slot);
            let Some((first, end)) = slot.map(slot_keys) else {
                return Err(not_locked(run_id));
            };
            tx.execute(
                "DELETE FROM run_events WHERE id >= ?1 AND id < ?2",
                [first, end],
            )
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
        // The `runs` row as appends would have left it: from the log, which
        // a run that saved no snapshot (a short one) has alone.
        let mut summary = RunSummary::unreadable(run_id);
        while let Some(batch) = events.next().await {
            let batch = batch?;
            last = check_continuation(run_id, last, &batch)?;
            for event in &batch {
                let json = event_json(run_id, event, &mut buf)?.to_owned();
                first_at.get_or_insert(event.timestamp.as_millis());
                summary.apply(event);
                rows.push(Row {
                    offset: offset_param(event.offset.get()),
                    kind: event.kind.type_name().to_owned(),
                    node_id: event.node_id.as_ref().map(|n| n.as_str().to_owned()),
                    json,
                    ts: event.timestamp.as_millis(),
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
            Some(s) => Some(snapshot_json(&s)?),
            None => None,
        };
        let created_at = first_at.unwrap_or_else(now_millis);
        let inner = Arc::clone(self);
        off_the_runtime(move || {
            inner.insert_whole(run_id, created_at, &rows, &summary, snapshot.as_deref())
        })
    }

    fn insert_whole(
        &self,
        run_id: RunId,
        created_at: i64,
        rows: &[Row],
        summary: &RunSummary,
        snapshot: Option<&str>,
    ) -> Result<(), StoreError> {
        let path = &self.path;
        let id = run_id.to_string();
        let what = format!("import run {run_id}");
        let mut conn = lock(&self.writer);
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| sql_err(path, "begin an import", e))?;
        let slot = super::rows::next_slot(&tx, path)?;
        let inserted = tx
            .execute(
                "INSERT INTO runs (run_id, created_at, lock_slot) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (run_id) DO NOTHING",
                params![id, created_at, slot],
            )
            .map_err(|e| sql_err(path, &what, e))?;
        if inserted == 0 {
            return Err(StoreError::Conflict(format!("run {run_id} already exists")));
        }
        {
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO run_events (id, run_id, \"offset\", type, node_id, json, ts) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                )
                .map_err(|e| sql_err(path, &what, e))?;
            for row in rows {
                let offset = u64::try_from(row.offset).unwrap_or(u64::MAX);
                let key = super::rows::event_key(path, run_id, slot, offset)?;
                insert
                    .execute(params![
                        key,
                        id,
                        row.offset,
                        row.kind,
                        row.node_id,
                        row.json,
                        row.ts
                    ])
                    .map_err(|e| sql_err(path, &what, e))?;
            }
        }
        tx.execute(
            "UPDATE runs SET status = ?2, workflow = ?3, started_at = ?4, \
             parent_run_id = ?5, updated_at = ?6 WHERE run_id = ?1",
            params![
                id,
                summary.status.map(RunStatus::as_str),
                summary.workflow,
                summary.started_at.map(|t| t.as_millis()),
                summary.parent.map(|p| p.to_string()),
                summary.updated_at.map(|t| t.as_millis()),
            ],
        )
        .map_err(|e| sql_err(path, &what, e))?;
        if let Some(s) = snapshot {
            tx.execute(
                "INSERT INTO snapshots (run_id, json) VALUES (?1, ?2)",
                params![id, s],
            )
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

//! Runs that appear and go whole on PostgreSQL: an import is one
//! transaction (the run's row, its snapshot, then its whole log), and a
//! deletion is one statement (its events go with its row), so readers see a
//! run all there or not at all.

use std::sync::Arc;

use application::ports::{EventBatches, StoreError};
use domain::{RunId, RunSnapshot};
use futures::StreamExt;
use tokio_postgres::error::SqlState;

use super::super::check_continuation;
use super::log::{Rows, SnapshotRow, at};
use super::shared::{Inner, lease_lost, pg_err};

/// Events one statement of an import inserts.
const IMPORT_CHUNK: usize = 1000;

impl Inner {
    /// Deletes the run under its lease, taken first so no writer starts
    /// meanwhile.
    pub(super) async fn delete_whole(self: &Arc<Self>, run_id: RunId) -> Result<(), StoreError> {
        self.require(run_id).await?;
        let run_lock = self.take(run_id).await?;
        let epoch = self.epoch(run_id)?;
        let client = self.client().await?;
        let deleted = client
            .execute(
                "DELETE FROM awr_runs WHERE run_id = $1 AND lease_owner = $2 AND lease_epoch = $3",
                &[&run_id.as_uuid(), &self.owner, &epoch],
            )
            .await
            .map_err(|e| pg_err(format!("delete run {run_id}"), e))?;
        drop(run_lock);
        if deleted == 0 {
            return Err(lease_lost(run_id));
        }
        // Durable before the caller removes what lies beside the run.
        self.sync(&client, None).await?;
        self.notifies.wake(run_id);
        Ok(())
    }

    /// Gathers and encodes the whole run, then stores it in one transaction.
    pub(super) async fn import_whole(
        &self,
        run_id: RunId,
        mut events: EventBatches,
        snapshot: Option<RunSnapshot>,
    ) -> Result<(), StoreError> {
        let mut rows = Rows::new();
        let mut last = 0;
        let mut first_at = None;
        let mut buf = Vec::with_capacity(256);
        // The row's columns come from the log, which a run that saved no
        // snapshot (a short one on the file store) has alone.
        let mut state = RunSnapshot::new(run_id);
        while let Some(batch) = events.next().await {
            let batch = batch?;
            last = check_continuation(run_id, last, &batch)?;
            for event in &batch {
                state.apply(event);
                first_at.get_or_insert(event.timestamp);
                rows.push(run_id, event, &mut buf)?;
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
        let what = || format!("import run {run_id}");
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| pg_err(what(), e))?;
        let next = i64::try_from(last + 1).unwrap_or(i64::MAX);
        let created_at = at(first_at).unwrap_or_else(chrono::Utc::now);
        let columns = SnapshotRow::of(&state)?;
        let c = &columns;
        let inserted = tx
            .execute(
                "INSERT INTO awr_runs (run_id, created_at, status, next_offset, \
                 workflow, started_at, updated_at, due_at) \
                 VALUES ($1, $2, coalesce($3, 'pending'), $4, $5, $6, $7, $8) \
                 ON CONFLICT (run_id) DO NOTHING",
                &[
                    &run_id.as_uuid(),
                    &created_at,
                    &c.status,
                    &next,
                    &(!c.workflow.is_empty()).then_some(c.workflow.as_str()),
                    &c.started_at,
                    &c.updated_at,
                    &c.due_at,
                ],
            )
            .await
            .map_err(|e| pg_err(what(), e))?;
        if inserted == 0 {
            return Err(StoreError::Conflict(format!("run {run_id} already exists")));
        }
        if let Some(s) = &snapshot {
            tx.execute(
                "INSERT INTO awr_snapshots (run_id, body, last_offset) VALUES ($1, $2, $3)",
                &[&run_id.as_uuid(), &s.json, &s.offset],
            )
            .await
            .map_err(|e| pg_err(what(), e))?;
        }
        let mut start = 0;
        while start < rows.len() {
            let end = (start + IMPORT_CHUNK).min(rows.len());
            tx.execute(
                "INSERT INTO awr_events (run_id, \"offset\", epoch, kind, body) \
                 SELECT $1, u.o, 0, u.k, u.b \
                 FROM unnest($2::int8[], $3::text[], $4::text[]) AS u(o, k, b)",
                &[
                    &run_id.as_uuid(),
                    &&rows.offsets[start..end],
                    &&rows.kinds[start..end],
                    &&rows.bodies[start..end],
                ],
            )
            .await
            .map_err(|e| pg_err(what(), e))?;
            start = end;
        }
        match tx.commit().await {
            Ok(()) => Ok(()),
            // Another import of the same id committed first.
            Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => {
                Err(StoreError::Conflict(format!("run {run_id} already exists")))
            }
            Err(e) => Err(pg_err(what(), e)),
        }
    }
}

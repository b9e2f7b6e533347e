//! The queue on PostgreSQL: a submitted run is a row of `awr_runs` with
//! its `submission`, and a claim is one statement that picks a claimable
//! row with `FOR UPDATE SKIP LOCKED` and leases it (a new epoch, the
//! database's clock), so concurrent claims never wait on each other nor
//! get one run twice.

use application::ports::{Claim, RunQueue, StoreError, Submission};
use async_trait::async_trait;
use domain::RunId;

use super::PgRunStore;
use super::shared::{pg_err, prepare_err};

/// Picks the next claimable run and leases it to `$1` (owner) with
/// presence `$2` for `$3` milliseconds. Claimable: submitted, not ended
/// nor paused as far as its row says (a `waiting` one only once a
/// question of it is due: an answer nothing acted on, or a deadline
/// passed), and leased to nobody who is still there. Never one whose lease is this instance's own (`$1`): a lease it
/// let expire is another worker's to take, or a second lock here would
/// write under the first's epoch.
const CLAIM: &str = "WITH c AS ( \
       SELECT run_id FROM awr_runs AS r \
       WHERE r.submission IS NOT NULL \
         AND (r.status IN ('queued', 'pending', 'running') \
           OR (r.status = 'waiting' AND r.due_at <= now())) \
         AND r.available_at <= now() \
         AND r.lease_owner IS DISTINCT FROM $1 \
         AND (r.lease_owner IS NULL OR NOT coalesce(awr_leased(r), false)) \
       ORDER BY r.priority DESC, r.available_at, r.run_id \
       LIMIT 1 FOR UPDATE SKIP LOCKED) \
     UPDATE awr_runs AS r SET lease_owner = $1, lease_presence = $2, \
       lease_epoch = r.lease_epoch + 1, \
       lease_expires_at = now() + $3 * interval '1 millisecond' \
     FROM c WHERE r.run_id = c.run_id \
     RETURNING r.run_id, r.lease_epoch, r.submission, r.next_offset";

#[async_trait]
impl RunQueue for PgRunStore {
    async fn submit(&self, run_id: RunId, submission: &Submission) -> Result<(), StoreError> {
        let inner = &self.inner;
        let json = serde_json::to_string(submission)
            .map_err(|e| StoreError::Corrupt(format!("run {run_id}: submission: {e}")))?;
        let client = inner.client().await?;
        let row = client
            .query_opt(
                &client
                    .prepare_cached(
                        "INSERT INTO awr_runs (run_id, status, submission, priority) \
                         VALUES ($1, 'queued', $2, $3) \
                         ON CONFLICT (run_id) DO NOTHING RETURNING 1",
                    )
                    .await
                    .map_err(prepare_err)?,
                &[&run_id.as_uuid(), &json, &submission.priority],
            )
            .await
            .map_err(|e| pg_err(format!("submit run {run_id}"), e))?;
        if row.is_none() {
            return Err(StoreError::Conflict(format!("run {run_id} already exists")));
        }
        // The id is given out as queued: durable first, with the
        // definition saved before it.
        inner.sync(&client, None).await
    }

    async fn claim(&self) -> Result<Option<Claim>, StoreError> {
        let inner = &self.inner;
        let client = inner.client().await?;
        let row = client
            .query_opt(
                &client.prepare_cached(CLAIM).await.map_err(prepare_err)?,
                &[&inner.owner, &inner.presence, &inner.ttl_millis()],
            )
            .await
            .map_err(|e| pg_err("claim a run".to_owned(), e))?;
        let Some(row) = row else {
            return Ok(None);
        };
        let run_id = RunId::new(row.get(0))
            .map_err(|e| StoreError::Corrupt(format!("awr_runs: a run id: {e}")))?;
        let epoch: i64 = row.get(1);
        let json: String = row.get(2);
        let next_offset: i64 = row.get(3);
        // The epoch is the fencing token: durable before it is used. A
        // claim that cannot be used gives its lease back at once, rather
        // than leave the run leased to nobody for a term.
        let held = match inner.sync(&client, None).await {
            Ok(()) => inner.reserve(run_id),
            Err(e) => Err(e),
        };
        if let Err(e) = held {
            inner.clear_lease(run_id, epoch).await;
            return Err(e);
        }
        let lock = inner
            .settle(run_id, Some(epoch))
            .ok_or_else(|| StoreError::Locked(format!("run {run_id} is locked here")))?;
        let submission = parse(run_id, &json)?;
        Ok(Some(Claim {
            lock,
            submission,
            started: next_offset > 1,
        }))
    }

    async fn defer(&self, run_id: RunId, delay: std::time::Duration) -> Result<(), StoreError> {
        self.defer_run(run_id, delay).await
    }
}

impl PgRunStore {
    pub(super) async fn defer_run(
        &self,
        run_id: RunId,
        delay: std::time::Duration,
    ) -> Result<(), StoreError> {
        let client = self.inner.client().await?;
        client
            .execute(
                &client
                    .prepare_cached(
                        "UPDATE awr_runs SET available_at = now() + $2 * interval '1 millisecond' \
                         WHERE run_id = $1",
                    )
                    .await
                    .map_err(prepare_err)?,
                &[&run_id.as_uuid(), &(delay.as_secs_f64() * 1000.0)],
            )
            .await
            .map_err(|e| pg_err(format!("defer run {run_id}"), e))?;
        Ok(())
    }

    /// What `run_id` was submitted with, while no event of it is recorded.
    pub(super) async fn submission(&self, run_id: RunId) -> Result<Option<Submission>, StoreError> {
        let client = self.inner.client().await?;
        let row = client
            .query_opt(
                &client
                    .prepare_cached(
                        "SELECT submission FROM awr_runs \
                         WHERE run_id = $1 AND submission IS NOT NULL AND next_offset = 1",
                    )
                    .await
                    .map_err(prepare_err)?,
                &[&run_id.as_uuid()],
            )
            .await
            .map_err(|e| pg_err(format!("read the submission of run {run_id}"), e))?;
        row.map(|row| parse(run_id, row.get(0))).transpose()
    }
}

/// A submission as its row keeps it.
fn parse(run_id: RunId, json: &str) -> Result<Submission, StoreError> {
    serde_json::from_str(json).map_err(|e| {
        StoreError::Corrupt(format!(
            "awr_runs row {run_id}: submission is not a submission: {e}"
        ))
    })
}

//! A run's log and snapshot on PostgreSQL: fenced appends, reads, and the
//! snapshot (in `awr_snapshots`, its columns for queries in the run's row).

use application::ports::StoreError;
use chrono::{DateTime, Utc};
use domain::{RunId, RunSnapshot, RunStatus, RuntimeEvent, Timestamp};
use tokio_postgres::error::SqlState;

use super::super::check_continuation;
use super::super::row::{event_json, offset_param, row_event};
use super::shared::{CHANNEL, Inner, lease_lost, pg_err, prepare_err};

/// Bytes of event JSON one `read` returns at most (after its first event),
/// so a follower catching up never holds a huge batch.
const READ_BUDGET: usize = 4 << 20;

/// Rows one `read` asks for at most, whatever the caller's limit: the
/// budget above is met well before.
const READ_ROWS: i64 = 4096;

/// A time of the record as the database's `timestamptz`.
pub(super) fn at(t: Option<Timestamp>) -> Option<DateTime<Utc>> {
    t.and_then(|t| DateTime::from_timestamp_millis(t.as_millis()))
}

/// The events of an append or an import as the rows' columns.
pub(super) struct Rows {
    pub offsets: Vec<i64>,
    pub kinds: Vec<String>,
    pub bodies: Vec<String>,
    /// Bytes as the store measures them (JSON lines).
    pub bytes: u64,
}

impl Rows {
    pub(super) fn new() -> Self {
        Self {
            offsets: Vec::new(),
            kinds: Vec::new(),
            bodies: Vec::new(),
            bytes: 0,
        }
    }

    pub(super) fn push(
        &mut self,
        run_id: RunId,
        event: &RuntimeEvent,
        buf: &mut Vec<u8>,
    ) -> Result<(), StoreError> {
        let json = event_json(run_id, event, buf)?;
        self.bytes += json.len() as u64 + 1;
        self.bodies.push(json.to_owned());
        self.offsets.push(offset_param(event.offset.get()));
        self.kinds.push(event.kind.type_name().to_owned());
        Ok(())
    }

    pub(super) fn len(&self) -> usize {
        self.offsets.len()
    }
}

impl Inner {
    /// The epoch this instance writes `run_id` under; `NotFound` for no
    /// such run, else `Locked` unless it holds the run's lease.
    async fn writable(&self, run_id: RunId) -> Result<i64, StoreError> {
        match self.epoch(run_id) {
            Ok(epoch) => Ok(epoch),
            Err(e) => {
                self.require(run_id).await?;
                Err(e)
            }
        }
    }

    /// Appends `events` in one statement that moves the run's `next_offset`
    /// on only under this instance's lease and only if they continue the
    /// log, inserts them, and notifies followers at commit.
    pub(super) async fn append(
        &self,
        run_id: RunId,
        events: &[RuntimeEvent],
    ) -> Result<u64, StoreError> {
        let epoch = self.writable(run_id).await?;
        let Some(first) = events.first() else {
            return Ok(0);
        };
        let first = first.offset.get();
        check_continuation(run_id, first - 1, events)?;
        let mut rows = Rows::new();
        let mut buf = Vec::with_capacity(256);
        for event in events {
            rows.push(run_id, event, &mut buf)?;
        }
        let next = i64::try_from(rows.len())
            .ok()
            .and_then(|n| offset_param(first).checked_add(n))
            .ok_or_else(|| {
                StoreError::Conflict(format!("run {run_id}: offset {first} is out of range"))
            })?;
        // A run that starts (or goes on) is `running` in its row at once:
        // queries need no snapshot to see it. A stop (an end, a pause, a
        // wait) reaches the row with the final snapshot only: a row still
        // `running` when its writer died before that snapshot is what lets
        // a worker claim the run and settle it (`worker.rs`).
        let mut summary = application::ports::RunSummary::unreadable(run_id);
        let mut changed = false;
        for event in events {
            changed |= summary.apply(event);
        }
        let status = summary
            .status
            .filter(|s| changed && *s == domain::RunStatus::Running)
            .map(|s| s.as_str().to_owned());
        let client = self.client().await?;
        // Counted before it is sent: a flush after it must sync, whether
        // or not this future lives to see the answer.
        self.appended
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        let appended = client
            .query_opt(
                &client
                    .prepare_cached(
                        "WITH fence AS ( \
                   UPDATE awr_runs SET next_offset = $5, status = coalesce($10, status) \
                   WHERE run_id = $1 AND lease_owner = $2 AND lease_epoch = $3 \
                     AND next_offset = $4 AND lease_expires_at > now() \
                   RETURNING run_id), \
                 ins AS ( \
                   INSERT INTO awr_events (run_id, \"offset\", epoch, kind, body) \
                   SELECT fence.run_id, u.o, $3, u.k, u.b \
                   FROM fence, unnest($6::int8[], $7::text[], $8::text[]) AS u(o, k, b) \
                   RETURNING 1) \
                 SELECT (SELECT count(*) FROM ins), \
                        pg_notify($9, $1::text || ':' || $5::text) \
                 FROM fence",
                    )
                    .await
                    .map_err(prepare_err)?,
                &[
                    &run_id.as_uuid(),
                    &self.owner,
                    &epoch,
                    &offset_param(first),
                    &next,
                    &rows.offsets,
                    &rows.kinds,
                    &rows.bodies,
                    &CHANNEL,
                    &status,
                ],
            )
            .await;
        match appended {
            Ok(Some(_)) => {
                super::shared::lock(&self.upto).insert(run_id, next);
                self.notifies.wake(run_id);
                Ok(rows.bytes)
            }
            Ok(None) => Err(self.refused(&client, run_id, epoch, events).await),
            Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => Err(StoreError::Conflict(
                format!("run {run_id}: offset {first} is taken"),
            )),
            Err(e) => Err(pg_err(format!("append to run {run_id}"), e)),
        }
    }

    /// Why an append under `epoch` moved nothing: the run is gone, its
    /// lease was taken over, or the events do not continue its log.
    async fn refused(
        &self,
        client: &deadpool_postgres::Object,
        run_id: RunId,
        epoch: i64,
        events: &[RuntimeEvent],
    ) -> StoreError {
        let row = client
            .query_opt(
                "SELECT lease_owner, lease_epoch, next_offset, \
                 coalesce(lease_expires_at > now(), false) FROM awr_runs WHERE run_id = $1",
                &[&run_id.as_uuid()],
            )
            .await;
        let row = match row {
            Ok(Some(row)) => row,
            Ok(None) => return StoreError::NotFound(run_id),
            Err(e) => return pg_err(format!("append to run {run_id}"), e),
        };
        let owner: Option<String> = row.get(0);
        // Taken over, or expired (a writer stalled past its term may not
        // write, even before another takes the run: it is not known alive).
        if owner.as_deref() != Some(self.owner.as_str())
            || row.get::<_, i64>(1) != epoch
            || !row.get::<_, bool>(3)
        {
            self.lost(run_id, epoch);
            return lease_lost(run_id);
        }
        let last = u64::try_from(row.get::<_, i64>(2) - 1).unwrap_or(0);
        match check_continuation(run_id, last, events) {
            Err(e) => e,
            Ok(_) => StoreError::Conflict(format!(
                "run {run_id}: another append came first; the log now ends at {last}"
            )),
        }
    }

    /// Up to `limit` events after `after`, in order, within the read budget.
    pub(super) async fn read(
        &self,
        run_id: RunId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<RuntimeEvent>, StoreError> {
        let client = self.client().await?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX).min(READ_ROWS);
        // One statement tells an unknown run (no row) from an empty read
        // (one row of NULLs).
        let rows = client
            .query(
                &client
                    .prepare_cached(
                        "SELECT e.\"offset\", e.body FROM awr_runs AS r LEFT JOIN LATERAL ( \
                   SELECT \"offset\", body FROM awr_events \
                   WHERE run_id = r.run_id AND \"offset\" > $2 \
                   ORDER BY \"offset\" LIMIT $3) AS e ON true \
                 WHERE r.run_id = $1",
                    )
                    .await
                    .map_err(prepare_err)?,
                &[&run_id.as_uuid(), &offset_param(after), &limit],
            )
            .await
            .map_err(|e| pg_err(format!("read run {run_id}"), e))?;
        if rows.is_empty() {
            return Err(StoreError::NotFound(run_id));
        }
        let mut events = Vec::with_capacity(rows.len());
        let mut bytes = 0;
        for (i, row) in rows.iter().enumerate() {
            // Offsets end far below u64::MAX; a read after it finds none.
            let expected = after.saturating_add(1).saturating_add(i as u64);
            let Some(offset) = row.get::<_, Option<i64>>(0) else {
                break;
            };
            let bad = |detail: String| StoreError::BadEvent {
                offset: expected,
                detail: format!(
                    "PostgreSQL {} awr_events row (run {run_id}, offset {expected}): {detail}",
                    self.db.target
                ),
            };
            if u64::try_from(offset).ok() != Some(expected) {
                return Err(bad(format!("missing (the next row is offset {offset})")));
            }
            let body: &str = row.get(1);
            let event = row_event(body.as_bytes(), run_id, expected).map_err(bad)?;
            bytes += body.len();
            events.push(event);
            if bytes >= READ_BUDGET {
                break;
            }
        }
        Ok(events)
    }

    pub(super) async fn last(&self, run_id: RunId) -> Result<u64, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                &client
                    .prepare_cached("SELECT next_offset - 1 FROM awr_runs WHERE run_id = $1")
                    .await
                    .map_err(prepare_err)?,
                &[&run_id.as_uuid()],
            )
            .await
            .map_err(|e| pg_err(format!("read the last offset of run {run_id}"), e))?
            .ok_or(StoreError::NotFound(run_id))?;
        Ok(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0))
    }

    /// Replaces the run's snapshot, and the columns of its row queries read,
    /// under this instance's lease.
    pub(super) async fn save_snapshot(&self, snapshot: &RunSnapshot) -> Result<u64, StoreError> {
        let run_id = snapshot.run_id;
        let epoch = self.writable(run_id).await?;
        let row = SnapshotRow::of(snapshot)?;
        let client = self.client().await?;
        self.appended
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        let saved = client
            .execute(
                &client
                    .prepare_cached(
                        "WITH fence AS ( \
                   UPDATE awr_runs SET status = coalesce($6, status), workflow = $7, \
                     started_at = $8, updated_at = $9, due_at = $10 \
                   WHERE run_id = $1 AND lease_owner = $2 AND lease_epoch = $3 \
                     AND lease_expires_at > now() \
                   RETURNING run_id) \
                 INSERT INTO awr_snapshots (run_id, body, last_offset) \
                 SELECT run_id, $4, $5 FROM fence \
                 ON CONFLICT (run_id) DO UPDATE \
                 SET body = excluded.body, last_offset = excluded.last_offset",
                    )
                    .await
                    .map_err(prepare_err)?,
                &[
                    &run_id.as_uuid(),
                    &self.owner,
                    &epoch,
                    &row.json,
                    &row.offset,
                    &row.status,
                    &row.workflow,
                    &row.started_at,
                    &row.updated_at,
                    &row.due_at,
                ],
            )
            .await
            .map_err(|e| pg_err(format!("save the snapshot of run {run_id}"), e))?;
        if saved == 0 {
            if !self.exists(&client, run_id).await? {
                return Err(StoreError::NotFound(run_id));
            }
            self.lost(run_id, epoch);
            return Err(lease_lost(run_id));
        }
        Ok(row.json.len() as u64)
    }

    pub(super) async fn load_snapshot(
        &self,
        run_id: RunId,
    ) -> Result<Option<RunSnapshot>, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                &client
                    .prepare_cached(
                        "SELECT s.body FROM awr_runs AS r \
                         LEFT JOIN awr_snapshots AS s USING (run_id) WHERE r.run_id = $1",
                    )
                    .await
                    .map_err(prepare_err)?,
                &[&run_id.as_uuid()],
            )
            .await
            .map_err(|e| pg_err(format!("read the snapshot of run {run_id}"), e))?
            .ok_or(StoreError::NotFound(run_id))?;
        let Some(json) = row.get::<_, Option<&str>>(0) else {
            return Ok(None);
        };
        RunSnapshot::from_json(json.as_bytes(), run_id)
            .map(Some)
            .map_err(|e| {
                StoreError::Corrupt(format!(
                    "PostgreSQL {} awr_snapshots row of run {run_id}: {e}",
                    self.db.target
                ))
            })
    }

    pub(super) async fn list_runs(&self) -> Result<Vec<RunId>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                &client
                    .prepare_cached("SELECT run_id FROM awr_runs")
                    .await
                    .map_err(prepare_err)?,
                &[],
            )
            .await
            .map_err(|e| pg_err("list runs".to_owned(), e))?;
        Ok(rows
            .iter()
            .filter_map(|row| RunId::new(row.get(0)).ok())
            .collect())
    }
}

/// A snapshot as its run's row holds it: the JSON and the columns queries
/// read.
pub(super) struct SnapshotRow {
    pub json: String,
    pub offset: i64,
    pub status: Option<String>,
    pub workflow: String,
    pub started_at: Option<DateTime<Utc>>,
    pub updated_at: Option<DateTime<Utc>>,
    /// A `waiting` run's next question to settle ([`RunSnapshot::question_due_at`]).
    pub due_at: Option<DateTime<Utc>>,
}

impl SnapshotRow {
    pub(super) fn of(snapshot: &RunSnapshot) -> Result<Self, StoreError> {
        let json = snapshot.to_json_string().map_err(|e| {
            StoreError::io(
                format!("cannot serialize the snapshot of run {}", snapshot.run_id),
                e.into(),
            )
        })?;
        Ok(Self {
            json,
            offset: offset_param(snapshot.last_offset),
            status: serde_json::to_value(snapshot.status)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned)),
            workflow: snapshot.workflow.name.clone(),
            started_at: at(snapshot.started_at),
            updated_at: at(snapshot.updated_at),
            due_at: match snapshot.status {
                RunStatus::Waiting => at(snapshot.question_due_at()),
                _ => None,
            },
        })
    }
}

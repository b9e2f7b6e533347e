//! A run's transcript copied in and out of the database whole, and
//! removed: the [`RunFiles`] of [`PgTranscripts`], which `migrate` and
//! `prune` use. A copy keeps every byte, a damaged line and a torn tail
//! included, so a transcript goes there and back unchanged.

use application::ports::{RunFileSet, RunFiles, StoreError};
use async_trait::async_trait;
use domain::{RunId, Timestamp};
use tokio_postgres::error::SqlState;

use super::shared::{pg_err, prepare_err};
use super::transcript::{PgTranscripts, fetch_blobs};
use crate::blobs::referenced;

/// Lines one statement of an import inserts at most, and bytes: a long
/// transcript is copied in several, inside one transaction.
const IMPORT_ROWS: usize = 1024;
const IMPORT_BYTES: usize = 8 << 20;

/// Only the field an import numbers a line by.
#[derive(serde::Deserialize)]
struct SeqOnly {
    seq: u64,
}

/// `transcript` cut into its lines, each with its newline (the last may
/// have none: a file a crash left torn).
fn split_lines(transcript: &[u8]) -> Vec<&[u8]> {
    transcript
        .split_inclusive(|b| *b == b'\n')
        .collect::<Vec<_>>()
}

impl PgTranscripts {
    async fn store_client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.client().await.map_err(StoreError::io_msg)
    }
}

#[async_trait]
impl RunFiles for PgTranscripts {
    async fn export(&self, run_id: RunId) -> Result<Option<RunFileSet>, StoreError> {
        let client = self.store_client().await?;
        let rows = client
            .query(
                &client
                    .prepare_cached(
                        "SELECT body FROM awr_transcript_lines WHERE run_id = $1 ORDER BY line",
                    )
                    .await
                    .map_err(prepare_err)?,
                &[&run_id.as_uuid()],
            )
            .await
            .map_err(|e| pg_err(format!("read the transcript of run {run_id}"), e))?;
        if rows.is_empty() {
            return Ok(None);
        }
        let mut transcript = Vec::new();
        for row in &rows {
            transcript.extend_from_slice(row.get::<_, &[u8]>(0));
        }
        let names: Vec<String> = referenced(&transcript)
            .into_iter()
            .map(|hex| format!("sha256-{hex}"))
            .collect();
        let mut blobs = Vec::new();
        if !names.is_empty() {
            let found: std::collections::HashMap<String, Vec<u8>> =
                fetch_blobs(&client, run_id, &names)
                    .await?
                    .into_iter()
                    .collect();
            for name in names {
                let bytes = found.get(&name).cloned().ok_or_else(|| {
                    StoreError::Corrupt(format!(
                        "PostgreSQL {}: the transcript of run {run_id} names blob {name}, \
                         which is missing",
                        self.db.target
                    ))
                })?;
                blobs.push((name, bytes));
            }
        }
        Ok(Some(RunFileSet { transcript, blobs }))
    }

    async fn has_transcript(&self, run_id: RunId) -> Result<bool, StoreError> {
        let client = self.store_client().await?;
        let row = client
            .query_one(
                &client
                    .prepare_cached(
                        "SELECT EXISTS (SELECT 1 FROM awr_transcript_lines WHERE run_id = $1)",
                    )
                    .await
                    .map_err(prepare_err)?,
                &[&run_id.as_uuid()],
            )
            .await
            .map_err(|e| pg_err(format!("look up the transcript of run {run_id}"), e))?;
        Ok(row.get(0))
    }

    /// In one transaction, synced at commit: what the run had is replaced
    /// whole, and a crash leaves the old transcript or the new one.
    async fn import(&self, run_id: RunId, files: RunFileSet) -> Result<(), StoreError> {
        for (name, _) in &files.blobs {
            let hex = name.strip_prefix("sha256-").unwrap_or_default();
            if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(StoreError::Corrupt(format!(
                    "blob name {name} of run {run_id}"
                )));
            }
        }
        let mut client = self.store_client().await?;
        let sql = |what: &str| {
            let what = format!("{what} of run {run_id}");
            move |e| pg_err(what, e)
        };
        let tx = client
            .transaction()
            .await
            .map_err(sql("begin copying in the transcript"))?;
        let id = run_id.as_uuid();
        tx.execute("SET LOCAL synchronous_commit = on", &[])
            .await
            .map_err(sql("copy in the transcript"))?;
        tx.execute("DELETE FROM awr_transcript_lines WHERE run_id = $1", &[&id])
            .await
            .map_err(sql("replace the transcript"))?;
        tx.execute("DELETE FROM awr_transcript_blobs WHERE run_id = $1", &[&id])
            .await
            .map_err(sql("replace the transcript's blobs"))?;
        for (name, bytes) in &files.blobs {
            tx.execute(
                "INSERT INTO awr_transcript_blobs (run_id, name, bytes) VALUES ($1, $2, $3) \
                 ON CONFLICT DO NOTHING",
                &[&id, name, bytes],
            )
            .await
            .map_err(|e| missing_run(run_id, e, "copy in a blob of the transcript"))?;
        }
        let insert = tx
            .prepare(
                "INSERT INTO awr_transcript_lines (run_id, line, seq, body) \
                 SELECT $1, u.l, u.s, u.b FROM unnest($2::int8[], $3::int8[], $4::bytea[]) \
                 AS u(l, s, b)",
            )
            .await
            .map_err(prepare_err)?;
        let lines = split_lines(&files.transcript);
        let mut batch = (Vec::new(), Vec::new(), Vec::<&[u8]>::new(), 0usize);
        for (i, body) in lines.iter().enumerate() {
            let seq = serde_json::from_slice::<SeqOnly>(body)
                .ok()
                .and_then(|line| i64::try_from(line.seq).ok());
            batch.0.push(i64::try_from(i + 1).unwrap_or(i64::MAX));
            batch.1.push(seq);
            batch.2.push(body);
            batch.3 += body.len();
            if batch.0.len() >= IMPORT_ROWS || batch.3 >= IMPORT_BYTES || i + 1 == lines.len() {
                tx.execute(&insert, &[&id, &batch.0, &batch.1, &batch.2])
                    .await
                    .map_err(|e| missing_run(run_id, e, "copy in the transcript"))?;
                batch = (Vec::new(), Vec::new(), Vec::new(), 0);
            }
        }
        tx.commit()
            .await
            .map_err(sql("commit the copied transcript"))
    }

    async fn remove(&self, run_id: RunId) -> Result<(), StoreError> {
        let mut client = self.store_client().await?;
        let tx = client
            .transaction()
            .await
            .map_err(|e| pg_err(format!("remove the transcript of run {run_id}"), e))?;
        for table in ["awr_transcript_lines", "awr_transcript_blobs"] {
            tx.execute(
                &format!("DELETE FROM {table} WHERE run_id = $1"),
                &[&run_id.as_uuid()],
            )
            .await
            .map_err(|e| pg_err(format!("remove the transcript of run {run_id}"), e))?;
        }
        tx.commit()
            .await
            .map_err(|e| pg_err(format!("remove the transcript of run {run_id}"), e))
    }

    /// The runs with a transcript, each with when its run was last written:
    /// a transcript goes with its run (`ON DELETE CASCADE`), so none is
    /// ever left without one for `prune` to find.
    async fn listed(&self) -> Result<Vec<(RunId, Timestamp)>, StoreError> {
        let client = self.store_client().await?;
        let rows = client
            .query(
                "SELECT r.run_id, coalesce(r.updated_at, r.created_at) FROM awr_runs r \
                 WHERE EXISTS (SELECT 1 FROM awr_transcript_lines t WHERE t.run_id = r.run_id) \
                    OR EXISTS (SELECT 1 FROM awr_transcript_blobs b WHERE b.run_id = r.run_id)",
                &[],
            )
            .await
            .map_err(|e| pg_err("list the runs with a transcript".to_owned(), e))?;
        let mut listed = Vec::with_capacity(rows.len());
        for row in rows {
            let id: uuid::Uuid = row.get(0);
            let at: chrono::DateTime<chrono::Utc> = row.get(1);
            let run_id = RunId::new(id)
                .map_err(|e| StoreError::Corrupt(format!("run id {id} in awr_runs: {e}")))?;
            listed.push((run_id, Timestamp::from_millis(at.timestamp_millis())));
        }
        Ok(listed)
    }
}

/// A failed copy, saying so when the run is not in the store (the key of
/// the transcript's rows).
fn missing_run(run_id: RunId, e: tokio_postgres::Error, what: &str) -> StoreError {
    if e.code() == Some(&SqlState::FOREIGN_KEY_VIOLATION) {
        return StoreError::NotFound(run_id);
    }
    pg_err(format!("{what} of run {run_id}"), e)
}

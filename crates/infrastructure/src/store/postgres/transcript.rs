//! Transcripts in the database (schema v7): a run's exchange transcript as
//! rows of `awr_transcript_lines`, each line exactly as a transcript file
//! holds it, so a run written on any machine is read, followed, copied and
//! removed with its store, and no machine's disk holds a part of it.
//!
//! Why it is shaped this way:
//! - A line is a row keyed by its place (`line`), its `seq` beside it: a
//!   line copied in from a damaged file keeps its place and bytes though
//!   it has no `seq`, so `migrate` gives back every byte.
//! - Appends commit without waiting for the server's sync, as the run's
//!   own appends do; a transcript file is not synced either.
//! - Lines are fenced like the run's events: a recorder writes only under
//!   the lease epoch of its writer's lock ([`Transcript::fence`]; else the
//!   one the run had when it was opened), in the statement that inserts
//!   them, so a writer that lost the run (a pause, a partition), even
//!   before it opened the transcript, writes no line the new writer's log
//!   does not hold.
//! - Two recorders of one run under one lease (a run's transcript opened
//!   twice in a process) never repeat a place: the key refuses the
//!   second, which reads where the transcript stands and numbers its line
//!   after it.
//! - Large values stay in their line: PostgreSQL compresses and stores a
//!   large value out of line itself. Lines copied in from a file keep the
//!   references the file had, and the blobs they name go to
//!   `awr_transcript_blobs`, read back when such a line is.
//! - A follower reads from the line after the `seq` it has shown, through
//!   an index, never the whole transcript again.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use application::ports::{
    RunFileSet, RunFiles, StoreError, Transcript, TranscriptError, TranscriptLines,
    TranscriptReader, Transcripts,
};
use async_trait::async_trait;
use domain::transcript::{ExchangeDraft, ExchangeEvent};
use domain::{RunId, Timestamp};
use tokio_postgres::error::SqlState;

use super::shared::{pg_err, prepare_err, said};
use super::{PgDatabase, PgOpenError};
use crate::blobs::{HeldBlobs, referenced};
use crate::transcript::LineChecker;

/// How often an append numbers its line again after another writer took
/// its place, before it gives up.
const APPEND_TRIES: usize = 8;

/// The transcripts of the runs of one database: written, read, followed,
/// and copied and removed as the runs' files ([`RunFiles`]).
#[derive(Debug, Clone)]
pub struct PgTranscripts {
    pub(super) db: PgDatabase,
}

impl PgTranscripts {
    /// The transcripts in `db`.
    pub fn new(db: PgDatabase) -> Self {
        Self { db }
    }

    /// The transcripts in the database at `url`, which must hold an awr
    /// store already (its runs are made by the store, never here).
    pub async fn open(url: &str) -> Result<Self, PgOpenError> {
        Ok(Self::new(PgDatabase::open_existing(url).await?))
    }

    pub(super) async fn client(&self) -> Result<deadpool_postgres::Object, String> {
        self.db
            .pool
            .get()
            .await
            .map_err(|e| format!("cannot connect to PostgreSQL at {}: {e}", self.db.target))
    }

    /// Where the transcript of `run_id` is, naming its problems.
    fn place(&self, run_id: RunId) -> String {
        format!(
            "the transcript of run {run_id} in PostgreSQL {}, line",
            self.db.target
        )
    }

    /// The lines of `run_id` after its line of `seq` `after` (all for 0),
    /// judged as a file's are; `None` when the run has none.
    async fn lines_after(
        &self,
        run_id: RunId,
        after: u64,
    ) -> Result<Option<TranscriptLines>, TranscriptError> {
        let io = |what: String| TranscriptError::Io(what);
        let client = self.client().await.map_err(io)?;
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        // The row of place 0 says the transcript exists when no line is new.
        let statement = client
            .prepare_cached(
                "SELECT line, body FROM awr_transcript_lines \
                 WHERE run_id = $1 AND line > coalesce( \
                   (SELECT line FROM awr_transcript_lines WHERE run_id = $1 AND seq <= $2 \
                    ORDER BY seq DESC LIMIT 1), 0) \
                 UNION ALL \
                 SELECT 0, NULL WHERE EXISTS (SELECT 1 FROM awr_transcript_lines WHERE run_id = $1) \
                 ORDER BY 1",
            )
            .await
            .map_err(|e| io(format!("PostgreSQL {}: {}", self.db.target, said(&e))))?;
        let rows = client
            .query(&statement, &[&run_id.as_uuid(), &after])
            .await
            .map_err(|e| {
                io(format!(
                    "PostgreSQL {}: cannot read the transcript of run {run_id}: {}",
                    self.db.target,
                    said(&e)
                ))
            })?;
        if rows.is_empty() {
            return Ok(None);
        }
        let lines: Vec<(i64, Vec<u8>)> = rows
            .iter()
            .filter_map(|row| Some((row.get(0), row.get::<_, Option<Vec<u8>>>(1)?)))
            .collect();
        let blobs = self.blobs_named(&client, run_id, &lines).await?;
        let mut checker = LineChecker::new(
            self.place(run_id),
            &blobs,
            Some(run_id),
            u64::try_from(after).unwrap_or(0) + 1,
        );
        let last = lines.len().saturating_sub(1);
        for (i, (line, body)) in lines.iter().enumerate() {
            let number = usize::try_from(*line).unwrap_or(usize::MAX);
            if body.last() != Some(&b'\n') && i == last {
                // Copied in from a file a crash left torn: as a file's
                // reader does, the torn last line is not shown.
                tracing::warn!(run = %run_id, line, "ignoring a torn last line of the transcript");
                break;
            }
            checker.line(number, body);
        }
        Ok(Some(checker.finish()))
    }

    /// The blobs `lines` refer to (lines copied in from a file do).
    async fn blobs_named(
        &self,
        client: &deadpool_postgres::Object,
        run_id: RunId,
        lines: &[(i64, Vec<u8>)],
    ) -> Result<HeldBlobs, TranscriptError> {
        let place = format!("PostgreSQL {}, run {run_id}", self.db.target);
        let mut names: Vec<String> = lines
            .iter()
            .flat_map(|(_, body)| referenced(body))
            .map(|hex| format!("sha256-{hex}"))
            .collect();
        if names.is_empty() {
            return Ok(HeldBlobs::new(place, []));
        }
        names.sort();
        names.dedup();
        let blobs = fetch_blobs(client, run_id, &names)
            .await
            .map_err(|e| TranscriptError::Io(e.to_string()))?;
        Ok(HeldBlobs::new(place, blobs))
    }
}

/// The blobs of `run_id` among `names`.
pub(super) async fn fetch_blobs(
    client: &deadpool_postgres::Object,
    run_id: RunId,
    names: &[String],
) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
    let rows = client
        .query(
            &client
                .prepare_cached(
                    "SELECT name, bytes FROM awr_transcript_blobs \
                     WHERE run_id = $1 AND name = ANY($2)",
                )
                .await
                .map_err(prepare_err)?,
            &[&run_id.as_uuid(), &names],
        )
        .await
        .map_err(|e| pg_err(format!("read the blobs of run {run_id}'s transcript"), e))?;
    Ok(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
}

#[async_trait]
impl Transcripts for PgTranscripts {
    async fn open(
        &self,
        run_id: RunId,
        parent_run_id: Option<RunId>,
    ) -> Result<Arc<dyn Transcript>, TranscriptError> {
        let recorder = PgTranscript {
            db: self.db.clone(),
            run_id,
            parent_run_id,
            taken: std::sync::Mutex::new(Taken {
                next: Next { line: 1, seq: 1 },
                lines: Vec::new(),
                closed: false,
            }),
            flushing: tokio::sync::Mutex::new(()),
            epoch: AtomicI64::new(0),
        };
        let client = recorder.client().await?;
        // A torn last line (copied in from a file) is cut, as a file's
        // writer cuts it: a line after it would bury it mid-transcript.
        client
            .execute(
                "DELETE FROM awr_transcript_lines WHERE run_id = $1 AND line = \
                   (SELECT max(line) FROM awr_transcript_lines WHERE run_id = $1) \
                 AND (length(body) = 0 OR get_byte(body, length(body) - 1) <> 10)",
                &[&run_id.as_uuid()],
            )
            .await
            .map_err(|e| recorder.error("open", e))?;
        let next = recorder.stands(&client).await?;
        recorder.taken().next = next;
        // The epoch of its writer's lease, which the opener holds.
        let row = client
            .query_opt(
                "SELECT lease_epoch FROM awr_runs WHERE run_id = $1",
                &[&run_id.as_uuid()],
            )
            .await
            .map_err(|e| recorder.error("open", e))?;
        recorder
            .epoch
            .store(row.map_or(0, |row| row.get(0)), Ordering::Relaxed);
        Ok(Arc::new(recorder))
    }
}

#[async_trait]
impl TranscriptReader for PgTranscripts {
    async fn read(&self, run_id: RunId) -> Result<Option<TranscriptLines>, TranscriptError> {
        self.lines_after(run_id, 0).await
    }

    async fn read_after(
        &self,
        run_id: RunId,
        after: u64,
    ) -> Result<Option<TranscriptLines>, TranscriptError> {
        self.lines_after(run_id, after).await
    }
}

/// Where the next line goes.
#[derive(Debug, Clone, Copy)]
struct Next {
    line: i64,
    seq: u64,
}

impl Next {
    /// Where the line after `n` lines from here goes.
    fn after(self, n: usize) -> Self {
        Self {
            line: self.line + i64::try_from(n).unwrap_or(i64::MAX),
            seq: self.seq + n as u64,
        }
    }
}

/// What a recorder has taken and not yet written.
#[derive(Debug)]
struct Taken {
    next: Next,
    /// The lines, numbered from where the transcript stood when the first
    /// was taken.
    lines: Vec<ExchangeEvent>,
    closed: bool,
}

/// One run's transcript in the database, open for appending. Lines are
/// taken by `append` and written together by `flush`, which the runner
/// calls before it appends their events: one statement for all the lines
/// of a step instead of a round trip each.
#[derive(Debug)]
struct PgTranscript {
    db: PgDatabase,
    run_id: RunId,
    parent_run_id: Option<RunId>,
    /// A `std` mutex: held for no `.await`.
    taken: std::sync::Mutex<Taken>,
    /// Held across a flush, so flushes write in the order lines were taken.
    flushing: tokio::sync::Mutex<()>,
    /// The lease epoch lines are written under (see the module's doc).
    epoch: AtomicI64,
}

impl PgTranscript {
    fn taken(&self) -> std::sync::MutexGuard<'_, Taken> {
        super::shared::lock(&self.taken)
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, TranscriptError> {
        self.db.pool.get().await.map_err(|e| {
            TranscriptError::Io(format!(
                "cannot connect to PostgreSQL at {}: {e}",
                self.db.target
            ))
        })
    }

    fn error(&self, what: &str, e: tokio_postgres::Error) -> TranscriptError {
        TranscriptError::Io(format!(
            "PostgreSQL {}: cannot {what} the transcript of run {}: {}",
            self.db.target,
            self.run_id,
            said(&e)
        ))
    }

    /// Where the transcript stands: after its last line and its last `seq`.
    async fn stands(&self, client: &deadpool_postgres::Object) -> Result<Next, TranscriptError> {
        let statement = client
            .prepare_cached(
                "SELECT coalesce(max(line), 0), coalesce(max(seq), 0) \
                 FROM awr_transcript_lines WHERE run_id = $1",
            )
            .await
            .map_err(|e| self.error("read", e))?;
        let row = client
            .query_one(&statement, &[&self.run_id.as_uuid()])
            .await
            .map_err(|e| self.error("read", e))?;
        let (line, seq): (i64, i64) = (row.get(0), row.get(1));
        Ok(Next {
            line: line + 1,
            seq: u64::try_from(seq).unwrap_or(0) + 1,
        })
    }

    /// Writes `lines`, numbered from `from`, in one statement; `false` when
    /// another writer of the run took one of their places.
    async fn write(
        &self,
        client: &deadpool_postgres::Object,
        from: Next,
        lines: &mut [ExchangeEvent],
    ) -> Result<bool, TranscriptError> {
        let mut places = Vec::with_capacity(lines.len());
        let mut seqs = Vec::with_capacity(lines.len());
        let mut bodies = Vec::with_capacity(lines.len());
        for (i, event) in lines.iter_mut().enumerate() {
            event.seq = from.seq + i as u64;
            let mut body = Vec::with_capacity(256);
            event.write_json(&mut body).map_err(|e| {
                TranscriptError::Io(format!(
                    "cannot serialize line {} of the transcript of run {}: {e}",
                    event.seq, self.run_id
                ))
            })?;
            body.push(b'\n');
            places.push(from.line + i as i64);
            seqs.push(i64::try_from(event.seq).unwrap_or(i64::MAX));
            bodies.push(body);
        }
        let statement = client
            .prepare_cached(
                "INSERT INTO awr_transcript_lines (run_id, line, seq, body) \
                 SELECT $1, u.l, u.s, u.b FROM unnest($2::int8[], $3::int8[], $4::bytea[]) \
                 AS u(l, s, b) \
                 WHERE EXISTS (SELECT 1 FROM awr_runs WHERE run_id = $1 AND lease_epoch = $5 \
                   AND lease_owner IS NOT NULL AND lease_expires_at > now())",
            )
            .await
            .map_err(|e| self.error("append to", e))?;
        let inserted = client
            .execute(
                &statement,
                &[
                    &self.run_id.as_uuid(),
                    &places,
                    &seqs,
                    &bodies,
                    &self.epoch.load(Ordering::Relaxed),
                ],
            )
            .await;
        match inserted {
            Ok(0) => Err(TranscriptError::Io(format!(
                "PostgreSQL {}: run {}: this writer's lease was lost (another writer took \
                 the run over); its transcript takes no more lines from it",
                self.db.target, self.run_id
            ))),
            Ok(_) => Ok(true),
            Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => Ok(false),
            Err(e) if e.code() == Some(&SqlState::FOREIGN_KEY_VIOLATION) => {
                Err(TranscriptError::Io(format!(
                    "PostgreSQL {}: run {} is not in the store (deleted?); its transcript \
                     takes no more lines",
                    self.db.target, self.run_id
                )))
            }
            Err(e) => Err(self.error("append to", e)),
        }
    }
}

#[async_trait]
impl Transcript for PgTranscript {
    /// Takes the line, numbered after those taken before; it is written
    /// by the next [`Transcript::flush`].
    async fn append(&self, draft: ExchangeDraft) -> Result<ExchangeEvent, TranscriptError> {
        let mut taken = self.taken();
        if taken.closed {
            return Err(TranscriptError::Closed(self.run_id));
        }
        let seq = taken.next.seq + taken.lines.len() as u64;
        let event = draft.into_event(seq, self.run_id, self.parent_run_id);
        taken.lines.push(event.clone());
        Ok(event)
    }

    /// Writes the lines taken, in one statement. When another writer of
    /// the run took their places meanwhile, they are numbered again after
    /// its lines. Lines that cannot be written are dropped with the error:
    /// their events are not appended either.
    fn fence(&self, epoch: i64) {
        self.epoch.store(epoch, Ordering::Relaxed);
    }

    async fn flush(&self) -> Result<(), TranscriptError> {
        let _turn = self.flushing.lock().await;
        let (from, mut lines) = {
            let mut taken = self.taken();
            let lines = std::mem::take(&mut taken.lines);
            let from = taken.next;
            // Lines taken while these are written are numbered after them.
            taken.next = from.after(lines.len());
            (from, lines)
        };
        if lines.is_empty() {
            return Ok(());
        }
        let written = async {
            let client = self.client().await?;
            let mut at = from;
            for _ in 0..APPEND_TRIES {
                if self.write(&client, at, &mut lines).await? {
                    return Ok(at);
                }
                at = self.stands(&client).await?;
            }
            Err(TranscriptError::Io(format!(
                "PostgreSQL {}: other writers kept taking the places of the transcript lines \
                 of run {}",
                self.db.target, self.run_id
            )))
        };
        let result = written.await;
        // Where the lines taken meanwhile go: after these, or, when these
        // were dropped, where these would have gone.
        let next = match &result {
            Ok(at) => at.after(lines.len()),
            Err(_) => from,
        };
        let mut taken = self.taken();
        for (i, line) in taken.lines.iter_mut().enumerate() {
            line.seq = next.seq + i as u64;
        }
        taken.next = next;
        result.map(|_| ())
    }

    fn dropped(&self) -> u64 {
        0
    }

    async fn close(&self) {
        self.taken().closed = true;
    }
}

/// [`PgTranscripts`] on the database at a URL, opened when first used:
/// what the composition root hands out before any connection is made.
#[derive(Debug)]
pub struct PgTranscriptsOn {
    url: String,
    transcripts: tokio::sync::OnceCell<PgTranscripts>,
}

impl PgTranscriptsOn {
    /// Transcripts in the database at `url`.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            transcripts: tokio::sync::OnceCell::new(),
        }
    }

    async fn get(&self) -> Result<&PgTranscripts, String> {
        self.transcripts
            .get_or_try_init(async || PgTranscripts::open(&self.url).await)
            .await
            .map_err(|e| e.to_string())
    }
}

#[async_trait]
impl Transcripts for PgTranscriptsOn {
    async fn open(
        &self,
        run_id: RunId,
        parent_run_id: Option<RunId>,
    ) -> Result<Arc<dyn Transcript>, TranscriptError> {
        let transcripts = self.get().await.map_err(TranscriptError::Io)?;
        Transcripts::open(transcripts, run_id, parent_run_id).await
    }
}

#[async_trait]
impl TranscriptReader for PgTranscriptsOn {
    async fn read(&self, run_id: RunId) -> Result<Option<TranscriptLines>, TranscriptError> {
        let transcripts = self.get().await.map_err(TranscriptError::Io)?;
        transcripts.lines_after(run_id, 0).await
    }

    async fn read_after(
        &self,
        run_id: RunId,
        after: u64,
    ) -> Result<Option<TranscriptLines>, TranscriptError> {
        let transcripts = self.get().await.map_err(TranscriptError::Io)?;
        transcripts.lines_after(run_id, after).await
    }
}

#[async_trait]
impl RunFiles for PgTranscriptsOn {
    async fn export(&self, run_id: RunId) -> Result<Option<RunFileSet>, StoreError> {
        self.get()
            .await
            .map_err(StoreError::io_msg)?
            .export(run_id)
            .await
    }

    async fn has_transcript(&self, run_id: RunId) -> Result<bool, StoreError> {
        self.get()
            .await
            .map_err(StoreError::io_msg)?
            .has_transcript(run_id)
            .await
    }

    async fn import(&self, run_id: RunId, files: RunFileSet) -> Result<(), StoreError> {
        self.get()
            .await
            .map_err(StoreError::io_msg)?
            .import(run_id, files)
            .await
    }

    async fn remove(&self, run_id: RunId) -> Result<(), StoreError> {
        self.get()
            .await
            .map_err(StoreError::io_msg)?
            .remove(run_id)
            .await
    }

    async fn listed(&self) -> Result<Vec<(RunId, Timestamp)>, StoreError> {
        self.get().await.map_err(StoreError::io_msg)?.listed().await
    }
}

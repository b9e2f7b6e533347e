//! [`Transcripts`]: the canonical exchange transcript of each run (seed 000).
//!
//! The runner writes a line at each seam (run, step, agent messages, tools);
//! an implementation gives it its `seq`, puts it on disk first and only then
//! shows it to live subscribers, and never waits for a slow subscriber.

use std::sync::Arc;

use async_trait::async_trait;
use domain::RunId;
use domain::transcript::{ExchangeDraft, ExchangeEvent};

/// Why a transcript operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TranscriptError {
    /// The file could not be opened or written (names the file).
    #[error("transcript I/O error: {0}")]
    Io(String),
    /// A line that is not the last cannot be read (names the file and line).
    #[error("corrupt transcript line at {0}")]
    Corrupt(String),
    /// The transcript was closed.
    #[error("transcript of run {0} is closed")]
    Closed(RunId),
}

/// Opens the transcript of a run.
#[cfg_attr(any(test, feature = "testing"), mockall::automock)]
#[async_trait]
pub trait Transcripts: Send + Sync + 'static {
    /// The transcript of `run_id`; every line carries `parent_run_id` when given.
    async fn open(
        &self,
        run_id: RunId,
        parent_run_id: Option<RunId>,
    ) -> Result<Arc<dyn Transcript>, TranscriptError>;
}

/// One run's transcript, open for appending.
#[cfg_attr(any(test, feature = "testing"), mockall::automock)]
#[async_trait]
pub trait Transcript: Send + Sync {
    /// Appends one line (assigning its `seq`), then shows it to subscribers.
    async fn append(&self, draft: ExchangeDraft) -> Result<ExchangeEvent, TranscriptError>;

    /// Events live subscribers have missed so far (all subscribers together).
    fn dropped(&self) -> u64;

    /// Ends the transcript; idempotent.
    async fn close(&self);
}

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
///
/// A sink of the program's own, keeping every line in memory:
///
/// ```
/// # extern crate domain as awr_domain;
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use std::sync::{Arc, Mutex};
///
/// use awr_application::ports::{AgentMessage, AgentRequest, AgentResult, AgentStream};
/// use awr_application::ports::{QueryError, QueryFn, Transcript, TranscriptError, Transcripts};
/// use awr_application::{RunRequest, Runtime};
/// use awr_domain::RunId;
/// use awr_domain::transcript::{ExchangeDraft, ExchangeEvent, ExchangeType};
/// use awr_domain::workflow::Provider;
/// use awr_domain::WorkflowDef;
/// use awr_infrastructure::clock::{RandomIds, SystemClock};
/// use awr_infrastructure::store::MemoryRunStore;
///
/// type Lines = Arc<Mutex<Vec<ExchangeEvent>>>;
///
/// /// Every run's lines, in one list.
/// struct InMemory(Lines);
///
/// #[async_trait::async_trait]
/// impl Transcripts for InMemory {
///     async fn open(&self, run_id: RunId, parent: Option<RunId>) -> Result<Arc<dyn Transcript>, TranscriptError> {
///         Ok(Arc::new(OneRun { run_id, parent, seq: AtomicU64::new(0), lines: self.0.clone() }))
///     }
/// }
///
/// struct OneRun { run_id: RunId, parent: Option<RunId>, seq: AtomicU64, lines: Lines }
///
/// #[async_trait::async_trait]
/// impl Transcript for OneRun {
///     async fn append(&self, draft: ExchangeDraft) -> Result<ExchangeEvent, TranscriptError> {
///         let seq = self.seq.fetch_add(1, Ordering::SeqCst) + 1;
///         let line = draft.into_event(seq, self.run_id, self.parent);
///         self.lines.lock().map_err(|e| TranscriptError::Io(e.to_string()))?.push(line.clone());
///         Ok(line)
///     }
///     fn dropped(&self) -> u64 {
///         0
///     }
///     async fn close(&self) {}
/// }
///
/// /// Says hello.
/// struct Hello;
///
/// #[async_trait::async_trait]
/// impl QueryFn for Hello {
///     async fn query(&self, _: AgentRequest) -> Result<AgentStream, QueryError> {
///         let text = "hello".to_owned();
///         let messages = [AgentMessage::Text { content: text.clone() }, AgentMessage::Completed(AgentResult { text, ..Default::default() })];
///         Ok(Box::pin(futures::stream::iter(messages.map(Ok))))
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let lines = Lines::default();
/// let runtime = Runtime::builder(Arc::new(MemoryRunStore::new()), Arc::new(SystemClock), Arc::new(RandomIds))
///     .provider(Provider::Mock, Arc::new(Hello))
///     .transcripts(Arc::new(InMemory(lines.clone())))
///     .build();
/// let workflow = Arc::new(WorkflowDef::from_yaml("name: w\nagents: {a: {provider: mock}}\nsteps: [{agent: a}]\n")?);
/// runtime.run(RunRequest { workflow, input: "hi".into(), source: None, started_by: None }).await?;
///
/// let lines = lines.lock().expect("not poisoned").clone();
/// assert_eq!(lines.first().map(|l| (l.seq, &l.kind)), Some((1, &ExchangeType::RunStarted)));
/// assert_eq!(lines.last().map(|l| &l.kind), Some(&ExchangeType::RunCompleted));
/// let reply = lines.iter().find(|l| l.kind == ExchangeType::MessageAssistant).expect("the agent's reply");
/// assert!(reply.payload.to_string().contains("hello"), "{}", reply.payload);
/// # Ok(())
/// # }
/// ```
#[cfg_attr(all(any(test, feature = "testing"), not(doctest)), mockall::automock)]
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
#[cfg_attr(all(any(test, feature = "testing"), not(doctest)), mockall::automock)]
#[async_trait]
pub trait Transcript: Send + Sync {
    /// Appends one line (assigning its `seq`), then shows it to subscribers.
    /// A transcript that writes at [`Transcript::flush`] may number the
    /// line again there, when another writer took its place meanwhile.
    async fn append(&self, draft: ExchangeDraft) -> Result<ExchangeEvent, TranscriptError>;

    /// Writes the lines appended so far where the transcript keeps them,
    /// if [`Transcript::append`] only took them: the runner flushes before
    /// it appends the events those lines come from, so the log never holds
    /// an event whose lines are missing. A transcript that writes each line
    /// as it is appended (a file) has nothing to do; one that writes them
    /// together (a database: one statement for many lines) does it here.
    async fn flush(&self) -> Result<(), TranscriptError> {
        Ok(())
    }

    /// Its writer holds the run under lease epoch `epoch`
    /// ([`crate::ports::RunLock::epoch`]): a transcript that fences its
    /// writes by the lease writes only while that epoch holds, so a writer
    /// that lost the run adds no line. Nothing to do for the others.
    fn fence(&self, _epoch: i64) {}

    /// Events live subscribers have missed so far (all subscribers together).
    fn dropped(&self) -> u64;

    /// Ends the transcript; idempotent.
    async fn close(&self);
}

/// A transcript as read: the lines that are what they should be, and a
/// report of each one that is not.
#[derive(Debug, Default)]
pub struct TranscriptLines {
    /// The good lines, in order.
    pub events: Vec<ExchangeEvent>,
    /// One message per bad line, naming where it is (for a file, its path
    /// and line number) and what is wrong with it.
    pub problems: Vec<String>,
}

/// Reads runs' transcripts back, as they stand: a reader in another
/// process than the writer sees every line the writer has finished.
#[cfg_attr(all(any(test, feature = "testing"), not(doctest)), mockall::automock)]
#[async_trait]
pub trait TranscriptReader: Send + Sync + 'static {
    /// Every line of the transcript of `run_id`, going on past bad lines
    /// (each reported in [`TranscriptLines::problems`]); `Ok(None)` when
    /// the run has no transcript.
    async fn read(&self, run_id: RunId) -> Result<Option<TranscriptLines>, TranscriptError>;

    /// The lines of the transcript of `run_id` whose `seq` is after
    /// `after`, and the problems of the lines read (a reader may read, and
    /// report, more than those): what a follower that has shown `after`
    /// reads next. `Ok(None)` when the run has no transcript. By default,
    /// [`TranscriptReader::read`] filtered; a reader that can read from a
    /// line on does so.
    async fn read_after(
        &self,
        run_id: RunId,
        after: u64,
    ) -> Result<Option<TranscriptLines>, TranscriptError> {
        let mut read = self.read(run_id).await?;
        if let Some(read) = &mut read {
            read.events.retain(|e| e.seq > after);
        }
        Ok(read)
    }
}

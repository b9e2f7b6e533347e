//! The exchange transcript on disk (seed 000, design §3): [`JsonlTranscripts`]
//! opens `<root>/transcripts/<run-id>.jsonl`, and a [`JsonlTranscript`]
//! appends [`ExchangeEvent`] lines to it and shows them to live subscribers.
//!
//! Why it is shaped this way:
//! - Disk first, then subscribers (design §4.1): a line is broadcast only
//!   after its `write()` succeeded, so no subscriber ever sees a line the file
//!   does not hold.
//! - One `write()` of a whole line to an `O_APPEND` file, under a lock even
//!   for lines longer than `PIPE_BUF`: writers in this process take turns,
//!   and other processes appending to the same file can only interleave
//!   whole lines, never split one.
//! - `seq` is allocated under the same lock, so file order is `seq` order;
//!   the lock is a `std` mutex held for the page-cache write and a few
//!   non-blocking `try_send`s, never across an `.await`.
//! - The writer never waits for a subscriber: each has a bounded buffer, and
//!   a full buffer drops that subscriber's newest line (see `fanout`).
//! - Files are 0600 and the directory 0700: transcripts hold prompts and tool
//!   arguments verbatim (seed 000, "Security").
//! - A value over 64 KiB is stored once, in the run's blob directory shared
//!   with its event log, and the line holds a reference (see [`crate::blobs`]):
//!   a large prompt is then on disk once, not once per record.

mod fanout;
mod read;

use std::collections::HashMap;
use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use application::ports::{Transcript, TranscriptError, TranscriptReader, Transcripts};
use async_trait::async_trait;
use domain::RunId;
use domain::transcript::{ExchangeDraft, ExchangeEvent};
use rustix::fs::{FlockOperation, flock};

use crate::blobs::{BlobDir, transcript_blob_dir};

pub use application::ports::TranscriptLines;
pub use fanout::{
    DEFAULT_SUBSCRIBER_CAPACITY, SubscriberStats, TranscriptStats, TranscriptSubscriber,
};
pub(crate) use read::LineChecker;
pub use read::{read_transcript, read_transcript_lines};

/// Mode of transcript files: private to their user (seed 000).
const FILE_MODE: u32 = 0o600;

/// Mode of the `transcripts` directory.
const DIR_MODE: u32 = 0o700;

/// The serialization buffer is kept between appends so that serializing
/// costs no allocation; one huge tool output must not pin its size forever.
const MAX_KEPT_BUF: usize = 1 << 20;

/// An I/O error, naming what was being done and to which file.
fn io_err(what: &str, path: &Path, e: &io::Error) -> TranscriptError {
    TranscriptError::Io(format!("cannot {what} {}: {e}", path.display()))
}

/// Locks, recovering the data of a poisoned lock: nothing here panics while
/// holding one, and a panic elsewhere must not stop the transcript.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `<root>/transcripts/<run-id>.jsonl`, whether or not it exists.
pub fn transcript_path(root: impl AsRef<Path>, run_id: RunId) -> PathBuf {
    root.as_ref()
        .join("transcripts")
        .join(format!("{run_id}.jsonl"))
}

/// The file-backed [`Transcripts`]: one JSONL file per run under
/// `<root>/transcripts`. Cloning is cheap; clones share open recorders.
#[derive(Debug, Clone)]
pub struct JsonlTranscripts {
    inner: Arc<TranscriptsInner>,
}

#[derive(Debug)]
struct TranscriptsInner {
    root: PathBuf,
    /// Recorders open in this process, so that opening a run twice yields the
    /// same recorder (one `seq` counter) instead of two that would repeat
    /// each other's numbers. Weak: a recorder lives as long as its users. A
    /// `std` mutex, held across the open (an open(2) and a tail read, no
    /// `.await`) so two racing opens of one run cannot both create one.
    open: Mutex<HashMap<RunId, Weak<JsonlTranscript>>>,
}

impl JsonlTranscripts {
    /// Transcripts under the storage root `root`; nothing is created until a
    /// run's transcript is opened.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            inner: Arc::new(TranscriptsInner {
                root: root.into(),
                open: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The storage root.
    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    /// Where the transcript of `run_id` is.
    pub fn path(&self, run_id: RunId) -> PathBuf {
        transcript_path(&self.inner.root, run_id)
    }

    /// [`Transcripts::open`] with the concrete recorder, for callers that
    /// subscribe or read its [`JsonlTranscript::stats`]. A recorder of the
    /// run already open (and not closed) in this process is returned as is.
    pub fn open_recorder(
        &self,
        run_id: RunId,
        parent_run_id: Option<RunId>,
    ) -> Result<Arc<JsonlTranscript>, TranscriptError> {
        let mut open = lock(&self.inner.open);
        if let Some(existing) = open.get(&run_id).and_then(Weak::upgrade)
            && !existing.is_closed()
        {
            return Ok(existing);
        }
        open.retain(|_, weak| weak.strong_count() > 0);
        let path = self.path(run_id);
        if let Some(dir) = path.parent() {
            DirBuilder::new()
                .recursive(true)
                .mode(DIR_MODE)
                .create(dir)
                .map_err(|e| io_err("create", dir, &e))?;
        }
        let recorder = Arc::new(JsonlTranscript::open(path, run_id, parent_run_id)?);
        open.insert(run_id, Arc::downgrade(&recorder));
        Ok(recorder)
    }
}

#[async_trait]
impl Transcripts for JsonlTranscripts {
    async fn open(
        &self,
        run_id: RunId,
        parent_run_id: Option<RunId>,
    ) -> Result<Arc<dyn Transcript>, TranscriptError> {
        // Opening is an open(2) and at most a few `pread`s of the tail:
        // page-cache work, cheaper inline than a hop to a blocking thread.
        let recorder: Arc<dyn Transcript> = self.open_recorder(run_id, parent_run_id)?;
        Ok(recorder)
    }
}

#[async_trait]
impl TranscriptReader for JsonlTranscripts {
    /// [`read_transcript_lines`] of the run's file, on a blocking thread:
    /// a transcript may be long.
    async fn read(&self, run_id: RunId) -> Result<Option<TranscriptLines>, TranscriptError> {
        let path = transcript_path(self.root(), run_id);
        let read = tokio::task::spawn_blocking(move || match path.try_exists() {
            Ok(false) => Ok(None),
            _ => read_transcript_lines(&path).map(Some),
        });
        read.await
            .map_err(|e| TranscriptError::Io(format!("the transcript of run {run_id}: {e}")))?
    }
}

/// One run's transcript, open for appending, with its live subscribers.
#[derive(Debug)]
pub struct JsonlTranscript {
    run_id: RunId,
    parent_run_id: Option<RunId>,
    path: PathBuf,
    /// Where large values go: the run's blob directory, beside its log. Not
    /// synced: the transcript itself is not (the log syncs a blob it shares).
    blobs: BlobDir,
    /// Everything an append touches. A `std` mutex, not a Tokio one: it is
    /// held for one page-cache `write()` and non-blocking sends, never across
    /// an `.await`, and holding it over the broadcast keeps every
    /// subscriber's lines in `seq` order.
    state: Mutex<State>,
    /// Drops across all subscribers ever; an atomic so that
    /// [`Transcript::dropped`] does not contend with writers.
    dropped_total: AtomicU64,
}

#[derive(Debug)]
struct State {
    /// Opened write-only with `O_APPEND`.
    file: File,
    /// The `seq` the next line gets.
    next_seq: u64,
    /// Lines written through this recorder.
    written: u64,
    /// Reused serialization buffer; see [`MAX_KEPT_BUF`].
    buf: Vec<u8>,
    /// Set by `close`; appends are refused from then on.
    closed: bool,
    /// Set when a failed write left part of a line in the file: appending
    /// after it would bury a torn line mid-file, so appends are refused
    /// until the file is reopened (which cuts the torn tail).
    broken: Option<String>,
    /// Live subscriptions, oldest first.
    subscribers: Vec<fanout::Slot>,
    /// Id of the next subscriber.
    next_subscriber: u64,
}

impl JsonlTranscript {
    /// Opens (creating it 0600 if needed) the transcript file at `path`.
    /// An existing file is continued: `seq` goes on after its last complete
    /// line, and a torn last line is cut off unless another recorder (of
    /// this or another process) has the file open, in which case it may be
    /// that recorder's write in progress and is left alone. The directory
    /// must exist.
    pub fn open(
        path: impl Into<PathBuf>,
        run_id: RunId,
        parent_run_id: Option<RunId>,
    ) -> Result<Self, TranscriptError> {
        let path = path.into();
        let file = OpenOptions::new()
            .append(true)
            .create(true)
            .mode(FILE_MODE)
            .open(&path)
            .map_err(|e| io_err("open", &path, &e))?;
        // A torn tail is a crash's remains only if no other recorder has the
        // file open: another process's write in progress looks the same to a
        // reader, and cutting it would corrupt the file. Every recorder holds
        // a shared `flock` for its lifetime (the kernel drops it when the
        // process dies); only an opener that gets the lock exclusively may cut.
        let alone = match flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => true,
            Err(rustix::io::Errno::WOULDBLOCK) => false,
            Err(e) => return Err(io_err("lock", &path, &e.into())),
        };
        // The writer's handle is write-only (seed 000), so the tail is read
        // through a second, read-only one.
        let reader = File::open(&path).map_err(|e| io_err("open", &path, &e))?;
        let tail = read::scan_tail(&reader, &path)?;
        if alone && tail.len > tail.keep {
            tracing::warn!(file = %path.display(), position = tail.keep, "cutting a torn last line off the transcript");
            file.set_len(tail.keep)
                .map_err(|e| io_err("truncate", &path, &e))?;
        }
        // Downgrade (or, when not alone, join the other writers). This can
        // block only while another opener holds the lock exclusively for its
        // tail check: a few page-cache reads.
        loop {
            match flock(&file, FlockOperation::LockShared) {
                Ok(()) => break,
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(io_err("lock", &path, &e.into())),
            }
        }
        Ok(Self::with_file(
            file,
            path,
            run_id,
            parent_run_id,
            tail.last_seq + 1,
        ))
    }

    /// A recorder over an already open `file`, numbering from 1 and without
    /// looking at its contents. For tests that need a file whose writes fail
    /// (one opened read-only fails every `write()` with `EBADF`) and for
    /// benchmarks that truncate the file between rounds.
    #[doc(hidden)]
    pub fn from_file_for_tests(
        file: File,
        path: impl Into<PathBuf>,
        run_id: RunId,
        parent_run_id: Option<RunId>,
    ) -> Self {
        Self::with_file(file, path.into(), run_id, parent_run_id, 1)
    }

    fn with_file(
        file: File,
        path: PathBuf,
        run_id: RunId,
        parent_run_id: Option<RunId>,
        next_seq: u64,
    ) -> Self {
        Self {
            run_id,
            parent_run_id,
            blobs: BlobDir::new(transcript_blob_dir(&path), false),
            path,
            state: Mutex::new(State {
                file,
                next_seq,
                written: 0,
                buf: Vec::new(),
                closed: false,
                broken: None,
                subscribers: Vec::new(),
                next_subscriber: 1,
            }),
            dropped_total: AtomicU64::new(0),
        }
    }

    /// The file this recorder appends to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The run whose transcript this is.
    pub fn run_id(&self) -> RunId {
        self.run_id
    }

    /// Whether [`Transcript::close`] has been called.
    pub fn is_closed(&self) -> bool {
        lock(&self.state).closed
    }

    /// A live subscription with the default buffer
    /// ([`DEFAULT_SUBSCRIBER_CAPACITY`] lines).
    pub fn subscribe(&self) -> TranscriptSubscriber {
        self.subscribe_with_capacity(DEFAULT_SUBSCRIBER_CAPACITY)
    }

    /// A live subscription buffering up to `capacity` lines (at least 1);
    /// when they are all unread, newer lines are dropped for this subscriber
    /// only. It receives the lines appended after this call; on a closed
    /// recorder it receives nothing.
    pub fn subscribe_with_capacity(&self, capacity: usize) -> TranscriptSubscriber {
        let mut state = lock(&self.state);
        let id = state.next_subscriber;
        state.next_subscriber += 1;
        let (slot, subscriber) = fanout::subscription(id, capacity);
        // On a closed recorder the slot is dropped at once: the subscriber
        // sees an ended stream.
        if !state.closed {
            state.subscribers.push(slot);
        }
        subscriber
    }

    /// Lines written and per-subscriber drop counts.
    pub fn stats(&self) -> TranscriptStats {
        let state = lock(&self.state);
        TranscriptStats {
            written: state.written,
            subscribers: state.subscribers.iter().map(fanout::Slot::stats).collect(),
            dropped_total: self.dropped_total.load(Ordering::Relaxed),
        }
    }

    /// The work of [`Transcript::append`]; synchronous because it never waits.
    ///
    /// A failed write is returned and not broadcast, and its `seq` is not
    /// consumed: the next append reuses it, so the file's series stays
    /// gapless (a line that is not on disk never existed).
    pub fn append_line(&self, draft: ExchangeDraft) -> Result<ExchangeEvent, TranscriptError> {
        let mut guard = lock(&self.state);
        let state = &mut *guard;
        if state.closed {
            return Err(TranscriptError::Closed(self.run_id));
        }
        if let Some(why) = &state.broken {
            return Err(TranscriptError::Io(format!(
                "{} cannot be appended to until it is reopened: {why}",
                self.path.display()
            )));
        }
        let event = draft.into_event(state.next_seq, self.run_id, self.parent_run_id);
        state.buf.clear();
        event.write_json(&mut state.buf).map_err(|e| {
            TranscriptError::Io(format!(
                "cannot serialize line {} of {}: {e}",
                event.seq,
                self.path.display()
            ))
        })?;
        if let Err(e) = self.blobs.externalize_tail(&mut state.buf, 0) {
            return Err(TranscriptError::Io(format!(
                "cannot store a large value of line {} of {}: {e}",
                event.seq,
                self.path.display()
            )));
        }
        state.buf.push(b'\n');
        let written = write_line(&state.file, &state.buf);
        if state.buf.capacity() > MAX_KEPT_BUF {
            state.buf = Vec::new();
        }
        if let Err((partial, e)) = written {
            if partial > 0 {
                state.broken = Some(format!("a failed write left {partial} bytes of a line"));
            }
            return Err(io_err("append to", &self.path, &e));
        }
        state.next_seq += 1;
        state.written += 1;
        if state.subscribers.is_empty() {
            return Ok(event);
        }
        let (delivered, drops) = fanout::broadcast(&mut state.subscribers, event, &self.path);
        if drops > 0 {
            self.dropped_total.fetch_add(drops, Ordering::Relaxed);
        }
        drop(guard);
        Ok(delivered.into_event())
    }

    /// The work of [`Transcript::close`]: refuses later appends and ends every
    /// subscription (each still receives what it had buffered). Idempotent.
    pub fn close_now(&self) {
        let mut state = lock(&self.state);
        state.closed = true;
        // Dropping the senders ends the receivers once they drain.
        state.subscribers.clear();
    }
}

/// Writes `line` with one `write()`; only a short write (disk full, a
/// signal) is followed by more. Returns the bytes written with the error.
fn write_line(mut file: &File, line: &[u8]) -> Result<(), (usize, io::Error)> {
    let mut done = 0;
    while done < line.len() {
        match file.write(&line[done..]) {
            Ok(0) => return Err((done, io::ErrorKind::WriteZero.into())),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err((done, e)),
        }
    }
    Ok(())
}

#[async_trait]
impl Transcript for JsonlTranscript {
    async fn append(&self, draft: ExchangeDraft) -> Result<ExchangeEvent, TranscriptError> {
        // Inline, like the run store's appends: one page-cache write costs
        // about a microsecond, less than a hop to a blocking thread.
        self.append_line(draft)
    }

    fn dropped(&self) -> u64 {
        self.dropped_total.load(Ordering::Relaxed)
    }

    async fn close(&self) {
        self.close_now();
    }
}

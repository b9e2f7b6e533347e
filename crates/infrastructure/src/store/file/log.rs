//! One run's `events.ndjson` as this process sees it: the open file, the
//! in-memory offset index, torn-tail recovery, appends and read planning.
//!
//! Line `k` of the log holds the event of offset `k`, so the index is a plain
//! `Vec<u64>` of line start positions. Everything before `end` is immutable
//! once written, which is why reads can `pread` outside any lock.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use application::ports::StoreError;
use domain::{RunId, RuntimeEvent};
use serde::de::IgnoredAny;

mod index_file;

use super::index;
use crate::blobs::BlobDir;
use crate::fs::{FileReadError, MAX_RECORD_LINE};
use crate::store::check_continuation;

/// Mode of every file the store creates: run data is private to its user.
pub(super) const FILE_MODE: u32 = 0o600;

/// Bytes read per `pread` when scanning the log for line starts: large
/// enough that a full rebuild of a 300 MB log takes a few hundred syscalls,
/// small enough to stay in cache.
const SCAN_CHUNK: usize = 1 << 20;

/// Index entries written to `events.idx` at most this many events apart
/// (besides every syncing flush, and on close): 8 KiB per write, so
/// persisting the index costs a few nanoseconds per event, while a reader
/// opening the run meanwhile scans at most this many lines (~300 KB) past
/// the persisted part, and a crash loses nothing the next open cannot
/// re-derive the same way.
const IDX_BATCH: usize = 1024;

/// Bytes one read batch may span (at least one line is always read): bounds
/// a reader's memory whatever `limit` it asks for.
const MAX_BATCH_BYTES: u64 = 64 << 20;

/// The serialization buffer is kept between appends so that serializing
/// costs no allocation; one giant batch must not pin its size forever.
const MAX_KEPT_BUF: usize = 1 << 20;

/// Where one run's files live.
#[derive(Debug)]
pub(super) struct RunPaths {
    /// The run (for `NotFound` and messages).
    pub run_id: RunId,
    /// `<root>/runs`, synced once when a run is created there.
    pub runs_dir: PathBuf,
    /// `<root>/runs/<run-id>`.
    pub dir: PathBuf,
    /// `events.ndjson`.
    pub log: PathBuf,
    /// `events.idx`.
    pub idx: PathBuf,
    /// `snapshot.json`.
    pub snapshot: PathBuf,
    /// `snapshot.json.tmp`, renamed over `snapshot.json`.
    pub snapshot_tmp: PathBuf,
    /// `snapshot-deltas.ndjson`: the deltas saved since `snapshot.json`,
    /// one a line, never synced (the snapshot is not).
    pub deltas: PathBuf,
    /// `blobs/`: large values of the log and transcript (see [`crate::blobs`]).
    pub blobs: BlobDir,
    /// `snapshot-blobs/`: large strings of the snapshot, never synced (the
    /// snapshot is not) and removed once no snapshot refers to them.
    pub snapshot_blobs: BlobDir,
}

impl RunPaths {
    pub(super) fn new(runs_dir: &Path, run_id: RunId) -> Self {
        let dir = runs_dir.join(run_id.to_string());
        Self {
            run_id,
            runs_dir: runs_dir.to_path_buf(),
            log: dir.join("events.ndjson"),
            idx: dir.join("events.idx"),
            snapshot: dir.join("snapshot.json"),
            snapshot_tmp: dir.join("snapshot.json.tmp"),
            deltas: dir.join("snapshot-deltas.ndjson"),
            snapshot_blobs: BlobDir::new(dir.join("snapshot-blobs"), false)
                .sharing_from(&BlobDir::new(dir.join("blobs"), true))
                .strings_only(),
            blobs: BlobDir::new(dir.join("blobs"), true),
            dir,
        }
    }
}

/// Opens the regular file `path` of a run for writing, created (with
/// [`FILE_MODE`]) if need be and emptied when `truncate`: the index, the
/// snapshot's temporary file, the deltas.
pub(super) fn open_for_writing(path: &Path, truncate: bool) -> Result<File, FileReadError> {
    let mut options = OpenOptions::new();
    options
        .write(true)
        .create(true)
        .truncate(truncate)
        .mode(FILE_MODE);
    crate::fs::open_regular_with(options, path)
}

/// An I/O error, naming what was being done and to which file.
pub(super) fn io_err(what: &str, path: &Path, e: io::Error) -> StoreError {
    StoreError::io(format!("cannot {what} {}", path.display()), e)
}

/// Opens the log; the writer may create it (a run whose creation was
/// interrupted between its directory and its log), a reader may not.
/// Anything but a regular file (a FIFO, a device) is refused at once.
fn open_log_file(paths: &RunPaths, writable: bool) -> Result<File, StoreError> {
    let mut options = OpenOptions::new();
    options.read(true);
    if writable {
        options.append(true).create(true).mode(FILE_MODE);
    }
    crate::fs::open_regular_with(options, &paths.log).map_err(|e| match e {
        FileReadError::NotFound { .. } => StoreError::NotFound(paths.run_id),
        other => other.into(),
    })
}

/// `len` bytes of `file` from `start`.
fn read_range(file: &File, path: &Path, start: u64, len: u64) -> Result<Vec<u8>, StoreError> {
    let len = usize::try_from(len)
        .map_err(|_| StoreError::io_msg(format!("{}: read of {len} bytes", path.display())))?;
    let mut buf = vec![0; len];
    file.read_exact_at(&mut buf, start)
        .map_err(|e| io_err("read", path, e))?;
    Ok(buf)
}

/// One run's log, open in this process.
#[derive(Debug)]
pub(super) struct LogState {
    /// Read-only, or read + `O_APPEND` once this process writes the run.
    /// Shared (`Arc`) so reads and `fdatasync` use it without holding the lock.
    file: Arc<File>,
    /// Whether `file` was opened for appending (and the torn tail cut).
    writable: bool,
    /// `index[i]` = byte position of the line of offset `i + 1`.
    index: Vec<u64>,
    /// Byte position just after the last indexed (complete, kept) line.
    end: u64,
    /// Whether every entry was derived by this process (scanned or written)
    /// rather than loaded from `events.idx`; an untrusted index that
    /// disagrees with the log is rebuilt instead of reported as corruption.
    trusted: bool,
    /// Reused serialization (and index encoding) buffer; see [`MAX_KEPT_BUF`].
    buf: Vec<u8>,
    /// `events.idx`, open for positioned writes; writers only.
    idx_file: Option<File>,
    /// Where a writer creates `events.idx` once the log is long enough to
    /// need one ([`IDX_MIN_EVENTS`]); a short run makes no such file.
    idx_path: Option<PathBuf>,
    /// How many leading entries of `index` are already in `events.idx`.
    idx_persisted: usize,
    /// Set when a failed write left bytes that could not be cut off: further
    /// appends would bury them mid-log, so they are refused until reopen.
    broken: Option<String>,
}

/// A read to perform without holding the log's lock.
#[derive(Debug)]
pub(super) struct ReadPlan {
    file: Arc<File>,
    start: u64,
    stop: u64,
    first: u64,
    count: usize,
    /// Whether the index used was fully derived by this process.
    pub trusted: bool,
}

impl LogState {
    /// The state of a log this process has just created (empty, writable).
    pub(super) fn created(file: File, paths: &RunPaths) -> Result<Self, StoreError> {
        let mut state = Self::blank(file, true);
        state.trusted = true;
        state.idx_path = Some(paths.idx.clone());
        Ok(state)
    }

    fn blank(file: File, writable: bool) -> Self {
        Self {
            file: Arc::new(file),
            writable,
            index: Vec::new(),
            end: 0,
            trusted: false,
            buf: Vec::new(),
            idx_file: None,
            idx_path: None,
            idx_persisted: 0,
            broken: None,
        }
    }

    /// Opens an existing log: loads `events.idx`, indexes whatever follows
    /// it, and ignores (reader) or cuts (writer) a torn last line.
    pub(super) fn open(paths: &RunPaths, writable: bool) -> Result<Self, StoreError> {
        let file = open_log_file(paths, writable)?;
        let len = file
            .metadata()
            .map_err(|e| io_err("stat", &paths.log, e))?
            .len();
        let loaded = index::load(&paths.idx, &file, len);
        let mut state = Self::blank(file, writable);
        state.idx_persisted = loaded.len();
        state.trusted = loaded.is_empty();
        state.index = loaded;
        // The last loaded entry is where scanning resumes: its line's end is
        // not recorded anywhere.
        if let Some(last) = state.index.pop() {
            state.end = last;
        }
        let len = state.scan_tail(paths)?;
        state.idx_persisted = state.idx_persisted.min(state.index.len());
        if writable {
            state.settle_writer(paths, len)?;
        } else if len > state.end {
            tracing::warn!(
                file = %paths.log.display(),
                position = state.end,
                "ignoring a torn last line of the event log"
            );
        }
        Ok(state)
    }

    /// Turns a reader into the writer: reopens for appending, catches up with
    /// the file, and cuts a torn tail.
    pub(super) fn make_writable(&mut self, paths: &RunPaths) -> Result<(), StoreError> {
        if self.writable {
            return Ok(());
        }
        self.file = Arc::new(open_log_file(paths, true)?);
        self.writable = true;
        let len = self.scan_tail(paths)?;
        self.settle_writer(paths, len)
    }

    /// The writer's part of opening: nothing after `end` may stay, or the
    /// next append would leave a corrupt line in the middle of the log; and
    /// the temporary blob files a crashed writer left go.
    fn settle_writer(&mut self, paths: &RunPaths, len: u64) -> Result<(), StoreError> {
        paths.blobs.remove_stale_temps();
        paths.snapshot_blobs.remove_stale_temps();
        if len > self.end {
            tracing::warn!(
                file = %paths.log.display(),
                position = self.end,
                "cutting a torn last line off the event log"
            );
            self.file
                .set_len(self.end)
                .map_err(|e| io_err("truncate", &paths.log, e))?;
        }
        match paths.idx.exists() {
            // Entries beyond what was verified go now, before any is added.
            true => self.open_idx_for_writing(paths),
            false => {
                self.idx_path = Some(paths.idx.clone());
                Ok(())
            }
        }
    }

    /// Indexes complete lines after `end` (written before we opened, or by
    /// another process since). A final complete line that is not JSON is the
    /// remains of a crash and stays unindexed while it is last. Returns the
    /// file length seen, so the caller can tell whether a torn tail follows.
    fn scan_tail(&mut self, paths: &RunPaths) -> Result<u64, StoreError> {
        let len = self
            .file
            .metadata()
            .map_err(|e| io_err("stat", &paths.log, e))?
            .len();
        if len <= self.end {
            return Ok(len);
        }
        let first_new = self.index.len();
        let mut line_start = self.end;
        let mut pos = self.end;
        let mut chunk = Vec::new();
        while pos < len {
            let n = (len - pos).min(SCAN_CHUNK as u64);
            chunk.resize(n as usize, 0);
            self.file
                .read_exact_at(&mut chunk, pos)
                .map_err(|e| io_err("read", &paths.log, e))?;
            for (i, &byte) in chunk.iter().enumerate() {
                if byte == b'\n' {
                    let next = pos + i as u64 + 1;
                    if next - line_start > MAX_RECORD_LINE + 1 {
                        return Err(StoreError::BadEvent {
                            offset: self.index.len() as u64 + 1,
                            detail: format!(
                                "{} line {}: longer than the limit of {MAX_RECORD_LINE} bytes",
                                paths.log.display(),
                                self.index.len() + 1
                            ),
                        });
                    }
                    self.index.push(line_start);
                    line_start = next;
                }
            }
            pos += n;
        }
        let mut new_end = line_start;
        if self.index.len() > first_new {
            let last_start = self.index[self.index.len() - 1];
            let line = read_range(&self.file, &paths.log, last_start, new_end - 1 - last_start)?;
            if serde_json::from_slice::<IgnoredAny>(&line).is_err() {
                self.index.pop();
                new_end = last_start;
            }
        }
        self.end = new_end;
        Ok(len)
    }

    /// Forgets the index and derives it again from the log alone.
    pub(super) fn rebuild_index(&mut self, paths: &RunPaths) -> Result<(), StoreError> {
        tracing::warn!(file = %paths.idx.display(), "offset index disagrees with the log; rebuilding it");
        self.index.clear();
        self.end = 0;
        self.trusted = true;
        self.idx_persisted = 0;
        if let Some(idx) = &self.idx_file
            && let Err(e) = idx.set_len(0)
        {
            tracing::warn!(file = %paths.idx.display(), error = %e, "cannot truncate the offset index");
        }
        self.scan_tail(paths).map(|_| ())
    }

    /// Offset of the last event (catching up first when another process may write).
    pub(super) fn last_offset(&mut self, paths: &RunPaths) -> Result<u64, StoreError> {
        if !self.writable {
            self.scan_tail(paths)?;
        }
        Ok(self.index.len() as u64)
    }

    /// Offset of the last event this process knows of, without touching the file.
    pub(super) fn known_last(&self) -> u64 {
        self.index.len() as u64
    }

    /// Whether this state may append.
    pub(super) fn is_writable(&self) -> bool {
        self.writable
    }

    /// The open log file (for `fdatasync` outside the lock).
    pub(super) fn file(&self) -> Arc<File> {
        Arc::clone(&self.file)
    }

    /// Writes `events` as one `write` of newline-terminated lines; returns
    /// the new last offset and the bytes of those lines as encoded, before
    /// large values moved to blobs. The caller must have made the state writable.
    pub(super) fn append(
        &mut self,
        paths: &RunPaths,
        events: &[RuntimeEvent],
    ) -> Result<(u64, u64), StoreError> {
        if let Some(why) = &self.broken {
            return Err(StoreError::io_msg(format!(
                "{} cannot be appended to until it is reopened: {why}",
                paths.log.display()
            )));
        }
        let last = check_continuation(paths.run_id, self.index.len() as u64, events)?;
        if events.is_empty() {
            return Ok((last, 0));
        }
        let before = self.index.len();
        self.buf.clear();
        let mut encoded = 0;
        for event in events {
            self.index.push(self.end + self.buf.len() as u64);
            let line_start = self.buf.len();
            if let Err(e) = event.write_json(&mut self.buf) {
                self.index.truncate(before);
                return Err(StoreError::io(
                    format!(
                        "cannot serialize event {} (offset {}) of run {}",
                        event.id, event.offset, paths.run_id
                    ),
                    e.into(),
                ));
            }
            encoded += (self.buf.len() - line_start) as u64 + 1;
            if let Err(e) = paths.blobs.externalize_tail(&mut self.buf, line_start) {
                self.index.truncate(before);
                return Err(super::blobs_err(
                    format!(
                        "event {} (offset {}) of run {}",
                        event.id, event.offset, paths.run_id
                    ),
                    e,
                ));
            }
            self.buf.push(b'\n');
        }
        if let Err(e) = (&*self.file).write_all(&self.buf) {
            self.index.truncate(before);
            // A partial write leaves a torn line; cut it now, while we know where it starts.
            if let Err(cut) = self.file.set_len(self.end) {
                self.broken = Some(format!("a failed write could not be cut off: {cut}"));
            }
            return Err(io_err("append to", &paths.log, e));
        }
        self.end += self.buf.len() as u64;
        if self.buf.capacity() > MAX_KEPT_BUF {
            self.buf = Vec::new();
        }
        if self.index.len() - self.idx_persisted >= IDX_BATCH {
            self.persist_index(paths);
        }
        Ok((last, encoded))
    }

    /// Where the lines after `after` (at most `limit`) are; `None` when there
    /// are none. Readers first index what another process appended.
    pub(super) fn plan_read(
        &mut self,
        paths: &RunPaths,
        after: u64,
        limit: usize,
    ) -> Result<Option<ReadPlan>, StoreError> {
        let want = after.saturating_add(limit as u64);
        if !self.writable && want > self.index.len() as u64 {
            self.scan_tail(paths)?;
        }
        let n = self.index.len() as u64;
        if limit == 0 || after >= n {
            return Ok(None);
        }
        let mut stop_line = want.min(n);
        let start = self.index[after as usize];
        let line_end = |line: u64| {
            if line < n {
                self.index[line as usize]
            } else {
                self.end
            }
        };
        if line_end(stop_line) - start > MAX_BATCH_BYTES {
            // The most lines (at least one) that fit in the byte budget.
            let budget_end = start + MAX_BATCH_BYTES;
            let fits = self.index[after as usize + 1..stop_line as usize]
                .partition_point(|&pos| pos <= budget_end) as u64;
            stop_line = after + fits.max(1);
        }
        let stop = line_end(stop_line);
        Ok(Some(ReadPlan {
            file: Arc::clone(&self.file),
            start,
            stop,
            first: after + 1,
            count: (stop_line - after) as usize,
            trusted: self.trusted,
        }))
    }
}

impl ReadPlan {
    /// Reads and parses the planned lines. Any line that is not the event
    /// its position says (bad JSON, wrong offset) is `Corrupt`, naming the
    /// file and line: a reader never skips an event silently.
    pub(super) fn execute(&self, paths: &RunPaths) -> Result<Vec<RuntimeEvent>, StoreError> {
        let bytes = read_range(&self.file, &paths.log, self.start, self.stop - self.start)?;
        let mut events = Vec::with_capacity(self.count);
        let mut rest = bytes.as_slice();
        for line_no in self.first..self.first + self.count as u64 {
            // memchr: a byte-at-a-time search was a tenth of reading a line.
            let Some(newline) = memchr::memchr(b'\n', rest) else {
                return Err(corrupt(paths, line_no, "line is cut short"));
            };
            let (line, tail) = rest.split_at(newline);
            rest = &tail[1..];
            let line = (paths.blobs.resolve(line)).map_err(|e| {
                super::blobs_err(format!("{} line {line_no}", paths.log.display()), e)
            })?;
            let event = RuntimeEvent::from_json(&line).map_err(|e| corrupt(paths, line_no, e))?;
            if event.offset.get() != line_no {
                return Err(corrupt(
                    paths,
                    line_no,
                    format!(
                        "holds offset {} where offset {line_no} belongs",
                        event.offset
                    ),
                ));
            }
            if event.run_id != paths.run_id {
                return Err(corrupt(
                    paths,
                    line_no,
                    format!(
                        "holds an event of run {}, not of run {}",
                        event.run_id, paths.run_id
                    ),
                ));
            }
            events.push(event);
        }
        if !rest.is_empty() {
            return Err(corrupt(
                paths,
                self.first + self.count as u64,
                "unexpected extra line",
            ));
        }
        Ok(events)
    }
}

/// The line of offset `line` is not its event.
fn corrupt(paths: &RunPaths, line: u64, what: impl std::fmt::Display) -> StoreError {
    StoreError::BadEvent {
        offset: line,
        detail: format!("{} line {line}: {what}", paths.log.display()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::store::FileRunStore;
    use application::ports::RunStore;
    use domain::{EventKind, Offset, Timestamp};

    fn warning(run: RunId, offset: u64) -> RuntimeEvent {
        RuntimeEvent {
            id: format!("e{offset}"),
            offset: Offset::new(offset).unwrap(),
            timestamp: Timestamp::from_millis(offset as i64),
            run_id: run,
            node_id: None,
            node_run_id: None,
            kind: EventKind::Warning {
                message: "x".repeat(offset as usize % 50),
                details: None,
            },
            extra: Default::default(),
        }
    }

    /// A flushed run of `n` events in a fresh directory.
    async fn written(n: u64) -> (tempfile::TempDir, RunPaths) {
        let dir = tempfile::tempdir().unwrap();
        let store = FileRunStore::open(dir.path()).unwrap();
        let run = RunId::new(uuid::Uuid::new_v4()).unwrap();
        let _lock = store.create_run(run).await.unwrap();
        let events: Vec<_> = (1..=n).map(|o| warning(run, o)).collect();
        store.append(run, &events).await.unwrap();
        store.flush(run).await.unwrap();
        let paths = RunPaths::new(&dir.path().join("runs"), run);
        (dir, paths)
    }

    fn scanned(paths: &RunPaths) -> Vec<u64> {
        fs_remove(&paths.idx);
        let state = LogState::open(paths, false).unwrap();
        assert!(state.trusted);
        state.index.clone()
    }

    fn fs_remove(path: &Path) {
        let _ = std::fs::remove_file(path);
    }

    #[tokio::test]
    async fn a_valid_index_is_loaded_not_rescanned() {
        let (_dir, paths) = written(2_000).await;
        let idx = std::fs::read(&paths.idx).unwrap();
        let state = LogState::open(&paths, false).unwrap();
        assert!(!state.trusted, "entries came from events.idx");
        assert_eq!(state.idx_persisted, 2_000);
        let loaded = state.index.clone();
        drop(state);
        std::fs::write(&paths.idx, &idx).unwrap();
        assert_eq!(loaded, scanned(&paths));
    }

    #[tokio::test]
    async fn an_index_pointing_past_the_end_keeps_its_valid_prefix() {
        let (_dir, paths) = written(500).await;
        let full = std::fs::read(&paths.idx).unwrap();
        let log_len = std::fs::metadata(&paths.log).unwrap().len();
        // Entries for lines that a crash cut off: past the end of the log.
        let mut stale = full.clone();
        index::encode(&[log_len, log_len + 40, log_len + 90], &mut stale);
        std::fs::write(&paths.idx, &stale).unwrap();
        let state = LogState::open(&paths, true).unwrap();
        assert!(!state.trusted);
        assert_eq!(state.index.len(), 500);
        assert_eq!(state.idx_persisted, 500);
        drop(state);
        assert_eq!(
            std::fs::read(&paths.idx).unwrap(),
            full,
            "the writer trims the index"
        );
    }

    #[tokio::test]
    async fn an_index_missing_a_line_is_rejected() {
        let (_dir, paths) = written(500).await;
        let mut shifted = std::fs::read(&paths.idx).unwrap();
        shifted.drain(8 * 250..8 * 251);
        std::fs::write(&paths.idx, &shifted).unwrap();
        let state = LogState::open(&paths, false).unwrap();
        assert!(state.trusted, "rebuilt by scanning");
        assert_eq!(state.index.len(), 500);
    }

    #[tokio::test]
    async fn reads_plan_exact_line_ranges() {
        let (_dir, paths) = written(50).await;
        let mut state = LogState::open(&paths, false).unwrap();
        let plan = state.plan_read(&paths, 10, 5).unwrap().unwrap();
        assert_eq!((plan.first, plan.count), (11, 5));
        let events = plan.execute(&paths).unwrap();
        assert_eq!(
            events.iter().map(|e| e.offset.get()).collect::<Vec<_>>(),
            vec![11, 12, 13, 14, 15]
        );
        assert!(state.plan_read(&paths, 50, 5).unwrap().is_none());
        assert!(state.plan_read(&paths, 10, 0).unwrap().is_none());
        let last = state.plan_read(&paths, 48, 100).unwrap().unwrap();
        assert_eq!((last.count, last.stop), (2, state.end));
    }
}

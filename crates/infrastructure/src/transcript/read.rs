//! Reading transcript files: the tolerant reader for tools and tests, and the
//! tail scan a reopening recorder uses to continue the `seq` series.
//!
//! Both follow the run store's crash rule (design §4): a torn last line — no
//! newline, or a final line that is not JSON — is the remains of a crash and
//! is ignored (reader) or cut (writer); a bad line anywhere else is
//! corruption and is reported with its file and line number: the lenient
//! reader goes on past it, the strict one stops there.

use std::borrow::Cow;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::os::unix::fs::FileExt;
use std::path::Path;

use application::ports::{TranscriptError, TranscriptLines};
use domain::RunId;
use domain::transcript::{ExchangeEvent, ExchangeType};
use serde::Deserialize;
use serde::de::IgnoredAny;

use crate::fs::MAX_RECORD_LINE;

use super::io_err;
use crate::blobs::{BlobDir, BlobError, BlobSource, resolve_from, transcript_blob_dir};

/// Bytes read per step when scanning a file backwards for its last line:
/// most lines are a few hundred bytes, so one read usually suffices; a long
/// tool output takes a few more.
const TAIL_CHUNK: u64 = 64 * 1024;

/// Every line of the transcript at `path`, strictly: the first bad line
/// (see [`read_transcript_lines`]) is [`TranscriptError::Corrupt`], naming
/// the file and line number.
pub fn read_transcript(path: impl AsRef<Path>) -> Result<Vec<ExchangeEvent>, TranscriptError> {
    let read = read_transcript_lines(path)?;
    match read.problems.first() {
        None => Ok(read.events),
        Some(first) if read.problems.len() == 1 => Err(TranscriptError::Corrupt(first.clone())),
        Some(first) => Err(TranscriptError::Corrupt(format!(
            "{first} (and {} more bad lines)",
            read.problems.len() - 1
        ))),
    }
}

/// Every line of the transcript at `path`, in file order, going on past bad
/// lines, which are reported in [`TranscriptLines::problems`].
///
/// Lines of unknown event types and blocks of unknown types are kept whole
/// (one warning per file says how many lines were of unknown types); blank
/// lines are skipped; a torn last line (no newline, or a final line that is
/// not JSON) is the remains of a crash and is skipped with a warning. The
/// file is read a line at a time, so its size does not matter, only a line's.
/// Errors: [`TranscriptError::Io`] when the file cannot be read or is not a
/// regular file (a FIFO, a device).
pub fn read_transcript_lines(path: impl AsRef<Path>) -> Result<TranscriptLines, TranscriptError> {
    let path = path.as_ref();
    let file = crate::fs::open_regular(path).map_err(|e| TranscriptError::Io(e.to_string()))?;
    let mut reader = BufReader::new(file);
    let blobs = BlobDir::new(transcript_blob_dir(path), false);
    let run = path
        .file_stem()
        .and_then(|stem| stem.to_str())
        .and_then(|stem| stem.parse().ok());
    let mut checker = LineChecker::new(path.display().to_string(), &blobs, run, 1);
    let mut line = Vec::new();
    let mut number = 0usize;
    loop {
        line.clear();
        number += 1;
        let read = (&mut reader)
            .take(MAX_RECORD_LINE + 1)
            .read_until(b'\n', &mut line)
            .map_err(|e| io_err("read", path, &e))?;
        if read == 0 {
            break;
        }
        if line.last() != Some(&b'\n') {
            if line.len() as u64 > MAX_RECORD_LINE {
                checker.problem(
                    number,
                    format!("longer than the limit of {MAX_RECORD_LINE} bytes"),
                );
                skip_rest_of_line(&mut reader, path)?;
                continue;
            }
            tracing::warn!(file = %path.display(), line = number, "ignoring a torn last line of the transcript");
            break;
        }
        checker.line(number, &line);
    }
    Ok(checker.finish())
}

/// Reads up to and including the next newline, keeping nothing.
fn skip_rest_of_line(reader: &mut impl BufRead, path: &Path) -> Result<(), TranscriptError> {
    loop {
        let (done, used) = {
            let buf = reader.fill_buf().map_err(|e| io_err("read", path, &e))?;
            match buf.iter().position(|b| *b == b'\n') {
                Some(i) => (true, i + 1),
                None => (buf.is_empty(), buf.len()),
            }
        };
        reader.consume(used);
        if done {
            return Ok(());
        }
    }
}

/// Checks lines one by one: shape and `seq` series. Wherever the lines
/// are kept (a file, a database's rows), they are judged alike.
pub(crate) struct LineChecker<'a> {
    /// Where the lines are (a file's path), naming each problem.
    place: String,
    /// The run's blobs: large values a line refers to.
    blobs: &'a dyn BlobSource,
    /// The run the lines are of (a file's is named `<run-id>.jsonl`): a
    /// line of another run is left out, so lines copied or mixed in are
    /// never shown as this run's. `None` for a file not named so.
    run: Option<RunId>,
    read: TranscriptLines,
    /// The `seq` the next line should have.
    next_seq: u64,
    /// A complete line that is not JSON: a crash's remains if nothing
    /// follows it, corruption otherwise.
    pending_torn: Option<(usize, String)>,
    unknown: usize,
}

impl<'a> LineChecker<'a> {
    /// A checker of the lines of `run` at `place`, whose first line read
    /// should have `seq` `next_seq`.
    pub(crate) fn new(
        place: String,
        blobs: &'a dyn BlobSource,
        run: Option<RunId>,
        next_seq: u64,
    ) -> Self {
        Self {
            place,
            blobs,
            run,
            read: TranscriptLines::default(),
            next_seq,
            pending_torn: None,
            unknown: 0,
        }
    }

    pub(crate) fn problem(&mut self, number: usize, what: impl std::fmt::Display) {
        self.read
            .problems
            .push(format!("{}:{number}: {what}", self.place));
    }

    /// Judges line `number` (with or without its newline).
    pub(crate) fn line(&mut self, number: usize, line: &[u8]) {
        if let Some((at, error)) = self.pending_torn.take() {
            self.problem(at, error);
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        // Large values are stored apart, in the run's blobs; a line that is
        // not JSON is judged below.
        let resolved = match resolve_from(self.blobs, line) {
            Ok(resolved) => resolved,
            Err(BlobError::Json(_)) => Cow::Borrowed(line),
            Err(e) => return self.problem(number, e),
        };
        let event = match serde_json::from_slice::<ExchangeEvent>(&resolved) {
            Ok(event) => event,
            Err(e) if serde_json::from_slice::<IgnoredAny>(line).is_err() => {
                self.pending_torn = Some((number, e.to_string()));
                return;
            }
            Err(e) => return self.problem(number, e),
        };
        if let Some(run) = self.run
            && event.run_id != run
        {
            return self.problem(
                number,
                format!(
                    "the line belongs to run {}, not to run {run}; line left out",
                    event.run_id
                ),
            );
        }
        if event.seq < self.next_seq {
            return self.problem(
                number,
                format!(
                    "seq {} repeats or goes back (seq {} expected); line left out",
                    event.seq, self.next_seq
                ),
            );
        }
        if event.seq > self.next_seq {
            self.problem(
                number,
                format!(
                    "seq {} skips ahead (seq {} expected): lines are missing",
                    event.seq, self.next_seq
                ),
            );
        }
        self.next_seq = event.seq.saturating_add(1);
        if matches!(event.kind, ExchangeType::Unknown(_)) {
            self.unknown += 1;
        }
        self.read.events.push(event);
    }

    pub(crate) fn finish(self) -> TranscriptLines {
        if let Some((at, error)) = &self.pending_torn {
            tracing::warn!(file = %self.place, line = at, %error, "ignoring a torn last line of the transcript");
        }
        if self.unknown > 0 {
            tracing::warn!(file = %self.place, lines = self.unknown, "transcript has lines of event types this version does not know; kept as they are");
        }
        self.read
    }
}

/// Where a recorder reopening a file stands.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Tail {
    /// `seq` of the last complete line (0 for an empty file).
    pub last_seq: u64,
    /// Length of the file without its torn tail: cut there before appending.
    pub keep: u64,
    /// Length of the file as found.
    pub len: u64,
}

/// Only the field a reopening writer needs.
#[derive(Deserialize)]
struct SeqOnly {
    seq: u64,
}

/// Finds the last complete line of `file` (read backwards from its end) and
/// its `seq`; a torn tail after it is measured, not cut.
pub(super) fn scan_tail(file: &File, path: &Path) -> Result<Tail, TranscriptError> {
    let len = file.metadata().map_err(|e| io_err("stat", path, &e))?.len();
    let mut end = len;
    // At most one torn line is tolerated: the torn partial line after the
    // last newline, or else one final complete line that is not JSON.
    let mut tolerated_bad_line = false;
    loop {
        let Some((start, line)) = last_line(file, path, end)? else {
            return Ok(Tail {
                last_seq: 0,
                keep: 0,
                len,
            });
        };
        let complete = line.last() == Some(&b'\n');
        if !complete {
            end = start;
            tolerated_bad_line = true;
            continue;
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            end = start;
            continue;
        }
        match serde_json::from_slice::<SeqOnly>(&line) {
            Ok(found) => {
                return Ok(Tail {
                    last_seq: found.seq,
                    keep: end,
                    len,
                });
            }
            Err(_)
                if !tolerated_bad_line && serde_json::from_slice::<IgnoredAny>(&line).is_err() =>
            {
                end = start;
                tolerated_bad_line = true;
            }
            Err(e) => {
                return Err(TranscriptError::Io(format!(
                    "{}: the line at byte {start} is corrupt, cannot continue its seq series: {e}",
                    path.display()
                )));
            }
        }
    }
}

/// The line that ends at `end` (the bytes after the previous newline, up to
/// `end`) and where it starts; `None` when `end` is 0.
fn last_line(
    file: &File,
    path: &Path,
    end: u64,
) -> Result<Option<(u64, Vec<u8>)>, TranscriptError> {
    if end == 0 {
        return Ok(None);
    }
    let mut line: Vec<u8> = Vec::new();
    let mut pos = end;
    let mut chunk = Vec::new();
    loop {
        let from = pos.saturating_sub(TAIL_CHUNK);
        chunk.resize(usize::try_from(pos - from).map_err(|_| too_big(path))?, 0);
        file.read_exact_at(&mut chunk, from)
            .map_err(|e| io_err("read", path, &e))?;
        // The line's own final newline (if any) is not its start.
        let search_end = if pos == end && chunk.last() == Some(&b'\n') {
            chunk.len() - 1
        } else {
            chunk.len()
        };
        if let Some(nl) = chunk[..search_end].iter().rposition(|b| *b == b'\n') {
            let mut found = chunk[nl + 1..].to_vec();
            found.extend_from_slice(&line);
            return Ok(Some((from + nl as u64 + 1, found)));
        }
        chunk.extend_from_slice(&line);
        line = std::mem::take(&mut chunk);
        if from == 0 {
            return Ok(Some((0, line)));
        }
        pos = from;
    }
}

fn too_big(path: &Path) -> TranscriptError {
    io_err(
        "read",
        path,
        &io::Error::new(io::ErrorKind::InvalidData, "chunk exceeds memory"),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::io::Write;

    use super::*;

    fn line(seq: u64) -> String {
        format!(
            "{{\"seq\":{seq},\"run_id\":\"0b6f8f4e-3c1a-4d2b-9f3e-1a2b3c4d5e6f\",\"type\":\"run.started\",\"path\":\"\",\"iteration\":0,\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"payload\":null}}\n"
        )
    }

    fn tail_of(content: &[u8]) -> Result<Tail, TranscriptError> {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(content).unwrap();
        scan_tail(f.as_file(), f.path())
    }

    #[test]
    fn tail_finds_last_seq_and_torn_tails() {
        let two = format!("{}{}", line(1), line(2));
        let n = two.len() as u64;
        assert_eq!(
            tail_of(b"").unwrap(),
            Tail {
                last_seq: 0,
                keep: 0,
                len: 0
            }
        );
        assert_eq!(
            tail_of(two.as_bytes()).unwrap(),
            Tail {
                last_seq: 2,
                keep: n,
                len: n
            }
        );
        let torn = format!("{two}{{\"seq\":3,\"ru");
        assert_eq!(tail_of(torn.as_bytes()).unwrap().last_seq, 2);
        assert_eq!(tail_of(torn.as_bytes()).unwrap().keep, n);
        let garbage = format!("{two}not json\n");
        assert_eq!(tail_of(garbage.as_bytes()).unwrap().keep, n);
        let two_bad = format!("{two}not json\nnot json\n");
        assert!(tail_of(two_bad.as_bytes()).is_err());
        let torn_only = b"{\"seq\":1";
        assert_eq!(
            tail_of(torn_only).unwrap(),
            Tail {
                last_seq: 0,
                keep: 0,
                len: 8
            }
        );
    }

    #[test]
    fn tail_handles_lines_longer_than_a_chunk() {
        let long = format!(
            "{{\"seq\":7,\"pad\":\"{}\"}}\n",
            "x".repeat(3 * TAIL_CHUNK as usize)
        );
        let content = format!("{}{long}", line(6));
        let tail = tail_of(content.as_bytes()).unwrap();
        assert_eq!(tail.last_seq, 7);
        // Only line: starts at 0.
        assert_eq!(tail_of(long.as_bytes()).unwrap().last_seq, 7);
    }

    fn lines_of(content: &str) -> TranscriptLines {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(content.as_bytes()).unwrap();
        read_transcript_lines(f.path()).unwrap()
    }

    #[test]
    fn reader_reports_corrupt_middle_lines_with_their_number_and_goes_on() {
        let read = lines_of(&format!("{}garbage\n{}", line(1), line(2)));
        assert_eq!(read.events.len(), 2);
        assert_eq!(read.problems.len(), 1);
        assert!(read.problems[0].contains(":2:"), "{:?}", read.problems);
        let torn = lines_of(&format!("{}{}{{\"seq\"", line(1), line(2)));
        assert_eq!((torn.events.len(), torn.problems.len()), (2, 0));
        let torn_json = lines_of(&format!("{}{}garbage\n", line(1), line(2)));
        assert_eq!((torn_json.events.len(), torn_json.problems.len()), (2, 0));
    }

    #[test]
    fn seq_that_repeats_goes_back_or_skips_is_reported() {
        let dup = lines_of(&format!("{}{}{}{}", line(1), line(2), line(2), line(3)));
        assert_eq!(dup.events.len(), 3);
        assert_eq!(dup.problems.len(), 1);
        assert!(
            dup.problems[0].contains(":3: seq 2 repeats"),
            "{:?}",
            dup.problems
        );
        let swapped = lines_of(&format!("{}{}{}", line(1), line(3), line(2)));
        assert_eq!(swapped.problems.len(), 2, "{:?}", swapped.problems);
        let gap = lines_of(&format!("{}{}", line(1), line(3)));
        assert_eq!((gap.events.len(), gap.problems.len()), (2, 1));
        let first_not_one = lines_of(&line(2));
        assert_eq!(first_not_one.problems.len(), 1);
    }
}

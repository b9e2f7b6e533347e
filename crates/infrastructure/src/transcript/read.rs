//! Reading transcript files: the tolerant reader for tools and tests, and the
//! tail scan a reopening recorder uses to continue the `seq` series.
//!
//! Both follow the run store's crash rule (design §4): a torn last line — no
//! newline, or a final line that is not JSON — is the remains of a crash and
//! is ignored (reader) or cut (writer); a bad line anywhere else is
//! corruption and is reported with its file and line number, never skipped.

use std::borrow::Cow;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use application::ports::TranscriptError;
use domain::transcript::{ExchangeEvent, ExchangeType};
use serde::Deserialize;

use super::io_err;
use crate::blobs::{BlobDir, BlobError, transcript_blob_dir};

/// Bytes read per step when scanning a file backwards for its last line:
/// most lines are a few hundred bytes, so one read usually suffices; a long
/// tool output takes a few more.
const TAIL_CHUNK: u64 = 64 * 1024;

/// Every line of the transcript at `path`, in file order.
///
/// Lines of unknown event types and blocks of unknown types are kept whole
/// (one warning per file says how many lines were of unknown types); blank
/// lines are skipped; a torn last line is skipped with a warning. Errors:
/// [`TranscriptError::Io`] when the file cannot be read, or naming the file
/// and line number of a corrupt line that is not the last.
pub fn read_transcript(path: impl AsRef<Path>) -> Result<Vec<ExchangeEvent>, TranscriptError> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|e| io_err("read", path, &e))?;
    parse_lines(&bytes, path)
}

/// [`read_transcript`] over bytes already read; `path` names them in messages.
fn parse_lines(bytes: &[u8], path: &Path) -> Result<Vec<ExchangeEvent>, TranscriptError> {
    let mut events = Vec::new();
    let mut unknown = 0usize;
    let blobs = BlobDir::new(transcript_blob_dir(path), false);
    let mut lines = bytes
        .split_inclusive(|b| *b == b'\n')
        .enumerate()
        .peekable();
    while let Some((index, line)) = lines.next() {
        let is_last = lines.peek().is_none();
        let number = index + 1;
        let complete = line.last() == Some(&b'\n');
        if !complete {
            tracing::warn!(file = %path.display(), line = number, "ignoring a torn last line of the transcript");
            break;
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        // Large values are stored apart, in the run's blobs; a line that is
        // not JSON is judged below.
        let resolved = match blobs.resolve(line) {
            Ok(resolved) => resolved,
            Err(BlobError::Json(_)) => Cow::Borrowed(line),
            Err(e) => {
                return Err(TranscriptError::Corrupt(format!(
                    "{}:{number}: {e}",
                    path.display()
                )));
            }
        };
        match serde_json::from_slice::<ExchangeEvent>(&resolved) {
            Ok(event) => {
                if matches!(event.kind, ExchangeType::Unknown(_)) {
                    unknown += 1;
                }
                events.push(event);
            }
            // A final complete line that is not JSON is a crash's remains too;
            // valid JSON of the wrong shape is not.
            Err(e) if is_last && serde_json::from_slice::<serde::de::IgnoredAny>(line).is_err() => {
                tracing::warn!(file = %path.display(), line = number, error = %e, "ignoring a torn last line of the transcript");
            }
            Err(e) => {
                return Err(TranscriptError::Corrupt(format!(
                    "{}:{number}: {e}",
                    path.display()
                )));
            }
        }
    }
    if unknown > 0 {
        tracing::warn!(file = %path.display(), lines = unknown, "transcript has lines of event types this version does not know; kept as they are");
    }
    Ok(events)
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
                if !tolerated_bad_line
                    && serde_json::from_slice::<serde::de::IgnoredAny>(&line).is_err() =>
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

    #[test]
    fn reader_reports_corrupt_middle_lines_with_their_number() {
        let content = format!("{}garbage\n{}", line(1), line(3));
        let err = parse_lines(content.as_bytes(), Path::new("t.jsonl")).unwrap_err();
        assert!(err.to_string().contains("t.jsonl:2:"), "{err}");
        let torn = format!("{}{}{{\"seq\"", line(1), line(2));
        assert_eq!(
            parse_lines(torn.as_bytes(), Path::new("t")).unwrap().len(),
            2
        );
        let torn_json = format!("{}{}garbage\n", line(1), line(2));
        assert_eq!(
            parse_lines(torn_json.as_bytes(), Path::new("t"))
                .unwrap()
                .len(),
            2
        );
    }
}

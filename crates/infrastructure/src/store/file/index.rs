//! `events.idx`: the persisted offset index of one run's log.
//!
//! Entry `i` (8 bytes, little-endian) is the byte position where the line of
//! offset `i + 1` starts, so `read(after)` seeks straight to its first line
//! instead of scanning the log. The index is derived data: it is written in
//! batches without syncing, and any doubt about it on open (missing, torn,
//! garbage, stale after a cut) makes the reader trust less of it or rebuild
//! it by scanning the log, never fail.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use serde::Deserialize;

use crate::fs::{FileReadError, read_bounded};

/// Width of one entry.
pub(super) const ENTRY_BYTES: usize = 8;

/// At most this many trailing entries are dropped one by one because they do
/// not point at a line start; more than that means the file is not an index
/// of this log, and a rebuild is cheaper than probing further.
const MAX_TAIL_REPAIR: usize = 64;

/// Lines checked against the offsets their index position claims: enough to
/// catch an index of another log or one shifted by a missing line (the last
/// entries are always among them), few enough that opening costs ~50 µs.
const SAMPLES: usize = 16;

/// A sampled "line" longer than this is taken as a sign of a bad index
/// rather than read into memory (events are far smaller).
const MAX_SAMPLED_LINE: usize = 64 << 20;

/// Encodes `entries` onto `out`.
pub(super) fn encode(entries: &[u64], out: &mut Vec<u8>) {
    out.reserve(entries.len() * ENTRY_BYTES);
    for entry in entries {
        out.extend_from_slice(&entry.to_le_bytes());
    }
}

/// Decodes whole entries (a torn last entry is ignored).
fn decode(bytes: &[u8]) -> Vec<u64> {
    bytes
        .chunks_exact(ENTRY_BYTES)
        .map(|chunk| {
            let mut le = [0u8; ENTRY_BYTES];
            le.copy_from_slice(chunk);
            u64::from_le_bytes(le)
        })
        .collect()
}

/// The entries of `events.idx` that provably describe `log` (of length
/// `log_len`), in order; empty when the file is missing or not to be trusted,
/// which makes the caller index the log by scanning it.
pub(super) fn load(idx: &Path, log: &File, log_len: u64) -> Vec<u64> {
    // A log of n bytes has at most n lines: a larger file is not its index,
    // and is not worth reading into memory. Nor is a FIFO or a device.
    let limit = log_len.saturating_add(1).saturating_mul(ENTRY_BYTES as u64);
    let bytes = match read_bounded(idx, limit) {
        Ok(bytes) => bytes,
        Err(FileReadError::NotFound { .. }) => {
            tracing::debug!(file = %idx.display(), "no offset index; scanning the log");
            return Vec::new();
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot use the offset index; rebuilding it");
            return Vec::new();
        }
    };
    let mut entries = decode(&bytes);
    if entries.is_empty() {
        return entries;
    }
    if entries[0] != 0 || !entries.windows(2).all(|w| w[0] < w[1]) {
        tracing::warn!(file = %idx.display(), "offset index is not an index; rebuilding it");
        return Vec::new();
    }
    // Entries at or past the end point into a tail that was cut off.
    let keep = entries.partition_point(|&pos| pos < log_len);
    entries.truncate(keep);
    let mut dropped = 0;
    while let Some(&last) = entries.last() {
        match starts_line(log, last) {
            Ok(true) => break,
            Ok(false) if dropped < MAX_TAIL_REPAIR => {
                entries.pop();
                dropped += 1;
            }
            Ok(false) | Err(_) => {
                tracing::warn!(file = %idx.display(), "offset index does not match the log's tail; rebuilding it");
                return Vec::new();
            }
        }
    }
    if !samples_agree(log, &entries) {
        tracing::warn!(file = %idx.display(), "offset index does not match the log; rebuilding it");
        return Vec::new();
    }
    entries
}

/// Whether a line starts at `pos` (the byte before it is a newline).
fn starts_line(log: &File, pos: u64) -> io::Result<bool> {
    if pos == 0 {
        return Ok(true);
    }
    let mut byte = [0u8; 1];
    log.read_exact_at(&mut byte, pos - 1)?;
    Ok(byte[0] == b'\n')
}

/// Only the envelope field the check needs; parsing it skips the rest of the line.
#[derive(Deserialize)]
struct OffsetOnly {
    offset: u64,
}

/// Checks, for a spread of entries including the second to last, that the
/// bytes up to the next entry are exactly one line holding offset `i + 1`.
/// (The last entry's line is re-indexed by scanning anyway.)
fn samples_agree(log: &File, entries: &[u64]) -> bool {
    let lines = entries.len().saturating_sub(1);
    if lines == 0 {
        return true;
    }
    let step = lines.div_ceil(SAMPLES).max(1);
    let picks = (0..lines).step_by(step).chain(std::iter::once(lines - 1));
    let mut buf = Vec::new();
    for i in picks {
        let (start, stop) = (entries[i], entries[i + 1]);
        let Some(len) = usize::try_from(stop - start)
            .ok()
            .filter(|&len| len <= MAX_SAMPLED_LINE)
        else {
            return false;
        };
        buf.resize(len, 0);
        if log.read_exact_at(&mut buf, start).is_err() {
            return false;
        }
        let Some((&b'\n', body)) = buf.split_last() else {
            return false;
        };
        if body.contains(&b'\n') {
            return false;
        }
        match serde_json::from_slice::<OffsetOnly>(body) {
            Ok(line) if line.offset == i as u64 + 1 => {}
            _ => return false,
        }
    }
    true
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_torn_entries_are_ignored() {
        let mut bytes = Vec::new();
        encode(&[0, 300, 600], &mut bytes);
        assert_eq!(bytes.len(), 24);
        bytes.extend_from_slice(&[1, 2, 3]);
        assert_eq!(decode(&bytes), vec![0, 300, 600]);
    }
}

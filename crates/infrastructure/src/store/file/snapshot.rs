//! The run's snapshot file: swapped in whole (`renameat2` exchange), read
//! within a size bound, large values kept as blobs; and the deltas saved
//! since it, appended one a line to `snapshot-deltas.ndjson`.

use std::fs::{self, File};
use std::io::{self, Seek, Write};
use std::path::Path;
use std::sync::atomic::Ordering;

use application::ports::StoreError;
use domain::snapshot::{DeltaError, SnapshotDelta};
use domain::{RunSnapshot, RunStatus};

use super::log::{RunPaths, io_err, open_for_writing};
use super::{RunHandle, lock};
use crate::blobs::{BlobError, RefScan};
use crate::fs::{FileReadError, MAX_SNAPSHOT_FILE, read_bounded};

/// A snapshot's JSON goes to its file in parts of about this size.
const PART: usize = 64 * 1024;

/// A run whose last snapshot was shorter than this has the next one encoded
/// whole: its buffer costs little, and a run's first snapshot finds out
/// whether it has values for blobs (its input, say) without encoding them
/// twice, as a streamed one that must be written again whole does.
pub(super) const STREAM_FROM: usize = 256 * 1024;

/// Replaces `snapshot.json` atomically without allocating an inode per write.
///
/// The new snapshot is written into `snapshot.json.tmp`, then the two names
/// are swapped with `renameat2(RENAME_EXCHANGE)`: readers see the old or the
/// new file, never a mix, and the old snapshot's inode becomes the next
/// write's temporary file. Creating a fresh file and renaming it over the
/// old one (the portable way, used when the filesystem cannot exchange)
/// costs an inode allocation and release per step, which on ext4 was most of
/// a step's cost. Returns the bytes of the snapshot as encoded, before
/// large values moved to blobs.
///
/// Once the run's snapshots pass [`STREAM_FROM`], the JSON is written as
/// it is made, a part at a time: a long run's snapshot is megabytes, and a
/// buffer of all of it stayed with the allocator after each write. A run
/// whose snapshot had a value to move to a blob has every later one encoded
/// whole, through
/// [`BlobDir::externalize_measured`](crate::blobs::BlobDir::externalize_measured)
/// (its values stay); a streamed one found to have one (once written) is
/// written again that way.
pub(super) fn write_snapshot(
    handle: &RunHandle,
    snapshot: &RunSnapshot,
) -> Result<u64, StoreError> {
    let paths = &handle.paths;
    let short = handle.snapshot_len.load(Ordering::Relaxed) < STREAM_FROM;
    let whole = if short || handle.blobbed.load(Ordering::Relaxed) {
        Some(encode_whole(handle, snapshot)?)
    } else {
        None
    };
    let _turn = lock(&handle.snapshot_lock);
    {
        // Deltas a writer before this one left (it crashed) could continue
        // this snapshot's offset with other events than its log holds now:
        // gone before the snapshot is in place.
        let mut deltas = lock(&handle.deltas);
        if !deltas.checked {
            remove_if_there(&paths.deltas)?;
            deltas.checked = true;
        }
    }
    let (encoded, bytes) = match whole {
        Some((encoded, bytes)) => {
            fill_tmp(paths, |tmp| tmp.write_all(&bytes))?;
            (encoded, Some(bytes))
        }
        None => {
            #[cfg(test)]
            handle.streamed.fetch_add(1, Ordering::Relaxed);
            let streamed = fill_tmp(paths, |tmp| stream(snapshot, tmp))?;
            if paths.snapshot_blobs.keeps_whole(streamed.longest) && !streamed.refs {
                (streamed.len, None)
            } else {
                // A value shaped like a reference is escaped whole: so are
                // the run's later snapshots.
                handle.blobbed.store(true, Ordering::Relaxed);
                let (encoded, bytes) = encode_whole(handle, snapshot).inspect_err(|_| {
                    // The streamed text is no snapshot to leave behind.
                    if let Err(e) = remove_if_there(&paths.snapshot_tmp) {
                        tracing::warn!(run = %paths.run_id, error = %e, "cannot remove a snapshot not written");
                    }
                })?;
                fill_tmp(paths, |tmp| tmp.write_all(&bytes))?;
                (encoded, Some(bytes))
            }
        }
    };
    handle.snapshot_len.store(
        usize::try_from(encoded).unwrap_or(usize::MAX),
        Ordering::Relaxed,
    );
    let exchanged = rustix::fs::renameat_with(
        rustix::fs::CWD,
        &paths.snapshot_tmp,
        rustix::fs::CWD,
        &paths.snapshot,
        rustix::fs::RenameFlags::EXCHANGE,
    );
    match exchanged {
        Ok(()) => {}
        // No snapshot yet (ENOENT), or a filesystem without exchange: plain rename.
        Err(_) => fs::rename(&paths.snapshot_tmp, &paths.snapshot)
            .map_err(|e| io_err("rename onto", &paths.snapshot, e))?,
    }
    // The blobs only the replaced snapshot named are garbage now. A reader
    // still resolving that snapshot finds one missing and rebuilds the
    // state from the log, as from any unreadable snapshot.
    if let Err(e) = paths
        .snapshot_blobs
        .keep_only(bytes.as_deref().unwrap_or_default())
    {
        tracing::warn!(run = %paths.run_id, error = %e, "cannot remove the blobs of a replaced snapshot");
    }
    // The deltas continued the replaced snapshot. Until they are gone a
    // reader skips them: each reflects no event past the new snapshot.
    let at_rest = !matches!(snapshot.status, RunStatus::Running | RunStatus::Pending);
    {
        let mut deltas = lock(&handle.deltas);
        if at_rest {
            deltas.file = None;
            deltas.lines = false;
            remove_if_there(&paths.deltas)?;
        } else if std::mem::take(&mut deltas.lines)
            && let Some(file) = &deltas.file
        {
            // Written at the file's position (one writer): back to the start.
            file.set_len(0)
                .and_then(|()| (&*file).seek(io::SeekFrom::Start(0)).map(drop))
                .map_err(|e| io_err("empty", &paths.deltas, e))?;
        }
    }
    // At rest (ended or paused) the run writes no snapshot until it is
    // resumed: the old one, swapped into the temporary name, goes now.
    if at_rest {
        remove_if_there(&paths.snapshot_tmp)?;
    }
    Ok(encoded)
}

/// What [`stream`] wrote.
struct Streamed {
    len: u64,
    /// The longest value in it.
    longest: usize,
    /// Whether it mentions a blob reference's key.
    refs: bool,
}

/// Writes `snapshot` into `tmp` as it is encoded.
fn stream(snapshot: &RunSnapshot, tmp: &mut File) -> io::Result<Streamed> {
    let mut refs = RefScan::default();
    let mut len = 0;
    let mut out = |part: &[u8]| {
        refs.feed(part);
        len += part.len() as u64;
        tmp.write_all(part)
    };
    let mut buf = Vec::with_capacity(PART + PART / 4);
    let longest = snapshot.write_json_flushing(&mut buf, PART, &mut out)?;
    out(&buf)?;
    Ok(Streamed {
        len,
        longest,
        refs: refs.found(),
    })
}

/// The snapshot's JSON whole, its large values moved to blobs, and its
/// length before: its buffer starts about as large as the last one's.
fn encode_whole(handle: &RunHandle, snapshot: &RunSnapshot) -> Result<(u64, Vec<u8>), StoreError> {
    let paths = &handle.paths;
    let last = handle.snapshot_len.load(Ordering::Relaxed);
    let mut bytes = Vec::with_capacity((last + last / 8).max(4096));
    let longest = snapshot.write_json_measured(&mut bytes).map_err(|e| {
        StoreError::io(
            format!("cannot serialize the snapshot of run {}", paths.run_id),
            e.into(),
        )
    })?;
    let encoded = bytes.len() as u64;
    if !paths.snapshot_blobs.keeps_whole(longest) {
        handle.blobbed.store(true, Ordering::Relaxed);
    }
    let bytes = (paths.snapshot_blobs.externalize_measured(bytes, longest))
        .map_err(|e| blobs_err(format!("the snapshot of run {}", paths.run_id), e))?;
    Ok((encoded, bytes))
}

/// Opens `snapshot.json.tmp` and fills it with `fill`, cut to what it wrote.
fn fill_tmp<T>(
    paths: &RunPaths,
    fill: impl FnOnce(&mut File) -> io::Result<T>,
) -> Result<T, StoreError> {
    let tmp = open_named(&paths.snapshot_tmp, false, "create")?;
    fill_or_remove(tmp, &paths.snapshot_tmp, |tmp| {
        let filled = fill(tmp)?;
        let len = tmp.stream_position()?;
        tmp.set_len(len)?;
        Ok(filled)
    })
}

/// When the writer lets go of the run: the old snapshot that the last
/// exchange swapped into the temporary name goes, as it does when a
/// snapshot of a run at rest is written (a run that stops with no final
/// snapshot, because none was due, writes none). Only where this store
/// wrote a snapshot: a short run pays no syscall for it.
pub(super) fn release(handle: &RunHandle) {
    if handle.snapshot_len.load(Ordering::Relaxed) == 0 {
        return;
    }
    let _turn = lock(&handle.snapshot_lock);
    if let Err(e) = remove_if_there(&handle.paths.snapshot_tmp) {
        tracing::warn!(run = %handle.paths.run_id, error = %e, "cannot remove the replaced snapshot");
    }
}

/// The run's deltas file as its writer holds it.
///
/// Held open for the run and emptied in place by each snapshot: removing
/// it and creating it again, or opening it anew to truncate it, is a
/// metadata operation per snapshot, and on ext4 one could wait milliseconds
/// for a journal commit.
#[derive(Debug, Default)]
pub(super) struct DeltaFile {
    file: Option<File>,
    /// Lines appended since the last snapshot.
    lines: bool,
    /// Whether a file an earlier writer left was removed.
    checked: bool,
}

fn remove_if_there(path: &Path) -> Result<(), StoreError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err("remove", path, e)),
    }
}

/// Appends `delta` to `snapshot-deltas.ndjson` in one `write`, and returns
/// its size. Not synced: like the snapshot, a delta lost in a crash is
/// folded again from the log. Large values stay in the line: the deltas
/// weigh at most half the log since the snapshot (the recorder's rule), and
/// none outlives the next snapshot.
pub(super) fn append_delta(handle: &RunHandle, delta: &SnapshotDelta) -> Result<u64, StoreError> {
    let paths = &handle.paths;
    let mut line = Vec::with_capacity(4096);
    delta.write_json(&mut line).map_err(|e| {
        StoreError::io(
            format!("cannot serialize a snapshot delta of run {}", paths.run_id),
            e.into(),
        )
    })?;
    let encoded = line.len() as u64;
    line.push(b'\n');
    let mut deltas = lock(&handle.deltas);
    if deltas.file.is_none() {
        deltas.file = Some(open_named(&paths.deltas, true, "open")?);
    }
    if let Some(file) = &mut deltas.file {
        file.write_all(&line)
            .map_err(|e| io_err("append to", &paths.deltas, e))?;
    }
    deltas.lines = true;
    Ok(encoded)
}

/// [`open_for_writing`], its error naming `what` was done to the file.
fn open_named(path: &Path, truncate: bool, what: &str) -> Result<File, StoreError> {
    open_for_writing(path, truncate).map_err(|e| match e {
        FileReadError::Io { path, source } | FileReadError::Open { path, source } => {
            io_err(what, &path, source)
        }
        other => other.into(),
    })
}

/// Runs `fill` on the temporary file `tmp` at `path`; when it fails (a full
/// disk), the half-written file is removed, so a failed write leaves no
/// `snapshot.json.tmp` behind (the saved `snapshot.json` is untouched).
pub(super) fn fill_or_remove<T>(
    mut tmp: File,
    path: &Path,
    fill: impl FnOnce(&mut File) -> io::Result<T>,
) -> Result<T, StoreError> {
    let filled = fill(&mut tmp);
    drop(tmp);
    filled.map_err(|e| {
        if let Err(removal) = fs::remove_file(path) {
            tracing::warn!(file = %path.display(), error = %removal, "cannot remove a half-written snapshot");
        }
        io_err("write", path, e)
    })
}

/// The saved snapshot. Not JSON or not a snapshot is `Corrupt` (the state can
/// be rebuilt from the log); not a regular file or over
/// [`MAX_SNAPSHOT_FILE`] is `Io`.
///
/// The deltas after it are applied up to the first that reaches past the
/// log's last offset, which `log_ends` gives (none when it is unknown); it
/// is asked only when there are deltas.
pub(super) fn read_snapshot(
    paths: &RunPaths,
    log_ends: impl FnOnce() -> Option<u64>,
) -> Result<Option<RunSnapshot>, StoreError> {
    let bytes = match read_bounded(&paths.snapshot, MAX_SNAPSHOT_FILE) {
        Ok(bytes) => bytes,
        Err(FileReadError::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let bytes = (paths.snapshot_blobs.resolve(&bytes))
        .map_err(|e| blobs_err(paths.snapshot.display().to_string(), e))?;
    let mut snapshot = RunSnapshot::from_json(&bytes, paths.run_id)
        .map_err(|e| StoreError::Corrupt(format!("{}: {e}", paths.snapshot.display())))?;
    apply_deltas(paths, &mut snapshot, log_ends);
    Ok(Some(snapshot))
}

/// Brings `snapshot` forward by the deltas saved after it, in order, up to
/// the first that does not continue it. Deltas are a cache: one cut short
/// by a crash, unreadable, or left from a replaced snapshot ends the chain
/// there, and the reader folds the log from the state reached.
fn apply_deltas(
    paths: &RunPaths,
    snapshot: &mut RunSnapshot,
    log_ends: impl FnOnce() -> Option<u64>,
) {
    let bytes = match read_bounded(&paths.deltas, MAX_SNAPSHOT_FILE) {
        Ok(bytes) => bytes,
        Err(FileReadError::NotFound { .. }) => return,
        Err(e) => {
            tracing::warn!(error = %e, "snapshot deltas left out; the log is folded instead");
            return;
        }
    };
    if bytes.is_empty() {
        return;
    }
    let log_ends = log_ends().unwrap_or(0);
    let lines = bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty());
    let deltas = lines.map(|line| {
        SnapshotDelta::from_json(line).and_then(|delta| match delta.last_offset {
            past if past > log_ends => Err(DeltaError::PastTheLog { past, log_ends }),
            _ => Ok(delta),
        })
    });
    if let Some(e) = snapshot.apply_deltas(deltas) {
        tracing::debug!(run = %paths.run_id, error = %e, "snapshot deltas end here");
    }
}

/// A blob failure while writing or reading `what`. Failing to store is an
/// I/O error; failing to read is one only when the medium failed, otherwise
/// the stored data is wrong.
pub(super) fn blobs_err(what: String, e: BlobError) -> StoreError {
    match e {
        BlobError::Io {
            what: doing,
            path,
            source,
        } => StoreError::io(format!("{what}: cannot {doing} {}", path.display()), source),
        BlobError::TooLarge { .. } => StoreError::io_msg(format!("{what}: {e}")),
        e => StoreError::Corrupt(format!("{what}: {e}")),
    }
}

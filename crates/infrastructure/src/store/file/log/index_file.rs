//! The writer's side of `events.idx` (see `index`): created once the log
//! is long enough to need one, written in batches and on close, and cut
//! back to what was verified when a writer takes an existing one over.

use std::os::unix::fs::FileExt;

use application::ports::StoreError;

use super::{LogState, RunPaths, index, io_err, open_for_writing};

/// The fewest events a log has before its writer keeps `events.idx`: a
/// short run's log is scanned faster than an extra file is created.
const IDX_MIN_EVENTS: usize = 256;

impl LogState {
    /// Opens an existing `events.idx` and drops whatever it holds beyond
    /// what was verified.
    pub(super) fn open_idx_for_writing(&mut self, paths: &RunPaths) -> Result<(), StoreError> {
        let idx = open_for_writing(&paths.idx, false).map_err(StoreError::from)?;
        idx.set_len((self.idx_persisted * index::ENTRY_BYTES) as u64)
            .map_err(|e| io_err("truncate", &paths.idx, e))?;
        self.idx_file = Some(idx);
        Ok(())
    }

    /// Writes the index entries not yet in `events.idx` (writers only). A
    /// failure is logged, not returned: the index is derived data and the
    /// next open re-derives what is missing.
    pub(in crate::store::file) fn persist_index(&mut self, paths: &RunPaths) {
        if self.idx_persisted >= self.index.len() || !self.idx_open() {
            return;
        }
        let Some(idx) = &self.idx_file else {
            return;
        };
        self.buf.clear();
        index::encode(&self.index[self.idx_persisted..], &mut self.buf);
        let at = (self.idx_persisted * index::ENTRY_BYTES) as u64;
        match idx.write_all_at(&self.buf, at) {
            Ok(()) => self.idx_persisted = self.index.len(),
            Err(e) => {
                tracing::warn!(file = %paths.idx.display(), error = %e, "cannot write the offset index");
            }
        }
    }

    /// Whether `events.idx` is open for writing, creating it once the log
    /// holds [`IDX_MIN_EVENTS`].
    fn idx_open(&mut self) -> bool {
        if self.idx_file.is_some() {
            return true;
        }
        if self.index.len() < IDX_MIN_EVENTS {
            return false;
        }
        let Some(path) = self.idx_path.take() else {
            return false;
        };
        match open_for_writing(&path, true) {
            Ok(file) => {
                self.idx_file = Some(file);
                self.idx_persisted = 0;
                true
            }
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "cannot create the offset index");
                false
            }
        }
    }
}

impl Drop for LogState {
    /// Leaves the index complete for the next reader of this run.
    fn drop(&mut self) {
        if self.idx_persisted < self.index.len()
            && self.idx_open()
            && let Some(idx) = &self.idx_file
        {
            let mut buf = Vec::new();
            index::encode(&self.index[self.idx_persisted..], &mut buf);
            let _ = idx.write_all_at(&buf, (self.idx_persisted * index::ENTRY_BYTES) as u64);
        }
    }
}

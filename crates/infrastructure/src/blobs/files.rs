//! The blob files themselves: storing a value once under its hash, and
//! removing the files no record needs any more (a crash's temporary files,
//! a replaced snapshot's blobs).

use std::fs::{DirBuilder, File};
use std::io::{self, Write};
use std::os::unix::fs::DirBuilderExt;

use super::text::{is_hex_hash, parse_reference};
use super::*;

/// The hashes (`<hex>`) of the blobs `doc` refers to, each once.
pub fn referenced(doc: &[u8]) -> Vec<String> {
    let mut seen = std::collections::BTreeSet::new();
    for at in memchr::memmem::find_iter(doc, REF_OPEN) {
        if let Some(found) = parse_reference(doc, at) {
            seen.insert(found.hex);
        }
    }
    seen.into_iter().collect()
}

impl BlobDir {
    /// Removes the blobs of this directory that `doc` does not refer to,
    /// for a directory whose blobs belong to that one document (a run's
    /// snapshot: each snapshot replaces the last, and what only the last
    /// referred to is garbage). A document that mentions `"$blob"` other
    /// than in references of the written form removes nothing. Returns how
    /// many blobs were removed.
    pub fn keep_only(&self, doc: &[u8]) -> Result<usize, BlobError> {
        let mentions = memchr::memmem::find_iter(doc, REF_NEEDLE).count();
        let kept: std::collections::HashSet<String> = memchr::memmem::find_iter(doc, REF_OPEN)
            .filter_map(|at| parse_reference(doc, at))
            .map(|found| found.hex)
            .collect();
        let found = memchr::memmem::find_iter(doc, REF_OPEN)
            .filter(|at| parse_reference(doc, *at).is_some())
            .count();
        if found != mentions {
            return Ok(0);
        }
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
            Err(source) => {
                return Err(BlobError::Io {
                    what: "list",
                    path: self.dir.clone(),
                    source,
                });
            }
        };
        let mut removed = 0;
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(hex) = name.to_str().and_then(|n| n.strip_prefix("sha256-")) else {
                continue;
            };
            if !is_hex_hash(hex.as_bytes()) || kept.contains(hex) {
                continue;
            }
            match std::fs::remove_file(entry.path()) {
                Ok(()) => removed += 1,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(source) => {
                    return Err(BlobError::Io {
                        what: "remove",
                        path: entry.path(),
                        source,
                    });
                }
            }
        }
        Ok(removed)
    }

    /// Removes the temporary files a crash left behind (older than
    /// [`STALE_TEMP_AGE`]); called by the writer of the run when it opens
    /// its log. Returns how many were removed. Best effort: a file that
    /// cannot be removed is logged and left, since it holds nothing a
    /// record names.
    pub fn remove_stale_temps(&self) -> usize {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return 0,
            Err(e) => {
                tracing::warn!(dir = %self.dir.display(), error = %e, "cannot list the blob directory");
                return 0;
            }
        };
        let now = std::time::SystemTime::now();
        let mut removed = 0;
        for entry in entries.flatten() {
            let stale = entry.file_name().to_string_lossy().starts_with(TEMP_PREFIX)
                && entry.metadata().is_ok_and(|meta| {
                    meta.is_file()
                        && meta.modified().is_ok_and(|at| {
                            now.duration_since(at).is_ok_and(|age| age > STALE_TEMP_AGE)
                        })
                });
            if !stale {
                continue;
            }
            match std::fs::remove_file(entry.path()) {
                Ok(()) => removed += 1,
                Err(e) => {
                    tracing::warn!(file = %entry.path().display(), error = %e, "cannot remove a stale temporary blob file")
                }
            }
        }
        if removed > 0 {
            tracing::info!(dir = %self.dir.display(), removed, "removed temporary blob files a crash left behind");
        }
        removed
    }

    /// Stores `content` (one value's JSON) under its hash; returns the hash
    /// and whether a new file was created.
    pub(super) fn put(&self, content: &[u8]) -> Result<(String, bool), BlobError> {
        let bytes = content.len() as u64;
        if bytes > MAX_BLOB_BYTES {
            return Err(BlobError::TooLarge { bytes });
        }
        let hex = hex_digest(content);
        let created = self.store(&hex, content)?;
        Ok((hex, created))
    }

    /// Writes `content` as the blob `hex` unless it is there already.
    /// Returns whether a new file was created.
    fn store(&self, hex: &str, content: &[u8]) -> Result<bool, BlobError> {
        let path = self.path_of(hex);
        let io = |what, path: &Path| {
            let path = path.to_path_buf();
            move |source| BlobError::Io { what, path, source }
        };
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.is_file() && meta.len() == content.len() as u64 => {
                // Written before, perhaps by an unsynced writer (the
                // transcript): make sure it is durable before it is named.
                if self.sync {
                    File::open(&path)
                        .and_then(|f| f.sync_data())
                        .map_err(io("sync", &path))?;
                }
                return Ok(false);
            }
            _ => {}
        }
        DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(&self.dir)
            .map_err(io("create", &self.dir))?;
        if let Some(other) = &self.share_from {
            let theirs = other.join(format!("sha256-{hex}"));
            let same = std::fs::symlink_metadata(&theirs)
                .is_ok_and(|meta| meta.is_file() && meta.len() == content.len() as u64);
            // Linked, or (another filesystem, a race) written below.
            if same && std::fs::hard_link(&theirs, &path).is_ok() {
                return Ok(true);
            }
        }
        let mut tmp = tempfile::Builder::new()
            .prefix(TEMP_PREFIX)
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(FILE_MODE))
            .tempfile_in(&self.dir)
            .map_err(io("create a temporary file in", &self.dir))?;
        tmp.write_all(content).map_err(io("write", tmp.path()))?;
        if self.sync {
            tmp.as_file().sync_data().map_err(io("sync", tmp.path()))?;
        }
        tmp.persist(&path).map_err(|e| BlobError::Io {
            what: "rename a temporary file onto",
            path: path.clone(),
            source: e.error,
        })?;
        tracing::debug!(blob = %path.display(), bytes = content.len(), "stored a large value");
        Ok(true)
    }
}

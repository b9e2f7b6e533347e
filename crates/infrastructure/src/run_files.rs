//! [`RunFilesDir`]: the [`RunFiles`] of a storage's files directory, where
//! every store keeps transcripts (`transcripts/<run-id>.jsonl`), the blobs
//! transcripts name (`runs/<run-id>/blobs/`, the run's own directory in the
//! file store) and control sockets (`control/<run-id>.sock`).

use std::fs::{self, DirBuilder, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use application::ports::{RunFileSet, RunFiles, StoreError};
use async_trait::async_trait;
use domain::RunId;

use crate::blobs::{BlobDir, MAX_BLOB_BYTES, referenced, transcript_blob_dir};
use crate::transcript::transcript_path;

const DIR_MODE: u32 = 0o700;
const FILE_MODE: u32 = 0o600;

/// The largest transcript read whole for a copy (4 GiB).
const MAX_TRANSCRIPT_BYTES: u64 = 4 << 30;

/// The run files under one files directory.
#[derive(Debug, Clone)]
pub struct RunFilesDir {
    root: PathBuf,
}

impl RunFilesDir {
    /// The files under `root` (the storage's files directory).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    fn blobs(&self, run_id: RunId) -> BlobDir {
        BlobDir::new(
            transcript_blob_dir(&transcript_path(&self.root, run_id)),
            true,
        )
    }
}

fn io_err(what: &str, path: &Path, e: &io::Error) -> StoreError {
    StoreError::Io(format!("cannot {what} {}: {e}", path.display()))
}

fn read(path: &Path, limit: u64) -> Result<Option<Vec<u8>>, StoreError> {
    match crate::fs::read_bounded(path, limit) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(crate::fs::FileReadError::NotFound { .. }) => Ok(None),
        Err(e) => Err(StoreError::Io(e.to_string())),
    }
}

/// Writes `bytes` to `path` whole: a synced temporary file renamed into place.
fn write_whole(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)
        .map_err(|e| io_err("create", dir, &e))?;
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = dir.join(format!(".{name}.{}.tmp", uuid::Uuid::new_v4().simple()));
    let written = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .open(&tmp)
        .and_then(|mut f| {
            f.write_all(bytes)?;
            f.sync_all()
        })
        .and_then(|()| fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(io_err("write", path, &e));
    }
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_err("sync", dir, &e))
}

fn remove(path: &Path) -> Result<(), StoreError> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io_err("remove", path, &e)),
        _ => Ok(()),
    }
}

#[async_trait]
impl RunFiles for RunFilesDir {
    async fn export(&self, run_id: RunId) -> Result<Option<RunFileSet>, StoreError> {
        let path = transcript_path(&self.root, run_id);
        let Some(transcript) = read(&path, MAX_TRANSCRIPT_BYTES)? else {
            return Ok(None);
        };
        let dir = self.blobs(run_id);
        let mut blobs = Vec::new();
        for hex in referenced(&transcript) {
            let blob = dir.path_of(&hex);
            let bytes = read(&blob, MAX_BLOB_BYTES)?.ok_or_else(|| {
                StoreError::Corrupt(format!(
                    "{} names blob {}, which is missing",
                    path.display(),
                    blob.display()
                ))
            })?;
            blobs.push((format!("sha256-{hex}"), bytes));
        }
        Ok(Some(RunFileSet { transcript, blobs }))
    }

    async fn has_transcript(&self, run_id: RunId) -> Result<bool, StoreError> {
        Ok(transcript_path(&self.root, run_id).is_file())
    }

    async fn import(&self, run_id: RunId, files: RunFileSet) -> Result<(), StoreError> {
        let dir = self.blobs(run_id);
        for (name, bytes) in &files.blobs {
            let Some(hex) = name.strip_prefix("sha256-") else {
                return Err(StoreError::Corrupt(format!(
                    "blob name {name} of run {run_id}"
                )));
            };
            let path = dir.path_of(hex);
            if !path.is_file() {
                write_whole(&path, bytes)?;
            }
        }
        write_whole(&transcript_path(&self.root, run_id), &files.transcript)
    }

    async fn remove(&self, run_id: RunId) -> Result<(), StoreError> {
        remove(&transcript_path(&self.root, run_id))?;
        remove(&self.root.join("control").join(format!("{run_id}.sock")))?;
        let blobs = self.blobs(run_id);
        match fs::remove_dir_all(blobs.dir()) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                return Err(io_err("remove", blobs.dir(), &e));
            }
            _ => {}
        }
        // The run's directory, if that was all it held (it is the file
        // store's run directory, gone already once the run is deleted).
        if let Some(run_dir) = blobs.dir().parent() {
            let _ = fs::remove_dir(run_dir);
        }
        Ok(())
    }
}

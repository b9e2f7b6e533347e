//! [`RunFilesDir`]: the [`RunFiles`] of a storage's files directory, where
//! every store keeps transcripts (`transcripts/<run-id>.jsonl`), the blobs
//! transcripts name (`runs/<run-id>/blobs/`, the run's own directory in the
//! file store) and control sockets (`control/<run-id>.sock`).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use application::ports::{RunFileSet, RunFiles, StoreError};
use async_trait::async_trait;
use domain::{RunId, Timestamp};

use crate::blobs::{BlobDir, MAX_BLOB_BYTES, referenced, transcript_blob_dir};
use crate::transcript::transcript_path;

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

fn io_err(what: &str, path: &Path, e: io::Error) -> StoreError {
    StoreError::io(format!("cannot {what} {}", path.display()), e)
}

fn read(path: &Path, limit: u64) -> Result<Option<Vec<u8>>, StoreError> {
    match crate::fs::read_bounded(path, limit) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(crate::fs::FileReadError::NotFound { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Writes `bytes` to `path` whole: a synced temporary file renamed into place.
fn write_whole(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    crate::fs::write_whole(path, bytes).map_err(|e| io_err("write", path, e))
}

fn remove(path: &Path) -> Result<(), StoreError> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io_err("remove", path, e)),
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
                return Err(io_err("remove", blobs.dir(), e));
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

    async fn listed(&self) -> Result<Vec<(RunId, Timestamp)>, StoreError> {
        let mut runs = std::collections::BTreeMap::<RunId, Timestamp>::new();
        let mut note = |run_id: RunId, path: &Path| -> Result<(), StoreError> {
            let written = modified(path)?;
            let at = runs.entry(run_id).or_insert(written);
            *at = (*at).max(written);
            Ok(())
        };
        for (name, path) in entries(&self.root.join("transcripts"))? {
            if let Some(run_id) = name
                .strip_suffix(".jsonl")
                .and_then(|n| n.parse::<RunId>().ok())
            {
                note(run_id, &path)?;
            }
        }
        for (name, path) in entries(&self.root.join("runs"))? {
            let blobs = path.join("blobs");
            if let (Ok(run_id), true) = (name.parse::<RunId>(), blobs.is_dir()) {
                note(run_id, &blobs)?;
                for (_, blob) in entries(&blobs)? {
                    note(run_id, &blob)?;
                }
            }
        }
        Ok(runs.into_iter().collect())
    }
}

/// The entries of `dir` by name (none when it does not exist).
fn entries(dir: &Path) -> Result<Vec<(String, PathBuf)>, StoreError> {
    let list = match fs::read_dir(dir) {
        Ok(list) => list,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err("list", dir, e)),
    };
    let mut out = Vec::new();
    for entry in list {
        let entry = entry.map_err(|e| io_err("list", dir, e))?;
        if let Ok(name) = entry.file_name().into_string() {
            out.push((name, entry.path()));
        }
    }
    Ok(out)
}

/// When `path` was last written.
fn modified(path: &Path) -> Result<Timestamp, StoreError> {
    let time = fs::metadata(path)
        .and_then(|m| m.modified())
        .map_err(|e| io_err("read the time of", path, e))?;
    let millis = time
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    Ok(Timestamp::from_millis(millis))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn run() -> RunId {
        RunId::new(uuid::Uuid::new_v4()).unwrap()
    }

    /// A transcript, blobs left without their transcript (a removal cut
    /// short), and what is neither a run's file nor a run id: the first
    /// two are listed with their last write, the rest is not.
    #[tokio::test]
    async fn listed_names_every_run_with_files_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let files = RunFilesDir::new(dir.path());
        let (with_transcript, blobs_only) = (run(), run());
        let set = RunFileSet {
            transcript: b"{}\n".to_vec(),
            blobs: Vec::new(),
        };
        files.import(with_transcript, set).await.unwrap();
        let blobs = dir
            .path()
            .join("runs")
            .join(blobs_only.to_string())
            .join("blobs");
        std::fs::create_dir_all(&blobs).unwrap();
        std::fs::write(blobs.join("ab"), b"x").unwrap();
        std::fs::write(dir.path().join("transcripts").join("notes.jsonl"), b"").unwrap();
        std::fs::create_dir_all(dir.path().join("runs").join(run().to_string())).unwrap();

        let listed = files.listed().await.unwrap();
        let mut ids: Vec<RunId> = listed.iter().map(|(id, _)| *id).collect();
        ids.sort();
        let mut expected = vec![with_transcript, blobs_only];
        expected.sort();
        assert_eq!(ids, expected);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis();
        for (_, at) in listed {
            let at = u128::try_from(at.as_millis()).unwrap();
            assert!(now.abs_diff(at) < 60_000, "last written just now: {at}");
        }

        files.remove(blobs_only).await.unwrap();
        let left: Vec<RunId> = files
            .listed()
            .await
            .unwrap()
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        assert_eq!(left, vec![with_transcript]);
    }
}

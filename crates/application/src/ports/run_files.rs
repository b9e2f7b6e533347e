//! [`RunFiles`]: what a run keeps beside its store, whatever the store: its
//! exchange transcript (and the large values the transcript names), and the
//! control socket of a live run. Copied by `migrate`, removed by `prune`
//! after the run itself, so a crash between the two leaves at most files
//! without a run (which a later prune removes), never a run that reads as
//! valid without them.

use async_trait::async_trait;
use domain::{RunId, Timestamp};

use super::StoreError;

/// A run's files, read whole for a copy to another storage.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunFileSet {
    /// The transcript, byte for byte.
    pub transcript: Vec<u8>,
    /// The large values it names, by name (`sha256-<hex>`), byte for byte.
    pub blobs: Vec<(String, Vec<u8>)>,
}

/// The files of runs in one storage.
#[cfg_attr(all(any(test, feature = "testing"), not(doctest)), mockall::automock)]
#[async_trait]
pub trait RunFiles: Send + Sync + 'static {
    /// The run's transcript and the blobs it names; `None` when it has no
    /// transcript here.
    async fn export(&self, run_id: RunId) -> Result<Option<RunFileSet>, StoreError>;

    /// Whether the run has a transcript here.
    async fn has_transcript(&self, run_id: RunId) -> Result<bool, StoreError>;

    /// Writes `files` as the run's: the blobs first, then the transcript,
    /// whole, by rename, so a transcript that is there names no missing
    /// blob and is never partial.
    async fn import(&self, run_id: RunId, files: RunFileSet) -> Result<(), StoreError>;

    /// Removes the run's files (nothing there is not an error).
    async fn remove(&self, run_id: RunId) -> Result<(), StoreError>;

    /// Every run that has files here (a transcript, or the blobs one
    /// named), with the last time any of them was written: `prune` removes
    /// those whose run is gone (a crash between deleting a run and removing
    /// its files leaves them).
    async fn listed(&self) -> Result<Vec<(RunId, Timestamp)>, StoreError>;
}

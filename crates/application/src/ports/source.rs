//! [`WorkflowSource`]: where workflow files come from.
//!
//! The loader ([`crate::load`]) reads every workflow file, and asks every
//! question about paths (where a symlink leads, whether a fixture exists),
//! through this port, so every front end validates the same way and tests
//! can load from memory.

use std::path::{Path, PathBuf};

/// Why a workflow file could not be read; the message names the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SourceError(pub String);

/// Workflow files and the paths around them.
#[cfg_attr(any(test, feature = "testing"), mockall::automock)]
pub trait WorkflowSource: Send + Sync {
    /// The text of the workflow file at `path`. An implementation bounds
    /// what it reads (a workflow is small; a FIFO or `/dev/zero` is not one).
    fn read(&self, path: &Path) -> Result<String, SourceError>;

    /// `path` with every symlink resolved, or `None` when it does not lead
    /// anywhere (nothing there, or unreadable).
    fn canonical(&self, path: &Path) -> Option<PathBuf>;

    /// Whether `path` is a regular file (or a symlink to one).
    fn is_file(&self, path: &Path) -> bool;
}

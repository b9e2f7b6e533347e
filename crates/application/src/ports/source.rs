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
///
/// Workflows held in memory, loaded and checked as files are:
///
/// ```
/// use std::collections::HashMap;
/// use std::path::{Path, PathBuf};
///
/// use awr_application::load::{LoadRules, load_workflow};
/// use awr_application::ports::{SourceError, WorkflowSource};
///
/// /// Files by path; nothing else exists.
/// struct InMemory(HashMap<PathBuf, String>);
///
/// impl WorkflowSource for InMemory {
///     fn read(&self, path: &Path) -> Result<String, SourceError> {
///         let text = self.0.get(path).cloned();
///         text.ok_or_else(|| SourceError(format!("{}: no such file", path.display())))
///     }
///     fn canonical(&self, path: &Path) -> Option<PathBuf> {
///         self.0.contains_key(path).then(|| path.to_path_buf())
///     }
///     fn is_file(&self, path: &Path) -> bool {
///         self.0.contains_key(path)
///     }
/// }
///
/// let file = |path: &str, text: &str| (PathBuf::from(path), text.to_owned());
/// let files = InMemory(HashMap::from([
///     file("/flows/main.yaml", "name: main\nnodes: [{id: sub, call_workflow: child.yaml}]\n"),
///     file("/flows/child.yaml", "name: child\nnodes: [{id: hi, command: echo hi}]\n"),
///     file("/flows/broken.yaml", "name: broken\nnodes: [{id: sub, call_workflow: gone.yaml}]\n"),
/// ]));
/// let rules = LoadRules::default();
/// let main = load_workflow(&files, Path::new("/flows/main.yaml"), &rules)?;
/// assert_eq!(main.name, "main");
///
/// // A call of a missing file is refused before anything runs, naming it.
/// let error = load_workflow(&files, Path::new("/flows/broken.yaml"), &rules).unwrap_err();
/// assert!(error.to_string().contains("gone.yaml"), "{error}");
/// # Ok::<(), awr_application::load::LoadError>(())
/// ```
#[cfg_attr(all(any(test, feature = "testing"), not(doctest)), mockall::automock)]
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

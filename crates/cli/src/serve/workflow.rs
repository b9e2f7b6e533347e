//! The workflow of `POST /workflows`: a file of the operator's, named by
//! `path` under `--root`, or one the client sends inline (docs/security.md,
//! "Code from a client").
//!
//! - A `path`, and every file a `call_workflow` names, must be a workflow
//!   file (`.yaml`, `.yml`, `.json`) under the root and outside the
//!   server's storage: the storage keeps what clients send and what runs
//!   write (an input can be a blob file), none of which is the operator's.
//! - An inline workflow is written aside as a draft, loaded and judged, and
//!   kept (`workflows/<sha256>.yaml` or `.json`, so `awr resume` reads it
//!   again) only once accepted; a refused one leaves nothing behind.
//! - A workflow that does not load is answered with the loader's words only
//!   where they are about what the client sent: of a file of the server's,
//!   the answer says which file, never what it holds (a parse error quotes
//!   the text it could not read).

use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use application::load::{LoadError, named_as_workflow};
use axum::http::StatusCode;
use domain::WorkflowDef;
use serde_json::Value;

use super::ApiError;
use crate::Failure;
use crate::storage::Storage;

/// The places of `storage` on disk (canonical where they exist): no
/// workflow may be read from them.
pub(super) fn storage_places(storage: &Storage) -> Vec<PathBuf> {
    let real = |path: PathBuf| {
        path.canonicalize()
            .or_else(|_| std::path::absolute(&path))
            .unwrap_or(path)
    };
    let mut places = vec![real(storage.files())];
    if let Storage::Sqlite(db) = storage {
        places.push(real(db.clone()));
    }
    places
}

/// `path` inside `root` (canonical): a path that leaves it, by `..`, by
/// being absolute elsewhere or through a symbolic link, is 403; so is one
/// in the storage (`storage`, as [`storage_places`] gives it), or not named
/// as a workflow file.
pub(super) fn confined(root: &Path, storage: &[PathBuf], path: &str) -> Result<PathBuf, ApiError> {
    let outside = || {
        ApiError::new(
            StatusCode::FORBIDDEN,
            format!("path: `{path}` is outside the server's root (--root)"),
        )
    };
    if !named_as_workflow(Path::new(path)) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            format!("path: `{path}` is not named as a workflow file (.yaml, .yml or .json)"),
        ));
    }
    let joined = root.join(path);
    // Judged by its words first, so nothing outside is even looked at.
    let mut normal = PathBuf::new();
    for part in joined.components() {
        match part {
            Component::ParentDir => {
                if !normal.pop() {
                    return Err(outside());
                }
            }
            Component::CurDir => {}
            other => normal.push(other),
        }
    }
    if !normal.starts_with(root) {
        return Err(outside());
    }
    let real = normal.canonicalize().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            ApiError::not_found(format!("path: no file `{path}` under the server's root"))
        } else {
            ApiError::bad_request(format!("path: `{path}`: {e}"))
        }
    })?;
    if !real.starts_with(root) {
        return Err(outside());
    }
    if storage.iter().any(|place| real.starts_with(place)) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            format!(
                "path: `{path}` is in the server's storage, which holds no workflow of its own"
            ),
        ));
    }
    if !real.is_file() {
        return Err(ApiError::bad_request(format!(
            "path: `{path}` is not a workflow file"
        )));
    }
    Ok(real)
}

/// An inline workflow written aside, under a name of its own, until it is
/// accepted ([`Draft::keep`]); dropped, it is removed.
pub(super) struct Draft {
    draft: PathBuf,
    kept: PathBuf,
}

impl Draft {
    /// Writes `workflow` (its text, YAML or JSON, or a JSON object) beside
    /// where the storage keeps inline workflows (`workflows/`).
    pub(super) fn write(storage: &Storage, workflow: Value) -> Result<Self, ApiError> {
        use sha2::{Digest, Sha256};
        use std::io::Write;
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};

        static DRAFTS: AtomicU64 = AtomicU64::new(0);
        let (text, extension) = match workflow {
            Value::String(text) => (text, "yaml"),
            object @ Value::Object(_) => (
                serde_json::to_string_pretty(&object)
                    .map_err(|e| ApiError::internal(e.to_string()))?,
                "json",
            ),
            _ => {
                return Err(ApiError::bad_request(
                    "workflow: give the workflow's text (YAML or JSON) or a JSON object",
                ));
            }
        };
        let dir = storage.files().join("workflows");
        let failed =
            |e: std::io::Error| ApiError::internal(format!("cannot keep the workflow: {e}"));
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(failed)?;
        let hex = hex::encode(Sha256::digest(text.as_bytes()));
        let n = DRAFTS.fetch_add(1, Ordering::Relaxed);
        // In the same directory as the kept file: what it calls resolves
        // the same from both.
        let draft = dir.join(format!(
            ".draft-{hex}-{}-{n}.{extension}",
            std::process::id()
        ));
        let draft_file = Self {
            draft,
            kept: dir.join(format!("{hex}.{extension}")),
        };
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&draft_file.draft)
            .map_err(failed)?;
        out.write_all(text.as_bytes()).map_err(failed)?;
        Ok(draft_file)
    }

    /// Where it is now.
    pub(super) fn path(&self) -> &Path {
        &self.draft
    }

    /// Keeps it as `workflows/<sha256>.<ext>` (renamed: a reader never sees
    /// half of it) and returns that path.
    pub(super) fn keep(self) -> Result<PathBuf, ApiError> {
        std::fs::rename(&self.draft, &self.kept)
            .map_err(|e| ApiError::internal(format!("cannot keep the workflow: {e}")))?;
        Ok(self.kept.clone())
    }
}

impl Drop for Draft {
    fn drop(&mut self) {
        // Gone already once kept; a refused draft leaves nothing.
        let _ = std::fs::remove_file(&self.draft);
    }
}

/// 403 for a workflow a client sent that would do something to this
/// machine (run a program, read its files, ...; see
/// [`WorkflowDef::host_reach`]): only the operator's own workflows, by
/// `path`, may, unless the server was started with `--allow-inline-code`.
pub(super) fn refuse_host_reach(workflow: &WorkflowDef) -> Result<(), ApiError> {
    let reach = workflow.host_reach();
    if reach.is_empty() {
        return Ok(());
    }
    let what: Vec<String> = reach.iter().map(ToString::to_string).collect();
    Err(ApiError::new(
        StatusCode::FORBIDDEN,
        format!(
            "an inline workflow may not reach this machine ({}); start it by `path` from the server's root, or start the server with --allow-inline-code",
            what.join("; ")
        ),
    ))
}

/// A workflow that did not load, as the client is told: the loader's
/// words where they are about what it sent (`sent`, an inline workflow's
/// draft) or no file's text at all; else only which file of the server's
/// does not load. Paths are named as the client names them: relative to
/// the root, whose place on the server's disk is none of its business.
pub(super) fn refusal(failure: &Failure, sent: Option<&Path>, root: &Path) -> ApiError {
    let error = failure.error();
    let culprit = error
        .downcast_ref::<LoadError>()
        .and_then(LoadError::culprit);
    let root_text = root.display().to_string();
    let shown = |text: String| {
        let text = match sent {
            // The draft's path means nothing to the client.
            Some(sent) => text.replace(&sent.display().to_string(), "workflow"),
            None => text,
        };
        text.replace(&format!("{root_text}/"), "")
            .replace(&root_text, "the server's root (--root)")
    };
    match culprit {
        Some(file) if Some(file) != sent => {
            // It was read: its real path names it plainly.
            let file = file.canonicalize().unwrap_or_else(|_| file.to_path_buf());
            ApiError::bad_request(shown(format!(
                "{} does not load as a workflow; it is a file of the server's, so what it holds is not quoted here: `awr validate` on the server says what is wrong",
                file.display()
            )))
        }
        _ => ApiError::bad_request(shown(format!("{error:#}"))),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_draft_leaves_nothing_and_a_kept_one_its_hash_name() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::Files(dir.path().join("storage"));
        let workflows = dir.path().join("storage/workflows");
        let refused = Draft::write(&storage, Value::String("name: a\n".into())).unwrap();
        assert!(refused.path().exists());
        drop(refused);
        assert_eq!(std::fs::read_dir(&workflows).unwrap().count(), 0);
        let kept = Draft::write(&storage, Value::String("name: a\n".into()))
            .unwrap()
            .keep()
            .unwrap();
        assert_eq!(std::fs::read_dir(&workflows).unwrap().count(), 1);
        assert_eq!(kept.extension().unwrap(), "yaml");
        assert_eq!(std::fs::read_to_string(kept).unwrap(), "name: a\n");
    }
}

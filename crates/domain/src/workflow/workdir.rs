//! Working directories a workflow names, and whether one leaves the project.

use std::path::{Component, Path, PathBuf};

/// A `workdir` of a workflow, with who names it (see [`WorkflowDef::workdirs`](crate::WorkflowDef::workdirs)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workdir<'a> {
    /// `agents.NAME` or ``node `ID` ``, for messages.
    pub owner: String,
    /// The field as written: `workdir` or `command.workdir`.
    pub field: &'static str,
    /// The directory as written.
    pub dir: &'a str,
    /// Whether it may leave the project directory.
    pub allow_outside_project: bool,
}

/// Why `workdir` lies outside `project` (the directory awr runs in,
/// absolute), or `None` when it lies inside. Decided on the text alone:
/// `..` steps are resolved, symlinks are not (the caller resolves those
/// of a directory that exists).
pub fn workdir_outside(workdir: &str, project: &Path) -> Option<String> {
    let path = Path::new(workdir);
    if path.has_root() && path.components().all(|c| matches!(c, Component::RootDir)) {
        return Some("`/` is the whole file system".into());
    }
    let relative = !path.has_root();
    let (start, rest) = if path.has_root() {
        (PathBuf::new(), path)
    } else {
        (project.to_path_buf(), path)
    };
    let mut resolved = start;
    for part in rest.components() {
        match part {
            Component::ParentDir => {
                // `/..` is `/`; a relative path must not step above the project.
                let popped = resolved.pop();
                if relative && (!popped || !resolved.starts_with(project)) {
                    return Some(format!(
                        "`{workdir}` leaves the project directory through `..`"
                    ));
                }
            }
            Component::CurDir => {}
            other => resolved.push(other),
        }
    }
    (!resolved.starts_with(project)).then(|| {
        format!(
            "`{workdir}` is outside the project directory {}",
            project.display()
        )
    })
}

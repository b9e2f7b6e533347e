//! [`Stored`]: a workflow loaded again from the definition its run keeps,
//! not from the files on disk, which may have changed or gone since.

use std::path::{Path, PathBuf};

use domain::definition::Definition;

use crate::ports::{SourceError, WorkflowSource};

/// The files of `definition`, each at the path it was read from, over
/// `disk` for everything else a load looks at (mock fixtures, working
/// directories), which lives beside the workflow, not in it.
pub struct Stored<'a> {
    definition: &'a Definition,
    disk: &'a dyn WorkflowSource,
}

impl<'a> Stored<'a> {
    /// `definition` over `disk`.
    pub fn new(definition: &'a Definition, disk: &'a dyn WorkflowSource) -> Self {
        Self { definition, disk }
    }

    fn holds(&self, path: &Path) -> bool {
        path.to_str()
            .is_some_and(|p| self.definition.files.contains_key(p))
    }
}

impl WorkflowSource for Stored<'_> {
    fn read(&self, path: &Path) -> Result<String, SourceError> {
        let text = path.to_str().and_then(|p| self.definition.files.get(p));
        text.cloned().ok_or_else(|| {
            SourceError(format!(
                "{}: not in the definition the run keeps",
                path.display()
            ))
        })
    }

    /// A file of the definition is itself (it was stored by the path the
    /// first load resolved); anything else is asked of the disk.
    fn canonical(&self, path: &Path) -> Option<PathBuf> {
        if self.holds(path) {
            return Some(path.to_path_buf());
        }
        self.disk.canonical(path)
    }

    fn is_file(&self, path: &Path) -> bool {
        self.holds(path) || self.disk.is_file(path)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::load::{LoadRules, load_workflow};
    use crate::ports::MockWorkflowSource;

    #[test]
    fn a_workflow_loads_from_its_definition_whatever_the_disk_holds() {
        let definition = Definition {
            root: "/flows/main.yaml".into(),
            files: BTreeMap::from([
                (
                    "/flows/main.yaml".into(),
                    "name: main\nnodes: [{id: sub, call_workflow: child.yaml}]\n".into(),
                ),
                (
                    "/flows/child.yaml".into(),
                    "name: child\nnodes: [{id: hi, command: echo hi}]\n".into(),
                ),
            ]),
        };
        // The disk holds nothing: the files were deleted.
        let mut disk = MockWorkflowSource::new();
        disk.expect_canonical().returning(|_| None);
        disk.expect_is_file().returning(|_| false);
        disk.expect_read().never();
        let stored = Stored::new(&definition, &disk);
        let main = load_workflow(
            &stored,
            Path::new("/flows/main.yaml"),
            &LoadRules::default(),
        )
        .unwrap();
        assert_eq!(main.name, "main");
        assert_eq!(
            domain::definition::Definition::of(&main, "/flows/main.yaml"),
            definition,
            "loaded back, it is the same definition"
        );
        let missing = stored.read(Path::new("/flows/other.yaml")).unwrap_err();
        assert!(missing.0.contains("other.yaml"), "{missing}");
    }
}

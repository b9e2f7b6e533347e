//! A workflow's definition as its runs keep it: the text of its file and of
//! every file its `call_workflow` nodes call, by the path each was read
//! from. Stored by content hash with the run (`flow:started`'s
//! `definition`), so resume, fork, recovery and a worker on another machine
//! continue from what the run started with, whatever became of the files.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::workflow::{NodeKind, WorkflowDef};

/// The files of one workflow, as loaded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Definition {
    /// The top-level file's path, as the run was started with it.
    pub root: String,
    /// Every file's text, by the path it was read from (a called file's
    /// path is its caller's directory joined with the name it is called by,
    /// as the loader resolves it).
    pub files: BTreeMap<String, String>,
}

impl Definition {
    /// The definition of `workflow`, loaded from `root`: its text and, for
    /// every `call_workflow` the loader resolved, the child's.
    pub fn of(workflow: &WorkflowDef, root: &str) -> Self {
        let mut files = BTreeMap::new();
        collect(workflow, Path::new(root), &mut files);
        Self {
            root: root.to_owned(),
            files,
        }
    }

    /// Its JSON, the bytes its hash is of: keys in order, so one set of
    /// files has one text.
    pub fn to_json(&self) -> String {
        // A struct of a string and a map of strings always serializes.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// A definition read back from [`Definition::to_json`].
    pub fn from_json(json: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(json)
    }

    /// `sha256:<hex>` of [`Definition::to_json`]: the key it is stored by.
    pub fn hash(&self) -> String {
        format!(
            "sha256:{}",
            crate::canonical::sha256_hex(self.to_json().as_bytes())
        )
    }
}

/// Adds `workflow` (read from `path`) and its children to `files`, each once.
fn collect(workflow: &WorkflowDef, path: &Path, files: &mut BTreeMap<String, String>) {
    let key = path.to_string_lossy().into_owned();
    if files.contains_key(&key) {
        return;
    }
    files.insert(key, workflow.text.to_string());
    let dir = path.parent().unwrap_or(Path::new("."));
    for node in &workflow.nodes {
        if let NodeKind::CallWorkflow {
            workflow: name,
            resolved: Some(child),
        } = &node.kind
        {
            collect(child, &dir.join(name), files);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn resolved(parent: &str, child: &str) -> WorkflowDef {
        let mut main = WorkflowDef::from_yaml(parent).unwrap();
        let child = Arc::new(WorkflowDef::from_yaml(child).unwrap());
        for node in &mut main.nodes {
            if let NodeKind::CallWorkflow { resolved, .. } = &mut node.kind {
                *resolved = Some(Arc::clone(&child));
            }
        }
        main
    }

    #[test]
    fn a_definition_holds_every_file_by_its_path_and_hashes_its_content() {
        let main = "name: main\nnodes: [{id: a, call_workflow: sub/child.yaml}, {id: b, call_workflow: sub/child.yaml}]\n";
        let child = "name: child\nnodes: [{id: hi, command: echo hi}]\n";
        let def = Definition::of(&resolved(main, child), "/flows/main.yaml");
        assert_eq!(def.root, "/flows/main.yaml");
        assert_eq!(
            def.files.keys().collect::<Vec<_>>(),
            ["/flows/main.yaml", "/flows/sub/child.yaml"]
        );
        assert_eq!(def.files["/flows/sub/child.yaml"], child);
        let back = Definition::from_json(def.to_json().as_bytes()).unwrap();
        assert_eq!(back, def);
        assert_eq!(back.hash(), def.hash());
        assert!(def.hash().starts_with("sha256:"));
        // Another child's text is another definition.
        let other = Definition::of(
            &resolved(main, "name: child\nnodes: [{id: bye, command: echo bye}]\n"),
            "/flows/main.yaml",
        );
        assert_ne!(other.hash(), def.hash());
    }

    #[test]
    fn a_damaged_definition_is_an_error_not_a_panic() {
        assert!(Definition::from_json(b"{\"root\": 3}").is_err());
        assert!(Definition::from_json(b"not json").is_err());
    }
}

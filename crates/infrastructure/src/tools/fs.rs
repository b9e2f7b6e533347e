//! `read_file`, `write_file`, `list_dir`: file access confined to the run's
//! workspace directory.
//!
//! A path is refused when it is absolute, when it climbs out with `..`, or
//! when it resolves (through symbolic links) to somewhere outside the
//! workspace: a model must not reach the rest of the machine by naming it.

use std::path::{Component, Path, PathBuf};

use application::ports::{Tool, ToolContext, ToolError, ToolSpec};
use async_trait::async_trait;
use serde_json::{Value, json};

/// Largest file `read_file` returns whole; more would flood the model's context.
const MAX_READ_BYTES: u64 = 1024 * 1024;

/// Resolves `relative` inside `workspace`, refusing anything that escapes it.
pub fn confine(workspace: &Path, relative: &str) -> Result<PathBuf, ToolError> {
    let path = Path::new(relative);
    if path.is_absolute() {
        return Err(ToolError::Denied(format!(
            "`{relative}` is absolute; give a path inside the workspace"
        )));
    }
    let mut depth: i64 = 0;
    for component in path.components() {
        match component {
            Component::ParentDir => depth -= 1,
            Component::Normal(_) => depth += 1,
            _ => {}
        }
        if depth < 0 {
            return Err(ToolError::Denied(format!(
                "`{relative}` leaves the workspace"
            )));
        }
    }
    let root = workspace
        .canonicalize()
        .map_err(|e| ToolError::Failed(format!("workspace {}: {e}", workspace.display())))?;
    let joined = root.join(path);
    // The deepest existing ancestor decides where the path really leads.
    let mut existing = joined.as_path();
    while !existing.exists() {
        existing = match existing.parent() {
            Some(parent) => parent,
            None => break,
        };
    }
    let real = existing
        .canonicalize()
        .map_err(|e| ToolError::Failed(format!("{relative}: {e}")))?;
    if !real.starts_with(&root) {
        return Err(ToolError::Denied(format!(
            "`{relative}` leads outside the workspace"
        )));
    }
    Ok(joined)
}

fn path_arg(input: &Value) -> &str {
    input["path"].as_str().unwrap_or(".")
}

/// Reads a text file of the workspace.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadFile;

#[async_trait]
impl Tool for ReadFile {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "read_file".into(),
            description: "Read a UTF-8 text file from the workspace.".into(),
            input_schema: json!({"type": "object", "required": ["path"], "additionalProperties": false,
                "properties": {"path": {"type": "string", "description": "Path relative to the workspace"}}}),
        }
    }

    async fn call(&self, input: Value, context: &ToolContext) -> Result<Value, ToolError> {
        let path = confine(&context.workspace, path_arg(&input))?;
        let meta = tokio::fs::metadata(&path)
            .await
            .map_err(|e| ToolError::Failed(format!("{}: {e}", path_arg(&input))))?;
        if meta.len() > MAX_READ_BYTES {
            return Err(ToolError::Failed(format!(
                "{} is {} bytes; the limit is {MAX_READ_BYTES}",
                path_arg(&input),
                meta.len()
            )));
        }
        let text = tokio::fs::read_to_string(&path)
            .await
            .map_err(|e| ToolError::Failed(format!("{}: {e}", path_arg(&input))))?;
        Ok(Value::String(text))
    }
}

/// Writes (creates or replaces) a text file of the workspace.
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteFile;

#[async_trait]
impl Tool for WriteFile {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "write_file".into(),
            description: "Create or replace a text file in the workspace.".into(),
            input_schema: json!({"type": "object", "required": ["path", "content"], "additionalProperties": false,
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}}}),
        }
    }

    async fn call(&self, input: Value, context: &ToolContext) -> Result<Value, ToolError> {
        let path = confine(&context.workspace, path_arg(&input))?;
        let content = input["content"].as_str().unwrap_or_default();
        if let Some(parent) = path.parent() {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(|e| ToolError::Failed(format!("{}: {e}", path_arg(&input))))?;
        }
        tokio::fs::write(&path, content)
            .await
            .map_err(|e| ToolError::Failed(format!("{}: {e}", path_arg(&input))))?;
        Ok(json!({"written": content.len()}))
    }
}

/// Lists a directory of the workspace.
#[derive(Debug, Clone, Copy, Default)]
pub struct ListDir;

#[async_trait]
impl Tool for ListDir {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "list_dir".into(),
            description: "List the entries of a directory in the workspace.".into(),
            input_schema: json!({"type": "object", "additionalProperties": false,
                "properties": {"path": {"type": "string", "description": "Directory relative to the workspace (default: its root)"}}}),
        }
    }

    async fn call(&self, input: Value, context: &ToolContext) -> Result<Value, ToolError> {
        let path = confine(&context.workspace, path_arg(&input))?;
        let mut entries = tokio::fs::read_dir(&path)
            .await
            .map_err(|e| ToolError::Failed(format!("{}: {e}", path_arg(&input))))?;
        let mut names = Vec::new();
        while let Ok(Some(entry)) = entries.next_entry().await {
            let mut name = entry.file_name().to_string_lossy().into_owned();
            if entry.file_type().await.is_ok_and(|t| t.is_dir()) {
                name.push('/');
            }
            names.push(name);
        }
        names.sort();
        Ok(json!(names))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use application::tools::ToolRouter;
    use std::sync::Arc;

    fn setup() -> (tempfile::TempDir, ToolRouter, ToolContext, Vec<String>) {
        let dir = tempfile::tempdir().unwrap();
        let workspace = dir.path().join("ws");
        std::fs::create_dir_all(workspace.join("notes")).unwrap();
        std::fs::write(workspace.join("notes/a.md"), "# A").unwrap();
        std::fs::write(dir.path().join("secret.txt"), "do not read").unwrap();
        let router = ToolRouter::new()
            .with(Arc::new(ReadFile))
            .with(Arc::new(WriteFile))
            .with(Arc::new(ListDir));
        let granted = router.names();
        (dir, router, ToolContext::new(workspace), granted)
    }

    #[tokio::test]
    async fn files_in_the_workspace_can_be_read_written_and_listed() {
        let (_dir, router, ctx, granted) = setup();
        let read = router
            .call("read_file", json!({"path": "notes/a.md"}), &granted, &ctx)
            .await;
        assert_eq!(read, Ok(json!("# A")));
        let wrote = router
            .call(
                "write_file",
                json!({"path": "out/b.txt", "content": "hi"}),
                &granted,
                &ctx,
            )
            .await;
        assert_eq!(wrote, Ok(json!({"written": 2})));
        assert_eq!(
            std::fs::read_to_string(ctx.workspace.join("out/b.txt")).unwrap(),
            "hi"
        );
        let listed = router.call("list_dir", json!({}), &granted, &ctx).await;
        assert_eq!(listed, Ok(json!(["notes/", "out/"])));
    }

    #[tokio::test]
    async fn every_way_out_of_the_workspace_is_refused() {
        let (dir, router, ctx, granted) = setup();
        std::os::unix::fs::symlink(dir.path(), ctx.workspace.join("up")).unwrap();
        let outside = dir.path().join("secret.txt").display().to_string();
        for path in [
            "../secret.txt",
            "notes/../../secret.txt",
            outside.as_str(),
            "up/secret.txt",
        ] {
            let read = router
                .call("read_file", json!({"path": path}), &granted, &ctx)
                .await;
            assert!(
                matches!(read, Err(ToolError::Denied(_))),
                "{path}: {read:?}"
            );
        }
        let write = router
            .call(
                "write_file",
                json!({"path": "up/new.txt", "content": "x"}),
                &granted,
                &ctx,
            )
            .await;
        assert!(matches!(write, Err(ToolError::Denied(_))), "{write:?}");
        assert!(!dir.path().join("new.txt").exists());
        let list = router
            .call("list_dir", json!({"path": ".."}), &granted, &ctx)
            .await;
        assert!(matches!(list, Err(ToolError::Denied(_))));
    }

    #[tokio::test]
    async fn bad_arguments_and_missing_files_are_errors_for_the_model() {
        let (_dir, router, ctx, granted) = setup();
        let bad = router
            .call("read_file", json!({"file": "a"}), &granted, &ctx)
            .await;
        assert!(
            matches!(bad, Err(ToolError::InvalidInput { .. })),
            "{bad:?}"
        );
        let missing = router
            .call("read_file", json!({"path": "nope.md"}), &granted, &ctx)
            .await;
        assert!(matches!(missing, Err(ToolError::Failed(m)) if m.contains("nope.md")));
    }
}

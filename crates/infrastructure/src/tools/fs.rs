//! `read_file`, `write_file`, `list_dir`: file access confined to the run's
//! workspace directory.
//!
//! A path is refused when it is absolute, when it climbs out with `..`, or
//! when it resolves through a symbolic link (dangling or not) to somewhere
//! outside the workspace: a model must not reach the rest of the machine by
//! naming it. Resolution is openat-style (`cap-std`): every component is
//! opened beneath the workspace directory handle, so a link swapped in
//! while a call runs cannot lead out either — there is no check-then-use gap.

use std::io::{Read, Write};
use std::path::{Component, Path, PathBuf};

use application::ports::{Tool, ToolContext, ToolError, ToolSpec};
use async_trait::async_trait;
use cap_std::ambient_authority;
use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt};
use serde_json::{Value, json};

/// Largest file `read_file` returns whole; more would flood the model's context.
const MAX_READ_BYTES: u64 = 1024 * 1024;

/// Checks `relative` names a place inside a workspace by its text alone:
/// not absolute, and no `..` climbing above its start. Symbolic links are
/// the business of `Workspace`, which resolves beneath the directory.
pub fn confine(relative: &str) -> Result<PathBuf, ToolError> {
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
    Ok(if relative.is_empty() {
        PathBuf::from(".")
    } else {
        path.to_path_buf()
    })
}

/// The workspace directory, opened once per call; every path is resolved
/// beneath this handle.
struct Workspace {
    dir: Dir,
    relative: String,
    path: PathBuf,
}

impl Workspace {
    fn open(context: &ToolContext, relative: &str) -> Result<Self, ToolError> {
        let path = confine(relative)?;
        let dir = Dir::open_ambient_dir(&context.workspace, ambient_authority()).map_err(|e| {
            ToolError::Failed(format!("workspace {}: {e}", context.workspace.display()))
        })?;
        Ok(Self {
            dir,
            relative: relative.to_owned(),
            path,
        })
    }

    /// Opens the path without blocking on a FIFO (`O_NONBLOCK`: a FIFO
    /// without a peer would otherwise wait forever, holding a thread the
    /// runtime waits for on exit) and refuses anything but a regular file,
    /// judged on the opened file, so a swap after a check cannot slip by.
    fn open_regular(&self, options: &mut OpenOptions) -> Result<cap_std::fs::File, ToolError> {
        let not_regular = || ToolError::Failed(format!("{} is not a regular file", self.relative));
        // A FIFO without a peer fails the open with ENXIO: told by its type.
        if self.dir.metadata(&self.path).is_ok_and(|m| !m.is_file()) {
            return Err(not_regular());
        }
        let nonblock = i32::try_from(rustix::fs::OFlags::NONBLOCK.bits()).unwrap_or(0);
        let file = self
            .dir
            .open_with(&self.path, options.custom_flags(nonblock))
            .map_err(|e| self.error(e))?;
        if !file.metadata().map_err(|e| self.error(e))?.is_file() {
            return Err(not_regular());
        }
        Ok(file)
    }

    /// An IO error as the model sees it: an escape is a refusal.
    fn error(&self, e: std::io::Error) -> ToolError {
        if is_escape(&e) {
            ToolError::Denied(format!(
                "`{}` leads outside the workspace (through a symbolic link)",
                self.relative
            ))
        } else {
            ToolError::Failed(format!("{}: {e}", self.relative))
        }
    }
}

/// `cap-std` reports a path that resolved outside the directory as
/// `PermissionDenied` without an OS error code; a real `EACCES` carries one.
fn is_escape(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::PermissionDenied && e.raw_os_error().is_none()
}

/// Runs blocking file work off the async threads.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ToolError> + Send + 'static,
) -> Result<T, ToolError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ToolError::Failed(format!("file task ended: {e}")))?
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
        let ws = Workspace::open(context, path_arg(&input))?;
        blocking(move || {
            // Checked before opening: opening a FIFO would wait for a writer.
            let meta = ws.dir.metadata(&ws.path).map_err(|e| ws.error(e))?;
            if !meta.is_file() {
                return Err(ToolError::Failed(format!(
                    "{} is not a regular file",
                    ws.relative
                )));
            }
            if meta.len() > MAX_READ_BYTES {
                return Err(ToolError::Failed(format!(
                    "{} is {} bytes; the limit is {MAX_READ_BYTES}",
                    ws.relative,
                    meta.len()
                )));
            }
            let file = ws.open_regular(OpenOptions::new().read(true))?;
            let mut bytes = Vec::new();
            file.take(MAX_READ_BYTES)
                .read_to_end(&mut bytes)
                .map_err(|e| ws.error(e))?;
            String::from_utf8(bytes)
                .map(Value::String)
                .map_err(|e| ToolError::Failed(format!("{}: not UTF-8 text: {e}", ws.relative)))
        })
        .await
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
        let ws = Workspace::open(context, path_arg(&input))?;
        let content = input["content"].as_str().unwrap_or_default().to_owned();
        blocking(move || {
            if let Some(parent) = ws.path.parent()
                && !parent.as_os_str().is_empty()
            {
                // `create_dir_all` reports a link out as "exists"; asking
                // where the parent leads tells an escape apart.
                ws.dir
                    .create_dir_all(parent)
                    .map_err(|e| match ws.dir.metadata(parent) {
                        Err(escape) if is_escape(&escape) => ws.error(escape),
                        _ => ws.error(e),
                    })?;
            }
            let mut file = ws.open_regular(OpenOptions::new().write(true).create(true))?;
            file.set_len(0)
                .and_then(|()| file.write_all(content.as_bytes()))
                .map_err(|e| ws.error(e))?;
            Ok(json!({"written": content.len()}))
        })
        .await
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
        let ws = Workspace::open(context, path_arg(&input))?;
        blocking(move || {
            let entries = ws.dir.read_dir(&ws.path).map_err(|e| ws.error(e))?;
            let mut names = Vec::new();
            for entry in entries.flatten() {
                let mut name = entry.file_name().to_string_lossy().into_owned();
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    name.push('/');
                }
                names.push(name);
            }
            names.sort();
            Ok(json!(names))
        })
        .await
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use application::tools::ToolRouter;
    use domain::workflow::ToolGrant;
    use std::sync::Arc;

    fn setup() -> (tempfile::TempDir, ToolRouter, ToolContext, Vec<ToolGrant>) {
        let dir = tempfile::tempdir().unwrap();
        let workspace = dir.path().join("ws");
        std::fs::create_dir_all(workspace.join("notes")).unwrap();
        std::fs::write(workspace.join("notes/a.md"), "# A").unwrap();
        std::fs::write(dir.path().join("secret.txt"), "do not read").unwrap();
        let router = ToolRouter::new()
            .with(Arc::new(ReadFile))
            .with(Arc::new(WriteFile))
            .with(Arc::new(ListDir));
        let granted = router.names().into_iter().map(ToolGrant::new).collect();
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

    fn denied(result: &Result<Value, ToolError>) -> bool {
        matches!(result, Err(ToolError::Denied(_)))
    }

    #[tokio::test]
    async fn a_dangling_symlink_out_of_the_workspace_is_not_followed() {
        let (dir, router, ctx, granted) = setup();
        let target = dir.path().join("planted.txt");
        std::os::unix::fs::symlink(&target, ctx.workspace.join("abs")).unwrap();
        std::os::unix::fs::symlink("../planted.txt", ctx.workspace.join("rel")).unwrap();
        for path in ["abs", "rel", "notes/../abs"] {
            let write = router
                .call(
                    "write_file",
                    json!({"path": path, "content": "x"}),
                    &granted,
                    &ctx,
                )
                .await;
            assert!(denied(&write), "{path}: {write:?}");
            assert!(!target.exists(), "{path}: a file was planted outside");
            let read = router
                .call("read_file", json!({"path": path}), &granted, &ctx)
                .await;
            assert!(denied(&read), "{path}: {read:?}");
        }
    }

    #[tokio::test]
    async fn a_symlinked_directory_is_followed_inside_and_refused_outside() {
        let (dir, router, ctx, granted) = setup();
        std::os::unix::fs::symlink("notes", ctx.workspace.join("docs")).unwrap();
        let outside = dir.path().join("elsewhere");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("b.md"), "# B").unwrap();
        std::os::unix::fs::symlink(&outside, ctx.workspace.join("away")).unwrap();

        let read = router
            .call("read_file", json!({"path": "docs/a.md"}), &granted, &ctx)
            .await;
        assert_eq!(read, Ok(json!("# A")));
        let listed = router
            .call("list_dir", json!({"path": "docs"}), &granted, &ctx)
            .await;
        assert_eq!(listed, Ok(json!(["a.md"])));
        let wrote = router
            .call(
                "write_file",
                json!({"path": "docs/sub/c.md", "content": "c"}),
                &granted,
                &ctx,
            )
            .await;
        assert_eq!(wrote, Ok(json!({"written": 1})));
        assert!(ctx.workspace.join("notes/sub/c.md").exists());

        for (tool, input) in [
            ("read_file", json!({"path": "away/b.md"})),
            ("list_dir", json!({"path": "away"})),
            (
                "write_file",
                json!({"path": "away/new/c.md", "content": "c"}),
            ),
        ] {
            let out = router.call(tool, input.clone(), &granted, &ctx).await;
            assert!(denied(&out), "{tool} {input}: {out:?}");
        }
        assert!(!outside.join("new").exists());
    }

    #[tokio::test]
    async fn nested_parent_steps_are_fine_while_they_stay_inside() {
        let (_dir, router, ctx, granted) = setup();
        let read = router
            .call(
                "read_file",
                json!({"path": "notes/../notes/./a.md"}),
                &granted,
                &ctx,
            )
            .await;
        assert_eq!(read, Ok(json!("# A")));
        for path in [
            "notes/../../secret.txt",
            "notes/../notes/../../ws/notes/a.md",
        ] {
            let read = router
                .call("read_file", json!({"path": path}), &granted, &ctx)
                .await;
            assert!(denied(&read), "{path}: {read:?}");
        }
    }

    #[tokio::test]
    async fn a_fifo_is_refused_rather_than_waited_on() {
        let (_dir, router, ctx, granted) = setup();
        let fifo = ctx.workspace.join("pipe");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let read = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            router.call("read_file", json!({"path": "pipe"}), &granted, &ctx),
        )
        .await
        .expect("read_file returns");
        assert!(
            matches!(&read, Err(ToolError::Failed(m)) if m.contains("not a regular file")),
            "{read:?}"
        );
    }

    #[tokio::test]
    async fn writing_to_a_fifo_is_refused_rather_than_waited_on() {
        let (_dir, router, ctx, granted) = setup();
        let fifo = ctx.workspace.join("pipe");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let write = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            router.call(
                "write_file",
                json!({"path": "pipe", "content": "x"}),
                &granted,
                &ctx,
            ),
        )
        .await
        .expect("write_file returns");
        assert!(
            matches!(&write, Err(ToolError::Failed(m)) if m.contains("not a regular file")),
            "{write:?}"
        );
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

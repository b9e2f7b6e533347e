//! [`ShellCommandRunner`]: the [`CommandRunner`] of `command` nodes.
//!
//! A command is a script run exactly as a `shell` tool call is ([`super::script`]):
//! `sh -c` in a process group of its own, stdin closed, every key variable
//! of awr's environment withheld, the whole group killed when the script
//! exits, when its timeout passes, or when the executor drops the future
//! (cancel). What differs is where it runs and what is kept: the node's
//! `workdir`, judged against the project directory by the rules of an
//! agent's `workdir`, and up to [`DEFAULT_MAX_OUTPUT_BYTES`] of stdout and of
//! stderr each, since a later node may read the whole output.

use std::path::PathBuf;

use application::ports::{CommandError, CommandOutcome, CommandRequest, CommandRunner};
use application::secrets::KeyNames;
use async_trait::async_trait;

use super::group::Sandbox;
use super::script::{Script, run_script};
use super::sweep::run_tags;

/// Bytes kept of stdout and of stderr each (their first bytes): enough for a
/// test report or a JSON document a later node reads, small enough for the
/// log (values this large are stored as blobs beside it).
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 1024 * 1024;

/// Runs `command` nodes with `sh -c` in the project directory.
#[derive(Debug, Clone)]
pub struct ShellCommandRunner {
    project: PathBuf,
    keys: KeyNames,
    max_output_bytes: usize,
}

impl ShellCommandRunner {
    /// Commands run in `project` (the directory awr runs in) or a `workdir`
    /// inside it, withholding the fixed key variables.
    pub fn new(project: impl Into<PathBuf>) -> Self {
        Self {
            project: project.into(),
            keys: KeyNames::default(),
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
        }
    }

    /// Withholds `keys` (the workflow's configured key names besides the
    /// fixed rules) too.
    #[must_use]
    pub fn withholding(mut self, keys: KeyNames) -> Self {
        self.keys = keys;
        self
    }

    /// Keeps `bytes` of stdout and of stderr each.
    #[must_use]
    pub fn with_max_output_bytes(mut self, bytes: usize) -> Self {
        self.max_output_bytes = bytes;
        self
    }

    /// The directory `request` runs in: its `workdir` taken inside the
    /// project directory, which it must not leave (unless allowed) by its
    /// text (`/`, `..`) nor by a symlink; it must exist.
    fn workdir(&self, request: &CommandRequest) -> Result<PathBuf, CommandError> {
        let project = self.project.canonicalize().map_err(|e| {
            CommandError::Workdir(format!(
                "the project directory {}: {e}",
                self.project.display()
            ))
        })?;
        let Some(dir) = request.workdir.as_deref() else {
            return Ok(project);
        };
        let allow = request.allow_outside_project;
        let refuse = |why: String| {
            CommandError::Workdir(format!(
                "{why}; set `allow_outside_project: true` to allow it"
            ))
        };
        if !allow && let Some(why) = domain::workflow::workdir_outside(dir, &project) {
            return Err(refuse(why));
        }
        let real = project
            .join(dir)
            .canonicalize()
            .map_err(|e| CommandError::Workdir(format!("`{dir}`: {e}")))?;
        if !real.is_dir() {
            return Err(CommandError::Workdir(format!("`{dir}` is not a directory")));
        }
        if !allow && !real.starts_with(&project) {
            return Err(refuse(format!(
                "`{dir}` leads to {}, outside the project directory {}",
                real.display(),
                project.display()
            )));
        }
        Ok(real)
    }
}

#[async_trait]
impl CommandRunner for ShellCommandRunner {
    async fn run(&self, request: CommandRequest) -> Result<CommandOutcome, CommandError> {
        let dir = self.workdir(&request)?;
        let sandbox = Sandbox {
            keys: self.keys.clone(),
            keep: Vec::new(),
            hidden: Vec::new(),
            env: {
                let mut env = request.env.clone();
                env.extend(run_tags(&request.run_id.to_string()));
                env
            },
        };
        let outcome = run_script(Script {
            text: &request.script,
            dir: &dir,
            sandbox: &sandbox,
            timeout: request.timeout,
            max_output_bytes: self.max_output_bytes,
        })
        .await
        .map_err(|e| CommandError::Spawn(format!("`sh` in {}: {e}", dir.display())))?;
        tracing::debug!(
            run = %request.run_id, node = %request.node_id, node_run = %request.node_run_id,
            exit_code = ?outcome.exit_code, timed_out = outcome.timed_out,
            pgid = ?outcome.group.map(|g| g.pgid), "command ended"
        );
        Ok(CommandOutcome {
            exit_code: outcome.exit_code,
            stdout: outcome.stdout,
            stderr: outcome.stderr,
            truncated: outcome.truncated,
            timed_out: outcome.timed_out,
            duration_ms: u64::try_from(outcome.duration.as_millis()).unwrap_or(u64::MAX),
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::process::testing::{ends, pid_in};
    use std::collections::BTreeMap;
    use std::time::Duration;

    const LIMIT: Duration = Duration::from_secs(10);

    fn request(script: &str) -> CommandRequest {
        CommandRequest {
            run_id: "7f8c2b1e-3d4a-4b5c-9d6e-1f2a3b4c5d6e".parse().unwrap(),
            node_id: domain::NodeId::new("build").unwrap(),
            node_run_id: "0b1c2d3e-4f50-4617-8293-a4b5c6d7e8f9".parse().unwrap(),
            script: script.into(),
            workdir: None,
            allow_outside_project: false,
            env: BTreeMap::new(),
            timeout: None,
        }
    }

    fn project() -> (tempfile::TempDir, ShellCommandRunner) {
        let dir = tempfile::tempdir().unwrap();
        let runner = ShellCommandRunner::new(dir.path());
        (dir, runner)
    }

    #[tokio::test]
    async fn exit_code_and_output_are_captured_in_the_project_directory() {
        let (dir, runner) = project();
        let mut req = request("pwd; echo \"$GREETING\" >&2");
        req.env.insert("GREETING".into(), "hé".into());
        let out = runner.run(req).await.unwrap();
        let real = dir.path().canonicalize().unwrap();
        assert_eq!(out.stdout, format!("{}\n", real.display()));
        assert_eq!(
            (
                out.exit_code,
                out.stderr.as_str(),
                out.truncated,
                out.timed_out
            ),
            (Some(0), "hé\n", false, false)
        );
    }

    #[tokio::test]
    async fn a_non_zero_exit_is_an_outcome() {
        let (_dir, runner) = project();
        let out = runner.run(request("echo half; exit 7")).await.unwrap();
        assert_eq!((out.exit_code, out.stdout.as_str()), (Some(7), "half\n"));
    }

    #[tokio::test]
    async fn a_timeout_kills_the_group_and_keeps_the_output_so_far() {
        let (dir, runner) = project();
        let mut req = request("echo started; sleep 60 & echo $! > bg.pid; wait");
        req.timeout = Some(Duration::from_millis(300));
        let out = runner.run(req).await.unwrap();
        assert!(out.timed_out);
        assert_eq!((out.exit_code, out.stdout.as_str()), (None, "started\n"));
        ends(&dir.path().join("bg.pid")).await.unwrap();
    }

    #[tokio::test]
    async fn dropping_the_future_kills_the_whole_group_at_once() {
        let (dir, runner) = project();
        let run = runner.run(request(
            "echo $$ > sh.pid; sleep 60 & echo $! > bg.pid; wait",
        ));
        let (sh, bg) = (dir.path().join("sh.pid"), dir.path().join("bg.pid"));
        // Run the command until the background child's pid is written, then drop it.
        tokio::select! {
            out = run => panic!("the command ended: {out:?}"),
            pid = pid_in(&bg, LIMIT) => assert!(pid.is_some()),
        };
        ends(&sh).await.unwrap();
        ends(&bg).await.unwrap();
    }

    /// A command with no timeout that leaves a process in a session of its
    /// own, holding its output open: the command ends when its shell does,
    /// and that process with it (it held the pipes, so the command waited
    /// for it for good).
    #[tokio::test]
    async fn a_process_moved_to_its_own_session_ends_with_the_command() {
        let (dir, runner) = project();
        let script = "setsid sh -c 'echo $$ > away.pid; exec sleep 300' &\n\
                      while [ ! -s away.pid ]; do sleep 0.01; done\n\
                      echo done";
        let out = tokio::time::timeout(LIMIT, runner.run(request(script)))
            .await
            .expect("the command waited for the process that left its group")
            .unwrap();
        assert_eq!((out.exit_code, out.stdout.as_str()), (Some(0), "done\n"));
        ends(&dir.path().join("away.pid")).await.unwrap();
    }

    #[tokio::test]
    async fn output_past_the_cap_is_drained_and_marked_truncated() {
        let (_dir, runner) = project();
        let runner = runner.with_max_output_bytes(1024);
        let out = runner
            .run(request("yes | head -c 1000000; echo done >&2"))
            .await
            .unwrap();
        assert_eq!(out.exit_code, Some(0));
        assert!(out.truncated);
        assert!(out.stdout.len() == 1024 && out.stdout.starts_with("y\ny\n"));
        assert_eq!(out.stderr, "done\n");
    }

    #[tokio::test]
    async fn a_workdir_runs_inside_the_project_and_may_not_leave_it() {
        let (dir, runner) = project();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::os::unix::fs::symlink("/", dir.path().join("root")).unwrap();
        let mut req = request("pwd");
        req.workdir = Some("sub".into());
        let out = runner.run(req.clone()).await.unwrap();
        assert!(out.stdout.trim_end().ends_with("/sub"), "{}", out.stdout);
        for (workdir, says) in [
            ("/", "`/` is the whole file system"),
            ("..", "leaves the project directory"),
            ("/etc", "outside the project directory"),
            ("root", "leads to /, outside the project directory"),
            ("missing", "`missing`: "),
        ] {
            req.workdir = Some(workdir.into());
            req.script = "touch ran".into();
            let err = runner.run(req.clone()).await.unwrap_err();
            assert!(
                matches!(&err, CommandError::Workdir(m) if m.contains(says)),
                "{workdir}: {err}"
            );
        }
        req.workdir = Some("root".into());
        req.allow_outside_project = true;
        req.script = "pwd".into();
        assert_eq!(runner.run(req).await.unwrap().stdout, "/\n");
        assert!(!dir.path().join("ran").exists());
    }

    #[tokio::test]
    async fn key_variables_do_not_reach_the_command() {
        let (_dir, runner) = project();
        // `HOME` stands in for a configured key name: every test process has it.
        let runner = runner.withholding(KeyNames::new(["HOME".to_owned()]));
        let out = runner
            .run(request("echo \"${HOME:-withheld}\""))
            .await
            .unwrap();
        assert_eq!(out.stdout, "withheld\n");
    }
}

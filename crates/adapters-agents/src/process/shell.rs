//! `shell`: runs a command with `sh -c` in the run's workspace directory.
//!
//! Never granted by default: a shell reaches the whole machine, so an agent
//! gets it only when its `tools:` lists it. It inherits awr's environment
//! less every key variable ([`application::secrets`]): the agent's own key
//! is awr's to use, so a shell needs none. It carries `AWR_RUN_ID` (the
//! call's run), as every process of a run does.
//! The command runs in a process group of its own with stdin closed, and the
//! whole group is killed when it exits, times out, or the call is dropped, so
//! nothing it started in the background outlives the call. Output is capped
//! but the pipes are drained to the end, so a chatty command never blocks on
//! a full pipe. A non-zero exit is a result, not a tool error: the model
//! needs the exit code and stderr to decide what to do next.

use std::time::Duration;

use application::ports::{Tool, ToolContext, ToolError, ToolSpec};
use application::secrets::KeyNames;
use async_trait::async_trait;
use serde_json::{Value, json};

use super::group::Sandbox;
use super::script::{Script, run_script};
use super::sweep::run_tags;

/// Default time a command may run: long enough for a build step, short
/// enough that a hung command does not stall the run for long.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Default bytes kept of stdout and of stderr each; more would flood the
/// model's context.
const DEFAULT_MAX_OUTPUT_BYTES: usize = 64 * 1024;

/// Longest `timeout_secs` the schema accepts; the configured timeout still
/// caps it.
const MAX_TIMEOUT_SECS: u64 = 600;

/// Runs a shell command in the workspace.
#[derive(Debug, Clone)]
pub struct Shell {
    timeout: Duration,
    max_output_bytes: usize,
    keys: KeyNames,
}

impl Shell {
    /// A 60 s timeout and 64 KiB kept of stdout and of stderr each.
    pub fn new() -> Self {
        Self::with_limits(DEFAULT_TIMEOUT, DEFAULT_MAX_OUTPUT_BYTES)
    }

    /// `timeout` is the longest a command may run (a call's `timeout_secs`
    /// can only shorten it); `max_output_bytes` is kept of stdout and of
    /// stderr each.
    pub fn with_limits(timeout: Duration, max_output_bytes: usize) -> Self {
        Self {
            timeout,
            max_output_bytes,
            keys: KeyNames::default(),
        }
    }

    /// Withholds `keys` (the workflow's configured key names besides the
    /// fixed rules) from every command.
    pub fn withholding(mut self, keys: KeyNames) -> Self {
        self.keys = keys;
        self
    }
}

impl Default for Shell {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl Tool for Shell {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "shell".into(),
            description: "Run a command with `sh -c` in the workspace directory. Returns its \
                          exit code, stdout and stderr (each truncated past a size limit)."
                .into(),
            input_schema: json!({"type": "object", "required": ["command"], "additionalProperties": false,
                "properties": {
                    "command": {"type": "string", "description": "Shell command line"},
                    "timeout_secs": {"type": "integer", "minimum": 1, "maximum": MAX_TIMEOUT_SECS,
                        "description": "Kill the command after this many seconds (capped by the tool's own limit)"}}}),
        }
    }

    async fn call(&self, input: Value, context: &ToolContext) -> Result<Value, ToolError> {
        let command = input["command"].as_str().unwrap_or_default();
        let timeout = input["timeout_secs"]
            .as_u64()
            .map_or(self.timeout, |s| self.timeout.min(Duration::from_secs(s)));
        let sandbox = Sandbox {
            keys: self.keys.clone(),
            keep: Vec::new(),
            hidden: context.hidden_env.clone(),
            // Tagged as every process of a run is, for a resume to find.
            env: context
                .run_id
                .map(|run| run_tags(&run.to_string()))
                .into_iter()
                .flatten()
                .collect(),
        };
        let outcome = run_script(Script {
            text: command,
            dir: &context.workspace,
            sandbox: &sandbox,
            timeout: Some(timeout),
            max_output_bytes: self.max_output_bytes,
        })
        .await
        .map_err(|e| ToolError::Failed(format!("cannot run `sh`: {e}")))?;
        if outcome.timed_out {
            return Err(ToolError::Failed(format!(
                "timed out after {}s",
                timeout.as_secs_f64()
            )));
        }
        Ok(json!({
            "exit_code": outcome.exit_code,
            "stdout": outcome.stdout,
            "stderr": outcome.stderr,
            "truncated": outcome.truncated,
        }))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use application::tools::ToolRouter;
    use std::sync::Arc;
    use std::time::Instant;

    use crate::process::testing::ends;

    /// `shell`, granted, in a workspace of its own.
    struct Granted {
        dir: tempfile::TempDir,
        router: ToolRouter,
        ctx: ToolContext,
    }

    impl Granted {
        fn new(shell: Shell) -> Self {
            let dir = tempfile::tempdir().unwrap();
            let ctx = ToolContext::new(dir.path());
            let router = ToolRouter::new().with(Arc::new(shell));
            Self { dir, router, ctx }
        }

        /// Calls `shell` through the router, as an agent would.
        async fn call(&self, input: Value) -> Result<Value, ToolError> {
            let granted = [domain::workflow::ToolGrant::new("shell")];
            self.router.call("shell", input, &granted, &self.ctx).await
        }
    }

    async fn run(shell: Shell, command: &str) -> (tempfile::TempDir, Result<Value, ToolError>) {
        let granted = Granted::new(shell);
        let out = granted.call(json!({"command": command})).await;
        (granted.dir, out)
    }

    #[tokio::test]
    async fn hidden_variables_do_not_reach_the_command() {
        let mut shell = Granted::new(Shell::new());
        shell.ctx = shell.ctx.hiding(["HOME".to_owned()]);
        let out = shell
            .call(json!({"command": "echo \"${HOME:-hidden}\""}))
            .await
            .unwrap();
        assert_eq!(out["stdout"], "hidden\n");
    }

    #[tokio::test]
    async fn the_command_carries_the_run_id_of_the_call() {
        let run: domain::RunId = "7f8c2b1e-3d4a-4b5c-9d6e-1f2a3b4c5d6e".parse().unwrap();
        let mut shell = Granted::new(Shell::new());
        let command = json!({"command": "echo \"${AWR_RUN_ID:-none}\""});
        let out = shell.call(command.clone()).await.unwrap();
        assert_eq!(out["stdout"], "none\n", "a call of no run");
        shell.ctx = shell.ctx.for_run(run);
        let out = shell.call(command).await.unwrap();
        assert_eq!(out["stdout"], format!("{run}\n"));
    }

    #[tokio::test]
    async fn configured_key_names_do_not_reach_the_command() {
        let shell = Shell::new().withholding(KeyNames::new(["HOME".to_owned()]));
        let (_dir, out) = run(shell, "echo \"${HOME:-withheld}\"").await;
        assert_eq!(out.unwrap()["stdout"], "withheld\n");
    }

    #[tokio::test]
    async fn the_command_runs_in_the_workspace() {
        let (dir, out) = run(Shell::new(), "pwd; echo made > made.txt").await;
        let out = out.unwrap();
        let pwd = std::path::PathBuf::from(out["stdout"].as_str().unwrap().trim_end());
        assert_eq!(
            pwd.canonicalize().unwrap(),
            dir.path().canonicalize().unwrap()
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("made.txt")).unwrap(),
            "made\n"
        );
    }

    #[tokio::test]
    async fn a_command_ends_in_its_exit_code_and_output_failed_or_not() {
        for (command, exit_code, stdout, stderr) in [
            ("echo hi", 0, "hi\n", ""),
            ("echo oops >&2; exit 3", 3, "", "oops\n"),
        ] {
            let (_dir, out) = run(Shell::new(), command).await;
            let expected = json!({"exit_code": exit_code, "stdout": stdout,
                "stderr": stderr, "truncated": false});
            assert_eq!(out, Ok(expected));
        }
        let (_dir, out) = run(Shell::new(), "kill -9 $$").await;
        assert_eq!(out.unwrap()["exit_code"], Value::Null);
    }

    #[tokio::test]
    async fn a_timeout_kills_the_whole_group() {
        let shell = Shell::with_limits(Duration::from_millis(200), 1024);
        let started = Instant::now();
        let (dir, out) = run(shell, "sleep 60 & echo $! > bg.pid; sleep 5").await;
        assert_eq!(out, Err(ToolError::Failed("timed out after 0.2s".into())));
        assert!(started.elapsed() < Duration::from_secs(3));
        ends(&dir.path().join("bg.pid")).await.unwrap();
    }

    #[tokio::test]
    async fn timeout_secs_shortens_the_limit_and_background_children_die_on_exit() {
        let shell = Granted::new(Shell::new());
        let out = shell
            .call(json!({"command": "sleep 5", "timeout_secs": 1}))
            .await;
        assert_eq!(out, Err(ToolError::Failed("timed out after 1s".into())));
        // The background child holds the output pipes: only killing the
        // group when `sh` exits lets the call return at once.
        let started = Instant::now();
        let out = shell
            .call(json!({"command": "sleep 60 & echo $! > bg.pid"}))
            .await;
        assert_eq!(out.unwrap()["exit_code"], 0);
        assert!(started.elapsed() < Duration::from_secs(5));
        ends(&shell.dir.path().join("bg.pid")).await.unwrap();
    }

    #[tokio::test]
    async fn output_past_the_cap_is_drained_and_marked_truncated() {
        let shell = Shell::with_limits(Duration::from_secs(30), 1024);
        let (_dir, out) = run(shell, "yes | head -c 1000000; echo done >&2").await;
        let out = out.unwrap();
        assert_eq!(out["exit_code"], 0);
        assert_eq!(out["truncated"], true);
        let stdout = out["stdout"].as_str().unwrap();
        assert!(stdout.len() <= 1024 && stdout.starts_with("y\ny\n"));
        assert_eq!(out["stderr"], "done\n");
    }

    #[tokio::test]
    async fn invalid_input_never_reaches_the_tool() {
        let shell = Granted::new(Shell::new());
        for input in [
            json!({"command": 3}),
            json!({}),
            json!({"command": "touch ran", "timeout_secs": 0}),
            json!({"command": "touch ran", "timeout_secs": 601}),
            json!({"command": "touch ran", "cwd": "/"}),
        ] {
            let out = shell.call(input.clone()).await;
            assert!(
                matches!(out, Err(ToolError::InvalidInput { .. })),
                "{input}: {out:?}"
            );
        }
        assert!(!shell.dir.path().join("ran").exists());
    }
}

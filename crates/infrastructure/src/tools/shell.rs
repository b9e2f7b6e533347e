//! `shell`: runs a command with `sh -c` in the run's workspace directory.
//!
//! Never granted by default: a shell reaches the whole machine, so an agent
//! gets it only when its `tools:` lists it. It inherits awr's environment
//! less every key variable ([`application::secrets`]): the agent's own key
//! is awr's to use, so a shell needs none.
//! The command runs in a process group of its own with stdin closed, and the
//! whole group is killed when it exits, times out, or the call is dropped, so
//! nothing it started in the background outlives the call. Output is capped
//! but the pipes are drained to the end, so a chatty command never blocks on
//! a full pipe. A non-zero exit is a result, not a tool error: the model
//! needs the exit code and stderr to decide what to do next.

use std::process::Stdio;
use std::time::Duration;

use application::ports::{Tool, ToolContext, ToolError, ToolSpec};
use application::secrets::KeyNames;
use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt};

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
        let mut sh = tokio::process::Command::new("sh");
        for name in self.hidden_env(context) {
            sh.env_remove(name);
        }
        let mut child = sh
            .arg("-c")
            .arg(command)
            .current_dir(&context.workspace)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| ToolError::Failed(format!("cannot start `sh`: {e}")))?;
        let mut group = GroupGuard(
            child
                .id()
                .and_then(|id| i32::try_from(id).ok())
                .and_then(rustix::process::Pid::from_raw),
        );
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            return Err(ToolError::Failed(
                "the output pipes were not created".into(),
            ));
        };
        let cap = self.max_output_bytes;
        let run = async {
            let status = child.wait().await;
            // Background children would keep the pipes open; they go too.
            group.kill();
            status
        };
        let all = async { tokio::join!(run, read_capped(stdout, cap), read_capped(stderr, cap)) };
        let outcome = tokio::time::timeout(timeout, all).await;
        group.kill();
        let Ok((status, (out, out_cut), (err, err_cut))) = outcome else {
            return Err(ToolError::Failed(format!(
                "timed out after {}s",
                timeout.as_secs_f64()
            )));
        };
        let status = status.map_err(|e| ToolError::Failed(format!("waiting for `sh`: {e}")))?;
        Ok(json!({
            "exit_code": status.code(),
            "stdout": lossy_text(out, out_cut),
            "stderr": lossy_text(err, err_cut),
            "truncated": out_cut || err_cut,
        }))
    }
}

/// Kills a process group when dropped (a cancelled call) or asked to; the
/// group may already be gone, which is fine.
struct GroupGuard(Option<rustix::process::Pid>);

impl GroupGuard {
    fn kill(&mut self) {
        if let Some(pid) = self.0.take() {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Reads `stream` to its end, keeping the first `cap` bytes; says whether
/// anything was dropped. Reading on past the cap keeps the writer unblocked.
async fn read_capped(mut stream: impl AsyncRead + Unpin, cap: usize) -> (Vec<u8>, bool) {
    let mut kept = Vec::new();
    let mut truncated = false;
    let mut buf = [0u8; 8192];
    while let Ok(n) = stream.read(&mut buf).await {
        if n == 0 {
            break;
        }
        let room = cap.saturating_sub(kept.len());
        truncated |= n > room;
        kept.extend_from_slice(&buf[..n.min(room)]);
    }
    (kept, truncated)
}

/// Output bytes as text for the model: invalid UTF-8 replaced, and a
/// character cut in half by truncation dropped rather than replaced.
pub(super) fn lossy_text(mut bytes: Vec<u8>, truncated: bool) -> String {
    // `error_len() == None`: the bytes end inside a character.
    if truncated
        && let Err(e) = std::str::from_utf8(&bytes)
        && e.error_len().is_none()
    {
        bytes.truncate(e.valid_up_to());
    }
    match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    }
}

impl Shell {
    /// The variables the command must not see: those the context hides, and
    /// every key variable of awr's environment.
    fn hidden_env(&self, context: &ToolContext) -> Vec<std::ffi::OsString> {
        let mut names = self
            .keys
            .withheld(std::env::vars_os().map(|(name, _)| name), &[]);
        names.extend(context.hidden_env.iter().map(std::ffi::OsString::from));
        names
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use application::tools::ToolRouter;
    use std::sync::Arc;
    use std::time::Instant;

    fn setup(shell: Shell) -> (tempfile::TempDir, ToolRouter, ToolContext, Vec<String>) {
        let dir = tempfile::tempdir().unwrap();
        let router = ToolRouter::new().with(Arc::new(shell));
        let context = ToolContext::new(dir.path());
        (dir, router, context, vec!["shell".to_owned()])
    }

    async fn run(shell: Shell, command: &str) -> (tempfile::TempDir, Result<Value, ToolError>) {
        let (dir, router, ctx, granted) = setup(shell);
        let out = router
            .call("shell", json!({"command": command}), &granted, &ctx)
            .await;
        (dir, out)
    }

    #[tokio::test]
    async fn hidden_variables_do_not_reach_the_command() {
        let (dir, router, ctx, granted) = setup(Shell::new());
        let ctx = ctx.hiding(["HOME".to_owned()]);
        let out = router
            .call(
                "shell",
                json!({"command": "echo \"${HOME:-hidden}\""}),
                &granted,
                &ctx,
            )
            .await
            .unwrap();
        assert_eq!(out["stdout"], "hidden\n");
        drop(dir);
    }

    #[tokio::test]
    async fn configured_key_names_do_not_reach_the_command() {
        let shell = Shell::new().withholding(KeyNames::new(["HOME".to_owned()]));
        let (_dir, out) = run(shell, "echo \"${HOME:-withheld}\"").await;
        assert_eq!(out.unwrap()["stdout"], "withheld\n");
    }

    /// True once `pid` no longer runs: absent, or a zombie nobody reaped
    /// (the test's container may have no init that reaps orphans).
    fn gone(pid: i32) -> bool {
        let Some(pid) = rustix::process::Pid::from_raw(pid) else {
            return true;
        };
        if rustix::process::test_kill_process(pid).is_err() {
            return true;
        }
        std::fs::read_to_string(format!("/proc/{}/stat", pid.as_raw_nonzero())).is_ok_and(|stat| {
            stat.rsplit(')')
                .next()
                .unwrap_or("")
                .trim()
                .starts_with('Z')
        })
    }

    #[tokio::test]
    async fn echo_prints_and_exits_zero() {
        let (_dir, out) = run(Shell::new(), "echo hi").await;
        assert_eq!(
            out,
            Ok(json!({"exit_code": 0, "stdout": "hi\n", "stderr": "", "truncated": false}))
        );
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
    async fn a_failing_command_is_a_result_with_its_exit_code() {
        let (_dir, out) = run(Shell::new(), "echo oops >&2; exit 3").await;
        assert_eq!(
            out,
            Ok(json!({"exit_code": 3, "stdout": "", "stderr": "oops\n", "truncated": false}))
        );
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
        let pid: i32 = std::fs::read_to_string(dir.path().join("bg.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(2);
        while !gone(pid) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(gone(pid), "background child {pid} survived");
    }

    #[tokio::test]
    async fn timeout_secs_shortens_the_limit_and_background_children_die_on_exit() {
        let (dir, router, ctx, granted) = setup(Shell::new());
        let out = router
            .call(
                "shell",
                json!({"command": "sleep 5", "timeout_secs": 1}),
                &granted,
                &ctx,
            )
            .await;
        assert_eq!(out, Err(ToolError::Failed("timed out after 1s".into())));
        // The background child holds the output pipes: only killing the
        // group when `sh` exits lets the call return at once.
        let started = Instant::now();
        let out = router
            .call(
                "shell",
                json!({"command": "sleep 60 & echo $! > bg.pid"}),
                &granted,
                &ctx,
            )
            .await;
        assert_eq!(out.unwrap()["exit_code"], 0);
        assert!(started.elapsed() < Duration::from_secs(5));
        let pid: i32 = std::fs::read_to_string(dir.path().join("bg.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(2);
        while !gone(pid) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(gone(pid), "background child {pid} survived");
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

    #[test]
    fn a_character_cut_by_the_cap_is_dropped() {
        assert_eq!(lossy_text("hé".as_bytes()[..2].to_vec(), true), "h");
        assert_eq!(lossy_text(vec![b'a', 0xff, b'b'], false), "a\u{fffd}b");
    }

    #[tokio::test]
    async fn invalid_input_never_reaches_the_tool() {
        let (dir, router, ctx, granted) = setup(Shell::new());
        for input in [
            json!({"command": 3}),
            json!({}),
            json!({"command": "touch ran", "timeout_secs": 0}),
            json!({"command": "touch ran", "timeout_secs": 601}),
            json!({"command": "touch ran", "cwd": "/"}),
        ] {
            let out = router.call("shell", input.clone(), &granted, &ctx).await;
            assert!(
                matches!(out, Err(ToolError::InvalidInput { .. })),
                "{input}: {out:?}"
            );
        }
        assert!(!dir.path().join("ran").exists());
    }
}

//! Running an agent CLI as a child process and streaming its decoded output.
//!
//! Every CLI provider goes through here, so the rules hold for all of them:
//! the CLI runs in a process group of its own, with stdin closed; stdout is
//! read in chunks and framed into lines with a length cap by the shared
//! normalization layer; stderr is kept apart (its tail is logged and attached
//! to errors, never parsed as events); and the whole group is killed when the
//! timeout passes, when the caller drops the stream (cancel), or when the
//! reader task ends early — a CLI that spawned shells leaves none behind.
//! The CLI inherits awr's environment less every key variable its own node
//! does not need ([`application::secrets`]): a claude-code agent sees the
//! Anthropic key, never the OpenAI one.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use application::ports::{AgentMessage, AgentRequest, AgentStream, QueryError};
use application::secrets::{KeyNames, needed_by};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::mpsc;

use crate::normalize::{Decoder, StreamDecoder};

/// Bytes of stderr kept for error messages; older output is dropped.
const STDERR_TAIL_BYTES: usize = 16 * 1024;

/// Messages buffered between the reader task and the runner. Small: the
/// runner consumes as fast as it records, and a full buffer only slows the
/// reader (the CLI then waits on its pipe), it never loses output.
const CHANNEL_CAPACITY: usize = 64;

/// What to run.
#[derive(Debug, Clone)]
pub struct CliCommand {
    /// Executable: a path, or a name looked up on `PATH`.
    pub program: PathBuf,
    /// Arguments.
    pub args: Vec<String>,
    /// Extra environment, set last (the CLI inherits awr's own environment
    /// too, less the key variables it does not need).
    pub env: BTreeMap<String, String>,
    /// Recognizes key variables of awr's environment, withheld from the CLI...
    pub keys: KeyNames,
    /// ...except these, which its node needs.
    pub needed_keys: Vec<String>,
    /// Working directory, when not awr's own.
    pub cwd: Option<PathBuf>,
    /// Kill the CLI after this long.
    pub timeout: Option<Duration>,
}

impl CliCommand {
    /// The agent's CLI (its `executable:`, else `default_program` on `PATH`)
    /// with `args`, the agent's extra `env:`, `workdir:` and `timeout:`.
    pub fn for_agent(request: &AgentRequest, default_program: &str, args: Vec<String>) -> Self {
        let agent = &request.agent;
        CliCommand {
            program: agent
                .executable
                .clone()
                .unwrap_or_else(|| default_program.to_owned())
                .into(),
            args,
            env: agent.env.clone(),
            keys: KeyNames::default(),
            needed_keys: needed_by(agent),
            cwd: agent.workdir.as_ref().map(PathBuf::from),
            timeout: agent.timeout.map(|t| t.0),
        }
    }

    /// Withholds `keys` (the workflow's configured key names besides the
    /// fixed rules) too.
    pub fn withholding(mut self, keys: &KeyNames) -> Self {
        self.keys = keys.clone();
        self
    }
}

/// The prompt for a CLI that has no system prompt flag in its
/// non-interactive mode: the agent's system prompt leads the prompt text.
pub fn prompt_with_system(request: &AgentRequest) -> String {
    if request.agent.system_prompt.is_empty() {
        request.prompt.clone()
    } else {
        format!("{}\n\n{}", request.agent.system_prompt, request.prompt)
    }
}

/// Kills a process group when dropped, unless disarmed: the CLI and every
/// process it started go away with the stream, however it ends.
struct GroupGuard(Option<rustix::process::Pid>);

impl GroupGuard {
    fn kill(&mut self) {
        if let Some(pid) = self.0.take() {
            // The group may already be gone; nothing to do about an error.
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts `command` and decodes its stdout with `decoder`. Errors before the
/// first message (the executable is missing, not executable) come back here.
pub fn run_cli<D: Decoder + Send + 'static>(
    command: CliCommand,
    decoder: D,
) -> Result<AgentStream, QueryError> {
    let mut cmd = tokio::process::Command::new(&command.program);
    let inherited = std::env::vars_os().map(|(name, _)| name);
    for name in command.keys.withheld(inherited, &command.needed_keys) {
        cmd.env_remove(name);
    }
    cmd.args(&command.args)
        .envs(&command.env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    if let Some(cwd) = &command.cwd {
        cmd.current_dir(cwd);
    }
    let mut child = cmd.spawn().map_err(|e| {
        QueryError::Config(format!(
            "cannot start `{}`: {e} (set the agent's `executable:` or install the CLI)",
            command.program.display()
        ))
    })?;
    let guard = GroupGuard(
        child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .and_then(rustix::process::Pid::from_raw),
    );
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(QueryError::Config(
            "the CLI's output pipes were not created".into(),
        ));
    };
    let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
    let program = command.program.display().to_string();
    tokio::spawn(drive(
        child,
        stdout,
        stderr,
        decoder,
        tx,
        guard,
        command.timeout,
        program,
    ));
    Ok(Box::pin(futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    })))
}

/// Reads the CLI to its end (or its deadline) and sends what it decodes.
#[allow(clippy::too_many_arguments)] // one task's whole state, passed once
async fn drive<D: Decoder>(
    mut child: tokio::process::Child,
    mut stdout: tokio::process::ChildStdout,
    stderr: tokio::process::ChildStderr,
    decoder: D,
    tx: mpsc::Sender<Result<AgentMessage, QueryError>>,
    mut guard: GroupGuard,
    timeout: Option<Duration>,
    program: String,
) {
    let stderr_task = tokio::spawn(read_tail(stderr));
    let mut decoder = StreamDecoder::new(decoder);
    let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let read = match deadline {
            Some(at) => match tokio::time::timeout_at(at, stdout.read(&mut buf)).await {
                Ok(read) => read,
                Err(_) => {
                    guard.kill();
                    let stderr_tail = stderr_task.await.unwrap_or_default();
                    let secs = timeout.map_or(0, |t| t.as_secs());
                    let _ = tx
                        .send(Err(QueryError::Agent {
                            error_type: "timeout".into(),
                            message: format!(
                                "`{program}` did not finish within {secs} s; it was killed"
                            ),
                            details: Some(serde_json::json!({ "stderr": stderr_tail })),
                        }))
                        .await;
                    return;
                }
            },
            None => stdout.read(&mut buf).await,
        };
        let n = match read {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(%program, error = %e, "reading the CLI's output failed");
                break;
            }
        };
        for item in decoder.push(&buf[..n]) {
            if tx.send(item).await.is_err() {
                // The stream was dropped: the run was cancelled.
                return;
            }
        }
    }
    let status = match deadline {
        Some(at) => tokio::time::timeout_at(at, child.wait()).await.ok(),
        None => Some(child.wait().await),
    };
    guard.kill();
    let exit = match status {
        Some(Ok(status)) => status.code(),
        _ => None,
    };
    let stderr_tail = stderr_task.await.unwrap_or_default();
    if !stderr_tail.is_empty() {
        tracing::debug!(%program, stderr = %stderr_tail, "CLI stderr");
    }
    for item in decoder.finish(exit, &stderr_tail) {
        if tx.send(item).await.is_err() {
            return;
        }
    }
}

/// Reads a stream to its end, keeping only its last [`STDERR_TAIL_BYTES`].
async fn read_tail(mut stream: impl AsyncRead + Unpin) -> String {
    let mut tail: Vec<u8> = Vec::new();
    let mut buf = [0u8; 8192];
    while let Ok(n) = stream.read(&mut buf).await {
        if n == 0 {
            break;
        }
        tail.extend_from_slice(&buf[..n]);
        if tail.len() > STDERR_TAIL_BYTES {
            tail.drain(..tail.len() - STDERR_TAIL_BYTES);
        }
    }
    String::from_utf8_lossy(&tail).into_owned()
}

//! Running an agent CLI as a child process and streaming its decoded output.
//!
//! Every CLI provider goes through here, so the rules hold for all of them:
//! the CLI runs in a process group of its own ([`super::group`]), with stdin
//! closed; stdout is read in chunks and framed into lines with a length cap
//! by the shared normalization layer; stderr is kept apart (its tail is
//! logged and attached to errors, never parsed as events); and the whole
//! group is killed when the timeout passes, when the caller drops the stream
//! (cancel: at once, even while the CLI is silent), or when the CLI exits —
//! a CLI that spawned shells leaves none behind, and a background job it
//! left cannot hold stdout open.
//! The CLI inherits awr's environment less every key variable its own node
//! does not need ([`application::secrets`]): a claude-code agent sees the
//! Anthropic key, never the OpenAI one.

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::path::PathBuf;
use std::time::Duration;

use application::ports::{AgentMessage, AgentRequest, AgentStream, QueryError, QueryFn};
use application::secrets::{KeyNames, needed_by};
use async_trait::async_trait;
use futures::StreamExt;
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;

use super::capture::{Captured, Keep};
use super::group::{GroupId, ProcessGroup, Sandbox, Spawned, command as new_command, spawn};
use super::sweep::run_tags;
use crate::normalize::{Decoded, Decoder, StreamDecoder};

/// Bytes of stderr kept for error messages; older output is dropped.
const STDERR_TAIL_BYTES: usize = 16 * 1024;

/// How long the CLI's output is still read after the CLI exited: enough to
/// drain the pipes, short enough that a process it left behind in a session
/// of its own, holding them open, does not hold the run.
const OUTPUT_GRACE: Duration = Duration::from_secs(2);

/// How long a CLI may go on after its output ended before its group is
/// killed: a CLI exits as it closes its output; one that does not would
/// hold a run without a timeout for good.
const EXIT_GRACE: Duration = Duration::from_secs(5);

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
            env: {
                let mut env = agent.env.clone();
                env.extend(run_tags(&request.run_id.to_string()));
                // The call's span, for a CLI whose OpenTelemetry SDK reads
                // the trace context from its environment.
                if let Some(traceparent) = &request.traceparent {
                    env.insert("TRACEPARENT".to_owned(), traceparent.clone());
                }
                env
            },
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

/// What a CLI provider holds of its own, implemented by its decoder: the
/// executable, the command line that makes it print what the decoder reads,
/// and what it does around a run. [`CliAgent`] does the rest.
pub trait CliProgram: Decoder + Default + Send + 'static {
    /// The executable, looked up on `PATH` when the agent names none.
    const EXECUTABLE: &'static str;

    /// After a resume the CLI reports the whole session's usage, not this
    /// invocation's: the usage its earlier invocations recorded
    /// (`AgentRequest::session_usage`, from the run's log) is subtracted, and
    /// per-model figures, cumulative too, are dropped.
    const REPORTS_SESSION_TOTALS: bool = false;

    /// The arguments of one invocation.
    fn args(request: &AgentRequest) -> Vec<String>;

    /// Called on the stream's last item (the result or the error), after
    /// the CLI exited: reads what it wrote besides stdout, removes what it
    /// left. By default nothing.
    fn ended(request: &AgentRequest, last: &mut Decoded) {
        let _ = (request, last);
    }

    /// Key variables of awr's environment the CLI reads for this
    /// invocation (the tokens of MCP servers it reaches itself), passed to
    /// it although keys are withheld. By default none. An error (such a
    /// variable is not set) fails the invocation.
    fn needed_keys(request: &AgentRequest) -> Result<Vec<String>, String> {
        let _ = request;
        Ok(Vec::new())
    }

    /// What the CLI reads for this invocation alone (its MCP servers'
    /// configuration, rendered from the workflow, never the user's own),
    /// made in order before it starts, in [`private_dir`], and removed once
    /// its stream is dropped. By default nothing. An error (a variable the
    /// configuration needs is not set) fails the invocation.
    fn files(request: &AgentRequest) -> Result<Vec<Prepared>, String> {
        let _ = request;
        Ok(Vec::new())
    }

    /// Variables set for this invocation besides the agent's `env:` (and
    /// over it), such as where the CLI finds what [`CliProgram::files`]
    /// made. By default none.
    fn env(request: &AgentRequest) -> Vec<(String, String)> {
        let _ = request;
        Vec::new()
    }
}

/// One thing an invocation needs on disk, in [`private_dir`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prepared {
    /// A file holding this text, readable by this user alone (0600).
    File(PathBuf, String),
    /// A directory of this user's alone (0700), removed with all it holds.
    Dir(PathBuf),
    /// A symbolic link to the target: state of the CLI's own (its
    /// sessions, its credentials) that the invocation shares, never copies.
    Link(PathBuf, PathBuf),
}

/// The directory the files of invocations are written in: the temporary
/// directory's `awr-UID`, this user's alone (mode 0700), so no other user
/// can put a file where one is about to be written, nor read one.
pub fn private_dir() -> PathBuf {
    let uid = rustix::process::geteuid().as_raw();
    std::env::temp_dir().join(format!("awr-{uid}"))
}

/// Creates [`private_dir`], or checks that the one there is this user's
/// alone.
fn ensure_private_dir() -> std::io::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let dir = private_dir();
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => return Ok(dir),
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
        Err(_) => {}
    }
    let meta = std::fs::symlink_metadata(&dir)?;
    let uid = rustix::process::geteuid().as_raw();
    if !meta.is_dir() || meta.uid() != uid || meta.permissions().mode() & 0o077 != 0 {
        return Err(std::io::Error::other(format!(
            "{} is not a directory of this user's alone (mode 0700)",
            dir.display()
        )));
    }
    Ok(dir)
}

/// What was made for one invocation, removed when dropped (the stream
/// ended, or was dropped early by a pause or a cancellation), last first.
struct Written(Vec<Prepared>);

impl Written {
    /// Makes each of `entries` anew, in [`private_dir`]: whatever was left
    /// at its path is replaced, and a link there is never followed.
    fn write(entries: Vec<Prepared>) -> std::io::Result<Self> {
        use std::io::Write;
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let mut written = Self(Vec::with_capacity(entries.len()));
        if !entries.is_empty() {
            ensure_private_dir()?;
        }
        for entry in entries {
            match &entry {
                Prepared::File(path, text) => {
                    let _ = std::fs::remove_file(path);
                    let mut file = std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(0o600)
                        .open(path)?;
                    written.0.push(entry.clone());
                    file.write_all(text.as_bytes())?;
                }
                Prepared::Dir(path) => {
                    let _ = std::fs::remove_dir_all(path);
                    std::fs::DirBuilder::new().mode(0o700).create(path)?;
                    written.0.push(entry);
                }
                Prepared::Link(path, target) => {
                    let _ = std::fs::remove_file(path);
                    std::os::unix::fs::symlink(target, path)?;
                    written.0.push(entry);
                }
            }
        }
        Ok(written)
    }
}

impl Drop for Written {
    fn drop(&mut self) {
        for entry in self.0.iter().rev() {
            let _ = match entry {
                Prepared::File(path, _) | Prepared::Link(path, _) => std::fs::remove_file(path),
                // What the CLI added in it goes too; links in it are
                // removed, never followed.
                Prepared::Dir(path) => std::fs::remove_dir_all(path),
            };
        }
    }
}

/// The [`QueryFn`] of a CLI provider: runs its [`CliProgram`] with the key
/// variables its node does not need withheld.
#[derive(Debug, Default)]
pub struct CliAgent<P> {
    /// Key variables withheld besides the fixed rules.
    keys: KeyNames,
    /// The program (its decoder).
    program: PhantomData<fn() -> P>,
}

impl<P> CliAgent<P> {
    /// Withholds `keys` from the CLI besides the fixed rules, except the
    /// ones its node needs.
    pub fn withholding(keys: KeyNames) -> Self {
        Self {
            keys,
            program: PhantomData,
        }
    }
}

impl<P: CliProgram> CliAgent<P> {
    /// The command line for one invocation.
    pub fn command(request: &AgentRequest) -> CliCommand {
        let mut command = CliCommand::for_agent(request, P::EXECUTABLE, P::args(request));
        command.env.extend(P::env(request));
        command
    }
}

/// Whether a session id can go on a CLI's command line as it is: ids come
/// from the CLI's own output, and one such as `--dangerously-skip-permissions`
/// would be read as a flag. Every CLI's ids are UUID-like.
fn safe_on_command_line(id: &str) -> bool {
    id.len() <= 256
        && !id.starts_with('-')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
}

#[async_trait]
impl<P: CliProgram> QueryFn for CliAgent<P> {
    async fn query(&self, request: AgentRequest) -> Result<AgentStream, QueryError> {
        for id in [&request.resume, &request.session_id].into_iter().flatten() {
            if !safe_on_command_line(id.as_str()) {
                return Err(QueryError::Agent {
                    error_type: "invalid_session".into(),
                    message: format!(
                        "session id {:?} is not one {} can be given on its command line (letters, digits, `-_.:`, not leading `-`, at most 256)",
                        id.as_str().chars().take(80).collect::<String>(),
                        P::EXECUTABLE
                    ),
                    details: None,
                });
            }
        }
        let files = P::files(&request).map_err(QueryError::Config)?;
        let written = Written::write(files).map_err(|e| {
            QueryError::Config(format!(
                "cannot write the configuration of `{}`: {e}",
                P::EXECUTABLE
            ))
        })?;
        let mut command = Self::command(&request).withholding(&self.keys);
        command
            .needed_keys
            .extend(P::needed_keys(&request).map_err(QueryError::Config)?);
        let stream = run_cli(command, P::default())?;
        Ok(Box::pin(stream.map(move |item| {
            // Kept as long as the CLI may read them.
            let _ = &written;
            match item {
                Ok(AgentMessage::Completed(_)) | Err(_) => last_item::<P>(&request, item),
                other => other,
            }
        })))
    }
}

/// The stream's last item (the result or the error) as the program leaves
/// it, with this invocation's own usage.
fn last_item<P: CliProgram>(request: &AgentRequest, mut last: Decoded) -> Decoded {
    P::ended(request, &mut last);
    if let Ok(AgentMessage::Completed(result)) = &mut last
        && P::REPORTS_SESSION_TOTALS
        && request.resume.is_some()
    {
        result.usage = result.usage.minus(&request.session_usage);
        result.model_usage = None;
    }
    last
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

/// The arguments of a one-shot `-p` run that prints `format`, then `flag`
/// (how the CLI is told to run tools unattended); the system prompt leads
/// the prompt.
pub(crate) fn print_args(request: &AgentRequest, format: &str, flag: &str) -> Vec<String> {
    vec![
        "-p".into(),
        prompt_with_system(request),
        "--output-format".into(),
        format.into(),
        flag.into(),
    ]
}

/// `flag` and `value`, as two arguments, when there is a value.
pub(crate) fn flag(flag: &str, value: Option<impl ToString>) -> Vec<String> {
    value.map_or_else(Vec::new, |v| vec![flag.to_owned(), v.to_string()])
}

/// Starts `command` and decodes its stdout with `decoder`. Errors before the
/// first message (the executable is missing, not executable) come back here.
pub fn run_cli<D: Decoder + Send + 'static>(
    command: CliCommand,
    decoder: D,
) -> Result<AgentStream, QueryError> {
    let mut cmd = new_command(&command.program);
    cmd.args(&command.args);
    if let Some(cwd) = &command.cwd {
        cmd.current_dir(cwd);
    }
    let sandbox = Sandbox {
        keys: command.keys.clone(),
        keep: command.needed_keys.clone(),
        hidden: Vec::new(),
        env: command.env.clone(),
    };
    let spawned = spawn(cmd, &sandbox).map_err(|e| {
        QueryError::Config(format!(
            "cannot start `{}`: {e} (set the agent's `executable:` or install the CLI)",
            command.program.display()
        ))
    })?;
    let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
    if let Some(GroupId {
        pgid,
        start_ticks: Some(start_time),
    }) = spawned.group.id()
    {
        // First on an empty channel: it cannot be full.
        let _ = tx.try_send(Ok(AgentMessage::Process {
            pid: pgid,
            start_time,
        }));
    }
    let program = command.program.display().to_string();
    tokio::spawn(drive(spawned, decoder, tx, command.timeout, program));
    Ok(Box::pin(futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    })))
}

/// Reads the CLI to its end (or its deadline) and sends what it decodes,
/// unless the caller drops the stream first: then the task ends at once and
/// the group goes with `spawned`, whether or not the CLI was printing.
async fn drive<D: Decoder>(
    spawned: Spawned,
    decoder: D,
    tx: mpsc::Sender<Result<AgentMessage, QueryError>>,
    timeout: Option<Duration>,
    program: String,
) {
    let Spawned {
        child,
        stdout,
        stderr,
        group,
    } = spawned;
    let run = Run {
        group: &group,
        tx: &tx,
        program: &program,
    };
    tokio::select! {
        () = tx.closed() => {
            tracing::debug!(%program, "the stream was dropped; killing the CLI's process group");
        }
        () = run.to_end(child, stdout, stderr, decoder, timeout) => {}
    }
}

/// One CLI run, as [`drive`] lends it out.
struct Run<'a> {
    group: &'a ProcessGroup,
    tx: &'a mpsc::Sender<Result<AgentMessage, QueryError>>,
    program: &'a str,
}

impl Run<'_> {
    async fn to_end<D: Decoder>(
        &self,
        mut child: tokio::process::Child,
        stdout: tokio::process::ChildStdout,
        stderr: tokio::process::ChildStderr,
        decoder: D,
        timeout: Option<Duration>,
    ) {
        let program = self.program;
        let stderr_task = tokio::spawn(async move {
            let mut tail = Captured::new(Keep::Tail(STDERR_TAIL_BYTES));
            tail.read_from(stderr).await;
            tail.text()
        });
        let mut decoder = StreamDecoder::new(decoder);
        let wait = async {
            let status = child.wait().await;
            // What it left running in the background would hold stdout open.
            self.group.end().await;
            status
        };
        let decoding = self.decode(stdout, &mut decoder);
        let both = async {
            tokio::pin!(wait, decoding);
            tokio::select! {
                status = &mut wait => {
                    // Its group is gone, and what moved to a session of its
                    // own with it; one that also cleared its environment
                    // may hold stdout open for good: what is in the pipe is
                    // read, then reading stops.
                    if tokio::time::timeout(OUTPUT_GRACE, &mut decoding).await.is_err() {
                        tracing::warn!(%program, "the CLI exited and a process it left holds its output open; reading stopped");
                    }
                    status
                }
                () = &mut decoding => {
                    // Its output has ended: a CLI still running after that
                    // has nothing left to say. It gets a grace to exit, then
                    // its group is killed (a result it printed is kept).
                    match tokio::time::timeout(EXIT_GRACE, &mut wait).await {
                        Ok(status) => status,
                        Err(_) => {
                            tracing::warn!(%program, "the CLI closed its output and did not exit; killing it");
                            self.group.kill();
                            wait.await
                        }
                    }
                }
            }
        };
        let status = match timeout {
            Some(limit) => tokio::time::timeout(limit, both).await.ok(),
            None => Some(both.await),
        };
        self.group.end().await;
        // The same for stderr: its tail is what was read by then.
        let mut stderr_task = stderr_task;
        let stderr_tail = match tokio::time::timeout(OUTPUT_GRACE, &mut stderr_task).await {
            Ok(tail) => tail.unwrap_or_default(),
            Err(_) => {
                stderr_task.abort();
                String::new()
            }
        };
        let Some(status) = status else {
            let secs = timeout.map_or(0, |t| t.as_secs());
            self.send(Err(QueryError::Agent {
                error_type: "timeout".into(),
                message: format!("`{program}` did not finish within {secs} s; it was killed"),
                details: Some(serde_json::json!({ "stderr": stderr_tail })),
            }))
            .await;
            return;
        };
        let exit = status.ok().and_then(|status| status.code());
        if !stderr_tail.is_empty() {
            tracing::debug!(%program, stderr = %stderr_tail, "CLI stderr");
        }
        for item in decoder.finish(exit, &stderr_tail) {
            self.send(item).await;
        }
    }

    /// Decodes stdout to its end and sends what it yields.
    async fn decode<D: Decoder>(
        &self,
        mut stdout: tokio::process::ChildStdout,
        decoder: &mut StreamDecoder<D>,
    ) {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match stdout.read(&mut buf).await {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!(program = %self.program, error = %e, "reading the CLI's output failed");
                    break;
                }
            };
            for item in decoder.push(&buf[..n]) {
                self.send(item).await;
            }
        }
    }

    /// Sends `item`; a dropped stream is noticed by [`drive`], which then
    /// drops this whole run.
    async fn send(&self, item: Result<AgentMessage, QueryError>) {
        let _ = self.tx.send(item).await;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::claude::ClaudeDecoder;
    use crate::codex::CodexDecoder;
    use crate::normalize::Decoded;
    use crate::normalize::testing::agent_request;
    use crate::normalize::usage::usage;
    use crate::process::testing::{ends, pid_in};
    use application::ports::AgentResult;
    use domain::SessionId;
    use domain::event::Usage;
    use domain::workflow::Provider;
    use futures::StreamExt;
    use serde_json::Value;

    /// Yields nothing per line, and a bare error at the end.
    struct Silent;

    impl Decoder for Silent {
        fn line(&mut self, _: Value) -> Vec<Decoded> {
            Vec::new()
        }
        fn finish(&mut self, exit_code: Option<i32>, _: &str) -> Vec<Decoded> {
            vec![Err(QueryError::Config(format!("exit {exit_code:?}")))]
        }
    }

    fn sh(script: String) -> CliCommand {
        CliCommand {
            program: "sh".into(),
            args: vec!["-c".into(), script],
            env: BTreeMap::new(),
            keys: KeyNames::default(),
            needed_keys: Vec::new(),
            cwd: None,
            timeout: None,
        }
    }

    /// The result `last_item` leaves of a result with these counts.
    fn last<P: CliProgram>(request: &AgentRequest, counts: (u64, u64, u64)) -> AgentResult {
        let result = AgentResult {
            usage: tokens(counts),
            model_usage: Some(BTreeMap::new()),
            ..AgentResult::default()
        };
        match last_item::<P>(request, Ok(AgentMessage::Completed(result))) {
            Ok(AgentMessage::Completed(result)) => result,
            other => panic!("{other:?}"),
        }
    }

    fn tokens((input, output, cache_read): (u64, u64, u64)) -> Usage {
        usage(Some(input), Some(output), None, Some(cache_read))
    }

    /// A session id from a CLI's output that would read as a flag (or is
    /// no id at all) is never put on its command line: the call fails
    /// before anything runs.
    #[tokio::test]
    async fn a_session_id_that_is_no_plain_id_never_reaches_the_command_line() {
        for bad in [
            "--dangerously-skip-permissions",
            "a b",
            "../x",
            "x\ny",
            &"x".repeat(300),
        ] {
            let mut request = agent_request(Provider::ClaudeCode, None);
            request.resume = Some(SessionId::new(bad).unwrap());
            let agent = CliAgent::<crate::claude::ClaudeDecoder>::default();
            match agent.query(request).await {
                Err(QueryError::Agent { error_type, .. }) => {
                    assert_eq!(error_type, "invalid_session")
                }
                Err(other) => panic!("{bad}: {other}"),
                Ok(_) => panic!("{bad}: the CLI was started"),
            }
        }
        for good in [
            "3d268878-4ab5-43ec-bed2-000000000001",
            "sess-sum-checker",
            "th_1.a:b",
        ] {
            assert!(safe_on_command_line(good), "{good}");
        }
    }

    #[test]
    fn a_resumed_session_total_is_reduced_to_this_invocations_usage() {
        let mut request = agent_request(Provider::Codex, None);
        request.session_usage = tokens((240, 40, 50));
        // Not resumed: the usage is this invocation's already.
        let fresh = last::<CodexDecoder>(&request, (360, 60, 75));
        assert_eq!(fresh.usage, tokens((360, 60, 75)));
        assert!(fresh.model_usage.is_some());
        request.resume = Some(SessionId::new("th-1").unwrap());
        let own = last::<CodexDecoder>(&request, (360, 60, 75));
        assert_eq!(own.usage, tokens((120, 20, 25)));
        assert_eq!(own.model_usage, None, "per-model figures are totals too");
        // Saturating: earlier totals larger than the current ones give zero.
        request.session_usage = tokens((1_000, 1_000, 1_000));
        let zero = last::<CodexDecoder>(&request, (360, 60, 75));
        assert_eq!(zero.usage, tokens((0, 0, 0)));
        // A CLI that reports each invocation's own usage is left alone.
        let claude = last::<ClaudeDecoder>(&request, (360, 60, 75));
        assert_eq!(claude.usage, tokens((360, 60, 75)));
    }

    #[tokio::test]
    async fn dropping_the_stream_of_a_silent_cli_kills_its_group() {
        let dir = tempfile::tempdir().unwrap();
        let (cli, child) = (dir.path().join("cli.pid"), dir.path().join("child.pid"));
        let script = format!(
            "echo $$ > '{}'; sleep 60 & echo $! > '{}'; wait",
            cli.display(),
            child.display()
        );
        let mut stream = run_cli(sh(script), Silent).unwrap();
        assert!(pid_in(&child, Duration::from_secs(10)).await.is_some());
        // The group is announced first, for the record.
        let first = stream.next().await;
        assert!(
            matches!(first, Some(Ok(AgentMessage::Process { .. }))),
            "{first:?}"
        );
        // Polled again, so the stream is live, then dropped: a cancelled run.
        assert!(futures::poll!(stream.next()).is_pending());
        drop(stream);
        ends(&cli).await.unwrap();
        ends(&child).await.unwrap();
    }

    #[tokio::test]
    async fn a_cli_ending_leaves_no_background_child() {
        let dir = tempfile::tempdir().unwrap();
        let child = dir.path().join("child.pid");
        let script = format!("sleep 600 & echo $! > '{}'; exit 4", child.display());
        let stream = run_cli(sh(script), Silent).unwrap();
        // The child would hold stdout open for ten minutes.
        let out: Vec<_> = tokio::time::timeout(Duration::from_secs(30), stream.collect())
            .await
            .expect("the stream waited for the background child");
        assert!(
            matches!(&out[..], [Ok(AgentMessage::Process { .. }), Err(QueryError::Config(m))] if m == "exit Some(4)"),
            "{out:?}"
        );
        ends(&child).await.unwrap();
    }
}

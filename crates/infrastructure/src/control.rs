//! [`UnixControl`]: the [`ControlChannel`] over one Unix domain socket per
//! run, `<dir>/<run-id>.sock`, so a command from another process (`awr pause`,
//! `awr send`) reaches the process that writes the run.
//!
//! The protocol is one JSON line each way per connection: the client writes
//! `{"command": RAW, "by": CALLER}` (the command as sent, and who sent it;
//! a bare command, with no envelope, is taken as sent by nobody named), the
//! writer answers with a [`CommandReply`] once the command is recorded, and
//! the connection closes. The endpoint itself may instead answer
//! `{"error": "..."}` when it refuses a line before delivering it (too long,
//! or nothing sent in time); such a line is not recorded.
//!
//! Why it is shaped this way:
//! - A socket, not a command file the writer polls: the sender learns at once
//!   whether a writer listens (`ENOENT` or `ECONNREFUSED` mean none does, so
//!   it takes the run's lock and records the command itself), and it gets the
//!   writer's answer on the same connection.
//! - The listener is opened by the holder of the run's lock, so a socket file
//!   left by a writer that died is stale by definition and is replaced; the
//!   file is removed on drop only while it is still ours (same inode), so a
//!   later writer's endpoint is never taken away.
//! - A line that is not JSON is delivered as a JSON string: the writer records
//!   every payload as it came, valid or not, before judging it.
//! - Every read is bounded in size ([`ControlConfig::max_line`]) and time, so
//!   a stuck or hostile client costs one task for a few seconds at most.
//! - Files are 0600 and the directory 0700, like every file awr writes.

use std::fs::{self, DirBuilder, Permissions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use application::ports::{CommandReply, ControlChannel, ControlError, Delivery, Listener};
use async_trait::async_trait;
use domain::{Caller, RunId};
use serde::Deserialize;
use serde_json::Value;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinHandle;

#[cfg(test)]
mod tests;

/// Mode of the socket directory: private to its user.
const DIR_MODE: u32 = 0o700;

/// Mode of a socket file: only its user may connect.
const SOCKET_MODE: u32 = 0o600;

/// How long the accept loop waits after a failed `accept` (out of file
/// descriptors, say) before trying again, instead of spinning.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Limits of the channel; [`Default`] is what awr uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlConfig {
    /// Longest line either side reads or sends, without its newline: 1 MiB,
    /// far more than any command (a message to an agent) needs.
    pub max_line: usize,
    /// How long the endpoint waits for a client's whole line: 5 s. A client
    /// that connects and sends nothing is dropped after it.
    pub idle_timeout: Duration,
    /// How long [`UnixControl::deliver`] waits for the whole exchange: 30 s,
    /// generous, as the writer answers only after recording (and perhaps
    /// syncing) the command.
    pub reply_timeout: Duration,
    /// Commands read but not yet taken by the writer: 64. When full, clients
    /// wait (backpressure) rather than the endpoint buffering without bound.
    pub queue: usize,
    /// Connections served at once: 256. More wait in the socket's backlog,
    /// so a flood of clients cannot exhaust the writer's file descriptors.
    pub max_connections: usize,
}

impl Default for ControlConfig {
    fn default() -> Self {
        Self {
            max_line: 1 << 20,
            idle_timeout: Duration::from_secs(5),
            reply_timeout: Duration::from_secs(30),
            queue: 64,
            max_connections: 256,
        }
    }
}

/// The [`ControlChannel`] over Unix domain sockets, one per run in one directory.
#[derive(Debug, Clone)]
pub struct UnixControl {
    dir: PathBuf,
    config: ControlConfig,
}

impl UnixControl {
    /// Sockets in `dir` (created, 0700, on the first [`ControlChannel::listen`]),
    /// with the default limits.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self::with_config(dir, ControlConfig::default())
    }

    /// Sockets in `dir`, with the given limits.
    pub fn with_config(dir: impl Into<PathBuf>, config: ControlConfig) -> Self {
        Self {
            dir: dir.into(),
            config,
        }
    }

    /// Where the socket of `run_id` lives (whether or not it exists).
    pub fn socket_path(&self, run_id: RunId) -> PathBuf {
        self.dir.join(format!("{run_id}.sock"))
    }

    /// The socket path of `run_id`, refused when it does not fit in a Unix
    /// socket address (`sun_path`, 108 bytes on Linux, 104 on macOS).
    fn checked_path(&self, run_id: RunId) -> Result<PathBuf, ControlError> {
        let path = self.socket_path(run_id);
        match std::os::unix::net::SocketAddr::from_pathname(&path) {
            Ok(_) => Ok(path),
            Err(e) => Err(ControlError::Io(format!(
                "{}: cannot be a Unix socket address ({} bytes; {e}); use a shorter directory",
                path.display(),
                path.as_os_str().len(),
            ))),
        }
    }
}

#[async_trait]
impl ControlChannel for UnixControl {
    async fn listen(&self, run_id: RunId) -> Result<Listener, ControlError> {
        let path = self.checked_path(run_id)?;
        DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(&self.dir)
            .map_err(|e| io_err("create", &self.dir, &e))?;
        remove_stale(&path)?;
        let listener = UnixListener::bind(&path).map_err(|e| io_err("bind", &path, &e))?;
        let inode = match own_socket(&path) {
            Ok(inode) => inode,
            Err(e) => {
                drop(listener);
                let _ = fs::remove_file(&path);
                return Err(e);
            }
        };
        let (tx, rx) = mpsc::channel(self.config.queue.max(1));
        let task = tokio::spawn(accept_loop(listener, tx, self.config));
        tracing::debug!(path = %path.display(), "control socket listening");
        Ok(Listener::new(rx, Endpoint { path, inode, task }))
    }

    async fn deliver(
        &self,
        run_id: RunId,
        raw: &Value,
        by: Option<Caller>,
    ) -> Result<CommandReply, ControlError> {
        let path = self.checked_path(run_id)?;
        let by = by.as_ref();
        let mut line = serde_json::to_vec(&Envelope { command: raw, by })
            .map_err(|e| ControlError::Protocol(format!("command is not serializable: {e}")))?;
        if line.len() > self.config.max_line {
            return Err(ControlError::Protocol(format!(
                "command of {} bytes is larger than the limit of {} bytes",
                line.len(),
                self.config.max_line
            )));
        }
        line.push(b'\n');
        let exchange = exchange(&path, run_id, &line, self.config.max_line);
        match tokio::time::timeout(self.config.reply_timeout, exchange).await {
            Ok(answer) => answer,
            Err(_) => Err(ControlError::Io(format!(
                "{}: no answer within {:?}",
                path.display(),
                self.config.reply_timeout
            ))),
        }
    }
}

/// An I/O error, naming what was being done and to which path.
fn io_err(what: &str, path: &Path, e: &io::Error) -> ControlError {
    ControlError::Io(format!("cannot {what} {}: {e}", path.display()))
}

/// Removes a socket file left by a writer that died (the caller holds the
/// run's lock, so no live writer owns it). Anything else at the path is left
/// alone and refused: it is not ours to delete.
fn remove_stale(path: &Path) -> Result<(), ControlError> {
    use std::os::unix::fs::FileTypeExt;
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err("inspect", path, &e)),
        Ok(meta) if meta.file_type().is_socket() => {
            tracing::debug!(path = %path.display(), "removing stale control socket");
            match fs::remove_file(path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io_err("remove", path, &e)),
                _ => Ok(()),
            }
        }
        Ok(_) => Err(ControlError::Io(format!(
            "{}: exists and is not a socket; refusing to replace it",
            path.display()
        ))),
    }
}

/// Makes a freshly bound socket file 0600 and returns its identity, by which
/// [`Endpoint`] later knows the file is still its own.
fn own_socket(path: &Path) -> Result<(u64, u64), ControlError> {
    fs::set_permissions(path, Permissions::from_mode(SOCKET_MODE))
        .map_err(|e| io_err("set the mode of", path, &e))?;
    let meta = fs::symlink_metadata(path).map_err(|e| io_err("inspect", path, &e))?;
    Ok((meta.dev(), meta.ino()))
}

/// What a [`Listener`] holds: the accept task and the socket file. Dropping it
/// stops accepting and removes the file, if it is still the one we bound.
struct Endpoint {
    path: PathBuf,
    /// Device and inode of the socket file we bound.
    inode: (u64, u64),
    task: JoinHandle<()>,
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.task.abort();
        match fs::symlink_metadata(&self.path) {
            Ok(meta) if (meta.dev(), meta.ino()) == self.inode => {
                if let Err(e) = fs::remove_file(&self.path)
                    && e.kind() != io::ErrorKind::NotFound
                {
                    tracing::warn!(path = %self.path.display(), error = %e, "cannot remove control socket");
                }
            }
            _ => {}
        }
    }
}

/// Accepts connections until the [`Listener`] is dropped (which aborts this
/// task), serving each in a task of its own.
///
/// Connection tasks are not aborted with this loop: one whose command is in
/// the writer's hands waits for the writer's answer, so its client never
/// mistakes a recorded command for an undelivered one.
async fn accept_loop(
    listener: UnixListener,
    commands: mpsc::Sender<Delivery>,
    config: ControlConfig,
) {
    let slots = Arc::new(Semaphore::new(config.max_connections.max(1)));
    loop {
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        match listener.accept().await {
            Ok((stream, _)) => {
                let commands = commands.clone();
                tokio::spawn(async move {
                    serve(stream, commands, config).await;
                    drop(slot);
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "control socket: accept failed");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
            }
        }
    }
}

/// One connection: read the command line, hand it to the writer, write its
/// answer back. Closing without an answer tells the client the writer did not
/// take the command.
async fn serve(stream: UnixStream, commands: mpsc::Sender<Delivery>, config: ControlConfig) {
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read);
    let read_line = read_line(&mut read, config.max_line);
    let bytes = match tokio::time::timeout(config.idle_timeout, read_line).await {
        Err(_) => {
            let why = format!("no command line within {:?}", config.idle_timeout);
            return refuse(&mut write, &why).await;
        }
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "control socket: reading a command failed");
            return;
        }
        Ok(Ok(Line::TooLong)) => {
            let why = format!("command line longer than {} bytes", config.max_line);
            return refuse(&mut write, &why).await;
        }
        Ok(Ok(Line::End(bytes))) if bytes.is_empty() => return,
        Ok(Ok(Line::Complete(bytes) | Line::End(bytes))) => bytes,
    };
    let (raw, by) = parse_line(&bytes);
    let (delivery, answer) = Delivery::new(raw, by);
    if commands.send(delivery).await.is_err() {
        return;
    }
    // The writer waits while `_handover` lives: until the answer is written.
    let Some((answer, _handover)) = answer.recv().await else {
        return;
    };
    match serde_json::to_vec(&answer) {
        Ok(mut line) => {
            line.push(b'\n');
            if let Err(e) = write.write_all(&line).await {
                tracing::debug!(error = %e, "control socket: the client left before the answer");
            }
            let _ = write.shutdown().await;
        }
        Err(e) => tracing::warn!(error = %e, "control socket: cannot serialize an answer"),
    }
}

/// Answers `{"error": why}` for a line refused before delivery.
async fn refuse(write: &mut tokio::net::unix::OwnedWriteHalf, why: &str) {
    tracing::debug!(why, "control socket: command refused");
    let mut line = serde_json::json!({ "error": why }).to_string().into_bytes();
    line.push(b'\n');
    let _ = write.write_all(&line).await;
    let _ = write.shutdown().await;
}

/// A command and who sent it, as [`UnixControl::deliver`] writes them.
#[derive(serde::Serialize)]
struct Envelope<'a> {
    command: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    by: Option<&'a Caller>,
}

/// The command as it came and who sent it: an envelope's `command` and
/// `by`; else the line's JSON value, or the line itself as a JSON string
/// when it is not JSON, sent by nobody named. A `by` that is not a name a
/// caller can have is dropped, never recorded.
fn parse_line(bytes: &[u8]) -> (Value, Option<Caller>) {
    let value = serde_json::from_slice(bytes).unwrap_or_else(|_| {
        let text = bytes.strip_suffix(b"\r").unwrap_or(bytes);
        Value::String(String::from_utf8_lossy(text).into_owned())
    });
    match value {
        Value::Object(mut envelope)
            if envelope.contains_key("command")
                && envelope.keys().all(|k| k == "command" || k == "by") =>
        {
            let by = match envelope.remove("by") {
                Some(Value::String(name)) => Caller::new(name).ok(),
                _ => None,
            };
            let command = envelope.remove("command").unwrap_or(Value::Null);
            (command, by)
        }
        other => (other, None),
    }
}

/// One line read with a cap.
#[derive(Debug)]
enum Line {
    /// A line ended by a newline (not included).
    Complete(Vec<u8>),
    /// The stream ended first, after these bytes (perhaps none).
    End(Vec<u8>),
    /// More than the cap without a newline.
    TooLong,
}

/// Reads one line of at most `max` bytes (newline excluded), reading no more
/// than `max + 1` bytes whatever the peer sends.
async fn read_line<R: AsyncBufRead + Unpin>(read: &mut R, max: usize) -> io::Result<Line> {
    let mut buf = Vec::new();
    let cap = u64::try_from(max).unwrap_or(u64::MAX).saturating_add(1);
    read.take(cap).read_until(b'\n', &mut buf).await?;
    if buf.last() == Some(&b'\n') {
        buf.pop();
        Ok(Line::Complete(buf))
    } else if buf.len() > max {
        Ok(Line::TooLong)
    } else {
        Ok(Line::End(buf))
    }
}

/// What the endpoint may answer: the writer's reply, or its own refusal.
#[derive(Deserialize)]
#[serde(untagged)]
enum Answer {
    Reply(CommandReply),
    Refused { error: String },
}

/// Connects, sends `line`, reads the answer.
async fn exchange(
    path: &Path,
    run_id: RunId,
    line: &[u8],
    max_line: usize,
) -> Result<CommandReply, ControlError> {
    // The writer is gone (or never was) when the socket is missing, refuses
    // connections, or closes without answering.
    let no_writer = |e: &io::Error| {
        matches!(
            e.kind(),
            io::ErrorKind::NotFound
                | io::ErrorKind::ConnectionRefused
                | io::ErrorKind::ConnectionReset
                | io::ErrorKind::BrokenPipe
        )
    };
    let stream = match UnixStream::connect(path).await {
        Ok(stream) => stream,
        Err(e) if no_writer(&e) => return Err(ControlError::NoWriter(run_id)),
        Err(e) => return Err(io_err("connect to", path, &e)),
    };
    let (read, mut write) = stream.into_split();
    match write.write_all(line).await {
        Ok(()) => {}
        Err(e) if no_writer(&e) => return Err(ControlError::NoWriter(run_id)),
        Err(e) => return Err(io_err("send a command to", path, &e)),
    }
    let answer = match read_line(&mut BufReader::new(read), max_line).await {
        Ok(Line::Complete(answer)) => answer,
        Ok(Line::End(rest)) if rest.is_empty() => return Err(ControlError::NoWriter(run_id)),
        Ok(Line::End(_)) => {
            return Err(ControlError::Io(format!(
                "{}: the answer was cut short",
                path.display()
            )));
        }
        Ok(Line::TooLong) => {
            return Err(ControlError::Protocol(format!(
                "{}: answer longer than {max_line} bytes",
                path.display()
            )));
        }
        Err(e) if no_writer(&e) => return Err(ControlError::NoWriter(run_id)),
        Err(e) => return Err(io_err("read the answer from", path, &e)),
    };
    match serde_json::from_slice::<Answer>(&answer) {
        Ok(Answer::Reply(reply)) => Ok(reply),
        Ok(Answer::Refused { error }) => Err(ControlError::Protocol(format!(
            "{}: the command was refused: {error}",
            path.display()
        ))),
        Err(_) => Err(ControlError::Protocol(format!(
            "{}: not an answer: {}",
            path.display(),
            preview(&answer)
        ))),
    }
}

/// The start of a line, for an error message.
fn preview(line: &[u8]) -> String {
    const MAX: usize = 120;
    let text = String::from_utf8_lossy(line);
    match text.char_indices().nth(MAX) {
        Some((end, _)) => format!("{:?}…", &text[..end]),
        None => format!("{text:?}"),
    }
}

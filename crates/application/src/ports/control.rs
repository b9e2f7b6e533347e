//! [`ControlChannel`]: how a command reaches the process that writes a run.
//!
//! Only a run's writer (the holder of its [`RunLock`](super::RunLock))
//! appends to its log, so a command from another process (`awr pause`,
//! `awr send`, an HTTP client of another server) cannot write
//! `command:received` itself while that writer lives. It hands the raw
//! command to the writer over this channel and waits for the writer's
//! answer, which the writer gives only after it has recorded the command.
//! When nobody listens ([`ControlError::NoWriter`]), the caller takes the
//! run's lock and records the command itself.

use async_trait::async_trait;
use domain::{Caller, RunId};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use super::Clock;

/// Why a command could not be delivered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ControlError {
    /// No live writer listens for the run's commands.
    #[error("run {0} has no live writer")]
    NoWriter(RunId),
    /// The endpoint could not be opened, or the exchange broke off (names
    /// the endpoint and what failed).
    #[error("control channel I/O error: {0}")]
    Io(String),
    /// The other side answered something that is not an answer.
    #[error("control channel protocol error: {0}")]
    Protocol(String),
}

/// The writer's answer to a command, given once it is recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CommandReply {
    /// Whether the command was accepted (`command:received`'s `accepted`).
    pub accepted: bool,
    /// Offset of its `command:received` event.
    pub offset: u64,
    /// Why it was rejected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One command on its way to the writer, with the way back for its answer.
#[derive(Debug)]
pub struct Delivery {
    /// The command exactly as sent (recorded as is, valid or not).
    pub raw: Value,
    /// Who sent it (`command:received`'s `by`).
    pub by: Option<Caller>,
    /// Where the answer goes; dropping it tells the sender the writer gave
    /// no answer.
    pub reply: ReplyTo,
}

impl Delivery {
    /// A delivery of `raw` sent by `by`, and the endpoint's end of its
    /// answer: for implementations of [`ControlChannel`].
    pub fn new(raw: Value, by: Option<Caller>) -> (Self, Answer) {
        let (tx, rx) = oneshot::channel();
        (
            Self {
                raw,
                by,
                reply: ReplyTo(tx),
            },
            Answer(rx),
        )
    }
}

/// How long a writer waits for its endpoint to pass an answer on. Writing
/// one short line to a local socket takes microseconds; the bound only
/// keeps a broken endpoint from holding the writer up.
const HANDOVER: std::time::Duration = std::time::Duration::from_secs(2);

/// The writer's end of a command's answer.
///
/// [`ReplyTo::send`] returns once the endpoint has passed the answer on,
/// not when it was queued: a writer that stops right after a `pause` or a
/// `cancel` would otherwise exit with the answer unsent, and its sender,
/// seeing no answer, would take the command as undelivered and record it a
/// second time.
#[derive(Debug)]
pub struct ReplyTo(oneshot::Sender<(CommandReply, Handover)>);

impl ReplyTo {
    /// Hands `reply` to the endpoint and waits until it has passed it on
    /// (or gave up: its client left), at most a couple of seconds on `clock`.
    pub async fn send(self, reply: CommandReply, clock: &dyn Clock) {
        let (handover, passed) = oneshot::channel();
        if self.0.send((reply, Handover { _passed: handover })).is_ok() {
            // Ends when the endpoint drops its `Handover`, whatever came of
            // the write.
            let waited = clock.sleep(HANDOVER);
            futures::pin_mut!(passed);
            let _ = futures::future::select(passed, waited).await;
        }
    }
}

/// The endpoint's end of a command's answer.
#[derive(Debug)]
pub struct Answer(oneshot::Receiver<(CommandReply, Handover)>);

impl Answer {
    /// The writer's answer, with the [`Handover`] to drop once it is passed
    /// on; `None` when the writer gave none.
    pub async fn recv(self) -> Option<(CommandReply, Handover)> {
        self.0.await.ok()
    }
}

/// Held by the endpoint while it passes an answer on; dropping it lets the
/// writer go on.
#[derive(Debug)]
pub struct Handover {
    _passed: oneshot::Sender<()>,
}

/// A writer's open command endpoint. Commands arrive on `commands` until it
/// is dropped; dropping it closes the endpoint.
pub struct Listener {
    /// The commands, in arrival order.
    pub commands: mpsc::Receiver<Delivery>,
    /// The implementation's hold on the endpoint (a bound socket, a task).
    _held: Box<dyn Send + Sync>,
}

impl Listener {
    /// A listener whose endpoint stays open while `held` lives: for implementations.
    pub fn new(commands: mpsc::Receiver<Delivery>, held: impl Send + Sync + 'static) -> Self {
        Self {
            commands,
            _held: Box::new(held),
        }
    }
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener").finish_non_exhaustive()
    }
}

/// Carries commands to a run's live writer.
///
/// Between the tasks of one process (awr-infrastructure's `UnixControl`
/// does it between processes):
///
/// ```
/// # extern crate domain as awr_domain;
/// use std::collections::HashMap;
/// use std::sync::{Arc, Mutex};
///
/// use awr_application::ports::{CommandReply, ControlChannel, ControlError, Delivery, Listener};
/// use awr_domain::{Caller, RunId};
/// use awr_infrastructure::clock::SystemClock;
/// use serde_json::{Value, json};
/// use tokio::sync::mpsc;
///
/// /// Each listening writer's queue, by run.
/// #[derive(Default)]
/// struct InProcess(Mutex<HashMap<RunId, mpsc::Sender<Delivery>>>);
///
/// #[async_trait::async_trait]
/// impl ControlChannel for InProcess {
///     async fn listen(&self, run_id: RunId) -> Result<Listener, ControlError> {
///         let (tx, rx) = mpsc::channel(8);
///         self.0.lock().map_err(|e| ControlError::Io(e.to_string()))?.insert(run_id, tx);
///         Ok(Listener::new(rx, ()))
///     }
///     async fn deliver(&self, run_id: RunId, raw: &Value, by: Option<Caller>) -> Result<CommandReply, ControlError> {
///         let writer = self.0.lock().map_err(|e| ControlError::Io(e.to_string()))?.get(&run_id).cloned();
///         let (delivery, answer) = Delivery::new(raw.clone(), by);
///         match writer {
///             // A writer whose listener was dropped has gone too.
///             Some(writer) if writer.send(delivery).await.is_ok() => {}
///             _ => return Err(ControlError::NoWriter(run_id)),
///         }
///         let answered = answer.recv().await.ok_or_else(|| ControlError::Io("no answer".into()))?;
///         Ok(answered.0) // dropping the handover lets the writer go on
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let channel = Arc::new(InProcess::default());
/// let run: RunId = "00000000-0000-4000-8000-000000000001".parse()?;
/// let pause = json!({"type": "pause"});
/// let nobody = channel.deliver(run, &pause, None).await;
/// assert!(matches!(nobody, Err(ControlError::NoWriter(_))), "{nobody:?}");
///
/// // The writer's side, as the runtime plays it: record the command, then answer.
/// let mut listener = channel.listen(run).await?;
/// let writer = tokio::spawn(async move {
///     let delivery = listener.commands.recv().await.expect("a command");
///     let by = delivery.by.as_ref().map(|c| c.as_str().to_owned());
///     let answered = CommandReply { accepted: true, offset: 7, error: None };
///     // It waits, on the run's clock, for the answer to be passed on.
///     delivery.reply.send(answered, &SystemClock).await;
///     by
/// });
/// let reply = channel.deliver(run, &pause, Some(Caller::new("ops")?)).await?;
/// assert_eq!((reply.accepted, reply.offset), (true, 7));
/// assert_eq!(writer.await?.as_deref(), Some("ops"));
/// # Ok(())
/// # }
/// ```
#[cfg_attr(all(any(test, feature = "testing"), not(doctest)), mockall::automock)]
#[async_trait]
pub trait ControlChannel: Send + Sync + 'static {
    /// Opens the command endpoint of `run_id`, for its writer: the caller
    /// holds the run's lock, so an endpoint left over by a dead writer may
    /// be replaced.
    async fn listen(&self, run_id: RunId) -> Result<Listener, ControlError>;

    /// Hands `raw`, sent by `by`, to the run's writer and waits for its
    /// answer; [`ControlError::NoWriter`] when no writer listens.
    async fn deliver(
        &self,
        run_id: RunId,
        raw: &Value,
        by: Option<Caller>,
    ) -> Result<CommandReply, ControlError>;
}

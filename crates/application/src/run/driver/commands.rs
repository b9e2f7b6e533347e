//! Commands that reach the live writer of a run (design §7): each is
//! judged by [`crate::run::commands::judge`], recorded, made durable and
//! answered before it takes effect.

use domain::{EventKind, RuntimeCommand};

use super::{Driver, Stop};
use crate::ports::{CommandReply, Delivery, Listener};
use crate::run::ExecutorError;
use crate::run::commands;
use crate::run::control::Cancel;
use crate::run::recorder::RUN_LEVEL;

impl Driver {
    /// A command from outside: judged, recorded (accepted or not) and
    /// made durable, answered, then carried out.
    pub(super) async fn command(
        &mut self,
        delivery: Delivery,
    ) -> Result<Option<Stop>, ExecutorError> {
        // A child run pauses with its parent, never alone: its parent,
        // waiting on it, would take the pause for the child's failure.
        let verdict = commands::judge(self.state(), &self.workflow, &delivery.raw, true)
            .and_then(|command| match command {
                RuntimeCommand::Pause if self.parent_pausing.is_some() => Err(
                    "this run is a child run (`call_workflow`): pause its parent run, which pauses it too"
                        .to_owned(),
                ),
                other => Ok(other),
            });
        let error = verdict.as_ref().err().cloned();
        let received = EventKind::CommandReceived {
            command: delivery.raw,
            accepted: error.is_none(),
            error: error.clone(),
            by: delivery.by,
        };
        let event = self.rec.emit(RUN_LEVEL, received).await?;
        self.rec.checkpoint().await?;
        let reply = CommandReply {
            accepted: error.is_none(),
            offset: event.offset.get(),
            error,
        };
        // A sender that stopped waiting learns the outcome from the log.
        delivery.reply.send(reply, self.ports.clock.as_ref()).await;
        Ok(match verdict {
            Ok(RuntimeCommand::Pause) => Some(Stop::Paused("paused by a command".to_owned())),
            Ok(RuntimeCommand::Cancel { reason }) => Some(Stop::Cancelled(
                reason.unwrap_or_else(|| "cancelled by a command".to_owned()),
            )),
            _ => None,
        })
    }
}

impl Driver {
    /// A cancellation from this process (a signal, the library's
    /// [`crate::run::control::Cancel`]): recorded as the `cancel` command
    /// it is, and made durable, before the run winds down.
    pub(super) async fn cancelled(&mut self, reason: String) -> Result<Stop, ExecutorError> {
        let command = RuntimeCommand::Cancel {
            reason: Some(reason.clone()),
        };
        let received = EventKind::CommandReceived {
            command: serde_json::to_value(&command).unwrap_or_default(),
            accepted: true,
            error: None,
            by: None,
        };
        self.rec.emit(RUN_LEVEL, received).await?;
        self.rec.checkpoint().await?;
        Ok(Stop::Cancelled(reason))
    }
}

impl Driver {
    /// The parent of this child run paused: the child pauses too, recorded
    /// as the `pause` command it is, and made durable, before it winds
    /// down. A resume of the parent continues it.
    pub(super) async fn paused_with_parent(&mut self) -> Result<Stop, ExecutorError> {
        let received = EventKind::CommandReceived {
            command: serde_json::to_value(RuntimeCommand::Pause).unwrap_or_default(),
            accepted: true,
            error: None,
            by: None,
        };
        self.rec.emit(RUN_LEVEL, received).await?;
        self.rec.checkpoint().await?;
        // Fired once: the pause below does not come back to the loop.
        self.parent_pausing = None;
        Ok(Stop::Paused("its parent run paused".to_owned()))
    }
}

/// Ends when the parent run pauses; never for a run with no parent.
pub(super) async fn parent_paused(pausing: Option<&Cancel>) {
    match pausing {
        Some(pausing) => pausing.cancelled().await,
        None => std::future::pending().await,
    }
}

/// The next command for the run, if it takes commands at all.
pub(super) async fn next(listener: &mut Option<Listener>) -> Option<Delivery> {
    match listener {
        Some(listener) => listener.commands.recv().await,
        None => std::future::pending().await,
    }
}

//! Commands that reach the live writer of a run (design §7): each is
//! decided by `step::command` (judged, what is recorded, the stop it asks
//! for), recorded here, made durable and answered before it takes effect.

use super::{Driver, Stop};
use crate::ports::{CommandReply, Delivery, Listener};
use crate::run::ExecutorError;
use crate::run::control::Cancel;
use crate::run::recorder::RUN_LEVEL;
use crate::run::step::command;

impl Driver {
    /// A command from outside: judged, recorded (accepted or not) and
    /// made durable, answered, then carried out.
    pub(super) async fn command(
        &mut self,
        delivery: Delivery,
    ) -> Result<Option<Stop>, ExecutorError> {
        let child = self.parent_pausing.is_some();
        let received = command::received(
            self.state(),
            &self.workflow,
            delivery.raw,
            delivery.by,
            child,
        );
        let event = self.rec.emit(RUN_LEVEL, received.event).await?;
        self.rec.checkpoint().await?;
        let reply = CommandReply {
            accepted: received.error.is_none(),
            offset: event.offset.get(),
            error: received.error,
        };
        // A sender that stopped waiting learns the outcome from the log.
        delivery.reply.send(reply, self.ports.clock.as_ref()).await;
        Ok(received.stop)
    }

    /// A cancellation from this process (a signal, the library's
    /// [`crate::run::control::Cancel`]): recorded as the `cancel` command
    /// it is, and made durable, before the run winds down.
    pub(super) async fn cancelled(&mut self, reason: String) -> Result<Stop, ExecutorError> {
        let (received, stop) = command::cancelled_here(reason);
        self.rec.emit(RUN_LEVEL, received).await?;
        self.rec.checkpoint().await?;
        Ok(stop)
    }

    /// The parent of this child run paused: the child pauses too, recorded
    /// and made durable before it winds down.
    pub(super) async fn paused_with_parent(&mut self) -> Result<Stop, ExecutorError> {
        let (received, stop) = command::paused_with_parent();
        self.rec.emit(RUN_LEVEL, received).await?;
        self.rec.checkpoint().await?;
        // Fired once: the pause below does not come back to the loop.
        self.parent_pausing = None;
        Ok(stop)
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

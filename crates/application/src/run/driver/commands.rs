//! Where the driver's loop waits for commands: from other processes (the
//! run's listener) and from a parent run that pauses. Each is decided by
//! `step::command` and carried out by [`Driver::apply`](super::Driver):
//! recorded, made durable and answered before it takes effect.

use std::pin::Pin;

use crate::ports::{Delivery, Listener, RunLock};
use crate::run::control::Cancel;

/// Ends when the parent run pauses; never for a run with no parent.
pub(super) async fn parent_paused(pausing: Option<&Cancel>) {
    match pausing {
        Some(pausing) => pausing.cancelled().await,
        None => std::future::pending().await,
    }
}

/// Completes when `fired` does; never when there is none.
pub(super) async fn until<F: Future<Output = ()>>(fired: Pin<&mut Option<F>>) {
    match fired.as_pin_mut() {
        Some(fired) => fired.await,
        None => std::future::pending().await,
    }
}

/// Completes when the store learns this writer lost the run's lock.
pub(super) async fn lost(lock: Option<&RunLock>) {
    match lock {
        Some(lock) => lock.lost().await,
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

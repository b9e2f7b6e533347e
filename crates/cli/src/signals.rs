//! SIGINT and SIGTERM during a run: the first cancels the run, which then
//! records `flow:cancelled`, kills its agents' process groups and saves its
//! final snapshot; a second one ends the process at once. Every event is
//! one `write`, so even then the log stays a clean prefix of the run.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use application::Cancel;
use tokio::signal::unix::{SignalKind, signal};

/// Which signal cancelled the run, for the exit code.
pub struct Signals {
    received: Arc<AtomicU8>,
}

impl Signals {
    /// 128 + the signal's number (130 for SIGINT, 143 for SIGTERM); 130 when
    /// the run was cancelled some other way.
    pub fn exit_code(&self) -> u8 {
        match self.received.load(Ordering::SeqCst) {
            0 => 130,
            n => 128 + n,
        }
    }
}

/// Cancels `cancel` on the first SIGINT or SIGTERM, and exits on the second.
pub fn cancel_on_signal(cancel: Cancel) -> Signals {
    notify_on_signal(cancel, "cancelling the run")
}

/// Fires `cancel` on the first SIGINT or SIGTERM, saying on stderr that awr
/// is `doing` what it asks, and exits on the second.
pub fn notify_on_signal(cancel: Cancel, doing: &'static str) -> Signals {
    let received = Arc::new(AtomicU8::new(0));
    let seen = Arc::clone(&received);
    tokio::spawn(async move {
        let (Ok(mut int), Ok(mut term)) = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) else {
            tracing::warn!("cannot listen for SIGINT/SIGTERM; a signal ends awr at once");
            return;
        };
        let mut first = true;
        loop {
            let (number, name) = tokio::select! {
                _ = int.recv() => (2u8, "SIGINT"),
                _ = term.recv() => (15u8, "SIGTERM"),
            };
            if !first {
                crate::note(&format!("awr: {name} again: exiting now"));
                std::process::exit(i32::from(128 + number));
            }
            first = false;
            seen.store(number, Ordering::SeqCst);
            crate::note(&format!(
                "awr: {name}: {doing} (send it again to exit at once)"
            ));
            cancel.cancel(format!("interrupted by {name}"));
        }
    });
    Signals { received }
}

//! Cancellation of a run and of its node runs.
//!
//! Cancellation is a tree: the run's [`Cancel`] is the parent of one token
//! per node run, and a `call_workflow` child run's is a child of its node
//! run's. Cancelling a node run drops its provider stream or command future,
//! and the adapters kill the whole process group on drop (see the
//! `QueryFn` and `CommandRunner` contracts). Budgets and retries are
//! transitions of their own (`run::step::{budget, retry}`).

use std::sync::{Arc, OnceLock};

use tokio_util::sync::CancellationToken;

/// A run's cancellation: a token plus the reason it fired with.
#[derive(Debug, Clone)]
pub struct Cancel {
    token: CancellationToken,
    /// Fired to hand the run over (a worker that drains): its writer stops
    /// at the next safe point, as a pause does, records nothing of it, and
    /// releases the run for another to continue. Not a child's: a child
    /// run pauses with its parent and is continued with it.
    handover: CancellationToken,
    /// Its own reason first, then its ancestors': a child cancelled with
    /// its parent reports the parent's reason.
    reasons: Vec<Arc<OnceLock<String>>>,
}

impl Default for Cancel {
    fn default() -> Self {
        Self::new()
    }
}

impl Cancel {
    /// A cancellation that has not fired.
    pub fn new() -> Self {
        Self {
            token: CancellationToken::new(),
            handover: CancellationToken::new(),
            reasons: vec![Arc::new(OnceLock::new())],
        }
    }

    /// Asks the run's writer to hand the run over: it stops at the next
    /// safe point, as a pause does, records nothing of it, and releases the
    /// run unended for another writer to continue. A child run's own is
    /// not asked: a child pauses with its parent and goes on with it.
    pub fn hand_over(&self) {
        self.handover.cancel();
    }

    /// Whether [`Cancel::hand_over`] was asked.
    pub fn is_handed_over(&self) -> bool {
        self.handover.is_cancelled()
    }

    /// Completes when [`Cancel::hand_over`] is asked.
    pub async fn handed_over(&self) {
        self.handover.cancelled().await;
    }

    /// Fires it; the first reason given is the one recorded.
    pub fn cancel(&self, reason: impl Into<String>) {
        if let Some(own) = self.reasons.first() {
            let _ = own.set(reason.into());
        }
        self.token.cancel();
    }

    /// Whether it fired.
    pub fn is_cancelled(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Why it fired (`None` before it did).
    pub fn reason(&self) -> Option<&str> {
        self.reasons
            .iter()
            .find_map(|r| r.get())
            .map(String::as_str)
    }

    /// Completes when it fires.
    pub async fn cancelled(&self) {
        self.token.cancelled().await;
    }

    /// A child: fires with its parent, or alone (with its own reason).
    pub fn child(&self) -> Cancel {
        let mut reasons = Vec::with_capacity(self.reasons.len() + 1);
        reasons.push(Arc::new(OnceLock::new()));
        reasons.extend(self.reasons.iter().cloned());
        Cancel {
            token: self.token.child_token(),
            handover: CancellationToken::new(),
            reasons,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_child_fires_with_its_parent_and_keeps_the_first_reason() {
        let run = Cancel::new();
        let node = run.child();
        assert!(!node.is_cancelled());
        run.cancel("interrupted");
        run.cancel("later");
        assert!(node.is_cancelled());
        assert_eq!(run.reason(), Some("interrupted"));
        let lone = Cancel::new();
        let child = lone.child();
        child.cancel("node only");
        assert!(!lone.is_cancelled());
        assert_eq!(child.reason(), Some("node only"));
        assert_eq!(node.reason(), Some("interrupted"));
    }
}

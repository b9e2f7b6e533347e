//! Cancellation of a run and of its node runs.
//!
//! Cancellation is a tree: the run's [`Cancel`] is the parent of one token
//! per node run, and a `call_workflow` child run's is a child of its node
//! run's. Cancelling a node run drops its provider stream or command future,
//! and the adapters kill the whole process group on drop (see the
//! `QueryFn` and `CommandRunner` contracts). Budgets and retries are
//! transitions of their own (`run::step::{budget, retry}`).

use std::sync::{Arc, OnceLock};

use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// A run's cancellation: a token plus the reason it fired with. A clone is
/// the same cancellation, shared: one count, as every node run's task and
/// the driver each hold theirs.
#[derive(Debug, Clone)]
pub struct Cancel {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    token: CancellationToken,
    /// Fired to hand the run over (a worker that drains): its writer stops
    /// at the next safe point, as a pause does, records nothing of it, and
    /// releases the run for another to continue. None for a child: a child
    /// run pauses with its parent and is continued with it.
    handover: Option<CancellationToken>,
    /// Its own reason; a child cancelled with its parent reports the
    /// parent's.
    reason: OnceLock<String>,
    parent: Option<Cancel>,
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
            inner: Arc::new(Inner {
                token: CancellationToken::new(),
                handover: Some(CancellationToken::new()),
                reason: OnceLock::new(),
                parent: None,
            }),
        }
    }

    /// Asks the run's writer to hand the run over: it stops at the next
    /// safe point, as a pause does, records nothing of it, and releases the
    /// run unended for another writer to continue. A child's is never
    /// asked (this does nothing): a child pauses with its parent and goes
    /// on with it.
    pub fn hand_over(&self) {
        if let Some(handover) = &self.inner.handover {
            handover.cancel();
        }
    }

    /// Whether [`Cancel::hand_over`] was asked.
    pub fn is_handed_over(&self) -> bool {
        self.inner
            .handover
            .as_ref()
            .is_some_and(CancellationToken::is_cancelled)
    }

    /// Completes when [`Cancel::hand_over`] is asked (a child's, never).
    pub async fn handed_over(&self) {
        match &self.inner.handover {
            Some(handover) => handover.cancelled().await,
            None => std::future::pending().await,
        }
    }

    /// [`Cancel::handed_over`] as a future that owns its token (`None` for
    /// a child, whose hand-over never comes): see [`Cancel::fired`].
    pub fn hand_over_asked(&self) -> Option<WaitForCancellationFutureOwned> {
        (self.inner.handover.clone()).map(CancellationToken::cancelled_owned)
    }

    /// Fires it; the first reason given is the one recorded. One that a
    /// parent fired already keeps the parent's reason: a node run that the
    /// driver cancels while it winds down has not run since its run was
    /// cancelled, and its child run must record why the run was.
    pub fn cancel(&self, reason: impl Into<String>) {
        if !self.inner.token.is_cancelled() {
            let _ = self.inner.reason.set(reason.into());
        }
        self.inner.token.cancel();
    }

    /// Whether it fired.
    pub fn is_cancelled(&self) -> bool {
        self.inner.token.is_cancelled()
    }

    /// Why it fired (`None` before it did): its own reason, else its
    /// nearest ancestor's.
    pub fn reason(&self) -> Option<&str> {
        let mut at = Some(self);
        while let Some(cancel) = at {
            if let Some(reason) = cancel.inner.reason.get() {
                return Some(reason);
            }
            at = cancel.inner.parent.as_ref();
        }
        None
    }

    /// Completes when it fires.
    pub async fn cancelled(&self) {
        self.inner.token.cancelled().await;
    }

    /// [`Cancel::cancelled`] as a future that owns its token, which a loop
    /// keeps across its turns: its waiter is registered once, where a new
    /// `cancelled()` each turn registers one and drops it again. It may be
    /// polled again once complete (it stays complete).
    pub fn fired(&self) -> WaitForCancellationFutureOwned {
        self.inner.token.clone().cancelled_owned()
    }

    /// A child: fires with its parent, or alone (with its own reason).
    pub fn child(&self) -> Cancel {
        Cancel {
            inner: Arc::new(Inner {
                token: self.inner.token.child_token(),
                handover: None,
                reason: OnceLock::new(),
                parent: Some(self.clone()),
            }),
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
        // A grandchild reports its nearest ancestor's reason.
        let grandchild = child.child();
        assert!(grandchild.is_cancelled());
        assert_eq!(grandchild.reason(), Some("node only"));
        grandchild.cancel("too late");
        assert_eq!(
            grandchild.reason(),
            Some("node only"),
            "its parent's reason stays"
        );
        // A clone is the same cancellation.
        let run = Cancel::new();
        let clone = run.clone();
        clone.cancel("by the clone");
        assert_eq!(run.reason(), Some("by the clone"));
    }

    #[tokio::test]
    async fn a_kept_future_completes_when_fired_and_stays_complete() {
        use std::future::Future;
        use std::task::{Context, Waker};
        let run = Cancel::new();
        let fired = run.fired();
        tokio::pin!(fired);
        let mut cx = Context::from_waker(Waker::noop());
        assert!(fired.as_mut().poll(&mut cx).is_pending());
        assert!(fired.as_mut().poll(&mut cx).is_pending(), "still waiting");
        run.cancel("stop");
        assert!(fired.as_mut().poll(&mut cx).is_ready());
        assert!(
            fired.as_mut().poll(&mut cx).is_ready(),
            "a loop's next turn finds it complete again"
        );
        assert!(run.child().hand_over_asked().is_none());
        let asked = run.hand_over_asked().unwrap();
        tokio::pin!(asked);
        assert!(asked.as_mut().poll(&mut cx).is_pending());
        run.hand_over();
        assert!(asked.as_mut().poll(&mut cx).is_ready());
    }

    #[tokio::test]
    async fn a_child_is_never_handed_over() {
        let run = Cancel::new();
        let child = run.child();
        run.hand_over();
        child.hand_over();
        assert!(run.is_handed_over());
        assert!(!child.is_handed_over());
        run.handed_over().await;
        let waited = tokio::time::timeout(std::time::Duration::ZERO, child.handed_over()).await;
        assert!(waited.is_err(), "a child's hand-over never completes");
    }
}

//! Time and fresh ids, behind ports so that tests and replays can pin them.

use std::time::Duration;

use domain::Timestamp;
use futures::future::BoxFuture;
use uuid::Uuid;

/// Wall time, and waiting on it.
///
/// Every wait of the application (a retry's backoff, a deadline) goes
/// through [`Clock::sleep`], so a test or a replay with a virtual clock
/// waits no real time.
#[cfg_attr(any(test, feature = "testing"), mockall::automock)]
pub trait Clock: Send + Sync + 'static {
    /// Now.
    fn now(&self) -> Timestamp;

    /// Completes once `duration` has passed on this clock.
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()>;
}

/// Fresh UUIDs (v4 shaped, so they can be run ids).
#[cfg_attr(any(test, feature = "testing"), mockall::automock)]
pub trait IdGen: Send + Sync + 'static {
    /// A new id.
    fn uuid(&self) -> Uuid;
}

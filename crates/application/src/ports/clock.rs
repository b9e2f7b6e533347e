//! Time and fresh ids, behind ports so that tests and replays can pin them.

use domain::Timestamp;
use uuid::Uuid;

/// Wall time.
#[cfg_attr(test, mockall::automock)]
pub trait Clock: Send + Sync + 'static {
    /// Now.
    fn now(&self) -> Timestamp;
}

/// Fresh UUIDs (v4 shaped, so they can be run ids).
#[cfg_attr(test, mockall::automock)]
pub trait IdGen: Send + Sync + 'static {
    /// A new id.
    fn uuid(&self) -> Uuid;
}

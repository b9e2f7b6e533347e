//! Live presentation of a run in the same process (terminal progress).
//!
//! Observers see an event only after the store accepted it (durability
//! contract: disk first), and must not block: they run on the runner's task.

use domain::RuntimeEvent;

/// Receives each event once it is recorded.
pub trait RunObserver: Send + Sync {
    /// Called in offset order.
    fn on_event(&self, event: &RuntimeEvent);
}

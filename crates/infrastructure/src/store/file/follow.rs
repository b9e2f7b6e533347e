//! A run of the file store as its followers read it: the [`LogSource`]
//! `follow_log` polls.

use std::time::Duration;

use application::ports::StoreError;
use domain::RuntimeEvent;
use tokio::sync::Notify;

use super::super::LogSource;
use super::RunHandle;

impl RunHandle {
    /// Offset of the last event of the log (0 for none).
    pub(super) fn last(&self) -> Result<u64, StoreError> {
        self.with_log(false, |log, paths| log.last_offset(paths))
    }
}

impl LogSource for RunHandle {
    async fn read_after(&self, after: u64, limit: usize) -> Result<Vec<RuntimeEvent>, StoreError> {
        self.read(after, limit)
    }

    async fn last(&self) -> Result<u64, StoreError> {
        RunHandle::last(self)
    }

    fn changed(&self) -> &Notify {
        &self.changed
    }

    fn poll_interval(&self) -> Option<Duration> {
        Some(self.follow_poll)
    }
}

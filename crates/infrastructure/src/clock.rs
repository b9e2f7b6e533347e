//! Implementations of the [`Clock`] and [`IdGen`] ports.
//!
//! Production wiring uses [`SystemClock`] and [`RandomIds`]. Replays,
//! determinism checks and tests use [`FixedClock`] and [`SeededIds`]: both
//! produce the same sequence every time they are built with the same start,
//! so two runs of one recording write byte-identical logs.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::future::BoxFuture;

use application::ports::{Clock, IdGen};
use chrono::Utc;
use domain::Timestamp;
use uuid::Uuid;

/// The machine's wall clock (UTC, truncated to milliseconds like every
/// timestamp the log stores).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    /// Milliseconds read straight off the system clock: one calendar
    /// conversion, where `Utc::now()` truncated to milliseconds makes two
    /// (a clock read is made several times a step).
    fn now(&self) -> Timestamp {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .ok()
            .and_then(|since| i64::try_from(since.as_millis()).ok())
            .map_or_else(|| Timestamp::new(Utc::now()), Timestamp::from_millis)
    }

    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep(duration))
    }
}

/// Fresh random UUID v4s, for run ids, event ids and node run ids in live runs.
#[derive(Debug, Clone, Copy, Default)]
pub struct RandomIds;

impl IdGen for RandomIds {
    fn uuid(&self) -> Uuid {
        Uuid::new_v4()
    }
}

/// A clock that starts at a given instant and advances exactly 1 ms per
/// call, so a replay produces the same timestamps every time while
/// timestamps still increase (durations stay positive and ordered).
#[derive(Debug)]
pub struct FixedClock {
    /// Milliseconds since the epoch that the next call returns; atomic so the
    /// clock can be shared between concurrent nodes without a lock.
    next_millis: AtomicI64,
}

impl FixedClock {
    /// A clock whose first reading is `start`.
    pub fn starting_at(start: Timestamp) -> Self {
        Self {
            next_millis: AtomicI64::new(start.as_millis()),
        }
    }
}

impl Default for FixedClock {
    /// Starts at 2026-01-01T00:00:00.000Z, an arbitrary but stable instant.
    fn default() -> Self {
        Self::starting_at(Timestamp::from_millis(1_767_225_600_000))
    }
}

impl Clock for FixedClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_millis(self.next_millis.fetch_add(1, Ordering::Relaxed))
    }

    /// Virtual time: the clock moves on by `duration` and the wait ends at
    /// once, so a replay of a run that waited takes no real time.
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        let millis = i64::try_from(duration.as_millis()).unwrap_or(i64::MAX);
        self.next_millis.fetch_add(millis, Ordering::Relaxed);
        Box::pin(std::future::ready(()))
    }
}

/// Deterministic UUIDs, the ids a replay mints: the record/replay
/// module's, where the canonical form of a replay relies on them.
pub use application::recording::SeededIds;

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use domain::RunId;

    #[test]
    fn fixed_clock_advances_one_millisecond_per_call() {
        let clock = FixedClock::starting_at(Timestamp::from_millis(1_000));
        assert_eq!(clock.now().as_millis(), 1_000);
        assert_eq!(clock.now().as_millis(), 1_001);
        assert_eq!(clock.now().as_millis(), 1_002);
    }

    #[test]
    fn system_sources_produce_valid_values() {
        let before = Utc::now().timestamp_millis();
        let now = SystemClock.now();
        let after = Utc::now().timestamp_millis();
        assert!((before..=after).contains(&now.as_millis()), "{now}");
        // Whole milliseconds, as the log's text keeps them.
        assert_eq!(now.as_datetime().timestamp_subsec_nanos() % 1_000_000, 0);
        assert_eq!(now.to_string().parse::<Timestamp>().unwrap(), now);
        RunId::new(RandomIds.uuid()).unwrap();
    }
}

//! Implementations of the [`Clock`] and [`IdGen`] ports.
//!
//! Production wiring uses [`SystemClock`] and [`RandomIds`]. Replays,
//! determinism checks and tests use [`FixedClock`] and [`SeededIds`]: both
//! produce the same sequence every time they are built with the same start,
//! so two runs of one recording write byte-identical logs.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::future::BoxFuture;

use application::ports::{Clock, IdGen};
use chrono::Utc;
use domain::Timestamp;
use uuid::{Builder, Uuid};

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

/// Deterministic UUIDs: the seed in the first eight bytes and a counter in
/// the last eight, with the version-4 and RFC 4122 variant bits set, so each
/// value is a valid run id and a replay with the same seed gets the same ids.
#[derive(Debug)]
pub struct SeededIds {
    /// Distinguishes generators (e.g. two recordings) that would otherwise
    /// produce the same sequence.
    seed: u64,
    /// Next counter value; atomic so the generator can be shared without a lock.
    counter: AtomicU64,
}

impl SeededIds {
    /// A generator whose sequence depends only on `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            counter: AtomicU64::new(1),
        }
    }
}

impl Default for SeededIds {
    /// Seed 0: the sequence tests usually want.
    fn default() -> Self {
        Self::new(0)
    }
}

impl IdGen for SeededIds {
    fn uuid(&self) -> Uuid {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&self.seed.to_be_bytes());
        bytes[8..].copy_from_slice(&n.to_be_bytes());
        Builder::from_random_bytes(bytes).into_uuid()
    }
}

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
    fn seeded_ids_are_deterministic_v4_run_ids() {
        let a = SeededIds::new(7);
        let b = SeededIds::new(7);
        let first: Vec<Uuid> = (0..5).map(|_| a.uuid()).collect();
        let second: Vec<Uuid> = (0..5).map(|_| b.uuid()).collect();
        assert_eq!(first, second);
        let mut unique = first.clone();
        unique.dedup();
        assert_eq!(unique.len(), 5);
        for id in first {
            assert_eq!(id.get_version_num(), 4);
            assert_eq!(id.get_variant(), uuid::Variant::RFC4122);
            RunId::new(id).unwrap();
        }
        assert_ne!(SeededIds::new(8).uuid(), SeededIds::new(7).uuid());
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

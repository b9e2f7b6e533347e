//! The ids a replay mints: from a seed, the same every time.

use std::sync::atomic::{AtomicU64, Ordering};

use uuid::{Builder, Uuid};

use crate::ports::IdGen;

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
#[allow(clippy::unwrap_used)]
mod tests {
    use domain::RunId;

    use super::*;

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
}

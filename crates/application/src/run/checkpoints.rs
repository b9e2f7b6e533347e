//! When a run's state is saved ([`CheckpointPolicy`]): snapshots and
//! deltas paid for by the log's growth, so their bytes stay a bounded share
//! of the log's.

/// When the executor writes a snapshot at a step boundary: an amortized
/// rule, in the bytes the store reports writing (design §5.1).
///
/// The log is flushed at every step boundary; the snapshot is only a cache of
/// `fold(events)`, so writing it less often loses nothing: a reader folds
/// the events after its `lastOffset`. Every snapshot rewrites the whole
/// state, which grows with the run, so a fixed cadence (every N events or
/// milliseconds) writes O(n²) bytes. Instead a snapshot is due once the log
/// has grown since the last one by at least `growth_percent` of that
/// snapshot's size (and by at least `min_log_bytes`): each snapshot is paid
/// for by as many log bytes, so all snapshots together weigh at most
/// `100 / growth_percent` times the log. Between snapshots, deltas (what
/// the state gained, see [`domain::snapshot::SnapshotDelta`]) are due on
/// the same rule with `delta_percent`, so the tail a load folds after the
/// snapshot and its deltas is at most that share of the snapshot's size
/// (or the floor), plus one step. A new run starts as if from an empty
/// snapshot (its first is due once the log reaches the floor). The first
/// after a resume is always written; so is the final one where the store
/// needs it ([`crate::ports::RunStore::needs_final_snapshot`]), and
/// elsewhere only when the rule asks for it then, so a short run on the
/// file store makes no snapshot file at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointPolicy {
    /// Log growth since the last snapshot, in percent of that snapshot's
    /// size, that makes the next one due.
    pub growth_percent: u64,
    /// Log growth (bytes) below which no snapshot is due, however small the
    /// last one: short runs do not replace a file at every step, and the
    /// tail stays cheap to fold.
    pub min_log_bytes: u64,
    /// Log growth since the last snapshot or delta, in percent of the last
    /// snapshot's size, that makes a delta due (0: no deltas). A delta costs
    /// what changed, not the whole state, so the tail a load folds shrinks
    /// to this share of the snapshot for few more bytes.
    pub delta_percent: u64,
    /// Log growth (bytes) below which no delta is due.
    pub min_delta_log_bytes: u64,
    /// Snapshot size (bytes) below which no delta is due: the tail after a
    /// small snapshot is cheap to fold, and a run's first delta creates a
    /// file, which costs a short run more than its tail.
    pub min_delta_snapshot_bytes: u64,
    /// The most the deltas since the last snapshot may weigh, in percent of
    /// the log since it: no delta is due beyond (the state's changes are
    /// then as large as the log's, and the next snapshot carries them).
    pub delta_budget_percent: u64,
}

impl CheckpointPolicy {
    /// A snapshot at every step boundary.
    pub const EVERY_STEP: CheckpointPolicy = CheckpointPolicy {
        growth_percent: 0,
        min_log_bytes: 0,
        delta_percent: 0,
        min_delta_log_bytes: 0,
        min_delta_snapshot_bytes: 0,
        delta_budget_percent: 0,
    };

    /// Whether a snapshot is due, `log_bytes` having been appended since the
    /// last one of `snapshot_bytes`.
    pub(crate) fn due(&self, log_bytes: u64, snapshot_bytes: u64) -> bool {
        let growth = snapshot_bytes.saturating_mul(self.growth_percent) / 100;
        log_bytes >= growth.max(self.min_log_bytes)
    }

    /// Whether a delta is due, `log_bytes` having been appended since the
    /// last snapshot or delta, the last snapshot being `snapshot_bytes`.
    /// `deltas_bytes` of deltas saved since it against `log_since_snapshot`
    /// appended since the snapshot.
    pub(crate) fn delta_due(
        &self,
        log_bytes: u64,
        snapshot_bytes: u64,
        deltas_bytes: u64,
        log_since_snapshot: u64,
    ) -> bool {
        let growth = snapshot_bytes.saturating_mul(self.delta_percent) / 100;
        let budget = log_since_snapshot.saturating_mul(self.delta_budget_percent) / 100;
        self.delta_percent > 0
            && snapshot_bytes >= self.min_delta_snapshot_bytes
            && log_bytes >= growth.max(self.min_delta_log_bytes)
            && deltas_bytes < budget
    }
}

impl Default for CheckpointPolicy {
    /// A snapshot once the log has grown by the snapshot's own size, and by
    /// at least 32 KiB; a delta once it has grown by a twentieth of that, and by
    /// at least 32 KiB, while the deltas weigh under half the log since the
    /// snapshot and once the snapshot is 128 KiB.
    fn default() -> Self {
        Self {
            growth_percent: 100,
            min_log_bytes: 32 * 1024,
            delta_percent: 5,
            min_delta_log_bytes: 32 * 1024,
            min_delta_snapshot_bytes: 128 * 1024,
            delta_budget_percent: 50,
        }
    }
}

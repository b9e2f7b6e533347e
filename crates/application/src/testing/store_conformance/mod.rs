//! One conformance suite for every [`RunStore`]: the contract written in
//! `crate::ports::store`, checked by the same functions against each store.
//!
//! A store's tests implement [`StoreHarness`] (fresh storage, a second
//! instance on it, and the store's own way to damage stored data) and
//! invoke [`store_conformance!`](crate::store_conformance), which expands to
//! one `#[tokio::test]` per check. The checks and their helpers are public
//! so store-specific tests can build on them.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::missing_panics_doc)]

use std::sync::Arc;
use std::time::Duration;

use domain::event::WorkflowRef;
use domain::{EventKind, Offset, RunId, RunSnapshot, RunStatus, RuntimeEvent, Timestamp};
use futures::StreamExt;
use serde_json::json;
use uuid::Uuid;

use crate::ports::{RunLock, RunStore, StoreError};

mod damage;
mod delete;
mod delta;
mod follow;
mod lock;
mod log;
mod query;

pub use self::damage::*;
pub use self::delete::*;
pub use self::delta::*;
pub use self::follow::*;
pub use self::lock::*;
pub use self::log::*;
pub use self::query::*;

/// A store under test on storage of its own, which lives as long as the harness.
pub trait StoreHarness: Send + Sync + Sized + 'static {
    /// Whether the storage can be had here: `false` (after saying why on
    /// stderr) skips the checks, for a store on a server this machine does
    /// not run. Where the server must be there, say so by failing instead.
    fn available() -> bool {
        true
    }

    /// Fresh, empty storage and a store instance on it.
    fn new() -> Self;

    /// The store instance under test (the same one on every call).
    fn store(&self) -> Arc<dyn RunStore>;

    /// A second store instance on the same storage, with its own caches,
    /// handles and locks, as another process would open it; `None` when the
    /// storage is the instance (memory), which makes the checks across
    /// instances moot.
    fn another(&self) -> Option<Arc<dyn RunStore>>;

    /// Leaves a torn record after the last event of `run`, as a crash in
    /// the middle of an append would. `false` when the store's appends
    /// cannot tear (a transaction, memory): the check is then moot.
    fn tear_tail(&self, run: RunId) -> bool;

    /// Makes the stored event at `offset` of `run` unreadable (not JSON).
    /// `false` when the store keeps no encoded form that can rot (memory).
    fn corrupt_event(&self, run: RunId, offset: u64) -> bool;

    /// What the detail of a [`StoreError::BadEvent`] at `offset` names: the
    /// file and line, or the database and row.
    fn bad_event_place(&self, run: RunId, offset: u64) -> String;

    /// Whether appends report the bytes of the events' JSON lines; `false`
    /// for a store that encodes nothing and reports 0 (see
    /// [`RunStore::append`]).
    fn weighs_appends(&self) -> bool {
        true
    }
}

/// The store under test, as the checks below name it.
struct Subject {
    store: Arc<dyn RunStore>,
}

/// Another instance on the storage of `h`, or its store when there is none.
fn other_or_same<H: StoreHarness>(h: &H) -> Arc<dyn RunStore> {
    h.another().unwrap_or_else(|| h.store())
}

impl Subject {
    fn of<H: StoreHarness>(h: &H) -> Self {
        Self { store: h.store() }
    }
}

/// Upper bound for anything that should happen "at once": generous so a
/// loaded CI machine does not flake, finite so a hung follower fails.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// A fresh run id.
pub fn new_run() -> RunId {
    RunId::new(Uuid::new_v4()).unwrap()
}

/// An event of `run` at `offset`.
pub fn event(run: RunId, offset: u64, kind: EventKind) -> RuntimeEvent {
    RuntimeEvent {
        id: Uuid::new_v4().to_string(),
        offset: Offset::new(offset).unwrap(),
        timestamp: Timestamp::from_millis(1_767_225_600_000 + offset as i64),
        run_id: run,
        node_id: None,
        node_run_id: None,
        kind,
        extra: Default::default(),
    }
}

/// A warning event of `run` at `offset`.
pub fn warning(run: RunId, offset: u64) -> RuntimeEvent {
    event(
        run,
        offset,
        EventKind::Warning {
            message: format!("event {offset}"),
            details: None,
        },
    )
}

/// The terminal `flow:completed` event of `run` at `offset`.
pub fn completed(run: RunId, offset: u64) -> RuntimeEvent {
    event(
        run,
        offset,
        EventKind::FlowCompleted {
            output: json!({"done": true}),
            duration_ms: 7,
        },
    )
}

/// Warnings of `run` at `offsets`.
pub fn warnings(run: RunId, offsets: std::ops::RangeInclusive<u64>) -> Vec<RuntimeEvent> {
    offsets.map(|o| warning(run, o)).collect()
}

/// The offsets of `events`.
pub fn offsets(events: &[RuntimeEvent]) -> Vec<u64> {
    events.iter().map(|e| e.offset.get()).collect()
}

/// A run holding offsets 1..=n (warnings), and its lock.
pub async fn run_with(store: &dyn RunStore, n: u64) -> (RunId, RunLock) {
    let run = new_run();
    let lock = store.create_run(run).await.unwrap();
    if n > 0 {
        store.append(run, &warnings(run, 1..=n)).await.unwrap();
    }
    (run, lock)
}

/// Asserts `Conflict`.
pub fn assert_conflict<T: std::fmt::Debug>(result: Result<T, StoreError>, what: &str) {
    assert!(
        matches!(result, Err(StoreError::Conflict(_))),
        "{what}: expected Conflict, got {result:?}"
    );
}

/// Asserts `NotFound(run)`.
pub fn assert_not_found<T: std::fmt::Debug>(result: Result<T, StoreError>, run: RunId, what: &str) {
    assert!(
        matches!(result, Err(StoreError::NotFound(id)) if id == run),
        "{what}: expected NotFound({run}), got {result:?}"
    );
}

/// `Locked`, with a message that names `run`.
pub fn assert_locked<T: std::fmt::Debug>(result: Result<T, StoreError>, run: RunId, what: &str) {
    match result {
        Err(StoreError::Locked(message)) => {
            assert!(message.contains(&run.to_string()), "{what}: {message}");
        }
        other => panic!("{what}: expected Locked, got {other:?}"),
    }
}

/// A snapshot of `run` with some state.
pub fn snapshot(run: RunId, last_offset: u64, status: RunStatus) -> RunSnapshot {
    let mut s = RunSnapshot::new(run);
    s.workflow = WorkflowRef {
        extra: Default::default(),
        name: "flow".into(),
        hash: "sha256:00".into(),
    };
    s.status = status;
    s.last_offset = last_offset;
    s.state.insert("k".into(), json!([1, 2, 3]));
    s
}

// ---------------------------------------------------------------- checks

/// Every check of the suite, against the
/// [`StoreHarness`](crate::testing::store_conformance::StoreHarness) `$harness`.
///
/// - `store_conformance!(Harness)` expands to one `#[tokio::test]` per check
///   (`cargo test conformance::read_windows` runs one of them);
/// - `store_conformance!(run Harness)` is a future that runs them all in
///   turn, each on fresh storage, for a program (a check that fails panics).
///   Some checks need a multi-threaded Tokio runtime.
///
/// A harness over awr-infrastructure's memory store (a store of your own
/// keeps data that can tear or rot, and says how; see [`StoreHarness`]):
///
/// ```
/// # extern crate domain as awr_domain;
/// use std::sync::Arc;
///
/// use awr_application::ports::RunStore;
/// use awr_application::store_conformance;
/// use awr_application::testing::store_conformance::StoreHarness;
/// use awr_domain::RunId;
/// use awr_infrastructure::store::MemoryRunStore;
///
/// /// The storage is the store itself: no second instance, nothing encoded.
/// struct Memory(Arc<MemoryRunStore>);
///
/// impl StoreHarness for Memory {
///     fn new() -> Self {
///         Memory(Arc::new(MemoryRunStore::new()))
///     }
///     fn store(&self) -> Arc<dyn RunStore> {
///         self.0.clone()
///     }
///     fn another(&self) -> Option<Arc<dyn RunStore>> {
///         None
///     }
///     fn tear_tail(&self, _: RunId) -> bool {
///         false
///     }
///     fn corrupt_event(&self, _: RunId, _: u64) -> bool {
///         false
///     }
///     fn bad_event_place(&self, _: RunId, _: u64) -> String {
///         String::new()
///     }
///     fn weighs_appends(&self) -> bool {
///         false // it encodes nothing
///     }
/// }
///
/// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
/// # async fn main() {
/// // Every check in turn; one that fails panics, naming the rule.
/// store_conformance!(run Memory).await;
/// # }
/// ```
///
/// In a test file, `store_conformance!(Memory);` at the top level makes
/// one `#[tokio::test]` per check instead.
#[macro_export]
macro_rules! store_conformance {
    ($harness:ty) => {
        $crate::store_conformance!(@list checks $harness);
    };
    (run $harness:ty) => {
        $crate::store_conformance!(@list sequence $harness)
    };
    (@list $mode:ident $harness:ty) => {
        $crate::store_conformance!(@$mode $harness, [
            create_twice_conflicts,
            offsets_must_continue_the_log,
            an_owned_append_takes_its_events,
            concurrent_appends_of_one_offset_admit_one,
            read_windows,
            events_round_trip_exactly,
            definitions_round_trip_by_hash,
            read_deep_in_a_long_log,
            last_offset_tracks_appends,
            unknown_runs_are_not_found,
            snapshots_round_trip_and_overwrite,
            deltas_bring_the_snapshot_forward_until_the_next_one,
            writes_report_their_encoded_size,
            list_runs_lists_every_run,
            flush_is_idempotent_and_shared,
            follow_yields_history_then_live_then_ends,
            follow_of_a_finished_run_ends_by_itself,
            many_followers_see_everything,
            unknown_event_types_round_trip,
            a_run_has_one_lock_at_a_time,
            concurrent_lockers_get_one_lock,
            writes_without_the_lock_are_refused_and_write_nothing,
            has_writer_tells_whether_the_run_is_locked,
            probes_never_make_a_lock_fail,
            a_torn_tail_is_never_read,
            a_corrupt_event_is_reported_in_its_place,
            another_instance_sees_appends_and_follows,
            another_instance_cannot_lock_or_write_a_locked_run,
            a_dropped_lock_frees_the_run_for_another_instance,
            the_fold_of_the_log_equals_the_saved_snapshot,
            many_concurrent_runs,
            a_large_payload_round_trips,
            query_runs_by_status_workflow_and_start,
            query_runs_follow_the_log_and_agree_with_the_fold,
            read_matching_by_type_node_and_time,
            read_matching_reports_a_corrupt_event_in_its_place,
            running_and_interrupted_runs_each_fill_a_page,
            counts_tell_running_from_interrupted,
            interrupted_runs_are_found_with_their_parents,
            delete_removes_the_run_whole,
            delete_refuses_a_run_with_a_writer,
            import_stores_a_whole_run_exactly,
            import_refuses_an_existing_run,
            a_failed_import_leaves_nothing,
            an_import_keeps_a_large_payload,
        ]);
    };
    (@checks $harness:ty, [$($check:ident),* $(,)?]) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $check() {
                if !<$harness as $crate::testing::store_conformance::StoreHarness>::available() {
                    return;
                }
                $crate::testing::store_conformance::$check(
                    <$harness as $crate::testing::store_conformance::StoreHarness>::new(),
                )
                .await;
            }
        )*
    };
    (@sequence $harness:ty, [$($check:ident),* $(,)?]) => {
        async {
            if !<$harness as $crate::testing::store_conformance::StoreHarness>::available() {
                return;
            }
            $(
                $crate::testing::store_conformance::$check(
                    <$harness as $crate::testing::store_conformance::StoreHarness>::new(),
                )
                .await;
            )*
        }
    };
}

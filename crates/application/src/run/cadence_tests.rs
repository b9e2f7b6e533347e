//! The snapshot cadence's structural properties (design §5.1), counted on
//! an in-memory store that reports the bytes the file store would write
//! (an event as its JSON line, a snapshot as its JSON): the bytes a long run
//! writes stay linear in its log, the tail a state load folds stays within
//! one snapshot's size, and runs of huge events neither stop the snapshots
//! nor take one at every step. Counted, not timed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use async_trait::async_trait;
use domain::RuntimeEvent;
use serde_json::json;

use super::memory_log::{Counter, MemoryLog, Tally, Ticking, chain};
use super::*;
use crate::ports::{AgentMessage, AgentRequest, AgentResult, AgentStream, QueryError, QueryFn};

/// Answers each call at once with `text_len` bytes of text for the nodes
/// in `large`, a short answer for the others.
struct Agent {
    large: fn(usize) -> bool,
    text_len: usize,
}

#[async_trait]
impl QueryFn for Agent {
    async fn query(&self, request: AgentRequest) -> Result<AgentStream, QueryError> {
        let node = request.node_id.to_string();
        let step: usize = node.trim_start_matches('n').parse().unwrap();
        let text = if (self.large)(step) {
            "x".repeat(self.text_len)
        } else {
            format!("answer of {node}")
        };
        let done = AgentMessage::Completed(AgentResult {
            text,
            num_turns: 1,
            ..AgentResult::default()
        });
        Ok(Box::pin(futures::stream::iter([Ok(done)])))
    }
}

/// Runs the chain to its end with the default policy; what the store saw.
async fn run_chain(steps: usize, agent: Agent) -> (Tally, Vec<RuntimeEvent>) {
    let (tally, events, _) = run_chain_on(MemoryLog::default(), steps, agent).await;
    (tally, events)
}

/// [`run_chain`] on `store`; also the operations it saw.
async fn run_chain_on(
    store: MemoryLog,
    steps: usize,
    agent: Agent,
) -> (Tally, Vec<RuntimeEvent>, Vec<String>) {
    let store = Arc::new(store);
    let executor = Executor::new(
        Arc::clone(&store) as Arc<dyn RunStore>,
        Arc::new(agent),
        Arc::new(Ticking::default()),
        Arc::new(Counter::default()),
    );
    let run_id = executor.create().await.unwrap();
    let request = RunRequest {
        workflow: Arc::new(chain(steps)),
        input: json!("go"),
        source: None,
        started_by: None,
    };
    let outcome = executor.run(run_id, request).await.unwrap();
    assert_eq!(outcome.status, RunStatus::Completed);
    let tally = std::mem::take(&mut *store.tally.lock().unwrap());
    let events = std::mem::take(&mut *store.events.lock().unwrap());
    let ops = std::mem::take(&mut *store.ops.lock().unwrap());
    (tally, events, ops)
}

fn small() -> Agent {
    Agent {
        large: |_| false,
        text_len: 0,
    }
}

/// A run's stop leaves a snapshot where the store keeps status from
/// snapshots; elsewhere only when the rule asks for one then: a short run
/// saves none (its readers fold its log), and one whose last step grew the
/// log past the rule's floor saves it at its terminal event.
#[tokio::test]
async fn a_stop_leaves_a_snapshot_only_where_needed_or_due() {
    let saved = |ops: &[String]| ops.iter().filter(|op| *op == "save_snapshot").count();
    let (t, events, ops) = run_chain_on(MemoryLog::default(), 3, small()).await;
    assert_eq!(saved(&ops), 1, "{ops:?}");
    assert_eq!(t.saved_at, vec![events.len() as u64]);

    let folds = || MemoryLog {
        folds_status: true,
        ..MemoryLog::default()
    };
    let (t, _, ops) = run_chain_on(folds(), 3, small()).await;
    assert_eq!(saved(&ops), 0, "{ops:?}");
    assert_eq!(t.snapshots, 0);

    let last_is_large = Agent {
        large: |step| step == 2,
        text_len: 40 * 1024,
    };
    let (t, events, _) = run_chain_on(folds(), 3, last_is_large).await;
    assert_eq!(t.saved_at, vec![events.len() as u64], "due at the stop");
}

#[tokio::test]
async fn a_10000_step_run_writes_less_than_three_times_its_log() {
    let (t, events) = run_chain(10_000, small()).await;
    let total = t.log + t.snapshots + t.deltas;
    assert!(
        total < 3 * t.log,
        "log {} B, {} snapshots {} B, {} deltas {} B: {:.2} x the log",
        t.log,
        t.saved_at.len(),
        t.snapshots,
        t.deltas_at.len(),
        t.deltas,
        total as f64 / t.log as f64
    );
    assert!(
        t.deltas_at.len() > 5 * t.saved_at.len(),
        "deltas between the snapshots: {} deltas, {} snapshots",
        t.deltas_at.len(),
        t.saved_at.len()
    );
    assert_eq!(t.saved_at.first(), Some(&1), "right after flow:started");
    assert_eq!(
        t.saved_at.last(),
        Some(&(events.len() as u64)),
        "the final one"
    );
}

#[tokio::test]
async fn the_tail_a_state_load_folds_stays_within_a_twentieth_of_the_snapshot() {
    let (t, _) = run_chain(3_000, small()).await;
    // At every append, the log after the saved snapshot or delta, the step
    // in progress aside, is no larger than a twentieth of the snapshot (or
    // the policy's floor); while the snapshot is small, no larger than the
    // snapshot (or its floor): a load reads the state and a short tail.
    let policy = CheckpointPolicy::default();
    let mut bounded_by_deltas = 0;
    for (&after, &tail) in &t.tail_after {
        let bound = if after >= policy.min_delta_snapshot_bytes {
            bounded_by_deltas += 1;
            (after * policy.delta_percent / 100).max(policy.min_delta_log_bytes)
        } else {
            after.max(policy.min_log_bytes)
        };
        assert!(
            tail <= bound,
            "a tail of {tail} B after a snapshot of {after} B ({} snapshots, {} deltas)",
            t.saved_at.len(),
            t.deltas_at.len()
        );
    }
    assert!(bounded_by_deltas > 3, "{:?}", t.tail_after);
    let (tail, after) = t.worst_tail;
    let largest = t.tail_after.keys().max().copied().unwrap_or(0);
    assert!(
        largest * policy.delta_percent / 100 > policy.min_delta_log_bytes,
        "the largest snapshot's tail is bounded by the rule, not the floor"
    );
    assert!(
        tail < largest / 4,
        "the longest tail, {tail} B after {after} B, is far under the largest snapshot, {largest} B"
    );
}

/// A store that keeps no deltas is asked once after each snapshot, not at
/// every step boundary, and its tail is bounded by the snapshot alone.
#[tokio::test]
async fn a_store_that_declines_deltas_is_asked_again_only_after_the_next_snapshot() {
    let store = MemoryLog {
        declines_deltas: true,
        ..MemoryLog::default()
    };
    let (t, _, ops) = run_chain_on(store, 3_000, small()).await;
    let asked = ops.iter().filter(|op| *op == "save_snapshot_delta").count();
    assert!(asked > 0, "deltas were offered");
    assert!(
        asked <= t.saved_at.len(),
        "{asked} deltas offered for {} snapshots",
        t.saved_at.len()
    );
    assert!(t.deltas_at.is_empty());
    let (tail, after) = t.worst_tail;
    assert!(tail <= after.max(CheckpointPolicy::default().min_log_bytes));
    assert!(
        tail > after / 2,
        "the tail reaches the snapshot's size: {tail} B after {after} B"
    );
}

#[tokio::test]
async fn one_huge_output_is_snapshotted_with_the_steps_that_carry_it_and_not_at_every_step_after() {
    const HUGE: usize = 4 << 20;
    let agent = Agent {
        large: |step| step == 10,
        text_len: HUGE,
    };
    let (t, events) = run_chain(60, agent).await;
    let started = |node: &str| {
        events
            .iter()
            .find(|e| {
                matches!(&e.kind, EventKind::NodeStarted { .. })
                    && e.node_id.as_ref().is_some_and(|n| n.as_str() == node)
            })
            .unwrap()
            .offset
            .get()
    };
    // The value is in the log twice, as `n10`'s output and `n11`'s input:
    // the steps that record it end with a snapshot (the log grew by more
    // than any snapshot before), then the 48 small steps after them weigh
    // far less than that snapshot: only the final one follows.
    let (huge_from, small_from) = (started("n10"), started("n12"));
    let at = &t.saved_at;
    assert!(
        at.iter().any(|s| (huge_from..small_from).contains(s)),
        "snapshots at {at:?}"
    );
    let after: Vec<&u64> = at.iter().filter(|s| **s > small_from).collect();
    assert_eq!(after, [&(events.len() as u64)], "snapshots at {at:?}");
}

#[tokio::test]
async fn steps_of_large_outputs_snapshot_at_a_growing_interval() {
    let agent = Agent {
        large: |_| true,
        text_len: 256 << 10,
    };
    let steps = 40;
    let (t, events) = run_chain(steps, agent).await;
    let regular = t.saved_at.len() - 1;
    assert!(
        (4..steps / 2).contains(&regular),
        "{regular} snapshots before the final one, at {:?}",
        t.saved_at
    );
    let gaps: Vec<u64> = t.saved_at.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        gaps[gaps.len() - 2] > gaps[1],
        "the interval grows with the state: {gaps:?}"
    );
    assert_eq!(t.saved_at.last(), Some(&(events.len() as u64)));
}

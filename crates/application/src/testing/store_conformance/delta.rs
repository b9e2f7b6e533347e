//! Conformance of snapshot deltas: kept after the snapshot, replaced by
//! the next one, left out of a load from the first that does not continue
//! the state.

use domain::snapshot::{Changes, NodeStatus, SnapshotDelta};
use domain::{EventKind, JsonText, NodeId, RunSnapshot, RunStatus};

use super::{StoreHarness, Subject, assert_locked, event, run_with, snapshot};

/// `state` moved on to `offset`, `node` done with `output`; the delta of
/// that change from where `state` was.
pub fn delta_step(state: &mut RunSnapshot, node: &str, output: &str, offset: u64) -> SnapshotDelta {
    let node = NodeId::new(node).unwrap();
    let base = state.last_offset;
    let mut changes = Changes::default();
    let mut touched = event(
        state.run_id,
        offset,
        EventKind::NodeSkipped {
            reason: String::new(),
        },
    );
    touched.node_id = Some(node.clone());
    changes.note(&touched);
    state.node_status.insert(node.clone(), NodeStatus::Done);
    let output = serde_json::json!({"data": output, "metadata": {"agent_name": "x"}});
    state.outputs.insert(node, JsonText::from_value(&output));
    state.steps_started += 1;
    state.last_offset = offset;
    state.delta(base, &changes)
}

/// Conformance: A load is the snapshot and the deltas after it, up to the
/// first that does not continue it; the next snapshot replaces them; a
/// store that keeps deltas refuses them without the run's lock.
pub async fn deltas_bring_the_snapshot_forward_until_the_next_one<H: StoreHarness>(h: H) {
    let s = Subject::of(&h);
    let store = &*s.store;
    let (run, _lock) = run_with(store, 8).await;
    let mut state = snapshot(run, 2, RunStatus::Running);
    store.save_snapshot(&state).await.unwrap();
    let first = delta_step(&mut state, "a", "one", 3);
    let Some(bytes) = store.save_snapshot_delta(&first).await.unwrap() else {
        // A store that keeps no deltas: loads are its snapshot's.
        assert_eq!(
            store.load_snapshot(run).await.unwrap(),
            Some(snapshot(run, 2, RunStatus::Running))
        );
        return;
    };
    let mut line = Vec::new();
    first.write_json(&mut line).unwrap();
    assert_eq!(bytes, line.len() as u64, "the delta's size as encoded");
    let second = delta_step(&mut state, "b", "two", 5);
    store.save_snapshot_delta(&second).await.unwrap();
    assert_eq!(
        store.load_snapshot(run).await.unwrap().as_ref(),
        Some(&state)
    );
    if let Some(other) = h.another() {
        assert_eq!(
            other.load_snapshot(run).await.unwrap().as_ref(),
            Some(&state)
        );
        let unheld = delta_step(&mut state.clone(), "c", "x", 6);
        let refused = other.save_snapshot_delta(&unheld).await;
        assert_locked(refused, run, "save_snapshot_delta");
    }
    // A delta from an offset the state is not at: left out, and what
    // follows it too.
    let at_five = state.clone();
    let mut gap = delta_step(&mut state, "c", "three", 7);
    gap.base_offset = 6;
    store.save_snapshot_delta(&gap).await.unwrap();
    let after_gap = delta_step(&mut state, "d", "four", 8);
    store.save_snapshot_delta(&after_gap).await.unwrap();
    assert_eq!(
        store.load_snapshot(run).await.unwrap(),
        Some(at_five.clone())
    );
    // A snapshot replaces them all.
    let mut later = at_five;
    later.last_offset = 8;
    later.status = RunStatus::Completed;
    store.save_snapshot(&later).await.unwrap();
    assert_eq!(store.load_snapshot(run).await.unwrap(), Some(later));
}

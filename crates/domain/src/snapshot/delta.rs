//! [`SnapshotDelta`]: what a run's state gained between two offsets, so a
//! store can keep the state up to date without rewriting it whole.
//!
//! A snapshot rewritten whole costs its size each time, so the amortized
//! rule (a snapshot once the log has grown by its size) leaves a tail as
//! large as the snapshot to fold on load. A delta costs only what changed:
//! the records of the nodes and edges its events touched, and the run-level
//! fields (small, and read whole). A base snapshot plus the deltas after it
//! is the state at the last delta's offset; the log after that is the tail.
//!
//! Like the snapshot, a delta is a cache of `fold(events)`: one that cannot
//! be read or does not continue the state it is applied to is not applied,
//! and the log is folded from there instead.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{
    EdgeStatus, ForEachState, ForkedFrom, JsonText, NodeRunState, NodeStatus, RunFailure,
    RunSnapshot, RunStatus, Spent, Stopping,
};
use crate::command::InboxEntry;
use crate::event::{EventKind, RuntimeEvent};
use crate::ids::{NodeId, NodeRunId, RunId, SessionId};
use crate::time::Timestamp;

/// The format of a delta this version writes and reads; any other is not
/// applied (the log is folded instead).
pub const DELTA_VERSION: u32 = 1;

/// The nodes and edges whose records events changed since the last
/// snapshot or delta, noted from the events themselves (the fold's effects
/// on per-node and per-edge maps are all keyed by the event's node or by
/// the edges and nodes it names).
///
/// Kept as lists, repeats and all, sorted out when a delta is made: a list
/// keeps its room when cleared, so noting costs no allocation per step.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    nodes: Vec<NodeId>,
    edges: Vec<String>,
    /// An event changed what a delta does not carry (the definition, the
    /// input, every node at once): only a whole snapshot can follow.
    whole: bool,
}

impl Changes {
    /// Notes what `event` changes when it is folded.
    pub fn note(&mut self, event: &RuntimeEvent) {
        // A node's events come in runs: its repeats side by side are skipped.
        if let Some(node) = &event.node_id
            && self.nodes.last() != Some(node)
        {
            self.nodes.push(node.clone());
        }
        match &event.kind {
            EventKind::FlowStarted { .. } | EventKind::FlowForked { .. } => self.whole = true,
            EventKind::EdgeFired {
                edge_id,
                reset_nodes,
                reset_edges,
                ..
            } => {
                self.edges.push(edge_id.clone());
                self.edges.extend(reset_edges.iter().cloned());
                self.nodes.extend(reset_nodes.iter().cloned());
            }
            EventKind::EdgeSkipped { edge_id, .. } => {
                self.edges.push(edge_id.clone());
            }
            _ => {}
        }
    }

    /// Whether a delta can carry these changes (else a whole snapshot must).
    pub fn fit_a_delta(&self) -> bool {
        !self.whole
    }

    /// Forgets what was noted: a snapshot or a delta carries it now.
    pub fn clear(&mut self) {
        self.nodes.clear();
        self.edges.clear();
        self.whole = false;
    }
}

/// A node's entry in each per-node map; an absent field is an absent entry.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeRecord {
    /// `nodeStatus`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<NodeStatus>,
    /// `outputs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<JsonText>,
    /// `agentSessions`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionId>,
    /// `nodePasses`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passes: Option<u32>,
    /// `nodeCalls`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls: Option<u32>,
    /// `nodeSpent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spent: Option<Spent>,
}

/// An edge's entry in each per-edge map; an absent field is an absent entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EdgeRecord {
    /// `edgeStatus`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<EdgeStatus>,
    /// `loopCounters`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loops: Option<u32>,
}

/// The state at `lastOffset`, as what changed since the state at
/// `baseOffset`: every run-level field but the definition and the input
/// (which only a whole snapshot changes), and the whole record of each node
/// and edge touched.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(missing_docs)] // Each field is the snapshot's field of the same name.
pub struct SnapshotDelta {
    /// [`DELTA_VERSION`].
    pub delta: u32,
    pub run_id: RunId,
    /// The `lastOffset` of the state this delta continues.
    pub base_offset: u64,
    pub last_offset: u64,
    pub status: RunStatus,
    pub state: Map<String, Value>,
    pub inbox: Vec<InboxEntry>,
    #[serde(default)]
    pub started_at: Option<Timestamp>,
    #[serde(default)]
    pub updated_at: Option<Timestamp>,
    #[serde(default)]
    pub failure: Option<RunFailure>,
    #[serde(default)]
    pub node_runs: BTreeMap<NodeRunId, NodeRunState>,
    #[serde(default)]
    pub for_each: BTreeMap<NodeId, ForEachState>,
    #[serde(default)]
    pub steps_started: u64,
    #[serde(default)]
    pub previous_agent: Option<String>,
    #[serde(default)]
    pub spent: Spent,
    #[serde(default)]
    pub stopping: Option<Stopping>,
    #[serde(default)]
    pub forked_from: Option<ForkedFrom>,
    /// The whole record of each node touched.
    pub nodes: BTreeMap<NodeId, NodeRecord>,
    /// The whole record of each edge touched.
    pub edges: BTreeMap<String, EdgeRecord>,
}

/// Why a delta was not applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeltaError {
    /// Not a delta this version reads.
    #[error("not a snapshot delta of version {DELTA_VERSION}: {0}")]
    Unreadable(String),
    /// A delta of another run.
    #[error("a delta of run {found}, not of run {expected}")]
    OtherRun {
        /// The run applied to.
        expected: RunId,
        /// The run the delta names.
        found: RunId,
    },
    /// A delta that reflects events its log does not hold (a crash kept the
    /// delta and lost the end of the log: neither was synced).
    #[error("a delta to offset {past} is past the end of its log, at offset {log_ends}")]
    PastTheLog {
        /// The delta's `lastOffset`.
        past: u64,
        /// The log's last offset.
        log_ends: u64,
    },
    /// A delta that does not continue the state at hand.
    #[error("a delta from offset {base} does not continue a state at offset {at}")]
    Gap {
        /// The delta's `baseOffset`.
        base: u64,
        /// The state's `lastOffset`.
        at: u64,
    },
}

impl SnapshotDelta {
    /// Reads one delta as [`SnapshotDelta::write_json`] wrote it.
    pub fn from_json(bytes: &[u8]) -> Result<Self, DeltaError> {
        // Checked to be UTF-8 once and read as text, as a snapshot is:
        // read as bytes, serde_json checks each string and output again.
        let text = std::str::from_utf8(bytes).map_err(|e| DeltaError::Unreadable(e.to_string()))?;
        let delta: Self =
            serde_json::from_str(text).map_err(|e| DeltaError::Unreadable(e.to_string()))?;
        if delta.delta != DELTA_VERSION {
            return Err(DeltaError::Unreadable(format!("version {}", delta.delta)));
        }
        Ok(delta)
    }

    /// Appends this delta's JSON to `buf`: one line, without its newline.
    pub fn write_json(&self, buf: &mut Vec<u8>) -> Result<(), serde_json::Error> {
        serde_json::to_writer(buf, self)
    }
}

impl RunSnapshot {
    /// What changed since the state at `base_offset`, as `changes` noted it.
    pub fn delta(&self, base_offset: u64, changes: &Changes) -> SnapshotDelta {
        let nodes = changes
            .nodes
            .iter()
            .map(|node| {
                let record = NodeRecord {
                    status: self.node_status.get(node).copied(),
                    output: self.outputs.get(node).cloned(),
                    session: self.agent_sessions.get(node).cloned(),
                    passes: self.node_passes.get(node).copied(),
                    calls: self.node_calls.get(node).copied(),
                    spent: self.node_spent.get(node).cloned(),
                };
                (node.clone(), record)
            })
            .collect();
        let edges = changes
            .edges
            .iter()
            .map(|edge| {
                let record = EdgeRecord {
                    status: self.edge_status.get(edge).copied(),
                    loops: self.loop_counters.get(edge).copied(),
                };
                (edge.clone(), record)
            })
            .collect();
        SnapshotDelta {
            delta: DELTA_VERSION,
            run_id: self.run_id,
            base_offset,
            last_offset: self.last_offset,
            status: self.status,
            state: self.state.clone(),
            inbox: self.inbox.clone(),
            started_at: self.started_at,
            updated_at: self.updated_at,
            failure: self.failure.clone(),
            node_runs: self.node_runs.clone(),
            for_each: self.for_each.clone(),
            steps_started: self.steps_started,
            previous_agent: self.previous_agent.clone(),
            spent: self.spent.clone(),
            stopping: self.stopping.clone(),
            forked_from: self.forked_from,
            nodes,
            edges,
        }
    }

    /// Brings this state to the delta's offset. A delta of another run, or
    /// one that does not start where this state ends, is refused and
    /// changes nothing.
    pub fn apply_delta(&mut self, delta: SnapshotDelta) -> Result<(), DeltaError> {
        match self.apply_deltas([Ok(delta)]) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Brings this state forward by `deltas`, in order: those it already
    /// reflects (left behind a newer snapshot) are skipped, and the first
    /// that cannot be read or does not continue it ends the chain, which is
    /// returned; the deltas before it are applied.
    pub fn apply_deltas(
        &mut self,
        deltas: impl IntoIterator<Item = Result<SnapshotDelta, DeltaError>>,
    ) -> Option<DeltaError> {
        for delta in deltas {
            let delta = match delta {
                Ok(delta) if delta.last_offset <= self.last_offset => continue,
                Ok(delta) => delta,
                Err(e) => return Some(e),
            };
            if let Err(e) = self.continued_by(&delta) {
                return Some(e);
            }
            let (nodes, edges) = self.take_run_fields(delta);
            self.merge_records(nodes, edges);
        }
        None
    }

    /// Whether `delta` continues this state.
    fn continued_by(&self, delta: &SnapshotDelta) -> Result<(), DeltaError> {
        if delta.run_id != self.run_id {
            return Err(DeltaError::OtherRun {
                expected: self.run_id,
                found: delta.run_id,
            });
        }
        if delta.base_offset != self.last_offset {
            return Err(DeltaError::Gap {
                base: delta.base_offset,
                at: self.last_offset,
            });
        }
        Ok(())
    }

    /// Takes the delta's run-level fields; its records are left to merge.
    #[allow(clippy::type_complexity)]
    fn take_run_fields(
        &mut self,
        delta: SnapshotDelta,
    ) -> (BTreeMap<NodeId, NodeRecord>, BTreeMap<String, EdgeRecord>) {
        self.last_offset = delta.last_offset;
        self.status = delta.status;
        self.state = delta.state;
        self.inbox = delta.inbox;
        self.started_at = delta.started_at;
        self.updated_at = delta.updated_at;
        self.failure = delta.failure;
        self.node_runs = delta.node_runs;
        self.for_each = delta.for_each;
        self.steps_started = delta.steps_started;
        self.previous_agent = delta.previous_agent;
        self.spent = delta.spent;
        self.stopping = delta.stopping;
        self.forked_from = delta.forked_from;
        (delta.nodes, delta.edges)
    }

    /// Sets (or removes) each record's entries in the per-node and
    /// per-edge maps. An entry there keeps its key; a new one takes the
    /// record's, one copy shared by the node's maps.
    fn merge_records(
        &mut self,
        nodes: BTreeMap<NodeId, NodeRecord>,
        edges: BTreeMap<String, EdgeRecord>,
    ) {
        for (node, record) in nodes {
            put(&mut self.node_status, &node, record.status);
            put(&mut self.outputs, &node, record.output);
            put(&mut self.agent_sessions, &node, record.session);
            put(&mut self.node_passes, &node, record.passes);
            put(&mut self.node_calls, &node, record.calls);
            put(&mut self.node_spent, &node, record.spent);
        }
        for (edge, record) in edges {
            put(&mut self.edge_status, &edge, record.status);
            put(&mut self.loop_counters, &edge, record.loops);
        }
    }
}

/// Sets `key`'s entry in `map` to `value`, or removes it for `None`: one
/// search either way.
fn put<K: Ord + Clone, V>(map: &mut BTreeMap<K, V>, key: &K, value: Option<V>) {
    match value {
        Some(value) => {
            map.insert(key.clone(), value);
        }
        None => {
            map.remove(key);
        }
    }
}

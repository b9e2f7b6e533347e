//! [`RunSnapshot`]: the state a run resumes from, and the pure fold that
//! derives it from the event log.
//!
//! The event log is the source of truth; the snapshot is a cache of
//! `fold(events)`. [`RunSnapshot::apply`] is the only place that turns events
//! into state, so a stale or missing snapshot can always be rebuilt from the
//! log, and a property test checks that folding a run's events reproduces
//! every snapshot it saved.
//!
//! Reading (seed 001 §4): `status`, `outputs`, `state`, `nodeStatus`,
//! `edgeStatus`, `loopCounters`, `inbox` and `agentSessions` are required;
//! awr's additions (`runId`, `workflow`, `lastOffset`, `version`, `startedAt`,
//! `updatedAt`, `failure`) are optional, and fields this version does not
//! know are kept in [`RunSnapshot::extra`]. A snapshot without `lastOffset`
//! reads as reflecting no event, so the whole log is folded onto it.

mod agents;
mod delta;
mod maps;
mod node_runs;
mod progress;
pub(crate) mod status;
mod stopping;
mod text;
mod unknown;
mod write;

pub use delta::{Changes, DELTA_VERSION, DeltaError, EdgeRecord, NodeRecord, SnapshotDelta};
pub use progress::{ForEachState, ForkedFrom, NodeRunState, ProcessRef, Question, Spent};
pub use status::{EdgeStatus, NodeStatus, RunStatus};
pub use stopping::Stopping;
pub use text::JsonText;

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::caller::Caller;
use crate::command::InboxEntry;
use crate::event::{EventKind, RuntimeEvent, WorkflowRef};
use crate::ids::{NodeId, NodeRunId, RunId, SessionId};
use crate::time::Timestamp;

/// Schema version of `snapshot.json`; bump it with a migration when the shape changes.
pub const SNAPSHOT_VERSION: u32 = 1;

/// Why a run failed: the error of its `flow:failed` event and the node whose
/// failure stopped it, so a reader need not search the log for them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunFailure {
    /// The error, as recorded.
    #[serde(default)]
    pub error: String,
    /// The node whose failure stopped the run, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<NodeId>,
}

fn first_version() -> u32 {
    1
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The resumable state of a run: seed 001 §4 plus `runId`, `workflow`,
/// `lastOffset` and `version` (design §3), and the run's start and last update.
///
/// Read in one pass (`unknown`): the derived reader is wrapped so that
/// unknown fields go to `extra` without `flatten` buffering the whole object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", remote = "Self")]
pub struct RunSnapshot {
    /// Schema version ([`SNAPSHOT_VERSION`]); 1 when absent.
    #[serde(default = "first_version")]
    pub version: u32,
    /// The run.
    pub run_id: RunId,
    /// The definition it runs.
    #[serde(default)]
    pub workflow: WorkflowRef,
    /// Lifecycle.
    pub status: RunStatus,
    /// The run's input (`flow:started`'s), which entry nodes and `input:`
    /// expressions read: a resume needs it.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub input: Value,
    /// Output (`{data, metadata}`) of each node that finished, as its JSON
    /// text: parsed only when something reads that node's output.
    #[serde(deserialize_with = "maps::by_node")]
    pub outputs: BTreeMap<NodeId, JsonText>,
    /// User-defined workflow state.
    pub state: Map<String, Value>,
    /// Status of every node.
    #[serde(deserialize_with = "maps::by_node")]
    pub node_status: BTreeMap<NodeId, NodeStatus>,
    /// Status of every edge.
    #[serde(deserialize_with = "maps::bulk")]
    pub edge_status: BTreeMap<String, EdgeStatus>,
    /// How often each loop edge fired.
    #[serde(deserialize_with = "maps::bulk")]
    pub loop_counters: BTreeMap<String, u32>,
    /// Accepted commands not yet consumed by their node run.
    pub inbox: Vec<InboxEntry>,
    /// Provider session of each agent node, for resume.
    #[serde(deserialize_with = "maps::by_node")]
    pub agent_sessions: BTreeMap<NodeId, SessionId>,
    /// Offset of the last event this snapshot reflects.
    #[serde(default)]
    pub last_offset: u64,
    /// When the run started (`flow:started`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Timestamp>,
    /// Who started the run (`flow:started`'s `startedBy`), or forked it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_by: Option<Caller>,
    /// Timestamp of the last event reflected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<Timestamp>,
    /// Why the run failed, while its status is `failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<RunFailure>,
    /// Node runs started and not ended: what a resume finds in flight.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_runs: BTreeMap<NodeRunId, NodeRunState>,
    /// `for_each` nodes whose items are running.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub for_each: BTreeMap<NodeId, ForEachState>,
    /// Node runs started so far (the next one's `metadata.step_index`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub steps_started: u64,
    /// How many times each node started (the transcript's `iteration`).
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "maps::by_node"
    )]
    pub node_passes: BTreeMap<NodeId, u32>,
    /// Provider calls each node made (one per `agent:start`; one that
    /// continues after a crash keeps its `callIndex`): the index of the
    /// node's next call.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "maps::by_node"
    )]
    pub node_calls: BTreeMap<NodeId, u32>,
    /// Agent of the node that completed last (`metadata.previous_agent`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_agent: Option<String>,
    /// What the run's agents consumed, against the run's budget.
    #[serde(default, skip_serializing_if = "Spent::is_empty")]
    pub spent: Spent,
    /// What each node's agents consumed, against the node's budget.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "maps::by_node"
    )]
    pub node_spent: BTreeMap<NodeId, Spent>,
    /// A stop decided and not yet ended (see [`Stopping`]): a writer that
    /// continues the run finishes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopping: Option<Stopping>,
    /// The run and offset this run was forked from (`flow:forked`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<ForkedFrom>,
    /// Fields this version does not know (a newer writer's), kept so they are
    /// shown and saved back unchanged.
    #[serde(flatten, skip_deserializing)]
    pub extra: Map<String, Value>,
}

impl Serialize for RunSnapshot {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        RunSnapshot::serialize(self, s)
    }
}

impl<'de> Deserialize<'de> for RunSnapshot {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // The maps keyed by node share one copy of each id, as in a folded
        // state (see `RunSnapshot::key`).
        NodeId::sharing(|| {
            let mut extra = Map::new();
            let mut snapshot = RunSnapshot::deserialize(unknown::Capture {
                inner: d,
                extra: &mut extra,
            })?;
            snapshot.extra = extra;
            Ok(snapshot)
        })
    }
}

impl RunSnapshot {
    /// The state before any event.
    pub fn new(run_id: RunId) -> Self {
        Self {
            version: SNAPSHOT_VERSION,
            run_id,
            workflow: WorkflowRef::default(),
            status: RunStatus::Pending,
            input: Value::Null,
            outputs: BTreeMap::new(),
            state: Map::new(),
            node_status: BTreeMap::new(),
            edge_status: BTreeMap::new(),
            loop_counters: BTreeMap::new(),
            inbox: Vec::new(),
            agent_sessions: BTreeMap::new(),
            last_offset: 0,
            started_at: None,
            started_by: None,
            updated_at: None,
            failure: None,
            node_runs: BTreeMap::new(),
            for_each: BTreeMap::new(),
            steps_started: 0,
            node_passes: BTreeMap::new(),
            node_calls: BTreeMap::new(),
            previous_agent: None,
            spent: Spent::default(),
            node_spent: BTreeMap::new(),
            stopping: None,
            forked_from: None,
            extra: Map::new(),
        }
    }

    /// When the run next has a question to settle, read off the state
    /// alone (for a run no process writes): at once for one answered and
    /// not yet resolved (its answer was recorded, and the process that was
    /// to continue the run did not), else at the earliest deadline. A
    /// store keeps it with a `waiting` run, so a worker claims the run then.
    pub fn question_due_at(&self) -> Option<Timestamp> {
        (self.node_runs.values())
            .filter_map(|r| r.approval.as_ref())
            .filter_map(|q| match &q.answer {
                Some(answer) => Some(answer.at),
                None => q.deadline,
            })
            .min()
    }

    /// Parses `snapshot.json` of `run_id`; a snapshot that does not name its
    /// run (`runId` is optional in seed 001) is taken to be that run's.
    pub fn from_json(bytes: &[u8], run_id: RunId) -> Result<Self, serde_json::Error> {
        // Straight to the struct: a resume reads the snapshot before it can
        // call a provider, and a detour through a `Value` tree doubles the
        // parse. Only a snapshot the fast parse refuses (no `runId`, or
        // broken) takes the slow way, which also gives the error.
        // Checked to be UTF-8 once and read as text: read as bytes, serde_json
        // checks each string and each output's raw text again.
        if let Ok(text) = std::str::from_utf8(bytes)
            && let Ok(snapshot) = serde_json::from_str(text)
        {
            return Ok(snapshot);
        }
        let mut map: Map<String, Value> = serde_json::from_slice(bytes)?;
        map.entry("runId")
            .or_insert_with(|| Value::String(run_id.to_string()));
        serde_json::from_value(Value::Object(map))
    }

    /// Folds events (in offset order) onto an empty snapshot; `None` for no events.
    pub fn fold<'a>(events: impl IntoIterator<Item = &'a RuntimeEvent>) -> Option<Self> {
        let mut events = events.into_iter().peekable();
        let mut snapshot = Self::new(events.peek()?.run_id);
        for event in events {
            snapshot.apply(event);
        }
        Some(snapshot)
    }

    /// Applies one event. Total: every event, known or not, is accepted, and
    /// the only effect of kinds that carry no state is to advance `lastOffset`.
    pub fn apply(&mut self, event: &RuntimeEvent) {
        self.last_offset = event.offset.get();
        self.updated_at = Some(event.timestamp);
        let node = event.node_id.as_ref();
        self.apply_stopping(event);
        match &event.kind {
            EventKind::FlowStarted {
                workflow,
                input,
                nodes,
                edges,
                started_by,
                ..
            } => {
                self.workflow = workflow.clone();
                self.started_by = started_by.clone();
                self.input = input.clone();
                self.status = RunStatus::Running;
                self.failure = None;
                self.started_at = Some(event.timestamp);
                self.node_status = nodes
                    .iter()
                    .map(|n| (n.clone(), NodeStatus::Pending))
                    .collect();
                self.edge_status = edges
                    .iter()
                    .map(|e| (e.clone(), EdgeStatus::Pending))
                    .collect();
            }
            EventKind::FlowUpgraded {
                to, nodes, edges, ..
            } => {
                // What ran keeps its status; what the new definition adds
                // is pending, as at the start.
                self.workflow = to.clone();
                for node in nodes {
                    self.node_status
                        .entry(node.clone())
                        .or_insert(NodeStatus::Pending);
                }
                for edge in edges {
                    self.edge_status
                        .entry(edge.clone())
                        .or_insert(EdgeStatus::Pending);
                }
            }
            EventKind::FlowPaused { waiting, .. } => {
                self.status = match waiting {
                    true => RunStatus::Waiting,
                    false => RunStatus::Paused,
                };
            }
            EventKind::FlowResumed { .. } => {
                self.status = RunStatus::Running;
                self.failure = None;
            }
            EventKind::FlowForked {
                parent_run_id,
                parent_offset,
                input,
                by,
            } => {
                self.started_by = by.clone();
                self.status = RunStatus::Running;
                self.failure = None;
                self.forked_from = Some(ForkedFrom {
                    run_id: *parent_run_id,
                    offset: parent_offset.get(),
                });
                if let Some(input) = input {
                    self.input = input.clone();
                }
                // The fork starts now: its duration and deadlines count from
                // here (what the copied events spent still counts).
                self.started_at = Some(event.timestamp);
                for spent in self.node_spent.values_mut() {
                    if spent.since.is_some() {
                        spent.since = Some(event.timestamp);
                    }
                }
                for run in self.node_runs.values_mut() {
                    // Its process groups are the parent's writer's, not this run's.
                    run.forked = true;
                    run.processes.clear();
                }
            }
            EventKind::FlowCompleted { .. } => self.status = RunStatus::Completed,
            EventKind::FlowFailed {
                error, failed_node, ..
            } => {
                self.status = RunStatus::Failed;
                self.failure = Some(RunFailure {
                    error: error.clone(),
                    node: failed_node.clone(),
                });
            }
            EventKind::FlowCancelled { .. } => self.status = RunStatus::Cancelled,
            EventKind::SubflowStarted { child_run_id, .. } => {
                if let Some(run) = event.node_run_id.and_then(|id| self.node_runs.get_mut(&id)) {
                    run.child = Some(*child_run_id);
                }
            }
            EventKind::NodeStarted {
                input,
                attempt,
                item,
                items,
            } => {
                if let Some(node) = node {
                    self.node_started(event, node, input, *attempt, *item, *items);
                }
            }
            EventKind::NodeCompleted { output } => {
                match self.node_ended(event) {
                    Some(NodeRunState {
                        node_id,
                        item: Some(item),
                        ..
                    }) => {
                        let data = output.get("data").cloned().unwrap_or(Value::Null);
                        if let Some(progress) = self.for_each.get_mut(&node_id) {
                            progress.outputs.insert(item, data);
                        }
                    }
                    _ => {
                        if let Some(node) = node {
                            let key = self.set_status(node, NodeStatus::Done);
                            self.outputs.insert(key, JsonText::from_value(output));
                            self.for_each.remove(node);
                            self.previous_agent = output
                                .get("metadata")
                                .and_then(|m| m.get("agent_name"))
                                .and_then(Value::as_str)
                                .map(str::to_owned);
                        }
                    }
                }
                self.drop_inbox_of(event);
            }
            EventKind::NodeFailed { continued, error } => {
                match self.node_ended(event) {
                    Some(NodeRunState {
                        node_id,
                        item: Some(item),
                        ..
                    }) => {
                        // An item that may fail leaves a null in its place; one
                        // that may not fails its node next, which ends the items.
                        if *continued && let Some(progress) = self.for_each.get_mut(&node_id) {
                            progress.outputs.insert(item, Value::Null);
                        }
                    }
                    _ => {
                        if let Some(node) = node {
                            let key = self.set_status(node, NodeStatus::Failed);
                            self.for_each.remove(node);
                            // A failure the run goes on past leaves `null` data
                            // for the nodes after it, and says why.
                            if *continued {
                                let output = serde_json::json!({
                                    "data": Value::Null,
                                    "metadata": { "error": error },
                                });
                                self.outputs.insert(key, JsonText::from_value(&output));
                            }
                        }
                    }
                }
                self.drop_inbox_of(event);
            }
            EventKind::NodeSkipped { .. } => {
                if let Some(node) = node {
                    self.set_status(node, NodeStatus::Skipped);
                }
            }
            EventKind::EdgeFired {
                edge_id,
                iteration,
                reset_nodes,
                reset_edges,
                ..
            } => {
                self.edge_status.insert(edge_id.clone(), EdgeStatus::Fired);
                if let Some(iteration) = iteration {
                    self.loop_counters.insert(edge_id.clone(), *iteration);
                }
                for n in reset_nodes {
                    self.set_status(n, NodeStatus::Pending);
                }
                for e in reset_edges {
                    self.edge_status.insert(e.clone(), EdgeStatus::Pending);
                }
            }
            EventKind::EdgeSkipped { edge_id, .. } => {
                self.edge_status
                    .insert(edge_id.clone(), EdgeStatus::Skipped);
            }
            EventKind::AgentStart { .. }
            | EventKind::AgentSession { .. }
            | EventKind::ProcessStarted { .. }
            | EventKind::AgentError { .. }
            | EventKind::AgentComplete { .. } => self.apply_agent(event),
            EventKind::CommandReceived {
                command,
                accepted: true,
                by,
                ..
            } => {
                let Ok(command) = crate::command::RuntimeCommand::parse(command) else {
                    return;
                };
                if let Some(mut entry) = command.inbox_entry() {
                    entry.offset = event.offset.get();
                    self.inbox.push(entry);
                }
                if let Some((node_run, answer)) = command.answer(by.clone(), event.timestamp)
                    && let Some(question) =
                        (self.node_runs.get_mut(&node_run)).and_then(|run| run.approval.as_mut())
                {
                    question.answer = Some(answer);
                }
            }
            EventKind::ApprovalRequested {
                prompt,
                schema,
                deadline,
                tool,
                ..
            } => {
                if let Some(run) = event.node_run_id.and_then(|id| self.node_runs.get_mut(&id)) {
                    run.approval = Some(Box::new(Question {
                        prompt: prompt.clone(),
                        schema: schema.clone(),
                        deadline: *deadline,
                        answer: None,
                        tool: tool.clone(),
                    }));
                }
            }
            // A tool call's question is over: its node run goes on. (An
            // approval node's run ends with its question, which it keeps.)
            EventKind::ApprovalResolved { .. } => {
                if let Some(run) = event.node_run_id.and_then(|id| self.node_runs.get_mut(&id))
                    && run.approval.as_ref().is_some_and(|q| q.tool.is_some())
                {
                    run.approval = None;
                }
            }
            _ => {}
        }
    }

    /// Sets the status of `node` and returns the state's copy of its id
    /// (see [`Self::key`]): one search, the node being known from
    /// `flow:started` (a hot path of every load's fold).
    fn set_status(&mut self, node: &NodeId, status: NodeStatus) -> NodeId {
        match self.node_status.entry(node.clone()) {
            Entry::Occupied(mut known) => {
                known.insert(status);
                known.key().clone()
            }
            Entry::Vacant(new) => {
                let key = new.key().clone();
                new.insert(status);
                key
            }
        }
    }

    /// `node` as the state already holds it (its entry in `nodeStatus`,
    /// keyed from `flow:started`), so the state's per-node maps share one
    /// copy of each id instead of one per map and event.
    pub(crate) fn key(&self, node: &NodeId) -> NodeId {
        self.node_status
            .get_key_value(node)
            .map_or_else(|| node.clone(), |(key, _)| key.clone())
    }

    /// The node run an event ends, no longer in flight.
    fn node_ended(&mut self, event: &RuntimeEvent) -> Option<NodeRunState> {
        self.node_runs.remove(&event.node_run_id?)
    }

    /// A node run that ended can no longer consume its messages.
    fn drop_inbox_of(&mut self, event: &RuntimeEvent) {
        if let Some(node_run) = event.node_run_id {
            self.inbox.retain(|entry| entry.node_run_id != node_run);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::ids::Offset;
    use proptest::prelude::*;

    fn ev(offset: u64, node: Option<&str>, kind: EventKind) -> RuntimeEvent {
        RuntimeEvent {
            id: format!("e{offset}"),
            offset: Offset::new(offset).unwrap(),
            timestamp: Timestamp::from_millis(1_000 * offset as i64),
            run_id: "0b6f8f4e-3c1a-4d2b-9f3e-1a2b3c4d5e6f".parse().unwrap(),
            node_id: node.map(|n| NodeId::new(n).unwrap()),
            node_run_id: None,
            kind,
            extra: Map::new(),
        }
    }

    /// The events of [`sample_kinds`], one each, at offsets from 1.
    fn sample_run() -> Vec<RuntimeEvent> {
        sample_kinds()
            .into_iter()
            .enumerate()
            .map(|(i, (n, k))| ev(i as u64 + 1, n, k))
            .collect()
    }

    fn sample_kinds() -> Vec<(Option<&'static str>, EventKind)> {
        let a = NodeId::new("a").unwrap();
        let b = NodeId::new("b").unwrap();
        vec![
            (
                None,
                EventKind::FlowStarted {
                    workflow: WorkflowRef {
                        extra: Default::default(),
                        name: "w".into(),
                        hash: "sha256:00".into(),
                    },
                    input: Value::Null,
                    parent_run_id: None,
                    source: None,
                    definition: None,
                    nodes: vec![a.clone(), b.clone()],
                    edges: vec!["a->b".into()],
                    started_by: Caller::new("alice@host").ok(),
                },
            ),
            (
                Some("a"),
                EventKind::NodeStarted {
                    input: Arc::default(),
                    attempt: Some(1),
                    item: None,
                    items: None,
                },
            ),
            (
                Some("a"),
                EventKind::AgentStart {
                    session_id: SessionId::new("s1").unwrap(),
                    model: None,
                    prompt: crate::event::Prompt::Text("hi".into()),
                    provisional: false,
                    inbox: Vec::new(),
                    call_index: Some(0),
                    instance: Some("0".into()),
                    instance_call: Some(0),
                    restart: None,
                },
            ),
            (Some("a"), EventKind::NodeCompleted { output: "x".into() }),
            (
                Some("a"),
                EventKind::EdgeFired {
                    edge_id: "a->b".into(),
                    from: a,
                    to: b,
                    iteration: None,
                    reset_nodes: vec![],
                    reset_edges: vec![],
                },
            ),
            (
                Some("b"),
                EventKind::NodeFailed {
                    error: "boom".into(),
                    continued: false,
                },
            ),
            (
                None,
                EventKind::FlowFailed {
                    error: "boom".into(),
                    failed_node: None,
                    duration_ms: 3,
                },
            ),
        ]
    }

    #[test]
    fn fold_follows_a_run() {
        let events = sample_run();
        let s = RunSnapshot::fold(&events).unwrap();
        assert_eq!(s.status, RunStatus::Failed);
        assert_eq!(s.node_status[&NodeId::new("a").unwrap()], NodeStatus::Done);
        assert_eq!(
            s.node_status[&NodeId::new("b").unwrap()],
            NodeStatus::Failed
        );
        assert_eq!(s.edge_status["a->b"], EdgeStatus::Fired);
        assert_eq!(s.agent_sessions[&NodeId::new("a").unwrap()].as_str(), "s1");
        assert_eq!(s.last_offset, 7);
        assert_eq!(s.workflow.name, "w");
    }

    /// The snapshot writer writes the node maps itself: every snapshot
    /// must come out byte for byte as serde writes it.
    #[test]
    fn the_direct_writer_writes_what_serde_writes() {
        let events: Vec<_> = sample_kinds()
            .into_iter()
            .enumerate()
            .map(|(i, (n, k))| {
                let mut e = ev(i as u64 + 1, n, k);
                let run = |n: u128| NodeRunId::new(uuid::Uuid::from_u128(n));
                e.node_run_id = n.map(|n| run(if n == "a" { 1 } else { 2 }));
                e
            })
            .collect();
        // Every prefix of the run: nothing yet, node runs in flight, ended.
        let mut snapshots: Vec<RunSnapshot> = (1..=events.len())
            .map(|n| RunSnapshot::fold(&events[..n]).unwrap())
            .collect();
        let a = NodeId::new("a").unwrap();
        let mut full = snapshots.last().unwrap().clone();
        full.input = serde_json::json!({"topic": "x\"y"});
        full.state.insert("k".into(), serde_json::json!([1, "é\n"]));
        full.edge_status
            .insert("odd \"edge\"\\".into(), EdgeStatus::Skipped);
        full.loop_counters.insert("a->a".into(), 2);
        full.steps_started = 4;
        full.previous_agent = Some("writer".into());
        full.started_at = Some(Timestamp::from_millis(5));
        full.spent = Spent {
            tokens: 7,
            cost_usd: 1e-7,
            turns: 2,
            since: Some(Timestamp::from_millis(6)),
        };
        let unpriced = Spent {
            cost_usd: f64::NAN,
            ..Spent::default()
        };
        full.node_spent.insert(a.clone(), full.spent.clone());
        full.node_spent.insert(NodeId::new("b").unwrap(), unpriced);
        full.for_each.insert(
            a,
            ForEachState {
                items: vec![serde_json::json!(1)],
                outputs: BTreeMap::from([(0, serde_json::json!("one"))]),
                started: 1,
            },
        );
        full.stopping = Some(Stopping::Pause);
        full.forked_from = Some(ForkedFrom {
            run_id: full.run_id,
            offset: 3,
        });
        snapshots.push(full.clone());
        full.extra
            .insert("future".into(), serde_json::json!({"z": 1}));
        snapshots.push(full);
        crate::json_out::assert_writes_as_serde(&snapshots, RunSnapshot::write_json);
        // A reader's status in place of the recorded one: the same document
        // with that one field changed, with or without unknown fields.
        for snapshot in &snapshots {
            let mut shown = Vec::new();
            snapshot
                .write_json_shown(&mut shown, "interrupted")
                .unwrap();
            let mut expected = serde_json::to_value(snapshot).unwrap();
            expected["status"] = serde_json::json!("interrupted");
            let shown: serde_json::Value = serde_json::from_slice(&shown).unwrap();
            assert_eq!(shown, expected);
        }
        assert!(snapshots.iter().any(|s| !s.node_runs.is_empty()));
        use {EdgeStatus as E, NodeStatus as N};
        for status in [N::Pending, N::Running, N::Done, N::Failed, N::Skipped] {
            assert_eq!(
                serde_json::json!(status.as_str()),
                serde_json::json!(status)
            );
        }
        for status in [E::Pending, E::Fired, E::Skipped] {
            assert_eq!(
                serde_json::json!(status.as_str()),
                serde_json::json!(status)
            );
        }
    }

    /// A writer that moves long strings out skips its scan when the
    /// longest value written is short: wherever a long string sits, the
    /// measure must cover it.
    #[test]
    fn the_longest_value_written_covers_every_string_in_the_snapshot() {
        let run_id = "0b6f8f4e-3c1a-4d2b-9f3e-1a2b3c4d5e6f".parse().unwrap();
        let long = "x".repeat(70_000);
        let a = NodeId::new("a").unwrap();
        let run = NodeRunId::new(uuid::Uuid::from_u128(1));
        type Place<'a> = Box<dyn Fn(&mut RunSnapshot) + 'a>;
        let places: Vec<Place> = vec![
            Box::new(|s| s.input = Value::String(long.clone())),
            Box::new(|s| {
                let output = serde_json::json!({"data": {"deep": [long.clone()]}});
                s.outputs.insert(a.clone(), JsonText::from_value(&output));
            }),
            Box::new(|s| {
                s.state.insert("k".into(), Value::String(long.clone()));
            }),
            Box::new(|s| {
                s.inbox.push(InboxEntry {
                    node_run_id: run,
                    message: long.clone(),
                    offset: 1,
                })
            }),
            Box::new(|s| {
                s.failure = Some(RunFailure {
                    error: long.clone(),
                    node: None,
                })
            }),
            Box::new(|s| s.previous_agent = Some(long.clone())),
            Box::new(|s| {
                s.agent_sessions
                    .insert(a.clone(), SessionId::new(long.clone()).unwrap());
            }),
            Box::new(|s| {
                s.for_each.insert(
                    a.clone(),
                    ForEachState {
                        items: vec![Value::String(long.clone())],
                        outputs: BTreeMap::new(),
                        started: 0,
                    },
                );
            }),
            Box::new(|s| {
                s.extra.insert("future".into(), Value::String(long.clone()));
            }),
        ];
        for (i, place) in places.iter().enumerate() {
            let mut snapshot = RunSnapshot::new(run_id);
            place(&mut snapshot);
            let mut buf = Vec::new();
            let longest = snapshot.write_json_measured(&mut buf).unwrap();
            assert!(longest >= long.len() + 2, "place {i}: {longest}");
        }
        let mut buf = Vec::new();
        let small = RunSnapshot::new(run_id)
            .write_json_measured(&mut buf)
            .unwrap();
        assert!(small < 100, "{small}");
    }

    #[test]
    fn snapshot_json_has_every_seed_field() {
        let s = RunSnapshot::new("0b6f8f4e-3c1a-4d2b-9f3e-1a2b3c4d5e6f".parse().unwrap());
        let v = serde_json::to_value(&s).unwrap();
        for field in [
            "runId",
            "status",
            "outputs",
            "state",
            "nodeStatus",
            "edgeStatus",
            "loopCounters",
            "inbox",
            "agentSessions",
            "workflow",
            "lastOffset",
            "version",
        ] {
            assert!(v.get(field).is_some(), "missing {field}");
        }
        let back: RunSnapshot = serde_json::from_value(v).unwrap();
        assert_eq!(back, s);
    }

    /// A snapshot as awr writes it, with a field of a newer writer
    /// (`future`) at the end, where `extra` is written.
    const WRITTEN: &str = concat!(
        r#"{"version":1,"runId":"0b6f8f4e-3c1a-4d2b-9f3e-1a2b3c4d5e6f","workflow":{"name":"w","hash":"sha256:00"},"#,
        r#""status":"running","outputs":{"a":{"data":{"k":[1,2.5,"s"]},"metadata":{"agent_name":"x","step_index":0}},"#,
        r#""b":{"data":null,"metadata":{"error":"e"}}},"state":{},"nodeStatus":{"a":"done","b":"failed"},"#,
        r#""edgeStatus":{"a->b":"fired"},"loopCounters":{},"inbox":[],"agentSessions":{},"lastOffset":9,"#,
        r#""future":{"z":[true]}}"#
    );

    #[test]
    fn a_saved_snapshot_reads_and_writes_back_byte_for_byte() {
        let run_id = "0b6f8f4e-3c1a-4d2b-9f3e-1a2b3c4d5e6f".parse().unwrap();
        let s = RunSnapshot::from_json(WRITTEN.as_bytes(), run_id).unwrap();
        assert_eq!(s.extra["future"], serde_json::json!({"z": [true]}));
        assert_eq!(
            s.outputs[&NodeId::new("a").unwrap()].data().unwrap(),
            serde_json::json!({"k": [1, 2.5, "s"]})
        );
        assert_eq!(serde_json::to_string(&s).unwrap(), WRITTEN);
        // Through a `Value` (the slow path, `awr show --json`) it is the same.
        let value: Value = serde_json::from_str(WRITTEN).unwrap();
        assert_eq!(serde_json::to_value(&s).unwrap(), value);
        assert_eq!(serde_json::from_value::<RunSnapshot>(value).unwrap(), s);
        // Without `runId` it is the named run's; broken, an error.
        let anonymous = WRITTEN.replace(r#""runId":"0b6f8f4e-3c1a-4d2b-9f3e-1a2b3c4d5e6f","#, "");
        assert_eq!(
            RunSnapshot::from_json(anonymous.as_bytes(), run_id).unwrap(),
            s
        );
        assert!(RunSnapshot::from_json(&WRITTEN.as_bytes()[..200], run_id).is_err());
    }

    #[test]
    fn a_folded_output_is_saved_as_the_event_had_it() {
        let events = sample_run();
        let s = RunSnapshot::fold(&events).unwrap();
        let saved: Value = serde_json::to_value(&s).unwrap();
        assert_eq!(saved["outputs"]["a"], Value::from("x"));
        let back = RunSnapshot::from_json(&serde_json::to_vec(&s).unwrap(), s.run_id).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn an_upgrade_names_the_new_definition_and_adds_its_nodes_as_pending() {
        let started = r#"{"id":"e1","offset":1,"timestamp":"2026-01-01T00:00:01Z","runId":"0b6f8f4e-3c1a-4d2b-9f3e-1a2b3c4d5e6f","type":"flow:started","workflow":{"name":"w","hash":"sha256:01"},"nodes":["a","b"],"edges":["a->b"]}"#;
        let done = r#"{"id":"e2","offset":2,"timestamp":"2026-01-01T00:00:02Z","runId":"0b6f8f4e-3c1a-4d2b-9f3e-1a2b3c4d5e6f","type":"node:skipped","nodeId":"b","reason":"x"}"#;
        let upgraded = r#"{"id":"e3","offset":3,"timestamp":"2026-01-01T00:00:03.000Z","runId":"0b6f8f4e-3c1a-4d2b-9f3e-1a2b3c4d5e6f","type":"flow:upgraded","from":{"name":"w","hash":"sha256:01"},"to":{"name":"w","hash":"sha256:02"},"definition":"sha256:0d","nodes":["a","c"],"edges":["a->c"]}"#;
        let events: Vec<RuntimeEvent> = [started, done, upgraded]
            .iter()
            .map(|line| RuntimeEvent::from_json(line.as_bytes()).unwrap())
            .collect();
        let mut line = Vec::new();
        events[2].write_json(&mut line).unwrap();
        assert_eq!(
            String::from_utf8(line).unwrap(),
            upgraded,
            "written back as read"
        );
        let state = RunSnapshot::fold(&events).unwrap();
        assert_eq!(state.workflow.hash, "sha256:02");
        let status = |n: &str| state.node_status[&NodeId::new(n).unwrap()];
        assert_eq!(
            status("b"),
            NodeStatus::Skipped,
            "what ran keeps its status"
        );
        assert_eq!(status("c"), NodeStatus::Pending, "what it adds is pending");
        assert_eq!(state.edge_status["a->c"], EdgeStatus::Pending);
    }

    #[test]
    fn a_fork_names_its_parent_takes_its_input_and_hands_over_its_node_runs() {
        let run = "0b6f8f4e-3c1a-4d2b-9f3e-1a2b3c4d5e6f";
        let parent = "7f8c2b1e-3d4a-4b5c-9d6e-1f2a3b4c5d6e";
        let lines = [
            r#""type":"flow:started","input":"old","nodes":["a"]"#.to_owned(),
            r#""type":"node:started","nodeId":"a","nodeRunId":"0b6f8f4e-3c1a-4d2b-9f3e-1a2b3c4d5e00","input":{"data":"old"}"#.to_owned(),
            r#""type":"agent:start","nodeId":"a","nodeRunId":"0b6f8f4e-3c1a-4d2b-9f3e-1a2b3c4d5e00","sessionId":"s1","prompt":"p","callIndex":0"#.to_owned(),
            r#""type":"process:started","nodeId":"a","nodeRunId":"0b6f8f4e-3c1a-4d2b-9f3e-1a2b3c4d5e00","pid":42,"startTime":7"#.to_owned(),
            r#""type":"command:received","command":{"type":"cancel"},"accepted":true"#.to_owned(),
            r#""type":"flow:paused""#.to_owned(),
            format!(r#""type":"flow:forked","parentRunId":"{parent}","parentOffset":6,"input":"new""#),
        ];
        let events: Vec<RuntimeEvent> = lines
            .iter()
            .enumerate()
            .map(|(i, body)| {
                let line = format!(
                    r#"{{"id":"e{i}","offset":{},"timestamp":"2026-01-01T00:00:0{i}Z","runId":"{run}",{body}}}"#,
                    i + 1
                );
                RuntimeEvent::from_json(line.as_bytes()).unwrap()
            })
            .collect();
        let s = RunSnapshot::fold(&events).unwrap();
        assert_eq!(s.status, RunStatus::Running, "a fork goes on");
        assert_eq!(s.stopping, None, "the parent's stop is not the fork's");
        assert_eq!(
            s.forked_from,
            Some(ForkedFrom {
                run_id: parent.parse().unwrap(),
                offset: 6
            })
        );
        assert_eq!(s.input, Value::from("new"));
        assert_eq!(
            s.started_at,
            Some(events[6].timestamp),
            "it starts at the fork"
        );
        let node_run = s.node_runs.values().next().unwrap();
        assert!(node_run.forked && node_run.processes.is_empty());
        assert_eq!(node_run.session.as_ref().map(SessionId::as_str), Some("s1"));
        // Its next invocation is its own.
        let mut after = s.clone();
        let next = format!(
            r#"{{"id":"e8","offset":8,"timestamp":"2026-01-01T00:00:00Z","runId":"{run}","type":"agent:start","nodeId":"a","nodeRunId":"0b6f8f4e-3c1a-4d2b-9f3e-1a2b3c4d5e00","sessionId":"s2","prompt":"continue","callIndex":0}}"#
        );
        after.apply(&RuntimeEvent::from_json(next.as_bytes()).unwrap());
        assert!(!after.node_runs.values().next().unwrap().forked);
        // It is saved and read back.
        let json = serde_json::to_vec(&s).unwrap();
        assert_eq!(RunSnapshot::from_json(&json, s.run_id).unwrap(), s);
        assert!(serde_json::to_value(&s).unwrap()["forkedFrom"]["runId"] == parent);
    }

    /// `for_each` items start in index order but call in any: each item's
    /// node run sets its first call index aside when it starts (the node
    /// run spawning them does not), and an item's calls are numbered
    /// within its node run.
    #[test]
    fn items_set_their_first_call_aside_in_start_order() {
        let run = "0b6f8f4e-3c1a-4d2b-9f3e-1a2b3c4d5e6f";
        let line = |offset: u64, node_run: u32, body: &str| {
            format!(
                r#"{{"id":"e{offset}","offset":{offset},"timestamp":"2026-01-01T00:00:00Z","runId":"{run}","nodeId":"review","nodeRunId":"0b6f8f4e-3c1a-4d2b-9f3e-1a2b3c4d5e{node_run:02}",{body}}}"#
            )
        };
        let lines = [
            format!(
                r#"{{"id":"e1","offset":1,"timestamp":"2026-01-01T00:00:00Z","runId":"{run}","type":"flow:started","workflow":{{"name":"w","hash":"sha256:00"}},"input":null,"nodes":["review"],"edges":[]}}"#
            ),
            line(2, 0, r#""type":"node:started","input":null,"items":2"#),
            line(3, 1, r#""type":"node:started","input":null,"item":0"#),
            line(4, 2, r#""type":"node:started","input":null,"item":1"#),
            line(
                5,
                2,
                r#""type":"agent:start","sessionId":"s","prompt":"p","callIndex":1,"instance":"0#1","instanceCall":0"#,
            ),
        ];
        let events: Vec<RuntimeEvent> = lines
            .iter()
            .map(|l| RuntimeEvent::from_json(l.as_bytes()).unwrap())
            .collect();
        let s = RunSnapshot::fold(&events).unwrap();
        let item = |n: u32| {
            s.node_runs
                .values()
                .find(|r| r.item == Some(n))
                .unwrap()
                .clone()
        };
        assert_eq!((item(0).first_call, item(0).calls), (Some(0), 0));
        assert_eq!((item(1).first_call, item(1).calls), (Some(1), 1));
        assert_eq!(
            (item(0).instance(), item(1).instance()),
            ("0#0".into(), "0#1".into())
        );
        assert_eq!(s.node_calls[&NodeId::new("review").unwrap()], 2);
    }

    /// A call cut off by a crash is redone under its number by the next
    /// attempt, even when the process that started that attempt died
    /// before it began the call: the second attempt's start says which
    /// call is owed, a third one's keeps it, and the call's start clears
    /// it. A call that ended in an error is not redone: a retry makes the
    /// node's next call.
    #[test]
    fn a_call_cut_off_is_owed_across_attempts_until_it_starts_again() {
        let run = "0b6f8f4e-3c1a-4d2b-9f3e-1a2b3c4d5e6f";
        let line = |offset: u64, body: &str| {
            format!(
                r#"{{"id":"e{offset}","offset":{offset},"timestamp":"2026-01-01T00:00:00Z","runId":"{run}","nodeId":"a","nodeRunId":"0b6f8f4e-3c1a-4d2b-9f3e-1a2b3c4d5e01",{body}}}"#
            )
        };
        let start = r#""type":"agent:start","sessionId":"s","prompt":"p","callIndex":0,"instance":"0","instanceCall":0"#;
        let lines = [
            format!(
                r#"{{"id":"e1","offset":1,"timestamp":"2026-01-01T00:00:00Z","runId":"{run}","type":"flow:started","workflow":{{"name":"w","hash":"sha256:00"}},"input":null,"nodes":["a"],"edges":[]}}"#
            ),
            line(2, r#""type":"node:started","input":null"#),
            line(3, start),
            line(4, r#""type":"node:started","input":null,"attempt":2"#),
            line(5, r#""type":"node:started","input":null,"attempt":3"#),
            line(6, start),
            line(
                7,
                r#""type":"agent:error","errorType":"timeout","message":"m""#,
            ),
            line(8, r#""type":"node:started","input":null,"attempt":4"#),
        ];
        let events: Vec<RuntimeEvent> = lines
            .iter()
            .map(|l| RuntimeEvent::from_json(l.as_bytes()).unwrap())
            .collect();
        let owed = |upto: usize| {
            let s = RunSnapshot::fold(&events[..upto]).unwrap();
            let r = s.node_runs.values().next().unwrap().clone();
            (r.attempt, r.redo_call, r.calls)
        };
        assert_eq!(owed(3), (1, None, 1));
        assert_eq!(owed(4), (2, Some(0), 1));
        assert_eq!(owed(5), (3, Some(0), 1));
        assert_eq!(owed(6), (3, None, 1));
        assert_eq!(owed(8), (4, None, 1));
    }

    proptest! {
        /// Folding in two halves equals folding at once: the snapshot of a
        /// prefix, brought up to date with the rest, is the snapshot of the whole.
        #[test]
        fn fold_is_incremental(picks in proptest::collection::vec(0usize..7, 0..40), split in 0usize..40) {
            let kinds = sample_kinds();
            let events: Vec<_> = std::iter::once(0).chain(picks)
                .enumerate()
                .map(|(i, p)| { let (n, k) = kinds[p].clone(); ev(i as u64 + 1, n, k) })
                .collect();
            let split = split.min(events.len());
            let whole = RunSnapshot::fold(&events).unwrap();
            let mut part = RunSnapshot::fold(&events[..split.max(1)]).unwrap();
            for e in &events[split.max(1)..] { part.apply(e); }
            prop_assert_eq!(whole, part);
        }

        /// A delta of what the events after a prefix changed, written and
        /// read back, brings the prefix's state to the whole's; so do the
        /// deltas of consecutive pieces, one after another.
        #[test]
        fn deltas_bring_a_state_forward(
            picks in proptest::collection::vec(0usize..9, 0..40),
            cuts in proptest::collection::vec(1usize..40, 1..4),
        ) {
            let kinds: Vec<_> = sample_kinds().into_iter().chain(loop_kinds()).collect();
            let events: Vec<_> = std::iter::once(0).chain(picks)
                .enumerate()
                .map(|(i, p)| { let (n, k) = kinds[p].clone(); ev(i as u64 + 1, n, k) })
                .collect();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(events.len())).collect();
            cuts.push(events.len());
            cuts.sort_unstable();
            let mut loaded = RunSnapshot::fold(&events[..cuts[0]]).unwrap();
            for pair in cuts.windows(2) {
                let (from, to) = (pair[0], pair[1]);
                let mut changes = Changes::default();
                for e in &events[from..to] { changes.note(e); }
                if !changes.fit_a_delta() {
                    loaded = RunSnapshot::fold(&events[..to]).unwrap();
                    continue;
                }
                let state = RunSnapshot::fold(&events[..to]).unwrap();
                let mut bytes = Vec::new();
                state.delta(from as u64, &changes).write_json(&mut bytes).unwrap();
                loaded.apply_delta(SnapshotDelta::from_json(&bytes).unwrap()).unwrap();
                prop_assert_eq!(&loaded, &state);
            }
        }
    }

    /// A loop edge that resets a node and an edge, and a node the loop runs again.
    fn loop_kinds() -> Vec<(Option<&'static str>, EventKind)> {
        let (a, b) = (NodeId::new("a").unwrap(), NodeId::new("b").unwrap());
        vec![
            (
                Some("b"),
                EventKind::EdgeFired {
                    edge_id: "b->a".into(),
                    from: b,
                    to: a.clone(),
                    iteration: Some(2),
                    reset_nodes: vec![a],
                    reset_edges: vec!["a->b".into()],
                },
            ),
            (
                Some("b"),
                EventKind::NodeCompleted {
                    output: serde_json::json!({"data": "y", "metadata": {"agent_name": "b"}}),
                },
            ),
        ]
    }

    /// A delta of a few nodes on a large state sets and removes their
    /// entries, and leaves every other entry as it was.
    #[test]
    fn a_small_delta_on_a_large_state_sets_and_removes_its_entries() {
        let mut state = RunSnapshot::new("0b6f8f4e-3c1a-4d2b-9f3e-1a2b3c4d5e6f".parse().unwrap());
        let id = |n: usize| NodeId::new(format!("n{n}")).unwrap();
        for n in 0..100 {
            state.node_status.insert(id(n), NodeStatus::Done);
            state
                .outputs
                .insert(id(n), JsonText::from_value(&serde_json::json!(n)));
        }
        state.last_offset = 5;
        let mut changes = Changes::default();
        let mut later = state.clone();
        for n in [7, 150] {
            let mut e = ev(
                6,
                Some("x"),
                EventKind::NodeSkipped {
                    reason: String::new(),
                },
            );
            e.node_id = Some(id(n));
            changes.note(&e);
        }
        later.node_status.insert(id(7), NodeStatus::Running);
        later.outputs.remove(&id(7));
        later.node_status.insert(id(150), NodeStatus::Skipped);
        later.last_offset = 6;
        state.apply_delta(later.delta(5, &changes)).unwrap();
        assert_eq!(state, later);
    }

    #[test]
    fn a_delta_that_does_not_continue_the_state_changes_nothing() {
        let events = sample_run();
        let whole = RunSnapshot::fold(&events).unwrap();
        let mut changes = Changes::default();
        for e in &events[3..] {
            changes.note(e);
        }
        let delta = whole.delta(3, &changes);
        let mut early = RunSnapshot::fold(&events[..2]).unwrap();
        let before = early.clone();
        assert_eq!(
            early.apply_delta(delta.clone()),
            Err(DeltaError::Gap { base: 3, at: 2 })
        );
        let mut other = delta.clone();
        other.run_id = "00000000-0000-4000-8000-000000000000".parse().unwrap();
        let mut at_three = RunSnapshot::fold(&events[..3]).unwrap();
        assert!(matches!(
            at_three.apply_delta(other),
            Err(DeltaError::OtherRun { .. })
        ));
        assert_eq!(early, before);
        at_three.apply_delta(delta).unwrap();
        assert_eq!(at_three, whole);
        // A delta of another version, or with a field this version does not
        // know, is not read: it could say what this version cannot apply.
        let mut bytes = Vec::new();
        whole.delta(3, &changes).write_json(&mut bytes).unwrap();
        let text = String::from_utf8(bytes).unwrap();
        let newer = text.replacen("\"delta\":1", "\"delta\":2", 1);
        assert!(matches!(
            SnapshotDelta::from_json(newer.as_bytes()),
            Err(DeltaError::Unreadable(_))
        ));
        let unknown = text.replacen('{', "{\"later\":1,", 1);
        assert!(matches!(
            SnapshotDelta::from_json(unknown.as_bytes()),
            Err(DeltaError::Unreadable(_))
        ));
        assert!(SnapshotDelta::from_json(&text.as_bytes()[..text.len() / 2]).is_err());
    }
}

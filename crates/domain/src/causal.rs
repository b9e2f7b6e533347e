//! Causal events (seed 002): who sent what to whom, as a graph.
//!
//! Six types (`task_sent`, `task_received`, `tool_call`, `tool_return`,
//! `response_sent`, `state_transition`), each naming its parent. They are a
//! pure projection of a run's event log (design §5.1: the run is its log),
//! so every run has them without a second record, and a replay of the same
//! run projects the same graph.
//!
//! Ids come from causal position, never from call order or time: an
//! event's id is a hash of the seed, its parent, its type, its agent and
//! its rank among that agent's events of that type under that parent. Two
//! branches that finish in another order give the same ids, and [`order`]
//! sorts any set of them into one topological order (ties by id).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::event::Prompt;
use crate::{EventKind, NodeId, NodeRunId, RuntimeEvent};

/// The `agent_id` of the workflow itself: it sends every task and makes
/// every run-level state transition.
pub const WORKFLOW_AGENT: &str = "workflow";

/// One causal event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
#[schemars(
    title = "awr causal event",
    description = "One inter-agent causal event of an awr run (seed 002)."
)]
pub enum CausalEvent {
    /// The workflow gave an agent a task (a node run started).
    TaskSent {
        /// The common fields.
        #[serde(flatten)]
        common: Common,
        /// The agent the task went to.
        recipient_agent_id: String,
        /// Where the task's payload is in the run (`<agent>/input`).
        payload_ref: String,
    },
    /// The agent took the task up (its provider call began).
    TaskReceived {
        /// The common fields.
        #[serde(flatten)]
        common: Common,
    },
    /// The agent called a tool.
    ToolCall {
        /// The common fields.
        #[serde(flatten)]
        common: Common,
    },
    /// A tool call returned (a result or an error).
    ToolReturn {
        /// The common fields.
        #[serde(flatten)]
        common: Common,
    },
    /// The agent answered its task (its node run ended).
    ResponseSent {
        /// The common fields.
        #[serde(flatten)]
        common: Common,
    },
    /// The run changed state (started, paused, resumed, forked, ended).
    StateTransition {
        /// The common fields.
        #[serde(flatten)]
        common: Common,
    },
}

/// The fields every causal event has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Common {
    /// Derived from causal position; formatted as a UUID v4.
    #[schemars(regex(
        pattern = r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$"
    ))]
    pub event_id: String,
    /// The agent that acted: a node id (`node[item]` for a `for_each`
    /// item), or `workflow`.
    #[schemars(length(min = 1))]
    pub agent_id: String,
    /// The event this one follows from; null for the run's first.
    #[schemars(regex(
        pattern = r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$"
    ))]
    pub parent_event_id: Option<String>,
    /// When it was recorded, in nanoseconds since the Unix epoch;
    /// informational only, never used for ordering.
    pub timestamp_ns: u64,
    /// The first 16 lowercase hex digits of the SHA-256 of the payload's
    /// canonical (RFC 8785) JSON.
    #[schemars(regex(pattern = r"^[0-9a-f]{16}$"))]
    pub payload_hash: String,
}

impl CausalEvent {
    /// The fields every type has.
    pub fn common(&self) -> &Common {
        match self {
            CausalEvent::TaskSent { common, .. }
            | CausalEvent::TaskReceived { common }
            | CausalEvent::ToolCall { common }
            | CausalEvent::ToolReturn { common }
            | CausalEvent::ResponseSent { common }
            | CausalEvent::StateTransition { common } => common,
        }
    }

    /// The type's name, as written.
    pub fn type_name(&self) -> &'static str {
        match self {
            CausalEvent::TaskSent { .. } => "task_sent",
            CausalEvent::TaskReceived { .. } => "task_received",
            CausalEvent::ToolCall { .. } => "tool_call",
            CausalEvent::ToolReturn { .. } => "tool_return",
            CausalEvent::ResponseSent { .. } => "response_sent",
            CausalEvent::StateTransition { .. } => "state_transition",
        }
    }
}

/// The JSON Schema of a causal event, generated from these types; the
/// committed `schema/causal-event.schema.json` must equal it.
pub fn schema() -> Value {
    let schema = schemars::schema_for!(CausalEvent);
    serde_json::to_value(&schema).unwrap_or(Value::Null)
}

/// Why a set of causal events is not a graph that can be ordered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CausalError {
    /// Two events share an id.
    #[error("event_id {0} appears twice")]
    Duplicate(String),
    /// An event is its own parent.
    #[error("event {0} is its own parent")]
    SelfParent(String),
    /// An event names a parent that is not in the set.
    #[error("event {event} names parent {parent}, which is not in the recording")]
    Dangling {
        /// The event.
        event: String,
        /// The missing parent.
        parent: String,
    },
    /// Parents form a cycle.
    #[error("the events {0} form a cycle of parents")]
    Cycle(String),
}

/// `events` in topological order (every parent before its children),
/// ties broken by `event_id`: the same set in any order gives the same list.
pub fn order(events: Vec<CausalEvent>) -> Result<Vec<CausalEvent>, CausalError> {
    let mut by_id: BTreeMap<String, CausalEvent> = BTreeMap::new();
    for event in events {
        let c = event.common();
        if c.parent_event_id.as_deref() == Some(c.event_id.as_str()) {
            return Err(CausalError::SelfParent(c.event_id.clone()));
        }
        let id = c.event_id.clone();
        if by_id.insert(id.clone(), event).is_some() {
            return Err(CausalError::Duplicate(id));
        }
    }
    let mut children: HashMap<&str, Vec<&str>> = HashMap::new();
    let mut ready = BTreeSet::new();
    for (id, event) in &by_id {
        match &event.common().parent_event_id {
            None => {
                ready.insert(id.as_str());
            }
            Some(parent) if by_id.contains_key(parent) => {
                children.entry(parent.as_str()).or_default().push(id);
            }
            Some(parent) => {
                return Err(CausalError::Dangling {
                    event: id.clone(),
                    parent: parent.clone(),
                });
            }
        }
    }
    let mut out = Vec::with_capacity(by_id.len());
    while let Some(id) = ready.pop_first() {
        out.push(id.to_owned());
        ready.extend(children.remove(id).unwrap_or_default());
    }
    if out.len() < by_id.len() {
        let placed: BTreeSet<&str> = out.iter().map(String::as_str).collect();
        let left: Vec<&str> = by_id
            .keys()
            .map(String::as_str)
            .filter(|id| !placed.contains(id))
            .collect();
        return Err(CausalError::Cycle(left.join(", ")));
    }
    Ok(out.into_iter().filter_map(|id| by_id.remove(&id)).collect())
}

/// The causal events of a run's log, in topological order; `seed` is mixed
/// into every id (the run id for a live run, a recording's `idSeed` on
/// replay).
pub fn project(events: &[RuntimeEvent], seed: &str) -> Vec<CausalEvent> {
    let mut p = Projection::new(seed);
    for event in events {
        p.event(event);
    }
    // Built parents first, so ordering cannot fail; it only sorts ties.
    order(p.out).unwrap_or_default()
}

/// What a node run is, as an agent.
struct Agent {
    id: String,
    /// Its last event: the next one follows from it.
    last: String,
}

struct Projection<'s> {
    seed: &'s str,
    root: Option<String>,
    agents: HashMap<NodeRunId, Agent>,
    /// The last answer of each node, for the tasks its edges lead to.
    answers: HashMap<NodeId, String>,
    /// Nodes whose edges fired into each node, not yet started.
    fired: HashMap<NodeId, BTreeSet<NodeId>>,
    /// Tool calls in flight by their id.
    calls: HashMap<String, String>,
    ranks: HashMap<(Option<String>, &'static str, String), u32>,
    out: Vec<CausalEvent>,
}

impl<'s> Projection<'s> {
    fn new(seed: &'s str) -> Self {
        Self {
            seed,
            root: None,
            agents: HashMap::new(),
            answers: HashMap::new(),
            fired: HashMap::new(),
            calls: HashMap::new(),
            ranks: HashMap::new(),
            out: Vec::new(),
        }
    }

    fn event(&mut self, e: &RuntimeEvent) {
        let ts = u64::try_from(e.timestamp.as_millis()).unwrap_or(0) * 1_000_000;
        match &e.kind {
            EventKind::FlowStarted {
                workflow, input, ..
            } => {
                let payload =
                    json!({"status": "running", "workflow": workflow.name, "input": input});
                let id = self.emit("state_transition", WORKFLOW_AGENT, None, ts, &payload, None);
                self.root = Some(id);
            }
            EventKind::FlowPaused { .. } => self.transition(ts, json!({"status": "paused"})),
            EventKind::FlowResumed { .. } => self.transition(ts, json!({"status": "resumed"})),
            EventKind::FlowForked { input, .. } => {
                self.transition(ts, json!({"status": "forked", "input": input}))
            }
            EventKind::FlowCompleted { output, .. } => self.transition(
                ts,
                json!({"status": "completed", "output": timeless(output)}),
            ),
            EventKind::FlowFailed { error, .. } => {
                self.transition(ts, json!({"status": "failed", "error": error}))
            }
            EventKind::FlowCancelled { reason, .. } => {
                self.transition(ts, json!({"status": "cancelled", "reason": reason}))
            }
            EventKind::EdgeFired { from, to, .. } => {
                self.fired
                    .entry(to.clone())
                    .or_default()
                    .insert(from.clone());
            }
            EventKind::NodeStarted {
                input,
                attempt,
                item,
                ..
            } => {
                let (Some(node), Some(run)) = (&e.node_id, e.node_run_id) else {
                    return;
                };
                let agent = match item {
                    Some(i) => format!("{node}[{i}]"),
                    None => node.to_string(),
                };
                // The task follows from the answer of the first node (by
                // id) whose edge led here: the same whatever order the
                // branches ended in.
                let parent = self
                    .fired
                    .remove(node)
                    .and_then(|from| from.iter().find_map(|n| self.answers.get(n).cloned()))
                    .or_else(|| self.root.clone());
                let payload = json!({"input": timeless(input), "attempt": attempt.unwrap_or(1)});
                let reference = format!("{agent}/input");
                let id = self.emit(
                    "task_sent",
                    WORKFLOW_AGENT,
                    parent,
                    ts,
                    &payload,
                    Some((agent.clone(), reference)),
                );
                self.agents.insert(
                    run,
                    Agent {
                        id: agent,
                        last: id,
                    },
                );
            }
            EventKind::AgentStart { prompt, .. } => {
                let payload = match prompt {
                    Prompt::Text(text) => json!({"prompt": text}),
                    Prompt::Messages(messages) => json!({"prompt": messages}),
                };
                self.act(e, "task_received", ts, &payload);
            }
            EventKind::AgentToolUse {
                tool_use_id,
                tool_name,
                tool_input,
                ..
            } => {
                let id = self.act(
                    e,
                    "tool_call",
                    ts,
                    &json!({"name": tool_name, "input": tool_input}),
                );
                if let (Some(call), Some(id)) = (tool_use_id, id) {
                    self.calls.insert(call.clone(), id);
                }
            }
            EventKind::ToolStarted {
                call_id,
                tool_name,
                tool_input,
                ..
            } => {
                let id = self.act(
                    e,
                    "tool_call",
                    ts,
                    &json!({"name": tool_name, "input": tool_input}),
                );
                if let Some(id) = id {
                    self.calls.insert(call_id.clone(), id);
                }
            }
            EventKind::AgentTool {
                tool_use_id,
                tool_name,
                tool_input,
                tool_output,
                error,
                ..
            } => {
                // A whole call reported at once is its call and its return.
                let announced = tool_use_id.as_ref().and_then(|c| self.calls.remove(c));
                if announced.is_none() {
                    self.act(
                        e,
                        "tool_call",
                        ts,
                        &json!({"name": tool_name, "input": tool_input}),
                    );
                }
                let payload = match error {
                    Some(error) => json!({"name": tool_name, "error": error}),
                    None => json!({"name": tool_name, "output": tool_output}),
                };
                self.act(e, "tool_return", ts, &payload);
            }
            EventKind::ToolCompleted {
                call_id,
                tool_name,
                tool_output,
                ..
            } => {
                self.calls.remove(call_id);
                self.act(
                    e,
                    "tool_return",
                    ts,
                    &json!({"name": tool_name, "output": tool_output}),
                );
            }
            EventKind::ToolFailed {
                call_id,
                tool_name,
                error,
                ..
            } => {
                self.calls.remove(call_id);
                self.act(
                    e,
                    "tool_return",
                    ts,
                    &json!({"name": tool_name, "error": error}),
                );
            }
            // The answer is the output's data; its metadata says how long
            // the run took, which is no part of what was said.
            EventKind::NodeCompleted { output } => {
                let data = output.get("data").unwrap_or(output);
                self.answer(e, ts, &json!({"output": timeless(data)}));
            }
            EventKind::NodeFailed { error, .. } => {
                self.answer(e, ts, &json!({"error": error}));
            }
            _ => {}
        }
    }

    fn transition(&mut self, ts: u64, payload: Value) {
        let parent = self.root.clone();
        self.emit(
            "state_transition",
            WORKFLOW_AGENT,
            parent,
            ts,
            &payload,
            None,
        );
    }

    /// An event of the node run `e` belongs to, after its last one.
    fn act(
        &mut self,
        e: &RuntimeEvent,
        kind: &'static str,
        ts: u64,
        payload: &Value,
    ) -> Option<String> {
        let agent = self.agents.get(&e.node_run_id?)?;
        let (agent_id, parent) = (agent.id.clone(), agent.last.clone());
        let id = self.emit(kind, &agent_id, Some(parent), ts, payload, None);
        if let Some(agent) = e.node_run_id.and_then(|r| self.agents.get_mut(&r)) {
            agent.last = id.clone();
        }
        Some(id)
    }

    fn answer(&mut self, e: &RuntimeEvent, ts: u64, payload: &Value) {
        if let (Some(id), Some(node)) = (self.act(e, "response_sent", ts, payload), &e.node_id) {
            self.answers.insert(node.clone(), id);
        }
    }

    fn emit(
        &mut self,
        kind: &'static str,
        agent: &str,
        parent: Option<String>,
        ts: u64,
        payload: &Value,
        task: Option<(String, String)>,
    ) -> String {
        let rank = self
            .ranks
            .entry((parent.clone(), kind, agent.to_owned()))
            .or_insert(0);
        let event_id = position_id(self.seed, parent.as_deref(), kind, agent, *rank);
        *rank += 1;
        let common = Common {
            event_id: event_id.clone(),
            agent_id: agent.to_owned(),
            parent_event_id: parent,
            timestamp_ns: ts,
            payload_hash: payload_hash(payload),
        };
        self.out.push(match (kind, task) {
            ("task_sent", Some((recipient_agent_id, payload_ref))) => CausalEvent::TaskSent {
                common,
                recipient_agent_id,
                payload_ref,
            },
            ("task_received", _) => CausalEvent::TaskReceived { common },
            ("tool_call", _) => CausalEvent::ToolCall { common },
            ("tool_return", _) => CausalEvent::ToolReturn { common },
            ("response_sent", _) => CausalEvent::ResponseSent { common },
            _ => CausalEvent::StateTransition { common },
        });
        event_id
    }
}

/// Clock readings a node's output carries in its metadata, which reach the
/// inputs after it: no part of what was said, so no part of a payload.
const TIMINGS: [&str; 2] = ["execution_time_ms", "durationMs"];

/// `value` without its clock readings.
fn timeless(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| !TIMINGS.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), timeless(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(timeless).collect()),
        other => other.clone(),
    }
}

/// A UUID (v4 form) from a causal position.
pub fn position_id(seed: &str, parent: Option<&str>, kind: &str, agent: &str, rank: u32) -> String {
    let mut hash = Sha256::new();
    for part in [seed, parent.unwrap_or(""), kind, agent] {
        hash.update(part.as_bytes());
        hash.update([0]);
    }
    hash.update(rank.to_be_bytes());
    let digest = hash.finalize();
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_random_bytes(bytes)
        .into_uuid()
        .to_string()
}

/// 16 lowercase hex digits of the SHA-256 of `payload`'s canonical JSON.
pub fn payload_hash(payload: &Value) -> String {
    let bytes = crate::canonical::jcs(payload).unwrap_or_default();
    let mut hex = crate::canonical::sha256_hex(&bytes);
    hex.truncate(16);
    hex
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ev(id: &str, parent: Option<&str>) -> CausalEvent {
        CausalEvent::ToolCall {
            common: Common {
                event_id: id.into(),
                agent_id: "a".into(),
                parent_event_id: parent.map(Into::into),
                timestamp_ns: 0,
                payload_hash: "0123456789abcdef".into(),
            },
        }
    }

    /// A DAG: root, two children, a grandchild of each.
    fn dag() -> Vec<CausalEvent> {
        vec![
            ev("r", None),
            ev("b", Some("r")),
            ev("a", Some("r")),
            ev("c", Some("a")),
            ev("d", Some("b")),
            ev("e", None),
        ]
    }

    fn ids(events: &[CausalEvent]) -> Vec<&str> {
        events
            .iter()
            .map(|e| e.common().event_id.as_str())
            .collect()
    }

    #[test]
    fn parents_come_first_and_ties_go_by_id() {
        let ordered = order(dag()).unwrap();
        assert_eq!(ids(&ordered), ["e", "r", "a", "b", "c", "d"]);
    }

    proptest! {
        /// The same DAG written in any order gives the same bytes.
        #[test]
        fn any_write_order_gives_the_same_bytes(seed in any::<u64>()) {
            let mut events = dag();
            let mut s = seed;
            for i in (1..events.len()).rev() {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                events.swap(i, (s >> 33) as usize % (i + 1));
            }
            let a = serde_json::to_string(&order(events).unwrap()).unwrap();
            let b = serde_json::to_string(&order(dag()).unwrap()).unwrap();
            prop_assert_eq!(a, b);
        }
    }

    #[test]
    fn a_graph_that_cannot_be_ordered_is_refused_by_name() {
        let mut dup = dag();
        dup.push(ev("a", None));
        assert_eq!(order(dup), Err(CausalError::Duplicate("a".into())));
        assert_eq!(
            order(vec![ev("x", Some("x"))]),
            Err(CausalError::SelfParent("x".into()))
        );
        assert!(matches!(
            order(vec![ev("x", Some("gone"))]),
            Err(CausalError::Dangling { .. })
        ));
        assert_eq!(
            order(vec![ev("r", None), ev("x", Some("y")), ev("y", Some("x"))]),
            Err(CausalError::Cycle("x, y".into()))
        );
    }

    #[test]
    fn ids_are_v4_uuids_from_position_and_hashes_are_16_hex() {
        let id = position_id("seed", None, "task_sent", "a", 0);
        let uuid = uuid::Uuid::parse_str(&id).unwrap();
        assert_eq!(uuid.get_version_num(), 4);
        assert_eq!(id, position_id("seed", None, "task_sent", "a", 0));
        assert_ne!(id, position_id("seed", None, "task_sent", "a", 1));
        assert_ne!(id, position_id("other", None, "task_sent", "a", 0));
        let hash = payload_hash(&json!({"b": 1, "a": 2}));
        assert_eq!(hash, payload_hash(&json!({"a": 2, "b": 1})));
        assert_eq!(hash.len(), 16);
        assert!(
            hash.chars()
                .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
        );
    }
}

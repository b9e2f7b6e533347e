//! The executor's bookkeeping inside a [`RunSnapshot`](super::RunSnapshot):
//! node runs in flight, `for_each` items, counters and the budget spent.
//!
//! Design §5.1: the executor's whole state is `fold(events)`. Everything it
//! needs to decide what runs next (beyond seed 001's fields) is folded here
//! from the events alone, so a run continued from its log, in this process
//! or another, decides exactly as the one that wrote it would have. These are
//! awr's additions to the snapshot: optional on read, left out when empty.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::event::Usage;
use crate::ids::{NodeId, RunId, SessionId};
use crate::time::Timestamp;

/// One node run that started and has not ended: what a resume finds in flight.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeRunState {
    /// The node it runs.
    pub node_id: NodeId,
    /// Its current attempt, from 1.
    #[serde(default = "first")]
    pub attempt: u32,
    /// The `for_each` item it works on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item: Option<u32>,
    /// How many times the node had started before this run (the
    /// transcript's `iteration`).
    #[serde(default)]
    pub iteration: u32,
    /// When its first attempt started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Timestamp>,
    /// Its input (`{data, metadata}`), as `node:started` recorded it: a
    /// new attempt after a resume gets the same.
    #[serde(default, skip_serializing_if = "is_null")]
    pub input: Arc<Value>,
    /// The output data of its agent's last finished invocation
    /// (`agent:complete`), until another begins: a node run that stopped
    /// right after it ends with it on resume, without calling again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// The provider session its current attempt runs in, once the provider
    /// named it: what a resume continues.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionId>,
    /// What the invocations of that session recorded so far: the baseline
    /// of a CLI that reports a resumed session's cumulative usage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_usage: Option<Usage>,
    /// The provider call of its invocation in progress (`callIndex`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_index: Option<u32>,
    /// The node's call index its first provider call takes, set aside
    /// when it started: node runs start in a fixed order (items by index)
    /// but call in any, so a node's fixtures answer its items in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_call: Option<u32>,
    /// Provider calls it started, across its attempts (`instanceCall` of
    /// its next call).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub calls: u32,
    /// The provider call its previous attempt was in when that attempt
    /// was cut off (a crash, a pause, a session on another machine): the
    /// current attempt redoes it under its number, even if this attempt is
    /// cut off again before it begins it. Cleared by its next `agent:start`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redo_call: Option<u32>,
    /// An agent invocation began (`agent:start`) and has not ended: the
    /// node run takes messages (`send`/`reply`) only then.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub in_turn: bool,
    /// Process groups of its invocation in progress (`process:started`):
    /// what a resume kills if the process that ran them died.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub processes: Vec<ProcessRef>,
    /// The machine its current attempt's processes ran on
    /// (`process:started`'s `host`): where a CLI agent's session is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The child run its current attempt started (`subflow:started`): what
    /// a resume continues, rather than starting another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child: Option<RunId>,
    /// Copied into a fork while in flight (`flow:forked`), and not gone on
    /// since: its session is the parent run's, to be forked, not continued
    /// in place (see `Provider::forks_sessions`). Cleared by its next
    /// `agent:start` or attempt.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub forked: bool,
    /// The question an `approval` node run, or a tool call of an agent
    /// node run, asked (`approval:requested`), and its answer once one is
    /// accepted; cleared when it is resolved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<Box<Question>>,
}

/// The question an `approval` node run asked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Question {
    /// What the person is shown.
    #[serde(default)]
    pub prompt: String,
    /// The schema an approval's data must meet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<Value>,
    /// When `onTimeout` applies, if ever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Timestamp>,
    /// The answer accepted (`command:received`), not yet resolved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<crate::command::Answer>,
    /// The tool call asked about, when an agent's call waits
    /// (`requires_approval:`) rather than an `approval` node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<crate::event::AskedCall>,
}

impl NodeRunState {
    /// Its position among the node's runs, as `agent:start` records it
    /// (`instance`): its pass, and its `for_each` item.
    pub fn instance(&self) -> String {
        match self.item {
            Some(item) => format!("{}#{item}", self.iteration),
            None => self.iteration.to_string(),
        }
    }
}

/// Where a forked run branched off (`flow:forked`): the parent run and the
/// offset of its last event the fork copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ForkedFrom {
    /// The run forked.
    pub run_id: RunId,
    /// Its events 1 to `offset` begin the fork's log.
    pub offset: u64,
}

/// A process group leader, as `process:started` recorded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessRef {
    /// Its pid, which is also its process group id.
    pub pid: u32,
    /// Its start time in clock ticks since boot.
    pub start_time: u64,
}

fn first() -> u32 {
    1
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A `for_each` node whose items are running.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ForEachState {
    /// The items, as its `for_each` expression yielded them.
    pub items: Vec<Value>,
    /// Output data of the items that finished, by index (`null` for an
    /// item that failed with `continue_on_error`).
    #[serde(default)]
    pub outputs: BTreeMap<u32, Value>,
    /// Items that have been started (finished ones included).
    #[serde(default)]
    pub started: u32,
}

impl ForEachState {
    /// Whether every item finished.
    pub fn is_done(&self) -> bool {
        self.outputs.len() == self.items.len()
    }
}

/// What agent runs consumed, against the budgets of a run or a node.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Spent {
    /// Input plus output tokens.
    #[serde(default)]
    pub tokens: u64,
    /// Cost in US dollars, of the runs that reported or could be priced.
    #[serde(default)]
    pub cost_usd: f64,
    /// Model turns.
    #[serde(default)]
    pub turns: u64,
    /// When the first run started (the start of a node's deadline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<Timestamp>,
}

impl Spent {
    /// Adds one agent run's consumption.
    pub fn add(&mut self, usage: &Usage, cost_usd: Option<f64>, turns: u32) {
        self.tokens = self
            .tokens
            .saturating_add(usage.input_tokens)
            .saturating_add(usage.output_tokens);
        self.cost_usd += cost_usd.unwrap_or(0.0);
        self.turns = self.turns.saturating_add(u64::from(turns));
    }

    /// Whether nothing was spent yet.
    pub fn is_empty(&self) -> bool {
        *self == Spent::default()
    }
}

/// Whether a shared input is `null`: written only when there is one.
fn is_null(value: &Arc<Value>) -> bool {
    value.is_null()
}

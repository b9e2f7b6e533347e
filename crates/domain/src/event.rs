//! The run event log's vocabulary: [`RuntimeEvent`], one line of `events.ndjson`.
//!
//! The envelope (`id`, `offset`, `timestamp`, `type`, `runId`, `nodeId`,
//! `nodeRunId`) is shared; the rest depends on `type`. Names follow seed 001
//! (`flow:*`, `node:*`, `agent:*`, ...), fields are camelCase. A reader keeps
//! types it does not know as [`EventKind::Unknown`] with the whole raw line, and
//! fields it does not know of a known type in [`RuntimeEvent::extra`], so a log
//! written by a newer awr never makes an older one fail or lose data.
//!
//! What a line must have (design §3, seed 001): the envelope (`id`, `offset`,
//! `timestamp`, `type`, `runId`); for the `agent:*` types the fields seed 001
//! requires; for the other types only the ids that say what the event is
//! about (`edgeId`, `from`, `to`, `callId`, `toolName`, `childRunId`,
//! `snapshotOffset`, `status`, `parentRunId` and `parentOffset` of
//! `flow:forked`). Every other field, awr's own additions
//! included, is optional on read and reads as empty (null, 0, "", []) when
//! an older writer left it out.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::caller::Caller;
use crate::ids::{NodeId, NodeRunId, Offset, RunId, SessionId};
use crate::snapshot::status::RunStatus;
use crate::time::Timestamp;

mod payload;
mod usage;
pub use payload::{AskedCall, Prompt, WorkflowRef};
pub use usage::{ModelUsage, Usage};

/// One event of a run's log.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeEvent {
    /// Unique id of the event (UUID).
    pub id: String,
    /// Position in the run's log, from 1, no gaps.
    pub offset: Offset,
    /// When it was recorded.
    pub timestamp: Timestamp,
    /// The workflow run.
    pub run_id: RunId,
    /// The node it concerns, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_id: Option<NodeId>,
    /// The node execution it concerns, if any (commands are routed by it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_run_id: Option<NodeRunId>,
    /// `type` and the fields that go with it.
    #[serde(flatten)]
    pub kind: EventKind,
    /// Fields of a known `type` that this version does not know (a newer
    /// writer's), kept so they are shown and written back unchanged.
    /// Always empty for events this version writes.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// What an agent emitted with an event that awr does not map: each field
/// of the line (a CLI's stdout line, an HTTP API's streamed chunk or body)
/// that no field of the event holds, under its JSON Pointer in that line,
/// its value verbatim (`{"/message/usage": {...}, "/uuid": "..."}`). A
/// newer CLI or API adding a field loses nothing: it is kept here until
/// awr maps it. Empty, and not written, when the line held nothing more.
/// `docs/events.md` says which events carry it.
pub type Extra = Map<String, Value>;

/// Declares [`EventKind`] and, from the same text, `ByName`: the same
/// variants read by a variant's name given apart from its fields (serde's
/// `remote` derive builds an `EventKind`). A log line's reader knows the
/// `type` before it reads the other fields; the internally tagged derive
/// would first copy every field into serde's untyped buffer to find it.
macro_rules! event_kind {
    ($(#[$meta:meta])* pub enum EventKind { $($body:tt)* }) => {
        $(#[$meta])*
        pub enum EventKind { $($body)* }

        #[derive(Deserialize)]
        #[serde(remote = "EventKind")]
        #[allow(dead_code)] // only its derived reader is used
        enum ByName { $($body)* }
    };
}

event_kind! {
/// Everything after the envelope, tagged by `type`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
#[allow(missing_docs)] // variant fields are documented in docs/events.md, one entry per type
#[non_exhaustive]
pub enum EventKind {
    /// The run began; lists its nodes and edges so the snapshot can be folded from events alone.
    #[serde(rename = "flow:started", rename_all = "camelCase")]
    FlowStarted {
        #[serde(default)]
        workflow: WorkflowRef,
        #[serde(default)]
        input: Value,
        /// The run that called this one (`call_workflow`), for a child run.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent_run_id: Option<RunId>,
        /// Where the definition was read from, so `awr resume` can read it
        /// again (its `workflow.hash` must still match).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        source: Option<String>,
        /// `sha256:<hex>` of the definition stored with the run (its files,
        /// see [`crate::definition`]), which resume and fork read; absent
        /// for runs started without a file, or before definitions were kept.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        definition: Option<String>,
        #[serde(default)]
        nodes: Vec<NodeId>,
        #[serde(default)]
        edges: Vec<String>,
        /// Who started the run (a token's name, or a local user).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        started_by: Option<Caller>,
    },
    /// The run stopped at a safe point and may be resumed.
    #[serde(rename = "flow:paused", rename_all = "camelCase")]
    FlowPaused {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// Every node run in flight waits for a person: the run is
        /// `waiting`, and an answer continues it.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        waiting: bool,
    },
    /// A paused or interrupted run continues.
    #[serde(rename = "flow:resumed", rename_all = "camelCase")]
    FlowResumed {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
        /// Who resumed it; absent when the runtime did (a recovery).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<Caller>,
    },
    /// The run goes on under another definition (`awr resume --upgrade`):
    /// every node in flight is one of its nodes. `nodes` and `edges` are
    /// its ids, as `flow:started` lists them; `definition` names the
    /// definition stored with the run from here on.
    #[serde(rename = "flow:upgraded", rename_all = "camelCase")]
    FlowUpgraded {
        #[serde(default)]
        from: WorkflowRef,
        #[serde(default)]
        to: WorkflowRef,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        definition: Option<String>,
        #[serde(default)]
        nodes: Vec<NodeId>,
        #[serde(default)]
        edges: Vec<String>,
        /// Who upgraded it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<Caller>,
    },
    /// The run is a fork: its log up to here is a copy of the events of
    /// run `parentRunId` up to `parentOffset` (seed 004's branch, recorded
    /// in the branch). `input`, when present, replaces the run's input for
    /// what starts after it.
    #[serde(rename = "flow:forked", rename_all = "camelCase")]
    FlowForked {
        parent_run_id: RunId,
        parent_offset: Offset,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        input: Option<Value>,
        /// Who forked it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<Caller>,
    },
    /// Terminal: every reachable node finished.
    #[serde(rename = "flow:completed", rename_all = "camelCase")]
    FlowCompleted {
        #[serde(default)]
        output: Value,
        #[serde(default)]
        duration_ms: u64,
    },
    /// Terminal: a node failed and its policy stopped the run, or the runtime failed.
    #[serde(rename = "flow:failed", rename_all = "camelCase")]
    FlowFailed {
        #[serde(default)]
        error: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        failed_node: Option<NodeId>,
        #[serde(default)]
        duration_ms: u64,
    },
    /// Terminal: a user cancelled the run.
    #[serde(rename = "flow:cancelled", rename_all = "camelCase")]
    FlowCancelled {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// A node run began (or began again: `attempt` > 1 is a retry of the
    /// same `nodeRunId`), with the input its agent receives. The item run of
    /// a `for_each` node names its `item`; the node run that spawns the
    /// items names their count in `items`.
    #[serde(rename = "node:started", rename_all = "camelCase")]
    NodeStarted {
        /// `{data, metadata}`: shared, not copied, by the node run's task
        /// and the state's record of the run in flight.
        #[serde(default)]
        input: Arc<Value>,
        /// 1 for the first attempt; absent (an older writer) reads as 1.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attempt: Option<u32>,
        /// Index of the `for_each` item this node run works on.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        item: Option<u32>,
        /// Number of `for_each` items (the list is `input.data`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        items: Option<u32>,
    },
    /// A node execution succeeded; `output` is `{data, metadata}`.
    #[serde(rename = "node:completed", rename_all = "camelCase")]
    NodeCompleted {
        #[serde(default)]
        output: Value,
    },
    /// A node execution failed; `continued` says the policy let the run go on.
    #[serde(rename = "node:failed", rename_all = "camelCase")]
    NodeFailed {
        #[serde(default)]
        error: String,
        #[serde(default)]
        continued: bool,
    },
    /// A node will not run in this pass (no incoming edge fired).
    #[serde(rename = "node:skipped", rename_all = "camelCase")]
    NodeSkipped {
        #[serde(default)]
        reason: String,
    },
    /// An edge passed its condition. A loop edge also names what it resets.
    #[serde(rename = "edge:fired", rename_all = "camelCase")]
    EdgeFired {
        edge_id: String,
        from: NodeId,
        to: NodeId,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        iteration: Option<u32>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        reset_nodes: Vec<NodeId>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        reset_edges: Vec<String>,
    },
    /// An edge did not fire (condition false, source skipped, loop limit reached).
    #[serde(rename = "edge:skipped", rename_all = "camelCase")]
    EdgeSkipped {
        edge_id: String,
        from: NodeId,
        to: NodeId,
        #[serde(default)]
        reason: String,
    },
    /// An agent invocation begins, recorded before the provider is called.
    /// `sessionId` is the session it runs in: one the runtime chose for a
    /// provider that takes it (Claude Code's `--session-id`), or the one it
    /// continues. `provisional`: the provider names its session only once
    /// it runs (`agent:session` follows); until then `sessionId` is the
    /// runtime's own id for the call and nothing to resume with. `inbox`:
    /// the offsets of the accepted `command:received` messages this
    /// invocation's prompt delivers.
    #[serde(rename = "agent:start", rename_all = "camelCase")]
    AgentStart {
        session_id: SessionId,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
        prompt: Prompt,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        provisional: bool,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        inbox: Vec<u64>,
        /// Which of its node's provider calls this is, from 0 (the mock
        /// provider serves the recorded call of this index); an invocation
        /// that continues after a crash keeps the index it had.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        call_index: Option<u32>,
        /// The node run the call belongs to, by position: its pass through
        /// the node, and its `for_each` item (`"2"`, `"0#3"`). Unlike the
        /// node's call order, this does not depend on how parallel items
        /// were scheduled: a recording is served by `(node, instance,
        /// instanceCall)`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        instance: Option<String>,
        /// Which of its node run's provider calls this is, from 0 (across
        /// its attempts); a call redone after a crash keeps its number.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        instance_call: Option<u32>,
        /// Why this invocation starts afresh rather than continuing its
        /// node run's session: a takeover on a machine that does not have
        /// the session (a CLI agent keeps it on the disk of the machine
        /// that ran it). The new attempt starts from what is on record.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        restart: Option<String>,
    },
    /// The provider named the session of the invocation in progress
    /// (`agentSessions[nodeId]`, design §4.3): recorded the moment it is known.
    #[serde(rename = "agent:session", rename_all = "camelCase")]
    AgentSession {
        session_id: SessionId,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
        /// What the agent emitted with it that awr does not map ([`Extra`]).
        #[serde(default, skip_serializing_if = "Map::is_empty")]
        extra: Extra,
    },
    /// A process group of the node run began: an agent CLI or a `command`
    /// step, the leader `pid` of its own group, with the start time the
    /// kernel gives it (`startTime`, clock ticks since boot), so that a
    /// later process can tell a leftover group from a reused pid and kill it.
    #[serde(rename = "process:started", rename_all = "camelCase")]
    ProcessStarted {
        pid: u32,
        start_time: u64,
        /// The machine it runs on (its host name): only a writer on that
        /// machine may kill the group, or continue a CLI agent's session,
        /// which is on that machine's disk.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        host: Option<String>,
    },
    /// A streamed chunk of thinking.
    #[serde(rename = "agent:thinking:delta", rename_all = "camelCase")]
    AgentThinkingDelta {
        content: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token_count: Option<u64>,
        /// What the agent emitted with it that awr does not map ([`Extra`]).
        #[serde(default, skip_serializing_if = "Map::is_empty")]
        extra: Extra,
    },
    /// A complete thinking block (when the provider does not stream).
    #[serde(rename = "agent:thinking", rename_all = "camelCase")]
    AgentThinking {
        content: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token_count: Option<u64>,
        /// The provider's signature of the block (Claude), kept verbatim.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
        /// What the agent emitted with it that awr does not map ([`Extra`]).
        #[serde(default, skip_serializing_if = "Map::is_empty")]
        extra: Extra,
    },
    /// A streamed chunk of text.
    #[serde(rename = "agent:text:delta", rename_all = "camelCase")]
    AgentTextDelta {
        content: String,
        /// What the agent emitted with it that awr does not map ([`Extra`]).
        #[serde(default, skip_serializing_if = "Map::is_empty")]
        extra: Extra,
    },
    /// A complete text block (when the provider does not stream).
    #[serde(rename = "agent:text", rename_all = "camelCase")]
    AgentText {
        content: String,
        /// What the agent emitted with it that awr does not map ([`Extra`]).
        #[serde(default, skip_serializing_if = "Map::is_empty")]
        extra: Extra,
    },
    /// The agent asked for a tool it runs itself, where it asked; its
    /// `agent:tool` follows with the same `toolUseId` when a result comes.
    #[serde(rename = "agent:tool:use", rename_all = "camelCase")]
    AgentToolUse {
        /// The provider's own id of the call; absent when it gave none.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool_use_id: Option<String>,
        tool_name: String,
        #[serde(default)]
        tool_input: Value,
        /// What the agent emitted with it that awr does not map ([`Extra`]).
        #[serde(default, skip_serializing_if = "Map::is_empty")]
        extra: Extra,
    },
    /// A tool the agent ran, with full input and output.
    #[serde(rename = "agent:tool", rename_all = "camelCase")]
    AgentTool {
        /// The provider's own id of the call, joining it to its `agent:tool:use`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool_use_id: Option<String>,
        tool_name: String,
        tool_input: Value,
        tool_output: Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        duration_ms: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// What the agent emitted with it that awr does not map ([`Extra`]).
        #[serde(default, skip_serializing_if = "Map::is_empty")]
        extra: Extra,
    },
    /// An error reported by or about the agent (policy decides if it is fatal).
    #[serde(rename = "agent:error", rename_all = "camelCase")]
    AgentError {
        error_type: String,
        message: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        details: Option<Value>,
    },
    /// The agent finished successfully.
    #[serde(rename = "agent:complete", rename_all = "camelCase")]
    AgentComplete {
        result: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        structured_output: Option<Value>,
        usage: Usage,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model_usage: Option<std::collections::BTreeMap<String, ModelUsage>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        total_cost_usd: Option<f64>,
        duration_ms: u64,
        num_turns: u32,
        /// The provider's session id when it was only known at the end (Copilot
        /// names it on its last line, after `agent:start` had to use another).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        session_id: Option<SessionId>,
        /// What the agent emitted with it that awr does not map ([`Extra`]).
        #[serde(default, skip_serializing_if = "Map::is_empty")]
        extra: Extra,
    },
    /// The runtime began executing a tool on an agent's behalf.
    #[serde(rename = "tool:started", rename_all = "camelCase")]
    ToolStarted {
        call_id: String,
        tool_name: String,
        #[serde(default)]
        tool_input: Value,
        /// What the model sent with the call that awr does not map ([`Extra`]).
        #[serde(default, skip_serializing_if = "Map::is_empty")]
        extra: Extra,
    },
    /// A runtime-executed tool returned.
    #[serde(rename = "tool:completed", rename_all = "camelCase")]
    ToolCompleted {
        call_id: String,
        tool_name: String,
        #[serde(default)]
        tool_output: Value,
        #[serde(default)]
        duration_ms: u64,
    },
    /// A runtime-executed tool failed; the error goes back to the model.
    #[serde(rename = "tool:failed", rename_all = "camelCase")]
    ToolFailed {
        call_id: String,
        tool_name: String,
        #[serde(default)]
        error: String,
        #[serde(default)]
        duration_ms: u64,
    },
    /// A command arrived; rejected ones are recorded too, with the raw payload.
    #[serde(rename = "command:received", rename_all = "camelCase")]
    CommandReceived {
        #[serde(default)]
        command: Value,
        #[serde(default)]
        accepted: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// Who sent it; absent when the runtime did (a child run paused
        /// with its parent, a signal to the writing process).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<Caller>,
    },
    /// A snapshot reflecting every event up to `snapshotOffset` is on disk.
    #[serde(rename = "state:saved", rename_all = "camelCase")]
    StateSaved { snapshot_offset: Offset },
    /// A run budget (tokens, cost, turns, deadline) ran out.
    #[serde(rename = "budget:exceeded", rename_all = "camelCase")]
    BudgetExceeded {
        #[serde(default)]
        budget: String,
        #[serde(default)]
        limit: f64,
        #[serde(default)]
        used: f64,
    },
    /// A provider rate-limited a call; the runtime waits and retries.
    #[serde(rename = "rate:limited", rename_all = "camelCase")]
    RateLimited {
        #[serde(default)]
        provider: String,
        #[serde(default)]
        attempt: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_after_ms: Option<u64>,
    },
    /// Something worth knowing that is not an error (a dropped subscriber, a repaired line).
    #[serde(rename = "warning", rename_all = "camelCase")]
    Warning {
        #[serde(default)]
        message: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        details: Option<Value>,
    },
    /// A child run began.
    #[serde(rename = "subflow:started", rename_all = "camelCase")]
    SubflowStarted {
        child_run_id: RunId,
        #[serde(default)]
        workflow: String,
    },
    /// A child run ended.
    #[serde(rename = "subflow:completed", rename_all = "camelCase")]
    SubflowCompleted {
        child_run_id: RunId,
        status: RunStatus,
    },
    /// An `approval` node run asks a person (docs/approvals.md): what the
    /// person is shown, the schema an approval's data must meet, and the
    /// deadline, after which `onTimeout` applies. Recorded once per node run.
    /// An agent node run asks it too, for each call of a tool granted with
    /// `requires_approval` (`tool`): its model's turn waits, with the calls
    /// after that one (`laterCalls`), which run once it is answered.
    #[serde(rename = "approval:requested", rename_all = "camelCase")]
    ApprovalRequested {
        #[serde(default)]
        prompt: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        schema: Option<Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        deadline: Option<Timestamp>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        on_timeout: Option<String>,
        /// Who may answer; empty, anyone who may command the run.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        approvers: Vec<String>,
        /// The tool call asked about, when it is one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool: Option<AskedCall>,
        /// The calls of the same model turn after it, not yet run.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        later_calls: Vec<AskedCall>,
    },
    /// The question of an `approval` node run is settled: `how` it was
    /// (`answered`, `timed_out`), the answer, and who gave it. The node run
    /// then ends with the answer as its output.
    #[serde(rename = "approval:resolved", rename_all = "camelCase")]
    ApprovalResolved {
        #[serde(default)]
        approved: bool,
        #[serde(default, skip_serializing_if = "Value::is_null")]
        data: Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<Caller>,
        #[serde(default)]
        how: String,
    },
    /// The runtime itself failed (storage, bug); the run is marked failed.
    #[serde(rename = "system:error", rename_all = "camelCase")]
    SystemError {
        #[serde(default)]
        message: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        details: Option<Value>,
    },
    /// A type this version does not know, kept whole so nothing is lost.
    #[serde(skip)]
    Unknown {
        /// The `type` as written.
        type_name: String,
        /// Every field of the line except the envelope.
        raw: Map<String, Value>,
    },
}
}

mod names;

pub use self::names::KNOWN_TYPES;

mod codec;

pub use self::codec::EventParseError;

impl<'de> Deserialize<'de> for RuntimeEvent {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(d)?;
        let bytes = serde_json::to_vec(&value).map_err(serde::de::Error::custom)?;
        RuntimeEvent::from_json(&bytes).map_err(serde::de::Error::custom)
    }
}

/// Which top-level fields a known kind serializes, without touching their
/// values (an output may be megabytes): a serializer that records the field
/// names of one struct and refuses everything else.
mod keys;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    #[test]
    fn a_resumed_sessions_totals_minus_its_recorded_usage_is_this_invocations() {
        let usage = |i, o, cache_read| Usage {
            input_tokens: i,
            output_tokens: o,
            cache_read_input_tokens: cache_read,
            ..Usage::default()
        };
        let total = usage(360, 75, Some(10));
        let before = usage(240, 50, Some(4));
        let mine = total.minus(&before);
        assert_eq!((mine.input_tokens, mine.output_tokens), (120, 25));
        assert_eq!(mine.cache_read_input_tokens, Some(6));
        assert_eq!(mine.cache_creation_input_tokens, None);
        assert_eq!(before.minus(&total).input_tokens, 0, "never below zero");
        assert_eq!(before.plus(&mine), total);
    }

    use super::*;

    const RUN: &str = "0b6f8f4e-3c1a-4d2b-9f3e-1a2b3c4d5e6f";

    fn event(kind: EventKind) -> RuntimeEvent {
        RuntimeEvent {
            id: "e1".into(),
            offset: Offset::new(3).unwrap(),
            timestamp: Timestamp::from_millis(1_767_225_600_000),
            run_id: RUN.parse().unwrap(),
            node_id: Some(NodeId::new("writer").unwrap()),
            node_run_id: None,
            kind,
            extra: Map::new(),
        }
    }

    #[test]
    fn agent_complete_has_the_seed_shape() {
        let e = event(EventKind::AgentComplete {
            result: "done".into(),
            structured_output: None,
            usage: Usage {
                input_tokens: 150,
                output_tokens: 200,
                ..Usage::default()
            },
            model_usage: None,
            total_cost_usd: Some(0.25),
            duration_ms: 1234,
            num_turns: 1,
            session_id: None,
            extra: Default::default(),
        });
        let json = e.to_json().unwrap();
        assert_eq!(
            json,
            format!(
                r#"{{"id":"e1","offset":3,"timestamp":"2026-01-01T00:00:00.000Z","runId":"{RUN}","nodeId":"writer","type":"agent:complete","result":"done","usage":{{"inputTokens":150,"outputTokens":200}},"totalCostUsd":0.25,"durationMs":1234,"numTurns":1}}"#
            )
        );
        assert_eq!(RuntimeEvent::from_json(json.as_bytes()).unwrap(), e);
    }

    #[test]
    fn unknown_fields_inside_known_objects_round_trip_intact() {
        let line = format!(
            r#"{{"id":"x","offset":7,"timestamp":"2026-01-01T00:00:00.000Z","type":"agent:complete","runId":"{RUN}","nodeId":"writer","result":"ok","usage":{{"inputTokens":1,"outputTokens":2,"reasoningTokens":9}},"modelUsage":{{"m":{{"inputTokens":1,"outputTokens":2,"webSearches":1}}}},"durationMs":5,"numTurns":1}}"#
        );
        let e = RuntimeEvent::from_json(line.as_bytes()).unwrap();
        let back: Value = serde_json::from_str(&e.to_json().unwrap()).unwrap();
        let orig: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(back, orig);
    }

    #[test]
    fn unknown_types_round_trip_intact() {
        let line = format!(
            r#"{{"id":"x","offset":7,"timestamp":"2026-01-01T00:00:00.000Z","type":"future:thing","runId":"{RUN}","weird":{{"a":[1,2]}}}}"#
        );
        let e = RuntimeEvent::from_json(line.as_bytes()).unwrap();
        assert_eq!(e.kind.type_name(), "future:thing");
        let back: Value = serde_json::from_str(&e.to_json().unwrap()).unwrap();
        let orig: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(back, orig);
    }

    #[test]
    fn older_lines_without_awr_additions_read_with_empty_fields() {
        let line = format!(
            r#"{{"id":"x","offset":1,"timestamp":"2026-01-01T00:00:00.000Z","type":"flow:started","runId":"{RUN}","workflow":{{"name":"w"}}}}"#
        );
        let e = RuntimeEvent::from_json(line.as_bytes()).unwrap();
        let EventKind::FlowStarted { nodes, input, .. } = &e.kind else {
            panic!("{e:?}")
        };
        assert!(nodes.is_empty() && input.is_null());
        assert!(e.extra.is_empty());
        let line = format!(
            r#"{{"id":"x","offset":2,"timestamp":"2026-01-01T00:00:00.000Z","type":"flow:completed","runId":"{RUN}"}}"#
        );
        assert!(RuntimeEvent::from_json(line.as_bytes()).is_ok());
    }

    #[test]
    fn unknown_fields_of_known_types_are_kept_and_written_back() {
        let line = format!(
            r#"{{"id":"x","offset":4,"timestamp":"2026-01-01T00:00:00.000Z","runId":"{RUN}","nodeId":"a","type":"node:completed","output":{{"data":1}},"cacheHit":true,"attempt":{{"n":2}},"reason":null}}"#
        );
        let e = RuntimeEvent::from_json(line.as_bytes()).unwrap();
        assert!(matches!(e.kind, EventKind::NodeCompleted { .. }));
        assert_eq!(e.extra.len(), 3, "{:?}", e.extra);
        let back: Value = serde_json::from_str(&e.to_json().unwrap()).unwrap();
        let orig: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(back, orig);
    }

    #[test]
    fn bad_lines_are_errors_not_panics() {
        for line in [
            "",
            "[]",
            "{}",
            r#"{"id":"x","offset":0}"#,
            &format!(
                r#"{{"id":"x","offset":1,"timestamp":"2026-01-01T00:00:00Z","type":"agent:text","runId":"{RUN}"}}"#
            ),
        ] {
            assert!(RuntimeEvent::from_json(line.as_bytes()).is_err(), "{line}");
        }
    }

    proptest::proptest! {
        /// A damaged line (bytes changed, removed or inserted) is an error
        /// or an event, never a panic; an event read from one writes a
        /// line that reads back as the same event.
        #[test]
        fn a_damaged_line_is_an_error_or_an_event_that_round_trips(
            pick in 0usize..4,
            edits in proptest::collection::vec((0usize..400, 0u8..3, proptest::num::u8::ANY), 1..4),
        ) {
            let bodies = [
                r#""type":"node:started","input":{"data":"x","metadata":{"a":1}},"attempt":1"#,
                r#""type":"agent:complete","result":"ok","usage":{"inputTokens":1,"outputTokens":2},"totalCostUsd":0.1,"numTurns":1"#,
                r#""type":"edge:fired","edgeId":"a->b","from":"a","to":"b","iteration":2,"resetNodes":["a"]"#,
                r#""type":"flow:started","workflow":{"name":"w","hash":"h"},"input":1,"nodes":["a"],"edges":["a->b"]"#,
            ];
            let mut line = format!(
                r#"{{"id":"e1","offset":1,"timestamp":"2026-11-23T20:30:39.262Z","runId":"{RUN}","nodeId":"a",{}}}"#,
                bodies[pick]
            )
            .into_bytes();
            for (at, how, byte) in edits {
                let at = at % line.len();
                match how {
                    0 => line[at] = b"\"{}[]:,0a\\-e.ntf "[usize::from(byte) % 17],
                    1 => {
                        line.remove(at);
                    }
                    _ => line.insert(at, byte),
                }
            }
            if let Ok(event) = RuntimeEvent::from_json(&line) {
                let text = event.to_json().unwrap();
                proptest::prop_assert_eq!(RuntimeEvent::from_json(text.as_bytes()).unwrap(), event);
            }
        }
    }

    /// A known kind is read by its name, each field from its raw text: a
    /// field that does not fit is named, with no position (a position
    /// within the field's own text would point at the wrong column).
    #[test]
    fn a_bad_field_of_a_known_kind_is_named_in_the_error() {
        let line = |body: &str| {
            format!(
                r#"{{"id":"x","offset":1,"timestamp":"2026-01-01T00:00:00Z","runId":"{RUN}",{body}}}"#
            )
        };
        for (body, said) in [
            (
                r#""type":"agent:text:delta","content":5"#,
                "bad `agent:text:delta` event: field `content`: invalid type: integer `5`, expected a string",
            ),
            (
                r#""type":"node:started","attempt":"x""#,
                r#"bad `node:started` event: field `attempt`: invalid type: string "x", expected u32"#,
            ),
            (
                r#""type":"agent:complete","result":"ok","usage":{"inputTokens":"many"}"#,
                "bad `agent:complete` event: field `usage`: invalid type: string \"many\", expected u64",
            ),
            (
                r#""type":"agent:text:delta""#,
                "bad `agent:text:delta` event: missing field `content`",
            ),
        ] {
            let err = RuntimeEvent::from_json(line(body).as_bytes()).unwrap_err();
            assert_eq!(err.to_string(), said, "{body}");
        }
        // The tag may come anywhere, and a later copy of a field wins.
        let event = RuntimeEvent::from_json(
            line(r#""content":"a","type":"agent:text:delta","content":"b""#).as_bytes(),
        )
        .unwrap();
        assert_eq!(
            event.kind,
            EventKind::AgentTextDelta {
                content: "b".into(),
                extra: Default::default()
            }
        );
    }

    /// The event writer writes the envelope itself: it must write every
    /// event byte for byte as serde does, escapes and all.
    #[test]
    fn the_direct_writer_writes_what_serde_writes() {
        let docs = include_str!("../../../docs/events.md");
        let mut events: Vec<RuntimeEvent> = docs
            .lines()
            .filter(|l| l.starts_with(r#"{"id""#))
            .map(|l| RuntimeEvent::from_json(l.as_bytes()).unwrap())
            .collect();
        let mut types: Vec<_> = events.iter().map(|e| e.kind.type_name()).collect();
        types.sort_unstable();
        types.dedup();
        assert!(types.len() >= 20, "the docs' examples cover {types:?}");
        let mut odd = event(EventKind::AgentText {
            content: "tab\t \"quoted\" back\\slash \u{1} é \u{2028}".into(),
            extra: Default::default(),
        });
        odd.node_run_id = Some(NodeRunId::new(uuid::Uuid::from_u128(7)));
        for id in [
            "a \"quote\"",
            "a back\\slash",
            "a\ttab",
            "\u{7f} é \u{2028}",
        ] {
            odd.id = id.into();
            events.push(odd.clone());
        }
        let mut far = event(EventKind::FlowCompleted {
            output: serde_json::json!({"z": 1, "a": [1.5, null, "x"]}),
            duration_ms: 3,
        });
        // Past year 9999: the timestamp takes chrono's general writer.
        far.timestamp = Timestamp::from_millis(400_000_000_000_000);
        far.node_id = None;
        events.push(far);
        assert!(events.iter().all(|e| e.extra.is_empty()));
        crate::json_out::assert_writes_as_serde(&events, RuntimeEvent::write_json);
    }

    #[test]
    fn known_types_list_matches_the_enum() {
        for t in KNOWN_TYPES {
            let line = format!(
                r#"{{"id":"x","offset":1,"timestamp":"2026-01-01T00:00:00Z","type":"{t}","runId":"{RUN}"}}"#
            );
            // Either it parses into the same known type or fails on a missing field;
            // it must never come back as Unknown.
            if let Ok(e) = RuntimeEvent::from_json(line.as_bytes()) {
                assert_eq!(e.kind.type_name(), *t);
                assert!(!matches!(e.kind, EventKind::Unknown { .. }));
            }
        }
    }
}

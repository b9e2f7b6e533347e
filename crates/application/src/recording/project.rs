//! Recordings (`awr record-fixtures`): a run's provider calls as fixture
//! files (seed 001 §7.2), projected from its log after it ran.
//!
//! The run is its log (design §5.1): every call's prompt, streamed events
//! and result are in it already, written through the run's redactor, so a
//! recording holds nothing the log does not and no key. Each call also
//! keeps the hash of its request (`requestHash`: prompt, system prompt,
//! model, tools), so a replay whose workflow now asks something else is
//! refused with the place where it differs, never answered.

use std::collections::{BTreeMap, HashMap};

use domain::workflow::AgentDef;
use domain::{EventKind, NodeId, NodeRunId, RuntimeEvent};
use serde_json::{Map, Value, json};

use super::request::{request, request_hash};

/// Sets the output of a call that ended without a result: its last
/// `agent:error`, else the node run's failure, else a generic error.
fn end_without_result(entry: &mut Value, node_failed: Option<&str>) {
    let last_error = entry["events"]
        .as_array()
        .and_then(|events| events.iter().rev().find(|e| e["type"] == "agent:error"))
        .cloned();
    let (error_type, message) = match (last_error, node_failed) {
        (Some(err), _) => (err["errorType"].clone(), err["message"].clone()),
        (None, Some(error)) => (json!("agent_error"), json!(error)),
        (None, None) => (
            json!("agent_error"),
            json!("the call ended without a result"),
        ),
    };
    entry["output"] = json!({"error": {"errorType": error_type, "message": message}});
    entry["ended"] = Value::Bool(true);
}

/// The calls of one node, in call order, as fixture file entries.
pub type NodeCalls = BTreeMap<NodeId, Vec<Value>>;

/// The provider calls of a run's `events`, by node, each with its request
/// hash; `agent_of` names the agent a node runs.
pub fn calls<'w>(
    events: &[RuntimeEvent],
    agent_of: impl Fn(&NodeId) -> Option<&'w AgentDef>,
) -> NodeCalls {
    let mut nodes: BTreeMap<NodeId, BTreeMap<u32, Value>> = BTreeMap::new();
    let mut current: HashMap<NodeRunId, (NodeId, u32)> = HashMap::new();
    let mut tools: HashMap<String, Value> = HashMap::new();
    for e in events {
        let (Some(node), Some(run)) = (&e.node_id, e.node_run_id) else {
            continue;
        };
        match &e.kind {
            EventKind::AgentStart {
                session_id,
                model,
                prompt,
                call_index,
                instance,
                instance_call,
                ..
            } => {
                let index = call_index.unwrap_or(0);
                let Some(agent) = agent_of(node) else {
                    continue;
                };
                let request = request(prompt, agent);
                let mut start = json!({"type": "agent:start", "sessionId": session_id});
                if let Some(model) = model {
                    start["model"] = json!(model);
                }
                let mut entry = json!({
                    "call": index,
                    "input": request,
                    "requestHash": request_hash(&request),
                    "output": {"text": ""},
                    "events": [start],
                });
                if let (Some(instance), Some(k)) = (instance, instance_call) {
                    entry["instance"] = json!(instance);
                    entry["instanceCall"] = json!(k);
                }
                nodes.entry(node.clone()).or_default().insert(index, entry);
                current.insert(run, (node.clone(), index));
            }
            EventKind::AgentThinkingDelta { .. }
            | EventKind::AgentThinking { .. }
            | EventKind::AgentTextDelta { .. }
            | EventKind::AgentText { .. }
            | EventKind::AgentToolUse { .. }
            | EventKind::AgentTool { .. }
            | EventKind::AgentError { .. } => {
                if let (Some(entry), Ok(value)) = (
                    entry(&mut nodes, &current, run),
                    serde_json::to_value(&e.kind),
                ) {
                    push_event(entry, value);
                }
            }
            // A tool the runtime ran for an HTTP agent: replayed as the
            // agent's whole tool call.
            EventKind::ToolStarted {
                call_id,
                tool_name,
                tool_input,
                extra,
            } => {
                let mut tool = json!({"type": "agent:tool", "toolUseId": call_id, "toolName": tool_name, "toolInput": tool_input});
                if !extra.is_empty() {
                    tool["extra"] = Value::Object(extra.clone());
                }
                tools.insert(call_id.clone(), tool);
            }
            // What the session's line held unmapped, on the call's start
            // (which the mock replays as the session).
            EventKind::AgentSession { extra, .. } if !extra.is_empty() => {
                if let Some(start) = entry(&mut nodes, &current, run)
                    .and_then(|entry| entry["events"].get_mut(0))
                    .filter(|start| start["type"] == "agent:start")
                {
                    start["extra"] = Value::Object(extra.clone());
                }
            }
            EventKind::ToolCompleted {
                call_id,
                tool_output,
                duration_ms,
                ..
            } => {
                if let (Some(mut tool), Some(entry)) =
                    (tools.remove(call_id), entry(&mut nodes, &current, run))
                {
                    tool["toolOutput"] = tool_output.clone();
                    tool["durationMs"] = json!(duration_ms);
                    push_event(entry, tool);
                }
            }
            EventKind::ToolFailed {
                call_id,
                error,
                duration_ms,
                ..
            } => {
                if let (Some(mut tool), Some(entry)) =
                    (tools.remove(call_id), entry(&mut nodes, &current, run))
                {
                    tool["error"] = json!(error);
                    tool["durationMs"] = json!(duration_ms);
                    push_event(entry, tool);
                }
            }
            EventKind::AgentComplete {
                result,
                usage,
                model_usage,
                total_cost_usd,
                duration_ms,
                num_turns,
                session_id,
                extra,
                ..
            } => {
                if let Some(entry) = entry(&mut nodes, &current, run) {
                    // What the result held unmapped: an `agent:complete`
                    // event of its own (a replay takes the result from
                    // `output`, and this from here; an older awr skips it).
                    if !extra.is_empty() {
                        let complete = json!({"type": "agent:complete", "extra": extra});
                        push_event(entry, complete);
                    }
                    let mut output = Map::new();
                    output.insert("text".into(), json!(result));
                    output.insert("usage".into(), json!(usage));
                    if let Some(m) = model_usage {
                        output.insert("modelUsage".into(), json!(m));
                    }
                    if let Some(c) = total_cost_usd {
                        output.insert("totalCostUsd".into(), json!(c));
                    }
                    output.insert("durationMs".into(), json!(duration_ms));
                    output.insert("numTurns".into(), json!(num_turns));
                    if let Some(s) = session_id {
                        output.insert("sessionId".into(), json!(s));
                    }
                    entry["output"] = Value::Object(output);
                    entry["ended"] = Value::Bool(true);
                }
                current.remove(&run);
            }
            // A call that ended without a result replays its last error:
            // at the end of its node run, or when the node run starts its
            // next attempt (a retry after a transient error).
            EventKind::NodeCompleted { .. }
            | EventKind::NodeFailed { .. }
            | EventKind::NodeStarted { .. } => {
                if let Some(entry) = entry(&mut nodes, &current, run)
                    && entry.get("ended").is_none()
                {
                    let failed = match &e.kind {
                        EventKind::NodeFailed { error, .. } => Some(error.as_str()),
                        _ => None,
                    };
                    end_without_result(entry, failed);
                }
                current.remove(&run);
            }
            _ => {}
        }
    }
    nodes
        .into_iter()
        .map(|(node, calls)| {
            let http = agent_of(&node).is_some_and(|a| a.provider.is_http());
            let calls = calls
                .into_values()
                .map(|mut c| {
                    if let Some(o) = c.as_object_mut() {
                        o.remove("ended");
                    }
                    let turns = match (&c["events"], http) {
                        (Value::Array(events), true) => super::turns::recorded_turns(events),
                        _ => Vec::new(),
                    };
                    if !turns.is_empty() {
                        c["turns"] = Value::Array(turns);
                    }
                    c
                })
                .collect();
            (node, calls)
        })
        .collect()
}

/// The call in progress of node run `run`.
fn entry<'a>(
    nodes: &'a mut BTreeMap<NodeId, BTreeMap<u32, Value>>,
    current: &HashMap<NodeRunId, (NodeId, u32)>,
    run: NodeRunId,
) -> Option<&'a mut Value> {
    let (node, index) = current.get(&run)?;
    nodes.get_mut(node)?.get_mut(index)
}

fn push_event(entry: &mut Value, event: Value) {
    if let Some(events) = entry["events"].as_array_mut() {
        events.push(event);
    }
}

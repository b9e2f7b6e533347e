//! Data flow through the graph, as pure functions of the folded state: what
//! a node receives, which of its edges fire when it ends, loop counters, and
//! the run's final output.

use std::collections::BTreeMap;

use domain::workflow::{EdgeDef, Join, NodeDef, OnLimit};
use domain::{EdgeStatus, EventKind, NodeId, NodeStatus, RunSnapshot, WorkflowDef};
use serde_json::{Map, Value, json};

/// Where the scheduler stands with one pending node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Readiness {
    /// It may start.
    Run,
    /// It will not run in this pass: no incoming edge fired.
    Skip,
    /// Some incoming edge is still undecided.
    Wait,
}

/// A node run's `{data, metadata}`, built from its parts by moving them:
/// `json!` would copy each given `Value` by serializing it, a step's whole
/// input or output walked twice more than needed.
pub(crate) fn envelope(data: Value, metadata: Value) -> Value {
    let mut object = Map::new();
    object.insert("data".to_owned(), data);
    object.insert("metadata".to_owned(), metadata);
    Value::Object(object)
}

pub(crate) fn node_status(state: &RunSnapshot, node: &NodeId) -> NodeStatus {
    state
        .node_status
        .get(node)
        .copied()
        .unwrap_or(NodeStatus::Pending)
}

pub(crate) fn edge_status(state: &RunSnapshot, edge: &str) -> EdgeStatus {
    state
        .edge_status
        .get(edge)
        .copied()
        .unwrap_or(EdgeStatus::Pending)
}

/// Whether `node` may start, given its incoming edges and its `join`.
pub(crate) fn readiness(state: &RunSnapshot, wf: &WorkflowDef, node: &NodeDef) -> Readiness {
    let mut forward_in = 0;
    let mut undecided = false;
    let mut any_fired = false;
    for edge in wf.incoming(&node.id) {
        let status = edge_status(state, &edge.id);
        if !edge.is_loop() {
            forward_in += 1;
            undecided |= status == EdgeStatus::Pending;
        }
        any_fired |= status == EdgeStatus::Fired;
    }
    match node.join {
        Join::Any if any_fired => Readiness::Run,
        _ if undecided => Readiness::Wait,
        _ if forward_in == 0 || any_fired => Readiness::Run,
        _ => Readiness::Skip,
    }
}

/// Data of a finished node (`null` when it has none).
pub(crate) fn data_of(state: &RunSnapshot, node: &NodeId) -> Value {
    state
        .outputs
        .get(node)
        .and_then(|o| o.data().ok())
        .unwrap_or(Value::Null)
}

/// Which outputs an evaluation binds in `outputs`: those of the named
/// nodes, or every finished node's (an expression that reads the map whole).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Reads<'a> {
    /// These node ids (whichever of them finished).
    Nodes(&'a [String]),
    /// Every finished node.
    All,
}

impl<'a> Reads<'a> {
    /// What an expression reads, from [`Condition::output_nodes`](domain::condition::Condition::output_nodes).
    fn of(nodes: Option<&'a [String]>) -> Self {
        nodes.map_or(Self::All, Self::Nodes)
    }
}

/// `outputs` of an expression: the data of the finished nodes it reads, by
/// id. Only those are parsed, so the cost of an evaluation follows what it
/// names, not how many nodes finished before it.
fn outputs_data(state: &RunSnapshot, reads: Reads<'_>) -> Map<String, Value> {
    match reads {
        Reads::All => state
            .outputs
            .keys()
            .map(|id| (id.to_string(), data_of(state, id)))
            .collect(),
        Reads::Nodes(ids) => ids
            .iter()
            .filter_map(|id| {
                let output = state.outputs.get(id.as_str())?;
                Some((id.clone(), output.data().unwrap_or(Value::Null)))
            })
            .collect(),
    }
}

/// The variables of `input:` and `for_each:` expressions, `outputs` holding
/// what `reads` names.
pub(crate) fn input_vars(
    state: &RunSnapshot,
    run_input: &Value,
    reads: Reads<'_>,
) -> Map<String, Value> {
    let outputs = outputs_data(state, reads);
    let loops: Map<String, Value> = state
        .loop_counters
        .iter()
        .map(|(edge, n)| (edge.clone(), json!(n)))
        .collect();
    let mut vars = Map::new();
    vars.insert("input".into(), run_input.clone());
    vars.insert("outputs".into(), Value::Object(outputs));
    vars.insert("loops".into(), Value::Object(loops));
    vars
}

/// A node's input `data` and the agent it comes from (`previous_agent`):
/// its `input:` expression when it has one; else the run input for an entry
/// node, else the data of the edges that fired into it (a loop edge's data
/// wins: it is the newest). A join's `previous_agent` is the agent of the
/// last of its fired edges in the order written, whatever branch ended last.
pub(crate) fn gather_input(
    state: &RunSnapshot,
    wf: &WorkflowDef,
    node: &NodeDef,
    run_input: &Value,
) -> Result<(Value, Option<String>), String> {
    let fired: Vec<&EdgeDef> = wf
        .incoming(&node.id)
        .filter(|e| edge_status(state, &e.id) == EdgeStatus::Fired)
        .collect();
    let chosen: Vec<&EdgeDef> = match fired.iter().find(|e| e.is_loop()) {
        Some(loop_edge) => vec![*loop_edge],
        None => fired,
    };
    let agent_of = |id: &NodeId| {
        wf.node(id)
            .and_then(|n| wf.agent_of(n))
            .map(|(name, _)| name.to_owned())
    };
    let (data, previous) = match chosen.as_slice() {
        [] => (run_input.clone(), None),
        [edge] => (data_of(state, &edge.from), agent_of(&edge.from)),
        many => {
            let merged: Map<String, Value> = many
                .iter()
                .map(|e| (e.from.to_string(), data_of(state, &e.from)))
                .collect();
            // The last edge written, not the branch that ended last: which
            // ends first is scheduling, and a replay must give the same input.
            let last = many.last().and_then(|e| agent_of(&e.from));
            (Value::Object(merged), last)
        }
    };
    match (&node.input, &node.for_each) {
        // Under `for_each`, `input:` maps each item instead (see `item_input`).
        (Some(expression), None) => {
            let value = expression
                .evaluate(&input_vars(
                    state,
                    run_input,
                    Reads::of(expression.output_nodes()),
                ))
                .map_err(|e| format!("node `{}`: `input`: {e}", node.id))?;
            Ok((value, previous))
        }
        _ => Ok((data, previous)),
    }
}

/// The items of a `for_each` node.
pub(crate) fn for_each_items(
    state: &RunSnapshot,
    node: &NodeDef,
    run_input: &Value,
) -> Result<Option<Vec<Value>>, String> {
    let Some(for_each) = &node.for_each else {
        return Ok(None);
    };
    let reads = Reads::of(for_each.items.output_nodes());
    match for_each
        .items
        .evaluate(&input_vars(state, run_input, reads))
    {
        Ok(Value::Array(items)) => Ok(Some(items)),
        Ok(other) => Err(format!(
            "node `{}`: `for_each` must yield a list, not {}",
            node.id,
            kind_of(&other)
        )),
        Err(e) => Err(format!("node `{}`: `for_each`: {e}", node.id)),
    }
}

/// The input `data` of item `index` of a `for_each` node: its `input:`
/// expression with `item` and `index` bound, else the item itself.
pub(crate) fn item_input(
    state: &RunSnapshot,
    node: &NodeDef,
    run_input: &Value,
    index: u32,
    item: &Value,
) -> Result<Value, String> {
    match &node.input {
        None => Ok(item.clone()),
        Some(expression) => {
            let reads = Reads::of(expression.output_nodes());
            let mut vars = input_vars(state, run_input, reads);
            vars.insert("item".into(), item.clone());
            vars.insert("index".into(), json!(index));
            expression
                .evaluate(&vars)
                .map_err(|e| format!("node `{}` item {index}: `input`: {e}", node.id))
        }
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a bool",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a map",
    }
}

/// `output` (the finished node's data), `outputs` (the data of the finished
/// nodes `reads` names), `input`.
fn condition_vars(
    state: &RunSnapshot,
    data: &Value,
    run_input: &Value,
    reads: Reads<'_>,
) -> Map<String, Value> {
    let outputs = outputs_data(state, reads);
    let mut vars = Map::new();
    vars.insert("output".into(), data.clone());
    vars.insert("outputs".into(), Value::Object(outputs));
    vars.insert("input".into(), run_input.clone());
    vars
}

/// The edge events of a node that ended with `data`. A loop edge that fires
/// takes precedence: the loop body goes back to pending and the node's other
/// edges stay undecided until it finishes again. A condition that cannot be
/// evaluated fails the run, naming the edge: guessing a branch would hide a
/// bug in the workflow; so does a loop edge whose condition still holds at
/// its limit, unless it says `on_limit: continue`.
pub(crate) fn route(
    state: &RunSnapshot,
    wf: &WorkflowDef,
    node: &NodeId,
    data: &Value,
    run_input: &Value,
) -> Result<Vec<EventKind>, String> {
    let edges: Vec<&EdgeDef> = wf.outgoing(node).collect();
    // One set of variables for all the edges, holding the outputs their
    // conditions name (every finished node's if one reads `outputs` whole).
    let conditions: Vec<_> = edges.iter().filter_map(|e| e.when.as_ref()).collect();
    let vars = if conditions.is_empty() {
        Map::new()
    } else if conditions.iter().any(|c| c.output_nodes().is_none()) {
        condition_vars(state, data, run_input, Reads::All)
    } else {
        let mut named: Vec<String> = conditions
            .iter()
            .flat_map(|c| c.output_nodes().unwrap_or_default())
            .cloned()
            .collect();
        named.sort_unstable();
        named.dedup();
        condition_vars(state, data, run_input, Reads::Nodes(&named))
    };
    let mut decisions = Vec::with_capacity(edges.len());
    for edge in &edges {
        decisions.push(evaluate(edge, &vars)?);
    }
    for (edge, holds) in edges.iter().zip(&decisions) {
        let Some(limit) = edge.max_iterations else {
            continue;
        };
        let count = state.loop_counters.get(&edge.id).copied().unwrap_or(0);
        if *holds && count < limit {
            let body = wf.loop_body(edge);
            return Ok(vec![EventKind::EdgeFired {
                edge_id: edge.id.clone(),
                from: edge.from.clone(),
                to: edge.to.clone(),
                iteration: Some(count + 1),
                reset_nodes: body.nodes,
                reset_edges: body.edges,
            }]);
        }
    }
    let exhausted = edges.iter().zip(&decisions).find_map(|(edge, holds)| {
        let limit = edge.max_iterations.filter(|_| *holds)?;
        (edge.on_limit == OnLimit::Fail).then_some((edge, limit))
    });
    if let Some((edge, limit)) = exhausted {
        return Err(format!(
            "edge `{}` reached its loop limit (max_iterations: {limit}) and its condition still holds; \
             give it `on_limit: continue` to go on instead",
            edge.id
        ));
    }
    Ok(edges
        .iter()
        .zip(decisions)
        .map(|(edge, holds)| {
            if edge.is_loop() {
                let reason = if holds {
                    "loop limit reached"
                } else {
                    "condition false"
                };
                skipped(edge, reason)
            } else if holds {
                EventKind::EdgeFired {
                    edge_id: edge.id.clone(),
                    from: edge.from.clone(),
                    to: edge.to.clone(),
                    iteration: None,
                    reset_nodes: Vec::new(),
                    reset_edges: Vec::new(),
                }
            } else {
                skipped(edge, "condition false")
            }
        })
        .collect())
}

fn evaluate(edge: &EdgeDef, vars: &Map<String, Value>) -> Result<bool, String> {
    let Some(condition) = &edge.when else {
        return Ok(true);
    };
    condition
        .evaluate(vars)
        .map_err(|e| format!("edge `{}`: condition could not be evaluated: {e}", edge.id))
}

/// `edge:skipped` for one edge.
pub(crate) fn skipped(edge: &EdgeDef, reason: &str) -> EventKind {
    EventKind::EdgeSkipped {
        edge_id: edge.id.clone(),
        from: edge.from.clone(),
        to: edge.to.clone(),
        reason: reason.to_owned(),
    }
}

/// The data of the nodes where execution ended (done, and none of their
/// edges fired): one such node gives its data, several give a map by node id.
pub(crate) fn final_output(state: &RunSnapshot, wf: &WorkflowDef) -> Value {
    let mut leaves: BTreeMap<String, Value> = BTreeMap::new();
    for node in &wf.nodes {
        if node_status(state, &node.id) != NodeStatus::Done {
            continue;
        }
        let passed_on = wf
            .outgoing(&node.id)
            .any(|e| edge_status(state, &e.id) == EdgeStatus::Fired);
        if !passed_on {
            leaves.insert(node.id.to_string(), data_of(state, &node.id));
        }
    }
    match leaves.len() {
        0 => Value::Null,
        1 => leaves.into_values().next().unwrap_or(Value::Null),
        _ => Value::Object(leaves.into_iter().collect()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use domain::JsonText;
    use serde_json::json;

    use super::*;

    const FINISHED: usize = 1_000;

    /// A state where `n0` .. `n999` finished, each with data `{"i": n}`,
    /// and a workflow whose node `last` reads some of them.
    fn setup(last: &str, edges: &str) -> (RunSnapshot, WorkflowDef) {
        let mut nodes: Vec<String> = (0..FINISHED)
            .map(|i| format!("{{id: n{i}, agent: a}}"))
            .collect();
        nodes.push(format!("{{id: last, agent: a{last}}}"));
        nodes.push("{id: next, agent: a}".into());
        let yaml = format!(
            "name: w\nagents: {{a: {{provider: mock}}}}\nnodes: [{}]\nedges: [{edges}]\n",
            nodes.join(", ")
        );
        let wf = WorkflowDef::from_yaml(&yaml).unwrap();
        let mut state = RunSnapshot::new("0b6f8f4e-3c1a-4d2b-9f3e-1a2b3c4d5e6f".parse().unwrap());
        for i in 0..FINISHED {
            let id = NodeId::new(format!("n{i}")).unwrap();
            state.node_status.insert(id.clone(), NodeStatus::Done);
            let output = json!({"data": {"i": i}, "metadata": {"agent_name": "a"}});
            state.outputs.insert(id, JsonText::from_value(&output));
        }
        (state, wf)
    }

    /// Parses of stored outputs while `f` runs (on this thread).
    fn parses<T>(f: impl FnOnce() -> T) -> (T, u64) {
        let before = JsonText::parses();
        let value = f();
        (value, JsonText::parses() - before)
    }

    #[test]
    fn an_edge_condition_parses_only_the_outputs_it_names() {
        let (state, wf) = setup(
            "",
            "{from: last, to: next, when: 'outputs.n7.i == 7 && outputs[\"n9\"].i == 9 && output == 1'}",
        );
        let last = NodeId::new("last").unwrap();
        let (kinds, parsed) = parses(|| route(&state, &wf, &last, &json!(1), &Value::Null));
        assert!(matches!(kinds.unwrap()[..], [EventKind::EdgeFired { .. }]));
        assert_eq!(
            parsed, 2,
            "only n7 and n9 are read, of {FINISHED} finished nodes"
        );
    }

    #[test]
    fn an_input_expression_parses_only_the_outputs_it_names() {
        let (state, wf) = setup(", input: '[outputs.n3.i, input]'", "{from: n999, to: last}");
        let node = wf.node(&NodeId::new("last").unwrap()).unwrap().clone();
        let (input, parsed) = parses(|| gather_input(&state, &wf, &node, &json!("go")));
        assert_eq!(input.unwrap().0, json!([3, "go"]));
        assert_eq!(parsed, 1, "only n3 is read, of {FINISHED} finished nodes");
    }

    #[test]
    fn an_expression_reading_outputs_whole_sees_every_finished_node() {
        let (state, wf) = setup(
            "",
            "{from: last, to: next, when: 'size(outputs) == 1000 && \"n5\" in outputs && !has(outputs.next)'}",
        );
        let last = NodeId::new("last").unwrap();
        let (kinds, parsed) = parses(|| route(&state, &wf, &last, &json!(1), &Value::Null));
        assert!(matches!(kinds.unwrap()[..], [EventKind::EdgeFired { .. }]));
        assert_eq!(parsed, FINISHED as u64);
    }

    #[test]
    fn edges_without_conditions_parse_no_output() {
        let (state, wf) = setup("", "{from: last, to: next}");
        let last = NodeId::new("last").unwrap();
        let (kinds, parsed) = parses(|| route(&state, &wf, &last, &json!(1), &Value::Null));
        assert_eq!(kinds.unwrap().len(), 1);
        assert_eq!(parsed, 0);
    }
}

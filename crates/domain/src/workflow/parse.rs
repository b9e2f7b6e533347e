//! Reading a workflow file: YAML or JSON text in, a validated [`WorkflowDef`] out.
//!
//! Parsing happens in two stages so each error can say the most useful thing.
//! Serde first reads the text into private `Raw*` structs that mirror the file
//! (so syntax, missing fields, wrong types and unknown keys come back with a
//! line, a column and a field path); then [`build`] lowers `steps` to nodes and
//! edges and checks the rules that span several items (known agents, unique
//! ids, acyclic forward edges, ...), naming the offending item.

use std::collections::{BTreeMap, HashMap};

use serde::Deserialize;
use serde_json::Value;

use super::agents::{check_agents, check_pricing};
use super::approval::RawApproval;
use super::invalid::{invalid, list};
use super::nodes::{
    NodeKeys, NodeSet, RawBudget, RawCommand, RawForEach, RawRetry, Shorthand, concurrency,
    lower_budget,
};
use super::syntax::{check_flow_nesting, json_error, strict_value, unique_keys, yaml_error_in};
use super::{AgentDef, EdgeDef, Join, NodeDef, OnLimit, WorkflowDef, WorkflowError};
use crate::condition::Condition;
use crate::ids::NodeId;
use crate::pricing::{Price, PriceTable};

impl WorkflowDef {
    /// Parses and validates a workflow written in YAML (a superset of JSON, so
    /// `.json` files parse too).
    ///
    /// ```
    /// use awr_domain::WorkflowDef;
    ///
    /// let flow = WorkflowDef::from_yaml(
    ///     "name: hello\nagents:\n  greeter: {provider: mock}\nsteps:\n  - agent: greeter\n",
    /// )?;
    /// assert_eq!(flow.name, "hello");
    /// assert_eq!(flow.nodes.len(), 1);
    ///
    /// // A bad file is an error that says where, never a panic.
    /// let err = WorkflowDef::from_yaml(
    ///     "name: x\nagents: {a: {provider: mock}}\nsteps: [{agent: nobody}]\n",
    /// )
    /// .unwrap_err();
    /// assert!(err.to_string().contains("nobody"), "{err}");
    /// # Ok::<(), awr_domain::WorkflowError>(())
    /// ```
    pub fn from_yaml(src: &str) -> Result<WorkflowDef, WorkflowError> {
        let text = without_bom(src);
        if text.trim().is_empty() {
            return Err(WorkflowError::Empty);
        }
        check_flow_nesting(text)?;
        let raw: Option<RawWorkflow> =
            yaml_serde::from_str(text).map_err(|e| yaml_error_in(text, e))?;
        build(raw.ok_or(WorkflowError::Empty)?, src)
    }

    /// `sha256:<hex>` of a workflow's source text: what [`WorkflowDef::hash`]
    /// holds once it is parsed, so a loader can tell files apart before parsing.
    pub fn source_hash(src: &str) -> String {
        hash(src)
    }

    /// Parses and validates a workflow written in strict JSON, for callers
    /// that want JSON's error positions and no YAML leniency.
    pub fn from_json(src: &str) -> Result<WorkflowDef, WorkflowError> {
        let hashed = src;
        let src = without_bom(src);
        if src.trim().is_empty() {
            return Err(WorkflowError::Empty);
        }
        // serde_json would read an array as a struct's fields in order; a
        // workflow is an object, so say so instead of "[0]: invalid type".
        if let Some(at) = src
            .find(|c: char| !c.is_whitespace())
            .filter(|&i| src[i..].starts_with('['))
        {
            let before = &src[..at];
            return Err(WorkflowError::Parse {
                line: Some(before.matches('\n').count() + 1),
                column: Some(before.len() - before.rfind('\n').map_or(0, |n| n + 1) + 1),
                message: "expected a workflow object `{...}`, found an array".into(),
            });
        }
        let mut de = serde_json::Deserializer::from_str(src);
        let raw: Option<RawWorkflow> = serde_path_to_error::deserialize(&mut de)
            .map_err(|e| json_error(e.path().to_string(), e.inner()))?;
        de.end().map_err(|e| json_error(String::new(), &e))?;
        build(raw.ok_or(WorkflowError::Empty)?, hashed)
    }
}

/// The text after a leading UTF-8 byte order mark, which some editors
/// write: it is no part of the YAML or JSON (the hash still covers it).
fn without_bom(src: &str) -> &str {
    src.strip_prefix('\u{feff}').unwrap_or(src)
}

/// The file as written. `deny_unknown_fields` turns a misspelt key into an
/// error naming it instead of a silently ignored setting.
#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a workflow mapping with `name`, `agents` and `steps` or `nodes`"
)]
struct RawWorkflow {
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default, deserialize_with = "strict_value")]
    input: Option<Value>,
    #[serde(default, deserialize_with = "unique_keys")]
    agents: BTreeMap<String, AgentDef>,
    #[serde(default)]
    steps: Option<Vec<RawStep>>,
    #[serde(default)]
    nodes: Option<Vec<RawNode>>,
    #[serde(default)]
    edges: Option<Vec<RawEdge>>,
    #[serde(default, deserialize_with = "unique_keys")]
    pricing: BTreeMap<String, Price>,
    #[serde(default)]
    budget: Option<RawBudget>,
    #[serde(default)]
    max_concurrency: Option<u32>,
    #[serde(default, deserialize_with = "unique_keys")]
    mcp_servers: BTreeMap<String, super::mcp::RawMcpServer>,
}

/// One element of `steps:`; ids stay strings here so a bad one is reported
/// with its position by [`build`] rather than as a bare parse error.
#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a step: `{agent: NAME}`, `{id: ID, command: SCRIPT}`, `{id: ID, call_workflow: FILE}` or `{id: ID, approval: PROMPT}`"
)]
struct RawStep {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    agent: Option<String>,
    #[serde(default)]
    command: Option<Box<Shorthand<RawCommand>>>,
    #[serde(default)]
    call_workflow: Option<String>,
    #[serde(default)]
    approval: Option<Box<Shorthand<RawApproval>>>,
    #[serde(default)]
    input: Option<String>,
    #[serde(default)]
    for_each: Option<Box<Shorthand<RawForEach>>>,
    #[serde(default)]
    retry: Option<Box<RawRetry>>,
    #[serde(default)]
    budget: Option<Box<RawBudget>>,
}

/// One element of `nodes:`: a step with a required id, and `join`.
#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a node: `{id: ID, agent: NAME}`, `{id: ID, command: SCRIPT}`, `{id: ID, call_workflow: FILE}` or `{id: ID, approval: PROMPT}`"
)]
struct RawNode {
    id: String,
    #[serde(default)]
    agent: Option<String>,
    #[serde(default)]
    command: Option<Box<Shorthand<RawCommand>>>,
    #[serde(default)]
    call_workflow: Option<String>,
    #[serde(default)]
    approval: Option<Box<Shorthand<RawApproval>>>,
    #[serde(default)]
    input: Option<String>,
    #[serde(default)]
    for_each: Option<Box<Shorthand<RawForEach>>>,
    #[serde(default)]
    join: Option<Join>,
    #[serde(default)]
    retry: Option<Box<RawRetry>>,
    #[serde(default)]
    budget: Option<Box<RawBudget>>,
}

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "an edge: `{from: ID, to: ID, when?: CEL, max_iterations?: N, on_limit?: fail|continue, id?: ID}`"
)]
struct RawEdge {
    from: String,
    to: String,
    #[serde(default)]
    when: Option<String>,
    #[serde(default)]
    max_iterations: Option<u32>,
    #[serde(default)]
    on_limit: Option<OnLimit>,
    #[serde(default)]
    id: Option<String>,
}

/// Whether `name` is one plain path component: a workflow's name is the
/// directory of its fixtures and of its calls in a recording, so a name
/// such as `../x` or `/tmp/x` would read or write outside them.
fn names_a_directory(name: &str) -> bool {
    name != "."
        && name != ".."
        && !name.contains(['/', '\\'])
        && !name.chars().any(char::is_control)
}

/// Lowers and validates; the rules are checked in file order so the first
/// error is the first thing to fix.
fn build(raw: RawWorkflow, src: &str) -> Result<WorkflowDef, WorkflowError> {
    if raw.name.trim().is_empty() {
        return Err(invalid("name", "must not be empty"));
    }
    if !names_a_directory(&raw.name) {
        return Err(invalid(
            "name",
            format!(
                "`{}` cannot name a directory (`fixtures/<name>`, a recording's `nodes/<name>`): use no `/` or `\\`, no control character, and not `.` or `..`",
                raw.name.escape_debug()
            ),
        ));
    }
    let runs_agents = raw.steps.iter().flatten().any(|s| s.agent.is_some())
        || raw.nodes.iter().flatten().any(|n| n.agent.is_some());
    check_agents(&raw.agents, runs_agents)?;
    check_pricing(&raw.pricing)?;
    let mcp_servers = super::mcp::lower_servers(raw.mcp_servers)?;
    super::mcp::check_grants(&raw.agents, &mcp_servers)?;
    let budget = raw
        .budget
        .map(|b| lower_budget("budget", "", b))
        .transpose()?
        .unwrap_or_default();
    let max_concurrency = raw
        .max_concurrency
        .map(|n| concurrency("max_concurrency", "`max_concurrency`", n))
        .transpose()?
        .unwrap_or(WorkflowDef::DEFAULT_CONCURRENCY);

    let (nodes, edges) = match (raw.steps, raw.nodes) {
        (Some(_), Some(_)) => {
            return Err(invalid(
                "nodes",
                "`steps` and `nodes` cannot both be given: use `steps` for a chain, or `nodes` with `edges` for a graph",
            ));
        }
        (None, None) => {
            return Err(invalid(
                "workflow",
                "needs `steps` (a chain of agents) or `nodes` (with `edges`)",
            ));
        }
        (Some(steps), None) => {
            if raw.edges.is_some() {
                return Err(invalid(
                    "edges",
                    "`edges` goes with `nodes`; consecutive `steps` are joined automatically",
                ));
            }
            lower_steps(steps, &raw.agents)?
        }
        (None, Some(nodes)) => lower_graph(nodes, raw.edges.unwrap_or_default(), &raw.agents)?,
    };

    if let Some(input) = &raw.input {
        WorkflowDef::check_input(input).map_err(|e| invalid("input", e))?;
    }
    let def = WorkflowDef {
        name: raw.name,
        description: raw.description,
        input: raw.input,
        agents: raw.agents,
        pricing: PriceTable::built_in().extended(raw.pricing),
        links: super::graph::Links::build(&nodes, &edges),
        nodes,
        edges,
        hash: hash(src),
        text: src.into(),
        budget,
        max_concurrency,
        mcp_servers,
    };
    check_graph(&def)?;
    Ok(def)
}

fn lower_steps(
    steps: Vec<RawStep>,
    agents: &BTreeMap<String, AgentDef>,
) -> Result<(Vec<NodeDef>, Vec<EdgeDef>), WorkflowError> {
    if steps.is_empty() {
        return Err(invalid("steps", "must list at least one step"));
    }
    let mut set = NodeSet::new(agents);
    for (i, step) in steps.into_iter().enumerate() {
        let item = format!("steps[{i}]");
        let id = match (step.id, &step.agent) {
            (Some(id), _) => id,
            (None, Some(agent)) => agent.clone(),
            (None, None) => {
                let what = if step.command.is_some() {
                    "command"
                } else if step.approval.is_some() {
                    "approval"
                } else {
                    "call_workflow"
                };
                return Err(invalid(item, format!("a `{what}` step needs an `id`")));
            }
        };
        let keys = NodeKeys {
            agent: step.agent,
            call_workflow: step.call_workflow,
            command: step.command.map(|b| *b),
            approval: step.approval.map(|b| *b),
            input: step.input,
            for_each: step.for_each.map(|b| *b),
            join: None,
            retry: step.retry.map(|b| *b),
            budget: step.budget.map(|b| *b),
        };
        set.add(item, &id, keys)?;
    }
    set.check_references()?;
    let edges = set
        .nodes
        .windows(2)
        .map(|pair| EdgeDef {
            id: format!("{}->{}", pair[0].id, pair[1].id),
            from: pair[0].id.clone(),
            to: pair[1].id.clone(),
            when: None,
            max_iterations: None,
            on_limit: OnLimit::default(),
        })
        .collect();
    Ok((set.into_nodes(), edges))
}

fn lower_graph(
    nodes: Vec<RawNode>,
    raw_edges: Vec<RawEdge>,
    agents: &BTreeMap<String, AgentDef>,
) -> Result<(Vec<NodeDef>, Vec<EdgeDef>), WorkflowError> {
    if nodes.is_empty() {
        return Err(invalid("nodes", "must list at least one node"));
    }
    let mut set = NodeSet::new(agents);
    for (i, node) in nodes.into_iter().enumerate() {
        let item = format!("nodes[{i}] (id `{}`)", node.id);
        let keys = NodeKeys {
            agent: node.agent,
            call_workflow: node.call_workflow,
            command: node.command.map(|b| *b),
            approval: node.approval.map(|b| *b),
            input: node.input,
            for_each: node.for_each.map(|b| *b),
            join: node.join,
            retry: node.retry.map(|b| *b),
            budget: node.budget.map(|b| *b),
        };
        set.add(item, &node.id, keys)?;
    }
    set.check_references()?;
    let known_node = |item: &str, end: &str, id: &str| -> Result<NodeId, WorkflowError> {
        match set.seen.get(id) {
            Some(&n) => Ok(set.nodes[n].id.clone()),
            None => {
                let known = list(set.nodes.iter().map(|n| n.id.as_str()));
                Err(invalid(
                    item,
                    format!("`{end}`: unknown node `{id}` (known: {known})"),
                ))
            }
        }
    };
    let mut edges: Vec<EdgeDef> = Vec::with_capacity(raw_edges.len());
    let mut edge_ids: HashMap<String, usize> = HashMap::new();
    for (i, raw) in raw_edges.into_iter().enumerate() {
        let id = raw
            .id
            .unwrap_or_else(|| format!("{}->{}", raw.from, raw.to));
        let item = format!("edges[{i}] ({id})");
        if id.trim().is_empty() {
            return Err(invalid(item, "`id` must not be empty"));
        }
        if let Some(j) = edge_ids.get(&id) {
            return Err(invalid(
                item,
                format!(
                    "duplicate edge id `{id}` (also edges[{j}]); give each an explicit, unique `id`"
                ),
            ));
        }
        let from = known_node(&item, "from", &raw.from)?;
        let to = known_node(&item, "to", &raw.to)?;
        if raw.max_iterations == Some(0) {
            return Err(invalid(item, "`max_iterations` must be at least 1"));
        }
        if raw.on_limit.is_some() && raw.max_iterations.is_none() {
            return Err(invalid(
                item,
                "`on_limit` goes with `max_iterations`: only a loop edge has a limit",
            ));
        }
        let when = (raw.when.as_deref().map(Condition::compile).transpose())
            .map_err(|e| invalid(&item, format!("`when` does not compile: {e}")))?;
        if let Some(unknown) = when
            .iter()
            .flat_map(Condition::nodes)
            .find(|n| !set.seen.contains_key(n.as_str()))
        {
            let known = list(set.nodes.iter().map(|n| n.id.as_str()));
            return Err(invalid(
                item,
                format!(
                    "`when` reads `outputs.{unknown}`, but there is no node `{unknown}` (known: {known})"
                ),
            ));
        }
        edge_ids.insert(id.clone(), i);
        edges.push(EdgeDef {
            id,
            from,
            to,
            when,
            max_iterations: raw.max_iterations,
            on_limit: raw.on_limit.unwrap_or_default(),
        });
    }
    Ok((set.into_nodes(), edges))
}

fn check_graph(def: &WorkflowDef) -> Result<(), WorkflowError> {
    let item = |i: usize| format!("edges[{i}] ({})", def.edges[i].id);
    if let Some((e, cycle)) = def.forward_cycle() {
        let path: Vec<&str> = cycle.iter().map(NodeId::as_str).collect();
        let path = path.join(" -> ");
        return Err(invalid(
            item(e),
            format!(
                "closes the cycle {path}, and none of its edges has `max_iterations`; \
                 give the edge that loops back `max_iterations: N` to bound the loop"
            ),
        ));
    }
    for (i, edge) in def.edges.iter().enumerate().filter(|(_, e)| e.is_loop()) {
        if !def.reaches_forward(&edge.to, &edge.from) {
            return Err(invalid(
                item(i),
                format!(
                    "`max_iterations` makes this a loop edge, but no forward path leads from `{}` back to `{}`; \
                     a loop edge must point back to an earlier node (or drop `max_iterations`)",
                    edge.to, edge.from
                ),
            ));
        }
    }
    let unreachable = def.unreachable_nodes();
    if !unreachable.is_empty() {
        let names = list(unreachable.iter().map(|n| n.as_str()));
        return Err(invalid(
            "nodes",
            format!("no entry node (one without incoming forward edges) leads to: {names}"),
        ));
    }
    Ok(())
}

/// `sha256:<hex>` of the exact source text.
fn hash(src: &str) -> String {
    format!("sha256:{}", crate::canonical::sha256_hex(src.as_bytes()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::workflow::NodeKind;

    const AGENTS: &str =
        "agents:\n  a: {provider: mock}\n  b: {provider: mock}\n  c: {provider: mock}\n";

    /// A YAML workflow named `t` with agents a, b, c and `body`.
    fn wf(body: &str) -> String {
        format!("name: t\n{AGENTS}{body}")
    }

    fn check_err(yaml: &str, expected: &str) {
        let err = WorkflowDef::from_yaml(yaml).expect_err(yaml).to_string();
        assert!(
            err.contains(expected),
            "expected `{expected}` in: {err}\n--- yaml:\n{yaml}"
        );
    }

    fn check_json_err(json: &str, expected: &str) {
        let err = WorkflowDef::from_json(json).expect_err(json).to_string();
        assert!(
            err.contains(expected),
            "expected `{expected}` in: {err}\n--- json:\n{json}"
        );
    }

    /// Like `check_err`, and the error must be a `Parse` at `line:column`.
    fn check_parse(yaml: &str, line: usize, column: usize, expected: &str) {
        check_err(yaml, &format!("{line}:{column}: "));
        check_err(yaml, expected);
        let err = WorkflowDef::from_yaml(yaml).unwrap_err();
        assert!(
            matches!(
                err,
                WorkflowError::Parse {
                    line: Some(_),
                    column: Some(_),
                    ..
                }
            ),
            "{err:?}"
        );
    }

    #[test]
    fn rule_1_empty_files() {
        for src in ["", "  \n\t\n", "# just a comment\n", "~", "null\n", "---\n"] {
            assert_eq!(
                WorkflowDef::from_yaml(src).unwrap_err(),
                WorkflowError::Empty,
                "{src:?}"
            );
        }
        for src in ["", " \n", "null"] {
            assert_eq!(
                WorkflowDef::from_json(src).unwrap_err(),
                WorkflowError::Empty,
                "{src:?}"
            );
        }
    }

    #[test]
    fn rule_2_syntax_errors() {
        check_parse(
            "name: t\nagents: {a: {provider: mock}\nsteps: []\n",
            3,
            1,
            "did not find expected ',' or '}'",
        );
        check_parse(
            "name: t\ndescription: 'oops\n",
            3,
            1,
            "found unexpected end of stream, while scanning a quoted scalar at line 2 column 14",
        );
        check_err(
            &wf("steps: [{agent: a}]\n---\nname: u\n"),
            "7:1: a second YAML document starts here",
        );
        check_json_err(
            "{\"name\": \"t\",\n \"agents\": {}",
            "2:13: EOF while parsing an object",
        );
        check_json_err("{\"name\": \"t\",}", "1:14: trailing comma");
        check_json_err(
            "{\"name\": \"t\", \"agents\": {\"a\": {\"provider\": \"mock\"}}, \"steps\": [{\"agent\": \"a\"}]} x",
            "1:81: trailing characters",
        );
        check_json_err("\n  [1, 2]", "2:3: expected a workflow object");
        check_json_err("name: t", "1:2: expected ident");
    }

    #[test]
    fn rule_3_missing_fields_and_wrong_types() {
        check_parse(
            "agents: {a: {provider: mock}}\nsteps: [{agent: a}]\n",
            1,
            1,
            "missing field `name`",
        );
        check_err(
            "name: t\nsteps: [{agent: a}]\n",
            "agents: at least one agent is required",
        );
        check_parse(
            "name: t\nagents:\n  a: {model: x}\nsteps: [{agent: a}]\n",
            3,
            6,
            "agents.a: missing field `provider`",
        );
        check_parse(
            "name: t\nagents:\n  writer:\n    provider: mock\n    max_turns: ten\nsteps: [{agent: writer}]\n",
            5,
            16,
            "agents.writer.max_turns: invalid type: string \"ten\", expected u32",
        );
        check_err(
            &wf("steps: [{agent: a}, {id: x}]\n"),
            "steps[1]: missing `agent` (or `command`, `call_workflow`, `approval`)",
        );
        check_err(
            &wf("nodes: [{id: x, agent: a}]\nedges: [{from: x, to: x, max_iterations: -1}]\n"),
            "edges[0].max_iterations: invalid type: integer `-1`, expected u32",
        );
        check_err(
            "name: [t]\nagents: {a: {provider: mock}}\nsteps: [{agent: a}]\n",
            "1:7: name: invalid type: sequence",
        );
        check_err("hello", "expected a workflow mapping");
        check_json_err(
            "{\"name\": \"t\",\n \"agents\": {\"w\": {\"provider\": \"mock\", \"max_turns\": \"ten\"}},\n \"steps\": [{\"agent\": \"w\"}]}",
            "2:56: agents.w.max_turns: invalid type: string \"ten\", expected u32",
        );
        check_json_err(
            "{\"agents\": {\"a\": {\"provider\": \"mock\"}}, \"steps\": [{\"agent\": \"a\"}]}",
            "missing field `name`",
        );
    }

    #[test]
    fn unknown_keys_are_named() {
        check_parse(
            &wf("steps: [{agent: a}]\nnodez: []\n"),
            7,
            1,
            "unknown field `nodez`, expected one of `name`",
        );
        check_err(
            &wf("steps: [{agent: a, idd: x}]\n"),
            "steps[0]: unknown field `idd`",
        );
        check_err(
            &wf("nodes: [{id: a, agent: a}]\nedges: [{from: a, to: a, if: x}]\n"),
            "edges[0]: unknown field `if`",
        );
        check_err(
            "name: t\nagents: {a: {provider: mock, temprature: 1}}\nsteps: [{agent: a}]\n",
            "agents.a: unknown field `temprature`",
        );
        check_json_err(
            "{\"name\": \"t\", \"agents\": {\"a\": {\"provider\": \"mock\"}}, \"steps\": [{\"agent\": \"a\"}], \"x\": 1}",
            "unknown field `x`",
        );
    }

    #[test]
    fn rule_4_unknown_provider() {
        check_parse(
            "name: t\nagents:\n  a: {provider: gpt9}\nsteps: [{agent: a}]\n",
            3,
            17,
            "agents.a.provider: unknown variant `gpt9`, expected one of `mock`, `claude-code`, `codex`, `gemini`, `copilot`, `openai`, `anthropic`",
        );
        check_json_err(
            "{\"name\": \"t\",\n \"agents\": {\"a\": {\"provider\": \"gpt9\"}}}",
            "2:36: agents.a.provider: unknown variant `gpt9`, expected one of `mock`, `claude-code`, `codex`, `gemini`, `copilot`, `openai`, `anthropic`",
        );
    }

    #[test]
    fn rule_5_unknown_agent() {
        check_err(
            &wf("steps: [{agent: a}, {agent: foo}]\n"),
            "steps[1]: unknown agent `foo` (known: a, b, c)",
        );
        check_err(
            &wf("nodes: [{id: x, agent: a}, {id: y, agent: foo}]\n"),
            "nodes[1] (id `y`): unknown agent `foo` (known: a, b, c)",
        );
        check_json_err(
            "{\"name\": \"t\", \"agents\": {\"a\": {\"provider\": \"mock\"}}, \"steps\": [{\"agent\": \"b\"}]}",
            "steps[0]: unknown agent `b` (known: a)",
        );
    }

    #[test]
    fn rule_6_duplicate_node_ids() {
        check_err(
            &wf("steps: [{agent: a}, {agent: b}, {agent: a}]\n"),
            "steps[2]: duplicate node id `a` (also steps[0]); give each an explicit, unique `id`",
        );
        check_err(
            &wf("steps: [{agent: a, id: x}, {agent: b, id: x}]\n"),
            "steps[1]: duplicate node id `x`",
        );
        check_err(
            &wf("nodes: [{id: x, agent: a}, {id: x, agent: b}]\n"),
            "nodes[1] (id `x`): duplicate node id `x` (also nodes[0] (id `x`))",
        );
        check_err(
            "name: t\nagents:\n  a: {provider: mock}\n  a: {provider: mock}\nsteps: [{agent: a}]\n",
            "3:3: agents: duplicate agent `a`",
        );
        check_json_err(
            "{\"name\": \"t\", \"agents\": {\"a\": {\"provider\": \"mock\"}}, \"steps\": [{\"agent\": \"a\"}, {\"agent\": \"a\"}]}",
            "steps[1]: duplicate node id `a`",
        );
        check_json_err(
            "{\"name\": \"t\", \"agents\": {\"a\": {\"provider\": \"mock\"}, \"a\": {\"provider\": \"mock\"}}}",
            "agents: duplicate agent `a`",
        );
    }

    #[test]
    fn rule_7_edges_to_unknown_nodes() {
        let nodes = "nodes: [{id: x, agent: a}, {id: y, agent: b}]\n";
        check_err(
            &wf(&format!("{nodes}edges: [{{from: x, to: z}}]\n")),
            "edges[0] (x->z): `to`: unknown node `z` (known: x, y)",
        );
        check_err(
            &wf(&format!(
                "{nodes}edges: [{{from: x, to: y}}, {{from: w, to: y, id: e2}}]\n"
            )),
            "edges[1] (e2): `from`: unknown node `w`",
        );
        check_json_err(
            "{\"name\": \"t\", \"agents\": {\"a\": {\"provider\": \"mock\"}}, \"nodes\": [{\"id\": \"x\", \"agent\": \"a\"}], \"edges\": [{\"from\": \"x\", \"to\": \"q\"}]}",
            "edges[0] (x->q): `to`: unknown node `q` (known: x)",
        );
    }

    #[test]
    fn rule_8_duplicate_edge_ids() {
        let nodes = "nodes: [{id: x, agent: a}, {id: y, agent: b}]\n";
        check_err(
            &wf(&format!(
                "{nodes}edges: [{{from: x, to: y}}, {{from: x, to: y}}]\n"
            )),
            "edges[1] (x->y): duplicate edge id `x->y` (also edges[0])",
        );
        check_err(
            &wf(&format!(
                "{nodes}edges: [{{from: x, to: y, id: e}}, {{from: y, to: x, id: e, max_iterations: 2}}]\n"
            )),
            "edges[1] (e): duplicate edge id `e`",
        );
        check_err(
            &wf(&format!("{nodes}edges: [{{from: x, to: y, id: ' '}}]\n")),
            "edges[0] ( ): `id` must not be empty",
        );
        check_json_err(
            "{\"name\": \"t\", \"agents\": {\"a\": {\"provider\": \"mock\"}}, \"nodes\": [{\"id\": \"x\", \"agent\": \"a\"}, {\"id\": \"y\", \"agent\": \"a\"}], \"edges\": [{\"from\": \"x\", \"to\": \"y\"}, {\"from\": \"x\", \"to\": \"y\"}]}",
            "edges[1] (x->y): duplicate edge id `x->y`",
        );
    }

    #[test]
    fn rule_9_unbounded_cycles() {
        let nodes = "nodes: [{id: x, agent: a}, {id: y, agent: b}, {id: z, agent: c}]\n";
        check_err(
            &wf(&format!(
                "{nodes}edges: [{{from: x, to: y}}, {{from: y, to: z}}, {{from: z, to: y}}]\n"
            )),
            "edges[2] (z->y): closes the cycle y -> z -> y",
        );
        check_err(
            &wf(&format!(
                "{nodes}edges: [{{from: x, to: y}}, {{from: y, to: x}}]\n"
            )),
            "closes the cycle x -> y -> x, and none of its edges has `max_iterations`",
        );
        check_err(
            &wf(&format!("{nodes}edges: [{{from: x, to: x}}]\n")),
            "edges[0] (x->x): closes the cycle x -> x",
        );
        check_json_err(
            "{\"name\": \"t\", \"agents\": {\"a\": {\"provider\": \"mock\"}}, \"nodes\": [{\"id\": \"x\", \"agent\": \"a\"}, {\"id\": \"y\", \"agent\": \"a\"}], \"edges\": [{\"from\": \"x\", \"to\": \"y\"}, {\"from\": \"y\", \"to\": \"x\"}]}",
            "closes the cycle x -> y -> x",
        );
    }

    #[test]
    fn rule_10_loop_edges_must_loop() {
        let nodes = "nodes: [{id: x, agent: a}, {id: y, agent: b}, {id: z, agent: c}]\n";
        check_err(
            &wf(&format!(
                "{nodes}edges: [{{from: x, to: y}}, {{from: y, to: z, max_iterations: 3}}]\n"
            )),
            "edges[1] (y->z): `max_iterations` makes this a loop edge, but no forward path leads from `z` back to `y`",
        );
        check_err(
            &wf(&format!(
                "{nodes}edges: [{{from: x, to: y}}, {{from: y, to: x, max_iterations: 0}}]\n"
            )),
            "edges[1] (y->x): `max_iterations` must be at least 1",
        );
        check_err(
            &wf(&format!(
                "{nodes}edges: [{{from: x, to: y, max_iterations: 2}}, {{from: y, to: z}}]\n"
            )),
            "no forward path leads from `y` back to `x`",
        );
        check_json_err(
            "{\"name\": \"t\", \"agents\": {\"a\": {\"provider\": \"mock\"}}, \"nodes\": [{\"id\": \"x\", \"agent\": \"a\"}, {\"id\": \"y\", \"agent\": \"a\"}], \"edges\": [{\"from\": \"x\", \"to\": \"y\", \"max_iterations\": 2}]}",
            "edges[0] (x->y): `max_iterations` makes this a loop edge",
        );
    }

    #[test]
    fn zero_negative_and_oversized_limits_name_their_field() {
        let agent = |settings: &str| {
            format!(
                "name: t\nagents:\n  a: {{provider: mock, {settings}}}\nsteps: [{{agent: a}}]\n"
            )
        };
        check_err(
            &agent("max_turns: 0"),
            "agents.a: `max_turns` must be at least 1",
        );
        check_err(
            &agent("max_turns: -1"),
            "agents.a.max_turns: invalid type: integer `-1`, expected u32",
        );
        check_err(
            &agent("timeout: 0"),
            "agents.a: `timeout` must be more than 0 s",
        );
        check_err(
            &agent("timeout: '0s'"),
            "agents.a: `timeout` must be more than 0 s",
        );
        check_err(
            &agent("timeout: -5"),
            "agents.a: `timeout` must be more than 0 s, not -5",
        );
        check_err(&agent("timeout: 1.5"), "agents.a: bad `timeout` 1.5");
        check_err(
            &agent("timeout: 18446744073709551615"),
            "agents.a: `timeout` must be at most 7 days (604800 s)",
        );
        check_err(
            &agent("timeout: '500000000000y'"),
            "agents.a: `timeout` must be at most 7 days (604800 s), not 500000000000years",
        );
        check_err(
            &agent("timeout: '8 days'"),
            "`timeout` must be at most 7 days",
        );
        let ok = WorkflowDef::from_yaml(&agent("timeout: '7 days', max_turns: 1")).unwrap();
        assert_eq!(
            ok.agents["a"].timeout.map(|t| t.0),
            Some(super::super::Timeout::MAX)
        );
        check_err(
            "name: t\nagents: {a: {provider: mock}}\nsteps: [{agent: a}]\npricing: {m: {input: -1, output: 1}}\n",
            "pricing.m: `input` must be a price of 0 or more, not -1",
        );
        check_err(
            "name: t\nagents: {a: {provider: mock}}\nsteps: [{agent: a}]\npricing: {m: {input: 1, output: .nan}}\n",
            "pricing.m: `output` must be a price of 0 or more",
        );
    }

    #[test]
    fn a_message_quoting_a_whole_file_is_cut_in_the_middle() {
        let text = format!(
            "{}\nfoo\n",
            "root:x:0:0:root:/root:/bin/bash ".repeat(10_000)
        );
        for err in [
            WorkflowDef::from_yaml(&text).unwrap_err(),
            WorkflowDef::from_json(&format!("{:?}", text)).unwrap_err(),
        ] {
            let message = err.to_string();
            assert!(message.chars().count() < 400, "{message}");
            assert!(message.contains("characters left out"), "{message}");
            assert!(message.contains("expected"), "{message}");
        }
    }

    #[test]
    fn deep_yaml_brackets_are_refused_at_once() {
        let agents = "name: t\nagents: {a: {provider: mock}}\nsteps: [{agent: a}]\n";
        let deep = format!(
            "{agents}input: {}{}\n",
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        // Refused at the 129th bracket (column 136), before the scanner,
        // whose time grows with the square of the depth, ever sees it.
        check_parse(&deep, 4, 136, "`[` and `{` nest deeper than 128 levels");
        let fine = format!("{agents}input: {}{}\n", "[".repeat(100), "]".repeat(100));
        assert!(WorkflowDef::from_yaml(&fine).is_ok());
        // Deeper than a run's log can hold: refused, though YAML reads it.
        let deep = format!("{agents}input: {}{}\n", "[".repeat(101), "]".repeat(101));
        check_err(
            &deep,
            "input: nests arrays and objects deeper than 100 levels",
        );
        let quoted = format!(
            "{agents}description: \"{q} \\\" {q}\"\ninput: '{q}'' {q}' # {q}\n",
            q = "[".repeat(300)
        );
        assert!(
            WorkflowDef::from_yaml(&quoted).is_ok(),
            "quoted and commented brackets are text"
        );
    }

    #[test]
    fn a_workdir_stays_in_the_project_unless_allowed_out() {
        let agent = |settings: &str| {
            format!(
                "name: t\nagents:\n  a: {{provider: mock, {settings}}}\nsteps: [{{agent: a}}]\n"
            )
        };
        for dir in ["/", "//", "..", "../x", "a/../../x", "./.."] {
            check_err(
                &agent(&format!("workdir: '{dir}'")),
                "agents.a: `workdir`: ",
            );
            check_err(
                &agent(&format!("workdir: '{dir}'")),
                "set `allow_outside_project: true` to allow it",
            );
            let allowed = agent(&format!("workdir: '{dir}', allow_outside_project: true"));
            assert!(WorkflowDef::from_yaml(&allowed).unwrap().agents["a"].allow_outside_project);
        }
        for dir in ["work", "./work", "a/../b", "a/b/../..", ""] {
            assert!(
                WorkflowDef::from_yaml(&agent(&format!("workdir: '{dir}'"))).is_ok(),
                "{dir}"
            );
        }
        check_err(
            &agent("allow_outside: true"),
            "unknown field `allow_outside`",
        );
    }

    #[test]
    fn absolute_workdirs_are_judged_against_the_project() {
        let project = std::path::Path::new("/home/me/proj");
        let outside = |dir: &str| super::super::workdir_outside(dir, project);
        assert_eq!(outside("/home/me/proj"), None);
        assert_eq!(outside("/home/me/proj/sub/"), None);
        assert_eq!(outside("/home/me/proj/a/../b"), None);
        assert_eq!(outside("sub/dir"), None);
        assert!(outside("/").unwrap().contains("whole file system"));
        assert!(
            outside("/home/me")
                .unwrap()
                .contains("outside the project directory /home/me/proj")
        );
        assert!(
            outside("/home/me/project-2").is_some(),
            "a sibling with a common prefix"
        );
        assert!(
            outside("/home/me/proj/../other")
                .unwrap()
                .contains("outside the project")
        );
        assert_eq!(outside("/home/me/x/../proj/sub"), None);
        assert!(outside("../proj2").unwrap().contains("through `..`"));
    }

    #[test]
    fn on_limit_is_fail_by_default_and_only_on_loop_edges() {
        let nodes = "nodes: [{id: x, agent: a}, {id: y, agent: b}]\n";
        let def = WorkflowDef::from_yaml(&wf(&format!(
            "{nodes}edges: [{{from: x, to: y}}, {{from: y, to: x, max_iterations: 2}}, {{from: y, to: x, id: again, max_iterations: 2, on_limit: continue}}]\n"
        )))
        .unwrap();
        assert_eq!(
            def.edges.iter().map(|e| e.on_limit).collect::<Vec<_>>(),
            [OnLimit::Fail, OnLimit::Fail, OnLimit::Continue]
        );
        check_err(
            &wf(&format!(
                "{nodes}edges: [{{from: x, to: y, on_limit: continue}}]\n"
            )),
            "edges[0] (x->y): `on_limit` goes with `max_iterations`",
        );
        check_err(
            &wf(&format!(
                "{nodes}edges: [{{from: x, to: y}}, {{from: y, to: x, max_iterations: 1, on_limit: stop}}]\n"
            )),
            "edges[1].on_limit: unknown variant `stop`, expected `fail` or `continue`",
        );
    }

    #[test]
    fn conditions_read_known_variables_and_nodes() {
        let nodes = "nodes: [{id: x, agent: a}, {id: y, agent: b}]\n";
        check_err(
            &wf(&format!(
                "{nodes}edges: [{{from: x, to: y, when: 'outptu.ok'}}]\n"
            )),
            "edges[0] (x->y): `when` does not compile: `outptu.ok` reads `outptu`, which is not a variable",
        );
        check_err(
            &wf(&format!(
                "{nodes}edges: [{{from: x, to: y, when: 'outputs.z.ok'}}]\n"
            )),
            "edges[0] (x->y): `when` reads `outputs.z`, but there is no node `z` (known: x, y)",
        );
        assert!(WorkflowDef::from_yaml(&wf(&format!(
            "{nodes}edges: [{{from: x, to: y, when: 'outputs.x.ok && has(outputs.y) && input.all(k, k != \"\")'}}]\n"
        )))
        .is_ok());
    }

    #[test]
    fn rule_11_conditions_must_compile() {
        let nodes = "nodes: [{id: x, agent: a}, {id: y, agent: b}]\n";
        check_err(
            &wf(&format!(
                "{nodes}edges: [{{from: x, to: y, when: 'output.contains('}}]\n"
            )),
            "edges[0] (x->y): `when` does not compile: `output.contains(` is not a valid CEL expression",
        );
        check_err(
            &wf(&format!("{nodes}edges: [{{from: x, to: y, when: ''}}]\n")),
            "`when` does not compile",
        );
        check_json_err(
            "{\"name\": \"t\", \"agents\": {\"a\": {\"provider\": \"mock\"}}, \"nodes\": [{\"id\": \"x\", \"agent\": \"a\"}, {\"id\": \"y\", \"agent\": \"a\"}], \"edges\": [{\"from\": \"x\", \"to\": \"y\", \"when\": \"1 +\"}]}",
            "edges[0] (x->y): `when` does not compile: `1 +`",
        );
    }

    #[test]
    fn http_agent_settings_are_checked_and_a_pasted_key_is_never_echoed() {
        let agent = |settings: &str| {
            format!(
                "name: t\nagents:\n  a: {{provider: openai, {settings}}}\nsteps: [{{agent: a}}]\n"
            )
        };
        check_err(
            "name: t\nagents:\n  a: {provider: anthropic}\nsteps: [{agent: a}]\n",
            "agents.a: provider `anthropic` needs a `model`",
        );
        let pasted = agent("model: m, api_key_env: sk-proj-abc123");
        let err = WorkflowDef::from_yaml(&pasted).unwrap_err().to_string();
        assert!(err.contains("`api_key_env` must be the name"), "{err}");
        assert!(!err.contains("sk-proj"), "the value is not shown: {err}");
        check_err(&agent("model: m, temperature: 3"), "between 0 and 2, not 3");
        check_err(
            &agent("model: m, max_tokens: 0"),
            "`max_tokens` must be at least 1",
        );
        check_err(
            &agent("model: m, max_retries: 4294967295"),
            "`max_retries` must be at most 100, not 4294967295",
        );
        check_err(
            &agent("model: m, base_url: 127.0.0.1:8080"),
            "`base_url` must start with http://",
        );
        let ok = agent(
            "model: gpt-4o, api_key_env: MY_KEY, temperature: 0.2, max_tokens: 100, max_retries: 0, base_url: 'http://127.0.0.1:1/v1'",
        );
        let wf = WorkflowDef::from_yaml(&ok).unwrap();
        assert_eq!(wf.agents["a"].api_key_env.as_deref(), Some("MY_KEY"));
        check_err(
            &agent("model: m, thinking_budget: 2048"),
            "is for provider `anthropic`, not `openai`",
        );
        let thinking = |settings: &str| {
            format!(
                "name: t\nagents:\n  a: {{provider: anthropic, model: m, {settings}}}\nsteps: [{{agent: a}}]\n"
            )
        };
        check_err(
            &thinking("thinking_budget: 512"),
            "at least 1024 and below `max_tokens` (8192), not 512",
        );
        check_err(
            &thinking("thinking_budget: 4096, max_tokens: 4096"),
            "below `max_tokens` (4096)",
        );
        check_err(
            &thinking("thinking_budget: 2048, temperature: 0.5"),
            "`temperature` cannot be set",
        );
        assert!(WorkflowDef::from_yaml(&thinking("thinking_budget: 2048")).is_ok());
        assert_eq!(wf.agents["a"].max_retries, Some(0));
    }

    #[test]
    fn pricing_extends_the_built_in_table() {
        let yaml = "name: t\nagents: {a: {provider: mock}}\nsteps: [{agent: a}]\n\
            pricing:\n  local-llm: {input: 0.5, output: 1}\n";
        let wf = WorkflowDef::from_yaml(yaml).unwrap();
        assert_eq!(wf.pricing.price("local-llm").unwrap().output, 1.0);
        assert!(wf.pricing.price("gpt-4o").is_some(), "the built-ins stay");
        check_err(
            &yaml.replace("output: 1}", "output: 1, extra: 2}"),
            "unknown field `extra`",
        );
    }

    #[test]
    fn rule_12_output_schemas_must_be_valid() {
        check_err(
            "name: t\nagents:\n  w: {provider: mock, output_schema: {type: strin}}\nsteps: [{agent: w}]\n",
            "agents.w: `output_schema` is not a valid JSON Schema",
        );
        check_err(
            "name: t\nagents:\n  w: {provider: mock, output_schema: {minimum: x}}\nsteps: [{agent: w}]\n",
            "agents.w: `output_schema` is not a valid JSON Schema",
        );
        check_err(
            "name: t\nagents:\n  w: {provider: mock, output_schema: {$ref: 'https://example.com/s.json'}}\nsteps: [{agent: w}]\n",
            "agents.w: `output_schema` is not a valid JSON Schema",
        );
        check_json_err(
            "{\"name\": \"t\", \"agents\": {\"w\": {\"provider\": \"mock\", \"output_schema\": {\"type\": 5}}}, \"steps\": [{\"agent\": \"w\"}]}",
            "agents.w: `output_schema` is not a valid JSON Schema",
        );
    }

    #[test]
    fn rule_13_ids_must_be_path_safe() {
        check_err(
            "name: t\nagents:\n  'my agent': {provider: mock}\nsteps: [{agent: 'my agent'}]\n",
            "agents.my agent: `my agent` is not a valid node id",
        );
        check_err(
            &wf("steps: [{agent: a, id: ../x}]\n"),
            "steps[0]: `../x` is not a valid node id",
        );
        check_err(
            &wf("nodes: [{id: -x, agent: a}]\n"),
            "nodes[0] (id `-x`): `-x` is not a valid node id",
        );
        check_json_err(
            "{\"name\": \"t\", \"agents\": {\"a/b\": {\"provider\": \"mock\"}}, \"steps\": [{\"agent\": \"a/b\"}]}",
            "agents.a/b: `a/b` is not a valid node id",
        );
    }

    /// A run's input in the file is read as written or refused, never
    /// quietly changed: a repeated key, `.nan` or `.inf` are errors with
    /// their line; other YAML keys are read as strings, as before.
    #[test]
    fn a_second_yaml_document_is_refused_at_its_line() {
        let one = "name: t\nagents: {a: {provider: mock}}\nsteps: [{agent: a}]\n";
        check_parse(
            &format!("# a flow\n---\n{one}---\nname: u\n"),
            6,
            1,
            "a second YAML document starts here",
        );
        // A first `---` opens the only document.
        assert!(WorkflowDef::from_yaml(&format!("---\n{one}")).is_ok());
    }

    #[test]
    fn input_in_the_file_is_read_strictly() {
        let head = "name: t\nagents: {a: {provider: mock}}\nsteps: [{agent: a}]\n";
        check_parse(
            &format!("{head}input:\n  a: 1\n  a: 2\n"),
            5,
            3,
            "duplicate key `a`",
        );
        check_err(
            &format!("{head}input: {{x: [1, .nan]}}\n"),
            "NaN is no JSON number",
        );
        check_err(&format!("{head}input: .inf\n"), "inf is no JSON number");
        check_json_err(
            r#"{"name": "t", "agents": {"a": {"provider": "mock"}}, "steps": [{"agent": "a"}], "input": {"k": 1, "k": 2}}"#,
            "duplicate key `k`",
        );
        let read = WorkflowDef::from_yaml(&format!(
            "{head}input: {{1: one, true: yes, s: [1.5, null, {{n: -2}}]}}\n"
        ))
        .unwrap();
        assert_eq!(
            read.input,
            Some(serde_json::json!({"1": "one", "true": "yes", "s": [1.5, null, {"n": -2}]}))
        );
    }

    #[test]
    fn a_byte_order_mark_is_read_past_and_hashed() {
        let yaml = "name: t\nagents: {a: {provider: mock}}\nsteps: [{agent: a}]\n";
        let json =
            r#"{"name": "t", "agents": {"a": {"provider": "mock"}}, "steps": [{"agent": "a"}]}"#;
        for (plain, parse) in [
            (
                yaml,
                WorkflowDef::from_yaml as fn(&str) -> Result<WorkflowDef, WorkflowError>,
            ),
            (json, WorkflowDef::from_json),
        ] {
            let marked = format!("\u{feff}{plain}");
            let (a, b) = (parse(plain).unwrap(), parse(&marked).unwrap());
            assert_eq!(a.name, b.name);
            assert_eq!(b.hash, hash(&marked), "the hash is of the file as it is");
            assert_ne!(a.hash, b.hash);
        }
        assert!(matches!(
            WorkflowDef::from_yaml("\u{feff}"),
            Err(WorkflowError::Empty)
        ));
    }

    #[test]
    fn shape_rules() {
        check_err(
            &wf("steps: [{agent: a}]\nnodes: [{id: a, agent: a}]\n"),
            "nodes: `steps` and `nodes` cannot both be given",
        );
        check_err(
            &wf(""),
            "workflow: needs `steps` (a chain of agents) or `nodes` (with `edges`)",
        );
        check_err(&wf("steps: []\n"), "steps: must list at least one step");
        check_err(&wf("nodes: []\n"), "nodes: must list at least one node");
        check_err(
            &wf("steps: [{agent: a}]\nedges: []\n"),
            "edges: `edges` goes with `nodes`",
        );
        check_err(
            "name: ' '\nagents: {a: {provider: mock}}\nsteps: [{agent: a}]\n",
            "name: must not be empty",
        );
        for bad in ["../../x", "/tmp/x", "..", "a\\\\b", "a\\tb"] {
            check_err(
                &format!(
                    "name: \"{bad}\"\nagents: {{a: {{provider: mock}}}}\nsteps: [{{agent: a}}]\n"
                ),
                "cannot name a directory",
            );
        }
        let named =
            "name: Research pipeline (v2)\nagents: {a: {provider: mock}}\nsteps: [{agent: a}]\n";
        assert_eq!(
            WorkflowDef::from_yaml(named).unwrap().name,
            "Research pipeline (v2)"
        );
        check_err(
            "name: t\nagents: {}\nsteps: [{agent: a}]\n",
            "agents: at least one agent is required",
        );
        check_json_err(
            "{\"name\": \"t\", \"agents\": {\"a\": {\"provider\": \"mock\"}}}",
            "workflow: needs `steps`",
        );
    }

    #[test]
    fn steps_lower_to_a_chain() {
        let src = "name: research\ndescription: two steps\ninput: {topic: rust}\nagents:\n  researcher: {provider: mock, system_prompt: Find facts.}\n  analyst: {provider: mock, max_turns: 3}\nsteps:\n  - agent: researcher\n  - agent: analyst\n  - {agent: analyst, id: analyst-2}\n";
        let def = WorkflowDef::from_yaml(src).unwrap();
        assert_eq!(def.name, "research");
        assert_eq!(def.description.as_deref(), Some("two steps"));
        assert_eq!(def.input, Some(serde_json::json!({"topic": "rust"})));
        let ids: Vec<&str> = def.nodes.iter().map(|n| n.id.as_str()).collect();
        assert_eq!(ids, ["researcher", "analyst", "analyst-2"]);
        let edges: Vec<(&str, &str, &str)> = def
            .edges
            .iter()
            .map(|e| (e.id.as_str(), e.from.as_str(), e.to.as_str()))
            .collect();
        assert_eq!(
            edges,
            [
                ("researcher->analyst", "researcher", "analyst"),
                ("analyst->analyst-2", "analyst", "analyst-2")
            ]
        );
        assert!(def.edges.iter().all(|e| e.when.is_none() && !e.is_loop()));
        assert_eq!(
            def.agent_of(&def.nodes[2])
                .map(|(name, a)| (name, a.max_turns)),
            Some(("analyst", Some(3)))
        );
        assert_eq!(def.agents["researcher"].system_prompt, "Find facts.");
        let hex = def.hash.strip_prefix("sha256:").unwrap();
        assert!(
            hex.len() == 64
                && hex
                    .chars()
                    .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
        assert_ne!(
            def.hash,
            WorkflowDef::from_yaml(&format!("{src}\n")).unwrap().hash,
            "hash is of the bytes"
        );
    }

    #[test]
    fn known_sha256() {
        assert_eq!(
            hash("abc"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn graph_with_conditions_and_a_loop() {
        let src = r#"
name: review
agents:
  writer: {provider: mock}
  reviewer: {provider: mock, output_schema: {type: object, required: [score]}}
  publisher: {provider: mock, policy: {continue_on_error: true}}
nodes:
  - {id: draft, agent: writer}
  - {id: review, agent: reviewer}
  - {id: publish, agent: publisher}
edges:
  - {from: draft, to: review}
  - {from: review, to: publish, when: 'output.score >= 0.8'}
  - {from: review, to: draft, when: 'output.score < 0.8', max_iterations: 3, id: retry}
"#;
        let def = WorkflowDef::from_yaml(src).unwrap();
        assert_eq!(
            def.edges.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(),
            ["draft->review", "review->publish", "retry"]
        );
        let retry = &def.edges[2];
        assert_eq!((retry.max_iterations, retry.is_loop()), (Some(3), true));
        let when = def.edges[1].when.as_ref().unwrap();
        assert_eq!(when.source(), "output.score >= 0.8");
        let vars = serde_json::json!({"output": {"score": 0.9}});
        assert_eq!(when.evaluate(vars.as_object().unwrap()), Ok(true));
        assert!(def.agents["publisher"].policy.continue_on_error);

        let json = serde_json::to_string(&yaml_serde::from_str::<Value>(src).unwrap()).unwrap();
        let from_json = WorkflowDef::from_json(&json).unwrap();
        assert_eq!(from_json.nodes, def.nodes);
        assert_eq!(from_json.agents, def.agents);
        assert_eq!(from_json.edges.len(), 3);
        assert_eq!(
            WorkflowDef::from_yaml(&json).unwrap().nodes,
            def.nodes,
            "JSON is YAML too"
        );
    }

    #[test]
    fn schemas_may_use_drafts_and_internal_refs() {
        let src = "name: t\nagents:\n  w:\n    provider: mock\n    output_schema:\n      $schema: 'https://json-schema.org/draft/2020-12/schema'\n      $defs: {item: {type: string}}\n      type: array\n      items: {$ref: '#/$defs/item'}\n  v: {provider: mock, output_schema: true}\nsteps: [{agent: w}, {agent: v}]\n";
        WorkflowDef::from_yaml(src).unwrap();
    }

    /// Every complete example in the user documentation loads.
    #[test]
    fn documented_examples_load() {
        let doc = include_str!("../../../../docs/workflow-format.md");
        let examples: Vec<&str> = doc
            .split("```yaml\n")
            .skip(1)
            .filter_map(|block| block.split("```").next())
            .filter(|block| block.starts_with("name:"))
            .collect();
        assert!(examples.len() >= 3, "found {} examples", examples.len());
        let mut loaded = Vec::new();
        for example in examples {
            match WorkflowDef::from_yaml(example) {
                Ok(def) => loaded.push(def),
                Err(e) => panic!("{e}\n--- example:\n{example}"),
            }
        }
        // Each node-level key has a complete example that loads.
        let nodes = || loaded.iter().flat_map(|def| &def.nodes);
        let shown = [
            (
                "command",
                nodes().any(|n| matches!(n.kind, NodeKind::Command(_))),
            ),
            ("input", nodes().any(|n| n.input.is_some())),
            ("for_each", nodes().any(|n| n.for_each.is_some())),
            (
                "join: any",
                nodes().any(|n| n.join == super::super::Join::Any),
            ),
            (
                "retry",
                nodes().any(|n| n.retry != super::super::Retry::default()),
            ),
            ("budget", nodes().any(|n| !n.budget.is_unlimited())),
            (
                "top-level budget",
                loaded.iter().any(|d| !d.budget.is_unlimited()),
            ),
            (
                "max_concurrency",
                loaded
                    .iter()
                    .any(|d| d.max_concurrency != WorkflowDef::DEFAULT_CONCURRENCY),
            ),
        ];
        for (key, found) in shown {
            assert!(found, "no complete example in the docs shows `{key}`");
        }
    }

    proptest::proptest! {
        #[test]
        fn garbage_never_panics(src in "\\PC{0,200}") {
            let _ = WorkflowDef::from_yaml(&src);
            let _ = WorkflowDef::from_json(&src);
        }

        #[test]
        fn yamlish_garbage_never_panics(src in "[a-z:{}\\[\\],'\"#&*!|>@%~ \\n-]{0,200}") {
            let _ = WorkflowDef::from_yaml(&src);
            let _ = WorkflowDef::from_json(&src);
        }

        /// Mutating one byte of a valid file yields a definition or an error, never a panic.
        #[test]
        fn mutated_files_never_panic(at in 0usize..400, byte in proptest::num::u8::ANY) {
            let src = wf("nodes: [{id: x, agent: a}, {id: y, agent: b}]\nedges: [{from: x, to: y, when: 'output.ok'}, {from: y, to: x, max_iterations: 2}]\n");
            let mut bytes = src.into_bytes();
            let at = at % bytes.len();
            bytes[at] = byte;
            let src = String::from_utf8_lossy(&bytes);
            let _ = WorkflowDef::from_yaml(&src);
        }
    }

    #[test]
    fn call_workflow_nodes_and_steps() {
        let def = WorkflowDef::from_yaml(
            "name: p\nagents:\n  a: {provider: mock}\nsteps: [{agent: a}, {id: sub, call_workflow: child.yaml}]\n",
        )
        .unwrap();
        assert!(matches!(&def.nodes[1].kind,
            NodeKind::CallWorkflow { workflow, resolved: None } if workflow == "child.yaml"));
        assert!(def.agent_of(&def.nodes[1]).is_none());
        let both = "name: p\nagents:\n  a: {provider: mock}\nnodes: [{id: x, agent: a, call_workflow: c.yaml}]\n";
        let err = WorkflowDef::from_yaml(both).unwrap_err().to_string();
        assert!(
            err.contains("give only one of `agent`, `command`, `call_workflow` and `approval`"),
            "{err}"
        );
        let no_id = "name: p\nagents:\n  a: {provider: mock}\nsteps: [{call_workflow: c.yaml}]\n";
        let err = WorkflowDef::from_yaml(no_id).unwrap_err().to_string();
        assert!(err.contains("needs an `id`"), "{err}");
    }
}

//! The keys of one node (or step) besides its id: what it runs (`agent`,
//! `command`, `call_workflow`), and how (`input`, `for_each`, `join`,
//! `retry`, `budget`); and the run-wide limits (`budget`,
//! `max_concurrency`). Serde reads them into the `Raw*` mirrors below;
//! [`NodeSet`] checks and lowers them, each error naming the node and field.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor, value::MapAccessDeserializer};

use super::agents::check_workdir;
use super::approval::{RawApproval, lower_approval};
use super::duration::RawDuration;
use super::invalid::{invalid, list};
use super::{
    AgentDef, Budget, CommandDef, ForEach, Join, NodeDef, NodeKind, Policy, Retry, WorkflowError,
};
use crate::condition::Expression;
use crate::ids::NodeId;

/// The most node runs (or items of one `for_each`) in flight at once a
/// workflow may ask for: each may be a CLI process, and more would exhaust
/// the machine long before it sped anything up.
pub(super) const MAX_CONCURRENCY: u32 = 256;

/// The most attempts `retry.max_attempts` may give, as for an HTTP agent's
/// `max_retries`: more would keep a failing node retrying for hours.
const MAX_ATTEMPTS: u32 = 100;

/// A key that takes either a short form (a string) or a mapping with the
/// full settings: `command: make` or `command: {run: make, timeout: 5m}`.
pub(super) struct Shorthand<T>(pub T);

/// What [`Shorthand`] builds from the string form.
pub(super) trait FromText: Sized {
    /// How the two forms are described when neither is given.
    const EXPECTING: &'static str;
    /// The value a bare string stands for.
    fn from_text(text: String) -> Self;
}

impl<'de, T: FromText + Deserialize<'de>> Deserialize<'de> for Shorthand<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Either<T>(PhantomData<T>);
        impl<'de, T: FromText + Deserialize<'de>> Visitor<'de> for Either<T> {
            type Value = T;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(T::EXPECTING)
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<T, E> {
                Ok(T::from_text(text.to_owned()))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                // The mapping is read by `T`'s own derive, so its unknown
                // keys and wrong types are reported as anywhere else.
                T::deserialize(MapAccessDeserializer::new(map))
            }
        }
        d.deserialize_any(Either(PhantomData)).map(Shorthand)
    }
}

/// `command:` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCommand {
    run: String,
    #[serde(default)]
    timeout: Option<super::Timeout>,
    #[serde(default)]
    workdir: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    allow_outside_project: bool,
    #[serde(default)]
    continue_on_error: bool,
}

impl FromText for RawCommand {
    const EXPECTING: &'static str = "a script, or a mapping `{run: SCRIPT, timeout?, workdir?, env?, allow_outside_project?, continue_on_error?}`";
    fn from_text(run: String) -> Self {
        RawCommand {
            run,
            timeout: None,
            workdir: None,
            env: BTreeMap::new(),
            allow_outside_project: false,
            continue_on_error: false,
        }
    }
}

/// `for_each:` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawForEach {
    items: String,
    #[serde(default)]
    max_concurrency: Option<u32>,
}

impl FromText for RawForEach {
    const EXPECTING: &'static str =
        "a CEL expression, or a mapping `{items: CEL, max_concurrency?: N}`";
    fn from_text(items: String) -> Self {
        RawForEach {
            items,
            max_concurrency: None,
        }
    }
}

/// `retry:` as written.
#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping `{max_attempts?: N, backoff?: DURATION, max_backoff?: DURATION}`"
)]
pub(super) struct RawRetry {
    #[serde(default)]
    max_attempts: Option<u32>,
    #[serde(default)]
    backoff: Option<RawDuration>,
    #[serde(default)]
    max_backoff: Option<RawDuration>,
}

/// `budget:` as written, of a node or of the whole run.
#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping `{tokens?: N, cost_usd?: USD, turns?: N, deadline?: DURATION}`"
)]
pub(super) struct RawBudget {
    #[serde(default)]
    tokens: Option<u64>,
    #[serde(default)]
    cost_usd: Option<f64>,
    #[serde(default)]
    turns: Option<u64>,
    #[serde(default)]
    deadline: Option<RawDuration>,
}

/// What a step or node says besides its id, gathered from either form.
pub(super) struct NodeKeys {
    pub agent: Option<String>,
    pub call_workflow: Option<String>,
    pub command: Option<Shorthand<RawCommand>>,
    pub approval: Option<Shorthand<RawApproval>>,
    pub input: Option<String>,
    pub for_each: Option<Shorthand<RawForEach>>,
    pub join: Option<Join>,
    pub retry: Option<RawRetry>,
    pub budget: Option<RawBudget>,
}

impl FromText for RawApproval {
    const EXPECTING: &'static str = "an approval: a prompt, or `{prompt, schema?, timeout?, on_timeout?: reject|approve|fail, approvers?: [NAME]}`";

    fn from_text(prompt: String) -> Self {
        RawApproval::prompt(prompt)
    }
}

/// Collects nodes, checking each against the agents and the ids seen so far.
pub(super) struct NodeSet<'a> {
    agents: &'a BTreeMap<String, AgentDef>,
    pub nodes: Vec<NodeDef>,
    /// The item that declared each node, for messages.
    items: Vec<String>,
    /// Id -> index in `nodes`.
    pub seen: HashMap<String, usize>,
}

impl<'a> NodeSet<'a> {
    pub fn new(agents: &'a BTreeMap<String, AgentDef>) -> Self {
        NodeSet {
            agents,
            nodes: Vec::new(),
            items: Vec::new(),
            seen: HashMap::new(),
        }
    }

    /// The nodes, without the room the vector grew into: a workflow is
    /// held for the whole run.
    pub fn into_nodes(mut self) -> Vec<NodeDef> {
        self.nodes.shrink_to_fit();
        self.nodes
    }

    pub fn add(&mut self, item: String, id: &str, keys: NodeKeys) -> Result<(), WorkflowError> {
        let NodeKeys {
            agent,
            call_workflow,
            command,
            approval,
            input,
            for_each,
            join,
            retry,
            budget,
        } = keys;
        let kind = kind(&item, agent, call_workflow, command, approval)?;
        if let NodeKind::Agent { agent } = &kind
            && !self.agents.contains_key(agent)
        {
            let known = list(self.agents.keys().map(String::as_str));
            return Err(invalid(
                item,
                format!("unknown agent `{agent}` (known: {known})"),
            ));
        }
        let node_id = NodeId::new(id).map_err(|e| invalid(&item, e.to_string()))?;
        if let Some(&first) = self.seen.get(id) {
            return Err(invalid(
                item,
                format!(
                    "duplicate node id `{id}` (also {}); give each an explicit, unique `id`",
                    self.items[first]
                ),
            ));
        }
        let given = [
            ("input", input.is_some()),
            ("for_each", for_each.is_some()),
            ("retry", retry.is_some()),
            ("budget", budget.is_some()),
        ];
        if let Some((key, why)) = given
            .iter()
            .filter(|(_, set)| *set)
            .find_map(|(key, _)| unsupported(&kind, key).map(|why| (key, why)))
        {
            return Err(invalid(item, format!("`{key}` {why}")));
        }
        let mut node = NodeDef::new(node_id, kind);
        node.for_each = for_each
            .map(|Shorthand(raw)| lower_for_each(&item, raw))
            .transpose()?;
        node.input = input
            .map(|src| expression(&item, "input", &src, node.for_each.is_some()))
            .transpose()?;
        node.join = join.unwrap_or_default();
        node.retry = retry
            .map(|raw| lower_retry(&item, raw))
            .transpose()?
            .unwrap_or_default();
        node.budget = budget
            .map(|raw| lower_budget(&item, "budget.", raw))
            .transpose()?
            .unwrap_or_default();
        self.seen.insert(id.to_owned(), self.nodes.len());
        self.items.push(item);
        self.nodes.push(node);
        Ok(())
    }

    /// Every `outputs.<id>` an `input:` or `for_each:` reads names a node;
    /// checked once all nodes are known, since a node may read a later one
    /// (the previous pass of a loop).
    pub fn check_references(&self) -> Result<(), WorkflowError> {
        for (node, item) in self.nodes.iter().zip(&self.items) {
            let prompt = match &node.kind {
                NodeKind::Approval(approval) => approval.prompt.expressions().collect(),
                _ => Vec::new(),
            };
            let read = [
                ("for_each", node.for_each.as_ref().map(|f| &f.items)),
                ("input", node.input.as_ref()),
            ]
            .into_iter()
            .chain(prompt.into_iter().map(|e| ("approval.prompt", Some(e))));
            for (key, expression) in read {
                if let Some(unknown) = expression
                    .iter()
                    .flat_map(|e| e.nodes())
                    .find(|n| !self.seen.contains_key(n.as_str()))
                {
                    let known = list(self.nodes.iter().map(|n| n.id.as_str()));
                    return Err(invalid(
                        item,
                        format!(
                            "`{key}` reads `outputs.{unknown}`, but there is no node `{unknown}` (known: {known})"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// What a step or node runs: exactly one of `agent`, `command`,
/// `call_workflow` and `approval`.
fn kind(
    item: &str,
    agent: Option<String>,
    call_workflow: Option<String>,
    command: Option<Shorthand<RawCommand>>,
    approval: Option<Shorthand<RawApproval>>,
) -> Result<NodeKind, WorkflowError> {
    match (agent, call_workflow, command, approval) {
        (Some(agent), None, None, None) => Ok(NodeKind::Agent { agent }),
        (None, Some(workflow), None, None) if !workflow.trim().is_empty() => {
            Ok(NodeKind::CallWorkflow {
                workflow,
                resolved: None,
            })
        }
        (None, Some(_), None, None) => {
            Err(invalid(item, "`call_workflow` must name a workflow file"))
        }
        (None, None, Some(Shorthand(raw)), None) => lower_command(item, raw).map(NodeKind::Command),
        (None, None, None, Some(Shorthand(raw))) => {
            lower_approval(item, raw).map(NodeKind::Approval)
        }
        (None, None, None, None) => Err(invalid(
            item,
            "missing `agent` (or `command`, `call_workflow`, `approval`): what does this step do?",
        )),
        _ => Err(invalid(
            item,
            "give only one of `agent`, `command`, `call_workflow` and `approval`: a node does one thing",
        )),
    }
}

/// Why `key` cannot be set on a node of `kind`, if it cannot: a setting that
/// would do nothing is refused rather than silently ignored.
fn unsupported(kind: &NodeKind, key: &str) -> Option<&'static str> {
    match (kind, key) {
        (NodeKind::Agent { .. }, _) => None,
        (NodeKind::Command(_), "input" | "for_each") => {
            Some("has no effect on a `command` node: its script does not read the node's input")
        }
        (NodeKind::Command(_), "retry") => Some(
            "has no effect on a `command` node: only transient failures of a provider are retried, and a command's exit code is not one",
        ),
        (NodeKind::Command(_), "budget") => Some(
            "has no effect on a `command` node: it uses no tokens, cost or turns; bound its time with `command.timeout`",
        ),
        (NodeKind::CallWorkflow { .. }, "for_each") => Some(
            "is not supported on a `call_workflow` node; give the child workflow a `for_each` node instead",
        ),
        (NodeKind::Approval(_), "retry" | "budget") => Some(
            "has no effect on an `approval` node: it calls nothing; bound its wait with `approval.timeout`",
        ),
        (NodeKind::CallWorkflow { .. }, "retry" | "budget") => Some(
            "is not supported on a `call_workflow` node; set it on the child workflow's nodes or at its top level",
        ),
        _ => None,
    }
}

fn lower_command(item: &str, raw: RawCommand) -> Result<CommandDef, WorkflowError> {
    if raw.run.trim().is_empty() {
        return Err(invalid(item, "`command.run` must not be empty"));
    }
    if raw.run.contains('\0') {
        return Err(invalid(
            item,
            "`command.run` holds a NUL byte, which no command line can carry",
        ));
    }
    if let Some(dir) = raw.workdir.as_deref() {
        check_workdir(item, "command.", dir, raw.allow_outside_project)?;
    }
    for (name, value) in &raw.env {
        let is_name = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !is_name {
            return Err(invalid(
                item,
                format!(
                    "`command.env`: `{}` is not a variable name (letters, digits, `_`, not starting with a digit)",
                    name.escape_debug()
                ),
            ));
        }
        if value.contains('\0') {
            return Err(invalid(
                item,
                format!("`command.env.{name}` holds a NUL byte, which no environment can carry"),
            ));
        }
    }
    Ok(CommandDef {
        run: raw.run,
        timeout: raw.timeout,
        workdir: raw.workdir,
        allow_outside_project: raw.allow_outside_project,
        env: raw.env,
        policy: Policy {
            continue_on_error: raw.continue_on_error,
        },
    })
}

/// Compiles `input:` or `for_each:`; `item` and `index` are only bound
/// while a `for_each` runs, and never while its own list is computed.
fn expression(
    item: &str,
    key: &str,
    src: &str,
    per_item: bool,
) -> Result<Expression, WorkflowError> {
    let expression = Expression::compile(src)
        .map_err(|e| invalid(item, format!("`{key}` does not compile: {e}")))?;
    if let Some(var) = expression
        .variables()
        .iter()
        .find(|v| !per_item && matches!(v.as_str(), "item" | "index"))
    {
        let why = if key == "for_each" {
            "but the list of items cannot depend on an item; compute it from `input`, `outputs` or `loops`"
        } else {
            "which is set only for a node with `for_each`"
        };
        return Err(invalid(item, format!("`{key}` reads `{var}`, {why}")));
    }
    Ok(expression)
}

fn lower_for_each(item: &str, raw: RawForEach) -> Result<ForEach, WorkflowError> {
    Ok(ForEach {
        items: expression(item, "for_each", &raw.items, false)?,
        max_concurrency: raw
            .max_concurrency
            .map(|n| concurrency(item, "`for_each.max_concurrency`", n))
            .transpose()?
            .unwrap_or(ForEach::DEFAULT_CONCURRENCY),
    })
}

/// A concurrency limit from 1 to [`MAX_CONCURRENCY`].
pub(super) fn concurrency(item: &str, field: &str, n: u32) -> Result<u32, WorkflowError> {
    if (1..=MAX_CONCURRENCY).contains(&n) {
        Ok(n)
    } else {
        Err(invalid(
            item,
            format!("{field} must be between 1 and {MAX_CONCURRENCY}, not {n}"),
        ))
    }
}

fn lower_retry(item: &str, raw: RawRetry) -> Result<Retry, WorkflowError> {
    let default = Retry::default();
    let max_attempts = raw.max_attempts.unwrap_or(default.max_attempts);
    if !(1..=MAX_ATTEMPTS).contains(&max_attempts) {
        return Err(invalid(
            item,
            format!(
                "`retry.max_attempts` must be between 1 and {MAX_ATTEMPTS}, not {max_attempts}"
            ),
        ));
    }
    let duration = |raw: &Option<RawDuration>, field: &str| {
        raw.as_ref()
            .map(|d| d.resolve(field).map(|t| t.0))
            .transpose()
            .map_err(|e| invalid(item, e))
    };
    let backoff = duration(&raw.backoff, "retry.backoff")?.unwrap_or(default.backoff);
    let max_backoff = duration(&raw.max_backoff, "retry.max_backoff")?;
    if let Some(max) = max_backoff.filter(|max| *max < backoff) {
        return Err(invalid(
            item,
            format!(
                "`retry.max_backoff` ({}) must not be shorter than `retry.backoff` ({})",
                humantime::format_duration(max),
                humantime::format_duration(backoff)
            ),
        ));
    }
    Ok(Retry {
        max_attempts,
        backoff,
        // A longer first wait than the default cap raises the cap with it.
        max_backoff: max_backoff.unwrap_or(default.max_backoff.max(backoff)),
    })
}

/// A budget whose limits are all more than 0; `prefix` is how its fields
/// are named in messages (`budget.` on a node, nothing at the top level).
pub(super) fn lower_budget(
    item: &str,
    prefix: &str,
    raw: RawBudget,
) -> Result<Budget, WorkflowError> {
    for (field, value) in [("tokens", raw.tokens), ("turns", raw.turns)] {
        if value == Some(0) {
            return Err(invalid(
                item,
                format!("`{prefix}{field}` must be at least 1"),
            ));
        }
    }
    if let Some(cost) = raw.cost_usd.filter(|c| !(c.is_finite() && *c > 0.0)) {
        return Err(invalid(
            item,
            format!("`{prefix}cost_usd` must be more than 0 US dollars, not {cost}"),
        ));
    }
    let deadline = raw
        .deadline
        .as_ref()
        .map(|d| d.resolve(&format!("{prefix}deadline")))
        .transpose()
        .map_err(|e| invalid(item, e))?;
    Ok(Budget {
        tokens: raw.tokens,
        cost_usd: raw.cost_usd,
        turns: raw.turns,
        deadline,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::time::Duration;

    use super::super::{Join, NodeKind, Retry, Timeout, WorkflowDef};
    use super::ForEach;

    /// A workflow with agent `a` and the graph `body`.
    fn wf(body: &str) -> String {
        format!("name: t\nagents: {{a: {{provider: mock}}}}\n{body}")
    }

    /// The nodes `nodes` (YAML flow items), the first also an entry.
    fn graph(nodes: &str) -> String {
        wf(&format!("nodes: [{nodes}]\n"))
    }

    fn load(src: &str) -> WorkflowDef {
        WorkflowDef::from_yaml(src).unwrap_or_else(|e| panic!("{e}\n--- yaml:\n{src}"))
    }

    fn check_err(src: &str, expected: &str) {
        let err = WorkflowDef::from_yaml(src).expect_err(src).to_string();
        assert!(
            err.contains(expected),
            "expected `{expected}` in: {err}\n--- yaml:\n{src}"
        );
    }

    #[test]
    fn command_nodes_take_a_script_or_a_mapping() {
        let def = load(
            "name: build\nnodes:\n  - {id: build, command: make all}\n  - id: test\n    command:\n      run: make test\n      timeout: 10m\n      workdir: sub\n      env: {RUST_LOG: debug}\n      continue_on_error: true\nedges: [{from: build, to: test}]\n",
        );
        assert!(
            def.agents.is_empty(),
            "a workflow of commands needs no agents"
        );
        let NodeKind::Command(build) = &def.nodes[0].kind else {
            panic!("{:?}", def.nodes[0].kind)
        };
        assert_eq!(build.run, "make all");
        assert_eq!((build.timeout, build.workdir.as_deref()), (None, None));
        assert!(!def.continues_on_error(&def.nodes[0]));
        let NodeKind::Command(test) = &def.nodes[1].kind else {
            panic!("{:?}", def.nodes[1].kind)
        };
        assert_eq!(test.timeout, Some(Timeout(Duration::from_secs(600))));
        assert_eq!(test.workdir.as_deref(), Some("sub"));
        assert_eq!(test.env["RUST_LOG"], "debug");
        assert!(def.continues_on_error(&def.nodes[1]));
        assert!(def.agent_of(&def.nodes[1]).is_none());

        let steps = load(&wf(
            "steps: [{agent: a}, {id: check, command: 'test -n \"$HOME\"'}]\n",
        ));
        assert!(
            matches!(&steps.nodes[1].kind, NodeKind::Command(c) if c.run == "test -n \"$HOME\"")
        );
        let json = WorkflowDef::from_json(
            r#"{"name": "t", "nodes": [{"id": "x", "command": "true"}, {"id": "y", "command": {"run": "false"}}], "edges": [{"from": "x", "to": "y"}]}"#,
        )
        .unwrap();
        assert_eq!(json.nodes.len(), 2);
    }

    #[test]
    fn command_nodes_are_checked_field_by_field() {
        check_err(
            &wf("steps: [{agent: a}, {command: make}]\n"),
            "steps[1]: a `command` step needs an `id`",
        );
        check_err(
            &graph("{id: x, agent: a, command: make}"),
            "nodes[0] (id `x`): give only one of `agent`, `command`, `call_workflow` and `approval`",
        );
        check_err(
            &graph("{id: x, call_workflow: c.yaml, command: make}"),
            "give only one of",
        );
        check_err(
            &graph("{id: x, command: ' '}"),
            "nodes[0] (id `x`): `command.run` must not be empty",
        );
        check_err(
            &graph("{id: x, command: {timeout: 5s}}"),
            "missing field `run`",
        );
        check_err(
            &graph("{id: x, command: {run: make, tmeout: 5s}}"),
            "unknown field `tmeout`, expected one of `run`, `timeout`",
        );
        check_err(
            &graph("{id: x, command: [make]}"),
            "expected a script, or a mapping `{run: SCRIPT",
        );
        check_err(
            &graph("{id: x, command: {run: make, timeout: 0}}"),
            "`timeout` must be more than 0 s",
        );
        check_err(
            &graph("{id: x, command: {run: make, workdir: ../up}}"),
            "nodes[0] (id `x`): `command.workdir`: `../up` leaves the project directory through `..`; set `command.allow_outside_project: true` to allow it",
        );
        check_err(
            &graph("{id: x, command: {run: make, workdir: /}}"),
            "`/` is the whole file system",
        );
        load(&graph(
            "{id: x, command: {run: make, workdir: ../up, allow_outside_project: true}}",
        ));
        check_err(
            &graph("{id: x, command: {run: make, env: {'A=B': x}}}"),
            "nodes[0] (id `x`): `command.env`: `A=B` is not a variable name",
        );
        check_err(
            &graph("{id: x, command: {run: make, env: {A: \"a\\0b\"}}}"),
            "`command.env.A` holds a NUL byte",
        );
        check_err(
            &graph("{id: x, command: \"a\\0b\"}"),
            "`command.run` holds a NUL byte",
        );
        check_err(
            "name: t\nagents: {}\nsteps: [{agent: a}]\n",
            "agents: at least one agent is required",
        );
    }

    #[test]
    fn input_expressions_compile_and_read_known_nodes() {
        let def = load(&wf(
            "nodes: [{id: x, agent: a}, {id: y, agent: a, input: '{\"draft\": outputs.x, \"round\": loops.again, \"task\": input}'}]\nedges: [{from: x, to: y}, {from: y, to: x, id: again, max_iterations: 2}]\n",
        ));
        assert_eq!(def.nodes[0].input, None);
        let input = def.nodes[1].input.as_ref().unwrap();
        assert_eq!(input.nodes(), ["x"]);
        let vars = serde_json::json!({"outputs": {"x": "d"}, "loops": {"again": 1}, "input": "t"});
        assert_eq!(
            input.evaluate(vars.as_object().unwrap()).unwrap(),
            serde_json::json!({"draft": "d", "round": 1, "task": "t"})
        );
        load(&graph("{id: x, agent: a, input: 'outputs.x'}"));
        check_err(
            &graph("{id: x, agent: a, input: 'input.'}"),
            "nodes[0] (id `x`): `input` does not compile: `input.` is not a valid CEL expression",
        );
        check_err(
            &graph("{id: x, agent: a, input: 'output'}"),
            "`input` does not compile: `output` reads `output`, which is not a variable (it may read `input`, `outputs`, `loops`, `item`, `index`)",
        );
        check_err(
            &graph("{id: x, agent: a}, {id: y, agent: a, input: 'outputs.z'}"),
            "nodes[1] (id `y`): `input` reads `outputs.z`, but there is no node `z` (known: x, y)",
        );
        check_err(
            &graph("{id: x, agent: a, input: '[item, input]'}"),
            "nodes[0] (id `x`): `input` reads `item`, which is set only for a node with `for_each`",
        );
        check_err(
            &wf("steps: [{agent: a, input: 'index + 1'}]\n"),
            "steps[0]: `input` reads `index`",
        );
        load(&wf(
            "steps: [{agent: a, input: 'input.map(item, item.name)'}]\n",
        ));
    }

    #[test]
    fn for_each_takes_a_list_expression_and_a_limit() {
        let def = load(&wf(
            "input: {topics: [a, b]}\nsteps:\n  - {agent: a, for_each: input.topics, input: '{\"topic\": item, \"n\": index}'}\n  - {agent: a, id: b, for_each: {items: 'outputs.a', max_concurrency: 2}}\n",
        ));
        let first = def.nodes[0].for_each.as_ref().unwrap();
        assert_eq!(
            (first.items.source(), first.max_concurrency),
            ("input.topics", ForEach::DEFAULT_CONCURRENCY)
        );
        let second = def.nodes[1].for_each.as_ref().unwrap();
        assert_eq!(
            (second.items.nodes(), second.max_concurrency),
            (&["a".to_owned()][..], 2)
        );
        load(&graph(
            "{id: x, agent: a, for_each: {items: '[1]', max_concurrency: 256}}",
        ));
        for n in [0, 257] {
            check_err(
                &graph(&format!(
                    "{{id: x, agent: a, for_each: {{items: '[1]', max_concurrency: {n}}}}}"
                )),
                &format!(
                    "nodes[0] (id `x`): `for_each.max_concurrency` must be between 1 and 256, not {n}"
                ),
            );
        }
        check_err(
            &graph("{id: x, agent: a, for_each: 'item.parts'}"),
            "nodes[0] (id `x`): `for_each` reads `item`, but the list of items cannot depend on an item",
        );
        check_err(
            &graph("{id: x, agent: a, for_each: 'input.'}"),
            "nodes[0] (id `x`): `for_each` does not compile",
        );
        check_err(
            &graph("{id: x, agent: a, for_each: 'outputs.nope'}"),
            "nodes[0] (id `x`): `for_each` reads `outputs.nope`, but there is no node `nope` (known: x)",
        );
        check_err(
            &graph("{id: x, agent: a, for_each: {item: input}}"),
            "unknown field `item`, expected `items` or `max_concurrency`",
        );
        check_err(
            &graph("{id: x, agent: a, for_each: 3}"),
            "expected a CEL expression, or a mapping",
        );
    }

    #[test]
    fn join_is_all_unless_any_and_only_on_nodes() {
        let def = load(&wf(
            "nodes: [{id: x, agent: a}, {id: y, agent: a}, {id: z, agent: a, join: any}, {id: w, agent: a, join: all}]\nedges: [{from: x, to: z}, {from: y, to: z}, {from: z, to: w}]\n",
        ));
        let joins: Vec<Join> = def.nodes.iter().map(|n| n.join).collect();
        assert_eq!(joins, [Join::All, Join::All, Join::Any, Join::All]);
        check_err(
            &graph("{id: x, agent: a, join: some}"),
            "nodes[0].join: unknown variant `some`, expected `all` or `any`",
        );
        check_err(
            &wf("steps: [{agent: a, join: any}]\n"),
            "steps[0]: unknown field `join`",
        );
    }

    #[test]
    fn retry_limits_attempts_and_waits() {
        let def = load(&graph(
            "{id: x, agent: a}, {id: y, agent: a, retry: {max_attempts: 5, backoff: 500ms, max_backoff: 4s}}, {id: z, agent: a, retry: {backoff: 1m}}",
        ));
        assert_eq!(def.nodes[0].retry, Retry::default());
        let y = def.nodes[1].retry;
        assert_eq!(
            (y.max_attempts, y.backoff, y.max_backoff),
            (5, Duration::from_millis(500), Duration::from_secs(4))
        );
        assert_eq!(y.wait_before(4), Duration::from_secs(2));
        assert_eq!(y.wait_before(5), Duration::from_secs(4));
        let z = def.nodes[2].retry;
        assert_eq!(
            (z.max_attempts, z.max_backoff),
            (3, Duration::from_secs(60)),
            "the cap rises with the first wait"
        );
        for n in [0, 101] {
            check_err(
                &graph(&format!(
                    "{{id: x, agent: a, retry: {{max_attempts: {n}}}}}"
                )),
                &format!(
                    "nodes[0] (id `x`): `retry.max_attempts` must be between 1 and 100, not {n}"
                ),
            );
        }
        check_err(
            &graph("{id: x, agent: a, retry: {backoff: 0}}"),
            "nodes[0] (id `x`): `retry.backoff` must be more than 0 s",
        );
        check_err(
            &graph("{id: x, agent: a, retry: {max_backoff: soon}}"),
            "nodes[0] (id `x`): bad `retry.max_backoff` `soon`",
        );
        check_err(
            &graph("{id: x, agent: a, retry: {backoff: 5s, max_backoff: 1s}}"),
            "nodes[0] (id `x`): `retry.max_backoff` (1s) must not be shorter than `retry.backoff` (5s)",
        );
        check_err(
            &graph("{id: x, agent: a, retry: {attempts: 2}}"),
            "unknown field `attempts`, expected one of `max_attempts`, `backoff`, `max_backoff`",
        );
    }

    #[test]
    fn budgets_of_nodes_and_runs_are_positive() {
        let def = load(&wf(
            "budget: {tokens: 100000, cost_usd: 0.5, turns: 40, deadline: 30m}\nmax_concurrency: 3\nsteps: [{agent: a, budget: {turns: 5}}]\n",
        ));
        assert_eq!(def.budget.tokens, Some(100_000));
        assert_eq!(def.budget.cost_usd, Some(0.5));
        assert_eq!(def.budget.turns, Some(40));
        assert_eq!(
            def.budget.deadline,
            Some(Timeout(Duration::from_secs(1800)))
        );
        assert_eq!(def.nodes[0].budget.turns, Some(5));
        assert_eq!(def.max_concurrency, 3);
        let plain = load(&wf("steps: [{agent: a}]\n"));
        assert!(plain.budget.is_unlimited() && plain.nodes[0].budget.is_unlimited());
        assert_eq!(plain.max_concurrency, WorkflowDef::DEFAULT_CONCURRENCY);

        let top = |b: &str| wf(&format!("budget: {{{b}}}\nsteps: [{{agent: a}}]\n"));
        check_err(&top("tokens: 0"), "budget: `tokens` must be at least 1");
        check_err(&top("turns: 0"), "budget: `turns` must be at least 1");
        check_err(
            &top("cost_usd: 0"),
            "budget: `cost_usd` must be more than 0 US dollars, not 0",
        );
        check_err(
            &top("cost_usd: .nan"),
            "`cost_usd` must be more than 0 US dollars, not NaN",
        );
        check_err(
            &top("deadline: 0s"),
            "budget: `deadline` must be more than 0 s",
        );
        check_err(
            &top("deadline: 8 days"),
            "budget: `deadline` must be at most 7 days",
        );
        check_err(
            &top("tokens: -1"),
            "budget.tokens: invalid type: integer `-1`, expected u64",
        );
        check_err(&top("dollars: 1"), "budget: unknown field `dollars`");
        check_err(
            &wf("steps: [{agent: a, budget: {cost_usd: -1}}]\n"),
            "steps[0]: `budget.cost_usd` must be more than 0 US dollars, not -1",
        );
        check_err(
            &wf("steps: [{agent: a, budget: {deadline: 1.5}}]\n"),
            "steps[0]: bad `budget.deadline` 1.5",
        );
        for n in [0, 257] {
            check_err(
                &wf(&format!("max_concurrency: {n}\nsteps: [{{agent: a}}]\n")),
                &format!("max_concurrency: `max_concurrency` must be between 1 and 256, not {n}"),
            );
        }
        load(&wf("max_concurrency: 256\nsteps: [{agent: a}]\n"));
    }

    #[test]
    fn workdirs_of_agents_and_commands_are_listed_for_the_loader() {
        let def = load(
            "name: t\nagents:\n  a: {provider: mock, workdir: /srv, allow_outside_project: true}\n  b: {provider: mock}\nnodes: [{id: x, agent: a}, {id: y, command: {run: make, workdir: /etc}}, {id: z, command: make}]\n",
        );
        let listed: Vec<(String, &str, &str, bool)> = def
            .workdirs()
            .into_iter()
            .map(|w| (w.owner, w.field, w.dir, w.allow_outside_project))
            .collect();
        assert_eq!(
            listed,
            [
                ("agents.a".to_owned(), "workdir", "/srv", true),
                ("node `y`".to_owned(), "command.workdir", "/etc", false)
            ]
        );
    }

    /// The `input:` and `for_each:` expressions of the examples yield what
    /// their agents are told to expect, on the data the run will hold.
    #[test]
    fn example_expressions_evaluate() {
        use serde_json::json;
        let for_each = load(include_str!("../../../../examples/for-each.yaml"));
        let run_input = for_each.input.clone().unwrap();
        let vars = |v: serde_json::Value| v.as_object().unwrap().clone();
        let review = &for_each.nodes[0];
        let items = review
            .for_each
            .as_ref()
            .unwrap()
            .items
            .evaluate(&vars(json!({"input": run_input})))
            .unwrap();
        assert_eq!(items.as_array().map(Vec::len), Some(3));
        let first = review
            .input
            .as_ref()
            .unwrap()
            .evaluate(&vars(
                json!({"input": run_input, "item": items[0], "index": 0}),
            ))
            .unwrap();
        assert_eq!(first["file"], "src/upload.rs");
        assert_eq!(
            (first["number"].as_i64(), first["of"].as_i64()),
            (Some(1), Some(3))
        );
        let summary = for_each.nodes[1].input.as_ref().unwrap();
        let reviews = json!([{"verdict": "approve", "note": "a"}]);
        let seen = summary
            .evaluate(&vars(
                json!({"input": run_input, "outputs": {"review": reviews}}),
            ))
            .unwrap();
        assert_eq!(seen["files"][2], "tests/upload.rs");
        assert_eq!(seen["reviews"], reviews);

        let build = load(include_str!("../../../../examples/build-and-test.yaml"));
        let report = build
            .node(&crate::ids::NodeId::new("report").unwrap())
            .unwrap();
        let done = |stdout: &str| json!({"exit_code": 0, "stdout": stdout, "stderr": ""});
        let outputs = json!({"unit-tests": done("3 passed\n"), "lint": done("0 warnings\n"), "docs-check": null});
        let seen = report
            .input
            .as_ref()
            .unwrap()
            .evaluate(&vars(json!({"outputs": outputs})))
            .unwrap();
        assert_eq!(
            seen,
            json!({"tests": "3 passed\n", "lint_exit_code": 0, "docs": "failed"})
        );
    }

    #[test]
    fn settings_a_node_kind_would_ignore_are_refused() {
        let cases = [
            (
                "command: make, input: input",
                "`input` has no effect on a `command` node",
            ),
            (
                "command: make, for_each: '[1]'",
                "`for_each` has no effect on a `command` node",
            ),
            (
                "command: make, retry: {max_attempts: 2}",
                "`retry` has no effect on a `command` node",
            ),
            (
                "command: make, budget: {deadline: 1m}",
                "`budget` has no effect on a `command` node",
            ),
            (
                "call_workflow: c.yaml, for_each: '[1]'",
                "`for_each` is not supported on a `call_workflow` node",
            ),
            (
                "call_workflow: c.yaml, retry: {}",
                "`retry` is not supported on a `call_workflow` node",
            ),
            (
                "call_workflow: c.yaml, budget: {}",
                "`budget` is not supported on a `call_workflow` node",
            ),
        ];
        for (keys, expected) in cases {
            check_err(
                &graph(&format!("{{id: x, {keys}}}")),
                &format!("nodes[0] (id `x`): {expected}"),
            );
        }
        let fine = load(&graph(
            "{id: x, command: make, join: any}, {id: y, call_workflow: c.yaml, input: 'outputs.x', join: any}",
        ));
        assert!(fine.nodes[1].input.is_some());
    }
}

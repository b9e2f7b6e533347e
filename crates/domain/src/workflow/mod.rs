//! Workflow definitions: what a user writes, checked before anything runs.
//!
//! A [`WorkflowDef`] is only ever built by [`WorkflowDef::from_yaml`] /
//! [`WorkflowDef::from_json`], which parse *and* validate, so a value of this
//! type is a graph the runner can execute: every node runs a known agent, a
//! command or another workflow file, only with settings that apply to it,
//! every edge joins known nodes, every cycle is broken by a loop limit, every
//! condition compiles and every output schema is a valid JSON Schema.
//! `steps:` (a list) is sugar for a chain and is lowered to nodes and edges here.

mod agents;
mod approval;
mod duration;
mod grant;
mod graph;
mod invalid;
mod mcp;
mod nodes;
mod parse;
mod provider;
mod reach;
mod syntax;
mod workdir;

pub use approval::{ApprovalDef, OnTimeout, Template, check_answer};
pub use duration::Timeout;
pub use grant::{NetTarget, ToolGrant};
pub use graph::LoopBody;
pub use mcp::{
    DEFAULT_STARTUP_TIMEOUT, DEFAULT_TOOL_TIMEOUT, MCP_PREFIX, McpGrant, McpServerDef,
    McpTransport, mcp_tool_name,
};
pub use provider::Provider;
pub use reach::HostReach;
pub use workdir::{Workdir, workdir_outside};

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::condition::{Condition, Expression};
use crate::ids::NodeId;
use crate::pricing::PriceTable;

/// A validated workflow.
#[derive(Debug, Clone)]
pub struct WorkflowDef {
    /// Human name; shown in `awr runs` and recorded in every snapshot.
    pub name: String,
    /// Optional free text.
    pub description: Option<String>,
    /// Input used when the caller gives none.
    pub input: Option<Value>,
    /// Agents by name.
    pub agents: BTreeMap<String, AgentDef>,
    /// Nodes in the order they were written (the runner's tie-break order).
    pub nodes: Vec<NodeDef>,
    /// Edges in the order they were written.
    pub edges: Vec<EdgeDef>,
    /// Prices of models this workflow uses, over the built-in table
    /// ([`crate::pricing`]), so `totalCostUsd` can be computed.
    pub pricing: PriceTable,
    /// `sha256:<hex>` of the source text, so a snapshot names exactly what it ran.
    pub hash: String,
    /// The source text exactly as read (what `hash` hashes): stored with
    /// the workflow's runs ([`crate::definition`]) so they continue from
    /// what they started with, whatever becomes of the file.
    pub text: std::sync::Arc<str>,
    /// Limits of the whole run (`budget:`).
    pub budget: Budget,
    /// Node runs in flight at once in one run (`max_concurrency:`, default
    /// [`WorkflowDef::DEFAULT_CONCURRENCY`]).
    pub max_concurrency: u32,
    /// MCP servers whose tools its agents may be granted (`mcp_servers:`).
    pub mcp_servers: BTreeMap<String, McpServerDef>,
    /// Incoming/outgoing edges per node, derived from `nodes` and `edges`.
    links: graph::Links,
}

/// One agent: who it is (system prompt), what it runs on, what it may do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentDef {
    /// Which provider runs the agent.
    pub provider: Provider,
    /// Model name passed to the provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The agent's role and instructions; the only context it gets besides its input.
    #[serde(default)]
    pub system_prompt: String,
    /// Tools granted to the agent, each with the settings of its grant.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolGrant>,
    /// Upper bound on model turns in one invocation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u32>,
    /// When set, the final text must be JSON valid against this schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// What a failure of this agent does to the run.
    #[serde(default)]
    pub policy: Policy,
    /// `mock` provider: directory of fixture files (`<node-id>.json`),
    /// relative to the workflow file. Default: `fixtures/<workflow name>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fixtures: Option<String>,
    /// CLI providers: the executable to run (default: the CLI's name on `PATH`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executable: Option<String>,
    /// CLI providers: extra arguments, after the ones awr passes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// CLI providers: extra environment variables (awr's own are inherited).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Give up on (and kill) a call that takes longer than this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Timeout>,
    /// The working directory: where a CLI runs (CLIs keep their sessions
    /// per directory, so a resume must use the same), and the workspace the
    /// file tools of an HTTP agent are confined to. Default: awr's own, the
    /// project directory; it must lie inside that unless
    /// `allow_outside_project` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    /// Lets `workdir` be `/`, an absolute path outside the project directory,
    /// or a path that leaves it through `..`. Off by default: an agent runs
    /// tools, and its directory is what they reach first.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_outside_project: bool,
    /// HTTP providers: the API's base URL (default: the provider's public
    /// endpoint), e.g. `http://127.0.0.1:8080/v1` for a local server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// HTTP providers: the *name* of the environment variable that holds the
    /// API key (default `OPENAI_API_KEY` / `ANTHROPIC_API_KEY`). The key
    /// itself is never written in a workflow, an event or a log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// HTTP providers: sampling temperature (0 to 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// HTTP providers: the most tokens one model turn may produce.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// `anthropic`: tokens the model may spend thinking before it answers
    /// (extended thinking; at least 1024 and below `max_tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking_budget: Option<u32>,
    /// HTTP providers: attempts after the first for a transient failure
    /// (429, 5xx, a dropped connection) before the node fails. Default 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<u32>,
}

impl AgentDef {
    /// The environment variable an HTTP agent's API key is read from:
    /// `api_key_env`, else the provider's usual one.
    pub fn key_env(&self) -> Option<&str> {
        self.api_key_env
            .as_deref()
            .or_else(|| self.provider.default_key_env())
    }

    /// The names of the tools granted, in the order written.
    pub fn tool_names(&self) -> impl Iterator<Item = &str> {
        self.tools.iter().map(|grant| grant.name.as_str())
    }

    /// An agent of `provider` with every other setting at its default.
    pub fn new(provider: Provider) -> Self {
        Self {
            provider,
            model: None,
            system_prompt: String::new(),
            tools: Vec::new(),
            max_turns: None,
            output_schema: None,
            policy: Policy::default(),
            fixtures: None,
            executable: None,
            args: Vec::new(),
            env: BTreeMap::new(),
            timeout: None,
            workdir: None,
            allow_outside_project: false,
            base_url: None,
            api_key_env: None,
            temperature: None,
            max_tokens: None,
            thinking_budget: None,
            max_retries: None,
        }
    }
}

/// Failure policy of an agent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// A failure marks the node failed but the run goes on; the node's output is `null`.
    #[serde(default)]
    pub continue_on_error: bool,
}

/// A node of the graph.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeDef {
    /// Unique within the workflow.
    pub id: NodeId,
    /// What the node does.
    pub kind: NodeKind,
    /// `input:`, a CEL expression whose value becomes the node's input data
    /// (instead of the data of the edges that fired into it). It reads
    /// `input` (the run input), `outputs` (data of finished nodes), `loops`
    /// (loop counters by edge id) and, under `for_each`, `item` and `index`.
    pub input: Option<Expression>,
    /// `for_each:`: run the node once per item of a list.
    pub for_each: Option<ForEach>,
    /// When a node with several incoming edges may start.
    pub join: Join,
    /// Attempts for a transient failure (rate limit, network, 5xx).
    pub retry: Retry,
    /// Limits of this node's own runs (all its attempts and items together).
    pub budget: Budget,
}

impl NodeDef {
    /// A node of `kind` with every other setting at its default.
    pub fn new(id: NodeId, kind: NodeKind) -> Self {
        Self {
            id,
            kind,
            input: None,
            for_each: None,
            join: Join::default(),
            retry: Retry::default(),
            budget: Budget::default(),
        }
    }
}

/// `for_each:` of a node: one node run per item of the list `items`
/// evaluates to, at most `max_concurrency` at a time; the node's output
/// data is the list of the items' output data, in item order.
#[derive(Debug, Clone, PartialEq)]
pub struct ForEach {
    /// CEL over `input`, `outputs` and `loops`; must yield a list.
    pub items: Expression,
    /// Item runs in flight at once (default [`ForEach::DEFAULT_CONCURRENCY`]).
    pub max_concurrency: u32,
}

impl ForEach {
    /// Item runs in flight at once when the workflow does not say.
    pub const DEFAULT_CONCURRENCY: u32 = 4;
}

/// When a node with several forward incoming edges may start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Join {
    /// Once every incoming edge is decided, if at least one fired (default):
    /// the node sees the data of every branch that fired.
    #[default]
    All,
    /// As soon as one incoming edge fires; the edges decided later are
    /// ignored for this pass.
    Any,
}

/// Retries of a node run whose failure is transient.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    /// Attempts in all, the first included (1: no retry).
    pub max_attempts: u32,
    /// Wait before the second attempt; doubled for each one after.
    pub backoff: std::time::Duration,
    /// Longest wait between two attempts.
    pub max_backoff: std::time::Duration,
}

impl Default for Retry {
    /// Three attempts, waiting 1 s then 2 s (at most 30 s).
    fn default() -> Self {
        Self {
            max_attempts: 3,
            backoff: std::time::Duration::from_secs(1),
            max_backoff: std::time::Duration::from_secs(30),
        }
    }
}

impl Retry {
    /// The wait before attempt `attempt` (2 for the first retry).
    pub fn wait_before(&self, attempt: u32) -> std::time::Duration {
        let doublings = attempt.saturating_sub(2).min(31);
        self.backoff
            .saturating_mul(1u32 << doublings)
            .min(self.max_backoff)
    }
}

/// Limits of a run (`budget:` at the top level) or of one node's runs.
/// Crossing one writes `budget:exceeded` and fails the run.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Budget {
    /// Input plus output tokens.
    pub tokens: Option<u64>,
    /// Cost in US dollars (`totalCostUsd` as reported or priced).
    pub cost_usd: Option<f64>,
    /// Model turns (`numTurns` of each agent run).
    pub turns: Option<u64>,
    /// Wall-clock time from the start of the run (or of the node's first run).
    pub deadline: Option<Timeout>,
}

impl Budget {
    /// Whether no limit is set.
    pub fn is_unlimited(&self) -> bool {
        *self == Budget::default()
    }
}

/// A `command` node: a shell step.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandDef {
    /// The script, run by `sh -c` in its own process group.
    pub run: String,
    /// Give up on (and kill the group of) a command that runs longer.
    pub timeout: Option<Timeout>,
    /// Where it runs (as an agent's `workdir`, same rules).
    pub workdir: Option<String>,
    /// Lets `workdir` leave the project directory.
    pub allow_outside_project: bool,
    /// Extra environment variables.
    pub env: BTreeMap<String, String>,
    /// What a failure (non-zero exit, timeout) does to the run.
    pub policy: Policy,
}

/// What a node does: exactly one of `agent`, `command`, `call_workflow`.
#[derive(Debug, Clone)]
pub enum NodeKind {
    /// Runs the named agent.
    Agent {
        /// Key into [`WorkflowDef::agents`].
        agent: String,
    },
    /// Runs a shell command; its output data is `{exit_code, stdout, stderr}`.
    Command(CommandDef),
    /// Waits for a person's answer (docs/approvals.md); its output data is
    /// the answer.
    Approval(ApprovalDef),
    /// Runs another workflow as a child run of its own; its output becomes
    /// this node's output.
    CallWorkflow {
        /// The workflow file, as written (relative to this workflow's file).
        workflow: String,
        /// The child's definition, once the caller has loaded it: the domain
        /// reads no files, so whoever loads workflows resolves these (and
        /// refuses cycles) before the run starts.
        resolved: Option<std::sync::Arc<WorkflowDef>>,
    },
}

impl PartialEq for NodeKind {
    /// Compares what was written; a resolved child is derived from it.
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Agent { agent: a }, Self::Agent { agent: b }) => a == b,
            (Self::CallWorkflow { workflow: a, .. }, Self::CallWorkflow { workflow: b, .. }) => {
                a == b
            }
            (Self::Command(a), Self::Command(b)) => a == b,
            (Self::Approval(a), Self::Approval(b)) => a == b,
            _ => false,
        }
    }
}

/// A directed edge. An edge with `max_iterations` is a loop edge: it may point
/// backwards and close a cycle, and fires at most that many times per run.
#[derive(Debug, Clone)]
pub struct EdgeDef {
    /// `from->to` unless given explicitly; unique within the workflow.
    pub id: String,
    /// Source node.
    pub from: NodeId,
    /// Target node.
    pub to: NodeId,
    /// Fires only when this evaluates to true (absent: always).
    pub when: Option<Condition>,
    /// Loop limit; `Some` makes this a loop edge.
    pub max_iterations: Option<u32>,
    /// What a loop edge does when its condition still holds at its limit.
    pub on_limit: OnLimit,
}

/// What a loop edge does when it would fire once more than `max_iterations`
/// allows. A loop that never converged is usually a failure, so that is the
/// default; `continue` goes on to the source node's other edges.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnLimit {
    /// The run fails, naming the edge and its limit.
    #[default]
    Fail,
    /// The loop edge is skipped and the run goes on.
    Continue,
}

impl EdgeDef {
    /// Whether this edge may close a cycle.
    pub fn is_loop(&self) -> bool {
        self.max_iterations.is_some()
    }
}

/// Why a workflow file was refused. Every variant names what to fix.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum WorkflowError {
    /// The file holds nothing.
    #[error("workflow file is empty")]
    Empty,
    /// YAML/JSON syntax, a missing field or a wrong type, where the parser knows the place.
    #[error("{}{message}", location_prefix(*.line, *.column))]
    Parse {
        /// 1-based line, when known.
        line: Option<usize>,
        /// 1-based column, when known.
        column: Option<usize>,
        /// What the parser said, with the field path when known.
        message: String,
    },
    /// A rule of the graph is broken; `item` names the offending piece
    /// (`agents.writer`, `nodes[2]`, `edges[0] (a->b)`, ...).
    #[error("{item}: {message}")]
    Invalid {
        /// The offending item.
        item: String,
        /// What is wrong with it.
        message: String,
    },
}

fn location_prefix(line: Option<usize>, column: Option<usize>) -> String {
    match (line, column) {
        (Some(l), Some(c)) => format!("{l}:{c}: "),
        (Some(l), None) => format!("{l}: "),
        _ => String::new(),
    }
}

impl WorkflowDef {
    /// Node runs in flight at once when the workflow does not say: enough
    /// for a fan-out of agents, few enough not to start dozens of CLIs.
    pub const DEFAULT_CONCURRENCY: u32 = 8;

    /// How deeply a run's input may nest arrays and objects
    /// ([`crate::output::MAX_DEPTH`]: what the log can keep and read back).
    pub const MAX_INPUT_DEPTH: usize = crate::output::MAX_DEPTH;

    /// A run's input given as JSON text (`awr run --input`), read as the
    /// file's `input:` is: a duplicate key is refused, where serde_json
    /// would keep the last one and the run see another value than was
    /// written.
    pub fn input_from_json(text: &str) -> Result<Value, serde_json::Error> {
        syntax::strict_json(text)
    }

    /// Refuses a run input nested deeper than [`Self::MAX_INPUT_DEPTH`].
    pub fn check_input(input: &Value) -> Result<(), String> {
        if crate::output::nests_deeper(input, Self::MAX_INPUT_DEPTH) {
            return Err(format!(
                "nests arrays and objects deeper than {} levels",
                Self::MAX_INPUT_DEPTH
            ));
        }
        Ok(())
    }

    /// The agent a node runs, if it is an agent node.
    pub fn agent_of(&self, node: &NodeDef) -> Option<(&str, &AgentDef)> {
        match &node.kind {
            NodeKind::Agent { agent } => self
                .agents
                .get_key_value(agent)
                .map(|(k, v)| (k.as_str(), v)),
            NodeKind::CallWorkflow { .. } | NodeKind::Command(_) | NodeKind::Approval(_) => None,
        }
    }

    /// Whether a failure of `node` lets the run go on (`continue_on_error`).
    pub fn continues_on_error(&self, node: &NodeDef) -> bool {
        match &node.kind {
            NodeKind::Command(command) => command.policy.continue_on_error,
            _ => self
                .agent_of(node)
                .is_some_and(|(_, agent)| agent.policy.continue_on_error),
        }
    }

    /// A node by id.
    pub fn node(&self, id: &NodeId) -> Option<&NodeDef> {
        self.position(id).and_then(|at| self.nodes.get(at))
    }

    /// Every `workdir` the workflow names, of agents and of command nodes.
    /// Loading refuses those that leave the project directory on their text
    /// alone (`/`, `..`); a loader that knows the project directory judges
    /// the rest with [`workdir_outside`] (an absolute path, a symlink).
    pub fn workdirs(&self) -> Vec<Workdir<'_>> {
        let agents = self.agents.iter().filter_map(|(name, agent)| {
            Some(Workdir {
                owner: format!("agents.{name}"),
                field: "workdir",
                dir: agent.workdir.as_deref()?,
                allow_outside_project: agent.allow_outside_project,
            })
        });
        let commands = self.nodes.iter().filter_map(|node| match &node.kind {
            NodeKind::Command(command) => Some(Workdir {
                owner: format!("node `{}`", node.id),
                field: "command.workdir",
                dir: command.workdir.as_deref()?,
                allow_outside_project: command.allow_outside_project,
            }),
            _ => None,
        });
        // A server has no `allow_outside_project`: its program runs where
        // the project is, or under it.
        let servers =
            self.mcp_servers
                .iter()
                .filter_map(|(name, server)| match &server.transport {
                    McpTransport::Stdio { cwd: Some(cwd), .. } => Some(Workdir {
                        owner: format!("mcp_servers.{name}"),
                        field: "cwd",
                        dir: cwd,
                        allow_outside_project: false,
                    }),
                    _ => None,
                });
        agents.chain(commands).chain(servers).collect()
    }
}

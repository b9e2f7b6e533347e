//! [`QueryFn`]: one agent invocation, whatever runs the agent.
//!
//! The runner hands over an isolated request (system prompt, prompt, limits)
//! and receives a stream of normalized [`AgentMessage`]s. Providers map their
//! native output into this shape; the runner turns it into `agent:*` events.

use async_trait::async_trait;
use domain::event::{ModelUsage, Usage};
use domain::workflow::{AgentDef, McpServerDef};
use domain::{ErrorKind, NodeId, NodeRunId, RunId, SessionId};
use futures::stream::BoxStream;
use serde_json::Value;
use std::collections::BTreeMap;

use super::{ChatMessage, RunTools};

/// The name under which a CLI agent is given awr's permission prompt
/// among its MCP servers (`AgentRequest::mcp_servers`), when its grants ask
/// a person: Claude Code asks its tool [`PERMISSION_TOOL`]
/// (`--permission-prompt-tool`) before a call it may not make unasked.
pub const PERMISSION_SERVER: &str = "awr-approvals";

/// The permission prompt's one tool.
pub const PERMISSION_TOOL: &str = "permission_prompt";

/// One invocation of one agent for one node execution.
#[derive(Debug, Clone)]
pub struct AgentRequest {
    /// The workflow run.
    pub run_id: RunId,
    /// Name of the workflow the node belongs to (a child run's own name).
    pub workflow: String,
    /// The node; the mock provider keys fixtures by it.
    pub node_id: NodeId,
    /// The node execution.
    pub node_run_id: NodeRunId,
    /// The agent's name in the workflow.
    pub agent_name: String,
    /// The agent's definition (provider settings included).
    pub agent: AgentDef,
    /// The rendered user prompt.
    pub prompt: String,
    /// Continue this provider session instead of starting a new one.
    pub resume: Option<SessionId>,
    /// Continue a copy of the `resume` session, leaving it as it was (a
    /// forked run's agent: the session is the parent run's), under
    /// `session_id`. Only for providers that fork sessions
    /// ([`Provider::forks_sessions`](domain::workflow::Provider::forks_sessions)).
    pub fork_session: bool,
    /// Start the new session under this id, already on record in
    /// `agent:start` (providers that take one: [`Provider::takes_session_id`](domain::workflow::Provider::takes_session_id)).
    pub session_id: Option<SessionId>,
    /// What the earlier invocations of the `resume` session recorded, from
    /// the run's log: a CLI that reports a resumed session's cumulative
    /// usage subtracts it, so `agent:complete` holds this invocation's own.
    pub session_usage: Usage,
    /// The conversation so far, rebuilt from the run's record, when an
    /// HTTP agent's node run continues (CLI agents continue their own
    /// session instead); `prompt` is the next user message. Empty for a
    /// new conversation.
    pub history: Vec<ChatMessage>,
    /// When `history` ends with a model turn whose calls have not all got
    /// a result (they waited for a person: `requires_approval`), those
    /// calls run before the model is asked again, and this one, which a
    /// person approved, runs without asking. `prompt` is then empty.
    pub approved_call: Option<String>,
    /// How many provider calls this node made earlier in the run (its
    /// earlier node runs and attempts), counted from the run's log, so it is
    /// the same in any process that continues the run: the mock provider
    /// serves the recorded call of this index.
    pub call_index: u32,
    /// The node run's position among the node's runs: its pass through
    /// the node and its `for_each` item (`"2"`, `"0#3"`), as `agent:start`
    /// records it. Scheduling does not change it, so the mock provider
    /// serves a recording by `(node, instance, instance_call)`.
    pub instance: String,
    /// How many provider calls this node run made before (across its
    /// attempts), from the run's log.
    pub instance_call: u32,
    /// The W3C trace context of this call's span (`00-TRACE-SPAN-01`),
    /// when the run's spans are exported live: a CLI agent gets it as
    /// `TRACEPARENT`, so spans of its own join the run's trace under the
    /// call.
    pub traceparent: Option<String>,
    /// Tools of the run the agent is granted besides the runtime's own
    /// (those of MCP servers), for a provider whose tools the runtime runs.
    pub run_tools: RunTools,
    /// The MCP servers the agent is granted tools of, by name, for a CLI
    /// agent, which starts them itself from its own configuration.
    pub mcp_servers: BTreeMap<String, McpServerDef>,
}

/// The end of a successful invocation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentResult {
    /// Final text.
    pub text: String,
    /// Token usage of this invocation.
    pub usage: Usage,
    /// Per-model usage, when reported.
    pub model_usage: Option<BTreeMap<String, ModelUsage>>,
    /// Cost, when the provider reports or we can compute it.
    pub total_cost_usd: Option<f64>,
    /// Provider-measured duration.
    pub duration_ms: Option<u64>,
    /// Model turns taken.
    pub num_turns: u32,
    /// Session id, if not announced earlier with [`AgentMessage::Session`].
    pub session_id: Option<SessionId>,
}

/// Normalized output of an agent, in the order it happened.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum AgentMessage {
    /// The provider session is known (becomes `agent:start`).
    Session {
        /// The id to resume with.
        session_id: SessionId,
        /// The model actually used.
        model: Option<String>,
    },
    /// The provider's process group started (CLI agents): its leader's pid
    /// and start time, recorded (`process:started`) so that a later process
    /// can kill the group if this one dies.
    Process {
        /// The leader's pid, also the group id.
        pid: u32,
        /// The leader's start time, in clock ticks since boot.
        start_time: u64,
    },
    /// Streamed thinking.
    ThinkingDelta {
        /// The chunk.
        content: String,
        /// Tokens in it.
        token_count: Option<u64>,
    },
    /// A whole thinking block.
    Thinking {
        /// The block.
        content: String,
        /// Tokens in it.
        token_count: Option<u64>,
        /// The provider's signature of the block, kept so it can be sent back.
        signature: Option<String>,
    },
    /// Streamed text.
    TextDelta {
        /// The chunk.
        content: String,
    },
    /// A whole text block.
    Text {
        /// The block.
        content: String,
    },
    /// The agent asked for a tool it runs itself (a CLI's `tool_use`),
    /// recorded where the agent produced it; becomes `agent:tool:use`. Its
    /// result, if one ever comes, follows as [`AgentMessage::Tool`] with the
    /// same id. A call that never gets a result stays a use alone.
    ToolUse {
        /// The provider's own id of the call (`None` when its line had none).
        id: Option<String>,
        /// Tool name.
        name: String,
        /// Full input.
        input: Value,
    },
    /// A tool the agent ran itself, with its result; becomes `agent:tool`.
    /// Follows its [`AgentMessage::ToolUse`] when the provider announced the
    /// call first; stands alone when the provider reports only the whole call.
    Tool {
        /// The provider's own id of the call, as in its `ToolUse`.
        id: Option<String>,
        /// Tool name.
        name: String,
        /// Full input.
        input: Value,
        /// Full output.
        output: Value,
        /// How long it took.
        duration_ms: Option<u64>,
        /// Set when the tool failed.
        error: Option<String>,
    },
    /// The runtime is about to run a tool the model asked for (HTTP
    /// providers, through the tool router); becomes `tool:started`.
    ToolStarted {
        /// The provider's id of the call.
        call_id: String,
        /// Tool name.
        name: String,
        /// The arguments as the model sent them.
        input: Value,
    },
    /// A tool the runtime ran returned or failed; becomes `tool:completed`
    /// or `tool:failed`. A failure goes back to the model, it ends nothing.
    ToolFinished {
        /// The call, as in [`AgentMessage::ToolStarted`].
        call_id: String,
        /// Tool name.
        name: String,
        /// The output, or why the call was refused or failed.
        output: Result<Value, String>,
        /// How long it ran.
        duration_ms: u64,
    },
    /// The provider rate-limited a call; the runtime waits, then retries.
    RateLimited {
        /// The provider (`openai`, `anthropic`).
        provider: String,
        /// The attempt that was refused (1 = the first).
        attempt: u32,
        /// How long the runtime waits before the next attempt.
        retry_after_ms: Option<u64>,
    },
    /// A non-fatal error the provider reported.
    Error {
        /// What kind of error (written as `rate_limit`, `error_max_turns`, ...).
        error_type: ErrorKind,
        /// Human-readable message.
        message: String,
        /// Raw provider data.
        details: Option<Value>,
    },
    /// Something odd but harmless in the provider's output.
    Warning {
        /// What happened.
        message: String,
        /// Raw data.
        details: Option<Value>,
    },
    /// The model's turn asked for `calls[0]`, of a tool granted with
    /// `requires_approval`: the turn waits for a person, with the calls
    /// after it (HTTP agents). Nothing follows; the invocation that comes
    /// after the answer runs them ([`AgentRequest::approved_call`]).
    ApprovalNeeded {
        /// The call asked about, then the turn's calls after it.
        calls: Vec<super::ToolCall>,
        /// What the model sent with each of them that awr does not map.
        extras: Vec<domain::event::Extra>,
    },
    /// The invocation succeeded; nothing follows.
    Completed(AgentResult),
    /// What the agent emitted with the message that comes next that the
    /// adapter does not map: each field of the line under its JSON Pointer
    /// there ([`domain::event::Extra`]). Sent just before that message
    /// (a text, thinking, tool use or tool, the session, the result), so
    /// a message needs no field of its own for it; the runtime keeps it in
    /// that message's event (`extra`). An adapter that maps everything
    /// never sends it.
    Extra(domain::event::Extra),
}

/// Why an invocation failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum QueryError {
    /// The agent reported an error of a kind (written `rate_limit`, ...).
    #[error("{error_type}: {message}")]
    Agent {
        /// What kind of error.
        error_type: ErrorKind,
        /// Human-readable message.
        message: String,
        /// Raw provider data.
        details: Option<Value>,
    },
    /// The provider is misconfigured or cannot run here (names the setting).
    #[error("provider configuration: {0}")]
    Config(String),
    /// A fixture is missing or malformed (names node, call index and file).
    #[error("fixture: {0}")]
    Fixture(String),
    /// A replayed call departed from its recording (another request, a
    /// call or turn too many), named field by field so the record keeps
    /// where and both values, not only a sentence.
    #[error("fixture: {0}")]
    Replay(Box<domain::recording::Mismatch>),
}

impl QueryError {
    /// What kind of error it is: whether it may pass, whether a session
    /// is gone, whether a recording refused.
    pub fn kind(&self) -> ErrorKind {
        match self {
            QueryError::Agent { error_type, .. } => error_type.clone(),
            QueryError::Config(_) => ErrorKind::Config,
            QueryError::Fixture(_) | QueryError::Replay(_) => ErrorKind::Fixture,
        }
    }
}

/// The stream an invocation produces.
pub type AgentStream = BoxStream<'static, Result<AgentMessage, QueryError>>;

/// Runs one agent invocation.
///
/// An agent of the program's own, serving the workflow's `mock` agents:
///
/// ```
/// # extern crate domain as awr_domain;
/// use std::sync::Arc;
///
/// use awr_application::ports::{AgentMessage, AgentRequest, AgentResult, AgentStream};
/// use awr_application::ports::{QueryError, QueryFn};
/// use awr_application::{RunRequest, Runtime};
/// use awr_domain::workflow::Provider;
/// use awr_domain::{RunStatus, WorkflowDef};
/// use awr_infrastructure::clock::{RandomIds, SystemClock};
/// use awr_infrastructure::store::MemoryRunStore;
///
/// /// Streams its answer in two pieces; refuses a prompt that asks for a secret.
/// struct Careful;
///
/// #[async_trait::async_trait]
/// impl QueryFn for Careful {
///     async fn query(&self, request: AgentRequest) -> Result<AgentStream, QueryError> {
///         if request.prompt.contains("secret") {
///             return Err(QueryError::Config("this agent keeps no secrets".into()));
///         }
///         let messages = [
///             AgentMessage::TextDelta { content: "all ".into() },
///             AgentMessage::TextDelta { content: "good".into() },
///             AgentMessage::Completed(AgentResult { text: "all good".into(), num_turns: 1, ..Default::default() }),
///         ];
///         Ok(Box::pin(futures::stream::iter(messages.map(Ok))))
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let runtime = Runtime::builder(Arc::new(MemoryRunStore::new()), Arc::new(SystemClock), Arc::new(RandomIds))
///     .provider(Provider::Mock, Arc::new(Careful))
///     .build();
/// let workflow = Arc::new(WorkflowDef::from_yaml("name: w\nagents: {a: {provider: mock}}\nsteps: [{agent: a}]\n")?);
/// let ask = |input: &str| RunRequest { workflow: workflow.clone(), input: input.into(), source: None, started_by: None };
///
/// let outcome = runtime.run(ask("the weather")).await?;
/// assert_eq!((outcome.status, outcome.output), (RunStatus::Completed, "all good".into()));
///
/// // The agent's failure is the run's (an `Ok` outcome), not the runtime's.
/// let outcome = runtime.run(ask("the secret")).await?;
/// assert_eq!(outcome.status, RunStatus::Failed);
/// assert!(outcome.error.as_deref().is_some_and(|e| e.contains("keeps no secrets")), "{:?}", outcome.error);
/// # Ok(())
/// # }
/// ```
#[cfg_attr(all(any(test, feature = "testing"), not(doctest)), mockall::automock)]
#[async_trait]
pub trait QueryFn: Send + Sync + 'static {
    /// Starts the invocation; errors before the first message are returned here.
    async fn query(&self, request: AgentRequest) -> Result<AgentStream, QueryError>;
}

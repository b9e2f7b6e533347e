//! [`ChatModel`]: one turn of a model behind an HTTP API.
//!
//! HTTP providers leave the tool loop to the runtime: the
//! [`crate::tool_loop::ToolLoop`] sends the conversation so far, the model
//! streams one turn back (text, thinking, tool calls), the loop runs the tools
//! and sends their results in the next turn. An adapter therefore knows only
//! its wire format: how to say this conversation to the API, and how to read
//! one streamed answer. Everything else — tools, retries, limits, events — is
//! the loop's, the same for every provider.

use std::time::Duration;

use async_trait::async_trait;
use domain::ErrorKind;
use domain::event::Usage;
use domain::workflow::AgentDef;
use futures::stream::BoxStream;
use serde_json::Value;

use super::ToolSpec;

/// One turn to ask of the model: the whole conversation so far.
#[derive(Debug, Clone)]
pub struct ChatRequest {
    /// The agent (model, `base_url`, `api_key_env`, `temperature`,
    /// `max_tokens`, `timeout`).
    pub agent: AgentDef,
    /// The system prompt (may be empty).
    pub system: String,
    /// The conversation, oldest first; it starts with a user message.
    pub messages: Vec<ChatMessage>,
    /// The tools the model may call.
    pub tools: Vec<ToolSpec>,
}

/// One message of the conversation.
#[derive(Debug, Clone, PartialEq)]
pub enum ChatMessage {
    /// What the user (the workflow) said.
    User(String),
    /// A previous turn of the model, as it streamed it.
    Assistant(Vec<ChatBlock>),
    /// The results of the tool calls of the previous turn, in call order.
    ToolResults(Vec<ToolResult>),
}

/// A piece of a model turn.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ChatBlock {
    /// Text.
    Text(String),
    /// Reasoning; the signature must go back verbatim with the next turn.
    Thinking {
        /// The reasoning text.
        text: String,
        /// The provider's signature of it.
        signature: Option<String>,
    },
    /// A tool call.
    ToolCall(ToolCall),
}

/// A tool call the model made, its arguments assembled from the stream.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The provider's call id; the result must name it.
    pub id: String,
    /// The tool.
    pub name: String,
    /// The arguments. When the model sent text that is not JSON, that text
    /// as a JSON string: the schema check then refuses it and says why.
    pub input: Value,
}

/// What a tool call returned, to send back to the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    /// The call it answers.
    pub call_id: String,
    /// The tool's name.
    pub name: String,
    /// The output (or the error message), as text for the model.
    pub content: String,
    /// Whether the call failed.
    pub is_error: bool,
}

impl ToolResult {
    /// The result `call` came to: its output as text (a JSON string as
    /// is, other values as JSON), or its error.
    pub fn of(call: &ToolCall, output: &Result<Value, String>) -> Self {
        Self {
            call_id: call.id.clone(),
            name: call.name.clone(),
            content: match output {
                Ok(Value::String(text)) => text.clone(),
                Ok(other) => other.to_string(),
                Err(error) => error.clone(),
            },
            is_error: output.is_err(),
        }
    }
}

/// Why the model stopped its turn.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StopReason {
    /// A final answer.
    EndTurn,
    /// It wants the tool calls of this turn run.
    ToolUse,
    /// It ran out of `max_tokens`.
    MaxTokens,
    /// Anything else the provider said (`content_filter`, `refusal`, ...).
    Other(String),
}

/// The end of a turn.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnEnd {
    /// Why it stopped.
    pub stop: StopReason,
    /// Tokens of this turn (zero when the stream carried none).
    pub usage: Usage,
    /// The model that answered, as the provider names it.
    pub model: Option<String>,
    /// The provider's id of the response (`msg_…`, `chatcmpl-…`).
    pub response_id: Option<String>,
}

/// What a streamed turn yields, in order; it ends with [`ChatEvent::End`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ChatEvent {
    /// A piece of text.
    TextDelta(String),
    /// A piece of reasoning.
    ThinkingDelta(String),
    /// A reasoning block ended, with its whole text and signature.
    ThinkingDone {
        /// The whole block.
        text: String,
        /// The provider's signature.
        signature: Option<String>,
    },
    /// A tool call, complete.
    ToolCall(ToolCall),
    /// Something the adapter does not know (an event, block or delta type
    /// of a newer API), kept whole so the record loses nothing.
    Unknown {
        /// What it is, for the record's warning.
        what: String,
        /// The raw data.
        raw: Value,
    },
    /// What the API sent with the event that comes next that the adapter
    /// does not map, by JSON Pointer in its chunk or body
    /// ([`AgentMessage::Extra`](super::AgentMessage::Extra)). No part of
    /// the conversation: never sent back to the model, never hashed.
    Extra(domain::event::Extra),
    /// The turn is over.
    End(TurnEnd),
}

/// Why a turn failed. Transient kinds may be retried by the loop, as long
/// as nothing of the turn was seen yet.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ChatError {
    /// HTTP 429 (or the provider's overload signal).
    #[error("rate limited: {message}")]
    RateLimited {
        /// The provider's message.
        message: String,
        /// How long the provider asked us to wait (`retry-after`).
        retry_after: Option<Duration>,
    },
    /// The connection failed, was reset, timed out or the stream was cut.
    #[error("network error: {0}")]
    Network(String),
    /// The provider answered with an error.
    #[error("{}", api_message(*.status, .message))]
    Api {
        /// HTTP status, if the error was not inside the stream.
        status: Option<u16>,
        /// The provider's message.
        message: String,
        /// Whether trying again may help (5xx, `overloaded_error`).
        retryable: bool,
    },
    /// The agent's settings cannot work (a missing API key, a bad URL).
    #[error("provider configuration: {0}")]
    Config(String),
    /// A recorded turn cannot answer this request (a replay that sends
    /// another conversation than the recording holds, or asks a turn too
    /// many): never retried, never answered with a guess.
    #[error("{0}")]
    Replay(String),
    /// A replayed turn departed from its recording, named field by field
    /// (see [`QueryError::Replay`](super::QueryError::Replay)).
    #[error("{0}")]
    Mismatch(Box<domain::recording::Mismatch>),
}

fn api_message(status: Option<u16>, message: &str) -> String {
    match status {
        Some(status) => format!("API error (HTTP {status}): {message}"),
        None => format!("API error: {message}"),
    }
}

impl ChatError {
    /// Whether the loop may try the turn again.
    pub fn is_transient(&self) -> bool {
        match self {
            ChatError::RateLimited { .. } | ChatError::Network(_) => true,
            ChatError::Api { retryable, .. } => *retryable,
            ChatError::Config(_) | ChatError::Replay(_) | ChatError::Mismatch(_) => false,
        }
    }

    /// What kind of error it is, as `agent:error` records it.
    pub fn kind(&self) -> ErrorKind {
        match self {
            ChatError::RateLimited { .. } => ErrorKind::RateLimit,
            ChatError::Network(_) => ErrorKind::Network,
            ChatError::Api { .. } => ErrorKind::Api,
            ChatError::Config(_) => ErrorKind::Config,
            ChatError::Replay(_) | ChatError::Mismatch(_) => ErrorKind::Fixture,
        }
    }
}

/// One streamed model turn.
pub type ChatStream = BoxStream<'static, Result<ChatEvent, ChatError>>;

/// A model behind an HTTP API, one turn at a time.
///
/// A model of the program's own, serving the workflow's `openai` agents
/// through the runtime's tool loop:
///
/// ```
/// # extern crate domain as awr_domain;
/// use std::sync::Arc;
///
/// use awr_application::ports::{ChatError, ChatEvent, ChatMessage, ChatModel, ChatRequest};
/// use awr_application::ports::{ChatStream, StopReason, TurnEnd};
/// use awr_application::{RunRequest, Runtime};
/// use awr_domain::workflow::Provider;
/// use awr_domain::{RunStatus, WorkflowDef};
/// use awr_infrastructure::clock::{RandomIds, SystemClock};
/// use awr_infrastructure::store::MemoryRunStore;
///
/// /// Says back what the user said last.
/// struct Parrot;
///
/// #[async_trait::async_trait]
/// impl ChatModel for Parrot {
///     fn provider(&self) -> &'static str {
///         "openai"
///     }
///     async fn turn(&self, request: ChatRequest) -> Result<ChatStream, ChatError> {
///         let Some(ChatMessage::User(said)) = request.messages.last() else {
///             return Err(ChatError::Config("nothing to answer".into()));
///         };
///         let end = TurnEnd { stop: StopReason::EndTurn, usage: Default::default(), model: None, response_id: None };
///         let events = [ChatEvent::TextDelta(format!("you said: {said}")), ChatEvent::End(end)];
///         Ok(Box::pin(futures::stream::iter(events.map(Ok))))
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let runtime = Runtime::builder(Arc::new(MemoryRunStore::new()), Arc::new(SystemClock), Arc::new(RandomIds))
///     .chat_model(Provider::OpenAi, Arc::new(Parrot))
///     .build();
/// let yaml = "name: w\nagents: {a: {provider: openai, model: parrot-1}}\nsteps: [{agent: a}]\n";
/// let workflow = Arc::new(WorkflowDef::from_yaml(yaml)?);
/// let outcome = runtime.run(RunRequest { workflow, input: "cracker".into(), source: None, started_by: None }).await?;
/// assert_eq!(outcome.status, RunStatus::Completed, "{:?}", outcome.error);
/// let said = outcome.output.as_str().unwrap_or_default();
/// assert!(said.starts_with("you said: ") && said.contains("cracker"), "{said}");
/// # Ok(())
/// # }
/// ```
#[cfg_attr(all(any(test, feature = "testing"), not(doctest)), mockall::automock)]
#[async_trait]
pub trait ChatModel: Send + Sync + 'static {
    /// The provider's name in events (`openai`, `anthropic`).
    fn provider(&self) -> &'static str;

    /// Sends the conversation and starts streaming the model's turn; errors
    /// before the first byte of the answer (HTTP status, connection) are
    /// returned here.
    async fn turn(&self, request: ChatRequest) -> Result<ChatStream, ChatError>;
}

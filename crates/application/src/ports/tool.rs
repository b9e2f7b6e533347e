//! [`Tool`]: something an agent may call through the runtime's own tool loop
//! (HTTP providers), with a JSON Schema for its input.
//!
//! Tools the runtime runs are the ground truth of what happened (fidelity
//! `router`), so every call goes through [`crate::tools::ToolRouter`], which
//! checks the input against the schema before the tool sees it.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use domain::RunId;
use domain::workflow::ToolGrant;
use serde_json::Value;

/// What a model is told about a tool.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// Unique name.
    pub name: String,
    /// What it does, for the model to choose it.
    pub description: String,
    /// JSON Schema of its input.
    pub input_schema: Value,
}

/// Where a call runs: tools that touch files are confined to `workspace`;
/// and under which grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolContext {
    /// The run's workspace directory.
    pub workspace: PathBuf,
    /// Environment variables a tool must not pass on to what it runs: the
    /// agent's API key variable, so a model cannot have a shell print it
    /// into the run's records.
    pub hidden_env: Vec<String>,
    /// The run the call belongs to: a tool that starts processes tags them
    /// with it (`AWR_RUN_ID`), so a resume finds what a dead writer left.
    pub run_id: Option<RunId>,
    /// The agent's grant of the tool being called, with its settings
    /// (`http_get`'s `allow:`). The router sets it for each call, so a tool
    /// reads its own grant and no other; `None` (a call made without the
    /// router) means every setting at its default.
    pub grant: Option<ToolGrant>,
}

impl ToolContext {
    /// Calls confined to `workspace`, hiding nothing, of no run.
    pub fn new(workspace: impl Into<PathBuf>) -> Self {
        Self {
            workspace: workspace.into(),
            hidden_env: Vec::new(),
            run_id: None,
            grant: None,
        }
    }

    /// Calls made for the run `run_id`.
    #[must_use]
    pub fn for_run(mut self, run_id: RunId) -> Self {
        self.run_id = Some(run_id);
        self
    }

    /// Calls made under `grant`.
    #[must_use]
    pub fn granting(mut self, grant: ToolGrant) -> Self {
        self.grant = Some(grant);
        self
    }

    /// Also hides the variables `names`.
    #[must_use]
    pub fn hiding(mut self, names: impl IntoIterator<Item = String>) -> Self {
        self.hidden_env.extend(names);
        self
    }
}

/// Why a call failed; the message goes back to the model, never crashes the run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ToolError {
    /// No tool of that name is registered.
    #[error("unknown tool `{0}`")]
    Unknown(String),
    /// The agent was not granted the tool.
    #[error("tool `{0}` is not granted to this agent")]
    NotGranted(String),
    /// The input does not match the tool's schema (lists each problem).
    #[error("invalid input for `{tool}`: {message}")]
    InvalidInput {
        /// The tool.
        tool: String,
        /// What is wrong, with JSON pointers.
        message: String,
    },
    /// The tool refused (e.g. a path outside the workspace).
    #[error("refused: {0}")]
    Denied(String),
    /// The tool ran and failed.
    #[error("failed: {0}")]
    Failed(String),
}

/// A tool the runtime can execute.
///
/// Registered with [`RuntimeBuilder::tool`](crate::RuntimeBuilder::tool),
/// it is called through the [`ToolRouter`](crate::tools::ToolRouter),
/// which checks the grant and the input first:
///
/// ```
/// # extern crate domain as awr_domain;
/// use std::sync::Arc;
///
/// use awr_application::ports::{Tool, ToolContext, ToolError, ToolSpec};
/// use awr_application::tools::ToolRouter;
/// use awr_domain::workflow::ToolGrant;
/// use serde_json::{Value, json};
///
/// /// Upper-cases a text.
/// struct Upper;
///
/// #[async_trait::async_trait]
/// impl Tool for Upper {
///     fn spec(&self) -> ToolSpec {
///         let input_schema = json!({
///             "type": "object",
///             "properties": {"text": {"type": "string"}},
///             "required": ["text"],
///         });
///         ToolSpec { name: "upper".into(), description: "Upper-cases `text`.".into(), input_schema }
///     }
///     async fn call(&self, input: Value, _: &ToolContext) -> Result<Value, ToolError> {
///         // Checked against the schema already: `text` is a string.
///         Ok(json!(input["text"].as_str().unwrap_or_default().to_uppercase()))
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let router = ToolRouter::new().with(Arc::new(Upper));
/// let (granted, context) = ([ToolGrant::new("upper")], ToolContext::new("."));
/// let output = router.call("upper", json!({"text": "hi"}), &granted, &context).await?;
/// assert_eq!(output, json!("HI"));
/// // Input the schema refuses never reaches the tool; the model is told why.
/// let refused = router.call("upper", json!({"text": 7}), &granted, &context).await;
/// assert!(matches!(refused, Err(ToolError::InvalidInput { .. })), "{refused:?}");
/// // Nor does a call from an agent not granted the tool.
/// let refused = router.call("upper", json!({"text": "hi"}), &[], &context).await;
/// assert!(matches!(refused, Err(ToolError::NotGranted(_))), "{refused:?}");
/// # Ok(())
/// # }
/// ```
#[cfg_attr(all(any(test, feature = "testing"), not(doctest)), mockall::automock)]
#[async_trait]
pub trait Tool: Send + Sync + 'static {
    /// Name, description and input schema.
    fn spec(&self) -> ToolSpec;

    /// Runs the tool on input already checked against its schema.
    async fn call(&self, input: Value, context: &ToolContext) -> Result<Value, ToolError>;
}

/// Tools of one run besides the runtime's own: those of the MCP servers
/// the run's workflow declares, handed to the tool loop with each request
/// of an agent granted them.
#[derive(Clone, Default)]
pub struct RunTools(pub Vec<Arc<dyn Tool>>);

impl RunTools {
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for RunTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|tool| tool.spec().name))
            .finish()
    }
}

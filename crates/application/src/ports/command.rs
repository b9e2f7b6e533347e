//! [`CommandRunner`]: runs the shell script of a `command` node.
//!
//! A port, so the executor decides *when* a command runs and records what
//! it did, while *how* (a process group, the sandbox shared with the `shell`
//! tool) lives in an adapter.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use domain::{NodeId, NodeRunId, RunId};

/// One run of one `command` node.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandRequest {
    /// The workflow run.
    pub run_id: RunId,
    /// The node.
    pub node_id: NodeId,
    /// The node run.
    pub node_run_id: NodeRunId,
    /// The script, for `sh -c`.
    pub script: String,
    /// Where it runs, as written in the workflow (the adapter resolves it
    /// against the project directory, as for an agent's `workdir`).
    pub workdir: Option<String>,
    /// Lets `workdir` leave the project directory (the node's
    /// `allow_outside_project`); otherwise the adapter refuses it.
    pub allow_outside_project: bool,
    /// Extra environment variables.
    pub env: BTreeMap<String, String>,
    /// Kill the whole process group after this long.
    pub timeout: Option<Duration>,
}

/// What a command did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandOutcome {
    /// The exit code; `None` when a signal ended it (a timeout included).
    pub exit_code: Option<i32>,
    /// Standard output, lossily decoded, capped (see `truncated`).
    pub stdout: String,
    /// Standard error, lossily decoded, capped.
    pub stderr: String,
    /// The output went past the adapter's cap and was cut.
    pub truncated: bool,
    /// It ran past its timeout and its group was killed.
    pub timed_out: bool,
    /// Wall time in milliseconds.
    pub duration_ms: u64,
}

/// Why a command could not be run at all (a command that ran and failed is
/// an [`CommandOutcome`] with a non-zero exit code).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CommandError {
    /// The working directory is refused or missing.
    #[error("workdir: {0}")]
    Workdir(String),
    /// The process could not be started.
    #[error("cannot start the command: {0}")]
    Spawn(String),
}

/// Runs `command` nodes.
///
/// Contract: the command runs in a process group of its own, and dropping
/// the returned future (cancellation) kills that whole group at once, as a
/// timeout does.
///
/// A runner that runs nothing and says what it was asked, as a test of a
/// workflow's wiring would:
///
/// ```
/// # extern crate domain as awr_domain;
/// use std::sync::Arc;
///
/// use awr_application::ports::{CommandError, CommandOutcome, CommandRequest, CommandRunner};
/// use awr_application::{RunRequest, Runtime};
/// use awr_domain::{RunStatus, WorkflowDef};
/// use awr_infrastructure::clock::{RandomIds, SystemClock};
/// use awr_infrastructure::store::MemoryRunStore;
///
/// /// Every script "prints" itself and succeeds.
/// struct DryRun;
///
/// #[async_trait::async_trait]
/// impl CommandRunner for DryRun {
///     async fn run(&self, request: CommandRequest) -> Result<CommandOutcome, CommandError> {
///         Ok(CommandOutcome {
///             exit_code: Some(0),
///             stdout: format!("would run: {}", request.script),
///             stderr: String::new(),
///             truncated: false,
///             timed_out: false,
///             duration_ms: 0,
///         })
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let runtime = Runtime::builder(Arc::new(MemoryRunStore::new()), Arc::new(SystemClock), Arc::new(RandomIds))
///     .commands(Arc::new(DryRun))
///     .build();
/// let workflow = Arc::new(WorkflowDef::from_yaml("name: build\nnodes: [{id: make, command: make all}]\n")?);
/// let request = RunRequest { workflow, input: serde_json::Value::Null, source: None, started_by: None };
/// let outcome = runtime.run(request).await?;
/// assert_eq!(outcome.status, RunStatus::Completed, "{:?}", outcome.error);
/// assert_eq!(outcome.output["stdout"], "would run: make all");
/// assert_eq!(outcome.output["exit_code"], 0);
/// # Ok(())
/// # }
/// ```
#[cfg_attr(all(any(test, feature = "testing"), not(doctest)), mockall::automock)]
#[async_trait]
pub trait CommandRunner: Send + Sync + 'static {
    /// Runs one command to its end.
    async fn run(&self, request: CommandRequest) -> Result<CommandOutcome, CommandError>;
}

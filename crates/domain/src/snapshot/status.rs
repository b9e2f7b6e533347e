//! The statuses a snapshot records: of the run, of each node, of each edge.

use serde::{Deserialize, Serialize};

/// Lifecycle of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// Created, no event yet.
    Pending,
    /// Executing (or interrupted while executing: a crash leaves this).
    Running,
    /// Stopped at a safe point; resumable.
    Paused,
    /// Stopped because every node run in flight waits for a person (an
    /// `approval` node); an answer, or a deadline passing, continues it.
    Waiting,
    /// Finished successfully.
    Completed,
    /// Finished with an error.
    Failed,
    /// Stopped by a user.
    Cancelled,
}

impl RunStatus {
    /// Every status, in lifecycle order.
    pub const ALL: [RunStatus; 7] = [
        Self::Pending,
        Self::Running,
        Self::Paused,
        Self::Waiting,
        Self::Completed,
        Self::Failed,
        Self::Cancelled,
    ];

    /// Whether the run has ended for good.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }

    /// Whether the run stopped to be continued (`paused`, `waiting`).
    pub fn is_stopped(self) -> bool {
        matches!(self, Self::Paused | Self::Waiting)
    }

    /// Lower-case name, as serialized.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::Paused => "paused",
            Self::Waiting => "waiting",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }
}

/// Status of one node (seed 001 §4, plus `skipped` for branches not taken).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeStatus {
    /// Not run (yet).
    Pending,
    /// Started, not finished.
    Running,
    /// Finished successfully.
    Done,
    /// Finished with an error.
    Failed,
    /// Will not run: no incoming edge fired.
    Skipped,
}

/// Status of one edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EdgeStatus {
    /// Source not finished.
    Pending,
    /// Condition held; data flowed.
    Fired,
    /// Condition false, source skipped, or loop limit reached.
    Skipped,
}

impl NodeStatus {
    /// The name it is written under (its serde name).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::Done => "done",
            Self::Failed => "failed",
            Self::Skipped => "skipped",
        }
    }
}

impl EdgeStatus {
    /// The name it is written under (its serde name).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Fired => "fired",
            Self::Skipped => "skipped",
        }
    }
}

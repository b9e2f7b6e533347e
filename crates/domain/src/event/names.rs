//! The names of the event kinds: the `type` each is written with, and
//! which of them end a run's log.

use super::EventKind;

/// Every `type` this version knows; anything else becomes [`EventKind::Unknown`].
pub const KNOWN_TYPES: &[&str] = &[
    "flow:started",
    "flow:paused",
    "flow:resumed",
    "flow:upgraded",
    "flow:forked",
    "flow:completed",
    "flow:failed",
    "flow:cancelled",
    "node:started",
    "node:completed",
    "node:failed",
    "node:skipped",
    "edge:fired",
    "edge:skipped",
    "agent:start",
    "agent:session",
    "process:started",
    "agent:thinking:delta",
    "agent:thinking",
    "agent:text:delta",
    "agent:text",
    "agent:tool:use",
    "agent:tool",
    "agent:error",
    "agent:complete",
    "tool:started",
    "tool:completed",
    "tool:failed",
    "command:received",
    "state:saved",
    "budget:exceeded",
    "rate:limited",
    "warning",
    "subflow:started",
    "subflow:completed",
    "approval:requested",
    "approval:resolved",
    "system:error",
];

impl EventKind {
    /// The `type` string of this kind.
    pub fn type_name(&self) -> &str {
        match self {
            EventKind::FlowStarted { .. } => "flow:started",
            EventKind::FlowPaused { .. } => "flow:paused",
            EventKind::FlowResumed { .. } => "flow:resumed",
            EventKind::FlowUpgraded { .. } => "flow:upgraded",
            EventKind::FlowForked { .. } => "flow:forked",
            EventKind::FlowCompleted { .. } => "flow:completed",
            EventKind::FlowFailed { .. } => "flow:failed",
            EventKind::FlowCancelled { .. } => "flow:cancelled",
            EventKind::NodeStarted { .. } => "node:started",
            EventKind::NodeCompleted { .. } => "node:completed",
            EventKind::NodeFailed { .. } => "node:failed",
            EventKind::NodeSkipped { .. } => "node:skipped",
            EventKind::EdgeFired { .. } => "edge:fired",
            EventKind::EdgeSkipped { .. } => "edge:skipped",
            EventKind::AgentStart { .. } => "agent:start",
            EventKind::AgentSession { .. } => "agent:session",
            EventKind::ProcessStarted { .. } => "process:started",
            EventKind::AgentThinkingDelta { .. } => "agent:thinking:delta",
            EventKind::AgentThinking { .. } => "agent:thinking",
            EventKind::AgentTextDelta { .. } => "agent:text:delta",
            EventKind::AgentText { .. } => "agent:text",
            EventKind::AgentToolUse { .. } => "agent:tool:use",
            EventKind::AgentTool { .. } => "agent:tool",
            EventKind::AgentError { .. } => "agent:error",
            EventKind::AgentComplete { .. } => "agent:complete",
            EventKind::ToolStarted { .. } => "tool:started",
            EventKind::ToolCompleted { .. } => "tool:completed",
            EventKind::ToolFailed { .. } => "tool:failed",
            EventKind::CommandReceived { .. } => "command:received",
            EventKind::StateSaved { .. } => "state:saved",
            EventKind::BudgetExceeded { .. } => "budget:exceeded",
            EventKind::RateLimited { .. } => "rate:limited",
            EventKind::Warning { .. } => "warning",
            EventKind::SubflowStarted { .. } => "subflow:started",
            EventKind::SubflowCompleted { .. } => "subflow:completed",
            EventKind::ApprovalRequested { .. } => "approval:requested",
            EventKind::ApprovalResolved { .. } => "approval:resolved",
            EventKind::SystemError { .. } => "system:error",
            EventKind::Unknown { type_name, .. } => type_name,
        }
    }

    /// Whether this event ends the run's log (followers stop after it).
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            EventKind::FlowCompleted { .. }
                | EventKind::FlowFailed { .. }
                | EventKind::FlowCancelled { .. }
        )
    }
}

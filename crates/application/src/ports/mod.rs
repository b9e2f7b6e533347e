//! The ports: every way the application reaches the outside world.

mod chat;
mod clock;
mod command;
mod control;
mod observer;
mod process;
mod query;
mod run_files;
mod run_query;
mod source;
mod store;
mod tool;
mod transcript;

#[cfg(any(test, feature = "testing"))]
pub use chat::MockChatModel;
pub use chat::{
    ChatBlock, ChatError, ChatEvent, ChatMessage, ChatModel, ChatRequest, ChatStream, StopReason,
    ToolCall, ToolResult, TurnEnd,
};
pub use clock::{Clock, IdGen};
#[cfg(any(test, feature = "testing"))]
pub use clock::{MockClock, MockIdGen};
#[cfg(any(test, feature = "testing"))]
pub use command::MockCommandRunner;
pub use command::{CommandError, CommandOutcome, CommandRequest, CommandRunner};
#[cfg(any(test, feature = "testing"))]
pub use control::MockControlChannel;
pub use control::{
    Answer, CommandReply, ControlChannel, ControlError, Delivery, Handover, Listener, ReplyTo,
};
pub use observer::RunObserver;
#[cfg(any(test, feature = "testing"))]
pub use process::MockProcesses;
pub use process::Processes;
#[cfg(any(test, feature = "testing"))]
pub use query::MockQueryFn;
pub use query::{AgentMessage, AgentRequest, AgentResult, AgentStream, QueryError, QueryFn};
#[cfg(any(test, feature = "testing"))]
pub use run_files::MockRunFiles;
pub use run_files::{RunFileSet, RunFiles};
pub use run_query::{EventFilter, RunCursor, RunQuery, RunSummary, scan_events, scan_runs};
#[cfg(any(test, feature = "testing"))]
pub use source::MockWorkflowSource;
pub use source::{SourceError, WorkflowSource};
#[cfg(any(test, feature = "testing"))]
pub use store::MockRunStore;
pub use store::{EventBatches, EventStream, RunLock, RunStore, StoreError};
#[cfg(any(test, feature = "testing"))]
pub use tool::MockTool;
pub use tool::{Tool, ToolContext, ToolError, ToolSpec};
#[cfg(any(test, feature = "testing"))]
pub use transcript::{MockTranscript, MockTranscripts};
pub use transcript::{Transcript, TranscriptError, Transcripts};

//! The ports: every way the application reaches the outside world.
//!
//! Each port's doc holds a runnable example of an implementation of the
//! program's own. With feature `testing`, each also has a `mockall` mock
//! (`MockQueryFn`, ...), which copies the port's doc; the mocks are left out
//! while rustdoc collects the doctests (`not(doctest)`), so each example
//! runs once. Doctests use the mocks as any program does.

mod chat;
mod clock;
mod command;
mod control;
mod mcp;
mod observer;
mod process;
mod query;
mod queue;
mod run_files;
mod run_query;
mod source;
mod spans;
mod store;
mod tool;
mod transcript;

#[cfg(all(any(test, feature = "testing"), not(doctest)))]
pub use chat::MockChatModel;
pub use chat::{
    ChatBlock, ChatError, ChatEvent, ChatMessage, ChatModel, ChatRequest, ChatStream, StopReason,
    ToolCall, ToolResult, TurnEnd,
};
pub use clock::{Clock, IdGen};
#[cfg(all(any(test, feature = "testing"), not(doctest)))]
pub use clock::{MockClock, MockIdGen};
#[cfg(all(any(test, feature = "testing"), not(doctest)))]
pub use command::MockCommandRunner;
pub use command::{CommandError, CommandOutcome, CommandRequest, CommandRunner};
#[cfg(all(any(test, feature = "testing"), not(doctest)))]
pub use control::MockControlChannel;
pub use control::{
    Answer, CommandReply, ControlChannel, ControlError, Delivery, Handover, Listener, ReplyTo,
};
pub use mcp::{McpConnector, McpError, McpOutcome, McpSession, McpToolInfo};
pub use observer::RunObserver;
#[cfg(all(any(test, feature = "testing"), not(doctest)))]
pub use process::MockProcesses;
pub use process::Processes;
#[cfg(all(any(test, feature = "testing"), not(doctest)))]
pub use query::MockQueryFn;
pub use query::{
    AgentMessage, AgentRequest, AgentResult, AgentStream, PERMISSION_SERVER, PERMISSION_TOOL,
    QueryError, QueryFn,
};
pub use queue::{Claim, RunQueue, Submission};
#[cfg(all(any(test, feature = "testing"), not(doctest)))]
pub use run_files::MockRunFiles;
pub use run_files::{RunFileSet, RunFiles};
pub use run_query::{EventFilter, RunCursor, RunQuery, RunSummary, scan_events, scan_runs};
#[cfg(all(any(test, feature = "testing"), not(doctest)))]
pub use source::MockWorkflowSource;
pub use source::{SourceError, WorkflowSource};
pub use spans::{SpanSink, SpanSlot};
#[cfg(all(any(test, feature = "testing"), not(doctest)))]
pub use store::MockRunStore;
pub use store::{EventBatches, EventStream, RunLock, RunStore, StoreError, definition_at};
#[cfg(all(any(test, feature = "testing"), not(doctest)))]
pub use tool::MockTool;
pub use tool::{RunTools, Tool, ToolContext, ToolError, ToolSpec};
#[cfg(all(any(test, feature = "testing"), not(doctest)))]
pub use transcript::{MockTranscript, MockTranscriptReader, MockTranscripts};
pub use transcript::{Transcript, TranscriptError, TranscriptLines, TranscriptReader, Transcripts};

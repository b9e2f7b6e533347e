//! MCP servers a run's agents use tools of (`mcp_servers:`): connecting to
//! one as its declaration says, listing its tools, calling them.
//!
//! What a server answers is data for the model, never a reason to stop a
//! run: a tool's own error (`isError`), a JSON-RPC error and a timeout are
//! all an [`McpError`] or an outcome marked as an error, which the tool
//! loop hands back to the model. A server's tool descriptions and schemas
//! are untrusted text, passed to the model as they are.

use async_trait::async_trait;
use domain::RunId;
use domain::workflow::McpServerDef;
use serde_json::Value;

/// A tool a server lists.
#[derive(Debug, Clone, PartialEq)]
pub struct McpToolInfo {
    /// Its name, as the server gives it.
    pub name: String,
    /// What it does (the server's words; empty when it gives none).
    pub description: String,
    /// The JSON Schema of its arguments.
    pub input_schema: Value,
}

/// What a call gave back.
#[derive(Debug, Clone, PartialEq)]
pub struct McpOutcome {
    /// The result: its structured content when the server gives one, else
    /// the text of its content blocks, else the blocks themselves.
    pub output: Value,
    /// Whether the server said the call failed (`isError`).
    pub is_error: bool,
}

/// Why a server could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// It did not start, or did not answer `initialize` and `tools/list`
    /// in time.
    #[error("MCP server `{server}` did not start: {reason}")]
    Start {
        /// The server.
        server: String,
        /// Why.
        reason: String,
    },
    /// It answered with a JSON-RPC error.
    #[error("MCP server `{server}` answered error {code}: {message}")]
    Rpc {
        /// The server.
        server: String,
        /// The JSON-RPC error code.
        code: i64,
        /// Its message.
        message: String,
    },
    /// It did not answer in time (the call is cancelled).
    #[error("MCP server `{server}` did not answer within {seconds} s")]
    Timeout {
        /// The server.
        server: String,
        /// How long it had.
        seconds: u64,
    },
    /// The connection closed (the program exited, the HTTP server went).
    #[error("MCP server `{server}` closed the connection: {reason}")]
    Closed {
        /// The server.
        server: String,
        /// What was seen.
        reason: String,
    },
}

/// Connects to declared MCP servers.
#[async_trait]
pub trait McpConnector: Send + Sync {
    /// Starts (stdio) or reaches (HTTP) the server `name` as `def` says,
    /// for `run` (a program it starts is tagged with it), and lists its
    /// tools, within the server's `startup_timeout`.
    async fn connect(
        &self,
        name: &str,
        def: &McpServerDef,
        run: Option<RunId>,
    ) -> Result<Box<dyn McpSession>, McpError>;
}

/// One connected server.
#[async_trait]
pub trait McpSession: Send + Sync {
    /// Its tools, as listed when it connected.
    fn tools(&self) -> &[McpToolInfo];

    /// Calls `tool` with `arguments` (a JSON object), within the server's
    /// `tool_timeout`. A stdio server whose program has exited is started
    /// again once, for the calls after this one.
    async fn call(&self, tool: &str, arguments: Value) -> Result<McpOutcome, McpError>;

    /// Ends the session; a program it started is stopped, with all it
    /// started.
    async fn close(&self);
}

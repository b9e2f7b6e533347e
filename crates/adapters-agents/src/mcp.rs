//! MCP servers as `mcp_servers:` declares them, spoken to with the official
//! SDK (`rmcp`): a stdio server is a program awr starts itself, through
//! [`group::spawn_piped`] (a process group of its own, every key variable
//! withheld but those it is given, tagged with its run), and speaks to on
//! its pipes; an HTTP server is reached over streamable HTTP.
//!
//! A server's stderr goes to awr's log (which is redacted), a line at a
//! time. A server whose connection fails (a stdio program exits, an HTTP
//! server drops the connection) is connected to again once: the call that
//! found it gone fails (it may have had effects), the calls after it go to
//! the new connection; after a second failure it stays gone for the run's
//! writer (a resume connects afresh).

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use application::ports::{McpConnector, McpError, McpOutcome, McpSession, McpToolInfo};
use application::secrets::KeyNames;
use async_trait::async_trait;
use domain::RunId;
use domain::workflow::{McpServerDef, McpTransport};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig,
    ClientRequest, Implementation, ServerResult,
};
use rmcp::service::{PeerRequestOptions, RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ServiceError, ServiceExt};
use serde_json::Value;
use tokio::io::AsyncBufReadExt;

use crate::process::group::{self, ProcessGroup, Sandbox};
use crate::process::sweep::run_tags;

/// Connects to MCP servers for runs of one project.
#[derive(Debug, Clone)]
pub struct McpClients {
    /// Where a stdio server runs (its `cwd` is under it).
    project: PathBuf,
    /// Recognizes the key variables a server must not inherit.
    keys: KeyNames,
}

impl McpClients {
    /// Servers of the project in `project`, each withheld the key
    /// variables `keys` recognizes.
    pub fn new(project: impl Into<PathBuf>, keys: KeyNames) -> Self {
        Self {
            project: project.into(),
            keys,
        }
    }
}

#[async_trait]
impl McpConnector for McpClients {
    async fn connect(
        &self,
        name: &str,
        def: &McpServerDef,
        run: Option<RunId>,
    ) -> Result<Box<dyn McpSession>, McpError> {
        let server = Server {
            name: name.to_owned(),
            def: def.clone(),
            project: self.project.clone(),
            keys: self.keys.clone(),
            run,
        };
        let (live, tools) = server.open().await?;
        Ok(Box::new(Session {
            server,
            tools,
            state: tokio::sync::Mutex::new(State {
                live: Some(live),
                generation: 0,
                restarted: false,
                closed: false,
            }),
        }))
    }
}

/// A server's declaration, and what it needs to start again.
#[derive(Debug)]
struct Server {
    name: String,
    def: McpServerDef,
    project: PathBuf,
    keys: KeyNames,
    run: Option<RunId>,
}

/// A connection to a server.
struct Live {
    service: RunningService<RoleClient, ClientConfig>,
    /// A stdio server's program and all it started, killed when dropped.
    group: Option<ProcessGroup>,
    /// A stdio server's program (started to be killed when dropped).
    child: Option<tokio::process::Child>,
}

impl Server {
    /// Starts or reaches the server and lists its tools, within its
    /// `startup_timeout`.
    async fn open(&self) -> Result<(Live, Vec<McpToolInfo>), McpError> {
        let within = self.def.startup_timeout.0;
        let opened = tokio::time::timeout(within, async {
            let live = self.connect().await?;
            let tools = live
                .service
                .peer()
                .list_all_tools()
                .await
                .map_err(|e| self.start_error(format!("tools/list: {e}")))?;
            let tools = tools
                .into_iter()
                .map(|tool| McpToolInfo {
                    name: tool.name.into_owned(),
                    description: tool.description.map(|d| d.into_owned()).unwrap_or_default(),
                    input_schema: Value::Object((*tool.input_schema).clone()),
                })
                .collect();
            Ok((live, tools))
        })
        .await;
        match opened {
            Ok(opened) => opened,
            Err(_) => Err(self.start_error(format!(
                "no answer within {} s (`startup_timeout`)",
                within.as_secs()
            ))),
        }
    }

    fn start_error(&self, reason: String) -> McpError {
        McpError::Start {
            server: self.name.clone(),
            reason,
        }
    }

    async fn connect(&self) -> Result<Live, McpError> {
        let client = ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("awr", env!("CARGO_PKG_VERSION")),
        );
        match &self.def.transport {
            McpTransport::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                let mut program = group::command(command);
                program
                    .args(args)
                    .current_dir(self.project.join(cwd.as_deref().unwrap_or(".")));
                let mut env = env.clone();
                if let Some(run) = self.run {
                    env.extend(run_tags(&run.to_string()));
                }
                let sandbox = Sandbox {
                    keys: self.keys.clone(),
                    env,
                    ..Sandbox::default()
                };
                let piped = group::spawn_piped(program, &sandbox)
                    .map_err(|e| self.start_error(format!("`{command}`: {e}")))?;
                tokio::spawn(log_stderr(self.name.clone(), piped.stderr));
                let service = client
                    .serve((piped.stdout, piped.stdin))
                    .await
                    .map_err(|e| self.start_error(format!("initialize: {e}")))?;
                Ok(Live {
                    service,
                    group: Some(piped.group),
                    child: Some(piped.child),
                })
            }
            McpTransport::Http {
                url,
                headers,
                bearer_token_env,
            } => {
                // reqwest is built without a default crypto provider.
                let _ = rustls::crypto::ring::default_provider().install_default();
                let mut custom = HashMap::new();
                if let Some(var) = bearer_token_env {
                    let token = std::env::var(var).map_err(|_| {
                        self.start_error(format!("`bearer_token_env`: `{var}` is not set"))
                    })?;
                    let value = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))
                        .map_err(|_| {
                            self.start_error(format!("`bearer_token_env`: `{var}` is not a token"))
                        })?;
                    custom.insert(reqwest::header::AUTHORIZATION, value);
                }
                for (name, value) in headers {
                    let header = (
                        reqwest::header::HeaderName::from_bytes(name.as_bytes()),
                        reqwest::header::HeaderValue::from_str(value),
                    );
                    match header {
                        (Ok(name), Ok(value)) => {
                            custom.insert(name, value);
                        }
                        _ => return Err(self.start_error(format!("bad header `{name}`"))),
                    }
                }
                let config = StreamableHttpClientTransportConfig::with_uri(url.clone())
                    .custom_headers(custom);
                let service = client
                    .serve(StreamableHttpClientTransport::from_config(config))
                    .await
                    .map_err(|e| self.start_error(format!("initialize: {e}")))?;
                Ok(Live {
                    service,
                    group: None,
                    child: None,
                })
            }
        }
    }
}

/// A connected server.
struct Session {
    server: Server,
    tools: Vec<McpToolInfo>,
    state: tokio::sync::Mutex<State>,
}

/// A session's connection, and what became of it.
struct State {
    /// The connection; `None` once closed, or once gone for good.
    live: Option<Live>,
    /// Which connection `live` is: a call that saw an earlier one fail
    /// does not end this one.
    generation: u64,
    /// Whether the server was started again already (once at most).
    restarted: bool,
    /// Closed by its owner: never started again.
    closed: bool,
}

#[async_trait]
impl McpSession for Session {
    fn tools(&self) -> &[McpToolInfo] {
        &self.tools
    }

    async fn call(&self, tool: &str, arguments: Value) -> Result<McpOutcome, McpError> {
        let name = &self.server.name;
        let (peer, generation) = {
            let state = self.state.lock().await;
            match (&state.live, state.closed) {
                (Some(live), false) => (live.service.peer().clone(), state.generation),
                _ => {
                    return Err(McpError::Closed {
                        server: name.clone(),
                        reason: "it is not running".into(),
                    });
                }
            }
        };
        let mut params = CallToolRequestParams::new(tool.to_owned());
        match arguments {
            Value::Object(arguments) => params = params.with_arguments(arguments),
            Value::Null => {}
            other => {
                let mut wrapped = serde_json::Map::new();
                wrapped.insert("input".into(), other);
                params = params.with_arguments(wrapped);
            }
        }
        let within = self.server.def.tool_timeout.0;
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let answered = match peer
            .send_request_with_option(request, PeerRequestOptions::with_timeout(within))
            .await
        {
            Ok(handle) => handle.await_response().await,
            Err(e) => Err(e),
        };
        match answered {
            Ok(ServerResult::CallToolResult(result)) => Ok(outcome(result)),
            Ok(_) => Err(McpError::Rpc {
                server: name.clone(),
                code: -32603,
                message: "the answer to tools/call was not a tool result".into(),
            }),
            Err(ServiceError::McpError(error)) => Err(McpError::Rpc {
                server: name.clone(),
                code: i64::from(error.code.0),
                message: error.message.into_owned(),
            }),
            Err(ServiceError::Timeout { .. }) => Err(McpError::Timeout {
                server: name.clone(),
                seconds: within.as_secs(),
            }),
            // The connection failed (closed, or a write to it did, before
            // the SDK saw it close): started again for the next call.
            Err(e) => {
                let reason = e.to_string();
                self.restart(generation).await;
                Err(McpError::Closed {
                    server: name.clone(),
                    reason,
                })
            }
        }
    }

    async fn close(&self) {
        let live = {
            let mut state = self.state.lock().await;
            state.closed = true;
            state.live.take()
        };
        if let Some(live) = live {
            stop(live).await;
        }
    }
}

impl Session {
    /// Starts the server again after connection `generation` failed, once
    /// in the session's life; after that, a server that went stays gone.
    /// Nothing happens when the session was closed, or when another call
    /// already dealt with that connection. Calls wait while it starts.
    async fn restart(&self, generation: u64) {
        let mut state = self.state.lock().await;
        if state.closed || state.generation != generation {
            return;
        }
        state.generation += 1;
        if let Some(old) = state.live.take() {
            stop(old).await;
        }
        if std::mem::replace(&mut state.restarted, true) {
            tracing::warn!(server = %self.server.name, "MCP server closed again: not restarted");
            return;
        }
        match self.server.open().await {
            Ok((new, _)) => {
                tracing::warn!(server = %self.server.name, "MCP server closed: started again");
                state.live = Some(new);
            }
            Err(e) => tracing::warn!(error = %e, "MCP server could not be started again"),
        }
    }
}

/// The longest stderr line logged whole; a longer one is logged in pieces.
const STDERR_LINE: usize = 8 << 10;

/// Logs `server`'s stderr a line at a time, read to its end whatever it
/// holds (a line that is not UTF-8 is logged lossily, one too long in pieces),
/// so that the server never writes into a closed pipe.
async fn log_stderr(server: String, stderr: tokio::process::ChildStderr) {
    use tokio::io::AsyncReadExt;
    let mut reader = tokio::io::BufReader::new(stderr);
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = (&mut reader)
            .take(STDERR_LINE as u64)
            .read_until(b'\n', &mut line)
            .await;
        match read {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                let text = String::from_utf8_lossy(&line);
                let text = text.trim_end_matches(['\n', '\r']);
                tracing::info!(target: "awr::mcp", server = %server, "{text}");
            }
        }
    }
}

/// Ends a connection: the SDK's service is cancelled, a program's group
/// killed with all it started.
async fn stop(live: Live) {
    let _ = tokio::time::timeout(STOP_WAIT, live.service.cancel()).await;
    if let Some(group) = live.group {
        group.end().await;
    }
    if let Some(mut child) = live.child {
        let _ = child.wait().await;
    }
}

/// How long a connection has to end before its program is killed.
const STOP_WAIT: Duration = Duration::from_secs(2);

/// A tool result as the tool loop hands it to the model: the structured
/// content when there is some, else the text blocks joined, else the
/// blocks as JSON.
fn outcome(result: CallToolResult) -> McpOutcome {
    let is_error = result.is_error.unwrap_or(false);
    let output = match result.structured_content {
        Some(structured) => structured,
        None => {
            let texts: Vec<&str> = (result.content.iter())
                .filter_map(|block| block.as_text().map(|t| t.text.as_str()))
                .collect();
            match texts.len() == result.content.len() {
                true => Value::String(texts.join("\n")),
                false => serde_json::to_value(&result.content).unwrap_or(Value::Null),
            }
        }
    };
    McpOutcome { output, is_error }
}

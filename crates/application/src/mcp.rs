//! The MCP servers of one run (`mcp_servers:`), as tools its HTTP agents
//! call through the tool loop.
//!
//! A server starts the first time an agent granted one of its tools is
//! invoked, not before: a run that never reaches such a node starts
//! nothing. It then serves every node of the run, and is closed when the
//! run's writer lets go of the run (it ends, pauses or hands over); a
//! resume starts it again. A server that fails to start fails, with an
//! error naming it, every invocation that needs it: the outcome is kept,
//! so one run never sees a server both up and down.
//!
//! Each tool a server lists becomes a [`Tool`] named as the model sees it
//! ([`mcp_tool_name`]), with its schema adapted to what the HTTP APIs
//! accept. What a call gives back, a server's error, a timeout and a closed
//! connection are all results the model reads: none of them fails the run.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use domain::RunId;
use domain::workflow::{McpGrant, McpServerDef, ToolGrant, WorkflowDef, mcp_tool_name};
use serde_json::{Map, Value};
use tokio::sync::OnceCell;

use crate::ports::{
    McpConnector, McpError, McpSession, McpToolInfo, RunTools, Tool, ToolContext, ToolError,
    ToolSpec,
};

/// The servers one run declares, each started on first need.
pub struct McpServers {
    connector: Arc<dyn McpConnector>,
    run: RunId,
    servers: BTreeMap<String, Server>,
}

/// A declared server, and how its start went once it was tried.
struct Server {
    def: McpServerDef,
    started: OnceCell<Result<Started, McpError>>,
}

/// A server that answered, with its tools as the model sees them.
#[derive(Clone)]
struct Started {
    session: Arc<dyn McpSession>,
    tools: Vec<Arc<dyn Tool>>,
}

impl McpServers {
    /// The servers `workflow` declares, for `run`; `None` when it declares none.
    pub fn of(
        connector: Arc<dyn McpConnector>,
        run: RunId,
        workflow: &WorkflowDef,
    ) -> Option<Self> {
        if workflow.mcp_servers.is_empty() {
            return None;
        }
        let servers = (workflow.mcp_servers.iter())
            .map(|(name, def)| {
                let server = Server {
                    def: def.clone(),
                    started: OnceCell::new(),
                };
                (name.clone(), server)
            })
            .collect();
        Some(Self {
            connector,
            run,
            servers,
        })
    }

    /// The tools of every server `grants` name (all of a server's, whatever
    /// the grant selects: the router gives the agent only what its grants
    /// allow), starting each server not started yet. The first server that
    /// cannot start is the error.
    pub async fn tools(&self, grants: &[ToolGrant]) -> Result<RunTools, McpError> {
        let mut named: Vec<&str> = grants
            .iter()
            .filter_map(|g| g.mcp().map(|m| m.server()))
            .collect();
        named.sort_unstable();
        named.dedup();
        let mut tools = Vec::new();
        for name in named {
            // A grant of an undeclared server was refused when the workflow loaded.
            let Some(server) = self.servers.get(name) else {
                continue;
            };
            let started = server
                .started
                .get_or_init(|| self.start(name, &server.def))
                .await;
            match started {
                Ok(started) => tools.extend(started.tools.iter().cloned()),
                Err(e) => return Err(e.clone()),
            }
        }
        Ok(RunTools(tools))
    }

    async fn start(&self, name: &str, def: &McpServerDef) -> Result<Started, McpError> {
        let session: Arc<dyn McpSession> =
            Arc::from(self.connector.connect(name, def, Some(self.run)).await?);
        tracing::info!(server = name, run = %self.run, tools = session.tools().len(), "MCP server started");
        let tools = (session.tools().iter())
            .map(|info| {
                let tool: Arc<dyn Tool> = Arc::new(McpTool {
                    spec: spec_of(name, info),
                    tool: info.name.clone(),
                    session: Arc::clone(&session),
                });
                tool
            })
            .collect();
        Ok(Started { session, tools })
    }

    /// Stops every server that started.
    pub async fn close(&self) {
        for server in self.servers.values() {
            if let Some(Ok(started)) = server.started.get() {
                started.session.close().await;
            }
        }
    }
}

/// What `awr validate --connect` finds wrong with `workflow`'s servers: each
/// server an agent is granted tools of is started (or reached), and each
/// grant of one tool is checked against the tools it lists. One line per
/// problem, naming the server or the agent and the grant; empty when all is
/// well. Every server started is stopped before this returns.
pub async fn check_connected(connector: &dyn McpConnector, workflow: &WorkflowDef) -> Vec<String> {
    let mut problems = Vec::new();
    let mut granted: Vec<&str> = (workflow.agents.values())
        .flat_map(|agent| {
            agent
                .tools
                .iter()
                .filter_map(|g| g.mcp().map(|m| m.server()))
        })
        .filter(|server| workflow.mcp_servers.contains_key(*server))
        .collect();
    granted.sort_unstable();
    granted.dedup();
    for name in granted {
        let Some(def) = workflow.mcp_servers.get(name) else {
            continue;
        };
        let session = match connector.connect(name, def, None).await {
            Ok(session) => session,
            Err(e) => {
                problems.push(format!("mcp_servers.{name}: {e}"));
                continue;
            }
        };
        let listed: Vec<&str> = session.tools().iter().map(|t| t.name.as_str()).collect();
        for (agent_name, agent) in &workflow.agents {
            for grant in &agent.tools {
                if let Some(McpGrant::One { server, tool }) = grant.mcp()
                    && server == name
                    && !listed.contains(&tool)
                {
                    problems.push(format!(
                        "agents.{agent_name}.tools: `{}`: server `{name}` lists no tool `{tool}` (it lists {})",
                        grant.name,
                        listed.join(", ")
                    ));
                }
            }
        }
        session.close().await;
    }
    problems
}

/// One tool of a server, called under the name the model sees.
struct McpTool {
    spec: ToolSpec,
    /// Its name as the server gives it.
    tool: String,
    session: Arc<dyn McpSession>,
}

#[async_trait]
impl Tool for McpTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    async fn call(&self, input: Value, _: &ToolContext) -> Result<Value, ToolError> {
        match self.session.call(&self.tool, input).await {
            Ok(outcome) if !outcome.is_error => Ok(capped(outcome.output)),
            Ok(outcome) => Err(ToolError::Failed(match capped(outcome.output) {
                Value::String(text) => text,
                other => other.to_string(),
            })),
            Err(e) => Err(ToolError::Failed(e.to_string())),
        }
    }
}

/// The most of a result kept, in bytes of its JSON text: what a server
/// answers is recorded and sent to the model again on every later turn.
const MAX_RESULT: usize = 1 << 20;

/// `output`, or, past [`MAX_RESULT`], its text cut there, saying so.
fn capped(output: Value) -> Value {
    let size = match &output {
        Value::String(text) => text.len(),
        other => other.to_string().len(),
    };
    if size <= MAX_RESULT {
        return output;
    }
    let mut bytes = match output {
        Value::String(text) => text.into_bytes(),
        other => other.to_string().into_bytes(),
    };
    bytes.truncate(MAX_RESULT);
    Value::String(format!(
        "{}\n[cut at {MAX_RESULT} of {size} bytes]",
        crate::tools::lossy_text(bytes, true)
    ))
}

/// What the model is told about `info` of `server`: its mapped name, and
/// its schema as the HTTP APIs take one.
fn spec_of(server: &str, info: &McpToolInfo) -> ToolSpec {
    ToolSpec {
        name: mcp_tool_name(server, &info.name),
        description: info.description.clone(),
        input_schema: adapt_schema(&info.input_schema),
    }
}

/// A server's input schema as the HTTP APIs accept one: an object schema
/// with `properties` (OpenAI refuses one without), and no `$schema` (which
/// some APIs refuse, and no API needs). A schema that is not an object
/// schema at all takes anything: the server checks its own input.
fn adapt_schema(schema: &Value) -> Value {
    let mut adapted = match schema {
        Value::Object(fields) if fields.get("type").is_none_or(|t| t == "object") => fields.clone(),
        _ => Map::new(),
    };
    adapted.remove("$schema");
    adapted.insert("type".into(), Value::String("object".into()));
    adapted
        .entry("properties")
        .or_insert_with(|| Value::Object(Map::new()));
    Value::Object(adapted)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;

//! What the CLI agents that start MCP servers themselves (Claude Code,
//! Codex, Copilot) share in rendering the workflow's servers into their own
//! configuration: where an invocation's file goes, the headers an HTTP
//! server is reached with, and which of a server's tools the agent is
//! granted.

use std::collections::BTreeMap;
use std::path::PathBuf;

use application::ports::AgentRequest;
use domain::workflow::{McpGrant, McpServerDef, McpTransport};
use serde_json::{Value, json};

/// Where one invocation's MCP configuration is written: in this user's
/// private directory, named by the program, the node run and the call, so
/// no two invocations share one.
pub(crate) fn config_path(program: &str, request: &AgentRequest) -> PathBuf {
    super::private_dir().join(format!(
        "{program}-mcp-{}-{}.json",
        request.node_run_id, request.call_index
    ))
}

/// An HTTP server's headers, with `Authorization: Bearer TOKEN` when it
/// names a `bearer_token_env`: read now, into a file of this invocation
/// alone. An error names the server and the variable that is not set.
pub(crate) fn headers_with_token(
    server: &str,
    headers: &BTreeMap<String, String>,
    bearer_token_env: Option<&str>,
) -> Result<BTreeMap<String, String>, String> {
    let mut headers = headers.clone();
    if let Some(var) = bearer_token_env {
        headers.insert(
            "Authorization".into(),
            format!("Bearer {}", token(server, var)?),
        );
    }
    Ok(headers)
}

/// The value of a server's `bearer_token_env` variable.
pub(crate) fn token(server: &str, var: &str) -> Result<String, String> {
    std::env::var(var)
        .map_err(|_| format!("MCP server `{server}`: `bearer_token_env`: `{var}` is not set"))
}

/// The tools of `server` the agent is granted by name, or `None` when it is
/// granted every tool (`server/*`).
pub(crate) fn granted_tools<'a>(request: &'a AgentRequest, server: &str) -> Option<Vec<&'a str>> {
    let mut tools = Vec::new();
    for grant in &request.agent.tools {
        match grant.mcp() {
            Some(McpGrant::All { server: s }) if s == server => return None,
            Some(McpGrant::One { server: s, tool }) if s == server => tools.push(tool),
            _ => {}
        }
    }
    Some(tools)
}

/// A stdio server's `cwd:` as an absolute path: the workflow gives it
/// relative to the project directory, where awr runs, and a CLI would take
/// it relative to where it runs itself.
pub(crate) fn absolute_cwd(cwd: &str) -> String {
    std::path::absolute(cwd).map_or_else(|_| cwd.to_owned(), |p| p.display().to_string())
}

/// How one CLI's JSON configuration spells a server (Claude Code's
/// `--mcp-config`, Copilot's `--additional-mcp-config`, Gemini's settings).
pub(crate) struct Dialect {
    /// The `type` of a stdio server, if it takes one.
    pub stdio: Option<&'static str>,
    /// The `type` of an HTTP server, if it takes one.
    pub http: Option<&'static str>,
    /// The key of an HTTP server's address.
    pub url: &'static str,
    /// Whether a stdio server's `cwd` is written (absolute).
    pub cwd: bool,
}

/// Server `name` as `dialect` spells it, with its token read into its
/// headers; an error when the token's variable is not set.
pub(crate) fn json_server(
    name: &str,
    def: &McpServerDef,
    dialect: &Dialect,
) -> Result<Value, String> {
    let (kind, mut server) = match &def.transport {
        McpTransport::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            let mut server = json!({"command": command, "args": args, "env": env});
            if let Some(cwd) = cwd.as_deref().filter(|_| dialect.cwd) {
                server["cwd"] = json!(absolute_cwd(cwd));
            }
            (dialect.stdio, server)
        }
        McpTransport::Http {
            url,
            headers,
            bearer_token_env,
        } => {
            let headers = headers_with_token(name, headers, bearer_token_env.as_deref())?;
            (dialect.http, json!({dialect.url: url, "headers": headers}))
        }
    };
    if let Some(kind) = kind {
        server["type"] = json!(kind);
    }
    Ok(server)
}

//! The Codex CLI provider (`@openai/codex`, seen 0.169.0).
//!
//! Codex is run as `codex exec --json --skip-git-repo-check PROMPT` (resume:
//! `codex exec resume --json --skip-git-repo-check THREAD_ID PROMPT`) and
//! prints one JSON event per line; it runs its own tools, which we only
//! observe. This module maps that output into normalized
//! [`application::ports::AgentMessage`]s: [`wire`] declares the lines,
//! [`CodexDecoder`] maps them, and the shared [`crate::normalize`] layer
//! frames and repairs the raw bytes; the decoder's [`CliProgram`] impl is its
//! command line, which [`Codex`] (the shared [`crate::process::CliAgent`])
//! runs. Decoding is pure
//! so it is tested on recorded real output.

mod decode;
pub mod wire;

pub use decode::{CodexDecoder, SHELL_TOOL};

use std::collections::BTreeMap;

use application::ports::AgentRequest;
use domain::workflow::{McpServerDef, McpTransport, Timeout};

use crate::process::{CliAgent, CliProgram, flag, mcp_config, prompt_with_system};

/// Runs agents on the Codex CLI.
pub type Codex = CliAgent<CodexDecoder>;

impl CliProgram for CodexDecoder {
    const EXECUTABLE: &'static str = "codex";

    /// A resumed thread's `turn.completed` usage is the thread's total.
    const REPORTS_SESSION_TOTALS: bool = true;

    /// The variables the tokens of its HTTP MCP servers are read from,
    /// which Codex reads itself: passed to it although they hold keys.
    fn needed_keys(request: &AgentRequest) -> Result<Vec<String>, String> {
        let mut vars = Vec::new();
        for (name, def) in &request.mcp_servers {
            if let McpTransport::Http {
                bearer_token_env: Some(var),
                ..
            } = &def.transport
            {
                mcp_config::token(name, var)?;
                vars.push(var.clone());
            }
        }
        Ok(vars)
    }

    /// Codex has no system prompt flag in `exec` mode, so the agent's
    /// system prompt leads the prompt text.
    fn args(request: &AgentRequest) -> Vec<String> {
        let agent = &request.agent;
        let mut args: Vec<String> = vec!["exec".into()];
        if request.resume.is_some() {
            args.push("resume".into());
        }
        args.extend(["--json".into(), "--skip-git-repo-check".into()]);
        args.extend(flag("--model", agent.model.as_ref()));
        for (name, def) in &request.mcp_servers {
            // One override a server, after the user's configuration: a
            // server of the user's own under the same name is replaced, any
            // other stays (Codex has no switch that leaves them out).
            args.extend([
                "-c".into(),
                format!("mcp_servers.{name}={}", server(request, name, def)),
            ]);
        }
        args.extend(agent.args.iter().cloned());
        if let Some(thread) = &request.resume {
            args.push(thread.to_string());
        }
        args.push(prompt_with_system(request));
        args
    }
}

/// A server as Codex's `mcp_servers.NAME` reads it, a TOML inline table:
/// only the tools the agent is granted (`enabled_tools`), the server's
/// timeouts, and for an HTTP server the variable its token is read from
/// (Codex reads it itself, so the token is never on the command line).
fn server(request: &AgentRequest, name: &str, def: &McpServerDef) -> toml::Value {
    let strings =
        |items: &[String]| toml::Value::Array(items.iter().map(|s| s.as_str().into()).collect());
    let table = |map: &BTreeMap<String, String>| {
        toml::Value::Table(
            map.iter()
                .map(|(k, v)| (k.clone(), v.as_str().into()))
                .collect(),
        )
    };
    let mut server = toml::Table::new();
    match &def.transport {
        McpTransport::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            server.insert("command".into(), command.as_str().into());
            server.insert("args".into(), strings(args));
            server.insert("env".into(), table(env));
            if let Some(cwd) = cwd {
                server.insert("cwd".into(), mcp_config::absolute_cwd(cwd).into());
            }
        }
        McpTransport::Http {
            url,
            headers,
            bearer_token_env,
        } => {
            server.insert("url".into(), url.as_str().into());
            server.insert("http_headers".into(), table(headers));
            if let Some(var) = bearer_token_env {
                server.insert("bearer_token_env_var".into(), var.as_str().into());
            }
        }
    }
    let seconds = |t: &Timeout| toml::Value::Float(t.0.as_secs_f64());
    server.insert("startup_timeout_sec".into(), seconds(&def.startup_timeout));
    server.insert("tool_timeout_sec".into(), seconds(&def.tool_timeout));
    if let Some(tools) = mcp_config::granted_tools(request, name) {
        server.insert(
            "enabled_tools".into(),
            tools
                .into_iter()
                .map(toml::Value::from)
                .collect::<Vec<_>>()
                .into(),
        );
    }
    toml::Value::Table(server)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod process_tests {
    //! The provider against fake executables printing what the real CLI printed.

    use super::*;
    use crate::normalize::Decoded;
    use crate::normalize::testing::{agent_request, completed};
    use application::ports::QueryFn;
    use application::ports::{AgentMessage, QueryError};
    use domain::SessionId;
    use domain::workflow::{Provider, ToolGrant};
    use futures::StreamExt;
    use std::path::Path;

    fn replaying(dir: &Path, scenario: &str) -> String {
        crate::normalize::testing::replaying(dir, "codex", scenario)
    }

    fn request(executable: String, resume: Option<SessionId>) -> AgentRequest {
        let mut request = agent_request(Provider::Codex, Some(executable));
        request.agent.system_prompt = "Be brief.".into();
        request.resume = resume;
        request
    }

    #[test]
    fn resume_uses_exec_resume_with_the_thread_id() {
        let cmd = Codex::command(&request(
            "codex".into(),
            Some(SessionId::new("th-1").unwrap()),
        ));
        assert_eq!(
            cmd.args,
            [
                "exec",
                "resume",
                "--json",
                "--skip-git-repo-check",
                "th-1",
                "Be brief.\n\nrun echo hi"
            ]
        );
    }

    #[tokio::test]
    async fn usage_after_a_resume_is_this_invocations_own() {
        let dir = tempfile::tempdir().unwrap();
        let codex = Codex::default();
        let first: Vec<Decoded> = codex
            .query(request(replaying(dir.path(), "tool"), None))
            .await
            .unwrap()
            .collect()
            .await;
        let Some(session_id) = first.iter().find_map(|m| match m {
            Ok(AgentMessage::Session { session_id, .. }) => Some(session_id.clone()),
            _ => None,
        }) else {
            panic!("{first:?}")
        };
        assert_eq!(
            completed(&first).usage.input_tokens,
            200,
            "240 less 40 cached"
        );
        // What the run's log holds for the thread: the first invocation's usage.
        let mut resumed = request(replaying(dir.path(), "resume"), Some(session_id));
        resumed.session_usage = completed(&first).usage.clone();
        let second: Vec<Decoded> = codex.query(resumed).await.unwrap().collect().await;
        let usage = &completed(&second).usage;
        assert_eq!(
            (usage.input_tokens, usage.output_tokens),
            (100, 25),
            "not the thread's 300/75"
        );
    }

    /// Each server the agent is granted tools of is one `-c` override
    /// before the prompt, holding only the granted tools; an HTTP server's
    /// token variable is named, and passed to Codex, never its value.
    #[test]
    fn mcp_servers_are_config_overrides_with_the_granted_tools() {
        let mut request = request("codex".into(), None);
        request.agent.tools = ["ev/echo", "ev/get-sum", "web/*"]
            .map(ToolGrant::new)
            .to_vec();
        let yaml = "name: m\nmcp_servers:\n  ev: {command: srv, args: [stdio], env: {A: b}, cwd: tools, tool_timeout: 5s}\n  web: {url: 'http://127.0.0.1:9/mcp', headers: {X-Team: t}, bearer_token_env: PATH, startup_timeout: 2500ms}\nagents: {a: {provider: mock}}\nsteps: [{agent: a}]\n";
        request.mcp_servers = domain::WorkflowDef::from_yaml(yaml).unwrap().mcp_servers;
        let args = Codex::command(&request).args;
        let overrides: Vec<toml::Table> = (args.windows(2))
            .filter(|w| w[0] == "-c")
            .map(|w| w[1].parse().unwrap())
            .collect();
        let ev = &overrides[0]["mcp_servers"]["ev"];
        assert_eq!(ev["command"].as_str(), Some("srv"));
        assert_eq!(ev["args"].as_array().unwrap().len(), 1);
        assert_eq!(ev["env"]["A"].as_str(), Some("b"));
        let cwd = std::env::current_dir().unwrap().join("tools");
        assert_eq!(ev["cwd"].as_str(), Some(cwd.to_str().unwrap()));
        assert_eq!(ev["tool_timeout_sec"].as_float(), Some(5.0));
        let enabled: Vec<_> = (ev["enabled_tools"].as_array().unwrap().iter())
            .map(|t| t.as_str().unwrap())
            .collect();
        assert_eq!(enabled, ["echo", "get-sum"]);
        let web = &overrides[1]["mcp_servers"]["web"];
        assert_eq!(web["url"].as_str(), Some("http://127.0.0.1:9/mcp"));
        assert_eq!(web["http_headers"]["X-Team"].as_str(), Some("t"));
        assert_eq!(web["bearer_token_env_var"].as_str(), Some("PATH"));
        assert_eq!(web["startup_timeout_sec"].as_float(), Some(2.5));
        assert!(web.get("enabled_tools").is_none(), "every tool: {web}");
        // The overrides come before the prompt, which is last.
        assert!(args.last().unwrap().contains("Be brief."));
        let token = std::env::var("PATH").unwrap();
        assert!(!args.iter().any(|a| a.contains(&token)), "{args:?}");
        assert_eq!(CodexDecoder::needed_keys(&request).unwrap(), ["PATH"]);
    }

    /// A token variable that is not set fails the invocation, naming it.
    #[tokio::test]
    async fn an_unset_token_variable_fails_the_invocation() {
        let mut request = request("codex".into(), None);
        request.agent.tools = vec![ToolGrant::new("s/*")];
        let yaml = "name: m\nmcp_servers:\n  s: {url: 'http://127.0.0.1:9/mcp', bearer_token_env: AWR_TEST_UNSET_TOKEN_VAR}\nagents: {a: {provider: mock}}\nsteps: [{agent: a}]\n";
        request.mcp_servers = domain::WorkflowDef::from_yaml(yaml).unwrap().mcp_servers;
        let Err(QueryError::Config(why)) = Codex::default().query(request).await else {
            panic!("the invocation went on")
        };
        assert!(
            why.contains("`AWR_TEST_UNSET_TOKEN_VAR` is not set"),
            "{why}"
        );
    }
}

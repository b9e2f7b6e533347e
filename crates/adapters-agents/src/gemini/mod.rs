//! The Gemini CLI provider (`@google/gemini-cli`, seen 0.61.0).
//!
//! Gemini CLI is run as `gemini -p PROMPT --output-format stream-json -m
//! MODEL --yolo [--resume SESSION_ID]` and prints one JSON object per line;
//! it runs its own tools, which we only observe. This module maps that output
//! into normalized [`application::ports::AgentMessage`]s: [`wire`] declares
//! the lines, [`GeminiDecoder`] maps them, and the shared
//! [`crate::normalize`] layer frames and repairs the raw bytes. The decoder's
//! [`CliProgram`] impl is its command line, which [`Gemini`] (the shared
//! [`crate::process::CliAgent`]) runs. Decoding is pure, so it is tested on
//! recorded real output.

mod decode;
pub mod wire;

pub use decode::GeminiDecoder;

use std::path::{Path, PathBuf};

use application::ports::AgentRequest;
use serde_json::{Value, json};

use crate::process::{CliAgent, CliProgram, Prepared, flag, mcp_config, print_args};

/// Runs agents on the Gemini CLI. Name a model: the default `auto` makes an
/// extra routing call first.
pub type Gemini = CliAgent<GeminiDecoder>;

impl CliProgram for GeminiDecoder {
    const EXECUTABLE: &'static str = "gemini";

    fn args(request: &AgentRequest) -> Vec<String> {
        let agent = &request.agent;
        // No system prompt flag in this mode: the system prompt leads the prompt.
        // `--yolo`: without it the shell tool is not even offered.
        let mut args = print_args(request, "stream-json", "--yolo");
        // A grant of a declared server's tools is the server's
        // `includeTools`, not a rule of the CLI's.
        let declared = |grant: &&domain::workflow::ToolGrant| {
            (grant.mcp()).is_some_and(|m| request.mcp_servers.contains_key(m.server()))
        };
        let tools = (agent.tools.iter().filter(|g| !declared(g)))
            .map(|g| g.name.as_str())
            .collect::<Vec<_>>()
            .join(",");
        args.extend(flag("-m", agent.model.as_ref()));
        args.extend(flag(
            "--allowed-tools",
            Some(tools).filter(|t| !t.is_empty()),
        ));
        if !request.mcp_servers.is_empty() {
            // Only the workflow's servers, not the project's.
            let names = request.mcp_servers.keys().cloned().collect::<Vec<_>>();
            args.extend(["--allowed-mcp-server-names".into(), names.join(",")]);
        }
        args.extend(flag("--resume", request.resume.as_ref()));
        args.extend(agent.args.iter().cloned());
        args
    }

    /// The workflow's MCP servers, in a home of the invocation's own
    /// (`GEMINI_CLI_HOME`): the CLI reads servers only from settings files,
    /// so its `.gemini` there holds the user's settings with the servers
    /// put in, and links to everything else of the user's `.gemini` (its
    /// sessions, credentials and history are the user's, shared, never
    /// copied). The user's own files are read, never written.
    fn files(request: &AgentRequest) -> Result<Vec<Prepared>, String> {
        if request.mcp_servers.is_empty() {
            return Ok(Vec::new());
        }
        let home = mcp_home(request);
        let dot = home.join(".gemini");
        let user_home = user_home(request)?;
        let user = user_home.join(".gemini");
        let mut made = vec![Prepared::Dir(home.clone()), Prepared::Dir(dot.clone())];
        // Read from the home itself when no `.env` is nearer the project.
        if user_home.join(".env").exists() {
            made.push(Prepared::Link(home.join(".env"), user_home.join(".env")));
        }
        let entries = match std::fs::read_dir(&user) {
            Ok(entries) => entries.flatten().map(|e| e.file_name()).collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(format!("cannot read {}: {e}", user.display())),
        };
        for name in entries.into_iter().filter(|n| n != SETTINGS) {
            made.push(Prepared::Link(dot.join(&name), user.join(&name)));
        }
        let mut settings = user_settings(&user.join(SETTINGS))?;
        settings["mcpServers"] = servers(request)?;
        made.push(Prepared::File(dot.join(SETTINGS), settings.to_string()));
        Ok(made)
    }

    fn env(request: &AgentRequest) -> Vec<(String, String)> {
        match request.mcp_servers.is_empty() {
            true => Vec::new(),
            false => vec![(HOME_VAR.into(), mcp_home(request).display().to_string())],
        }
    }
}

/// The variable that moves Gemini CLI's home (where it finds `.gemini`).
const HOME_VAR: &str = "GEMINI_CLI_HOME";

/// The name of a settings file in `.gemini`.
const SETTINGS: &str = "settings.json";

/// The home one invocation with MCP servers runs under.
fn mcp_home(request: &AgentRequest) -> PathBuf {
    crate::process::private_dir().join(format!(
        "gemini-home-{}-{}",
        request.node_run_id, request.call_index
    ))
}

/// The home the agent's CLI would use: the agent's own `GEMINI_CLI_HOME` or
/// `HOME`, else awr's.
fn user_home(request: &AgentRequest) -> Result<PathBuf, String> {
    let env = &request.agent.env;
    (env.get(HOME_VAR).or(env.get("HOME")).cloned())
        .or_else(|| std::env::var(HOME_VAR).ok())
        .or_else(|| std::env::var("HOME").ok())
        .filter(|home| !home.is_empty())
        .map(PathBuf::from)
        .ok_or_else(|| format!("cannot tell Gemini CLI's home: neither {HOME_VAR} nor HOME is set"))
}

/// The user's settings (`{}` when there is no file), which must be a JSON
/// object.
fn user_settings(path: &Path) -> Result<Value, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(json!({})),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    match serde_json::from_str::<Value>(&text) {
        Ok(settings) if settings.is_object() => Ok(settings),
        Ok(_) => Err(format!(
            "{}: the settings are not a JSON object",
            path.display()
        )),
        Err(e) => Err(format!(
            "{}: awr reads the settings to give the agent its MCP servers, and they are not plain JSON: {e}",
            path.display()
        )),
    }
}

/// The agent's MCP servers as the settings' `mcpServers`: each offering the
/// tools granted by name (`includeTools`; all of them for `server/*`), a
/// call taking at most the server's `tool_timeout` (`timeout`, in
/// milliseconds). An error when a token variable is not set.
fn servers(request: &AgentRequest) -> Result<Value, String> {
    let dialect = mcp_config::Dialect {
        stdio: None,
        http: None,
        url: "httpUrl",
        cwd: true,
    };
    let mut servers = serde_json::Map::new();
    for (name, def) in &request.mcp_servers {
        let mut server = mcp_config::json_server(name, def, &dialect)?;
        if let Some(tools) = mcp_config::granted_tools(request, name) {
            server["includeTools"] = json!(tools);
        }
        let millis = u64::try_from(def.tool_timeout.0.as_millis()).unwrap_or(u64::MAX);
        server["timeout"] = json!(millis);
        servers.insert(name.clone(), server);
    }
    Ok(Value::Object(servers))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::normalize::testing::agent_request;
    use domain::workflow::{Provider, ToolGrant};

    /// An agent granted tools of `ev` (two by name) and `web` (all), its
    /// home the given directory.
    fn request(home: &Path) -> AgentRequest {
        let mut request = agent_request(Provider::Gemini, None);
        request.agent.tools = ["ev/echo", "ev/get-sum", "web/*", "run_shell_command"]
            .map(ToolGrant::new)
            .to_vec();
        (request.agent.env).insert("HOME".into(), home.display().to_string());
        let yaml = "name: m\nmcp_servers:\n  ev: {command: srv, args: [stdio], env: {A: b}, cwd: tools, tool_timeout: 5s}\n  web: {url: 'http://127.0.0.1:9/mcp', headers: {X-Team: t}}\nagents: {a: {provider: mock}}\nsteps: [{agent: a}]\n";
        request.mcp_servers = domain::WorkflowDef::from_yaml(yaml).unwrap().mcp_servers;
        request
    }

    /// The invocation's home holds the user's settings with the workflow's
    /// servers put in, and links to the rest of the user's `.gemini`; the
    /// CLI is pointed at it and allowed the workflow's servers alone.
    #[test]
    fn mcp_servers_go_in_settings_of_a_home_of_the_invocations_own() {
        let user = tempfile::tempdir().unwrap();
        let dot = user.path().join(".gemini");
        std::fs::create_dir_all(dot.join("tmp")).unwrap();
        std::fs::write(
            dot.join(SETTINGS),
            r#"{"security": {"auth": {"selectedType": "gemini-api-key"}}, "mcpServers": {"mine": {"command": "x"}}}"#,
        )
        .unwrap();
        std::fs::write(dot.join("oauth_creds.json"), "{}").unwrap();
        let request = request(user.path());
        let home = mcp_home(&request);
        let made = GeminiDecoder::files(&request).unwrap();
        assert_eq!(made[0], Prepared::Dir(home.clone()));
        assert_eq!(made[1], Prepared::Dir(home.join(".gemini")));
        for name in ["tmp", "oauth_creds.json"] {
            let link = Prepared::Link(home.join(".gemini").join(name), dot.join(name));
            assert!(made.contains(&link), "{made:?}");
        }
        let Some(Prepared::File(path, text)) = made.last() else {
            panic!("{made:?}")
        };
        assert_eq!(path, &home.join(".gemini").join(SETTINGS));
        let settings: Value = serde_json::from_str(text).unwrap();
        assert_eq!(
            settings["security"]["auth"]["selectedType"],
            "gemini-api-key"
        );
        let cwd = std::env::current_dir().unwrap().join("tools");
        assert_eq!(
            settings["mcpServers"],
            json!({
                "ev": {"command": "srv", "args": ["stdio"], "env": {"A": "b"},
                    "cwd": cwd, "includeTools": ["echo", "get-sum"], "timeout": 5000},
                "web": {"httpUrl": "http://127.0.0.1:9/mcp", "headers": {"X-Team": "t"},
                    "timeout": 60000},
            })
        );
        let command = crate::gemini::Gemini::command(&request);
        assert_eq!(command.env.get(HOME_VAR), Some(&home.display().to_string()));
        let args = command.args.join(" ");
        assert!(args.contains("--allowed-mcp-server-names ev,web"), "{args}");
        assert!(
            args.contains("--allowed-tools run_shell_command "),
            "{args}"
        );
    }

    /// Settings that are not JSON awr can read fail the invocation, naming
    /// the file; a user with no `.gemini` at all gets one of the workflow's
    /// servers alone.
    #[test]
    fn unreadable_settings_are_named_and_missing_ones_are_empty() {
        let user = tempfile::tempdir().unwrap();
        let request = request(user.path());
        let made = GeminiDecoder::files(&request).unwrap();
        assert_eq!(made.len(), 3, "{made:?}");
        let dot = user.path().join(".gemini");
        std::fs::create_dir_all(&dot).unwrap();
        std::fs::write(dot.join(SETTINGS), "{ // a comment\n}").unwrap();
        let why = GeminiDecoder::files(&request).unwrap_err();
        assert!(
            why.contains("settings.json") && why.contains("not plain JSON"),
            "{why}"
        );
        std::fs::write(dot.join(SETTINGS), "[]").unwrap();
        let why = GeminiDecoder::files(&request).unwrap_err();
        assert!(why.contains("not a JSON object"), "{why}");
    }

    /// Without servers nothing is made and the CLI's home is its own.
    #[test]
    fn no_server_no_home() {
        let request = agent_request(Provider::Gemini, None);
        assert!(GeminiDecoder::files(&request).unwrap().is_empty());
        assert!(
            !crate::gemini::Gemini::command(&request)
                .env
                .contains_key(HOME_VAR)
        );
    }
}

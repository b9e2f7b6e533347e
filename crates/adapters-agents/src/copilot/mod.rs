//! The Copilot CLI provider (`@github/copilot`, seen 1.0.102).
//!
//! Copilot CLI is run as `copilot -p PROMPT --output-format json
//! --allow-all-tools --no-ask-user [--resume=SESSION_ID]` and prints one JSON
//! object per line; it runs its own tools, which we only observe. This module
//! maps that output into normalized [`application::ports::AgentMessage`]s:
//! [`wire`] declares the lines, [`CopilotDecoder`] maps them, and the shared
//! [`crate::normalize`] layer frames and repairs the raw bytes; the
//! decoder's [`CliProgram`] impl is its command line, which [`Copilot`] (the
//! shared [`crate::process::CliAgent`]) runs. Decoding is pure, so it is tested on
//! recorded real output.

mod decode;
pub mod wire;

pub use decode::CopilotDecoder;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use application::ports::{AgentMessage, AgentRequest};
use domain::event::{ModelUsage, Usage};
use domain::workflow::{McpGrant, ToolGrant};
use serde_json::{Value, json};

use crate::normalize::Decoded;
use crate::process::{CliAgent, CliProgram, Prepared, flag, mcp_config, print_args};

/// Runs agents on the GitHub Copilot CLI.
pub type Copilot = CliAgent<CopilotDecoder>;

/// Where one invocation's usage file goes: unique per node execution.
fn usage_file(request: &AgentRequest) -> PathBuf {
    std::env::temp_dir().join(format!("awr-copilot-usage-{}.json", request.node_run_id))
}

/// The most a usage file is read of: its totals take a few hundred bytes.
const MAX_USAGE_FILE: u64 = 1 << 20;

/// The text of the usage file at `path`: a regular file only, opened
/// without blocking and read up to [`MAX_USAGE_FILE`]. The CLI, or what
/// replaced it, may have left a FIFO or a device there, and a blocking read
/// would stall the run past every timeout.
fn usage_text(path: &Path) -> Option<String> {
    use rustix::fs::{Mode, OFlags};
    use std::io::Read;
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let file = std::fs::File::from(fd);
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut text = String::new();
    file.take(MAX_USAGE_FILE).read_to_string(&mut text).ok()?;
    Some(text)
}

/// The totals of a Copilot usage file: summed over its models (saturating:
/// the counts are the CLI's), and per model.
pub fn read_usage_file(path: &Path) -> Option<(Usage, BTreeMap<String, ModelUsage>)> {
    let text = usage_text(path)?;
    let file: Value = serde_json::from_str(&text).ok()?;
    let mut total = Usage::default();
    let mut per_model = BTreeMap::new();
    for (model, metrics) in file.get("modelMetrics")?.as_object()? {
        let usage = &metrics["usage"];
        let count = |field: &str| usage[field].as_u64().unwrap_or(0);
        let add =
            |sum: Option<u64>, field: &str| Some(sum.unwrap_or(0).saturating_add(count(field)));
        total.input_tokens = total.input_tokens.saturating_add(count("inputTokens"));
        total.output_tokens = total.output_tokens.saturating_add(count("outputTokens"));
        total.cache_read_input_tokens = add(total.cache_read_input_tokens, "cacheReadTokens");
        total.cache_creation_input_tokens =
            add(total.cache_creation_input_tokens, "cacheWriteTokens");
        per_model.insert(
            model.clone(),
            ModelUsage {
                extra: Default::default(),
                input_tokens: count("inputTokens"),
                output_tokens: count("outputTokens"),
            },
        );
    }
    Some((total, per_model))
}

/// The Copilot CLI's command line, and the usage its sessions reported.
///
/// Its session id appears only on the final line, and token counts are not
/// printed on stdout at all: the CLI writes them to a `--usage-output-file`,
/// read when the run ends.
impl CliProgram for CopilotDecoder {
    const EXECUTABLE: &'static str = "copilot";

    /// The usage file holds a resumed session's totals.
    const REPORTS_SESSION_TOTALS: bool = true;

    /// The command line for one invocation; usage goes to its usage file.
    fn args(request: &AgentRequest) -> Vec<String> {
        let agent = &request.agent;
        // No system prompt flag in this mode: the system prompt leads the prompt.
        let mut args = print_args(request, "json", "--no-ask-user");
        if agent.tools.is_empty() {
            args.push("--allow-all-tools".into());
        } else {
            for grant in &agent.tools {
                args.extend(["--allow-tool".into(), allowed(grant, request)]);
            }
        }
        if !request.mcp_servers.is_empty() {
            // Added to the user's own servers for this session alone: the
            // CLI has no flag that leaves those out.
            let config = mcp_config::config_path("copilot", request);
            args.extend([
                "--additional-mcp-config".into(),
                format!("@{}", config.display()),
            ]);
        }
        args.extend(flag("--model", agent.model.as_ref()));
        if let Some(session) = &request.resume {
            args.push(format!("--resume={session}"));
        } else if let Some(session) = &request.session_id {
            // The id is on record before the CLI starts (design §4.3): it
            // prints its own only on its last line.
            args.push(format!("--session-id={session}"));
        }
        args.extend([
            "--usage-output-file".into(),
            usage_file(request).display().to_string(),
        ]);
        args.extend(agent.args.iter().cloned());
        args
    }

    fn files(request: &AgentRequest) -> Result<Vec<Prepared>, String> {
        match request.mcp_servers.is_empty() {
            true => Ok(Vec::new()),
            false => Ok(vec![Prepared::File(
                mcp_config::config_path("copilot", request),
                copilot_mcp_config(request)?,
            )]),
        }
    }

    /// Reads the usage file into the result (the CLI has exited, so the
    /// file is whole) and removes it.
    fn ended(request: &AgentRequest, last: &mut Decoded) {
        let path = usage_file(request);
        if let Ok(AgentMessage::Completed(result)) = last
            && let Some((total, per_model)) = read_usage_file(&path)
        {
            result.usage = total;
            result.model_usage = Some(per_model);
        }
        let _ = std::fs::remove_file(&path);
    }
}

/// The `--allow-tool` rule that allows `grant`: a tool of a server the
/// workflow declares as Copilot names it (`SERVER(TOOL)`, every tool of a
/// server `SERVER`), anything else as written.
fn allowed(grant: &ToolGrant, request: &AgentRequest) -> String {
    let declared = |server: &str| request.mcp_servers.contains_key(server);
    match grant.mcp() {
        Some(McpGrant::One { server, tool }) if declared(server) => format!("{server}({tool})"),
        Some(McpGrant::All { server }) if declared(server) => server.to_owned(),
        _ => grant.name.clone(),
    }
}

/// The agent's MCP servers as `--additional-mcp-config` reads them: each
/// offers the agent only the tools it is granted (`tools`), and a call may
/// take the server's `tool_timeout` (`timeout`, in milliseconds). An error
/// when a token variable is not set.
fn copilot_mcp_config(request: &AgentRequest) -> Result<String, String> {
    let dialect = mcp_config::Dialect {
        stdio: Some("local"),
        http: Some("http"),
        url: "url",
        cwd: false,
    };
    let mut servers = serde_json::Map::new();
    for (name, def) in &request.mcp_servers {
        let mut server = mcp_config::json_server(name, def, &dialect)?;
        server["tools"] = match mcp_config::granted_tools(request, name) {
            Some(tools) => json!(tools),
            None => json!(["*"]),
        };
        // The CLI takes 1 to 2^32 - 1 ms.
        let millis = def
            .tool_timeout
            .0
            .as_millis()
            .clamp(1, u128::from(u32::MAX));
        server["timeout"] = json!(u64::try_from(millis).unwrap_or(u64::from(u32::MAX)));
        servers.insert(name.clone(), server);
    }
    Ok(json!({"mcpServers": servers}).to_string())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod usage_tests {
    //! The usage file the genuine Copilot CLI wrote (`--usage-output-file`).

    use super::*;
    use crate::normalize::testing::agent_request;

    #[test]
    fn a_real_usage_file_gives_totals_and_per_model_usage() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/copilot/usage-output.json");
        let (total, per_model) = read_usage_file(&path).unwrap();
        assert_eq!((total.input_tokens, total.output_tokens), (120, 25));
        assert_eq!(total.cache_read_input_tokens, Some(0));
        assert_eq!(per_model["gpt-5"].output_tokens, 25);
        assert!(read_usage_file(Path::new("/nonexistent/usage.json")).is_none());
    }

    /// A usage file is the CLI's, or whatever took its place: counts that
    /// overflow saturate, and a FIFO is not waited on.
    #[test]
    fn a_hostile_usage_file_neither_panics_nor_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let huge = dir.path().join("huge.json");
        let max = u64::MAX;
        std::fs::write(
            &huge,
            format!(r#"{{"modelMetrics": {{"a": {{"usage": {{"inputTokens": {max}, "cacheReadTokens": {max}}}}}, "b": {{"usage": {{"inputTokens": {max}, "cacheReadTokens": {max}}}}}}}}}"#),
        )
        .unwrap();
        let (total, _) = read_usage_file(&huge).unwrap();
        assert_eq!(total.input_tokens, u64::MAX);
        assert_eq!(total.cache_read_input_tokens, Some(u64::MAX));
        let fifo = dir.path().join("fifo.json");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        assert!(read_usage_file(&fifo).is_none(), "a FIFO is no usage file");
        assert!(read_usage_file(dir.path()).is_none(), "nor a directory");
    }

    #[test]
    fn the_command_asks_for_the_usage_file() {
        let request = agent_request(domain::workflow::Provider::Copilot, None);
        let path = usage_file(&request);
        let cmd = Copilot::command(&request);
        let at = cmd
            .args
            .iter()
            .position(|a| a == "--usage-output-file")
            .unwrap();
        assert_eq!(cmd.args[at + 1], path.display().to_string());
    }

    #[test]
    fn a_new_session_starts_under_the_id_on_record_and_a_resume_names_its_own() {
        let id = "0b6f8f4e-3c1a-4d2b-9f3e-1a2b3c4d5e6f";
        let mut request = agent_request(domain::workflow::Provider::Copilot, None);
        request.session_id = Some(domain::SessionId::new(id).unwrap());
        let args = Copilot::command(&request).args;
        assert!(args.contains(&format!("--session-id={id}")), "{args:?}");
        assert!(!args.iter().any(|a| a.starts_with("--resume")), "{args:?}");
        request.session_id = None;
        request.resume = Some(domain::SessionId::new(id).unwrap());
        let args = Copilot::command(&request).args;
        assert!(args.contains(&format!("--resume={id}")), "{args:?}");
        assert!(
            !args.iter().any(|a| a.starts_with("--session-id")),
            "{args:?}"
        );
    }

    /// The workflow's servers go in a file of the invocation's own, each
    /// offering only the tools granted; grants of them are allowed by the
    /// CLI's own rule names; a token is read into the file.
    #[test]
    fn mcp_servers_are_a_config_file_offering_the_granted_tools() {
        let mut request = agent_request(domain::workflow::Provider::Copilot, None);
        request.agent.tools = ["ev/echo", "ev/get-sum", "web/*", "shell(git)"]
            .map(ToolGrant::new)
            .to_vec();
        // A variable every test process has stands in for a token's.
        let token = std::env::var("PATH").unwrap();
        let yaml = "name: m\nmcp_servers:\n  ev: {command: srv, args: [stdio], env: {A: b}, tool_timeout: 5s}\n  web: {url: 'http://127.0.0.1:9/mcp', headers: {X-Team: t}, bearer_token_env: PATH}\nagents: {a: {provider: mock}}\nsteps: [{agent: a}]\n";
        request.mcp_servers = domain::WorkflowDef::from_yaml(yaml).unwrap().mcp_servers;
        let args = Copilot::command(&request).args.join(" ");
        let path = mcp_config::config_path("copilot", &request);
        assert!(
            args.contains(&format!("--additional-mcp-config @{}", path.display())),
            "{args}"
        );
        for rule in ["ev(echo)", "ev(get-sum)", "web", "shell(git)"] {
            assert!(args.contains(&format!("--allow-tool {rule}")), "{args}");
        }
        assert!(!args.contains("--allow-all-tools"), "{args}");
        let files = CopilotDecoder::files(&request).unwrap();
        let [Prepared::File(file, text)] = files.as_slice() else {
            panic!("{files:?}")
        };
        assert_eq!(file, &path);
        let config: Value = serde_json::from_str(text).unwrap();
        assert_eq!(
            config,
            json!({"mcpServers": {
                "ev": {"type": "local", "command": "srv", "args": ["stdio"], "env": {"A": "b"},
                    "tools": ["echo", "get-sum"], "timeout": 5000},
                "web": {"type": "http", "url": "http://127.0.0.1:9/mcp",
                    "headers": {"X-Team": "t", "Authorization": format!("Bearer {token}")},
                    "tools": ["*"], "timeout": 60000},
            }})
        );
        // No server: no file, no flag.
        request.mcp_servers.clear();
        assert!(CopilotDecoder::files(&request).unwrap().is_empty());
        let args = Copilot::command(&request).args.join(" ");
        assert!(!args.contains("--additional-mcp-config"), "{args}");
    }
}

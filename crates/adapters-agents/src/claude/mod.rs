//! The Claude Code provider (`@anthropic-ai/claude-code`, seen 2.1.330).
//!
//! Claude Code is run as `claude -p PROMPT --output-format stream-json
//! --verbose ...` and prints one JSON object per line; it runs its own tools,
//! which we only observe. This module maps that output into normalized
//! [`application::ports::AgentMessage`]s: [`wire`] declares the lines,
//! [`ClaudeDecoder`] maps them, and the shared [`crate::normalize`] layer
//! frames and repairs the raw bytes; the decoder's [`CliProgram`] impl is its
//! command line, which [`ClaudeCode`] (the shared [`crate::process::CliAgent`])
//! runs. Decoding is
//! pure, so it is tested on recorded real output; the process side with fake
//! executables.

mod decode;
pub mod wire;

pub use decode::ClaudeDecoder;

use std::path::PathBuf;

use application::ports::{AgentRequest, PERMISSION_SERVER, PERMISSION_TOOL};
use domain::workflow::{McpGrant, ToolGrant};
use serde_json::json;

use crate::process::{CliAgent, CliProgram, Prepared, flag, mcp_config};

/// Tools Claude Code may use without asking when the agent lists none: the
/// workflow author chose an autonomous agent, and `-p` mode cannot ask.
/// Names as the CLI's `init` line lists them.
pub const DEFAULT_ALLOWED_TOOLS: &[&str] = &[
    "Bash",
    "Edit",
    "Read",
    "Write",
    "NotebookEdit",
    "WebFetch",
    "WebSearch",
];

/// Runs agents on the Claude Code CLI.
pub type ClaudeCode = CliAgent<ClaudeDecoder>;

impl CliProgram for ClaudeDecoder {
    const EXECUTABLE: &'static str = "claude";

    fn args(request: &AgentRequest) -> Vec<String> {
        let agent = &request.agent;
        let system_prompt = Some(&agent.system_prompt).filter(|p| !p.is_empty());
        // A grant that asks a person is not allowed up front: Claude Code
        // asks awr's permission prompt before each call of it.
        let tools = if agent.tools.is_empty() {
            DEFAULT_ALLOWED_TOOLS.join(",")
        } else {
            (agent.tools.iter())
                .filter(|grant| grant.requires_approval.is_none())
                .map(|grant| allowed(grant, request))
                .collect::<Vec<_>>()
                .join(",")
        };
        let mut args: Vec<String> = vec![
            "-p".into(),
            request.prompt.clone(),
            "--output-format".into(),
            "stream-json".into(),
            "--verbose".into(),
        ];
        args.extend(flag("--model", agent.model.as_ref()));
        args.extend(flag("--append-system-prompt", system_prompt));
        args.extend(flag("--max-turns", agent.max_turns));
        if !tools.is_empty() {
            args.extend(["--allowedTools".into(), tools]);
        }
        if request.mcp_servers.contains_key(PERMISSION_SERVER) {
            args.extend([
                "--permission-prompt-tool".into(),
                format!("mcp__{PERMISSION_SERVER}__{PERMISSION_TOOL}"),
            ]);
        }
        if let Some(session) = &request.resume {
            args.extend(["--resume".into(), session.to_string()]);
            if let Some(copy) = request.session_id.as_ref().filter(|_| request.fork_session) {
                // A forked run's agent: a copy of the parent run's session,
                // under the id on record (the CLI takes `--session-id` with
                // `--resume` only together with `--fork-session`).
                args.extend([
                    "--fork-session".into(),
                    "--session-id".into(),
                    copy.to_string(),
                ]);
            }
        } else if let Some(session) = &request.session_id {
            // The id is on record before the CLI starts (design §4.3).
            args.extend(["--session-id".into(), session.to_string()]);
        }
        if !request.mcp_servers.is_empty() {
            // Its servers are the workflow's alone, not the user's.
            args.extend([
                "--mcp-config".into(),
                mcp_config_path(request).display().to_string(),
                "--strict-mcp-config".into(),
            ]);
        }
        args.extend(agent.args.iter().cloned());
        args
    }

    fn files(request: &AgentRequest) -> Result<Vec<Prepared>, String> {
        match request.mcp_servers.is_empty() {
            true => Ok(Vec::new()),
            false => Ok(vec![Prepared::File(
                mcp_config_path(request),
                mcp_config(request)?,
            )]),
        }
    }
}

/// The rule of `--allowedTools` that allows `grant`: a grant of a server
/// the workflow declares as Claude Code names the server's tools
/// (`mcp__SERVER__TOOL`, every tool of a server `mcp__SERVER`), anything
/// else (the CLI's own rules, `Read(src/**)`) as written.
fn allowed(grant: &ToolGrant, request: &AgentRequest) -> String {
    let declared = |server: &str| request.mcp_servers.contains_key(server);
    match grant.mcp() {
        Some(McpGrant::One { server, tool }) if declared(server) => {
            format!("mcp__{server}__{tool}")
        }
        Some(McpGrant::All { server }) if declared(server) => format!("mcp__{server}"),
        _ => grant.name.clone(),
    }
}

/// Where one invocation's MCP configuration is written.
fn mcp_config_path(request: &AgentRequest) -> PathBuf {
    mcp_config::config_path("claude", request)
}

/// The agent's MCP servers as Claude Code's `--mcp-config` reads them;
/// an error when a token variable is not set.
fn mcp_config(request: &AgentRequest) -> Result<String, String> {
    let dialect = mcp_config::Dialect {
        stdio: Some("stdio"),
        http: Some("http"),
        url: "url",
        cwd: false,
    };
    let mut servers = serde_json::Map::new();
    for (name, def) in &request.mcp_servers {
        servers.insert(name.clone(), mcp_config::json_server(name, def, &dialect)?);
    }
    Ok(json!({"mcpServers": servers}).to_string())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod process_tests {
    //! The provider against fake executables: shell scripts that print what
    //! the real CLI printed (or worse) and exit as it did.

    use super::*;
    use crate::normalize::testing::{agent_request, fake_cli, replaying, without_extra};
    use crate::process::testing::ends_within;
    use application::ports::{AgentMessage, QueryError, QueryFn};
    use application::secrets::KeyNames;
    use domain::SessionId;
    use domain::workflow::{Provider, Timeout};
    use futures::StreamExt;
    use serde_json::Value;

    /// A fake `claude` running `body` in a directory of its own, `$HERE`.
    fn fake(body: &str) -> (tempfile::TempDir, String) {
        let dir = tempfile::tempdir().unwrap();
        let body = format!("HERE=\"$(dirname \"$0\")\"\n{body}");
        let exe = fake_cli(dir.path(), "fake-claude", &body);
        (dir, exe)
    }

    fn request(executable: String, timeout: Option<u64>) -> AgentRequest {
        let mut request = agent_request(Provider::ClaudeCode, Some(executable));
        request.agent.model = Some("claude-sonnet-4-5".into());
        request.agent.system_prompt = "Be brief.".into();
        request.agent.timeout = timeout.map(|s| Timeout(std::time::Duration::from_secs(s)));
        request.resume = Some(SessionId::new("sess-1").unwrap());
        request
    }

    async fn run(request: AgentRequest) -> Vec<Result<AgentMessage, QueryError>> {
        ClaudeCode::default()
            .query(request)
            .await
            .unwrap()
            .collect()
            .await
    }

    /// The agent's MCP servers reach it through a file of its own, with
    /// the user's configuration shut out, and their granted tools allowed;
    /// the file goes once the stream does.
    #[tokio::test]
    async fn mcp_servers_are_a_config_file_of_the_invocation() {
        let (_dir, exe) = fake(
            r#"echo "$@" > "$HERE/args"; cat "$(echo "$@" | sed 's/.*--mcp-config \([^ ]*\).*/\1/')" > "$HERE/config""#,
        );
        let mut request = request(exe.clone(), Some(5));
        request.agent.tools = vec![
            ToolGrant::new("awr/start_run"),
            ToolGrant::new("fs/*"),
            ToolGrant::new("Read"),
        ];
        let yaml = "name: m\nmcp_servers:\n  awr: {command: awr, args: [mcp], env: {A: b}}\n  fs: {url: 'http://127.0.0.1:9/mcp', headers: {X-Team: t}}\nagents: {a: {provider: mock}}\nsteps: [{agent: a}]\n";
        request.mcp_servers = domain::WorkflowDef::from_yaml(yaml).unwrap().mcp_servers;
        let path = mcp_config_path(&request);
        let args = ClaudeCode::command(&request).args.join(" ");
        assert!(
            args.contains(&format!(
                "--mcp-config {} --strict-mcp-config",
                path.display()
            )),
            "{args}"
        );
        assert!(
            args.contains("--allowedTools mcp__awr__start_run,mcp__fs,Read"),
            "{args}"
        );
        let _ = run(request).await;
        let here = std::path::Path::new(&exe).parent().unwrap();
        let config: Value =
            serde_json::from_str(&std::fs::read_to_string(here.join("config")).unwrap()).unwrap();
        assert_eq!(
            config,
            json!({"mcpServers": {
                "awr": {"type": "stdio", "command": "awr", "args": ["mcp"], "env": {"A": "b"}},
                "fs": {"type": "http", "url": "http://127.0.0.1:9/mcp", "headers": {"X-Team": "t"}},
            }})
        );
        assert!(!path.exists(), "left behind: {}", path.display());
    }

    /// A server's token variable that is not set fails the invocation,
    /// naming it, before the CLI starts.
    #[tokio::test]
    async fn an_unset_token_variable_fails_the_invocation() {
        let (_dir, exe) = fake("touch \"$HERE/ran\"");
        let mut request = request(exe.clone(), Some(5));
        request.agent.tools = vec![ToolGrant::new("s/*")];
        let yaml = "name: m\nmcp_servers:\n  s: {url: 'http://127.0.0.1:9/mcp', bearer_token_env: AWR_TEST_UNSET_TOKEN_VAR}\nagents: {a: {provider: mock}}\nsteps: [{agent: a}]\n";
        request.mcp_servers = domain::WorkflowDef::from_yaml(yaml).unwrap().mcp_servers;
        let Err(QueryError::Config(why)) = ClaudeCode::default().query(request).await else {
            panic!("the invocation went on")
        };
        assert!(
            why.contains("`AWR_TEST_UNSET_TOKEN_VAR` is not set"),
            "{why}"
        );
        assert!(!std::path::Path::new(&exe).with_file_name("ran").exists());
    }

    #[test]
    fn the_command_line_carries_the_agent_settings() {
        let cmd = ClaudeCode::command(&request("claude".into(), Some(5)));
        let args = cmd.args.join(" ");
        assert!(
            args.starts_with("-p run echo hi --output-format stream-json --verbose"),
            "{args}"
        );
        for part in [
            "--model claude-sonnet-4-5",
            "--append-system-prompt Be brief.",
            "--resume sess-1",
            "--allowedTools Bash,",
        ] {
            assert!(args.contains(part), "{part} in {args}");
        }
        assert_eq!(cmd.timeout, Some(std::time::Duration::from_secs(5)));
        assert!(
            !args.contains("--session-id"),
            "a resume names its session: {args}"
        );
    }

    #[test]
    fn a_new_session_starts_under_the_id_on_record() {
        let mut request = request("claude".into(), None);
        request.resume = None;
        request.session_id = Some(SessionId::new("0b6f8f4e-3c1a-4d2b-9f3e-1a2b3c4d5e6f").unwrap());
        let args = ClaudeCode::command(&request).args.join(" ");
        assert!(
            args.contains("--session-id 0b6f8f4e-3c1a-4d2b-9f3e-1a2b3c4d5e6f"),
            "{args}"
        );
        assert!(!args.contains("--resume"), "{args}");
    }

    #[test]
    fn a_forked_session_is_resumed_as_a_copy_under_the_id_on_record() {
        let mut request = request("claude".into(), None);
        request.fork_session = true;
        request.session_id = Some(SessionId::new("0b6f8f4e-3c1a-4d2b-9f3e-1a2b3c4d5e6f").unwrap());
        let args = ClaudeCode::command(&request).args.join(" ");
        assert!(
            args.contains(
                "--resume sess-1 --fork-session --session-id 0b6f8f4e-3c1a-4d2b-9f3e-1a2b3c4d5e6f"
            ),
            "{args}"
        );
        // Without the fork, a resume continues the session itself.
        request.fork_session = false;
        let args = ClaudeCode::command(&request).args.join(" ");
        assert!(
            !args.contains("--fork-session") && !args.contains("--session-id"),
            "{args}"
        );
    }

    /// The test cannot set variables of its own (that is `unsafe`), so it
    /// marks ones it has (`HOME`, and one cargo sets) as keys.
    #[tokio::test]
    async fn the_cli_sees_only_the_keys_its_node_needs() {
        let (dir, exe) = fake(
            r#"echo "${HOME:-withheld} ${CARGO_PKG_NAME:-withheld} ${PATH:+path}" > "$HERE/seen""#,
        );
        let keys = KeyNames::new(["HOME".to_owned(), "CARGO_PKG_NAME".to_owned()]);
        let mut request = request(exe, Some(30));
        request.agent.api_key_env = Some("CARGO_PKG_NAME".into());
        let _: Vec<_> = ClaudeCode::withholding(keys)
            .query(request)
            .await
            .unwrap()
            .collect()
            .await;
        let seen = std::fs::read_to_string(dir.path().join("seen")).unwrap();
        let words: Vec<&str> = seen.split_whitespace().collect();
        assert_eq!(words[0], "withheld", "{seen}");
        assert_eq!(
            words[1],
            env!("CARGO_PKG_NAME"),
            "its own key passes: {seen}"
        );
        assert_eq!(words[2], "path", "{seen}");
    }

    #[tokio::test]
    async fn a_recorded_run_replays_through_a_real_process() {
        let dir = tempfile::tempdir().unwrap();
        let exe = replaying(dir.path(), "claude", "tool");
        let out = without_extra(run(request(exe, Some(30))).await);
        assert!(
            matches!(
                &out[..],
                [
                    Ok(AgentMessage::Process { .. }),
                    Ok(AgentMessage::Session { .. }),
                    ..
                ]
            ),
            "the group, then the session: {out:?}"
        );
        assert!(
            out.iter()
                .any(|m| matches!(m, Ok(AgentMessage::Tool { name, .. }) if name == "Bash"))
        );
        assert!(
            matches!(out.last(), Some(Ok(AgentMessage::Completed(_)))),
            "{out:?}"
        );
    }

    #[tokio::test]
    async fn a_broken_stream_and_a_failing_exit_are_outcomes_not_crashes() {
        let (_dir, exe) = fake(
            "printf 'not json\\n{\"type\":\"mystery\"}\\n{\"type\":\"assistant\",\"message\":{\"id\":\"m\",\"content\":[{\"type\":\"text\",\"text\":\"half' ; echo 'oops' >&2; exit 3",
        );
        let out = run(request(exe, Some(30))).await;
        assert!(
            out.iter()
                .any(|m| matches!(m, Ok(AgentMessage::Warning { .. }))),
            "{out:?}"
        );
        match out.last() {
            Some(Err(QueryError::Agent { message, .. })) => {
                assert!(
                    message.contains('3') && message.contains("oops"),
                    "{message}"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_hanging_cli_is_killed_at_its_timeout() {
        // The CLI starts a grandchild that would outlive it without the group kill.
        let (dir, exe) = fake(r#"sleep 60 & echo $! > "$HERE/child.pid"; wait"#);
        let started = std::time::Instant::now();
        let out = run(request(exe, Some(1))).await;
        assert!(started.elapsed() < std::time::Duration::from_secs(20));
        assert!(
            matches!(out.last(), Some(Err(QueryError::Agent { error_type, .. })) if error_type == "timeout"),
            "{out:?}"
        );
        let pid: u32 = std::fs::read_to_string(dir.path().join("child.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(
            ends_within(pid, std::time::Duration::from_secs(10)).await,
            "the grandchild {pid} outlived the group kill"
        );
    }

    #[tokio::test]
    async fn a_missing_executable_is_a_configuration_error() {
        let err = ClaudeCode::default()
            .query(request("/nonexistent/claude".into(), None))
            .await
            .err()
            .unwrap();
        assert!(err.to_string().contains("/nonexistent/claude"), "{err}");
    }
}

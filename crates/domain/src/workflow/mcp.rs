//! `mcp_servers:`: the MCP servers a workflow's agents may use tools of,
//! and how an agent's `tools:` grants them (`server/tool`, `server/*`).
//!
//! A server is declared once, by name, with how to reach it: a program to
//! start for the run (stdio) or a URL (streamable HTTP). An agent is
//! granted some of its tools by name; a model sees each as
//! `mcp__{server}__{tool}` (the name Claude Code gives them), mapped to the
//! 1–64 characters of `[A-Za-z0-9_-]` the HTTP APIs take when it does not
//! fit. Everything is checked when the workflow is read, so a grant of an
//! undeclared server is refused with its place, never at a call.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::WorkflowError;
use super::duration::{RawDuration, Timeout};
use super::invalid::{invalid, list};
use super::{AgentDef, ToolGrant};

/// How long a server may take to start and answer `initialize` and
/// `tools/list`, unless `startup_timeout:` says: 30 s (a server run by
/// `npx` may install itself first).
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// How long one tool call may take, unless `tool_timeout:` says: 60 s.
pub const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(60);

/// The prefix of every MCP tool's name as a model sees it.
pub const MCP_PREFIX: &str = "mcp__";

/// The longest tool name OpenAI and Anthropic take.
const MAX_TOOL_NAME: usize = 64;

/// One declared server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerDef {
    /// How to reach it.
    pub transport: McpTransport,
    /// How long it may take to start and list its tools.
    pub startup_timeout: Timeout,
    /// How long one call may take.
    pub tool_timeout: Timeout,
}

/// How a server is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpTransport {
    /// A program awr starts for the run and speaks to on its stdin and
    /// stdout.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Variables it gets besides awr's environment, less every key
        /// variable (it gets only the keys given here).
        env: BTreeMap<String, String>,
        /// Where it runs, under the project directory; the project
        /// directory when `None`.
        cwd: Option<String>,
    },
    /// A server already running, over streamable HTTP.
    Http {
        /// Its endpoint (`http://host:port/mcp`).
        url: String,
        /// Headers sent with every request.
        headers: BTreeMap<String, String>,
        /// The environment variable whose value is sent as `Authorization:
        /// Bearer VALUE`, read when the server is reached: the token is in
        /// no file a run keeps.
        bearer_token_env: Option<String>,
    },
}

/// `mcp_servers.NAME` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMcpServer {
    #[serde(default)]
    command: Option<String>,
    #[serde(default)]
    args: Option<Vec<String>>,
    #[serde(default)]
    env: Option<BTreeMap<String, String>>,
    #[serde(default)]
    cwd: Option<String>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    headers: Option<BTreeMap<String, String>>,
    #[serde(default)]
    bearer_token_env: Option<String>,
    #[serde(default)]
    startup_timeout: Option<RawDuration>,
    #[serde(default)]
    tool_timeout: Option<RawDuration>,
}

/// The declared servers, checked: each has a usable name and exactly one
/// transport, with only that transport's keys.
pub(super) fn lower_servers(
    raw: BTreeMap<String, RawMcpServer>,
) -> Result<BTreeMap<String, McpServerDef>, WorkflowError> {
    raw.into_iter()
        .map(|(name, server)| {
            let item = format!("mcp_servers.{name}");
            check_server_name(&name).map_err(|e| invalid(&item, e))?;
            let def = lower_server(&item, server)?;
            Ok((name, def))
        })
        .collect()
}

fn lower_server(item: &str, raw: RawMcpServer) -> Result<McpServerDef, WorkflowError> {
    let timeout = |value: Option<RawDuration>, field: &str, default: Duration| match value {
        Some(value) => value.resolve(field).map_err(|e| invalid(item, e)),
        None => Ok(Timeout(default)),
    };
    let startup_timeout = timeout(
        raw.startup_timeout,
        "startup_timeout",
        DEFAULT_STARTUP_TIMEOUT,
    )?;
    let tool_timeout = timeout(raw.tool_timeout, "tool_timeout", DEFAULT_TOOL_TIMEOUT)?;
    let transport = match (raw.command, raw.url) {
        (Some(command), None) => {
            for (key, given) in [
                ("headers", raw.headers.is_some()),
                ("bearer_token_env", raw.bearer_token_env.is_some()),
            ] {
                if given {
                    return Err(invalid(
                        item,
                        format!("`{key}` goes with `url`, not `command`"),
                    ));
                }
            }
            if command.trim().is_empty() {
                return Err(invalid(item, "`command` must not be empty"));
            }
            McpTransport::Stdio {
                command,
                args: raw.args.unwrap_or_default(),
                env: raw.env.unwrap_or_default(),
                cwd: raw.cwd,
            }
        }
        (None, Some(url)) => {
            for (key, given) in [
                ("args", raw.args.is_some()),
                ("env", raw.env.is_some()),
                ("cwd", raw.cwd.is_some()),
            ] {
                if given {
                    return Err(invalid(
                        item,
                        format!("`{key}` goes with `command`, not `url`"),
                    ));
                }
            }
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(invalid(
                    item,
                    format!("`url` `{url}`: give an http:// or https:// URL"),
                ));
            }
            let headers = raw.headers.unwrap_or_default();
            for (name, value) in &headers {
                check_header(name, value).map_err(|e| invalid(item, e))?;
            }
            if let Some(var) = &raw.bearer_token_env {
                if !is_env_name(var) {
                    return Err(invalid(
                        item,
                        format!(
                            "`bearer_token_env`: `{}` is not the name of an environment variable (the token itself goes in no file)",
                            var.chars().take(3).collect::<String>().escape_debug()
                        ),
                    ));
                }
                if headers
                    .keys()
                    .any(|h| h.eq_ignore_ascii_case("authorization"))
                {
                    return Err(invalid(
                        item,
                        "`bearer_token_env` sends `Authorization`: give it or that header, not both",
                    ));
                }
            }
            McpTransport::Http {
                url,
                headers,
                bearer_token_env: raw.bearer_token_env,
            }
        }
        (Some(_), Some(_)) => {
            return Err(invalid(
                item,
                "give `command` (a program to start) or `url` (a running server), not both",
            ));
        }
        (None, None) => {
            return Err(invalid(
                item,
                "give `command` (a program to start) or `url` (a running server)",
            ));
        }
    };
    Ok(McpServerDef {
        transport,
        startup_timeout,
        tool_timeout,
    })
}

/// A header HTTP can carry: its name a token (RFC 9110's `tchar`s), its
/// value visible ASCII, spaces and tabs (no line break to smuggle another).
fn check_header(name: &str, value: &str) -> Result<(), String> {
    let tchar = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if name.is_empty() || !name.chars().all(tchar) {
        return Err(format!(
            "`headers`: `{}` is not a header name",
            name.escape_debug()
        ));
    }
    if !value
        .chars()
        .all(|c| c == ' ' || c == '\t' || c.is_ascii_graphic())
    {
        return Err(format!(
            "`headers.{name}`: a value of visible ASCII, spaces and tabs only"
        ));
    }
    Ok(())
}

/// Whether `name` can name an environment variable: a letter or `_`, then
/// letters, digits and `_`.
fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Whether `name` can name a server: 1–32 characters of `[A-Za-z0-9-]`
/// and single `_`s inside, so that `mcp__{server}__{tool}` tells where it
/// ends.
fn is_server_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 32
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        && !name.contains("__")
        && !name.starts_with('_')
        && !name.ends_with('_')
}

fn check_server_name(name: &str) -> Result<(), String> {
    match is_server_name(name) {
        true => Ok(()),
        false => Err(format!(
            "`{}`: a server's name is 1 to 32 letters, digits, `-` and single `_` inside",
            name.escape_debug()
        )),
    }
}

/// What a grant of MCP tools names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum McpGrant<'a> {
    /// `server/*`: every tool the server lists.
    All {
        /// The server.
        server: &'a str,
    },
    /// `server/tool`: one tool.
    One {
        /// The server.
        server: &'a str,
        /// The tool, as the server names it.
        tool: &'a str,
    },
}

impl<'a> McpGrant<'a> {
    /// The server it names.
    pub fn server(self) -> &'a str {
        match self {
            Self::All { server } | Self::One { server, .. } => server,
        }
    }
}

impl ToolGrant {
    /// What it grants of an MCP server, when it is written as one
    /// (`server/tool`, `server/*`, the server part a server's name); `None`
    /// for a built-in tool or a CLI agent's own rule (`Read(src/**)`).
    pub fn mcp(&self) -> Option<McpGrant<'_>> {
        let (server, tool) = self.name.split_once('/')?;
        if !is_server_name(server) {
            return None;
        }
        Some(match tool {
            "*" => McpGrant::All { server },
            tool => McpGrant::One { server, tool },
        })
    }

    /// Whether it grants the tool a model calls `name`: the same name for a
    /// built-in tool; for an MCP grant, the tool's name as the model sees
    /// it ([`mcp_tool_name`]), or any tool of the server for `server/*`.
    pub fn grants(&self, name: &str) -> bool {
        match self.mcp() {
            None => self.name == name,
            Some(McpGrant::One { server, tool }) => mcp_tool_name(server, tool) == name,
            Some(McpGrant::All { server }) => name
                .strip_prefix(MCP_PREFIX)
                .and_then(|rest| rest.strip_prefix(server))
                .is_some_and(|rest| rest.starts_with("__")),
        }
    }
}

/// The name a model sees for `tool` of `server`: `mcp__{server}__{tool}`,
/// with each character outside `[A-Za-z0-9_-]` made `_`; when that changed
/// the name, when it is longer than 64 characters, or when the tool's own
/// name already ends as a mapped one does (`_` and 8 hex digits), cut to
/// fit and ended with `_` and 8 hex digits of the tool's SHA-256. The same
/// tool always has the same name; two tools of a server share one only if
/// their names' hashes begin alike (a 1 in 4 billion chance a pair).
pub fn mcp_tool_name(server: &str, tool: &str) -> String {
    let clean: String = tool
        .chars()
        .map(
            |c| match c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                true => c,
                false => '_',
            },
        )
        .collect();
    let name = format!("{MCP_PREFIX}{server}__{clean}");
    if clean == tool && name.len() <= MAX_TOOL_NAME && !looks_mapped(tool) {
        return name;
    }
    let digest = Sha256::digest(tool.as_bytes());
    let tag: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
    let keep = MAX_TOOL_NAME - 1 - tag.len();
    // ASCII only by now: any cut is on a character boundary.
    let stem = &name[..name.len().min(keep)];
    format!("{stem}_{tag}")
}

/// Whether `name` ends as a mapped name does: `_` and 8 hex digits.
fn looks_mapped(name: &str) -> bool {
    let bytes = name.as_bytes();
    bytes.len() >= 9
        && bytes[bytes.len() - 9] == b'_'
        && bytes[bytes.len() - 8..].iter().all(u8::is_ascii_hexdigit)
}

/// Every grant of an HTTP agent written as an MCP grant names a declared
/// server, and so does every grant of a CLI agent that names one. A CLI
/// agent's `tools:` are otherwise its own allow-list rules, passed to it as
/// they are: `mcp__x__y` (Claude Code's name of a tool of its own MCP
/// configuration) or `a/b` naming no declared server is one of them.
pub(super) fn check_grants(
    agents: &BTreeMap<String, AgentDef>,
    servers: &BTreeMap<String, McpServerDef>,
) -> Result<(), WorkflowError> {
    for (name, agent) in agents {
        let http = agent.provider.is_http();
        for grant in &agent.tools {
            let mcp = grant
                .mcp()
                .filter(|m| http || servers.contains_key(m.server()));
            let Some(mcp) = mcp else {
                if http && grant.name.starts_with(MCP_PREFIX) {
                    return Err(invalid(
                        format!("agents.{name}.tools"),
                        format!(
                            "`{}`: grant an MCP tool as `server/tool` or `server/*`",
                            grant.name
                        ),
                    ));
                }
                continue;
            };
            let server = mcp.server();
            if !servers.contains_key(server) {
                let known = match servers.is_empty() {
                    true => "none is declared under `mcp_servers:`".to_owned(),
                    false => format!("declared: {}", list(servers.keys().map(String::as_str))),
                };
                return Err(invalid(
                    format!("agents.{name}.tools"),
                    format!("`{}`: no MCP server `{server}` ({known})", grant.name),
                ));
            }
            if let McpGrant::One { tool, .. } = mcp
                && (tool.is_empty() || tool.contains('/'))
            {
                return Err(invalid(
                    format!("agents.{name}.tools"),
                    format!("`{}`: name one tool of `{server}`, or `*`", grant.name),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::WorkflowDef;

    fn load(src: &str) -> Result<WorkflowDef, String> {
        WorkflowDef::from_yaml(src).map_err(|e| e.to_string())
    }

    const AGENT: &str = "agents:\n  a:\n    provider: openai\n    model: m\n";

    #[test]
    fn a_stdio_and_an_http_server_are_declared_and_granted() {
        let src = format!(
            "name: w\nmcp_servers:\n  everything:\n    command: npx\n    args: [server-everything, stdio]\n    env: {{LOG: quiet}}\n    tool_timeout: 5s\n  remote:\n    url: http://127.0.0.1:3001/mcp\n    headers: {{Authorization: Bearer x}}\n{AGENT}    tools: [everything/echo, remote/*, read_file]\nsteps: [{{agent: a}}]\n"
        );
        let def = load(&src).unwrap();
        let everything = &def.mcp_servers["everything"];
        assert_eq!(
            everything.transport,
            McpTransport::Stdio {
                command: "npx".into(),
                args: vec!["server-everything".into(), "stdio".into()],
                env: [("LOG".to_owned(), "quiet".to_owned())].into(),
                cwd: None,
            }
        );
        assert_eq!(everything.tool_timeout, Timeout(Duration::from_secs(5)));
        assert_eq!(everything.startup_timeout, Timeout(DEFAULT_STARTUP_TIMEOUT));
        assert!(matches!(
            &def.mcp_servers["remote"].transport,
            McpTransport::Http { url, headers, .. } if url == "http://127.0.0.1:3001/mcp" && headers.len() == 1
        ));
        let tools = &def.agents["a"].tools;
        assert_eq!(
            tools[0].mcp(),
            Some(McpGrant::One {
                server: "everything",
                tool: "echo"
            })
        );
        assert!(tools[0].grants("mcp__everything__echo"));
        assert!(!tools[0].grants("mcp__everything__get-sum"));
        assert!(tools[1].grants("mcp__remote__anything"));
        assert!(!tools[1].grants("mcp__remotely__anything"));
        assert!(!tools[1].grants("mcp__everything__echo"));
        assert!(tools[2].grants("read_file") && tools[2].mcp().is_none());
    }

    #[test]
    fn a_bad_declaration_or_grant_is_refused_by_name() {
        let cases = [
            ("mcp_servers: {s: {}}\n", "mcp_servers.s", "give `command`"),
            (
                "mcp_servers: {s: {command: x, url: 'http://h/mcp'}}\n",
                "mcp_servers.s",
                "not both",
            ),
            (
                "mcp_servers: {s: {url: 'http://h/mcp', args: [a]}}\n",
                "mcp_servers.s",
                "`args` goes with `command`",
            ),
            (
                "mcp_servers: {s: {command: x, headers: {a: b}}}\n",
                "mcp_servers.s",
                "`headers` goes with `url`",
            ),
            (
                "mcp_servers: {s: {url: 'ftp://h'}}\n",
                "mcp_servers.s",
                "http:// or https://",
            ),
            (
                "mcp_servers: {s: {url: 'http://h/mcp', headers: {'a b': c}}}\n",
                "mcp_servers.s",
                "not a header name",
            ),
            (
                "mcp_servers: {s: {url: 'http://h/mcp', headers: {X: \"a\\r\\nInjected: 1\"}}}\n",
                "mcp_servers.s",
                "`headers.X`: a value of visible ASCII",
            ),
            (
                "mcp_servers: {s: {command: x, tool_timeout: 0}}\n",
                "mcp_servers.s",
                "`tool_timeout` must be more than 0 s",
            ),
            (
                "mcp_servers: {s: {command: x, shell: true}}\n",
                "",
                "unknown field `shell`",
            ),
            (
                "mcp_servers: {a__b: {command: x}}\n",
                "mcp_servers.a__b",
                "single `_`",
            ),
            (
                "mcp_servers: {s: {url: 'http://h/mcp', bearer_token_env: 'sk-live-123'}}\n",
                "mcp_servers.s",
                "`bearer_token_env`: `sk-` is not the name of an environment variable",
            ),
            (
                "mcp_servers: {s: {url: 'http://h/mcp', bearer_token_env: T, headers: {authorization: x}}}\n",
                "mcp_servers.s",
                "give it or that header, not both",
            ),
            (
                "mcp_servers: {s: {command: x, bearer_token_env: T}}\n",
                "mcp_servers.s",
                "`bearer_token_env` goes with `url`",
            ),
        ];
        for (servers, item, message) in cases {
            let src =
                format!("name: w\n{servers}{AGENT}    tools: [read_file]\nsteps: [{{agent: a}}]\n");
            let e = load(&src).unwrap_err();
            assert!(e.contains(item) && e.contains(message), "{servers}: {e}");
        }
        let grants = [
            ("[other/echo]", "no MCP server `other`"),
            ("[mcp__s__echo]", "grant an MCP tool as `server/tool`"),
            ("[s/]", "name one tool of `s`"),
        ];
        for (tools, message) in grants {
            let src = format!(
                "name: w\nmcp_servers: {{s: {{command: x}}}}\n{AGENT}    tools: {tools}\nsteps: [{{agent: a}}]\n"
            );
            let e = load(&src).unwrap_err();
            assert!(
                e.contains("agents.a.tools") && e.contains(message),
                "{tools}: {e}"
            );
        }
    }

    #[test]
    fn a_cli_agents_own_rules_are_not_taken_for_mcp_grants() {
        let src = "name: w\nmcp_servers: {fs: {command: x}}\nagents:\n  c:\n    provider: claude-code\n    tools: ['Read(src/**)', 'Bash(./build.sh)', mcp__own__tool, web/search, fs/read]\nsteps: [{agent: c}]\n";
        let def = load(src).unwrap();
        let tools = &def.agents["c"].tools;
        assert_eq!(tools[0].mcp(), None);
        assert_eq!(tools[1].mcp(), None);
        assert_eq!(tools[2].mcp(), None);
        // Written as a grant, but of no declared server: a rule of its own.
        assert!(tools[3].mcp().is_some());
        assert_eq!(
            tools[4].mcp(),
            Some(McpGrant::One {
                server: "fs",
                tool: "read"
            })
        );
        // Of a declared server, it is checked as a grant.
        let bad = src.replace("fs/read", "fs/");
        assert!(load(&bad).unwrap_err().contains("name one tool of `fs`"));
    }

    #[test]
    fn a_tool_name_that_does_not_fit_the_apis_is_mapped_the_same_way_each_time() {
        assert_eq!(
            mcp_tool_name("time", "get_current_time"),
            "mcp__time__get_current_time"
        );
        let odd = mcp_tool_name("fs", "read file.v2");
        assert!(odd.starts_with("mcp__fs__read_file_v2_"), "{odd}");
        assert_ne!(odd, mcp_tool_name("fs", "read_file.v2"));
        // A tool named as another's mapped name is mapped in turn.
        let tag = odd.rsplit('_').next().unwrap();
        let lookalike = format!("read_file_v2_{tag}");
        assert_ne!(mcp_tool_name("fs", &lookalike), odd);
        let long = mcp_tool_name("server", &"t".repeat(100));
        assert_eq!(long.len(), 64);
        assert_eq!(long, mcp_tool_name("server", &"t".repeat(100)));
        assert_ne!(long, mcp_tool_name("server", &"t".repeat(101)));
        for name in [odd, long] {
            assert!(
                name.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            );
        }
    }
}

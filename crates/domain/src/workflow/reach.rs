//! What a workflow does to the machine that runs it beyond calling models,
//! fetching public URLs and keeping its record: runs a program, reads or
//! changes its files, reaches its internal network, or sends its API keys
//! somewhere it chooses. `awr serve` refuses a workflow a client sends
//! inline that does any of these, unless it is started with
//! `--allow-inline-code` (docs/security.md): what a token may start is then
//! what the token may do, not what the machine's user may.
//!
//! The list is of what a workflow is allowed, so what a later version adds
//! (a tool, a provider) is refused until it is judged here.

use super::{McpTransport, NodeKind, Provider, WorkflowDef};

/// One thing a workflow does on its host, and where it says so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostReach {
    /// Where: ``node `build` `` or ``agent `writer` ``.
    pub place: String,
    /// What it does there.
    pub what: String,
}

impl std::fmt::Display for HostReach {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.place, self.what)
    }
}

/// The tools an inline workflow may grant: `http_get` reaches public
/// addresses only unless its grant allows more.
const HARMLESS_TOOLS: [&str; 1] = ["http_get"];

impl WorkflowDef {
    /// Everything this workflow itself (not the workflows it calls, which
    /// are files of the machine's own) does on its host, in the order
    /// written: nodes first, then MCP servers and agents by name.
    pub fn host_reach(&self) -> Vec<HostReach> {
        let mut found = Vec::new();
        let mut add = |place: String, what: &str| {
            found.push(HostReach {
                place,
                what: what.to_owned(),
            });
        };
        for node in &self.nodes {
            if let NodeKind::Command(_) = node.kind {
                add(
                    format!("node `{}`", node.id),
                    "a `command` node runs a program",
                );
            }
        }
        for (name, server) in &self.mcp_servers {
            let place = format!("mcp_servers `{name}`");
            match &server.transport {
                McpTransport::Stdio { .. } => add(place, "an MCP server over stdio runs a program"),
                McpTransport::Http {
                    bearer_token_env, ..
                } => {
                    add(
                        place.clone(),
                        "an MCP server over HTTP reaches an address the workflow chooses",
                    );
                    if bearer_token_env.is_some() {
                        add(
                            place,
                            "`bearer_token_env` chooses which of this machine's variables is sent",
                        );
                    }
                }
            }
        }
        for (name, agent) in &self.agents {
            let place = || format!("agent `{name}`");
            match agent.provider {
                Provider::Mock | Provider::OpenAi | Provider::Anthropic => {}
                cli => add(
                    place(),
                    &format!(
                        "a `{}` agent runs its CLI, which runs tools of its own",
                        cli.as_str()
                    ),
                ),
            }
            for grant in &agent.tools {
                if !HARMLESS_TOOLS.contains(&grant.name.as_str()) {
                    add(
                        place(),
                        &format!(
                            "the `{}` tool reaches this machine's programs or files",
                            grant.name
                        ),
                    );
                } else if !grant.allow.is_empty() {
                    add(
                        place(),
                        &format!("`{}` is allowed internal addresses (`allow`)", grant.name),
                    );
                }
            }
            if agent.fixtures.is_some() {
                add(place(), "`fixtures` reads files of this machine");
            }
            if agent.allow_outside_project {
                add(
                    place(),
                    "`allow_outside_project` reaches outside the project directory",
                );
            }
            if agent.base_url.is_some() {
                add(place(), "`base_url` chooses where the API key is sent");
            }
            if agent.api_key_env.is_some() {
                add(
                    place(),
                    "`api_key_env` chooses which of this machine's variables is sent",
                );
            }
        }
        found
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use crate::workflow::WorkflowDef;

    fn reach(yaml: &str) -> Vec<String> {
        let workflow = WorkflowDef::from_yaml(yaml).unwrap();
        workflow
            .host_reach()
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn a_workflow_of_models_and_public_fetches_reaches_nothing() {
        let yaml = "name: w\nagents:\n  a: {provider: mock}\n  b: {provider: openai, model: m, tools: [http_get]}\nsteps:\n  - {id: one, agent: a}\n  - {id: two, agent: b}\n";
        assert_eq!(reach(yaml), Vec::<String>::new());
    }

    #[test]
    fn each_way_to_the_host_is_named_where_it_is_written() {
        let yaml = r#"
name: w
agents:
  cli: {provider: gemini}
  files: {provider: anthropic, model: m, tools: [read_file, write_file, shell]}
  inside: {provider: openai, model: m, tools: [{name: http_get, allow: [10.0.0.0/8]}]}
  keys: {provider: openai, model: m, base_url: "https://x.example/v1", api_key_env: AWS_SECRET_ACCESS_KEY}
  out: {provider: anthropic, model: m, workdir: /tmp, allow_outside_project: true}
  fix: {provider: mock, fixtures: /etc}
steps:
  - {id: build, command: "make"}
  - {id: c, agent: cli}
  - {id: f, agent: files}
  - {id: i, agent: inside}
  - {id: k, agent: keys}
  - {id: o, agent: out}
  - {id: x, agent: fix}
"#;
        let found = reach(yaml);
        let wanted = [
            "node `build`: a `command` node runs a program",
            "agent `cli`: a `gemini` agent runs its CLI",
            "agent `files`: the `read_file` tool",
            "agent `files`: the `write_file` tool",
            "agent `files`: the `shell` tool",
            "agent `inside`: `http_get` is allowed internal addresses",
            "agent `keys`: `base_url`",
            "agent `keys`: `api_key_env`",
            "agent `out`: `allow_outside_project`",
            "agent `fix`: `fixtures` reads files",
        ];
        for wanted in wanted {
            assert!(
                found.iter().any(|f| f.starts_with(wanted)),
                "{wanted} not in {found:#?}"
            );
        }
        assert_eq!(found.len(), wanted.len(), "{found:#?}");
    }

    #[test]
    fn an_mcp_server_reaches_the_host_whether_granted_or_not() {
        let yaml = "name: w\nmcp_servers:\n  local: {command: x}\n  remote: {url: 'http://10.0.0.1/mcp', bearer_token_env: T}\nagents:\n  a: {provider: mock}\nsteps: [{agent: a}]\n";
        assert_eq!(
            reach(yaml),
            [
                "mcp_servers `local`: an MCP server over stdio runs a program",
                "mcp_servers `remote`: an MCP server over HTTP reaches an address the workflow chooses",
                "mcp_servers `remote`: `bearer_token_env` chooses which of this machine's variables is sent",
            ]
        );
    }
}

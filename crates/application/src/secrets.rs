//! Which environment variables hold keys: what a child process may see of
//! them, and whose values must never be written ([`crate::redact`]).
//!
//! A variable is a *key variable* when its name is
//! - one a provider reads its key from ([`provider_keys`]), or
//! - named by an agent's `api_key_env` in the workflow (or a workflow it
//!   calls), or
//! - ends in `_API_KEY` or `_TOKEN` (ASCII case ignored): the common
//!   convention, which also covers keys awr has never heard of.
//!
//! A child process (a CLI agent, the `shell` tool) inherits awr's
//! environment less every key variable, except those its own node needs:
//! its provider's and its `api_key_env`. The shell tool needs none. Pure:
//! the caller hands in the environment's names and values.

use std::collections::BTreeSet;
use std::ffi::OsString;

use domain::WorkflowDef;
use domain::workflow::{AgentDef, McpTransport, NodeKind, Provider};

/// Name endings that mark a key variable.
pub const KEY_SUFFIXES: &[&str] = &["_API_KEY", "_TOKEN"];

/// The variables a provider's CLI reads its credentials from. HTTP
/// providers are called by awr itself: their key is read by awr, and no
/// child of theirs (a shell) needs it.
pub fn provider_keys(provider: Provider) -> &'static [&'static str] {
    match provider {
        Provider::ClaudeCode => &[
            "ANTHROPIC_API_KEY",
            "ANTHROPIC_AUTH_TOKEN",
            "CLAUDE_CODE_OAUTH_TOKEN",
            "AWS_BEARER_TOKEN_BEDROCK",
            "AWS_SESSION_TOKEN",
        ],
        Provider::Codex => &["OPENAI_API_KEY", "CODEX_API_KEY"],
        Provider::Gemini => &["GEMINI_API_KEY", "GOOGLE_API_KEY"],
        Provider::Copilot => &["COPILOT_GITHUB_TOKEN", "GH_TOKEN", "GITHUB_TOKEN"],
        Provider::Mock | Provider::OpenAi | Provider::Anthropic => &[],
    }
}

/// The key variables a node's own process needs: those its provider's CLI
/// reads, and its `api_key_env`.
pub fn needed_by(agent: &AgentDef) -> Vec<String> {
    let mut names: Vec<String> = if agent.provider.is_http() {
        Vec::new()
    } else {
        provider_keys(agent.provider)
            .iter()
            .map(|&n| n.to_owned())
            .collect()
    };
    if !agent.provider.is_http()
        && let Some(own) = &agent.api_key_env
    {
        names.push(own.clone());
    }
    names
}

/// Recognizes key variables: the fixed rules plus the names a workflow
/// configures.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyNames {
    configured: BTreeSet<String>,
}

impl KeyNames {
    /// The fixed rules plus `configured` names.
    pub fn new(configured: impl IntoIterator<Item = String>) -> Self {
        Self {
            configured: configured.into_iter().collect(),
        }
    }

    /// The fixed rules plus every `api_key_env` of `workflow` and of the
    /// workflows it calls.
    pub fn of_workflow(workflow: &WorkflowDef) -> Self {
        let mut names = BTreeSet::new();
        collect(workflow, &mut names);
        Self { configured: names }
    }

    /// Whether `name` holds a key.
    pub fn is_key(&self, name: &str) -> bool {
        let upper = name.to_ascii_uppercase();
        self.configured.contains(name)
            || KEY_SUFFIXES.iter().any(|s| upper.ends_with(s))
            || Provider::ALL
                .iter()
                .any(|&p| provider_keys(p).contains(&name))
    }

    /// Of the variable `names` (a child's inherited environment), those to
    /// remove: every key variable not in `keep`.
    pub fn withheld(
        &self,
        names: impl IntoIterator<Item = OsString>,
        keep: &[String],
    ) -> Vec<OsString> {
        names
            .into_iter()
            .filter(|name| {
                let text = name.to_string_lossy();
                self.is_key(&text) && !keep.iter().any(|k| *k == text)
            })
            .collect()
    }

    /// The values never to write: those of the key variables in `vars`
    /// (awr's environment), and those a workflow's agents set for key
    /// variables in their `env:`.
    pub fn secret_values(
        &self,
        vars: impl IntoIterator<Item = (String, String)>,
        workflow: Option<&WorkflowDef>,
    ) -> Vec<String> {
        let mut values: Vec<String> = vars
            .into_iter()
            .filter(|(name, _)| self.is_key(name))
            .map(|(_, value)| value)
            .collect();
        if let Some(workflow) = workflow {
            agent_env_values(self, workflow, &mut values);
        }
        values
    }
}

fn called(workflow: &WorkflowDef) -> impl Iterator<Item = &WorkflowDef> {
    workflow.nodes.iter().filter_map(|node| match &node.kind {
        NodeKind::CallWorkflow {
            resolved: Some(child),
            ..
        } => Some(child.as_ref()),
        _ => None,
    })
}

fn collect(workflow: &WorkflowDef, names: &mut BTreeSet<String>) {
    names.extend(
        workflow
            .agents
            .values()
            .filter_map(|a| a.api_key_env.clone()),
    );
    // An MCP server's token is a key whatever its variable is called.
    names.extend(
        (workflow.mcp_servers.values()).filter_map(|server| match &server.transport {
            McpTransport::Http {
                bearer_token_env, ..
            } => bearer_token_env.clone(),
            McpTransport::Stdio { .. } => None,
        }),
    );
    for child in called(workflow) {
        collect(child, names);
    }
}

fn agent_env_values(keys: &KeyNames, workflow: &WorkflowDef, values: &mut Vec<String>) {
    for agent in workflow.agents.values() {
        values.extend(
            agent
                .env
                .iter()
                .filter(|(name, _)| keys.is_key(name))
                .map(|(_, value)| value.clone()),
        );
    }
    for child in called(workflow) {
        agent_env_values(keys, child, values);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    #[test]
    fn known_configured_and_conventional_names_are_keys() {
        let keys = KeyNames::new(["MY_SECRET".to_owned()]);
        for name in [
            "ANTHROPIC_API_KEY",
            "GEMINI_API_KEY",
            "GH_TOKEN",
            "CLAUDE_CODE_OAUTH_TOKEN",
            "MY_SECRET",
            "SOME_VENDOR_API_KEY",
            "npm_token",
        ] {
            assert!(keys.is_key(name), "{name}");
        }
        for name in ["PATH", "HOME", "TOKENIZER", "API_KEYS_DIR", "OTHER_SECRET"] {
            assert!(!keys.is_key(name), "{name}");
        }
    }

    #[test]
    fn a_child_keeps_only_the_keys_its_node_needs() {
        let env = names(&[
            "PATH",
            "ANTHROPIC_API_KEY",
            "OPENAI_API_KEY",
            "GITHUB_TOKEN",
            "MY_SECRET",
        ]);
        let keys = KeyNames::new(["MY_SECRET".to_owned()]);
        let mut claude = AgentDef::new(Provider::ClaudeCode);
        claude.api_key_env = Some("MY_SECRET".into());
        assert_eq!(
            keys.withheld(env.clone(), &needed_by(&claude)),
            names(&["OPENAI_API_KEY", "GITHUB_TOKEN"])
        );
        // An HTTP agent's key is awr's to use: its shell gets none.
        let openai = AgentDef::new(Provider::OpenAi);
        assert_eq!(
            keys.withheld(env, &needed_by(&openai)),
            names(&[
                "ANTHROPIC_API_KEY",
                "OPENAI_API_KEY",
                "GITHUB_TOKEN",
                "MY_SECRET"
            ])
        );
    }

    #[test]
    fn secret_values_come_from_key_variables_and_agents_env() {
        let yaml = "name: w\nagents:\n  a:\n    provider: claude-code\n    \
                    env: {ANTHROPIC_API_KEY: sk-in-the-file, LANG: C}\n    \
                    api_key_env: MINE\nsteps: [{agent: a}]\n";
        let workflow = WorkflowDef::from_yaml(yaml).unwrap();
        let keys = KeyNames::of_workflow(&workflow);
        let vars = [
            ("MINE".to_owned(), "mine-value".to_owned()),
            ("PATH".to_owned(), "/bin".to_owned()),
            ("X_TOKEN".to_owned(), "tok".to_owned()),
        ];
        assert_eq!(
            keys.secret_values(vars, Some(&workflow)),
            ["mine-value", "tok", "sk-in-the-file"]
        );
    }

    #[test]
    fn an_mcp_servers_token_variable_is_a_key_whatever_its_name() {
        let yaml = "name: w\nmcp_servers:\n  gh: {url: 'https://h/mcp', bearer_token_env: GITHUB_PAT}\n\
                    agents:\n  a: {provider: openai, model: m, tools: [gh/*]}\nsteps: [{agent: a}]\n";
        let keys = KeyNames::of_workflow(&WorkflowDef::from_yaml(yaml).unwrap());
        assert!(keys.is_key("GITHUB_PAT"));
        let vars = [("GITHUB_PAT".to_owned(), "ghp-secret".to_owned())];
        assert_eq!(keys.secret_values(vars, None), ["ghp-secret"]);
    }
}

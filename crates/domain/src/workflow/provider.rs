//! [`Provider`]: what runs an agent, and what each provider can do with a
//! session (take a chosen id, fork it, keep it on a machine's disk).

use serde::{Deserialize, Serialize};

/// The providers a workflow may name. Adding a provider adds a variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Provider {
    /// Fixture-backed provider (seed 001 §7): replays recorded calls, no network.
    Mock,
    /// The Claude Code CLI (`claude`), in its stream-json mode.
    ClaudeCode,
    /// The Codex CLI (`codex exec --json`).
    Codex,
    /// The Gemini CLI (`gemini`, stream-json).
    Gemini,
    /// The GitHub Copilot CLI (`copilot`, JSON output).
    Copilot,
    /// Any OpenAI-compatible Chat Completions server (OpenAI, llama.cpp,
    /// vLLM, Ollama, ...); awr runs the tool loop.
    #[serde(rename = "openai")]
    OpenAi,
    /// The Anthropic Messages API; awr runs the tool loop.
    Anthropic,
}

impl Provider {
    /// Every provider: what serves "any agent" (a replay) must cover.
    pub const ALL: [Provider; 7] = [
        Provider::Mock,
        Provider::ClaudeCode,
        Provider::Codex,
        Provider::Gemini,
        Provider::Copilot,
        Provider::OpenAi,
        Provider::Anthropic,
    ];

    /// The name used in workflow files.
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Mock => "mock",
            Provider::ClaudeCode => "claude-code",
            Provider::Codex => "codex",
            Provider::Gemini => "gemini",
            Provider::Copilot => "copilot",
            Provider::OpenAi => "openai",
            Provider::Anthropic => "anthropic",
        }
    }

    /// The variable HTTP providers read their API key from by default.
    pub fn default_key_env(self) -> Option<&'static str> {
        match self {
            Provider::OpenAi => Some("OPENAI_API_KEY"),
            Provider::Anthropic => Some("ANTHROPIC_API_KEY"),
            _ => None,
        }
    }

    /// Whether awr itself calls the model over HTTP and runs the agent's
    /// tools (rather than a CLI that runs its own).
    pub fn is_http(self) -> bool {
        matches!(self, Provider::OpenAi | Provider::Anthropic)
    }

    /// Whether an agent of this provider can be given the workflow's MCP
    /// servers (`mcp_servers:`): the HTTP agents through awr's own client,
    /// the CLIs through a configuration rendered for the invocation. The
    /// fixture-backed mock calls no tool.
    pub fn takes_mcp_servers(self) -> bool {
        self != Provider::Mock
    }

    /// Whether a stdio MCP server given to this provider's agents may have a
    /// working directory of its own (`cwd:`): awr's client, Codex and Gemini
    /// CLI honour one; Claude Code's and Copilot's configurations have no
    /// such key, so the server would run where the agent does.
    pub fn mcp_server_cwd(self) -> bool {
        matches!(
            self,
            Provider::OpenAi | Provider::Anthropic | Provider::Codex | Provider::Gemini
        )
    }

    /// Whether the provider starts a session under an id the runtime
    /// chooses (Claude Code's and Copilot's `--session-id`; an HTTP agent's
    /// conversation, which the runtime names anyway), so the id is on record
    /// before the call; the others name their session once they run.
    pub fn takes_session_id(self) -> bool {
        matches!(
            self,
            Provider::ClaudeCode | Provider::Copilot | Provider::OpenAi | Provider::Anthropic
        )
    }

    /// Whether the provider keeps an agent's session on the disk of the
    /// machine that ran it (the CLIs): a writer on another machine cannot
    /// continue it, and starts a new attempt instead.
    pub fn keeps_session_on_disk(self) -> bool {
        matches!(
            self,
            Provider::ClaudeCode | Provider::Codex | Provider::Gemini | Provider::Copilot
        )
    }

    /// Whether a node run copied into a fork (`flow:forked`) can go on in
    /// a copy of its session, leaving the parent's as it was: Claude Code
    /// forks it (`--resume ID --fork-session`); an HTTP agent's
    /// conversation is rebuilt from the fork's own record. The other CLIs
    /// can only continue a session in place, so their node runs restart.
    pub fn forks_sessions(self) -> bool {
        matches!(
            self,
            Provider::ClaudeCode | Provider::OpenAi | Provider::Anthropic
        )
    }
}

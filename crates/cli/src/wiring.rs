//! The composition root: the one place that names concrete types.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use adapters_agents::anthropic::AnthropicChat;
use adapters_agents::claude::ClaudeCode;
use adapters_agents::codex::Codex;
use adapters_agents::copilot::Copilot;
use adapters_agents::gemini::Gemini;
use adapters_agents::openai::OpenAiChat;
use adapters_agents::{MockQuery, Providers};
use application::ports::{ChatModel, Clock, IdGen, RunStore};
use application::tool_loop::ToolLoop;
use application::tools::ToolRouter;
use domain::workflow::Provider;
use infrastructure::clock::{RandomIds, SystemClock};
use infrastructure::store::FileRunStore;
use infrastructure::tools::{HttpGet, ListDir, ReadFile, Shell, WriteFile};
use infrastructure::transcript::JsonlTranscripts;

use crate::Failure;

/// The file store under `storage`; one that cannot be opened is a storage error (exit 2).
pub fn store(storage: &Path) -> Result<Arc<dyn RunStore>, Failure> {
    FileRunStore::open(storage)
        .map(|s| Arc::new(s) as Arc<dyn RunStore>)
        .map_err(|e| Failure::Input(anyhow::anyhow!("storage {}: {e}", storage.display())))
}

/// Providers for a workflow loaded from `workflow_dir`: mock fixtures are
/// under `fixtures/<workflow name>/` there unless an agent says otherwise.
/// HTTP agents run their tools in awr's working directory (or their
/// `workdir`, taken inside it).
pub fn providers(workflow_dir: &Path, clock: Arc<dyn Clock>, ids: Arc<dyn IdGen>) -> Providers {
    let default_fixtures = workflow_dir.join("fixtures");
    let workspace = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let router = Arc::new(tools());
    let tool_loop = |model: Arc<dyn ChatModel>| {
        let tool_loop = ToolLoop::new(
            model,
            Arc::clone(&router),
            workspace.clone(),
            Arc::clone(&clock),
            Arc::clone(&ids),
        );
        Arc::new(tool_loop)
    };
    Providers::new()
        .with_mock(Arc::new(MockQuery::new(workflow_dir, default_fixtures)))
        .with(Provider::ClaudeCode, Arc::new(ClaudeCode))
        .with(Provider::Codex, Arc::new(Codex::default()))
        .with(Provider::Gemini, Arc::new(Gemini))
        .with(Provider::Copilot, Arc::new(Copilot::default()))
        .with(Provider::OpenAi, tool_loop(Arc::new(OpenAiChat::new())))
        .with(
            Provider::Anthropic,
            tool_loop(Arc::new(AnthropicChat::new())),
        )
}

/// The built-in tools an agent on an HTTP provider may be granted.
pub fn tools() -> ToolRouter {
    ToolRouter::new()
        .with(Arc::new(ReadFile))
        .with(Arc::new(WriteFile))
        .with(Arc::new(ListDir))
        .with(Arc::new(Shell::new()))
        .with(Arc::new(HttpGet::new()))
}

/// Wall clock and random ids.
pub fn clock_and_ids() -> (Arc<SystemClock>, Arc<RandomIds>) {
    (Arc::new(SystemClock), Arc::new(RandomIds))
}

/// Transcript files under `storage/transcripts`.
pub fn transcripts(storage: &Path) -> Arc<JsonlTranscripts> {
    Arc::new(JsonlTranscripts::new(storage))
}

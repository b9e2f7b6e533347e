//! The composition root: the one place that names concrete types.

use std::path::Path;
use std::sync::Arc;

use adapters_agents::claude::ClaudeCode;
use adapters_agents::codex::Codex;
use adapters_agents::copilot::Copilot;
use adapters_agents::gemini::Gemini;
use adapters_agents::{MockQuery, Providers};
use application::ports::RunStore;
use domain::workflow::Provider;
use infrastructure::clock::{RandomIds, SystemClock};
use infrastructure::store::FileRunStore;
use infrastructure::transcript::JsonlTranscripts;

use crate::Failure;

/// The file store under `storage`.
pub fn store(storage: &Path) -> Result<Arc<dyn RunStore>, Failure> {
    FileRunStore::open(storage)
        .map(|s| Arc::new(s) as Arc<dyn RunStore>)
        .map_err(|e| Failure::Run(anyhow::anyhow!("storage {}: {e}", storage.display())))
}

/// Providers for a workflow loaded from `workflow_dir`: mock fixtures are
/// under `fixtures/<workflow name>/` there unless an agent says otherwise.
pub fn providers(workflow_dir: &Path) -> Providers {
    let default_fixtures = workflow_dir.join("fixtures");
    Providers::new()
        .with_mock(Arc::new(MockQuery::new(workflow_dir, default_fixtures)))
        .with(Provider::ClaudeCode, Arc::new(ClaudeCode))
        .with(Provider::Codex, Arc::new(Codex::default()))
        .with(Provider::Gemini, Arc::new(Gemini))
        .with(Provider::Copilot, Arc::new(Copilot::default()))
}

/// Wall clock and random ids.
pub fn clock_and_ids() -> (Arc<SystemClock>, Arc<RandomIds>) {
    (Arc::new(SystemClock), Arc::new(RandomIds))
}

/// Transcript files under `storage/transcripts`.
pub fn transcripts(storage: &Path) -> Arc<JsonlTranscripts> {
    Arc::new(JsonlTranscripts::new(storage))
}

//! Swaps the transcript sink: the stock runtime runs the repository's
//! `examples/summarize.yaml` (mock agents, recorded fixtures), and every
//! content block an agent answers with goes to a channel instead of a file.
//! Exits non-zero if the blocks are not what the run answered.
//!
//! `cargo run -p cli --example embed_transcript_sink`

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use application::RunRequest;
use application::ports::{Transcript, TranscriptError, Transcripts};
use awr_cli::embed::{self, Stock};
use awr_cli::storage::Storage;
use domain::transcript::{ContentBlock, ExchangeDraft, ExchangeEvent, ExchangeType};
use domain::{RunId, RunStatus, WorkflowDef};
use tokio::sync::mpsc;

/// Opens a [`Blocks`] transcript for every run, all sending to one channel.
struct ToChannel(mpsc::UnboundedSender<(RunId, ContentBlock)>);

#[async_trait::async_trait]
impl Transcripts for ToChannel {
    async fn open(
        &self,
        run_id: RunId,
        parent_run_id: Option<RunId>,
    ) -> Result<Arc<dyn Transcript>, TranscriptError> {
        Ok(Arc::new(Blocks {
            run_id,
            parent_run_id,
            seq: AtomicU64::new(1),
            tx: self.0.clone(),
        }))
    }
}

/// One run's transcript: numbers each line, and forwards the blocks of
/// the assistant's messages.
struct Blocks {
    run_id: RunId,
    parent_run_id: Option<RunId>,
    seq: AtomicU64,
    tx: mpsc::UnboundedSender<(RunId, ContentBlock)>,
}

#[async_trait::async_trait]
impl Transcript for Blocks {
    async fn append(&self, draft: ExchangeDraft) -> Result<ExchangeEvent, TranscriptError> {
        let seq = self.seq.fetch_add(1, Ordering::SeqCst);
        let event = draft.into_event(seq, self.run_id, self.parent_run_id);
        if event.kind == ExchangeType::MessageAssistant {
            let blocks: Vec<ContentBlock> = serde_json::from_value(event.payload["blocks"].clone())
                .map_err(|e| TranscriptError::Io(format!("blocks: {e}")))?;
            for block in blocks {
                // The receiver gone is not the run's failure.
                let _ = self.tx.send((self.run_id, block));
            }
        }
        Ok(event)
    }

    fn dropped(&self) -> u64 {
        0
    }

    async fn close(&self) {}
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let file = examples.join("summarize.yaml");
    let workflow = Arc::new(WorkflowDef::from_yaml(&std::fs::read_to_string(&file)?)?);

    let dir = tempfile::tempdir()?;
    let storage = Storage::Files(dir.path().to_path_buf());
    let stock = Stock {
        workflow_dir: examples,
        ..Stock::default()
    };
    let (tx, mut rx) = mpsc::unbounded_channel();
    let runtime = embed::stock(embed::open_store(&storage).await?, &storage, &stock)
        .transcripts(Arc::new(ToChannel(tx)))
        .build();

    let input = workflow.input.clone().unwrap_or_default();
    let request = RunRequest {
        workflow,
        input,
        source: None,
        started_by: None,
    };
    let outcome = runtime.run(request).await?;
    drop(runtime);

    assert_eq!(outcome.status, RunStatus::Completed, "{:?}", outcome.error);
    let mut texts = Vec::new();
    while let Some((run_id, block)) = rx.recv().await {
        assert_eq!(run_id, outcome.run_id);
        if let ContentBlock::Text { text, .. } = block {
            texts.push(text);
        }
    }
    assert_eq!(texts.len(), 2, "one answer per agent: {texts:?}");
    assert_eq!(
        serde_json::Value::String(texts[1].clone()),
        outcome.output,
        "the last agent's blocks are the run's output"
    );
    assert!(
        !dir.path().join("transcripts").exists(),
        "no transcript file: the sink replaced it"
    );
    println!("{} blocks from run {}", texts.len(), outcome.run_id);
    Ok(())
}

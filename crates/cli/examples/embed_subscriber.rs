//! Follows a live run from an offset: a subscriber joins a run while its
//! agent is still answering, from the offset it names, and sees every
//! later event once, in order, up to the terminal one. Exits non-zero if
//! it misses, repeats or reorders an event.
//!
//! `cargo run -p cli --example embed_subscriber`

use std::sync::Arc;

use application::ports::{AgentMessage, AgentRequest, AgentResult, AgentStream};
use application::ports::{QueryError, QueryFn};
use application::{Cancel, RunRequest, Runtime};
use domain::workflow::Provider;
use domain::{EventKind, RunStatus, WorkflowDef};
use futures::StreamExt;
use infrastructure::clock::{RandomIds, SystemClock};
use infrastructure::store::MemoryRunStore;
use tokio::sync::Semaphore;

/// An agent that streams three chunks, each once the program lets it.
struct Gated(Arc<Semaphore>);

#[async_trait::async_trait]
impl QueryFn for Gated {
    async fn query(&self, _request: AgentRequest) -> Result<AgentStream, QueryError> {
        let gate = Arc::clone(&self.0);
        Ok(Box::pin(async_stream::stream! {
            let mut text = String::new();
            for chunk in ["one ", "two ", "three"] {
                match gate.acquire().await {
                    Ok(permit) => permit.forget(),
                    Err(_) => break,
                }
                text.push_str(chunk);
                yield Ok(AgentMessage::TextDelta { content: chunk.to_owned() });
            }
            yield Ok(AgentMessage::Completed(AgentResult { text, num_turns: 1, ..AgentResult::default() }));
        }))
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let gate = Arc::new(Semaphore::new(0));
    let runtime = Runtime::builder(
        Arc::new(MemoryRunStore::new()),
        Arc::new(SystemClock),
        Arc::new(RandomIds),
    )
    .provider(Provider::Mock, Arc::new(Gated(Arc::clone(&gate))))
    .build();
    let yaml = "name: live\nagents: {a: {provider: mock}}\nsteps: [{agent: a}]\n";
    let request = RunRequest {
        workflow: Arc::new(WorkflowDef::from_yaml(yaml)?),
        input: serde_json::Value::Null,
        source: None,
        started_by: None,
    };

    let run_id = runtime.create().await?;
    let writer = tokio::spawn({
        let runtime = runtime.clone();
        async move { runtime.run_created(run_id, request, Cancel::new()).await }
    });

    // Let the first chunk through, and wait until it is on record: the run
    // is live, its agent waiting.
    gate.add_permits(1);
    let mut early = runtime.subscribe(run_id, 0).await?;
    let first_delta = loop {
        let event = early.next().await.ok_or("the run ended early")??;
        if matches!(event.kind, EventKind::AgentTextDelta { .. }) {
            break event.offset.get();
        }
    };
    drop(early);

    // A subscriber from the offset of that chunk: everything after it, live.
    let mut live = runtime.subscribe(run_id, first_delta).await?;
    gate.add_permits(2);
    let mut offsets = Vec::new();
    let mut deltas = Vec::new();
    while let Some(event) = live.next().await {
        let event = event?;
        offsets.push(event.offset.get());
        if let EventKind::AgentTextDelta { content, .. } = &event.kind {
            deltas.push(content.clone());
        }
    }
    let outcome = writer.await??;

    assert_eq!(outcome.status, RunStatus::Completed, "{:?}", outcome.error);
    let expected: Vec<u64> = (first_delta + 1..=outcome.snapshot.last_offset).collect();
    assert_eq!(
        offsets, expected,
        "every event after the offset, once, in order"
    );
    assert_eq!(deltas, ["two ", "three"], "the chunks after the first");
    println!(
        "followed run {run_id} from offset {first_delta}: {} events",
        offsets.len()
    );
    Ok(())
}

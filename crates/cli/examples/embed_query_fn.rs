//! Swaps the `QueryFn`: a workflow run whose agents answer from a table,
//! on the in-memory store. Exits non-zero if the run does not go as shown.
//!
//! `cargo run -p cli --example embed_query_fn`

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use application::ports::{AgentMessage, AgentRequest, AgentResult, AgentStream};
use application::ports::{QueryError, QueryFn};
use application::{RunRequest, Runtime};
use domain::workflow::Provider;
use domain::{RunStatus, WorkflowDef};
use infrastructure::clock::{RandomIds, SystemClock};
use infrastructure::store::MemoryRunStore;

/// Answers each agent by its name, from a table; notes every prompt.
struct Table {
    answers: HashMap<&'static str, &'static str>,
    prompts: Mutex<Vec<String>>,
}

#[async_trait::async_trait]
impl QueryFn for Table {
    async fn query(&self, request: AgentRequest) -> Result<AgentStream, QueryError> {
        let Some(answer) = self.answers.get(request.agent_name.as_str()) else {
            return Err(QueryError::Config(format!(
                "no answer for agent `{}`",
                request.agent_name
            )));
        };
        if let Ok(mut prompts) = self.prompts.lock() {
            prompts.push(request.prompt.clone());
        }
        // What a QueryFn emits: the text, then one `Completed` that ends the stream.
        let messages = vec![
            Ok(AgentMessage::Text {
                content: (*answer).to_owned(),
            }),
            Ok(AgentMessage::Completed(AgentResult {
                text: (*answer).to_owned(),
                num_turns: 1,
                ..AgentResult::default()
            })),
        ];
        Ok(Box::pin(futures::stream::iter(messages)))
    }
}

const WORKFLOW: &str = "
name: table
agents:
  writer: {provider: mock}
  editor: {provider: mock}
steps:
  - agent: writer
  - agent: editor
";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let table = Arc::new(Table {
        answers: HashMap::from([("writer", "a draft"), ("editor", "an edited draft")]),
        prompts: Mutex::default(),
    });
    let runtime = Runtime::builder(
        Arc::new(MemoryRunStore::new()),
        Arc::new(SystemClock),
        Arc::new(RandomIds),
    )
    .provider(Provider::Mock, table.clone())
    .build();

    let workflow = Arc::new(WorkflowDef::from_yaml(WORKFLOW)?);
    let input = serde_json::json!("a topic");
    let request = RunRequest {
        workflow,
        input,
        source: None,
        started_by: None,
    };
    let outcome = runtime.run(request).await?;

    assert_eq!(outcome.status, RunStatus::Completed, "{:?}", outcome.error);
    assert_eq!(outcome.output, serde_json::json!("an edited draft"));
    let prompts = table.prompts.lock().map(|p| p.clone()).unwrap_or_default();
    assert_eq!(prompts.len(), 2, "one call per agent: {prompts:?}");
    assert!(prompts[0].contains("a topic"), "{prompts:?}");
    assert!(
        prompts[1].contains("a draft"),
        "the editor reads the writer: {prompts:?}"
    );
    let snapshot = runtime.snapshot(outcome.run_id).await?;
    assert_eq!(snapshot.status, RunStatus::Completed);
    println!("run {}: {}", outcome.run_id, outcome.output);
    Ok(())
}

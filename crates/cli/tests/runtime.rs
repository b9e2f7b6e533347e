//! `application::Runtime` as a program that embeds awr uses it: observers,
//! commands and subscriptions over the memory store.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use application::ports::{AgentMessage, AgentResult, MockQueryFn, RunObserver};
use application::{Cancel, RunRequest, Runtime};
use domain::workflow::Provider;
use domain::{RunStatus, RuntimeEvent, WorkflowDef};
use futures::StreamExt;
use infrastructure::clock::{RandomIds, SystemClock};
use infrastructure::store::MemoryRunStore;

/// Notes the offset of every event it is shown.
#[derive(Default)]
struct Offsets(Mutex<Vec<u64>>);

impl RunObserver for Offsets {
    fn on_event(&self, event: &RuntimeEvent) {
        self.0.lock().unwrap().push(event.offset.get());
    }
}

fn answering() -> MockQueryFn {
    let mut query = MockQueryFn::new();
    query.expect_query().returning(|_| {
        let done = AgentMessage::Completed(AgentResult {
            text: "done".into(),
            num_turns: 1,
            ..AgentResult::default()
        });
        Ok(Box::pin(futures::stream::iter([Ok(done)])))
    });
    query
}

fn request() -> RunRequest {
    let yaml = "name: one\nagents: {a: {provider: mock}}\nsteps: [{agent: a}]\n";
    RunRequest {
        workflow: Arc::new(WorkflowDef::from_yaml(yaml).unwrap()),
        input: serde_json::Value::Null,
        source: None,
        started_by: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_observer_sees_every_event_once_in_offset_order() {
    let (first, second) = (Arc::new(Offsets::default()), Arc::new(Offsets::default()));
    let runtime = Runtime::builder(
        Arc::new(MemoryRunStore::new()),
        Arc::new(SystemClock),
        Arc::new(RandomIds),
    )
    .provider(Provider::Mock, Arc::new(answering()))
    .observer(first.clone())
    .observer(second.clone())
    .build();
    let outcome = runtime.run(request()).await.unwrap();
    assert_eq!(outcome.status, RunStatus::Completed, "{:?}", outcome.error);
    let all: Vec<u64> = (1..=outcome.snapshot.last_offset).collect();
    assert_eq!(*first.0.lock().unwrap(), all);
    assert_eq!(*second.0.lock().unwrap(), all);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_to_an_ended_run_is_refused_and_its_snapshot_and_subscription_show_its_end() {
    let runtime = Runtime::builder(
        Arc::new(MemoryRunStore::new()),
        Arc::new(SystemClock),
        Arc::new(RandomIds),
    )
    .provider(Provider::Mock, Arc::new(answering()))
    .build();
    // A run cancelled before its first step.
    let run_id = runtime.create().await.unwrap();
    let cancel = Cancel::new();
    cancel.cancel("stopped by the program");
    let outcome = runtime
        .run_created(run_id, request(), cancel)
        .await
        .unwrap();
    assert_eq!(outcome.status, RunStatus::Cancelled);
    let workflow = request().workflow;
    let refused = runtime
        .command(
            run_id,
            &serde_json::json!({"type": "pause"}),
            None,
            async || Ok(workflow),
        )
        .await;
    assert!(
        refused.is_err(),
        "an ended run takes no command: {refused:?}"
    );
    let snapshot = runtime.snapshot(run_id).await.unwrap();
    assert_eq!(snapshot.status, RunStatus::Cancelled);
    let events: Vec<_> = runtime.subscribe(run_id, 0).await.unwrap().collect().await;
    assert_eq!(events.len() as u64, snapshot.last_offset);
    assert!(events.last().unwrap().as_ref().unwrap().kind.is_terminal());
}

//! What a resume does before it calls the provider, on an in-memory log
//! that records every store operation in order: resuming is not a step
//! boundary, so no sync or snapshot stands between it and the call (design
//! §11: under 1 ms); a routing the dead writer left half done still ends
//! with one, as every routing does.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Mutex;

use async_trait::async_trait;
use serde_json::json;

use super::memory_log::{Counter, MemoryLog, Ticking};
use super::*;
use crate::ports::{AgentMessage, AgentRequest, AgentResult, AgentStream, QueryError, QueryFn};

/// Answers at once, except the nodes in `hangs`, which never answer; notes
/// each call in `ops` and tells `called` of it.
struct Agent {
    hangs: &'static [&'static str],
    ops: Arc<Mutex<Vec<String>>>,
    called: tokio::sync::mpsc::UnboundedSender<String>,
}

#[async_trait]
impl QueryFn for Agent {
    async fn query(&self, request: AgentRequest) -> Result<AgentStream, QueryError> {
        let node = request.node_id.to_string();
        self.ops.lock().unwrap().push(format!("query {node}"));
        let _ = self.called.send(node.clone());
        if self.hangs.contains(&node.as_str()) {
            return Ok(Box::pin(futures::stream::pending()));
        }
        let done = AgentMessage::Completed(AgentResult {
            text: format!("from {node}"),
            num_turns: 1,
            ..AgentResult::default()
        });
        Ok(Box::pin(futures::stream::iter([Ok(done)])))
    }
}

const CHAIN: &str = "
name: chain
agents:
  a: {provider: claude-code, system_prompt: first}
  b: {provider: claude-code, system_prompt: second}
steps: [{agent: a}, {agent: b}]
";

/// An executor over `log` whose agent hangs on the nodes in `hangs`.
fn executor(
    log: &Arc<MemoryLog>,
    hangs: &'static [&'static str],
) -> (Executor, tokio::sync::mpsc::UnboundedReceiver<String>) {
    let (called, calls) = tokio::sync::mpsc::unbounded_channel();
    let agent = Agent {
        hangs,
        ops: Arc::clone(&log.ops),
        called,
    };
    let executor = Executor::new(
        Arc::clone(log) as Arc<dyn RunStore>,
        Arc::new(agent),
        Arc::new(Ticking::default()),
        Arc::new(Counter::default()),
    );
    (executor, calls)
}

/// Waits until the agent is called on `node`; a test that waits longer
/// than a few seconds has failed.
async fn called(calls: &mut tokio::sync::mpsc::UnboundedReceiver<String>, node: &str) {
    let wait = async { while calls.recv().await.as_deref() != Some(node) {} };
    tokio::time::timeout(std::time::Duration::from_secs(10), wait)
        .await
        .unwrap_or_else(|_| panic!("the agent was never called on `{node}`"));
}

/// Runs `CHAIN` until its agent is called on `node`, then drops the run, as
/// the death of its writer would leave it.
async fn killed_at(log: &Arc<MemoryLog>, node: &str) -> (RunId, Arc<WorkflowDef>) {
    let workflow = Arc::new(WorkflowDef::from_yaml(CHAIN).unwrap());
    let hangs: &'static [&'static str] = if node == "a" { &["a", "b"] } else { &["b"] };
    let (executor, mut calls) = executor(log, hangs);
    let run_id = executor.create().await.unwrap();
    let request = RunRequest {
        workflow: Arc::clone(&workflow),
        input: json!("go"),
        source: None,
        started_by: None,
    };
    let run = executor.run(run_id, request);
    tokio::select! {
        _ = run => panic!("the run ended"),
        () = called(&mut calls, node) => {}
    }
    (run_id, workflow)
}

/// Resumes the run and returns the store operations from the resume's
/// start up to the call of `node`.
async fn resume_until_called(
    log: &Arc<MemoryLog>,
    run_id: RunId,
    workflow: Arc<WorkflowDef>,
    node: &str,
) -> Vec<String> {
    let start = log.ops.lock().unwrap().len();
    let (executor, mut calls) = executor(log, &["a", "b"]);
    let resume = executor.resume(run_id, workflow, None, None, Cancel::new());
    tokio::select! {
        outcome = resume => panic!("the resume ended: {outcome:?}"),
        () = called(&mut calls, node) => {}
    }
    log.ops.lock().unwrap()[start..].to_vec()
}

#[tokio::test]
async fn a_resume_calls_the_agent_in_flight_before_any_sync_or_snapshot() {
    let log = Arc::new(MemoryLog::forgetting_snapshots());
    let (run_id, workflow) = killed_at(&log, "b").await;
    let ops = resume_until_called(&log, run_id, workflow, "b").await;
    assert_eq!(
        ops,
        ["append flow:resumed", "append agent:start", "query b"],
        "resuming is not a step boundary: the resumed call's step ends with its sync"
    );
}

#[tokio::test]
async fn a_routing_left_half_done_ends_with_a_sync_before_the_next_call() {
    let log = Arc::new(MemoryLog::forgetting_snapshots());
    let (run_id, workflow) = killed_at(&log, "b").await;
    // The writer died right after a's end: its edge and b are not on record.
    {
        let mut events = log.events.lock().unwrap();
        let end = events
            .iter()
            .position(|e| e.kind.type_name() == "node:completed")
            .unwrap();
        events.truncate(end + 1);
    }
    let ops = resume_until_called(&log, run_id, workflow, "b").await;
    let sync = ops.iter().position(|op| op == "flush").expect("a sync");
    let edge = ops.iter().position(|op| op == "append edge:fired").unwrap();
    let call = ops.iter().position(|op| op == "query b").unwrap();
    assert!(edge < sync && sync < call, "{ops:?}");
}

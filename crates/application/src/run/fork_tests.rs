//! Fork (`crate::fork`) on in-memory logs: the copy, `flow:forked`, what
//! runs again after it and how, and the requests refused before any run
//! is made.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;
use domain::RuntimeEvent;
use serde_json::json;

use super::memory_log::{Counter, MemoryLog, Ticking};
use super::*;
use crate::fork::ForkRequest;
use crate::ports::{
    AgentMessage, AgentRequest, AgentResult, AgentStream, EventStream, QueryError, QueryFn,
};

/// Runs in memory, one [`MemoryLog`] each; imports fail while the flag
/// is set (a store that fails midway through storing a fork).
#[derive(Default)]
struct Runs(
    Mutex<HashMap<RunId, Arc<MemoryLog>>>,
    std::sync::atomic::AtomicBool,
);

impl Runs {
    fn log(&self, run_id: RunId) -> Result<Arc<MemoryLog>, StoreError> {
        self.0
            .lock()
            .unwrap()
            .get(&run_id)
            .cloned()
            .ok_or(StoreError::NotFound(run_id))
    }

    fn events(&self, run_id: RunId) -> Vec<RuntimeEvent> {
        self.log(run_id).unwrap().events.lock().unwrap().clone()
    }

    fn count(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

#[async_trait]
impl RunStore for Runs {
    async fn create_run(&self, run_id: RunId) -> Result<RunLock, StoreError> {
        self.0.lock().unwrap().insert(run_id, Arc::default());
        Ok(RunLock::new(run_id, ()))
    }
    async fn lock(&self, run_id: RunId) -> Result<RunLock, StoreError> {
        self.log(run_id)?.lock(run_id).await
    }
    async fn has_writer(&self, run_id: RunId) -> Result<bool, StoreError> {
        self.log(run_id)?.has_writer(run_id).await
    }
    async fn append(&self, run_id: RunId, events: &[RuntimeEvent]) -> Result<u64, StoreError> {
        self.log(run_id)?.append(run_id, events).await
    }
    async fn flush(&self, run_id: RunId) -> Result<(), StoreError> {
        self.log(run_id)?.flush(run_id).await
    }
    async fn read(
        &self,
        run_id: RunId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<RuntimeEvent>, StoreError> {
        self.log(run_id)?.read(run_id, after, limit).await
    }
    async fn last_offset(&self, run_id: RunId) -> Result<u64, StoreError> {
        self.log(run_id)?.last_offset(run_id).await
    }
    async fn follow(&self, run_id: RunId, after: u64) -> Result<EventStream, StoreError> {
        self.log(run_id)?.follow(run_id, after).await
    }
    async fn save_snapshot(&self, snapshot: &RunSnapshot) -> Result<u64, StoreError> {
        self.log(snapshot.run_id)?.save_snapshot(snapshot).await
    }
    async fn load_snapshot(&self, run_id: RunId) -> Result<Option<RunSnapshot>, StoreError> {
        self.log(run_id)?.load_snapshot(run_id).await
    }
    /// Runs here start from no file: there is no definition to keep.
    async fn save_definition(
        &self,
        _: &domain::definition::Definition,
    ) -> Result<String, StoreError> {
        Err(StoreError::io_msg("this test store keeps no definitions"))
    }
    async fn load_definition(
        &self,
        _: &str,
    ) -> Result<Option<domain::definition::Definition>, StoreError> {
        Ok(None)
    }
    async fn list_runs(&self) -> Result<Vec<RunId>, StoreError> {
        Ok(self.0.lock().unwrap().keys().copied().collect())
    }
    async fn delete_run(&self, run_id: RunId) -> Result<(), StoreError> {
        self.0.lock().unwrap().remove(&run_id);
        Ok(())
    }
    async fn import_run(
        &self,
        run_id: RunId,
        mut events: crate::ports::EventBatches,
        snapshot: Option<RunSnapshot>,
    ) -> Result<(), StoreError> {
        use futures::StreamExt;
        if self.1.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(StoreError::io_msg("the disk is full"));
        }
        let log = Arc::new(MemoryLog::default());
        let lock = log.lock(run_id).await?;
        while let Some(batch) = events.next().await {
            log.append(run_id, &batch?).await?;
        }
        if let Some(snapshot) = snapshot {
            log.save_snapshot(&snapshot).await?;
        }
        drop(lock);
        let mut runs = self.0.lock().unwrap();
        if runs.contains_key(&run_id) {
            return Err(StoreError::Conflict(format!("run {run_id} exists")));
        }
        runs.insert(run_id, log);
        Ok(())
    }
}

/// Answers at once, except on the node named in `hangs` while it is set;
/// keeps every request.
#[derive(Default)]
struct Agent {
    hangs: Mutex<Option<&'static str>>,
    requests: Mutex<Vec<AgentRequest>>,
    called: Mutex<Option<tokio::sync::mpsc::UnboundedSender<String>>>,
}

#[async_trait]
impl QueryFn for Agent {
    async fn query(&self, request: AgentRequest) -> Result<AgentStream, QueryError> {
        let node = request.node_id.to_string();
        self.requests.lock().unwrap().push(request);
        if let Some(called) = self.called.lock().unwrap().as_ref() {
            let _ = called.send(node.clone());
        }
        if *self.hangs.lock().unwrap() == Some(node.as_str()) {
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

/// A chain of three agents on `provider`.
fn chain(provider: &str) -> Arc<WorkflowDef> {
    Arc::new(
        WorkflowDef::from_yaml(&format!(
            "name: chain\nagents:\n  a: {{provider: {provider}}}\n  b: {{provider: {provider}}}\n  \
             c: {{provider: {provider}}}\nsteps: [{{agent: a}}, {{agent: b}}, {{agent: c}}]\n"
        ))
        .unwrap(),
    )
}

fn executor(runs: &Arc<Runs>, agent: &Arc<Agent>) -> Executor {
    Executor::new(
        Arc::clone(runs) as Arc<dyn RunStore>,
        Arc::clone(agent) as Arc<dyn QueryFn>,
        Arc::new(Ticking::default()),
        Arc::new(Counter::default()),
    )
}

/// Runs `workflow` to its end on `input`; its run id.
async fn completed(executor: &Executor, workflow: &Arc<WorkflowDef>) -> RunId {
    let run_id = executor.create().await.unwrap();
    let request = RunRequest {
        workflow: Arc::clone(workflow),
        input: json!("topic"),
        source: None,
        started_by: None,
    };
    let outcome = executor.run(run_id, request).await.unwrap();
    assert_eq!(outcome.status, RunStatus::Completed);
    run_id
}

/// The offset of the first event of `kind` on `node`.
fn offset_of(events: &[RuntimeEvent], kind: &str, node: &str) -> u64 {
    events
        .iter()
        .find(|e| {
            e.kind.type_name() == kind && e.node_id.as_ref().map(|n| n.as_str()) == Some(node)
        })
        .unwrap_or_else(|| panic!("no {kind} of {node}"))
        .offset
        .get()
}

/// The nodes of the `agent:start`s after offset `after`.
fn started_after(events: &[RuntimeEvent], after: u64) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.offset.get() > after && matches!(e.kind, EventKind::AgentStart { .. }))
        .map(|e| e.node_id.as_ref().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn a_fork_after_the_first_node_copies_its_log_and_runs_the_other_two_again() {
    let runs = Arc::new(Runs::default());
    let agent = Arc::new(Agent::default());
    let executor = executor(&runs, &agent);
    let workflow = chain("mock");
    let parent = completed(&executor, &workflow).await;
    let before = runs.events(parent);
    let at = offset_of(&before, "node:completed", "a");

    let request = ForkRequest {
        parent,
        at,
        input: None,
        by: domain::Caller::new("alice@host").ok(),
    };
    let fork = executor.fork(request, &workflow).await.unwrap();
    let outcome = executor
        .run_fork(fork, Arc::clone(&workflow), Cancel::new())
        .await
        .unwrap();
    assert_eq!(outcome.status, RunStatus::Completed);
    assert_eq!(outcome.output, json!("from c"));

    let events = runs.events(fork);
    for (copy, original) in events.iter().zip(&before[..usize::try_from(at).unwrap()]) {
        assert_eq!(copy.run_id, fork);
        assert_ne!(
            copy.id, original.id,
            "an event id names one event of one log"
        );
        assert_eq!(
            (copy.offset, copy.timestamp, &copy.kind),
            (original.offset, original.timestamp, &original.kind)
        );
    }
    let forked = &events[usize::try_from(at).unwrap()];
    assert_eq!(
        forked.kind,
        EventKind::FlowForked {
            parent_run_id: parent,
            parent_offset: domain::Offset::new(at).unwrap(),
            input: None,
            by: domain::Caller::new("alice@host").ok(),
        }
    );
    assert_eq!(
        started_after(&events, at),
        ["b", "c"],
        "b and c only, once each"
    );
    assert!(
        !events
            .iter()
            .any(|e| matches!(e.kind, EventKind::FlowResumed { .. })),
        "flow:forked stands for it"
    );
    let state = RunSnapshot::fold(&events).unwrap();
    assert_eq!(
        state.forked_from,
        Some(domain::snapshot::ForkedFrom {
            run_id: parent,
            offset: at
        })
    );
    assert_eq!(outcome.snapshot, state, "fold(events) = snapshot");
    assert_eq!(runs.events(parent), before, "the parent is untouched");
}

#[tokio::test]
async fn a_new_input_is_what_the_nodes_after_the_fork_read() {
    let runs = Arc::new(Runs::default());
    let agent = Arc::new(Agent::default());
    let executor = executor(&runs, &agent);
    let workflow = chain("mock");
    let parent = completed(&executor, &workflow).await;
    let request = ForkRequest {
        parent,
        at: 1,
        input: Some(json!("another topic")),
        by: None,
    };
    let fork = executor.fork(request, &workflow).await.unwrap();
    executor
        .run_fork(fork, Arc::clone(&workflow), Cancel::new())
        .await
        .unwrap();
    let events = runs.events(fork);
    assert_eq!(started_after(&events, 1), ["a", "b", "c"]);
    let a = events
        .iter()
        .find(|e| matches!(e.kind, EventKind::NodeStarted { .. }))
        .unwrap();
    let EventKind::NodeStarted { input, .. } = &a.kind else {
        unreachable!()
    };
    assert_eq!(input["data"], json!("another topic"));
}

/// Forks the chain on `provider` while `b` is in its provider call; the
/// requests made for `b` after the fork, and the fork's events.
async fn fork_in_flight(provider: &str) -> (Vec<AgentRequest>, Vec<RuntimeEvent>, u64) {
    let runs = Arc::new(Runs::default());
    let agent = Arc::new(Agent::default());
    *agent.hangs.lock().unwrap() = Some("b");
    let (called, mut calls) = tokio::sync::mpsc::unbounded_channel();
    *agent.called.lock().unwrap() = Some(called);
    let executor = executor(&runs, &agent);
    let workflow = chain(provider);
    let parent = executor.create().await.unwrap();
    let request = RunRequest {
        workflow: Arc::clone(&workflow),
        input: json!("topic"),
        source: None,
        started_by: None,
    };
    let cancel = Cancel::new();
    let running = tokio::spawn({
        let executor = executor.clone();
        let cancel = cancel.clone();
        async move { executor.run_cancellable(parent, request, cancel).await }
    });
    let wait = async { while calls.recv().await.as_deref() != Some("b") {} };
    tokio::time::timeout(std::time::Duration::from_secs(10), wait)
        .await
        .expect("b is called");
    let at = offset_of(&runs.events(parent), "agent:start", "b");
    *agent.hangs.lock().unwrap() = None;
    let asked = agent.requests.lock().unwrap().len();

    let fork = executor
        .fork(
            ForkRequest {
                parent,
                at,
                input: None,
                by: None,
            },
            &workflow,
        )
        .await
        .unwrap();
    let outcome = executor
        .run_fork(fork, Arc::clone(&workflow), Cancel::new())
        .await
        .unwrap();
    assert_eq!(outcome.status, RunStatus::Completed, "{provider}");
    cancel.cancel("the test is over");
    let _ = running.await;
    let requests = agent.requests.lock().unwrap()[asked..]
        .iter()
        .filter(|r| r.node_id.as_str() == "b" && r.run_id == fork)
        .cloned()
        .collect();
    (requests, runs.events(fork), at)
}

#[tokio::test]
async fn a_claude_code_agent_in_flight_goes_on_in_a_copy_of_its_session() {
    let (requests, events, at) = fork_in_flight("claude-code").await;
    let parent_session = events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::AgentStart { session_id, .. } if e.offset.get() == at => {
                Some(session_id.clone())
            }
            _ => None,
        })
        .unwrap();
    let [request] = &requests[..] else {
        panic!("one call of b: {requests:?}")
    };
    assert!(request.fork_session);
    assert_eq!(request.resume.as_ref(), Some(&parent_session));
    let copy = request.session_id.clone().expect("the copy's own id");
    assert_ne!(copy, parent_session);
    // On record before the call, and no new attempt.
    assert!(events.iter().any(|e| e.offset.get() > at
        && matches!(&e.kind, EventKind::AgentStart { session_id, .. } if *session_id == copy)));
    assert_eq!(started_after(&events, at), ["b", "c"]);
    assert!(!events.iter().any(|e| e.offset.get() > at
        && matches!(
            e.kind,
            EventKind::NodeStarted {
                attempt: Some(2),
                ..
            }
        )));
}

#[tokio::test]
async fn an_agent_whose_provider_cannot_fork_restarts_as_a_new_attempt() {
    let (requests, events, at) = fork_in_flight("codex").await;
    let [request] = &requests[..] else {
        panic!("one call of b: {requests:?}")
    };
    assert!(
        !request.fork_session && request.resume.is_none(),
        "{request:?}"
    );
    assert!(events.iter().any(|e| e.offset.get() > at
        && e.node_id.as_ref().is_some_and(|n| n.as_str() == "b")
        && matches!(
            e.kind,
            EventKind::NodeStarted {
                attempt: Some(2),
                ..
            }
        )));
    assert_eq!(started_after(&events, at), ["b", "c"]);
}

#[tokio::test]
async fn a_bad_fork_is_refused_before_any_run_is_made() {
    let runs = Arc::new(Runs::default());
    let agent = Arc::new(Agent::default());
    let executor = executor(&runs, &agent);
    let workflow = chain("mock");
    let parent = completed(&executor, &workflow).await;
    let last = runs.events(parent).len() as u64;
    let unknown: RunId = "7f8c2b1e-3d4a-4b5c-9d6e-1f2a3b4c5d6e".parse().unwrap();
    let other = chain("codex");
    for (run, at, workflow, says) in [
        (parent, 0, &workflow, "offset 0"),
        (parent, last + 1, &workflow, "beyond the end"),
        (parent, last, &workflow, "is the end of run"),
        (unknown, 1, &workflow, "not found"),
        (parent, 1, &other, "changed since the run started"),
    ] {
        let request = ForkRequest {
            parent: run,
            at,
            input: None,
            by: None,
        };
        let error = executor.fork(request, workflow).await.unwrap_err();
        assert!(error.to_string().contains(says), "{says}: {error}");
    }
    assert_eq!(runs.count(), 1, "no run was made");
}

/// A fork the store fails to store is an error, and leaves no run behind:
/// the copy is stored whole or not at all.
#[tokio::test]
async fn a_fork_the_store_cannot_store_leaves_no_run() {
    let runs = Arc::new(Runs::default());
    let agent = Arc::new(Agent::default());
    let executor = executor(&runs, &agent);
    let workflow = chain("mock");
    let parent = completed(&executor, &workflow).await;
    let events = runs.events(parent);
    runs.1.store(true, std::sync::atomic::Ordering::Relaxed);
    let request = ForkRequest {
        parent,
        at: offset_of(&events, "node:completed", "a"),
        input: None,
        by: None,
    };
    let error = executor.fork(request, &workflow).await.unwrap_err();
    assert!(error.to_string().contains("the disk is full"), "{error}");
    assert_eq!(runs.count(), 1, "no run was made");
}

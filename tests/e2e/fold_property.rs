//! The fold property over real runs: for random workflows (chains, branches,
//! loops, failures, `continue_on_error`) run by the real runner on the real
//! memory store (weighing events as the file store does, so snapshots and
//! deltas are due), every snapshot the runner saved, and every state a delta
//! brought it to, equals the fold of the events before it, and the final
//! state equals the fold of the whole log.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use application::inspect::current_snapshot;
use application::ports::{
    AgentMessage, AgentRequest, AgentResult, AgentStream, EventStream, QueryError, QueryFn,
    RunLock, RunStore, StoreError,
};
use application::{CheckpointPolicy, Executor, RunRequest};
use async_trait::async_trait;
use domain::snapshot::SnapshotDelta;
use domain::{RunId, RunSnapshot, RuntimeEvent, WorkflowDef};
use infrastructure::{FixedClock, MemoryRunStore, SeededIds};
use proptest::prelude::*;
use serde_json::json;

/// A memory store that also keeps every snapshot ever saved.
struct Recording {
    inner: MemoryRunStore,
    saved: Mutex<Vec<RunSnapshot>>,
    deltas: std::sync::atomic::AtomicUsize,
}

#[async_trait]
impl RunStore for Recording {
    async fn create_run(&self, run_id: RunId) -> Result<RunLock, StoreError> {
        self.inner.create_run(run_id).await
    }
    async fn lock(&self, run_id: RunId) -> Result<RunLock, StoreError> {
        self.inner.lock(run_id).await
    }
    async fn has_writer(&self, run_id: RunId) -> Result<bool, StoreError> {
        self.inner.has_writer(run_id).await
    }
    async fn append(&self, run_id: RunId, events: &[RuntimeEvent]) -> Result<u64, StoreError> {
        self.inner.append(run_id, events).await
    }
    async fn flush(&self, run_id: RunId) -> Result<(), StoreError> {
        self.inner.flush(run_id).await
    }
    async fn read(
        &self,
        run_id: RunId,
        after: u64,
        limit: usize,
    ) -> Result<Vec<RuntimeEvent>, StoreError> {
        self.inner.read(run_id, after, limit).await
    }
    async fn last_offset(&self, run_id: RunId) -> Result<u64, StoreError> {
        self.inner.last_offset(run_id).await
    }
    async fn follow(&self, run_id: RunId, after: u64) -> Result<EventStream, StoreError> {
        self.inner.follow(run_id, after).await
    }
    async fn save_snapshot(&self, snapshot: &RunSnapshot) -> Result<u64, StoreError> {
        self.saved.lock().unwrap().push(snapshot.clone());
        self.inner.save_snapshot(snapshot).await
    }
    /// Keeps the state the store holds after the delta.
    async fn save_snapshot_delta(&self, delta: &SnapshotDelta) -> Result<Option<u64>, StoreError> {
        let bytes = self.inner.save_snapshot_delta(delta).await?;
        self.deltas
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let state = self.inner.load_snapshot(delta.run_id).await?;
        self.saved.lock().unwrap().extend(state);
        Ok(bytes)
    }
    async fn load_snapshot(&self, run_id: RunId) -> Result<Option<RunSnapshot>, StoreError> {
        self.inner.load_snapshot(run_id).await
    }
    async fn save_definition(
        &self,
        definition: &domain::definition::Definition,
    ) -> Result<String, StoreError> {
        self.inner.save_definition(definition).await
    }
    async fn load_definition(
        &self,
        hash: &str,
    ) -> Result<Option<domain::definition::Definition>, StoreError> {
        self.inner.load_definition(hash).await
    }
    async fn list_runs(&self) -> Result<Vec<RunId>, StoreError> {
        self.inner.list_runs().await
    }
    async fn delete_run(&self, run_id: RunId) -> Result<(), StoreError> {
        self.inner.delete_run(run_id).await
    }
    async fn import_run(
        &self,
        run_id: RunId,
        events: application::ports::EventBatches,
        snapshot: Option<RunSnapshot>,
    ) -> Result<(), StoreError> {
        self.inner.import_run(run_id, events, snapshot).await
    }
}

/// What one agent call does.
#[derive(Debug, Clone)]
enum Outcome {
    Answer(String),
    Fail,
}

/// Answers each node's calls from its list of outcomes, cycling.
struct Scripted {
    outcomes: HashMap<String, Vec<Outcome>>,
    calls: Mutex<HashMap<String, usize>>,
}

#[async_trait]
impl QueryFn for Scripted {
    async fn query(&self, request: AgentRequest) -> Result<AgentStream, QueryError> {
        let node = request.node_id.to_string();
        let n = {
            let mut calls = self.calls.lock().unwrap();
            let n = calls.entry(node.clone()).or_insert(0);
            *n += 1;
            *n - 1
        };
        let list = &self.outcomes[&node];
        let items: Vec<Result<AgentMessage, QueryError>> = match &list[n % list.len()] {
            Outcome::Answer(text) => vec![
                Ok(AgentMessage::TextDelta {
                    content: text.clone(),
                }),
                Ok(AgentMessage::Completed(AgentResult {
                    text: text.clone(),
                    num_turns: 1,
                    ..AgentResult::default()
                })),
            ],
            Outcome::Fail => vec![Err(QueryError::Agent {
                error_type: "api_error".into(),
                message: "scripted failure".into(),
                details: None,
            })],
        };
        Ok(Box::pin(futures::stream::iter(items)))
    }
}

#[derive(Debug, Clone)]
struct Case {
    nodes: usize,
    /// (from, to, condition kind) with from < to.
    edges: Vec<(usize, usize, u8)>,
    /// Loop from the last node back to the first, with this limit.
    loop_limit: Option<u32>,
    lenient: Vec<bool>,
    outcomes: Vec<Vec<Outcome>>,
}

fn outcome() -> impl Strategy<Value = Outcome> {
    prop_oneof![
        4 => prop_oneof![Just("plain"), Just("has x"), Just("again"), Just("x again")]
            .prop_map(|s| Outcome::Answer(s.to_owned())),
        1 => Just(Outcome::Fail),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    (1usize..6).prop_flat_map(|n| {
        let pairs: Vec<(usize, usize)> = (0..n)
            .flat_map(|a| (a + 1..n).map(move |b| (a, b)))
            .collect();
        let edges = if pairs.is_empty() {
            Just(Vec::new()).boxed()
        } else {
            let edge = (proptest::sample::select(pairs), 0u8..3).prop_map(|((a, b), c)| (a, b, c));
            proptest::collection::vec(edge, 0..8).boxed()
        };
        (
            Just(n),
            edges,
            proptest::option::of(1u32..3),
            proptest::collection::vec(any::<bool>(), n),
            proptest::collection::vec(proptest::collection::vec(outcome(), 1..4), n),
        )
            .prop_map(|(nodes, edges, loop_limit, lenient, outcomes)| Case {
                nodes,
                edges,
                loop_limit,
                lenient,
                outcomes,
            })
    })
}

fn yaml(case: &Case) -> String {
    let mut y = String::from("name: random\nagents:\n");
    for i in 0..case.nodes {
        y += &format!(
            "  a{i}: {{provider: mock, policy: {{continue_on_error: {}}}}}\n",
            case.lenient[i]
        );
    }
    y += "nodes:\n";
    for i in 0..case.nodes {
        y += &format!("  - {{id: n{i}, agent: a{i}}}\n");
    }
    y += "edges:\n";
    let mut seen = std::collections::HashSet::new();
    for (a, b, c) in &case.edges {
        if !seen.insert((a, b)) {
            continue;
        }
        let when = match c {
            0 => String::new(),
            1 => ", when: 'output.contains(\"x\")'".into(),
            _ => ", when: '!output.contains(\"x\")'".into(),
        };
        y += &format!("  - {{from: n{a}, to: n{b}{when}}}\n");
    }
    if let (Some(limit), true) = (case.loop_limit, case.nodes > 1) {
        y += &format!(
            "  - {{from: n{}, to: n0, when: 'output.contains(\"again\")', max_iterations: {limit}}}\n",
            case.nodes - 1
        );
    }
    y
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn every_saved_snapshot_is_the_fold_of_the_log(case in case()) {
        let src = yaml(&case);
        // Some random graphs are invalid (a loop edge that closes no cycle); those are not runs.
        let Ok(workflow) = WorkflowDef::from_yaml(&src) else { return Ok(()) };
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let store = Arc::new(Recording { inner: MemoryRunStore::measuring(), saved: Mutex::new(Vec::new()), deltas: Default::default() });
            let outcomes = (0..case.nodes).map(|i| (format!("n{i}"), case.outcomes[i].clone())).collect();
            let query = Arc::new(Scripted { outcomes, calls: Mutex::new(HashMap::new()) });
            // Deltas at nearly every step, a snapshot now and then.
            let runner = Executor::new(
                store.clone(),
                query,
                Arc::new(FixedClock::default()),
                Arc::new(SeededIds::new(7)),
            )
            .with_checkpoints(CheckpointPolicy {
                growth_percent: 1000,
                min_log_bytes: 0,
                delta_percent: 1,
                min_delta_log_bytes: 0,
                min_delta_snapshot_bytes: 0,
                delta_budget_percent: 1000,
            });
            let run_id = runner.create().await.unwrap();
            let outcome = runner
                .run(run_id, RunRequest { workflow: Arc::new(workflow), input: json!("start"), source: None, started_by: None })
                .await
                .unwrap();
            let events = store.read(run_id, 0, usize::MAX).await.unwrap();
            for (i, e) in events.iter().enumerate() {
                prop_assert_eq!(e.offset.get(), i as u64 + 1);
            }
            prop_assert!(events.last().unwrap().kind.is_terminal(), "{}", src);
            for saved in store.saved.lock().unwrap().iter() {
                let upto = usize::try_from(saved.last_offset).unwrap();
                let folded = RunSnapshot::fold(&events[..upto]);
                prop_assert_eq!(folded.as_ref(), Some(saved), "{}", src);
            }
            let folded = RunSnapshot::fold(&events).unwrap();
            prop_assert_eq!(&folded, &outcome.snapshot);
            prop_assert_eq!(&current_snapshot(store.as_ref(), run_id).await.unwrap(), &folded);
            Ok(())
        })?;
    }
}

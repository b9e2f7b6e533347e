//! A consumer's adapter can fail, and the runtime survives: a `QueryFn`
//! that errs, hangs past its timeout or panics ends its node run as failed
//! with the reason recorded, while the other node runs and the other runs
//! go on; a store that fails an append stops its run with a typed error
//! and leaves no half-written event. Written as a program that embeds awr
//! would write them, with the port mocks of the `testing` feature.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use application::ports::{
    AgentMessage, AgentRequest, AgentResult, AgentStream, EventBatches, EventStream, MockQueryFn,
    QueryError, QueryFn, RunLock, RunStore, StoreError,
};
use application::{Cancel, ExecutorError, RunOutcome, RunRequest, Runtime};
use async_trait::async_trait;
use domain::definition::Definition;
use domain::workflow::Provider;
use domain::{EventKind, RunId, RunSnapshot, RunStatus, RuntimeEvent, WorkflowDef};
use infrastructure::clock::{RandomIds, SystemClock};
use infrastructure::store::MemoryRunStore;

/// Two nodes side by side: `a` on the consumer's adapter under test (its
/// failure does not fail the run), `b` on one that answers.
const TWO_BRANCHES: &str = "
name: survive
agents:
  broken:
    provider: mock
    timeout: 1s
    policy: {continue_on_error: true}
  sound: {provider: codex}
nodes:
  - {id: a, agent: broken}
  - {id: b, agent: sound}
";

/// Answers `answer` at once.
struct Answers(&'static str);

#[async_trait]
impl QueryFn for Answers {
    async fn query(&self, _request: AgentRequest) -> Result<AgentStream, QueryError> {
        Ok(answer(self.0))
    }
}

fn answer(text: &str) -> AgentStream {
    let done = AgentMessage::Completed(AgentResult {
        text: text.to_owned(),
        num_turns: 1,
        ..AgentResult::default()
    });
    Box::pin(futures::stream::iter([Ok(done)]))
}

fn request(yaml: &str) -> RunRequest {
    RunRequest {
        workflow: Arc::new(WorkflowDef::from_yaml(yaml).unwrap()),
        input: serde_json::Value::Null,
        source: None,
        started_by: None,
    }
}

/// A runtime on the memory store whose `mock` agents run on `broken`.
fn runtime(store: Arc<dyn RunStore>, broken: Arc<dyn QueryFn>) -> Runtime {
    Runtime::builder(store, Arc::new(SystemClock), Arc::new(RandomIds))
        .provider(Provider::Mock, broken)
        .provider(Provider::Codex, Arc::new(Answers("b answered")))
        .build()
}

/// Runs the two branches on `broken`, beside another run of the same
/// runtime, bounded so a hang fails the test instead of stalling it.
async fn run_beside_another(broken: Arc<dyn QueryFn>) -> (Runtime, RunOutcome) {
    let runtime = runtime(Arc::new(MemoryRunStore::new()), broken);
    let other = "name: other\nagents: {s: {provider: codex}}\nsteps: [{agent: s}]\n";
    let both = async {
        tokio::join!(
            runtime.run(request(TWO_BRANCHES)),
            runtime.run(request(other))
        )
    };
    let (outcome, other) = tokio::time::timeout(Duration::from_secs(30), both)
        .await
        .expect("the runs end");
    let other = other.expect("the other run is not the runtime's failure");
    assert_eq!(other.status, RunStatus::Completed, "the other run goes on");
    let outcome = outcome.expect("a node's failure is not the runtime's failure");
    (runtime, outcome)
}

/// The error recorded in node `node`'s `node:failed`, and whether `b`
/// completed beside it.
async fn failure_of(runtime: &Runtime, outcome: &RunOutcome, node: &str) -> String {
    assert_eq!(
        outcome.status,
        RunStatus::Completed,
        "the run goes on: {:?}",
        outcome.error
    );
    let events = runtime.store().read(outcome.run_id, 0, 1000).await.unwrap();
    let completed_b = events.iter().any(|e| {
        e.node_id.as_ref().is_some_and(|n| n.as_str() == "b")
            && matches!(e.kind, EventKind::NodeCompleted { .. })
    });
    assert!(completed_b, "the other node run goes on: {events:#?}");
    events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::NodeFailed { error, .. }
                if e.node_id.as_ref().is_some_and(|n| n.as_str() == node) =>
            {
                Some(error.clone())
            }
            _ => None,
        })
        .unwrap_or_else(|| panic!("no node:failed of {node}: {events:#?}"))
}

/// Panics when called, as a consumer's adapter with a bug would.
struct Panics;

#[async_trait]
impl QueryFn for Panics {
    async fn query(&self, _request: AgentRequest) -> Result<AgentStream, QueryError> {
        panic!("the consumer's adapter broke");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_query_fn_that_panics_fails_its_node_run_not_the_process() {
    let (runtime, outcome) = run_beside_another(Arc::new(Panics)).await;
    let error = failure_of(&runtime, &outcome, "a").await;
    assert!(
        error.contains("the consumer's adapter broke"),
        "the panic's message is recorded: {error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_query_fn_that_returns_an_error_fails_its_node_run_with_the_reason() {
    let mut broken = MockQueryFn::new();
    broken.expect_query().returning(|_| {
        Err(QueryError::Agent {
            error_type: "quota".into(),
            message: "the consumer's quota is spent".into(),
            details: None,
        })
    });
    let (runtime, outcome) = run_beside_another(Arc::new(broken)).await;
    let error = failure_of(&runtime, &outcome, "a").await;
    assert!(error.contains("the consumer's quota is spent"), "{error}");
}

/// Never answers, and never ends its stream.
struct Hangs;

#[async_trait]
impl QueryFn for Hangs {
    async fn query(&self, _request: AgentRequest) -> Result<AgentStream, QueryError> {
        Ok(Box::pin(futures::stream::pending()))
    }
}

/// Never returns from the call itself.
struct HangsBeforeItsStream;

#[async_trait]
impl QueryFn for HangsBeforeItsStream {
    async fn query(&self, _request: AgentRequest) -> Result<AgentStream, QueryError> {
        std::future::pending().await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_query_fn_that_hangs_past_its_timeout_fails_its_node_run() {
    for broken in [
        Arc::new(Hangs) as Arc<dyn QueryFn>,
        Arc::new(HangsBeforeItsStream),
    ] {
        let (runtime, outcome) = run_beside_another(broken).await;
        let error = failure_of(&runtime, &outcome, "a").await;
        assert!(error.contains("timeout"), "{error}");
    }
}

/// The memory store, failing every append from the `fail_from`-th on with
/// an IO error, as a full disk would.
struct FailingStore {
    inner: MemoryRunStore,
    appends: AtomicU64,
    fail_from: u64,
}

#[async_trait]
impl RunStore for FailingStore {
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
        if self.appends.fetch_add(1, Ordering::SeqCst) + 1 >= self.fail_from {
            // ENOSPC, as a full disk reports it.
            return Err(StoreError::io(
                "cannot append",
                std::io::Error::from_raw_os_error(28),
            ));
        }
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
        self.inner.save_snapshot(snapshot).await
    }
    async fn load_snapshot(&self, run_id: RunId) -> Result<Option<RunSnapshot>, StoreError> {
        self.inner.load_snapshot(run_id).await
    }
    async fn save_definition(&self, definition: &Definition) -> Result<String, StoreError> {
        self.inner.save_definition(definition).await
    }
    async fn load_definition(&self, hash: &str) -> Result<Option<Definition>, StoreError> {
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
        events: EventBatches,
        snapshot: Option<RunSnapshot>,
    ) -> Result<(), StoreError> {
        self.inner.import_run(run_id, events, snapshot).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_fails_an_append_stops_its_run_with_a_typed_error_and_no_half_written_event() {
    let failing = Arc::new(FailingStore {
        inner: MemoryRunStore::new(),
        appends: AtomicU64::new(0),
        fail_from: 3,
    });
    let runtime = runtime(failing.clone(), Arc::new(Answers("a answered")));
    let healthy = self::runtime(
        Arc::new(MemoryRunStore::new()),
        Arc::new(Answers("a answered")),
    );
    let chain = "name: chain\nagents: {s: {provider: codex}}\nsteps: [{id: one, agent: s}, {id: two, agent: s}, {id: three, agent: s}]\n";
    let (failed, other) = tokio::time::timeout(Duration::from_secs(30), async {
        tokio::join!(runtime.run(request(chain)), healthy.run(request(chain)))
    })
    .await
    .expect("the runs end");
    assert_eq!(
        other.unwrap().status,
        RunStatus::Completed,
        "the other run goes on"
    );
    match failed {
        Err(ExecutorError::Store(e @ StoreError::Io { .. })) => {
            assert_eq!(e.io_kind(), Some(std::io::ErrorKind::StorageFull), "{e}");
            assert!(e.to_string().contains("No space left"), "{e}");
        }
        other => panic!("a typed store error, not {other:?}"),
    }
    // What the log holds is whole: offsets 1..n, each a whole event.
    let runs = failing.list_runs().await.unwrap();
    assert_eq!(runs.len(), 1);
    let events = failing.inner.read(runs[0], 0, 1000).await.unwrap();
    assert!(!events.is_empty());
    let offsets: Vec<u64> = events.iter().map(|e| e.offset.get()).collect();
    let expected: Vec<u64> = (1..=events.len() as u64).collect();
    assert_eq!(offsets, expected, "no gap and no torn event");
    assert!(
        !events.iter().any(|e| e.kind.is_terminal()),
        "nothing after the failure reached the log: {events:#?}"
    );
}

/// A run whose storage fails at its first event has nothing on record, and
/// is discarded: nothing to resume, no run listed `pending` for ever. One
/// that recorded events before its storage failed is kept, to resume.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_run_with_nothing_on_record_is_discarded() {
    let chain = "name: chain\nagents: {s: {provider: codex}}\nsteps: [{id: one, agent: s}, {id: two, agent: s}]\n";
    for (fail_from, discarded) in [(1, true), (3, false)] {
        let failing = Arc::new(FailingStore {
            inner: MemoryRunStore::new(),
            appends: AtomicU64::new(0),
            fail_from,
        });
        let runtime = runtime(failing.clone(), Arc::new(Answers("a answered")));
        let run_id = runtime.create().await.unwrap();
        let failed = runtime
            .run_created(run_id, request(chain), Cancel::new())
            .await;
        assert!(matches!(failed, Err(ExecutorError::Store(_))), "{failed:?}");
        assert_eq!(runtime.discard_if_unstarted(run_id).await, discarded);
        let listed = failing.list_runs().await.unwrap().contains(&run_id);
        assert_eq!(listed, !discarded, "failing from append {fail_from}");
    }
}

//! How the recorder writes (design §4.1, issue: one `write` per turn):
//! counted on an in-memory log, not timed. A stub step's events reach the
//! store in at most a fixed number of appends (each one `write` in the file
//! store) and one flush; nothing is shown before it is stored; an agent is
//! called only once its `agent:start` is.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Mutex;

use async_trait::async_trait;
use domain::RuntimeEvent;
use serde_json::json;

use super::memory_log::{Counter, MemoryLog, Ticking, chain};
use super::*;
use crate::ports::{AgentMessage, AgentRequest, AgentResult, AgentStream, QueryError, QueryFn};

/// Appends of a stub step: its `agent:start` (stored before the call),
/// then its `agent:complete`, its end, its routing and the next step's
/// start, together.
const APPENDS_PER_STEP: u64 = 2;

/// Answers at once; notes each call in the log's operations.
struct Stub(Arc<Mutex<Vec<String>>>);

#[async_trait]
impl QueryFn for Stub {
    async fn query(&self, request: AgentRequest) -> Result<AgentStream, QueryError> {
        let node = request.node_id.to_string();
        self.0.lock().unwrap().push(format!("query {node}"));
        let done = AgentMessage::Completed(AgentResult {
            text: format!("answer of {node}"),
            num_turns: 1,
            ..AgentResult::default()
        });
        Ok(Box::pin(futures::stream::iter([Ok(done)])))
    }
}

/// Checks, for each event shown, that the store holds it already.
struct Seen {
    log: Arc<MemoryLog>,
    shown: Mutex<Vec<u64>>,
}

impl RunObserver for Seen {
    fn on_event(&self, event: &RuntimeEvent) {
        let stored = self.log.events.lock().unwrap().len() as u64;
        assert!(
            event.offset.get() <= stored,
            "event {} ({}) shown before it was stored ({stored} stored)",
            event.offset,
            event.kind.type_name()
        );
        self.shown.lock().unwrap().push(event.offset.get());
    }
}

/// Runs a chain of `steps` stub steps; the log and what was shown.
async fn run_chain(steps: usize) -> (Arc<MemoryLog>, Arc<Seen>) {
    let log = Arc::new(MemoryLog::default());
    let seen = Arc::new(Seen {
        log: Arc::clone(&log),
        shown: Mutex::default(),
    });
    let executor = Executor::new(
        Arc::clone(&log) as Arc<dyn RunStore>,
        Arc::new(Stub(Arc::clone(&log.ops))),
        Arc::new(Ticking::default()),
        Arc::new(Counter::default()),
    )
    .with_observer(Arc::clone(&seen) as Arc<dyn RunObserver>);
    let run_id = executor.create().await.unwrap();
    let request = RunRequest {
        workflow: Arc::new(chain(steps)),
        input: json!("go"),
        source: None,
        started_by: None,
    };
    let outcome = executor.run(run_id, request).await.unwrap();
    assert_eq!(outcome.status, RunStatus::Completed);
    (log, seen)
}

#[tokio::test]
async fn a_stub_step_costs_a_fixed_few_appends_and_one_flush() {
    let (short, long) = (run_chain(10).await.0, run_chain(110).await.0);
    let (short, long) = (short.tally.lock().unwrap(), long.tally.lock().unwrap());
    // A snapshot or a delta (on the amortized rule) adds the append of its marker.
    let saves = long.saved_at.len() + long.deltas_at.len();
    let saves = (saves - short.saved_at.len() - short.deltas_at.len()) as u64;
    let appends = long.appends - short.appends - saves;
    let flushes = long.flushes - short.flushes;
    assert!(
        appends <= APPENDS_PER_STEP * 100,
        "{appends} appends for 100 steps: more than {APPENDS_PER_STEP} a step"
    );
    assert_eq!(flushes, 100, "one flush a step");
}

#[tokio::test]
async fn an_event_is_stored_before_it_is_shown_and_a_start_before_its_call() {
    let (log, seen) = run_chain(5).await;
    let stored = log.events.lock().unwrap().len() as u64;
    assert_eq!(
        *seen.shown.lock().unwrap(),
        (1..=stored).collect::<Vec<_>>(),
        "every event shown once, in order"
    );
    let ops = log.ops.lock().unwrap();
    for i in 0..5 {
        let call = ops.iter().position(|op| *op == format!("query n{i}"));
        let starts = ops[..call.unwrap()]
            .iter()
            .filter(|op| *op == "append agent:start")
            .count();
        assert_eq!(
            starts,
            i + 1,
            "n{i} was called before its agent:start was stored"
        );
    }
}

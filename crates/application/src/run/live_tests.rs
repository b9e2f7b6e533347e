//! The live export of a run's spans ([`super::live`]): what goes out, when,
//! and what a full queue leaves on record.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use domain::trace::Span;
use domain::{EventKind, RuntimeEvent};
use serde_json::json;

use super::memory_log::{Counter, MemoryLog, Ticking, chain};
use super::*;
use crate::ports::{
    AgentMessage, AgentRequest, AgentResult, AgentStream, QueryError, QueryFn, SpanSlot,
};

/// Answers at once.
struct Stub;

#[async_trait]
impl QueryFn for Stub {
    async fn query(&self, _: AgentRequest) -> Result<AgentStream, QueryError> {
        let done = AgentMessage::Completed(AgentResult {
            text: "done".into(),
            num_turns: 1,
            ..AgentResult::default()
        });
        Ok(Box::pin(futures::stream::iter([Ok(done)])))
    }
}

/// A queue with room for `room` spans in all (none is ever taken out),
/// that notes how many events the log held when each span was sent.
struct Queue {
    log: Arc<MemoryLog>,
    room: AtomicUsize,
    sent: Arc<Mutex<Vec<(Span, usize)>>>,
}

impl SpanSink for Queue {
    fn reserve(&self) -> Option<Box<dyn SpanSlot>> {
        self.room
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .ok()?;
        Some(Box::new(Slot {
            log: Arc::clone(&self.log),
            sent: Arc::clone(&self.sent),
        }))
    }
}

struct Slot {
    log: Arc<MemoryLog>,
    sent: Arc<Mutex<Vec<(Span, usize)>>>,
}

impl SpanSlot for Slot {
    fn send(self: Box<Self>, span: Span) {
        let stored = self.log.events.lock().unwrap().len();
        self.sent.lock().unwrap().push((span, stored));
    }
}

/// Runs a chain of `steps` stub steps, with room for `room` spans.
async fn run_chain(steps: usize, room: usize) -> (Arc<MemoryLog>, RunId, Vec<(Span, usize)>) {
    let log = Arc::new(MemoryLog::default());
    let sent = Arc::new(Mutex::new(Vec::new()));
    let queue = Queue {
        log: Arc::clone(&log),
        room: AtomicUsize::new(room),
        sent: Arc::clone(&sent),
    };
    let executor = Executor::new(
        Arc::clone(&log) as Arc<dyn RunStore>,
        Arc::new(Stub),
        Arc::new(Ticking::default()),
        Arc::new(Counter::default()),
    )
    .with_spans(Arc::new(queue));
    let run_id = executor.create().await.unwrap();
    let request = RunRequest {
        workflow: Arc::new(chain(steps)),
        input: json!("go"),
        source: None,
        started_by: None,
    };
    let outcome = executor.run(run_id, request).await.unwrap();
    assert_eq!(outcome.status, RunStatus::Completed);
    let sent = sent.lock().unwrap().clone();
    (log, run_id, sent)
}

/// The event of the log at which `span` ended: the first one at or after
/// its end that is not before what it holds.
fn ended_by(log: &[RuntimeEvent], span: &Span) -> usize {
    log.iter()
        .position(|e| Some(e.timestamp) >= span.end)
        .unwrap()
        + 1
}

#[tokio::test]
async fn each_span_goes_out_once_after_its_end_is_stored_as_a_trace_of_the_log_gives_it() {
    let (log, run, sent) = run_chain(3, usize::MAX).await;
    let events = log.events.lock().unwrap().clone();
    for (span, stored) in &sent {
        assert!(
            *stored >= ended_by(&events, span),
            "`{}` went out with {stored} events stored, before its end",
            span.name
        );
    }
    let mut sent: Vec<Span> = sent.into_iter().map(|(span, _)| span).collect();
    let mut traced = crate::trace::trace(log.as_ref(), run, &|_| None, false)
        .await
        .unwrap();
    assert!(traced.iter().all(|s| s.end.is_some()));
    sent.sort_by_key(|s| s.span_id);
    traced.sort_by_key(|s| s.span_id);
    assert_eq!(sent, traced);
    // The run, and a node run and a provider call per step.
    assert_eq!(sent.len(), 1 + 2 * 3);
}

#[tokio::test]
async fn spans_a_full_queue_drops_are_counted_in_warnings_before_the_runs_end() {
    let (log, _, sent) = run_chain(3, 2).await;
    assert_eq!(sent.len(), 2);
    let events = log.events.lock().unwrap().clone();
    let counted: u64 = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Warning {
                details: Some(details),
                ..
            } => details["droppedSpans"].as_u64(),
            _ => None,
        })
        .sum();
    assert_eq!(counted, 7 - 2, "every span dropped is counted once");
    assert!(events.last().unwrap().kind.is_terminal());
}

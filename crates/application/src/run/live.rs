//! A run's spans exported as it runs ([`LiveSpans`]): the trace projection
//! (`domain::trace::LiveTrace`) is fed each event the recorder records,
//! and each span that event ends goes to the sink once the event is
//! stored, never before (nothing is seen before it is stored, design
//! §4.1). The sink is never waited for: room for a span is reserved when
//! its end is recorded, and a span with no room is dropped and counted,
//! the count recorded as a `warning` at the next step boundary, and before
//! the run's end (whose spans have their room reserved first).

use std::collections::BTreeMap;
use std::sync::Arc;

use domain::trace::{LiveTrace, NodeFacts, Span, SpanId, TraceId, TraceInput};
use domain::{EventKind, RunId, RuntimeEvent, WorkflowDef};
use serde_json::json;

use super::Ports;
use crate::ports::{SpanSink, SpanSlot};

/// The live export of one run's spans.
pub(crate) struct LiveSpans {
    run: RunId,
    sink: Arc<dyn SpanSink>,
    /// The projection; made at the run's first event for a new run (its
    /// `flow:started` says whether the run keeps its definition, which
    /// names spans as `awr trace export` does).
    trace: Option<LiveTrace>,
    /// Where a new run's spans go ([`crate::trace::placement`]).
    placed: Option<(TraceId, SpanId)>,
    /// What the workflow says of its nodes.
    facts: BTreeMap<domain::NodeId, NodeFacts>,
    /// Spans of events not stored yet, each with its room.
    held: Vec<(Box<dyn SpanSlot>, Span)>,
    /// Room reserved before the run's end for the spans it ends.
    prepaid: Vec<Box<dyn SpanSlot>>,
    /// The run's end is being recorded: its spans have the room reserved
    /// for them, and those without any were counted already.
    ending: bool,
    /// Spans dropped for want of room.
    dropped: u64,
    /// Of those, how many a `warning` on record counts.
    reported: u64,
}

impl LiveSpans {
    /// The live export of run `run` (called by `parent`, for a new run),
    /// when the runtime has a sink: its log so far (a resume's) is folded
    /// in, and the spans it ended are not sent again. `None` when there is
    /// no sink, or when the run's place in its trace cannot be read (the
    /// run goes on, unexported: an export never fails a run).
    pub(crate) async fn open(
        ports: &Ports,
        run: RunId,
        parent: Option<RunId>,
        workflow: &WorkflowDef,
    ) -> Option<Self> {
        let sink = Arc::clone(ports.spans.as_ref()?);
        let store = ports.store.as_ref();
        let opened = async {
            let log = match crate::trace::whole_log(store, run).await {
                Ok(log) => log,
                // A new run: created, with no event yet.
                Err(crate::ports::StoreError::NotFound(_)) => Vec::new(),
                Err(e) => return Err(e),
            };
            let parent = parent.or_else(|| crate::trace::parent_of(log.first()));
            let placed = crate::trace::placement(store, parent, run).await?;
            Ok((log, placed))
        };
        let (log, placed) = match opened.await {
            Ok(opened) => opened,
            Err(e) => {
                tracing::warn!(run = %run, error = %e, "cannot read where the run's spans go; they are not exported live (`awr trace export` sends them)");
                return None;
            }
        };
        let mut live = Self {
            run,
            sink,
            trace: None,
            placed,
            facts: NodeFacts::of_workflow(workflow),
            held: Vec::new(),
            prepaid: Vec::new(),
            ending: false,
            dropped: 0,
            reported: 0,
        };
        // A fork's first writer: the log is the parent's, copied under
        // this run's id, and no writer of this run sent its spans.
        let fresh_fork = matches!(
            log.last().map(|e| &e.kind),
            Some(EventKind::FlowForked { .. })
        );
        for event in &log {
            let ended = live.fold(event);
            if fresh_fork {
                // On record already: they go at once.
                for span in ended {
                    match live.sink.reserve() {
                        Some(slot) => slot.send_copied(span),
                        None => live.dropped += 1,
                    }
                }
            }
            // Otherwise ended before this writer: sent by the one before,
            // or by `awr trace export`.
        }
        Some(live)
    }

    fn fold(&mut self, event: &RuntimeEvent) -> Vec<Span> {
        let trace = self.trace.get_or_insert_with(|| {
            let keeps_definition = matches!(
                &event.kind,
                EventKind::FlowStarted {
                    definition: Some(_),
                    ..
                }
            );
            let nodes = match keeps_definition {
                true => std::mem::take(&mut self.facts),
                false => BTreeMap::new(),
            };
            let input = TraceInput {
                parent: self.placed,
                nodes,
                capture_content: self.sink.captures_content(),
            };
            LiveTrace::new(self.run, input)
        });
        trace.push(event)
    }

    /// `event` is recorded (not stored yet): the spans it ends are held,
    /// each with its room, or dropped.
    pub(crate) fn push(&mut self, event: &RuntimeEvent) {
        for span in self.fold(event) {
            let slot = match self.ending {
                // Counted by `before_end` when it found no room.
                true => self.prepaid.pop(),
                false => self.sink.reserve(),
            };
            match slot {
                Some(slot) => self.held.push((slot, span)),
                None if self.ending => {}
                None => self.dropped += 1,
            }
        }
    }

    /// The run is about to end: room for the spans its end ends (every
    /// span still open), reserved now, so that the drops are on record
    /// before its last event.
    pub(crate) fn before_end(&mut self) {
        self.ending = true;
        let open = self.trace.as_ref().map_or(0, LiveTrace::open);
        for _ in self.prepaid.len()..open {
            match self.sink.reserve() {
                Some(slot) => self.prepaid.push(slot),
                None => self.dropped += 1,
            }
        }
    }

    /// The held spans' events are stored: the spans go to the sink.
    pub(crate) fn stored(&mut self) {
        for (slot, span) in self.held.drain(..) {
            slot.send(span);
        }
    }

    /// The W3C trace context (`00-TRACE-SPAN-01`, sampled) of the span the
    /// event at `offset` opened: ids as the projection gives them.
    pub(crate) fn traceparent(&self, offset: domain::Offset) -> Option<String> {
        let trace = self.trace.as_ref()?.trace_id();
        let span = domain::trace::span_id(self.run, &offset.get().to_string());
        Some(format!("00-{trace}-{span}-01"))
    }

    /// The `warning` that records the drops since the last one, if any.
    pub(crate) fn report(&mut self) -> Option<EventKind> {
        if self.dropped <= self.reported {
            return None;
        }
        let missed = self.dropped - self.reported;
        self.reported = self.dropped;
        Some(EventKind::Warning {
            message: format!(
                "{missed} span(s) were not exported live: the export queue was full \
                 (`awr trace export {}` sends them)",
                self.run
            ),
            details: Some(json!({ "droppedSpans": missed, "droppedSpansTotal": self.dropped })),
        })
    }
}

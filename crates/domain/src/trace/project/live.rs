//! The fold fed one event at a time ([`LiveTrace`]), for a live export.

use super::Fold;
use crate::trace::{Attributes, Span, SpanId, SpanStatus, TraceId, TraceInput};
use crate::{RunId, RuntimeEvent};

/// A run's spans as its events are recorded, for a live export: each span
/// once its end is on record, never changed after. The spans it gives
/// over a whole log are the ended spans [`project`](super::project) gives of that log,
/// field for field, so a live export and a later one agree.
pub struct LiveTrace {
    fold: Fold,
}

impl LiveTrace {
    /// The trace of `run`, placed by `input`, before its first event.
    pub fn new(run: RunId, input: TraceInput) -> Self {
        Self {
            fold: Fold::new(run, input),
        }
    }

    /// Folds `event` (the run's next) in: the spans it ended, in the order
    /// they were opened.
    ///
    /// An ended span is moved out, not copied: in a log the runtime
    /// writes, the fold never reads a span once the event that ended it is
    /// folded, so what it keeps of a long run is its open spans and a husk
    /// (ids and times) of each ended one. (A log with events after its end
    /// may have `project` say more of the root than this gave; it never
    /// fails either.)
    pub fn push(&mut self, event: &RuntimeEvent) -> Vec<Span> {
        self.fold.event(event);
        let mut ended = std::mem::take(&mut self.fold.ended);
        ended.sort_unstable();
        ended.dedup();
        let spans = ended
            .drain(..)
            .filter(|i| !self.fold.dropped.contains(i))
            .filter_map(|i| {
                let span = self.fold.spans.get_mut(i)?;
                let husk = Span {
                    trace_id: span.trace_id,
                    span_id: span.span_id,
                    parent: span.parent,
                    name: String::new(),
                    kind: span.kind,
                    start: span.start,
                    end: span.end,
                    attributes: Attributes::default(),
                    status: SpanStatus::Unset,
                    events: Vec::new(),
                    links: Vec::new(),
                };
                Some(std::mem::replace(span, husk))
            })
            .collect();
        // Its room kept for the next event's.
        self.fold.ended = ended;
        spans
    }

    /// How many spans are open: those the run's end would end.
    pub fn open(&self) -> usize {
        (self.fold.spans.iter().enumerate())
            .filter(|(i, span)| span.end.is_none() && !self.fold.dropped.contains(i))
            .count()
    }

    /// The child runs called so far, each with the span its spans hang under.
    pub fn children(&self) -> &[(RunId, SpanId)] {
        &self.fold.children
    }

    /// The trace's id.
    pub fn trace_id(&self) -> TraceId {
        self.fold.trace
    }
}

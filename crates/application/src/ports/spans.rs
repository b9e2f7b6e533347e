//! Where a run's spans go while it runs: a live OpenTelemetry export.
//!
//! The runner hands over each span once its end is on record (spans are a
//! projection of the log, `domain::trace`), and never waits for the sink:
//! it reserves room for a span when the event that ends it is recorded,
//! and sends it once that event is stored. A span there is no room for is
//! dropped, and the drops are recorded in the run's log as a `warning`;
//! `awr trace export` sends the run's spans again from the log.

use domain::trace::Span;

/// Takes spans to export.
///
/// ```
/// # extern crate domain as awr_domain;
/// use std::sync::{Arc, Mutex};
///
/// use awr_application::ports::{AgentMessage, AgentRequest, AgentResult, AgentStream};
/// use awr_application::ports::{QueryError, QueryFn, SpanSink, SpanSlot};
/// use awr_application::{RunRequest, Runtime};
/// use awr_domain::trace::Span;
/// use awr_domain::workflow::Provider;
/// use awr_domain::WorkflowDef;
/// use awr_infrastructure::clock::{RandomIds, SystemClock};
/// use awr_infrastructure::store::MemoryRunStore;
///
/// /// Keeps every span, with room for all.
/// #[derive(Default)]
/// struct Kept(Arc<Mutex<Vec<Span>>>);
///
/// impl SpanSink for Kept {
///     fn reserve(&self) -> Option<Box<dyn SpanSlot>> {
///         Some(Box::new(Kept(Arc::clone(&self.0))))
///     }
/// }
///
/// impl SpanSlot for Kept {
///     fn send(self: Box<Self>, span: Span) {
///         self.0.lock().expect("not poisoned").push(span);
///     }
/// }
///
/// /// Answers every prompt at once, with nothing.
/// struct Done;
///
/// #[async_trait::async_trait]
/// impl QueryFn for Done {
///     async fn query(&self, _: AgentRequest) -> Result<AgentStream, QueryError> {
///         let done = AgentMessage::Completed(AgentResult::default());
///         Ok(Box::pin(futures::stream::iter([Ok(done)])))
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let kept = Kept::default();
/// let spans = Arc::clone(&kept.0);
/// let runtime = Runtime::builder(Arc::new(MemoryRunStore::new()), Arc::new(SystemClock), Arc::new(RandomIds))
///     .provider(Provider::Mock, Arc::new(Done))
///     .spans(Arc::new(kept))
///     .build();
/// let workflow = Arc::new(WorkflowDef::from_yaml("name: w\nagents: {a: {provider: mock}}\nsteps: [{agent: a}]\n")?);
/// runtime.run(RunRequest { workflow, input: "hi".into(), source: None, started_by: None }).await?;
///
/// // The provider call, the node run, then the run: each once it ended.
/// let names: Vec<String> = spans.lock().expect("not poisoned").iter().map(|s| s.name.clone()).collect();
/// assert_eq!(names, ["chat", "invoke_agent a", "invoke_workflow w"]);
/// # Ok(())
/// # }
/// ```
pub trait SpanSink: Send + Sync {
    /// Room for one span in the export queue, taken without waiting;
    /// `None` when the queue is full (the span is then dropped).
    fn reserve(&self) -> Option<Box<dyn SpanSlot>>;

    /// Whether its spans carry the content of calls (prompts, answers, tool
    /// arguments and results): off unless the sink was asked for it.
    fn captures_content(&self) -> bool {
        false
    }
}

/// Room reserved for one span ([`SpanSink::reserve`]); dropped unused, it
/// is given back.
pub trait SpanSlot: Send {
    /// Queues `span`, which ended just now, for export; it counts in the
    /// metrics too (`domain::trace::metrics`).
    fn send(self: Box<Self>, span: Span);

    /// Queues `span` of a fork's copied log for export: it ended in the
    /// parent run, which counted it, so it is sent and not counted again.
    fn send_copied(self: Box<Self>, span: Span) {
        self.send(span);
    }
}

//! Live presentation of a run in the same process (terminal progress).
//!
//! Observers see an event only after the store accepted it (durability
//! contract: disk first), and must not block: they run on the runner's task.

use domain::RuntimeEvent;

/// Receives each event once it is recorded.
///
/// ```
/// # extern crate domain as awr_domain;
/// use std::sync::{Arc, Mutex};
///
/// use awr_application::ports::{AgentMessage, AgentRequest, AgentResult, AgentStream};
/// use awr_application::ports::{QueryError, QueryFn, RunObserver};
/// use awr_application::{RunRequest, Runtime};
/// use awr_domain::workflow::Provider;
/// use awr_domain::{RuntimeEvent, WorkflowDef};
/// use awr_infrastructure::clock::{RandomIds, SystemClock};
/// use awr_infrastructure::store::MemoryRunStore;
///
/// /// Notes each event's offset and type (quickly: it runs on the run's task).
/// #[derive(Default)]
/// struct Seen(Mutex<Vec<(u64, String)>>);
///
/// impl RunObserver for Seen {
///     fn on_event(&self, event: &RuntimeEvent) {
///         let seen = (event.offset.get(), event.kind.type_name().to_owned());
///         self.0.lock().expect("not poisoned").push(seen);
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
/// let seen = Arc::new(Seen::default());
/// let runtime = Runtime::builder(Arc::new(MemoryRunStore::new()), Arc::new(SystemClock), Arc::new(RandomIds))
///     .provider(Provider::Mock, Arc::new(Done))
///     .observer(seen.clone())
///     .build();
/// let workflow = Arc::new(WorkflowDef::from_yaml("name: w\nagents: {a: {provider: mock}}\nsteps: [{agent: a}]\n")?);
/// let outcome = runtime.run(RunRequest { workflow, input: "hi".into(), source: None, started_by: None }).await?;
///
/// // Every event of the run, once, in offset order.
/// let seen = seen.0.lock().expect("not poisoned").clone();
/// let offsets: Vec<u64> = seen.iter().map(|(offset, _)| *offset).collect();
/// assert_eq!(offsets, (1..=outcome.snapshot.last_offset).collect::<Vec<_>>());
/// assert_eq!(seen.first().map(|(_, t)| t.as_str()), Some("flow:started"));
/// assert_eq!(seen.last().map(|(_, t)| t.as_str()), Some("flow:completed"));
/// # Ok(())
/// # }
/// ```
pub trait RunObserver: Send + Sync {
    /// Called in offset order.
    fn on_event(&self, event: &RuntimeEvent);
}

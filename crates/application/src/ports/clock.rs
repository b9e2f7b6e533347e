//! Time and fresh ids, behind ports so that tests and replays can pin them.

use std::time::Duration;

use domain::Timestamp;
use futures::future::BoxFuture;
use uuid::Uuid;

/// Wall time, and waiting on it.
///
/// Every wait of the application (a retry's backoff, a deadline) goes
/// through [`Clock::sleep`], so a test or a replay with a virtual clock
/// waits no real time.
///
/// A virtual clock: a retry's hour of backoff passes at once, and is on
/// record as an hour.
///
/// ```
/// # extern crate domain as awr_domain;
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};
/// use std::time::{Duration, Instant};
///
/// use awr_application::ports::{AgentMessage, AgentRequest, AgentResult, AgentStream};
/// use awr_application::ports::{Clock, QueryError, QueryFn};
/// use awr_application::{RunRequest, Runtime};
/// use awr_domain::workflow::Provider;
/// use awr_domain::{RunStatus, Timestamp, WorkflowDef};
/// use awr_infrastructure::clock::RandomIds;
/// use awr_infrastructure::store::MemoryRunStore;
/// use futures::future::BoxFuture;
///
/// /// Milliseconds since the epoch; a wait moves them on and ends at once.
/// struct Virtual(AtomicI64);
///
/// impl Clock for Virtual {
///     fn now(&self) -> Timestamp {
///         Timestamp::from_millis(self.0.load(Ordering::SeqCst))
///     }
///     fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
///         self.0.fetch_add(duration.as_millis() as i64, Ordering::SeqCst);
///         Box::pin(std::future::ready(()))
///     }
/// }
///
/// /// Rate-limited on its first call (a transient error), then answers.
/// struct Busy(AtomicU32);
///
/// #[async_trait::async_trait]
/// impl QueryFn for Busy {
///     async fn query(&self, _: AgentRequest) -> Result<AgentStream, QueryError> {
///         if self.0.fetch_add(1, Ordering::SeqCst) == 0 {
///             let message = "slow down".into();
///             return Err(QueryError::Agent { error_type: "rate_limit".into(), message, details: None });
///         }
///         let done = AgentMessage::Completed(AgentResult::default());
///         Ok(Box::pin(futures::stream::iter([Ok(done)])))
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let clock = Arc::new(Virtual(AtomicI64::new(1_767_225_600_000)));
/// let runtime = Runtime::builder(Arc::new(MemoryRunStore::new()), clock, Arc::new(RandomIds))
///     .provider(Provider::Mock, Arc::new(Busy(AtomicU32::new(0))))
///     .build();
/// let yaml = "name: patient\nagents: {a: {provider: mock}}\n\
///             steps: [{agent: a, retry: {max_attempts: 2, backoff: 1h}}]\n";
/// let workflow = Arc::new(WorkflowDef::from_yaml(yaml)?);
/// let started = Instant::now();
/// let request = RunRequest { workflow, input: "hi".into(), source: None, started_by: None };
/// let outcome = runtime.run(request).await?;
/// assert_eq!(outcome.status, RunStatus::Completed, "{:?}", outcome.error);
/// assert!(started.elapsed() < Duration::from_secs(60), "no real hour passed");
/// let (start, end) = (outcome.snapshot.started_at, outcome.snapshot.updated_at);
/// let recorded = end.zip(start).map(|(e, s)| e.as_millis() - s.as_millis());
/// assert!(recorded >= Some(3_600_000), "the hour is on record: {recorded:?} ms");
/// # Ok(())
/// # }
/// ```
#[cfg_attr(all(any(test, feature = "testing"), not(doctest)), mockall::automock)]
pub trait Clock: Send + Sync + 'static {
    /// Now.
    fn now(&self) -> Timestamp;

    /// Completes once `duration` has passed on this clock.
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()>;
}

/// Fresh UUIDs (v4 shaped, so they can be run ids).
///
/// Ids from a counter: the run ids a program makes are known in advance.
///
/// ```
/// # extern crate domain as awr_domain;
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicU64, Ordering};
///
/// use awr_application::Runtime;
/// use awr_application::ports::IdGen;
/// use awr_domain::RunId;
/// use awr_infrastructure::clock::SystemClock;
/// use awr_infrastructure::store::MemoryRunStore;
/// use uuid::Uuid;
///
/// /// `00000000-0000-4000-8000-00000000000N`, N = 1, 2, ...
/// struct Counting(AtomicU64);
///
/// impl IdGen for Counting {
///     fn uuid(&self) -> Uuid {
///         let n = self.0.fetch_add(1, Ordering::SeqCst) + 1;
///         Uuid::from_u128(0x4000_8000_0000_0000_0000 | u128::from(n))
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let ids = Arc::new(Counting(AtomicU64::new(0)));
/// let runtime = Runtime::builder(Arc::new(MemoryRunStore::new()), Arc::new(SystemClock), ids).build();
/// let run_id = runtime.create().await?;
/// assert_eq!(run_id, "00000000-0000-4000-8000-000000000001".parse::<RunId>()?);
/// # Ok(())
/// # }
/// ```
#[cfg_attr(all(any(test, feature = "testing"), not(doctest)), mockall::automock)]
pub trait IdGen: Send + Sync + 'static {
    /// A new id.
    fn uuid(&self) -> Uuid;
}

//! Reading a run's current state, whatever a crash left behind, and never a
//! state its log contradicts.
//!
//! The snapshot on disk may lag the log (a crash between an event and the
//! next checkpoint) or be unreadable; since `fold(events) = snapshot`, the
//! current state is the saved snapshot brought up to date with the events
//! after its `lastOffset`, or the fold of all events (design §4.2).
//!
//! A snapshot is only used when the log agrees with it: it names this run,
//! its `lastOffset` is within the log, and the event at that offset is the
//! one it reflects (same timestamp; a terminal event for a terminal status).
//! Every event folded must be the next offset of this run. Anything else is
//! [`StoreError::Corrupt`] or [`StoreError::BadEvent`]: reported, never
//! papered over, because a status the log contradicts is worse than none.
//!
//! A run the log says is `running` may have lost its process: a crash writes
//! nothing. Whether a process still writes it is the run's lock
//! ([`RunStore::has_writer`]), so the status shown ([`ShownStatus`]) and the
//! end of a follow ([`follow_run`]) are derived from the log and the lock
//! together. `interrupted` is never written: the log stays the truth, and
//! the next writer of the run continues it from there.

use std::sync::Arc;
use std::time::Duration;

use domain::{EventKind, RunId, RunSnapshot, RunStatus, RuntimeEvent};
use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt};

use crate::ports::{Clock, EventStream, RunStore, StoreError};

/// Events read per batch when catching a snapshot up.
const BATCH: usize = 1024;

/// How often a follower of an idle run asks whether anything still writes
/// it: a dead run's follower ends within this, and a live run costs one
/// lock probe (a few microseconds) per period of silence.
pub const IDLE_CHECK: Duration = Duration::from_millis(200);

/// Times [`run_view`] reads the run again when it moved while probed.
const SETTLE_ATTEMPTS: usize = 4;

/// The status `awr runs` and `awr show` display.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShownStatus {
    /// The status the log records.
    Recorded(RunStatus),
    /// Recorded as `running`, but no process holds the run's lock: the one
    /// that ran it died. Derived for display, never recorded.
    Interrupted,
    /// Submitted to a queue and not started by a worker yet: no event is
    /// recorded, the store keeps its submission.
    Queued,
}

impl ShownStatus {
    /// Lower-case name, as displayed.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Recorded(status) => status.as_str(),
            Self::Interrupted => "interrupted",
            Self::Queued => "queued",
        }
    }
}

/// A run's state and the status to display for it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunView {
    /// The state as of the last recorded event ([`current_snapshot`]).
    pub snapshot: RunSnapshot,
    /// What to call it: the recorded status, or `interrupted`.
    pub status: ShownStatus,
}

/// The run's state, and `interrupted` for its status when the log says
/// `running` but nothing writes it. (`paused` has no writer by design and
/// stays `paused`; `pending` stays `pending`.)
///
/// A run exists from its first event, or from its submission to a queue
/// (`queued`, its workflow and input those submitted): one whose store
/// holds neither (being created this instant, or left so by a writer
/// killed between making the run and writing its first event) is
/// `NotFound`, never a run to show, list or resume.
pub async fn run_view(store: &dyn RunStore, run_id: RunId) -> Result<RunView, StoreError> {
    let mut snapshot = current_snapshot(store, run_id).await?;
    if snapshot.last_offset == 0 {
        if let Some(submission) = store.queued(run_id).await? {
            snapshot.workflow.name = submission.workflow;
            snapshot.input = submission.input;
            return Ok(RunView {
                snapshot,
                status: ShownStatus::Queued,
            });
        }
        // A queued run a worker started between the read of its log and
        // this look at the queue is no longer queued, and has its first
        // event now: its log is read again before it is called not found.
        snapshot = current_snapshot(store, run_id).await?;
        if snapshot.last_offset == 0 {
            return Err(StoreError::NotFound(run_id));
        }
    }
    for _ in 0..SETTLE_ATTEMPTS {
        if snapshot.status != RunStatus::Running || store.has_writer(run_id).await? {
            break;
        }
        // A writer appends before it releases the lock: if the log has not
        // grown since the fold, nothing will finish it. If it has (the run
        // ended between the fold and the probe), fold the rest and look again.
        if store.last_offset(run_id).await? == snapshot.last_offset {
            return Ok(RunView {
                snapshot,
                status: ShownStatus::Interrupted,
            });
        }
        catch_up(store, run_id, &mut snapshot, &mut Vec::new(), 0).await?;
    }
    Ok(RunView {
        status: ShownStatus::Recorded(snapshot.status),
        snapshot,
    })
}

/// How often [`writer_gone`] looks again at a writer winding down.
const WIND_DOWN_CHECK: Duration = Duration::from_millis(20);

/// Whether no process writes `run_id`, to tell whether a `resume` sent to
/// it must be carried out by its sender. A writer that has recorded the
/// run's pause is waited for while it winds down, at most `grace`: a
/// resume sent right after a pause resumes the run, rather than going to
/// a writer that is about to stop.
pub async fn writer_gone(
    store: &dyn RunStore,
    clock: &dyn Clock,
    run_id: RunId,
    grace: Duration,
) -> Result<bool, StoreError> {
    let grace = i64::try_from(grace.as_millis()).unwrap_or(i64::MAX);
    let deadline = clock.now().as_millis().saturating_add(grace);
    loop {
        if !store.has_writer(run_id).await? {
            return Ok(true);
        }
        let view = run_view(store, run_id).await?;
        if view.snapshot.status != RunStatus::Paused || clock.now().as_millis() >= deadline {
            return Ok(false);
        }
        clock.sleep(WIND_DOWN_CHECK).await;
    }
}

impl RunView {
    /// The snapshot as `awr show RUN --json` prints it and `GET
    /// /workflows/{id}` answers: one line, with the status shown
    /// (`interrupted` included), written by the snapshot's own writer (a
    /// `serde_json::Value` of a 10,000-step run's state cost ten times the
    /// load).
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        let mut out = Vec::with_capacity(4096);
        self.snapshot
            .write_json_shown(&mut out, self.status.as_str())?;
        String::from_utf8(out).map_err(serde::ser::Error::custom)
    }
}

/// What one read of a log after an offset found.
#[derive(Debug)]
pub enum LogRead {
    /// The next events (none: nothing after that offset).
    Events(Vec<RuntimeEvent>),
    /// The next line is not its event: `detail` names the file and line.
    /// A reader that may skip goes on after `offset`.
    Bad {
        /// The bad line's offset.
        offset: u64,
        /// What is wrong with it.
        detail: String,
    },
}

/// Up to `limit` events after `after`, the good events before a bad line
/// first: how `awr events` and the server read a log that may hold one.
pub async fn read_log(
    store: &dyn RunStore,
    id: RunId,
    after: u64,
    limit: usize,
) -> Result<LogRead, StoreError> {
    match store.read(id, after, limit).await {
        Ok(batch) => Ok(LogRead::Events(batch)),
        Err(StoreError::BadEvent { offset, .. }) if offset > after + 1 => {
            let before = usize::try_from(offset - after - 1).unwrap_or(limit);
            Ok(LogRead::Events(
                store.read(id, after, before.min(limit)).await?,
            ))
        }
        Err(StoreError::BadEvent { offset, detail }) => Ok(LogRead::Bad { offset, detail }),
        Err(e) => Err(e),
    }
}

/// The run's state as of its last recorded event.
pub async fn current_snapshot(
    store: &dyn RunStore,
    run_id: RunId,
) -> Result<RunSnapshot, StoreError> {
    Ok(snapshot_and_tail(store, run_id, 0).await?.0)
}

/// [`current_snapshot`], and the last `keep` (at most) of the events it
/// folded after the saved snapshot: what a resume looks at next, so it
/// need not read them again.
pub(crate) async fn snapshot_and_tail(
    store: &dyn RunStore,
    run_id: RunId,
    keep: usize,
) -> Result<(RunSnapshot, Vec<RuntimeEvent>), StoreError> {
    let saved = match store.load_snapshot(run_id).await {
        Ok(saved) => saved,
        Err(StoreError::Corrupt(why)) => {
            tracing::warn!(run = %run_id, %why, "snapshot unreadable; rebuilding it from the event log");
            None
        }
        Err(e) => return Err(e),
    };
    let mut snapshot = match saved {
        Some(saved) => saved,
        None => RunSnapshot::new(run_id),
    };
    let mut tail = Vec::new();
    if snapshot.last_offset == 0 {
        check_run(run_id, &snapshot)?;
        catch_up(store, run_id, &mut snapshot, &mut tail, keep).await?;
        return Ok((snapshot, tail));
    }
    // One read brings the event the snapshot reflects, to check it, and
    // the first of those after it: a resume reads nothing it can spare.
    let events = store.read(run_id, snapshot.last_offset - 1, BATCH).await?;
    check_saved(store, run_id, &snapshot, events.first()).await?;
    fold_into(
        run_id,
        &mut snapshot,
        events.get(1..).unwrap_or_default(),
        &mut tail,
        keep,
    )?;
    catch_up(store, run_id, &mut snapshot, &mut tail, keep).await?;
    Ok((snapshot, tail))
}

/// Folds `events` (the next ones) into `snapshot`, keeping the last `keep`
/// of all those folded so far in `tail`.
fn fold_into(
    run_id: RunId,
    snapshot: &mut RunSnapshot,
    events: &[RuntimeEvent],
    tail: &mut Vec<RuntimeEvent>,
    keep: usize,
) -> Result<(), StoreError> {
    for event in events {
        check_next(run_id, snapshot.last_offset, event)?;
        snapshot.apply(event);
    }
    if keep > 0 {
        let from = events.len().saturating_sub(keep);
        tail.extend_from_slice(&events[from..]);
        let over = tail.len().saturating_sub(keep);
        tail.drain(..over);
    }
    Ok(())
}

/// Folds the events after `snapshot.last_offset` into it.
async fn catch_up(
    store: &dyn RunStore,
    run_id: RunId,
    snapshot: &mut RunSnapshot,
    tail: &mut Vec<RuntimeEvent>,
    keep: usize,
) -> Result<(), StoreError> {
    loop {
        let events = store.read(run_id, snapshot.last_offset, BATCH).await?;
        if events.is_empty() {
            return Ok(());
        }
        fold_into(run_id, snapshot, &events, tail, keep)?;
    }
}

/// Why a [`follow_run`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FollowEnd {
    /// The run is over: its terminal event was yielded, or came before the
    /// offset the follow started after.
    Ended,
    /// Nothing writes the run and it is paused: resuming it continues it.
    Paused,
    /// Nothing writes the run and it waits for a person's answer, which
    /// continues it (docs/approvals.md).
    Waiting,
    /// Nothing writes the run and its log does not end: the process that
    /// ran it died. Resuming it continues it.
    Interrupted,
}

/// What a follower yields: events, then (unless an error ended it first)
/// why it ended.
// Every item but the last is an event: boxing it to shrink `End` would
// cost an allocation per event.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Followed {
    /// The next event of the log.
    Event(RuntimeEvent),
    /// The last item: nothing more will come.
    End(FollowEnd),
}

/// Items of a [`follow_run`]. A [`StoreError::BadEvent`] takes the place of
/// its line and the follow goes on; any other error ends it.
pub type FollowStream = BoxStream<'static, Result<Followed, StoreError>>;

/// The run's events after `after`, then live ones as they are appended,
/// ending after its terminal event, or once nothing writes the run and
/// every event it holds was yielded (paused or interrupted).
///
/// Whether a writer is left is asked when the log is first drained, then
/// every [`IDLE_CHECK`] of silence (waited on `clock`). A follower of a
/// live run sees every event to the end: a writer appends before it
/// releases the lock, so once the lock is free, the log's last offset is
/// final, and the follow only ends once it has yielded up to there.
pub async fn follow_run(
    store: Arc<dyn RunStore>,
    clock: Arc<dyn Clock>,
    run_id: RunId,
    after: u64,
) -> Result<FollowStream, StoreError> {
    let events = store.follow(run_id, after).await?;
    let follower = Follower {
        store,
        clock,
        run_id,
        events,
        after,
        probed: false,
        done: false,
    };
    Ok(futures::stream::unfold(follower, |mut f| async move {
        let item = f.next().await?;
        Some((item, f))
    })
    .boxed())
}

/// Where a [`follow_run`] is.
struct Follower {
    store: Arc<dyn RunStore>,
    clock: Arc<dyn Clock>,
    run_id: RunId,
    /// The store's follow of the run.
    events: EventStream,
    /// Offset of the last event (or bad line) yielded, or the caller's `after`.
    after: u64,
    /// Whether the writer was asked about once already: the first time the
    /// log is drained it is asked at once, later after [`IDLE_CHECK`].
    probed: bool,
    /// Set once the end or an ending error was yielded.
    done: bool,
}

impl Follower {
    async fn next(&mut self) -> Option<Result<Followed, StoreError>> {
        loop {
            if self.done {
                return None;
            }
            let arrived = if self.probed {
                let tick = self.clock.sleep(IDLE_CHECK);
                tokio::select! {
                    biased;
                    item = self.events.next() => Some(item),
                    () = tick => None,
                }
            } else {
                // Ready at once while history remains; pending once drained.
                self.events.next().now_or_never()
            };
            let item = match arrived {
                Some(Some(Ok(event))) => {
                    self.after = event.offset.get();
                    Ok(Followed::Event(event))
                }
                Some(Some(Err(StoreError::BadEvent { offset, detail }))) => {
                    self.after = self.after.max(offset);
                    Err(StoreError::BadEvent { offset, detail })
                }
                Some(Some(Err(e))) => {
                    self.done = true;
                    Err(e)
                }
                Some(None) => {
                    self.done = true;
                    Ok(Followed::End(FollowEnd::Ended))
                }
                None => {
                    self.probed = true;
                    match unwritten_end(self.store.as_ref(), self.run_id, self.after).await {
                        Ok(None) => continue,
                        Ok(Some(end)) => {
                            self.done = true;
                            Ok(Followed::End(end))
                        }
                        Err(e) => {
                            self.done = true;
                            Err(e)
                        }
                    }
                }
            };
            return Some(item);
        }
    }
}

/// How a follow that yielded up to `after` ends if nothing writes the run
/// and no event is left; `None` while a writer holds it or events remain.
async fn unwritten_end(
    store: &dyn RunStore,
    run_id: RunId,
    after: u64,
) -> Result<Option<FollowEnd>, StoreError> {
    if store.has_writer(run_id).await? {
        return Ok(None);
    }
    // Asked after the lock: with no writer left, the last offset is final.
    if store.last_offset(run_id).await? > after {
        return Ok(None);
    }
    let state = current_snapshot(store, run_id).await?;
    Ok(Some(match state.status {
        RunStatus::Paused => FollowEnd::Paused,
        RunStatus::Waiting => FollowEnd::Waiting,
        status if status.is_terminal() => FollowEnd::Ended,
        _ => FollowEnd::Interrupted,
    }))
}

/// Whether a saved snapshot is this run's.
fn check_run(run_id: RunId, saved: &RunSnapshot) -> Result<(), StoreError> {
    if saved.run_id != run_id {
        return Err(StoreError::Corrupt(format!(
            "the snapshot of run {run_id} is the snapshot of run {}",
            saved.run_id
        )));
    }
    Ok(())
}

/// Whether the log agrees with a saved snapshot (see the module docs):
/// `at` is the log's event at the snapshot's `lastOffset`, if it has one.
async fn check_saved(
    store: &dyn RunStore,
    run_id: RunId,
    saved: &RunSnapshot,
    at: Option<&RuntimeEvent>,
) -> Result<(), StoreError> {
    check_run(run_id, saved)?;
    let Some(event) = at else {
        let last = store.last_offset(run_id).await?;
        return Err(StoreError::Corrupt(format!(
            "run {run_id}: the snapshot reflects events up to offset {} (lastOffset) but the log ends at offset {last}: the log was truncated or replaced",
            saved.last_offset
        )));
    };
    check_next(run_id, saved.last_offset - 1, event)?;
    let status_agrees = match &event.kind {
        EventKind::FlowCompleted { .. } => saved.status == RunStatus::Completed,
        EventKind::FlowFailed { .. } => saved.status == RunStatus::Failed,
        EventKind::FlowCancelled { .. } => saved.status == RunStatus::Cancelled,
        _ => !saved.status.is_terminal(),
    };
    let time_agrees = saved.updated_at.is_none_or(|t| t == event.timestamp);
    if !status_agrees || !time_agrees {
        return Err(StoreError::Corrupt(format!(
            "run {run_id}: the snapshot (status {}, lastOffset {}) does not match the log's `{}` event at that offset",
            saved.status.as_str(),
            saved.last_offset,
            event.kind.type_name()
        )));
    }
    Ok(())
}

/// An event folded after offset `last` must be offset `last + 1` of this run.
fn check_next(run_id: RunId, last: u64, event: &RuntimeEvent) -> Result<(), StoreError> {
    let expected = last + 1;
    if event.run_id != run_id {
        return Err(StoreError::BadEvent {
            offset: expected,
            detail: format!(
                "run {run_id}: the event at offset {expected} belongs to run {}",
                event.run_id
            ),
        });
    }
    if event.offset.get() != expected {
        return Err(StoreError::BadEvent {
            offset: expected,
            detail: format!(
                "run {run_id}: offset {} found where offset {expected} belongs",
                event.offset
            ),
        });
    }
    Ok(())
}

/// Whether run `run_id` is `waiting` with no process writing it: an answer
/// recorded for it waits for someone to continue it (docs/approvals.md).
/// False once a process holds it, even before it records `flow:resumed`.
pub async fn waits_unwritten(store: &dyn RunStore, run_id: RunId) -> Result<bool, StoreError> {
    if store.has_writer(run_id).await? {
        return Ok(false);
    }
    Ok(current_snapshot(store, run_id).await?.status == RunStatus::Waiting)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::ports::MockRunStore;
    use crate::testing::TokioClock;
    use domain::{Offset, Timestamp};
    use mockall::predicate::eq;
    use std::sync::atomic::Ordering;

    fn run_id() -> RunId {
        "0b6f8f4e-3c1a-4d2b-9f3e-1a2b3c4d5e6f".parse().unwrap()
    }

    fn warning(offset: u64) -> RuntimeEvent {
        RuntimeEvent {
            id: format!("e{offset}"),
            offset: Offset::new(offset).unwrap(),
            timestamp: Timestamp::from_millis(offset as i64),
            run_id: run_id(),
            node_id: None,
            node_run_id: None,
            kind: EventKind::Warning {
                message: "w".into(),
                details: None,
            },
            extra: Default::default(),
        }
    }

    /// A store holding `log` and, maybe, a saved snapshot.
    fn store_of(log: Vec<RuntimeEvent>, saved: Option<RunSnapshot>) -> MockRunStore {
        let mut store = MockRunStore::new();
        store
            .expect_load_snapshot()
            .returning(move |_| Ok(saved.clone()));
        let last = log.len() as u64;
        store.expect_last_offset().returning(move |_| Ok(last));
        store.expect_read().returning(move |_, after, limit| {
            Ok(log
                .iter()
                .skip(after as usize)
                .take(limit)
                .cloned()
                .collect())
        });
        store
    }

    fn log(n: u64) -> Vec<RuntimeEvent> {
        (1..=n).map(warning).collect()
    }

    fn saved_at(offset: u64) -> RunSnapshot {
        RunSnapshot::fold(&log(offset)).unwrap()
    }

    fn event(offset: u64, kind: EventKind) -> RuntimeEvent {
        RuntimeEvent {
            kind,
            ..warning(offset)
        }
    }

    fn started(offset: u64) -> RuntimeEvent {
        event(
            offset,
            EventKind::FlowStarted {
                workflow: Default::default(),
                input: serde_json::Value::Null,
                parent_run_id: None,
                source: None,
                definition: None,
                nodes: vec![],
                edges: vec![],
                started_by: None,
            },
        )
    }

    fn paused(offset: u64) -> RuntimeEvent {
        let paused = EventKind::FlowPaused {
            reason: None,
            waiting: false,
        };
        event(offset, paused)
    }

    fn completed(offset: u64) -> RuntimeEvent {
        event(
            offset,
            EventKind::FlowCompleted {
                output: serde_json::Value::Null,
                duration_ms: 1,
            },
        )
    }

    /// A run whose log and lock a test changes as it goes.
    #[derive(Clone, Default)]
    struct Live {
        log: Arc<std::sync::Mutex<Vec<RuntimeEvent>>>,
        writer: Arc<std::sync::atomic::AtomicBool>,
        probes: Arc<std::sync::atomic::AtomicUsize>,
    }

    impl Live {
        fn new(log: Vec<RuntimeEvent>, writer: bool) -> Self {
            let live = Self::default();
            *live.log.lock().unwrap() = log;
            live.writer.store(writer, Ordering::SeqCst);
            live
        }

        fn push(&self, event: RuntimeEvent) {
            self.log.lock().unwrap().push(event);
        }

        /// A store that reads this run's log as it is at each call (no
        /// saved snapshot), and expects nothing else.
        fn log_store(&self) -> MockRunStore {
            let mut store = MockRunStore::new();
            store.expect_load_snapshot().returning(|_| Ok(None));
            let log = Arc::clone(&self.log);
            store
                .expect_last_offset()
                .returning(move |_| Ok(log.lock().unwrap().len() as u64));
            let log = Arc::clone(&self.log);
            store.expect_read().returning(move |_, after, limit| {
                let log = log.lock().unwrap();
                Ok(log
                    .iter()
                    .skip(after as usize)
                    .take(limit)
                    .cloned()
                    .collect())
            });
            store
        }

        /// A store over this run (no saved snapshot) whose `follow` yields
        /// `followed`, then waits forever unless `ends`.
        fn store(&self, followed: Vec<RuntimeEvent>, ends: bool) -> MockRunStore {
            let history = futures::stream::iter(followed.into_iter().map(Ok));
            self.store_with(if ends {
                history.boxed()
            } else {
                history.chain(futures::stream::pending()).boxed()
            })
        }

        /// A store over this run whose `follow` is `stream`.
        fn store_with(&self, stream: EventStream) -> MockRunStore {
            let mut store = self.log_store();
            store.expect_queued().returning(|_| Ok(None));
            let (writer, probes) = (Arc::clone(&self.writer), Arc::clone(&self.probes));
            store.expect_has_writer().returning(move |_| {
                probes.fetch_add(1, Ordering::SeqCst);
                Ok(writer.load(Ordering::SeqCst))
            });
            store.expect_follow().return_once(move |_, _| Ok(stream));
            store
        }
    }

    async fn follow_all(store: MockRunStore) -> Vec<String> {
        let stream = follow_run(Arc::new(store), Arc::new(TokioClock::new()), run_id(), 0)
            .await
            .unwrap();
        stream
            .map(|item| match item.unwrap() {
                Followed::Event(e) => e.offset.to_string(),
                Followed::End(end) => format!("{end:?}"),
            })
            .collect()
            .await
    }

    #[tokio::test]
    async fn a_running_run_nothing_writes_is_shown_interrupted() {
        let dead = Live::new(vec![started(1), warning(2)], false);
        let view = run_view(&dead.store(vec![], false), run_id())
            .await
            .unwrap();
        assert_eq!(view.status, ShownStatus::Interrupted);
        assert_eq!(view.status.as_str(), "interrupted");
        assert_eq!(
            view.snapshot.status,
            RunStatus::Running,
            "the log is untouched"
        );

        let live = Live::new(vec![started(1), warning(2)], true);
        let view = run_view(&live.store(vec![], false), run_id())
            .await
            .unwrap();
        assert_eq!(view.status, ShownStatus::Recorded(RunStatus::Running));
    }

    /// A writer that recorded its pause is waited for, at most the grace;
    /// a writer of a running run is there to stay.
    #[tokio::test(start_paused = true)]
    async fn a_paused_writer_is_waited_for_while_it_winds_down() {
        let clock = TokioClock::new();
        let grace = Duration::from_secs(5);
        let gone = Live::new(vec![started(1), paused(2)], false);
        let store = gone.store(vec![], false);
        assert!(writer_gone(&store, &clock, run_id(), grace).await.unwrap());

        let running = Live::new(vec![started(1), warning(2)], true);
        let store = running.store(vec![], false);
        let start = tokio::time::Instant::now();
        assert!(!writer_gone(&store, &clock, run_id(), grace).await.unwrap());
        assert_eq!(start.elapsed(), Duration::ZERO, "no wait for a running run");

        let winding = Live::new(vec![started(1), paused(2)], true);
        let store = winding.store(vec![], false);
        let writer = Arc::clone(&winding.writer);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            writer.store(false, Ordering::SeqCst);
        });
        let start = tokio::time::Instant::now();
        assert!(writer_gone(&store, &clock, run_id(), grace).await.unwrap());
        let waited = start.elapsed();
        assert!(
            waited >= Duration::from_secs(1) && waited < grace,
            "{waited:?}"
        );

        let stuck = Live::new(vec![started(1), paused(2)], true);
        let store = stuck.store(vec![], false);
        let start = tokio::time::Instant::now();
        assert!(!writer_gone(&store, &clock, run_id(), grace).await.unwrap());
        assert!(start.elapsed() >= grace, "gave up after the grace");
    }

    #[tokio::test]
    async fn paused_and_ended_runs_keep_their_status_without_a_writer() {
        for (log, status) in [
            (vec![started(1), paused(2)], RunStatus::Paused),
            (vec![started(1), completed(2)], RunStatus::Completed),
        ] {
            let run = Live::new(log, false);
            let view = run_view(&run.store(vec![], false), run_id()).await.unwrap();
            assert_eq!(view.status, ShownStatus::Recorded(status));
            assert_eq!(
                run.probes.load(Ordering::SeqCst),
                0,
                "{status:?}: no probe needed"
            );
        }
    }

    /// A run exists from its first event: one with none (killed between its
    /// creation and its first event) is not found, with or without a
    /// writer, and no probe is needed to say so.
    #[tokio::test]
    async fn a_run_without_events_is_not_found() {
        for writer in [false, true] {
            let run = Live::new(vec![], writer);
            let err = run_view(&run.store(vec![], false), run_id())
                .await
                .unwrap_err();
            assert!(
                matches!(err, StoreError::NotFound(id) if id == run_id()),
                "{err:?}"
            );
            assert_eq!(run.probes.load(Ordering::SeqCst), 0);
        }
    }

    #[tokio::test]
    async fn a_run_without_events_that_the_store_keeps_queued_is_queued() {
        let run = Live::new(vec![], false);
        let mut store = run.store(vec![], false);
        store.checkpoint();
        store.expect_load_snapshot().returning(|_| Ok(None));
        store.expect_read().returning(|_, _, _| Ok(Vec::new()));
        store.expect_last_offset().returning(|_| Ok(0));
        store.expect_queued().returning(|_| {
            Ok(Some(crate::ports::Submission {
                definition: "sha256:00".into(),
                workflow: "queued-flow".into(),
                input: serde_json::json!({"n": 1}),
                source: None,
                submitted_by: None,
                priority: 0,
            }))
        });
        let view = run_view(&store, run_id()).await.unwrap();
        assert_eq!(view.status, ShownStatus::Queued);
        assert_eq!(view.status.as_str(), "queued");
        assert_eq!(view.snapshot.workflow.name, "queued-flow");
        assert_eq!(view.snapshot.input, serde_json::json!({"n": 1}));
        assert_eq!(run.probes.load(Ordering::SeqCst), 0, "no writer is probed");
    }

    /// A queued run that a worker starts between the read of its log
    /// (nothing yet) and the look at the queue (no longer queued) is shown
    /// as it now is, not as a run that does not exist.
    #[tokio::test]
    async fn a_queued_run_started_while_it_is_looked_at_is_found() {
        let run = Live::new(vec![], true);
        let mut store = run.log_store();
        // The worker's first event lands just before the queue is asked.
        let log = Arc::clone(&run.log);
        store.expect_queued().returning(move |_| {
            log.lock().unwrap().push(started(1));
            Ok(None)
        });
        let writer = Arc::clone(&run.writer);
        store
            .expect_has_writer()
            .returning(move |_| Ok(writer.load(Ordering::SeqCst)));
        let view = run_view(&store, run_id()).await.unwrap();
        assert_eq!(view.status, ShownStatus::Recorded(RunStatus::Running));
        assert_eq!(view.snapshot.last_offset, 1);
    }

    #[tokio::test]
    async fn a_run_that_ends_while_it_is_probed_is_not_interrupted() {
        // The writer appends its last event and releases the lock between
        // the fold and the probe.
        let run = Live::new(vec![started(1)], true);
        let mut store = run.log_store();
        let finishing = run.clone();
        store.expect_has_writer().returning(move |_| {
            finishing.push(completed(2));
            Ok(false)
        });
        let view = run_view(&store, run_id()).await.unwrap();
        assert_eq!(view.status, ShownStatus::Recorded(RunStatus::Completed));
    }

    #[tokio::test(start_paused = true)]
    async fn a_follow_of_a_run_nothing_writes_ends_after_its_last_event() {
        let dead = Live::new(vec![started(1), warning(2)], false);
        let got = follow_all(dead.store(vec![started(1), warning(2)], false)).await;
        assert_eq!(got, ["1", "2", "Interrupted"]);

        let paused_run = Live::new(vec![started(1), paused(2)], false);
        let got = follow_all(paused_run.store(vec![started(1), paused(2)], false)).await;
        assert_eq!(got, ["1", "2", "Paused"]);

        let ended = Live::new(vec![started(1), completed(2)], false);
        let got = follow_all(ended.store(vec![started(1), completed(2)], true)).await;
        assert_eq!(got, ["1", "2", "Ended"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_follow_waits_for_every_event_a_writer_left_before_ending() {
        // The writer appended offset 3 and released the lock, but the
        // store's follow delivers offset 3 only later (a poll tick).
        let run = Live::new(vec![started(1), warning(2), warning(3)], false);
        let (tx, rx) = futures::channel::mpsc::unbounded();
        for e in [started(1), warning(2)] {
            tx.unbounded_send(Ok(e)).unwrap();
        }
        let store = run.store_with(rx.chain(futures::stream::pending()).boxed());
        let late = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            tx.unbounded_send(Ok(warning(3))).unwrap();
            tx
        });
        let got = follow_all(store).await;
        assert_eq!(got, ["1", "2", "3", "Interrupted"]);
        drop(late.await.unwrap());
        assert!(run.probes.load(Ordering::SeqCst) >= 5, "probed while idle");
    }

    #[tokio::test(start_paused = true)]
    async fn a_follow_of_a_live_run_waits_and_keeps_asking() {
        let live = Live::new(vec![started(1)], true);
        let mut stream = follow_run(
            Arc::new(live.store(vec![started(1)], false)),
            Arc::new(TokioClock::new()),
            run_id(),
            0,
        )
        .await
        .unwrap();
        assert!(matches!(stream.next().await, Some(Ok(Followed::Event(_)))));
        let waited = tokio::time::timeout(Duration::from_secs(10), stream.next()).await;
        assert!(waited.is_err(), "a live run's follow waits: {waited:?}");
        let probes = live.probes.load(Ordering::SeqCst);
        assert!(
            (45..=55).contains(&probes),
            "one probe per {IDLE_CHECK:?} idle: {probes}"
        );
    }

    #[tokio::test]
    async fn a_stale_snapshot_is_caught_up_from_its_last_offset() {
        let store = store_of(log(4), Some(saved_at(2)));
        let current = current_snapshot(&store, run_id()).await.unwrap();
        assert_eq!(current.last_offset, 4);
    }

    #[tokio::test]
    async fn an_unreadable_snapshot_is_rebuilt_from_all_events() {
        let mut store = MockRunStore::new();
        store
            .expect_load_snapshot()
            .returning(|_| Err(StoreError::Corrupt("snapshot.json: eof".into())));
        store
            .expect_read()
            .with(eq(run_id()), eq(0), eq(BATCH))
            .returning(|_, _, _| Ok(vec![warning(1)]));
        store
            .expect_read()
            .with(eq(run_id()), eq(1), eq(BATCH))
            .returning(|_, _, _| Ok(vec![]));
        let current = current_snapshot(&store, run_id()).await.unwrap();
        assert_eq!(current.last_offset, 1);
    }

    #[tokio::test]
    async fn a_snapshot_the_log_contradicts_is_corruption() {
        let other: RunId = "7c9e6679-7425-40de-944b-e07fc1f90ae7".parse().unwrap();
        let mut foreign = saved_at(2);
        foreign.run_id = other;
        let mut wrong_status = saved_at(2);
        wrong_status.status = RunStatus::Completed;
        let mut wrong_time = saved_at(2);
        wrong_time.updated_at = Some(Timestamp::from_millis(99));
        for (what, saved, needle) in [
            ("foreign", foreign, "snapshot of run 7c9e6679"),
            ("beyond the log", saved_at(5), "lastOffset"),
            ("wrong status", wrong_status, "does not match"),
            ("wrong time", wrong_time, "does not match"),
        ] {
            let store = store_of(log(3), Some(saved));
            let err = current_snapshot(&store, run_id()).await.unwrap_err();
            assert!(matches!(err, StoreError::Corrupt(_)), "{what}: {err}");
            assert!(err.to_string().contains(needle), "{what}: {err}");
        }
    }

    #[tokio::test]
    async fn events_out_of_order_or_of_another_run_are_corruption() {
        let mut shuffled = log(4);
        shuffled.swap(1, 2);
        let mut foreign = log(3);
        foreign[1].run_id = "7c9e6679-7425-40de-944b-e07fc1f90ae7".parse().unwrap();
        let mut repeated = log(3);
        repeated.insert(2, warning(2));
        for (what, events) in [
            ("shuffled", shuffled),
            ("foreign", foreign),
            ("repeated", repeated),
        ] {
            let store = store_of(events, None);
            let err = current_snapshot(&store, run_id()).await.unwrap_err();
            assert!(
                matches!(err, StoreError::BadEvent { offset: 2 | 3, .. }),
                "{what}: {err}"
            );
        }
    }
}

//! [`Recorder`]: the single writer of one run.
//!
//! Every event of a run passes through [`Recorder::emit`]: it gets the next
//! offset, its exchange-transcript lines are written, and it is folded into
//! the state (the only way the state changes) and kept as *pending*. The
//! pending events are appended to the store together, in one append (one
//! `write`), by [`Recorder::publish`], and only then shown to the observer:
//! nothing is seen before it is stored (design §4.1). The driver publishes
//! before anything outside the recorder can learn of a pending event: before
//! it starts a node run's task, answers a node run, replies to a command,
//! waits for the next message, or ends. So the events of one turn of the
//! driver (a node run's end, its routing and the next node run's start) cost
//! one `write`, not one each.
//!
//! Step boundaries ([`Recorder::checkpoint`]) write a snapshot when one is
//! due and flush the log; [`Recorder::boundary`] marks one whose flush joins
//! the next publication, so a step's end and the next step's start share a
//! `write` and a sync.

use std::collections::BTreeSet;
use std::sync::Arc;

use domain::snapshot::Changes;
use domain::{
    EventKind, NodeId, NodeRunId, Offset, RunSnapshot, RuntimeEvent, Timestamp, WorkflowDef,
};
use serde_json::json;

use super::live::LiveSpans;
use super::transcript::TranscriptWriter;
use super::{ExecutorError, Ports};
use crate::ports::StoreError;

/// Which node and node run an event concerns.
pub(crate) type Ctx = (Option<NodeId>, Option<NodeRunId>);

/// Events about the run as a whole.
pub(crate) const RUN_LEVEL: Ctx = (None, None);

/// Where an event was recorded: what callers of [`Recorder::emit`] need of
/// it once it is pending (the event itself waits in the recorder).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Recorded {
    pub offset: Offset,
    pub timestamp: Timestamp,
}

/// The writer of one run: its state and everything that records it.
pub(crate) struct Recorder {
    ports: Arc<Ports>,
    workflow: Arc<WorkflowDef>,
    /// The run's state: `fold(events)`, changed only by [`Recorder::emit`].
    pub state: RunSnapshot,
    transcript: Option<TranscriptWriter>,
    /// The live export of the run's spans, when there is one.
    live: Option<LiveSpans>,
    /// Bytes of the last snapshot written (none yet: `None`).
    last_snapshot: Option<u64>,
    /// Bytes the store reported appending since the last snapshot.
    log_since_snapshot: u64,
    /// What the events since the last snapshot or delta changed: the next
    /// delta's content.
    changes: Changes,
    /// `lastOffset` of the state the store holds (the last snapshot's or
    /// delta's): where the next delta starts.
    saved_offset: u64,
    /// Bytes appended since the last snapshot or delta.
    log_since_saved: u64,
    /// Bytes of the deltas saved since the last snapshot.
    deltas_since_snapshot: u64,
    /// Whether the store keeps deltas: one it declined is offered no more
    /// until the next snapshot.
    deltas_kept: bool,
    /// Subscriber drops already recorded as `warning` events.
    drops_reported: u64,
    /// Positions of the nodes an event recorded since the last
    /// [`Recorder::take_touched`] may have made ready (the targets of edges
    /// decided, the nodes a loop edge reset): the scheduler's candidates.
    touched: BTreeSet<usize>,
    /// Events folded into `state` and not yet appended: written together
    /// by the next [`Recorder::publish`]. The vector is kept, so a turn's
    /// events cost no allocation of their own.
    pending: Vec<RuntimeEvent>,
    /// A step boundary whose flush waits for the next publication.
    boundary: bool,
    /// Set when a publication failed and the state could not be read back
    /// from the store: the state then holds events the log does not, and
    /// nothing more may be recorded on top of it.
    broken: Option<String>,
}

impl Recorder {
    /// Whether the run has a transcript.
    pub(super) fn has_transcript(&self) -> bool {
        self.transcript.is_some()
    }

    /// Gives the transcript what the turns in flight said before a resume
    /// (see [`TranscriptWriter::restore`]).
    pub(super) fn restore_transcript(&mut self, events: &[RuntimeEvent]) {
        if let Some(transcript) = &mut self.transcript {
            transcript.restore(&self.state, events);
        }
    }

    /// Writes the transcript lines of a log copied into this run (a fork's),
    /// as if its events had been recorded here.
    pub(super) async fn project_transcript(
        &mut self,
        events: &[RuntimeEvent],
    ) -> Result<(), ExecutorError> {
        if let Some(transcript) = &mut self.transcript {
            transcript.project(events, &self.workflow).await?;
            // Their events are on record already.
            transcript.flush().await?;
        }
        Ok(())
    }

    pub fn new(
        ports: Arc<Ports>,
        workflow: Arc<WorkflowDef>,
        state: RunSnapshot,
        transcript: Option<TranscriptWriter>,
    ) -> Self {
        let workflow_len = workflow.nodes.len();
        Self {
            ports,
            workflow,
            state,
            transcript,
            live: None,
            last_snapshot: None,
            log_since_snapshot: 0,
            changes: Changes::default(),
            saved_offset: 0,
            log_since_saved: 0,
            deltas_since_snapshot: 0,
            deltas_kept: true,
            drops_reported: 0,
            touched: (0..workflow_len).collect(),
            pending: Vec::new(),
            boundary: false,
            broken: None,
        }
    }

    /// The recorder, exporting the run's spans with `live`.
    pub fn with_live(mut self, live: Option<LiveSpans>) -> Self {
        self.live = live;
        self
    }

    /// A new run: the store holds no state of it yet, and needs none
    /// before the policy asks for one (its log is the truth, design §5.1):
    /// a short run writes one snapshot, its final one, not one at its start
    /// as well.
    pub fn new_run(&mut self) {
        self.last_snapshot = Some(0);
    }

    /// The W3C trace context of the span the event at `offset` opened (a
    /// provider call's), when the run's spans are exported live.
    pub fn traceparent(&self, offset: Offset) -> Option<String> {
        self.live.as_ref()?.traceparent(offset)
    }

    /// The nodes touched since the last call (every node at first).
    pub fn take_touched(&mut self) -> BTreeSet<usize> {
        std::mem::take(&mut self.touched)
    }

    /// Records one event: its transcript lines are written and it is
    /// folded into the state; it reaches the store (and the observer) with
    /// the next [`Recorder::publish`]. Before the run's last event, the
    /// spans it will end get their room in the export queue, and a
    /// `warning` records what the export dropped.
    pub async fn emit(&mut self, ctx: Ctx, kind: EventKind) -> Result<Recorded, ExecutorError> {
        let pauses = matches!(kind, EventKind::FlowPaused { .. });
        if (kind.is_terminal() || pauses) && self.live.is_some() {
            // Boxed, as the transcript's lines below: every caller's future
            // would otherwise hold what only a few events need, and each
            // event would copy it.
            Box::pin(self.report_live(!pauses)).await?;
        }
        let event = self.event(ctx, kind)?;
        if self.transcript.is_some() {
            Box::pin(self.observe(&event)).await?;
        }
        Ok(self.fold(event))
    }

    /// Before the writer stops (and, with `ends`, before the run's last
    /// event: the spans it ends get their room in the export queue): a
    /// `warning` of what the live export dropped, as the next writer counts
    /// from nothing.
    async fn report_live(&mut self, ends: bool) -> Result<(), ExecutorError> {
        let Some(live) = &mut self.live else {
            return Ok(());
        };
        if ends {
            live.before_end();
        }
        if let Some(warning) = live.report() {
            let event = self.event(RUN_LEVEL, warning)?;
            self.observe(&event).await?;
            self.fold(event);
        }
        Ok(())
    }

    /// The next event of the run: its offset follows the state's last.
    fn event(
        &self,
        (node_id, node_run_id): Ctx,
        kind: EventKind,
    ) -> Result<RuntimeEvent, ExecutorError> {
        if let Some(why) = &self.broken {
            return Err(StoreError::io_msg(why.clone()).into());
        }
        let offset = Offset::new(self.state.last_offset + 1)
            .map_err(|e| StoreError::Corrupt(e.to_string()))?;
        Ok(RuntimeEvent {
            id: domain::ids::uuid_text(self.ports.ids.uuid()),
            offset,
            timestamp: self.ports.clock.now(),
            run_id: self.state.run_id,
            node_id,
            node_run_id,
            kind,
            extra: Default::default(),
        })
    }

    /// Writes the event's transcript lines. They go first: when they cannot
    /// be written (a full disk) the event is not recorded either, so the
    /// log never claims a step (or an outcome) whose exchange is missing.
    /// The transcript sees the state before the event: the node run an end
    /// event closes is still there to name its place.
    async fn observe(&mut self, event: &RuntimeEvent) -> Result<(), ExecutorError> {
        if let Some(transcript) = &mut self.transcript {
            transcript
                .observe(event, &self.state, &self.workflow)
                .await?;
        }
        Ok(())
    }

    /// Folds the event into the state and keeps it pending.
    fn fold(&mut self, event: RuntimeEvent) -> Recorded {
        self.state.apply(&event);
        self.changes.note(&event);
        if let Some(live) = &mut self.live {
            live.push(&event);
        }
        if let EventKind::EdgeFired {
            to, reset_nodes, ..
        } = &event.kind
        {
            let positions = std::iter::once(to).chain(reset_nodes);
            self.touched
                .extend(positions.filter_map(|n| self.workflow.position(n)));
        } else if let EventKind::EdgeSkipped { to, .. } = &event.kind {
            self.touched.extend(self.workflow.position(to));
        }
        let recorded = Recorded {
            offset: event.offset,
            timestamp: event.timestamp,
        };
        self.pending.push(event);
        recorded
    }

    /// Appends the pending events in one append and shows them to the
    /// observer; then, if a step boundary was marked since the last
    /// publication, writes a snapshot or a delta when one is due (see
    /// [`super::CheckpointPolicy`]; the `state:saved` marker that follows
    /// counts towards the next one's growth) and flushes the log. Nothing
    /// pending and no boundary: nothing to do.
    pub async fn publish(&mut self) -> Result<(), ExecutorError> {
        self.write_pending().await?;
        if !std::mem::take(&mut self.boundary) {
            return Ok(());
        }
        if self.save_state().await? {
            let snapshot_offset = Offset::new(self.state.last_offset)
                .map_err(|e| StoreError::Corrupt(e.to_string()))?;
            // Boxed, as rare: unboxed, every publication's future would
            // hold an event's recording.
            Box::pin(self.emit(RUN_LEVEL, EventKind::StateSaved { snapshot_offset })).await?;
            self.write_pending().await?;
        }
        self.ports.store.flush(self.state.run_id).await?;
        Ok(())
    }

    /// Saves the state when the policy says so: a snapshot once the log has
    /// grown by the last one's size, otherwise a delta once it has grown by
    /// the policy's share of it since the last save, while the deltas since
    /// the snapshot weigh under the policy's share of the log since it (so
    /// they never cost more than the log does). Whether anything was saved.
    async fn save_state(&mut self) -> Result<bool, ExecutorError> {
        let policy = self.ports.checkpoints;
        let Some(snapshot_bytes) = self
            .last_snapshot
            .filter(|&bytes| !policy.due(self.log_since_snapshot, bytes))
        else {
            let bytes = self.ports.store.save_snapshot(&self.state).await?;
            self.last_snapshot = Some(bytes);
            self.log_since_snapshot = 0;
            self.saved();
            self.deltas_since_snapshot = 0;
            self.deltas_kept = true;
            return Ok(true);
        };
        let delta_due = self.deltas_kept
            && self.changes.fit_a_delta()
            && policy.delta_due(
                self.log_since_saved,
                snapshot_bytes,
                self.deltas_since_snapshot,
                self.log_since_snapshot,
            );
        if !delta_due {
            return Ok(false);
        }
        let delta = self.state.delta(self.saved_offset, &self.changes);
        match self.ports.store.save_snapshot_delta(&delta).await? {
            Some(bytes) => {
                self.deltas_since_snapshot += bytes;
                self.saved();
                Ok(true)
            }
            None => {
                self.deltas_kept = false;
                Ok(false)
            }
        }
    }

    /// The state as it is now is what the store holds.
    fn saved(&mut self) {
        self.changes.clear();
        self.saved_offset = self.state.last_offset;
        self.log_since_saved = 0;
    }

    /// Appends the pending events, all in one append, then shows them to
    /// the observer.
    ///
    /// When the append fails, the state is read back from the store (it
    /// holds events the log does not), so the runtime's failure can still
    /// be recorded after what was stored; if that fails too, nothing more
    /// is recorded.
    async fn write_pending(&mut self) -> Result<(), ExecutorError> {
        if let Some(why) = &self.broken {
            return Err(StoreError::io_msg(why.clone()).into());
        }
        if self.pending.is_empty() {
            return Ok(());
        }
        // The events' transcript lines first (see `emit`): a transcript
        // that writes its lines together writes them now.
        if let Some(transcript) = &self.transcript
            && let Err(e) = transcript.flush().await
        {
            // Boxed, as every `unrecorded` here: a failure's path, which
            // would otherwise make every append's future its size.
            Box::pin(self.unrecorded()).await;
            return Err(e.into());
        }
        let store = &self.ports.store;
        let run_id = self.state.run_id;
        // Without an observer no one reads the events after they are
        // stored: the store may take them instead of copying them.
        let appended = match &self.ports.observer {
            None => store.append_owned(run_id, &mut self.pending).await,
            Some(_) => store.append(run_id, &self.pending).await,
        };
        match appended {
            Ok(bytes) => {
                self.log_since_snapshot += bytes;
                self.log_since_saved += bytes;
            }
            Err(e) => {
                Box::pin(self.unrecorded()).await;
                return Err(e.into());
            }
        }
        if let Some(live) = &mut self.live {
            live.stored();
        }
        if let Some(observer) = &self.ports.observer {
            for event in &self.pending {
                observer.on_event(event);
            }
        }
        self.pending.clear();
        Ok(())
    }

    /// The pending events were not stored: they are dropped, and the state
    /// is read back. The span projection holds them too, so no more spans
    /// go out live (`awr trace export` sends what is on record).
    async fn unrecorded(&mut self) {
        self.pending.clear();
        if self.live.take().is_some() {
            tracing::warn!(run = %self.state.run_id, "events could not be stored; the run's spans are no longer exported live");
        }
        self.reread().await;
    }

    /// After a failed append: the state as the store has it.
    async fn reread(&mut self) {
        let run_id = self.state.run_id;
        match crate::inspect::current_snapshot(self.ports.store.as_ref(), run_id).await {
            Ok(state) => {
                self.state = state;
                // What the store holds is unknown: the next save is whole.
                self.last_snapshot = None;
                self.touched = (0..self.workflow.nodes.len()).collect();
            }
            Err(e) => {
                self.broken = Some(format!(
                    "run {run_id}: an append failed and the stored state cannot be read back: {e}"
                ));
            }
        }
    }

    /// Whether the run's stop leaves a snapshot: always where the store
    /// needs one, and otherwise as at any step boundary, when the rule asks
    /// (so a short run creates no snapshot file: a reader folds its log).
    fn final_snapshot_due(&self) -> bool {
        self.ports.store.needs_final_snapshot()
            || self
                .last_snapshot
                .is_none_or(|bytes| self.ports.checkpoints.due(self.log_since_snapshot, bytes))
    }

    /// Step boundary, made durable now: [`Recorder::boundary`], then
    /// [`Recorder::publish`].
    pub async fn checkpoint(&mut self) -> Result<(), ExecutorError> {
        self.boundary().await?;
        self.publish().await
    }

    /// Marks a step boundary: the next [`Recorder::publish`], which the
    /// driver makes before anything can see the step's events, writes the
    /// snapshot if one is due and flushes the log. What the same turn
    /// records meanwhile (the next step's start) shares the step's `write`
    /// and its sync.
    pub async fn boundary(&mut self) -> Result<(), ExecutorError> {
        self.report_drops().await?;
        self.boundary = true;
        Ok(())
    }

    /// Records, as a `warning`, events live transcript subscribers missed
    /// since the last report, and spans the live export dropped: the audit
    /// trail shows a consumer saw less.
    async fn report_drops(&mut self) -> Result<(), ExecutorError> {
        if let Some(warning) = self.live.as_mut().and_then(LiveSpans::report) {
            self.emit(RUN_LEVEL, warning).await?;
        }
        let dropped = self
            .transcript
            .as_ref()
            .map_or(0, TranscriptWriter::dropped);
        if dropped > self.drops_reported {
            let missed = dropped - self.drops_reported;
            self.drops_reported = dropped;
            let message = format!("live transcript subscribers missed {missed} event(s)");
            let details = Some(json!({ "dropped": missed, "droppedTotal": dropped }));
            self.emit(RUN_LEVEL, EventKind::Warning { message, details })
                .await?;
        }
        Ok(())
    }

    /// After the terminal event: the log made durable, then the final
    /// snapshot (no marker follows the terminal event). Once the terminal
    /// event is durable the run's outcome is recorded: a snapshot that cannot
    /// be saved then (a full disk) is only a stale cache, which readers bring
    /// up to date from the log (design §4.2), so it is a warning, not a
    /// failure that would contradict the log.
    pub async fn finish(&mut self) -> Result<(), ExecutorError> {
        let run_id = self.state.run_id;
        // A boundary left pending is this one: the final snapshot follows.
        self.boundary = false;
        self.write_pending().await?;
        self.ports.store.flush(run_id).await?;
        if self.final_snapshot_due()
            && let Err(e) = self.ports.store.save_snapshot(&self.state).await
        {
            tracing::warn!(run = %run_id, error = %e, "cannot save the final snapshot; the event log holds the outcome");
        }
        if let Some(transcript) = self.transcript.take() {
            transcript.close().await;
        }
        Ok(())
    }
}

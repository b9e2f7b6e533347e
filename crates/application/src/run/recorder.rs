//! [`Recorder`]: the single writer of one run.
//!
//! Every event of a run passes through [`Recorder::emit`]: it gets the next
//! offset, its exchange-transcript lines are written, it is appended to the
//! store, folded into the state (the only way the state changes) and shown to
//! the observer — in that order, so nothing is seen before it is stored
//! (design §4.1). Step boundaries ([`Recorder::checkpoint`]) flush the log
//! and write a snapshot when one is due.

use std::collections::BTreeSet;
use std::sync::Arc;

use domain::{EventKind, NodeId, NodeRunId, Offset, RunSnapshot, RuntimeEvent, WorkflowDef};
use serde_json::json;

use super::transcript::TranscriptWriter;
use super::{ExecutorError, Ports};
use crate::ports::StoreError;

/// Which node and node run an event concerns.
pub(crate) type Ctx = (Option<NodeId>, Option<NodeRunId>);

/// Events about the run as a whole.
pub(crate) const RUN_LEVEL: Ctx = (None, None);

/// The writer of one run: its state and everything that records it.
pub(crate) struct Recorder {
    ports: Arc<Ports>,
    workflow: Arc<WorkflowDef>,
    /// The run's state: `fold(events)`, changed only by [`Recorder::emit`].
    pub state: RunSnapshot,
    transcript: Option<TranscriptWriter>,
    /// Bytes of the last snapshot written (none yet: `None`).
    last_snapshot: Option<u64>,
    /// Bytes the store reported appending since the last snapshot.
    log_since_snapshot: u64,
    /// Subscriber drops already recorded as `warning` events.
    drops_reported: u64,
    /// Positions of the nodes an event recorded since the last
    /// [`Recorder::take_touched`] may have made ready (the targets of edges
    /// decided, the nodes a loop edge reset): the scheduler's candidates.
    touched: BTreeSet<usize>,
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
            last_snapshot: None,
            log_since_snapshot: 0,
            drops_reported: 0,
            touched: (0..workflow_len).collect(),
        }
    }

    /// The nodes touched since the last call (every node at first).
    pub fn take_touched(&mut self) -> BTreeSet<usize> {
        std::mem::take(&mut self.touched)
    }

    /// Records one event and returns it as stored.
    pub async fn emit(
        &mut self,
        (node_id, node_run_id): Ctx,
        kind: EventKind,
    ) -> Result<RuntimeEvent, ExecutorError> {
        let offset = Offset::new(self.state.last_offset + 1)
            .map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let event = RuntimeEvent {
            id: self.ports.ids.uuid().to_string(),
            offset,
            timestamp: self.ports.clock.now(),
            run_id: self.state.run_id,
            node_id,
            node_run_id,
            kind,
            extra: Default::default(),
        };
        // The transcript line goes first: when it cannot be written (a full
        // disk) the event is not recorded either, so the log never claims a
        // step (or an outcome) whose exchange is missing. It sees the state
        // before the event: the node run an end event closes is still there
        // to name its place.
        if let Some(transcript) = &mut self.transcript {
            transcript
                .observe(&event, &self.state, &self.workflow)
                .await?;
        }
        self.log_since_snapshot += self
            .ports
            .store
            .append(self.state.run_id, std::slice::from_ref(&event))
            .await?;
        self.state.apply(&event);
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
        if let Some(observer) = &self.ports.observer {
            observer.on_event(&event);
        }
        Ok(event)
    }

    /// Step boundary: the snapshot and its `state:saved` marker when one is
    /// due (see [`super::CheckpointPolicy`]: the log grew by the last
    /// snapshot's size since it), then one flush for all of it. The marker
    /// counts towards the next snapshot's growth.
    pub async fn checkpoint(&mut self) -> Result<(), ExecutorError> {
        self.report_drops().await?;
        let due = self.last_snapshot.is_none_or(|snapshot_bytes| {
            (self.ports.checkpoints).due(self.log_since_snapshot, snapshot_bytes)
        });
        if due {
            let bytes = self.ports.store.save_snapshot(&self.state).await?;
            self.last_snapshot = Some(bytes);
            self.log_since_snapshot = 0;
            let snapshot_offset = Offset::new(self.state.last_offset)
                .map_err(|e| StoreError::Corrupt(e.to_string()))?;
            self.emit(RUN_LEVEL, EventKind::StateSaved { snapshot_offset })
                .await?;
        }
        self.ports.store.flush(self.state.run_id).await?;
        Ok(())
    }

    /// Records, as a `warning`, events live transcript subscribers missed
    /// since the last report: the audit trail shows a consumer saw less.
    async fn report_drops(&mut self) -> Result<(), ExecutorError> {
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
        self.ports.store.flush(run_id).await?;
        if let Err(e) = self.ports.store.save_snapshot(&self.state).await {
            tracing::warn!(run = %run_id, error = %e, "cannot save the final snapshot; the event log holds the outcome");
        }
        if let Some(transcript) = self.transcript.take() {
            transcript.close().await;
        }
        Ok(())
    }
}

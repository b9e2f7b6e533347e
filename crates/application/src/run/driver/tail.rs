//! The end of the log a resume continues from: the step the writer that
//! died was in, and what the agents of its turns in flight had said.

use std::collections::HashMap;

use domain::{EventKind, NodeRunId, RuntimeEvent};

use super::Driver;
use crate::run::ExecutorError;
use crate::run::step::resume::LastStep;

/// Events at the end of the log a resume keeps from its fold, to find the
/// step the previous writer was in without reading them again.
pub(super) const TAIL: usize = 16;

/// Events read per batch when rebuilding a conversation.
const BATCH: usize = 1024;

impl Driver {
    /// The step the end of the log shows under way, if any.
    pub(super) async fn last_step(&mut self) -> Result<Option<LastStep>, ExecutorError> {
        // The end of the log the resume folded, if it holds the answer.
        if let Some(first) = self.tail.first() {
            let after = first.offset.get() - 1;
            if self.tail.last().map(|e| e.offset.get()) == Some(self.state().last_offset)
                && let Some(step) = LastStep::of(&self.tail, after == 0)
            {
                return Ok(step);
            }
        }
        // What is read back must include what was recorded.
        self.rec.publish().await?;
        let run_id = self.state().run_id;
        let last = self.state().last_offset;
        let mut back = TAIL as u64;
        loop {
            let after = last.saturating_sub(back);
            let tail = self
                .ports
                .store
                .read(run_id, after, usize::try_from(back).unwrap_or(usize::MAX))
                .await?;
            if let Some(step) = LastStep::of(&tail, after == 0) {
                return Ok(step);
            }
            back = back.saturating_mul(4);
        }
    }

    /// Every event of the run so far.
    pub(super) async fn events(&mut self) -> Result<Vec<RuntimeEvent>, ExecutorError> {
        self.events_after(0).await
    }

    /// The events of the run after offset `after`.
    pub(super) async fn events_after(
        &mut self,
        after: u64,
    ) -> Result<Vec<RuntimeEvent>, ExecutorError> {
        // What is read back must include what was recorded.
        self.rec.publish().await?;
        let run_id = self.state().run_id;
        let mut events: Vec<RuntimeEvent> = Vec::new();
        loop {
            let from = events.last().map_or(after, |e| e.offset.get());
            let batch = self.ports.store.read(run_id, from, BATCH).await?;
            if batch.is_empty() {
                return Ok(events);
            }
            events.extend(batch);
        }
    }

    /// The transcript's replies in progress died with the writer that held
    /// them: the events of each turn in flight since its `agent:start` are
    /// read back from the end of the log, so that the resumed turn's reply
    /// so far is what its agent said before the stop.
    /// Writes the transcript lines of a fork's copied log (see
    /// [`TranscriptWriter::project`](crate::run::transcript::TranscriptWriter::project)).
    pub(super) async fn project_transcript(&mut self) -> Result<(), ExecutorError> {
        if !self.rec.has_transcript() {
            return Ok(());
        }
        let events = self.events_after(0).await?;
        self.rec.project_transcript(&events).await
    }

    pub(super) async fn restore_transcript(&mut self) -> Result<(), ExecutorError> {
        if !self.rec.has_transcript() {
            return Ok(());
        }
        let turns: Vec<NodeRunId> = self
            .state()
            .node_runs
            .iter()
            .filter(|(_, r)| r.in_turn)
            .map(|(id, _)| *id)
            .collect();
        if turns.is_empty() {
            self.rec.restore_transcript(&[]);
            return Ok(());
        }
        let starts_in = |events: &[RuntimeEvent]| -> HashMap<NodeRunId, u64> {
            events
                .iter()
                .filter(|e| matches!(e.kind, EventKind::AgentStart { .. }))
                .filter_map(|e| Some((e.node_run_id?, e.offset.get())))
                .collect()
        };
        let last = self.state().last_offset;
        // The tail the resume folded, if it reaches back far enough.
        let mut events = std::mem::take(&mut self.tail);
        let mut starts = starts_in(&events);
        let mut back = TAIL as u64;
        let whole = |events: &[RuntimeEvent]| events.first().is_some_and(|e| e.offset.get() == 1);
        while !(whole(&events)
            || events.last().is_some_and(|e| e.offset.get() == last)
                && turns.iter().all(|t| starts.contains_key(t)))
        {
            back = back.saturating_mul(4);
            events = self.events_after(last.saturating_sub(back)).await?;
            starts = starts_in(&events);
        }
        let said: Vec<RuntimeEvent> = events
            .into_iter()
            .filter(|e| {
                e.node_run_id
                    .filter(|r| turns.contains(r))
                    .and_then(|r| starts.get(&r))
                    .is_some_and(|start| e.offset.get() > *start)
            })
            .collect();
        self.rec.restore_transcript(&said);
        Ok(())
    }
}

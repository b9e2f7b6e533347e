//! The end of the log a resume continues from: the step the writer that
//! died was in, and what the agents of its turns in flight had said.

use std::collections::HashMap;

use domain::{EventKind, NodeId, NodeRunId, RuntimeEvent};

use super::Driver;
use crate::run::ExecutorError;

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

/// What a writer was in the middle of when it died (see
/// [`Driver::finish_last_step`]).
pub(super) enum LastStep {
    /// Routing `node`'s end; the edges `recorded` are on record.
    Routing { node: NodeId, recorded: Vec<String> },
    /// Stopping the run for `node`'s failure `error` (of its node run `run`).
    Failing {
        node: NodeId,
        run: Option<NodeRunId>,
        error: String,
    },
}

impl LastStep {
    /// Read off `tail`, the last events of a log (`whole`: all of it);
    /// `None` when the answer lies further back.
    pub(super) fn of(tail: &[RuntimeEvent], whole: bool) -> Option<Option<Self>> {
        let mut recorded = Vec::new();
        // The stopping failures at the end, latest first: the first of them
        // is the cause, the others the node runs it cancelled.
        let mut failing: Option<&RuntimeEvent> = None;
        for event in tail.iter().rev() {
            match &event.kind {
                EventKind::NodeFailed {
                    continued: false, ..
                } if recorded.is_empty() => failing = Some(event),
                _ if failing.is_some() => return Some(Self::failing(failing)),
                EventKind::EdgeFired { edge_id, .. } | EventKind::EdgeSkipped { edge_id, .. } => {
                    recorded.push(edge_id.clone());
                }
                // A fork's mark stands after the step its parent was in.
                EventKind::StateSaved { .. } | EventKind::FlowForked { .. } => {}
                EventKind::NodeCompleted { .. } | EventKind::NodeFailed { .. } => {
                    let node = event.node_id.clone()?;
                    return Some(Some(Self::Routing { node, recorded }));
                }
                _ => return Some(None),
            }
        }
        if !whole {
            return None;
        }
        Some(Self::failing(failing))
    }

    /// The failure `cause` was stopping the run with, unless it is one the
    /// stop itself wrote (a cancelled node run), whose cause is not on record.
    fn failing(cause: Option<&RuntimeEvent>) -> Option<Self> {
        let cause = cause?;
        let EventKind::NodeFailed { error, .. } = &cause.kind else {
            return None;
        };
        if error.starts_with("cancelled") {
            return None;
        }
        Some(Self::Failing {
            node: cause.node_id.clone()?,
            run: cause.node_run_id,
            error: error.clone(),
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const RUN: &str = "7f8c2b1e-3d4a-4b5c-9d6e-1f2a3b4c5d6e";

    /// Events from `(node, body)` pairs, offsets 1.., each `body` the
    /// event's type and fields as JSON.
    fn log(events: &[(&str, &str)]) -> Vec<RuntimeEvent> {
        events
            .iter()
            .enumerate()
            .map(|(i, (node, body))| {
                let line = format!(
                    r#"{{"id":"00000000-0000-4000-8000-00000000000{}","offset":{},"timestamp":"2026-01-01T00:00:00Z","runId":"{RUN}","nodeId":"{node}",{body}}}"#,
                    i,
                    i + 1
                );
                serde_json::from_str(&line).unwrap()
            })
            .collect()
    }

    #[test]
    fn an_end_followed_by_some_of_its_edges_is_a_routing_under_way() {
        let tail = log(&[
            ("a", r#""type":"node:completed","output":{"data":1}"#),
            (
                "a",
                r#""type":"edge:fired","edgeId":"a->b","from":"a","to":"b""#,
            ),
        ]);
        match LastStep::of(&tail, true) {
            Some(Some(LastStep::Routing { node, recorded })) => {
                assert_eq!(node.as_str(), "a");
                assert_eq!(recorded, ["a->b"]);
            }
            _ => panic!("not a routing under way"),
        }
    }

    #[test]
    fn the_first_of_the_stopping_failures_at_the_end_is_the_cause() {
        let tail = log(&[
            ("a", r#""type":"node:started","input":null"#),
            ("a", r#""type":"node:failed","error":"exit 3""#),
            (
                "b",
                r#""type":"node:failed","error":"cancelled because the run failed: exit 3""#,
            ),
        ]);
        match LastStep::of(&tail, false) {
            Some(Some(LastStep::Failing { node, error, .. })) => {
                assert_eq!(node.as_str(), "a");
                assert_eq!(error, "exit 3");
            }
            _ => panic!("not a failure under way"),
        }
        // All of the tail failures: the cause may lie further back.
        assert!(LastStep::of(&tail[1..], false).is_none());
    }

    #[test]
    fn a_stop_whose_cause_is_not_on_record_and_a_started_node_are_no_step() {
        let cancelled = log(&[("a", r#""type":"node:failed","error":"cancelled: SIGINT""#)]);
        assert!(matches!(LastStep::of(&cancelled, true), Some(None)));
        let started = log(&[("a", r#""type":"node:started","input":null"#)]);
        assert!(matches!(LastStep::of(&started, true), Some(None)));
    }
}

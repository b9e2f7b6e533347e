//! Fork: a new run that branches off another at one of its offsets (time
//! travel; seed 004's branch event), then goes on through the executor.
//!
//! The fork's log begins with a **copy** of the parent's events 1 to
//! `OFFSET`: same offsets, timestamps and fields, a fresh `id` each (an
//! event id names one event of one log) and the fork's `runId`. Copied,
//! not referenced: a run stays its own log, readable, followable, prunable
//! and movable between stores without its parent. Then `flow:forked`
//! (`parentRunId`, `parentOffset`, and `input` when one replaces the run's),
//! then the run goes on through the resume path (`Continue::Fork`): one
//! code path for start, resume, crash recovery and fork (design §5.1).
//!
//! What the copy rewrites besides the envelope's `runId`:
//! - `flow:started`'s `parentRunId`: a fork is no one's child, unless it is
//!   the fork of a child, whose parent is then the fork of its parent;
//! - `childRunId` of `subflow:started` and `subflow:completed` for the
//!   children in flight at the fork point: each is forked with the run, so
//!   the copy names the child's fork. A child that had ended by then is
//!   shared, named as it was: nothing of it runs again.
//!
//! A child's fork point is the one consistent with the parent's: the
//! child's events recorded by the time of the parent's event at `OFFSET`
//! (its timestamp or earlier), never its terminal event (the parent had not
//! seen it end). Its own children in flight are forked the same way, to any
//! depth. A child that had recorded nothing by then starts afresh.
//!
//! The node runs in flight at the fork point are continued by the resume
//! path (`driver/resume.rs`): each goes on in a copy of its agent's session
//! where the provider makes one (`Provider::forks_sessions`: Claude Code
//! with `--fork-session`, HTTP agents from the conversation on record), and
//! restarts as a new attempt otherwise (Codex, Gemini, Copilot, mock,
//! `command` nodes), so the parent's sessions and processes are never
//! touched.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use domain::{Caller, EventKind, Offset, RunId, RunSnapshot, RuntimeEvent, Timestamp, WorkflowDef};
use futures::StreamExt;
use serde_json::Value;

use crate::Cancel;
use crate::ports::{RunLock, RunStore};
use crate::run::{Continue, Executor, ExecutorError, RunOutcome};

/// Events read and copied per batch.
const BATCH: usize = 1024;

/// What to fork.
#[derive(Debug, Clone)]
pub struct ForkRequest {
    /// The run to branch off.
    pub parent: RunId,
    /// The offset of the parent's last event the fork copies (from 1).
    pub at: u64,
    /// The input of what runs after the fork point, replacing the run's
    /// (`flow:forked`'s `input`); `None` keeps the parent's.
    pub input: Option<Value>,
    /// Who forks it (`flow:forked`'s `by`).
    pub by: Option<Caller>,
}

impl Executor {
    /// Makes the fork of `request.parent` at `request.at`, and returns its
    /// run id; [`Executor::run_fork`] runs it. `workflow` is the parent's
    /// definition (the same hash as its `flow:started`'s).
    ///
    /// Everything that can be wrong with the request is refused
    /// ([`ExecutorError::Refused`], or the store's `NotFound` for an unknown
    /// run) before any run is created: an offset of 0, beyond the parent's
    /// log, or at its terminal event; a parent that never started or whose
    /// definition changed.
    pub async fn fork(
        &self,
        request: ForkRequest,
        workflow: &WorkflowDef,
    ) -> Result<RunId, ExecutorError> {
        let store = self.store();
        let parent = request.parent;
        if let Some(input) = &request.input {
            WorkflowDef::check_input(input)
                .map_err(|e| ExecutorError::Refused(format!("input: {e}")))?;
        }
        if request.at == 0 {
            return Err(ExecutorError::Refused(
                "offset 0: a run's offsets start at 1 (flow:started)".to_owned(),
            ));
        }
        let last = store.last_offset(parent).await?;
        if last == 0 {
            return Err(ExecutorError::Refused(format!(
                "run {parent} has no events; there is nothing to fork"
            )));
        }
        if request.at > last {
            return Err(ExecutorError::Refused(format!(
                "offset {} is beyond the end of run {parent}, whose last offset is {last}",
                request.at
            )));
        }
        let first = one(store, parent, 1).await?;
        match &first.kind {
            EventKind::FlowStarted { workflow: w, .. } if w.hash == workflow.hash => {}
            EventKind::FlowStarted { workflow: w, .. } => {
                return Err(ExecutorError::Refused(format!(
                    "run {parent} started with workflow `{}` of hash {}, and this definition's \
                     hash is {}: it changed since the run started",
                    w.name, w.hash, workflow.hash
                )));
            }
            other => {
                return Err(ExecutorError::Refused(format!(
                    "run {parent} begins with `{}`, not `flow:started`: it cannot be forked",
                    other.type_name()
                )));
            }
        }
        let cut = one(store, parent, request.at).await?;
        if cut.kind.is_terminal() {
            return Err(ExecutorError::Refused(format!(
                "offset {} is the end of run {parent} ({}): there is nothing after it to run; \
                 fork at an earlier offset",
                request.at,
                cut.kind.type_name()
            )));
        }
        let mut held = Vec::new();
        let fork = self
            .copy(
                Source {
                    run: parent,
                    cut: request.at,
                    caller: None,
                    time: cut.timestamp,
                    input: request.input,
                    by: request.by,
                },
                &mut held,
            )
            .await?;
        // The fork's own lock stays held until `run_fork`; its children's
        // are released, for the fork's writer to take as it reaches them.
        for lock in held {
            if lock.run_id() == fork {
                self.adopt(lock);
            }
        }
        Ok(fork)
    }

    /// Runs a fork made by [`Executor::fork`] from its fork point to its
    /// end: the resume path, whose `flow:forked` stands for `flow:resumed`.
    pub async fn run_fork(
        &self,
        run_id: RunId,
        workflow: Arc<WorkflowDef>,
        cancel: Cancel,
    ) -> Result<RunOutcome, ExecutorError> {
        self.continue_run(run_id, workflow, Continue::Fork, cancel)
            .await
    }

    /// Creates the fork of `source` (and, first, of its children in flight
    /// at the cut): its copied events and `flow:forked`, stored whole by
    /// [`RunStore::import_run`], so that a fork cut short (an error, a
    /// crash) leaves no partial run to be read, or resumed, as one. The
    /// locks of every run made go to `held`.
    async fn copy(&self, source: Source, held: &mut Vec<RunLock>) -> Result<RunId, ExecutorError> {
        let store = self.store();
        let fork = self.new_run_id();
        // The children in flight at the cut: started (a node run in flight
        // names it) and not ended before it.
        let mut before = None::<RunSnapshot>;
        let mut ended = BTreeSet::new();
        for_each_batch(store, source.run, source.cut, |batch| {
            for event in batch {
                if let EventKind::SubflowCompleted { child_run_id, .. } = &event.kind {
                    ended.insert(*child_run_id);
                }
                match &mut before {
                    Some(state) => state.apply(event),
                    None => before = RunSnapshot::fold([event]),
                }
            }
        })
        .await?;
        let in_flight: BTreeSet<RunId> = before
            .iter()
            .flat_map(|s| s.node_runs.values().filter_map(|r| r.child))
            .filter(|child| !ended.contains(child))
            .collect();
        let mut children = HashMap::new();
        for child in in_flight {
            let cut = self.child_cut(child, source.time).await?;
            let forked = if cut == 0 {
                // Nothing of it on record by then: it starts afresh.
                let id = self.new_run_id();
                held.push(store.create_run(id).await?);
                id
            } else {
                Box::pin(self.copy(
                    Source {
                        run: child,
                        cut,
                        caller: Some(fork),
                        time: source.time,
                        input: None,
                        by: source.by.clone(),
                    },
                    held,
                ))
                .await?
            };
            children.insert(child, forked);
        }
        // The copy, batch by batch, folded as it goes; held until it is
        // stored whole (as big as the log up to the cut).
        let mut state = RunSnapshot::new(fork);
        let mut copied: Vec<Vec<RuntimeEvent>> = Vec::new();
        let mut after = 0;
        while after < source.cut {
            let batch = store.read(source.run, after, BATCH).await?;
            let batch: Vec<RuntimeEvent> = batch
                .into_iter()
                .take_while(|e| e.offset.get() <= source.cut)
                .map(|e| self.rewrite(e, fork, source.caller, &children))
                .collect();
            let Some(last) = batch.last() else {
                return Err(ExecutorError::Refused(format!(
                    "run {} ends before offset {}",
                    source.run, source.cut
                )));
            };
            after = last.offset.get();
            for event in &batch {
                state.apply(event);
            }
            copied.push(batch);
        }
        let parent_offset = Offset::new(source.cut)
            .map_err(|e| ExecutorError::Refused(format!("offset {}: {e}", source.cut)))?;
        let offset = Offset::new(source.cut.saturating_add(1))
            .map_err(|e| ExecutorError::Refused(format!("offset {}: {e}", source.cut)))?;
        let forked = RuntimeEvent {
            id: self.new_event_id(),
            offset,
            timestamp: self.now(),
            run_id: fork,
            node_id: None,
            node_run_id: None,
            kind: EventKind::FlowForked {
                parent_run_id: source.run,
                parent_offset,
                input: source.input,
                by: source.by,
            },
            extra: serde_json::Map::new(),
        };
        state.apply(&forked);
        copied.push(vec![forked]);
        // With its snapshot, a load folds nothing: the copy is not folded again.
        let batches = futures::stream::iter(copied.into_iter().map(Ok)).boxed();
        store.import_run(fork, batches, Some(state)).await?;
        held.push(store.lock(fork).await?);
        tracing::info!(run = %fork, parent = %source.run, offset = source.cut, "forked");
        Ok(fork)
    }

    /// The fork point of child run `child` consistent with its parent's:
    /// the offset of its last event at or before `time`, its terminal
    /// event excluded (0: none).
    async fn child_cut(&self, child: RunId, time: Timestamp) -> Result<u64, ExecutorError> {
        let store = self.store();
        let mut cut = 0;
        loop {
            let batch = store.read(child, cut, BATCH).await?;
            if batch.is_empty() {
                return Ok(cut);
            }
            for event in &batch {
                if event.timestamp > time || event.kind.is_terminal() {
                    return Ok(cut);
                }
                cut = event.offset.get();
            }
        }
    }

    /// `event` of the parent as the fork's: its id, run and links.
    fn rewrite(
        &self,
        mut event: RuntimeEvent,
        fork: RunId,
        caller: Option<RunId>,
        children: &HashMap<RunId, RunId>,
    ) -> RuntimeEvent {
        event.id = self.new_event_id();
        event.run_id = fork;
        match &mut event.kind {
            EventKind::FlowStarted { parent_run_id, .. } => *parent_run_id = caller,
            EventKind::SubflowStarted { child_run_id, .. }
            | EventKind::SubflowCompleted { child_run_id, .. } => {
                if let Some(forked) = children.get(child_run_id) {
                    *child_run_id = *forked;
                }
            }
            _ => {}
        }
        event
    }
}

/// One run to fork: the first `cut` events of `run`.
struct Source {
    run: RunId,
    cut: u64,
    /// The fork's `flow:started` `parentRunId` (the fork of its caller).
    caller: Option<RunId>,
    /// When the top fork point was recorded: where the children are cut.
    time: Timestamp,
    /// `flow:forked`'s `input`.
    input: Option<Value>,
    /// `flow:forked`'s `by`: who forked the top run (its children too).
    by: Option<Caller>,
}

/// The event of `run` at `offset`.
async fn one(store: &dyn RunStore, run: RunId, offset: u64) -> Result<RuntimeEvent, ExecutorError> {
    store
        .read(run, offset.saturating_sub(1), 1)
        .await?
        .into_iter()
        .next()
        .ok_or_else(|| ExecutorError::Refused(format!("run {run} has no event at offset {offset}")))
}

/// Calls `f` on the events of `run` up to offset `cut`, a batch at a time.
async fn for_each_batch(
    store: &dyn RunStore,
    run: RunId,
    cut: u64,
    mut f: impl FnMut(&[RuntimeEvent]),
) -> Result<(), ExecutorError> {
    let mut after = 0;
    while after < cut {
        let mut batch = store.read(run, after, BATCH).await?;
        batch.retain(|e| e.offset.get() <= cut);
        let Some(last) = batch.last() else {
            return Err(ExecutorError::Refused(format!(
                "run {run} ends before offset {cut}"
            )));
        };
        after = last.offset.get();
        f(&batch);
    }
    Ok(())
}

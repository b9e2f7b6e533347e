//! A run's trace: its spans and those of every run it called, projected
//! from their logs (`domain::trace`), each child under the span of the
//! node run that called it. What `awr trace show` prints and `awr trace
//! export` sends.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use domain::definition::Definition;
use domain::trace::{NodeFacts, Span, SpanId, TraceId, TraceInput, project};
use domain::{EventKind, NodeId, RunId, RuntimeEvent, WorkflowDef};

use crate::ports::{RunStore, StoreError};

/// How deep calls are followed: deeper than any workflow nests, and a
/// bound on what a damaged store (a child naming its ancestor) could ask.
const MAX_DEPTH: usize = 64;

/// Reads a stored definition back into its workflow; `None` when it can no
/// longer be read (spans are then named without what it says).
pub type ParseDefinition<'a> = &'a (dyn Fn(&Definition) -> Option<Arc<WorkflowDef>> + Sync);

/// The spans of `run` and of every run it called, in the order each run's
/// events opened them, parents before children; a child run's are in its
/// root run's trace, under the span of the node run that called it, as a
/// live export gives them; with the content of calls when `capture_content`.
/// `NotFound` when there is no such run.
pub async fn trace(
    store: &dyn RunStore,
    run: RunId,
    parse: ParseDefinition<'_>,
    capture_content: bool,
) -> Result<Vec<Span>, StoreError> {
    let mut spans = Vec::new();
    let mut seen = HashSet::new();
    let parent = parent_of(first_event(store, run).await?.as_ref());
    let placed = placement(store, parent, run).await?;
    let mut pending = vec![(run, placed, 0usize)];
    while let Some((run, parent, depth)) = pending.pop() {
        if !seen.insert(run) {
            continue;
        }
        let events = match whole_log(store, run).await {
            Ok(events) => events,
            // A child deleted since (pruned apart), or whose log is
            // damaged: the trace goes on without it. Any other failure
            // (the store unreachable) fails the trace, never shortens it.
            Err(e @ (StoreError::NotFound(_) | StoreError::Corrupt(_))) if depth > 0 => {
                tracing::warn!(run = %run, error = %e, "a called run is left out of the trace");
                continue;
            }
            Err(e) => return Err(e),
        };
        let input = TraceInput {
            parent,
            nodes: facts(store, &events, parse).await,
            capture_content,
        };
        let projection = project(&events, &input);
        let trace = projection
            .spans
            .first()
            .map_or_else(|| TraceId::of_run(run), |s| s.trace_id);
        spans.extend(projection.spans);
        if depth < MAX_DEPTH {
            // Reversed onto the stack: the first child is projected first.
            for (child, under) in projection.children.into_iter().rev() {
                pending.push((child, Some((trace, under)), depth + 1));
            }
        }
    }
    Ok(spans)
}

/// Where the spans of `run`, called by `parent`, go: for a run that a
/// `call_workflow` node started, under the span of the node run that
/// called it, in its caller's trace (read from the logs of the runs above
/// it); `None` for a run at the root of its trace, or one whose caller's
/// log no longer says it called it.
pub async fn placement(
    store: &dyn RunStore,
    parent: Option<RunId>,
    run: RunId,
) -> Result<Option<(TraceId, SpanId)>, StoreError> {
    // The runs above it, nearest first.
    let mut above: Vec<RunId> = Vec::new();
    let mut next = parent;
    while let Some(parent) = next {
        if above.len() == MAX_DEPTH || above.contains(&parent) || parent == run {
            break;
        }
        above.push(parent);
        next = match first_event(store, parent).await {
            Ok(first) => parent_of(first.as_ref()),
            Err(StoreError::NotFound(_)) => None,
            Err(e) => return Err(e),
        };
    }
    // Down from the top: each run is placed by the one above it.
    let mut placed = None;
    let mut below = above.iter().rev().skip(1).chain(std::iter::once(&run));
    for caller in above.iter().rev() {
        let Some(&called) = below.next() else { break };
        let events = match whole_log(store, *caller).await {
            Ok(events) => events,
            Err(StoreError::NotFound(_)) => return Ok(None),
            Err(e) => return Err(e),
        };
        let input = TraceInput {
            parent: placed,
            nodes: BTreeMap::new(),
            capture_content: false,
        };
        let projection = project(&events, &input);
        let trace = projection
            .spans
            .first()
            .map_or_else(|| TraceId::of_run(*caller), |s| s.trace_id);
        let Some((_, under)) = projection.children.iter().find(|(c, _)| *c == called) else {
            return Ok(None);
        };
        placed = Some((trace, *under));
    }
    Ok(placed)
}

/// The run that called the run whose first event is `first`.
pub(crate) fn parent_of(first: Option<&RuntimeEvent>) -> Option<RunId> {
    match first.map(|e| &e.kind) {
        Some(EventKind::FlowStarted { parent_run_id, .. }) => *parent_run_id,
        _ => None,
    }
}

/// The first event of `run` (`None`: it has none yet).
async fn first_event(store: &dyn RunStore, run: RunId) -> Result<Option<RuntimeEvent>, StoreError> {
    let first = store.read(run, 0, 1).await?.into_iter().next();
    if first.is_none() {
        store.last_offset(run).await?;
    }
    Ok(first)
}

/// The whole log of `run`: a store returns it in batches.
pub(crate) async fn whole_log(
    store: &dyn RunStore,
    run: RunId,
) -> Result<Vec<RuntimeEvent>, StoreError> {
    let mut events: Vec<RuntimeEvent> = Vec::new();
    loop {
        let after = events.last().map_or(0, |e| e.offset.get());
        let batch = store.read(run, after, usize::MAX).await?;
        if batch.is_empty() {
            if events.is_empty() {
                // Tells a run with no events from no run at all.
                store.last_offset(run).await?;
            }
            return Ok(events);
        }
        events.extend(batch);
    }
}

/// What the run's definition says of its nodes, when it kept one and it
/// can be read.
async fn facts(
    store: &dyn RunStore,
    events: &[RuntimeEvent],
    parse: ParseDefinition<'_>,
) -> BTreeMap<NodeId, NodeFacts> {
    let Some(EventKind::FlowStarted {
        definition: Some(hash),
        ..
    }) = events.first().map(|e| &e.kind)
    else {
        return BTreeMap::new();
    };
    match store.load_definition(hash).await {
        Ok(Some(definition)) => parse(&definition)
            .map(|workflow| NodeFacts::of_workflow(&workflow))
            .unwrap_or_default(),
        Ok(None) => BTreeMap::new(),
        Err(e) => {
            tracing::warn!(definition = %hash, error = %e, "cannot read the run's definition; its spans say less");
            BTreeMap::new()
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::collections::HashMap;

    use domain::event::WorkflowRef;
    use domain::ids::{NodeRunId, Offset};
    use domain::{Timestamp, WorkflowDef};
    use serde_json::json;

    use super::*;
    use crate::ports::MockRunStore;

    fn event(run: RunId, offset: u64, node: Option<NodeRunId>, kind: EventKind) -> RuntimeEvent {
        RuntimeEvent {
            id: format!("{run}-{offset}"),
            offset: Offset::new(offset).unwrap(),
            timestamp: Timestamp::from_millis(1_000 * offset as i64),
            run_id: run,
            node_id: node.map(|_| NodeId::new("call").unwrap()),
            node_run_id: node,
            kind,
            extra: Default::default(),
        }
    }

    fn started(run: RunId, definition: Option<&str>) -> RuntimeEvent {
        event(
            run,
            1,
            None,
            EventKind::FlowStarted {
                workflow: WorkflowRef {
                    name: "w".into(),
                    ..Default::default()
                },
                input: json!(null),
                parent_run_id: None,
                source: None,
                definition: definition.map(str::to_owned),
                nodes: Vec::new(),
                edges: Vec::new(),
                started_by: None,
            },
        )
    }

    /// `run` calls each of `children` from a node run of its own.
    fn calling(run: RunId, children: &[RunId]) -> Vec<RuntimeEvent> {
        let mut log = vec![started(run, Some("sha256:def"))];
        for child in children {
            let node = Some(NodeRunId::new(uuid::Uuid::new_v4()));
            let at = log.len() as u64 + 1;
            log.push(event(
                run,
                at,
                node,
                EventKind::NodeStarted {
                    input: Arc::new(json!(null)),
                    attempt: Some(1),
                    item: None,
                    items: None,
                },
            ));
            log.push(event(
                run,
                at + 1,
                node,
                EventKind::SubflowStarted {
                    child_run_id: *child,
                    workflow: "inner".into(),
                },
            ));
        }
        log
    }

    /// A root that calls a child, a child that is gone, and a child that
    /// names the root again: each run once, children under their callers,
    /// the whole in the root's trace; node kinds come from the definition.
    #[tokio::test]
    async fn a_trace_holds_the_run_and_what_it_called_once_each() {
        let ids: Vec<RunId> = (0..3)
            .map(|_| RunId::new(uuid::Uuid::new_v4()).unwrap())
            .collect();
        let (root, child, gone) = (ids[0], ids[1], ids[2]);
        let mut logs = HashMap::new();
        logs.insert(root, calling(root, &[child, gone]));
        logs.insert(child, calling(child, &[root]));
        let mut store = MockRunStore::new();
        store.expect_read().returning(move |run, after, _| {
            let log = logs.get(&run).ok_or(StoreError::NotFound(run))?;
            // Two events a batch, as a store may return fewer than asked.
            Ok(log
                .iter()
                .filter(|e| e.offset.get() > after)
                .take(2)
                .cloned()
                .collect())
        });
        store.expect_load_definition().returning(|_| {
            Ok(Some(Definition {
                root: "w.yaml".into(),
                files: BTreeMap::new(),
            }))
        });
        let parse = |_: &Definition| {
            let yaml = "name: w\nnodes:\n  - id: call\n    call_workflow: inner.yaml\n";
            Some(Arc::new(WorkflowDef::from_yaml(yaml).expect("a workflow")))
        };
        let spans = trace(&store, root, &parse, false).await.unwrap();
        let roots: Vec<&Span> = spans
            .iter()
            .filter(|s| s.name.starts_with("invoke_workflow"))
            .collect();
        assert_eq!(roots.len(), 2, "the root and its child, once each");
        assert!(spans.iter().all(|s| s.trace_id == TraceId::of_run(root)));
        let caller = spans
            .iter()
            .find(|s| {
                Some(&domain::trace::AttrValue::Str(child.to_string()))
                    == s.attributes.get("awr.child_run.id")
            })
            .expect("the node run that called the child");
        assert_eq!(roots[1].parent, Some(caller.span_id));
        assert_eq!(caller.name, "call_workflow call", "the definition's kind");
        let missing = trace(&store, gone, &parse, false).await;
        assert!(
            matches!(missing, Err(StoreError::NotFound(_))),
            "{missing:?}"
        );
    }
}

//! `awr runs`, `awr show`, `awr events`: reading what runs did.
//!
//! These commands only read: they open an existing storage and create
//! nothing. Any store error, corruption included, is exit 2; a status is
//! only printed when the log agrees with it (`inspect::current_snapshot`),
//! and a run recorded as `running` that no process writes is shown
//! `interrupted` (`inspect::run_view`).

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::anyhow;
use application::inspect::{FollowEnd, Followed, LogRead, RunView, follow_run, read_log, run_view};
use application::ports::{Clock, EventFilter, RunStore, StoreError};
use application::query::find_run;
use application::replay::Pace;
use domain::{EventKind, NodeId, NodeStatus, RunId, RunSnapshot, RuntimeEvent};
use futures::StreamExt;

use super::query::EventFilterArgs;
use crate::storage::Storage;
use crate::{Failure, say, wiring};

/// Bad lines `awr events` reports one by one before summing the rest up.
const MAX_REPORTED_BAD_LINES: usize = 20;

/// A store error of a read-only command: bad input or bad storage, exit 2.
fn store_failure(e: StoreError) -> Failure {
    Failure::Input(anyhow!(e))
}

/// [`find_run`] for the command line: any problem is exit 2.
async fn resolve(store: &dyn RunStore, wanted: &str) -> Result<RunId, Failure> {
    find_run(store, wanted)
        .await
        .map_err(|e| Failure::Input(anyhow!(e)))
}

/// Resolves a run id or prefix against the store under `storage`.
pub async fn resolve_id(storage: &Storage, wanted: &str) -> Result<RunId, Failure> {
    let store = wiring::read_store(storage).await?;
    resolve(store.as_ref(), wanted).await
}

/// [`resolve_id`] for a command on a run's log (`resume`, `send`, `pause`,
/// ...): a run the storage does not hold is refused here, the same way for
/// each, before anything looks for its workflow or its writer. (A
/// transcript may outlive its log, so `transcript` does not ask this.)
pub async fn resolve_run(storage: &Storage, wanted: &str) -> Result<RunId, Failure> {
    let store = wiring::read_store(storage).await?;
    let id = resolve(store.as_ref(), wanted).await?;
    match store.last_offset(id).await {
        Err(e @ StoreError::NotFound(_)) => Err(store_failure(e)),
        _ => Ok(id),
    }
}

/// `awr show RUN`.
pub async fn show(storage: &Storage, run: &str, json: bool) -> Result<(), Failure> {
    let store = wiring::read_store(storage).await?;
    let id = resolve(store.as_ref(), run).await?;
    let view = run_view(store.as_ref(), id).await.map_err(store_failure)?;
    if json {
        let text = view.to_json().map_err(|e| Failure::Run(anyhow!(e)))?;
        return say(&text);
    }
    let RunView {
        snapshot: s,
        status,
    } = view;
    say(&format!("run       {}", s.run_id))?;
    say(&format!(
        "workflow  {} ({})",
        crate::inert(&s.workflow.name),
        s.workflow.hash
    ))?;
    say(&format!("status    {}", status.as_str()))?;
    if let Some(from) = &s.forked_from {
        say(&format!(
            "forked    from {} at offset {}",
            from.run_id, from.offset
        ))?;
    }
    if let Some(failure) = &s.failure {
        let node = failure
            .node
            .as_ref()
            .map(|n| format!("node `{n}`: "))
            .unwrap_or_default();
        say(&format!(
            "error     {node}{}",
            crate::inert(&failure.error).replace('\n', " ")
        ))?;
    }
    let by = s
        .started_by
        .as_ref()
        .map(|who| format!(" by {}", crate::inert(who.as_str())))
        .unwrap_or_default();
    match s.started_at {
        Some(t) => say(&format!("started   {t}{by}"))?,
        None if !by.is_empty() => say(&format!("started  {by}"))?,
        None => {}
    }
    say(&format!("events    {}", s.last_offset))?;
    say("nodes")?;
    let declared = match store.read(id, 0, 1).await.ok().as_deref() {
        Some([first]) => match &first.kind {
            EventKind::FlowStarted { nodes, .. } => nodes.clone(),
            _ => Vec::new(),
        },
        _ => Vec::new(),
    };
    for (node, status) in in_run_order(&s, &declared) {
        let session = s
            .agent_sessions
            .get(node)
            .map(|sid| format!("  session {sid}"))
            .unwrap_or_default();
        say(&format!(
            "  {node:<24} {:<8}{session}",
            format!("{status:?}").to_lowercase()
        ))?;
    }
    if !s.edge_status.is_empty() {
        say("edges")?;
        for (edge, status) in &s.edge_status {
            let count = s
                .loop_counters
                .get(edge)
                .map(|n| format!("  iterations {n}"))
                .unwrap_or_default();
            say(&format!(
                "  {edge:<24} {:<8}{count}",
                format!("{status:?}").to_lowercase()
            ))?;
        }
    }
    if !s.outputs.is_empty() {
        say("outputs")?;
        for (node, output) in &s.outputs {
            let data = output.data().unwrap_or_default();
            say(&format!("  {node}: {}", preview(&data, 100)))?;
        }
    }
    Ok(())
}

/// The nodes of `state` in the order they first started, then those that
/// never did in the order the workflow declares them (`declared`, from
/// `flow:started`; by name for any it does not list).
fn in_run_order<'a>(
    state: &'a RunSnapshot,
    declared: &[NodeId],
) -> Vec<(&'a NodeId, &'a NodeStatus)> {
    let place: HashMap<&NodeId, usize> = declared.iter().enumerate().map(|(i, n)| (n, i)).collect();
    let mut nodes: Vec<_> = state.node_status.iter().collect();
    nodes.sort_by_cached_key(|(node, _)| {
        let started = state.node_spent.get(*node).and_then(|spent| spent.since);
        let declared = place.get(node).copied().unwrap_or(usize::MAX);
        (started.is_none(), started, declared)
    });
    nodes
}

/// `awr events RUN [--offset N] [--follow] [--json] [--type K] [--node ID]
/// [--since T]`. A bad line of the log is reported on stderr and skipped,
/// following or not; exit 2 at the end.
///
/// `--follow` ends after the run's terminal event, or once no process
/// writes the run and every event is shown: then stderr says the run is
/// paused or interrupted and how to continue it, and the exit code is 0
/// (the events were shown; `awr show` tells what became of the run).
/// With a filter, the history is read through the store's filter (an index
/// where it has one) and live events are filtered as they come. With a
/// `pace` (`awr replay`), the history is shown at the pace it was recorded.
pub async fn events(
    storage: &Storage,
    run: &str,
    offset: u64,
    follow: bool,
    json: bool,
    filter: &EventFilterArgs,
    mut pace: Option<Pace>,
) -> Result<(), Failure> {
    let store = wiring::read_store(storage).await?;
    let id = resolve(store.as_ref(), run).await?;
    let (clock, _) = wiring::clock_and_ids();
    let filter = filter.filter(clock.now());
    if let Some(node) = &filter.node {
        known_node(store.as_ref(), id, node).await?;
    }
    let mut bad = 0usize;
    if !json {
        say(&format!(
            "{:>6}  {:<24}  {:<22} {:<16} DETAILS",
            "OFFSET", "TIME", "TYPE", "NODE"
        ))?;
    }
    let history = History {
        json,
        filter: &filter,
        pace: pace.as_mut(),
    };
    if !follow {
        print_history(&store, id, offset, None, history, &mut bad).await?;
        bad_lines(id, bad)?;
        return lost_events(store.as_ref(), id).await;
    }
    let mut from = offset;
    if !filter.is_empty() || history.pace.is_some() {
        let upto = store.last_offset(id).await.map_err(store_failure)?;
        print_history(&store, id, offset, Some(upto), history, &mut bad).await?;
        from = from.max(upto);
    }
    let mut stream = follow_run(Arc::clone(&store), clock, id, from)
        .await
        .map_err(store_failure)?;
    while let Some(item) = stream.next().await {
        match item {
            Ok(Followed::Event(event)) if filter.matches(&event) => print_event(&event, json)?,
            Ok(Followed::Event(_)) => {}
            Ok(Followed::End(end)) => report_end(id, end),
            Err(StoreError::BadEvent { detail, .. }) => report_bad_line(&mut bad, &detail),
            Err(e) => return Err(store_failure(e)),
        }
    }
    bad_lines(id, bad)
}

/// Exit 2 for a node the run does not have (a typo would otherwise print
/// no events, as a node that did nothing yet does). A run not started yet
/// names no nodes, and one whose state cannot be read (a damaged log, the
/// very case `--node` is reached for) is not checked: anything goes.
async fn known_node(store: &dyn RunStore, id: RunId, node: &NodeId) -> Result<(), Failure> {
    let Ok(view) = run_view(store, id).await else {
        return Ok(());
    };
    let nodes = &view.snapshot.node_status;
    if nodes.is_empty() || nodes.contains_key(node) {
        return Ok(());
    }
    // A few of them, for a typo to be seen: a run may have hundreds.
    let mut known: Vec<&str> = nodes.keys().take(20).map(NodeId::as_str).collect();
    if nodes.len() > known.len() {
        known.push("…");
    }
    Err(Failure::Input(anyhow!(
        "--node {node}: run {id} has no such node (its nodes: {})",
        known.join(", ")
    )))
}

/// Exit 2 when the log ends before the events its snapshot reflects: they
/// were on record and are gone (a log cut short, a row deleted), which a
/// reader of the log alone would never notice. The snapshot is read first:
/// a writer saves it only after the events it reflects, so a live run never
/// trips this. A snapshot that cannot be read is `awr show`'s to report.
async fn lost_events(store: &dyn RunStore, id: RunId) -> Result<(), Failure> {
    let Ok(Some(saved)) = store.load_snapshot(id).await else {
        return Ok(());
    };
    let last = store.last_offset(id).await.map_err(store_failure)?;
    if saved.last_offset <= last {
        return Ok(());
    }
    Err(Failure::Input(anyhow!(
        "run {id}: its log ends at offset {last}, and its snapshot reflects events up to offset {}: events on record are missing",
        saved.last_offset
    )))
}

/// Says on stderr why a follow ended when the run did not.
fn report_end(id: RunId, end: FollowEnd) {
    let why = match end {
        FollowEnd::Ended => return,
        FollowEnd::Paused => "is paused",
        FollowEnd::Waiting => "is waiting for an answer (awr approvals)",
        FollowEnd::Interrupted => {
            "was interrupted: no process is writing it and its log does not end"
        }
    };
    crate::note(&format!(
        "awr: run {id} {why}; continue it with `awr resume {id}`"
    ));
}

/// Reports a skipped bad line on stderr, the first [`MAX_REPORTED_BAD_LINES`] one by one.
fn report_bad_line(bad: &mut usize, detail: &str) {
    *bad += 1;
    if *bad <= MAX_REPORTED_BAD_LINES {
        crate::note(&format!("awr: skipping a bad line: {detail}"));
    }
}

/// Exit 2 when `n` lines were skipped, naming how many.
fn bad_lines(id: RunId, n: usize) -> Result<(), Failure> {
    match n {
        0 => Ok(()),
        n => Err(Failure::Input(anyhow!(
            "run {id}: {n} line(s) of its event log are corrupt{}",
            if n > MAX_REPORTED_BAD_LINES {
                format!(" (the first {MAX_REPORTED_BAD_LINES} are named above)")
            } else {
                String::new()
            }
        ))),
    }
}

/// Prints the events after `after` (up to `upto`, when given) that
/// `filter` lets through. A line that is not its event is reported on
/// stderr with its file and line, counted in `bad` and skipped.
/// How [`print_history`] shows the events it reads.
struct History<'a> {
    json: bool,
    filter: &'a EventFilter,
    /// When to show each event, for a replay; at once without.
    pace: Option<&'a mut Pace>,
}

async fn print_history(
    store: &Arc<dyn RunStore>,
    id: RunId,
    mut after: u64,
    upto: Option<u64>,
    History {
        json,
        filter,
        mut pace,
    }: History<'_>,
    bad: &mut usize,
) -> Result<(), Failure> {
    const BATCH: usize = 1024;
    // Fail on a run that does not exist rather than printing nothing.
    store.last_offset(id).await.map_err(store_failure)?;
    loop {
        let read = if filter.is_empty() {
            read_log(store.as_ref(), id, after, BATCH).await
        } else {
            match store.read_matching(id, after, filter, BATCH).await {
                Ok(batch) => Ok(LogRead::Events(batch)),
                Err(StoreError::BadEvent { offset, detail }) => Ok(LogRead::Bad { offset, detail }),
                Err(e) => Err(e),
            }
        };
        let batch = match read {
            Ok(LogRead::Events(batch)) => batch,
            Ok(LogRead::Bad { offset, detail }) => {
                report_bad_line(bad, &detail);
                after = offset;
                continue;
            }
            Err(e) => return Err(store_failure(e)),
        };
        if batch.is_empty() {
            return Ok(());
        }
        for event in &batch {
            if upto.is_some_and(|upto| event.offset.get() > upto) {
                return Ok(());
            }
            if let Some(pace) = pace.as_deref_mut() {
                pace.wait(event.timestamp).await;
            }
            print_event(event, json)?;
            after = event.offset.get();
        }
    }
}

fn print_event(event: &RuntimeEvent, json: bool) -> Result<(), Failure> {
    let line = if json {
        event.to_json().map_err(|e| Failure::Run(anyhow!(e)))?
    } else {
        let mut body = match &event.kind {
            EventKind::Unknown { raw, .. } => serde_json::Value::Object(raw.clone()),
            kind => serde_json::to_value(kind).unwrap_or_default(),
        };
        if let Some(map) = body.as_object_mut() {
            map.remove("type");
            map.extend(event.extra.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        let node = event.node_id.as_ref().map(|n| n.as_str()).unwrap_or("-");
        let line = format!(
            "{:>6}  {}  {:<22} {:<16} {}",
            event.offset,
            event.timestamp,
            event.kind.type_name(),
            node,
            preview(&body, 120)
        );
        crate::inert(&line).into_owned()
    };
    crate::say(&line)
}

/// One line of at most `max` characters.
fn preview(value: &serde_json::Value, max: usize) -> String {
    let text = match value {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let flat = crate::inert(&text).replace('\n', " ");
    if flat.chars().count() > max {
        let cut: String = flat.chars().take(max).collect();
        format!("{cut}…")
    } else {
        flat
    }
}

/// `awr replay RUN [--speed X] [--max-wait SECS] [--offset N] [--json]
/// [filters]`: `awr events` of the recorded log, paced. A run still being
/// written is replayed up to its last event when the replay started.
pub async fn replay(
    storage: &Storage,
    run: &str,
    offset: u64,
    json: bool,
    filter: &EventFilterArgs,
    pace: Pace,
) -> Result<(), Failure> {
    events(storage, run, offset, false, json, filter, Some(pace)).await
}

//! Queries: runs by status, workflow and start, newest first, paged; a
//! run's events by type, node and time. Every store answers the same,
//! whether it scans or reads an index.

use domain::NodeId;

use super::*;
use crate::ports::{EventFilter, RunCursor, RunQuery, RunSummary};

/// Milliseconds of the first run's start in these checks.
const T0: i64 = 1_767_225_600_000;

/// `flow:started` of `run` at `offset`, at `T0 + minute` minutes.
pub fn started(
    run: RunId,
    offset: u64,
    workflow: &str,
    parent: Option<RunId>,
    minute: i64,
) -> RuntimeEvent {
    let mut e = event(
        run,
        offset,
        EventKind::FlowStarted {
            workflow: WorkflowRef {
                name: workflow.into(),
                hash: "sha256:00".into(),
                extra: Default::default(),
            },
            input: json!({}),
            parent_run_id: parent,
            source: None,
            definition: None,
            nodes: vec![NodeId::new("a").unwrap()],
            edges: vec![],
            started_by: None,
        },
    );
    e.timestamp = at_minute(minute);
    e
}

/// `T0 + minute` minutes.
pub fn at_minute(minute: i64) -> Timestamp {
    Timestamp::from_millis(T0 + minute * 60_000)
}

/// The event ending (or pausing) a run as `status` says, at `offset`.
fn status_event(run: RunId, offset: u64, status: RunStatus, minute: i64) -> RuntimeEvent {
    let kind = match status {
        RunStatus::Completed => EventKind::FlowCompleted {
            output: json!(1),
            duration_ms: 1,
        },
        RunStatus::Failed => EventKind::FlowFailed {
            error: "boom".into(),
            failed_node: None,
            duration_ms: 1,
        },
        RunStatus::Cancelled => EventKind::FlowCancelled { reason: None },
        RunStatus::Paused => EventKind::FlowPaused {
            reason: None,
            waiting: false,
        },
        RunStatus::Waiting => EventKind::FlowPaused {
            reason: None,
            waiting: true,
        },
        _ => EventKind::FlowResumed {
            message: None,
            by: None,
        },
    };
    let mut e = event(run, offset, kind);
    e.timestamp = at_minute(minute);
    e
}

/// A run of `workflow` started at `minute`, ending as `status` (running:
/// not ended), with a warning between; the lock is released.
async fn make_run(
    store: &dyn RunStore,
    workflow: &str,
    minute: i64,
    status: RunStatus,
    parent: Option<RunId>,
) -> RunId {
    let run = new_run();
    let _lock = store.create_run(run).await.unwrap();
    let mut w = warning(run, 2);
    w.timestamp = at_minute(minute);
    let mut events = vec![started(run, 1, workflow, parent, minute), w];
    if status != RunStatus::Running {
        events.push(status_event(run, 3, status, minute + 1));
    }
    store.append(run, &events).await.unwrap();
    run
}

fn ids(found: &[RunSummary]) -> Vec<RunId> {
    found.iter().map(|s| s.run_id).collect()
}

/// Conformance: runs are selected by status, workflow and start, newest
/// first, and a page continues where the last ended.
pub async fn query_runs_by_status_workflow_and_start<H: StoreHarness>(h: H) {
    let s = Subject::of(&h);
    let store = &*s.store;
    let a = make_run(store, "nightly", 0, RunStatus::Completed, None).await;
    let b = make_run(store, "nightly", 10, RunStatus::Failed, None).await;
    let c = make_run(store, "review", 20, RunStatus::Failed, Some(a)).await;
    let d = make_run(store, "review", 30, RunStatus::Running, None).await;
    let e = make_run(store, "nightly", 40, RunStatus::Paused, None).await;
    let (pending, _lock) = run_with(store, 0).await;
    let q = |query: RunQuery| async move { ids(&store.query_runs(&query).await.unwrap()) };

    // Newest first; a run not started yet comes last.
    assert_eq!(q(RunQuery::default()).await, vec![e, d, c, b, a, pending]);
    let failed = RunQuery {
        statuses: vec![RunStatus::Failed],
        ..RunQuery::default()
    };
    assert_eq!(q(failed.clone()).await, vec![c, b]);
    let ended = RunQuery {
        statuses: vec![RunStatus::Failed, RunStatus::Completed],
        ..RunQuery::default()
    };
    assert_eq!(q(ended).await, vec![c, b, a]);
    let states = [
        (RunStatus::Running, d),
        (RunStatus::Paused, e),
        (RunStatus::Pending, pending),
    ];
    for (status, run) in states {
        let query = RunQuery {
            statuses: vec![status],
            ..RunQuery::default()
        };
        assert_eq!(q(query).await, vec![run], "{status:?}");
    }
    let nightly = RunQuery {
        workflow: Some("nightly".into()),
        ..RunQuery::default()
    };
    assert_eq!(q(nightly).await, vec![e, b, a]);
    let recent = RunQuery {
        started_since: Some(at_minute(20)),
        ..RunQuery::default()
    };
    assert_eq!(q(recent).await, vec![e, d, c]);
    let all = RunQuery {
        statuses: vec![RunStatus::Failed],
        workflow: Some("review".into()),
        started_since: Some(at_minute(15)),
        ..RunQuery::default()
    };
    assert_eq!(q(all).await, vec![c]);
    let none = RunQuery {
        workflow: Some("absent".into()),
        ..RunQuery::default()
    };
    assert!(q(none).await.is_empty());

    // Pages of two, each after the last of the one before, cover all once.
    let mut pages = Vec::new();
    let mut after: Option<RunCursor> = None;
    loop {
        let page = store
            .query_runs(&RunQuery {
                after,
                limit: Some(2),
                ..RunQuery::default()
            })
            .await
            .unwrap();
        let Some(last) = page.last() else { break };
        after = Some(last.cursor());
        pages.extend(ids(&page));
    }
    assert_eq!(pages, vec![e, d, c, b, a, pending]);
    let first = RunQuery {
        limit: Some(1),
        ..failed
    };
    assert_eq!(q(first).await, vec![c]);

    // What a summary says.
    let found = store.query_runs(&RunQuery::default()).await.unwrap();
    let of = |run: RunId| found.iter().find(|s| s.run_id == run).unwrap().clone();
    let child = of(c);
    assert_eq!(child.status, Some(RunStatus::Failed));
    assert_eq!(child.workflow.as_deref(), Some("review"));
    assert_eq!(child.started_at, Some(at_minute(20)));
    assert_eq!(child.parent, Some(a));
    assert_eq!(of(a).parent, None);
    assert_eq!(of(pending).status, Some(RunStatus::Pending));
    assert_eq!(of(pending).started_at, None);
}

/// Conformance: a run is selected by what its log says now, whether or not
/// a snapshot was saved since, and a summary agrees with the fold.
pub async fn query_runs_follow_the_log_and_agree_with_the_fold<H: StoreHarness>(h: H) {
    let s = Subject::of(&h);
    let store = &*s.store;
    let run = new_run();
    let _lock = store.create_run(run).await.unwrap();
    let mut log = vec![started(run, 1, "flow", None, 0), warning(run, 2)];
    store.append(run, &log).await.unwrap();
    let folded = RunSnapshot::fold(&log).unwrap();
    store.save_snapshot(&folded).await.unwrap();
    // Paused after the snapshot: the snapshot says running, the log paused.
    let paused = status_event(run, 3, RunStatus::Paused, 5);
    store
        .append(run, std::slice::from_ref(&paused))
        .await
        .unwrap();
    log.push(paused);
    let wanted = |status| RunQuery {
        statuses: vec![status],
        ..RunQuery::default()
    };
    let found = store.query_runs(&wanted(RunStatus::Paused)).await.unwrap();
    assert_eq!(ids(&found), vec![run]);
    assert!(
        store
            .query_runs(&wanted(RunStatus::Running))
            .await
            .unwrap()
            .is_empty()
    );
    let fold = RunSnapshot::fold(&log).unwrap();
    let summary = &found[0];
    assert_eq!(summary.status, Some(fold.status));
    assert_eq!(
        summary.workflow.as_deref(),
        Some(fold.workflow.name.as_str())
    );
    assert_eq!(summary.started_at, fold.started_at);

    // Resumed, then failed: running, then failed.
    let resumed = status_event(run, 4, RunStatus::Running, 6);
    store.append(run, &[resumed]).await.unwrap();
    let found = store.query_runs(&wanted(RunStatus::Running)).await.unwrap();
    assert_eq!(ids(&found), vec![run]);
    let failed = status_event(run, 5, RunStatus::Failed, 7);
    store.append(run, &[failed]).await.unwrap();
    let found = store.query_runs(&wanted(RunStatus::Failed)).await.unwrap();
    assert_eq!(ids(&found), vec![run]);
    assert_eq!(found[0].updated_at, Some(at_minute(7)));
}

/// A log of `run` for the event checks: offsets 1..=8, nodes `a` and `b`,
/// one minute apart.
async fn event_log(store: &dyn RunStore) -> (RunId, RunLock) {
    let run = new_run();
    let lock = store.create_run(run).await.unwrap();
    let node = |n: &str| Some(NodeId::new(n).unwrap());
    let kinds: Vec<(EventKind, Option<NodeId>)> = vec![
        (
            EventKind::NodeStarted {
                input: json!(1).into(),
                attempt: None,
                item: None,
                items: None,
            },
            node("a"),
        ),
        (
            EventKind::NodeFailed {
                error: "no".into(),
                continued: true,
            },
            node("a"),
        ),
        (
            EventKind::NodeStarted {
                input: json!(2).into(),
                attempt: None,
                item: None,
                items: None,
            },
            node("b"),
        ),
        (
            EventKind::Warning {
                message: "w".into(),
                details: None,
            },
            None,
        ),
        (EventKind::NodeCompleted { output: json!(3) }, node("b")),
        (
            EventKind::NodeStarted {
                input: json!(4).into(),
                attempt: Some(2),
                item: None,
                items: None,
            },
            node("a"),
        ),
        (EventKind::NodeCompleted { output: json!(5) }, node("a")),
    ];
    let mut events = vec![started(run, 1, "flow", None, 0)];
    for (i, (kind, node)) in kinds.into_iter().enumerate() {
        let offset = i as u64 + 2;
        let mut e = event(run, offset, kind);
        e.node_id = node;
        e.timestamp = at_minute(offset as i64);
        events.push(e);
    }
    store.append(run, &events).await.unwrap();
    (run, lock)
}

/// Conformance: a run's events are read by type, node and time, after any
/// offset, in pages.
pub async fn read_matching_by_type_node_and_time<H: StoreHarness>(h: H) {
    let s = Subject::of(&h);
    let store = &*s.store;
    let (run, _lock) = event_log(store).await;
    let read = |after: u64, filter: EventFilter, limit: usize| async move {
        offsets(
            &store
                .read_matching(run, after, &filter, limit)
                .await
                .unwrap(),
        )
    };
    let types = |t: &[&str]| EventFilter {
        types: t.iter().map(|t| (*t).to_owned()).collect(),
        ..EventFilter::default()
    };
    assert_eq!(
        read(0, EventFilter::default(), 100).await,
        (1..=8).collect::<Vec<_>>()
    );
    assert_eq!(read(0, types(&["node:started"]), 100).await, vec![2, 4, 7]);
    assert_eq!(
        read(0, types(&["node:failed", "node:completed"]), 100).await,
        vec![3, 6, 8]
    );
    assert_eq!(read(3, types(&["node:started"]), 100).await, vec![4, 7]);
    assert_eq!(read(0, types(&["node:started"]), 2).await, vec![2, 4]);
    assert_eq!(read(4, types(&["node:started"]), 2).await, vec![7]);
    assert!(read(7, types(&["node:started"]), 2).await.is_empty());
    assert!(read(0, types(&["flow:cancelled"]), 100).await.is_empty());
    let node_a = EventFilter {
        node: Some(NodeId::new("a").unwrap()),
        ..EventFilter::default()
    };
    assert_eq!(read(0, node_a.clone(), 100).await, vec![2, 3, 7, 8]);
    let since = EventFilter {
        since: Some(at_minute(5)),
        ..EventFilter::default()
    };
    assert_eq!(read(0, since, 100).await, vec![5, 6, 7, 8]);
    let all = EventFilter {
        types: vec!["node:started".into()],
        since: Some(at_minute(3)),
        ..node_a
    };
    assert_eq!(read(0, all, 100).await, vec![7]);
    let missing = new_run();
    assert_not_found(
        store
            .read_matching(missing, 0, &EventFilter::default(), 10)
            .await,
        missing,
        "read_matching of no run",
    );
}

/// Conformance: a corrupt event among the matches is reported in its
/// place, after the matches before it, and the read can go on after it.
pub async fn read_matching_reports_a_corrupt_event_in_its_place<H: StoreHarness>(h: H) {
    let s = Subject::of(&h);
    let store = &*s.store;
    let (run, lock) = event_log(store).await;
    drop(lock);
    if !h.corrupt_event(run, 4) {
        return;
    }
    let started = EventFilter {
        types: vec!["node:started".into()],
        ..EventFilter::default()
    };
    let first = store.read_matching(run, 0, &started, 100).await.unwrap();
    assert_eq!(offsets(&first), vec![2]);
    match store.read_matching(run, 2, &started, 100).await {
        Err(StoreError::BadEvent { offset, detail }) => {
            assert_eq!(offset, 4);
            assert!(detail.contains(&h.bad_event_place(run, 4)), "{detail}");
        }
        other => panic!("expected BadEvent at offset 4, got {other:?}"),
    }
    let rest = store.read_matching(run, 4, &started, 100).await.unwrap();
    assert_eq!(offsets(&rest), vec![7]);
}

/// Conformance: `running` and `interrupted` (recorded `running`, told apart
/// by the run's lock) each fill a page, the store asked again when the
/// runs it selected were of the other kind.
pub async fn running_and_interrupted_runs_each_fill_a_page<H: StoreHarness>(h: H) {
    use crate::inspect::ShownStatus;
    use crate::query::{RunFilter, find_runs};
    let s = Subject::of(&h);
    let store = &*s.store;
    let dead = make_run(store, "flow", 0, RunStatus::Running, None).await;
    let mut live = Vec::new();
    let mut locks = Vec::new();
    for minute in [10, 20] {
        let run = new_run();
        locks.push(store.create_run(run).await.unwrap());
        store
            .append(run, &[started(run, 1, "flow", None, minute)])
            .await
            .unwrap();
        live.insert(0, run);
    }
    let find = |statuses: Vec<ShownStatus>, limit: Option<usize>| async move {
        let filter = RunFilter {
            statuses,
            limit,
            ..RunFilter::default()
        };
        let listed = find_runs(store, &filter).await.unwrap();
        listed.iter().map(|l| l.run_id()).collect::<Vec<_>>()
    };
    let running = ShownStatus::Recorded(RunStatus::Running);
    assert_eq!(
        find(vec![ShownStatus::Interrupted], Some(1)).await,
        vec![dead]
    );
    assert_eq!(find(vec![running], Some(1)).await, vec![live[0]]);
    assert_eq!(find(vec![running], None).await, live);
    assert_eq!(
        find(vec![ShownStatus::Interrupted, running], Some(3)).await,
        vec![live[0], live[1], dead]
    );
    drop(locks);
    assert_eq!(
        find(vec![ShownStatus::Interrupted], Some(2)).await,
        vec![live[0], live[1]]
    );
    assert!(find(vec![running], None).await.is_empty());
}

/// Conformance: the counts of every status shown tell a run written now
/// from an interrupted one, as the list does.
pub async fn counts_tell_running_from_interrupted<H: StoreHarness>(h: H) {
    use crate::query::{StatusCounts, count_runs};
    let s = Subject::of(&h);
    let store = &*s.store;
    make_run(store, "flow", 0, RunStatus::Running, None).await;
    make_run(store, "flow", 1, RunStatus::Completed, None).await;
    make_run(store, "flow", 2, RunStatus::Paused, None).await;
    let live = new_run();
    let lock = store.create_run(live).await.unwrap();
    store
        .append(live, &[started(live, 1, "flow", None, 3)])
        .await
        .unwrap();
    let (_pending, _pending_lock) = run_with(store, 0).await;
    let count = || async {
        let every = store.query_runs(&RunQuery::default()).await.unwrap();
        count_runs(store, &every).await
    };
    let expected = StatusCounts {
        pending: 1,
        running: 1,
        interrupted: 1,
        paused: 1,
        completed: 1,
        ..StatusCounts::default()
    };
    assert_eq!(count().await, expected);
    drop(lock);
    let after = StatusCounts {
        running: 0,
        interrupted: 2,
        ..expected
    };
    assert_eq!(
        count().await,
        after,
        "its writer gone, the run is interrupted"
    );
}

/// Conformance: `awr recover` finds each interrupted run once, a child
/// whose parent is interrupted too marked to go on with it, and never a
/// run written now, paused or ended; a run that cannot be read is named.
pub async fn interrupted_runs_are_found_with_their_parents<H: StoreHarness>(h: H) {
    use crate::query::interrupted_runs;
    let s = Subject::of(&h);
    let store = &*s.store;
    let parent = make_run(store, "flow", 0, RunStatus::Running, None).await;
    let child = make_run(store, "child", 1, RunStatus::Running, Some(parent)).await;
    let ended = make_run(store, "flow", 2, RunStatus::Completed, None).await;
    let orphan = make_run(store, "child", 3, RunStatus::Running, Some(ended)).await;
    make_run(store, "flow", 4, RunStatus::Paused, None).await;
    let live = new_run();
    let _lock = store.create_run(live).await.unwrap();
    store
        .append(live, &[started(live, 1, "flow", None, 5)])
        .await
        .unwrap();

    let found = interrupted_runs(store).await.unwrap();
    let mut expected = vec![(parent, None), (child, Some(parent)), (orphan, None)];
    expected.sort();
    let got: Vec<_> = found
        .runs
        .iter()
        .map(|r| (r.run.run_id(), r.goes_on_with))
        .collect();
    assert_eq!(got, expected);
    assert!(found.unreadable.is_empty());

    if h.corrupt_event(orphan, 2) {
        let found = interrupted_runs(store).await.unwrap();
        let unreadable: Vec<_> = found.unreadable.iter().map(|l| l.run_id()).collect();
        assert_eq!(unreadable, vec![orphan], "named, not left out");
        assert!(found.runs.iter().all(|r| r.run.run_id() != orphan));
    }
}

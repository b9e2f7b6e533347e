//! Counted, untimed checks of what syncing costs: runs of one store share
//! syncs (group commit), and a new run costs at most two.

use application::ports::RunStore;
use domain::{EventKind, Offset, RunId, RunSnapshot, RuntimeEvent, Timestamp};

use super::{FileRunStore, FileStoreConfig, SyncPolicy};

fn event(run: RunId, offset: u64) -> RuntimeEvent {
    RuntimeEvent {
        id: format!("e{offset}"),
        offset: Offset::new(offset).unwrap(),
        timestamp: Timestamp::from_millis(0),
        run_id: run,
        node_id: None,
        node_run_id: None,
        kind: EventKind::Warning {
            message: "a step's event".into(),
            details: None,
        },
        extra: Default::default(),
    }
}

/// Events a step appends before its boundary (start, output, end).
const EVENTS_PER_STEP: u64 = 3;

/// One run as the runner drives it: created, then `steps` step boundaries,
/// each appending a step's events and flushing; a snapshot at the first.
async fn drive(store: FileRunStore, steps: u64) {
    let run = RunId::new(uuid::Uuid::new_v4()).unwrap();
    let _lock = store.create_run(run).await.unwrap();
    let mut last = 0;
    for step in 0..steps {
        let events: Vec<_> = (last + 1..=last + EVENTS_PER_STEP)
            .map(|o| event(run, o))
            .collect();
        last += EVENTS_PER_STEP;
        store.append(run, &events).await.unwrap();
        if step == 0 {
            store.save_snapshot(&RunSnapshot::new(run)).await.unwrap();
        }
        store.flush(run).await.unwrap();
    }
}

/// Syncs issued by 100 runs of 22 step boundaries each, driven at once.
async fn hundred_runs() -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let store = FileRunStore::open(dir.path()).unwrap();
    let tasks: Vec<_> = (0..100)
        .map(|_| tokio::spawn(drive(store.clone(), 22)))
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    store.syncs().total()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_concurrent_runs_of_22_steps_issue_fewer_than_300_syncs() {
    let syncs = hundred_runs().await;
    assert!(syncs < 300, "2,200 step boundaries cost {syncs} syncs");
}

#[tokio::test(flavor = "current_thread")]
async fn hundred_concurrent_runs_share_syncs_on_one_thread_too() {
    let syncs = hundred_runs().await;
    assert!(syncs < 300, "2,200 step boundaries cost {syncs} syncs");
}

#[tokio::test]
async fn a_new_runs_first_step_syncs_its_log_and_its_directories_not_the_filesystem() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileRunStore::open(dir.path()).unwrap();
    drive(store.clone(), 1).await;
    let first = store.syncs();
    // Its log, its directory and `runs/`: no `syncfs`, which would write
    // back whatever else is dirty on the filesystem.
    assert_eq!(
        (first.fdatasync, first.dirs, first.syncfs),
        (1, 2, 0),
        "{first:?}"
    );

    // Each later step of a lone run: exactly one sync, of its own log.
    let run = RunId::new(uuid::Uuid::new_v4()).unwrap();
    let _lock = store.create_run(run).await.unwrap();
    store.append(run, &[event(run, 1)]).await.unwrap();
    store.flush(run).await.unwrap();
    let before = store.syncs();
    store.append(run, &[event(run, 2)]).await.unwrap();
    store.save_snapshot(&RunSnapshot::new(run)).await.unwrap();
    store.flush(run).await.unwrap();
    let after = store.syncs();
    assert_eq!(after.total() - before.total(), 1, "{before:?} -> {after:?}");
    assert_eq!(after.fdatasync - before.fdatasync, 1, "the run's own log");
}

#[tokio::test]
async fn without_syncing_no_run_costs_a_sync() {
    let dir = tempfile::tempdir().unwrap();
    let config = FileStoreConfig {
        sync: SyncPolicy::Never,
        ..FileStoreConfig::default()
    };
    let store = FileRunStore::open_with(dir.path(), config).unwrap();
    drive(store.clone(), 3).await;
    assert_eq!(store.syncs().total(), 0);
}

#[tokio::test]
async fn a_flush_dropped_while_it_leads_leaves_the_next_sync_to_others() {
    use futures::FutureExt;
    let dir = tempfile::tempdir().unwrap();
    let store = FileRunStore::open(dir.path()).unwrap();
    let run = RunId::new(uuid::Uuid::new_v4()).unwrap();
    let _lock = store.create_run(run).await.unwrap();
    store.append(run, &[event(run, 1)]).await.unwrap();
    // Polled once, the flush leads and yields before syncing; then it is
    // dropped (a cancelled step).
    assert!(store.flush(run).now_or_never().is_none());
    assert_eq!(store.syncs().total(), 0);
    let flushed = tokio::time::timeout(std::time::Duration::from_secs(30), store.flush(run));
    flushed.await.expect("a later flush leads").unwrap();
    assert_eq!(store.syncs().logs(), 1);
}

//! The queue against a real PostgreSQL server: submissions, claims by
//! several workers at once, and the takeover of runs whose writer is gone.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::time::Duration;

use application::ports::{RunQueue, RunStore, StoreError, Submission};
use application::testing::store_conformance::{new_run, snapshot, warning, warnings};
use domain::{RunId, RunStatus};
use serde_json::json;

use super::tests::{expire, fresh_database, store_with};

fn submission(priority: i32) -> Submission {
    Submission {
        definition: "sha256:00".into(),
        workflow: "flow".into(),
        input: json!({"n": priority}),
        source: Some("flow.yaml".into()),
        submitted_by: None,
        priority,
    }
}

/// Submits a run of `priority` and returns its id.
async fn submitted(queue: &dyn RunQueue, priority: i32) -> RunId {
    let run = new_run();
    queue.submit(run, &submission(priority)).await.unwrap();
    run
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submitted_run_is_queued_until_claimed_and_claimed_once() {
    let Some(url) = fresh_database().await else {
        return;
    };
    let worker = store_with(&url, Duration::from_secs(60)).await;
    let other = store_with(&url, Duration::from_secs(60)).await;
    let run = submitted(&worker, 0).await;
    assert_eq!(worker.queued(run).await.unwrap(), Some(submission(0)));
    assert!(worker.list_runs().await.unwrap().contains(&run));
    let again = worker.submit(run, &submission(0)).await;
    assert!(matches!(again, Err(StoreError::Conflict(_))), "{again:?}");

    let claim = worker.claim().await.unwrap().expect("the queued run");
    assert_eq!(claim.lock.run_id(), run);
    assert_eq!(claim.submission, submission(0));
    assert!(!claim.started);
    // Leased: nobody else gets it, and the claimer writes it.
    assert!(other.claim().await.unwrap().is_none());
    assert!(other.has_writer(run).await.unwrap());
    worker.append(run, &[warning(run, 1)]).await.unwrap();
    // Started: no longer queued.
    assert_eq!(worker.queued(run).await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_take_the_highest_priority_first_then_the_oldest() {
    let Some(url) = fresh_database().await else {
        return;
    };
    let queue = store_with(&url, Duration::from_secs(60)).await;
    let first_low = submitted(&queue, 0).await;
    let high = submitted(&queue, 5).await;
    let second_low = submitted(&queue, 0).await;
    let urgent = submitted(&queue, 9).await;
    let mut order = Vec::new();
    let mut locks = Vec::new();
    while let Some(claim) = queue.claim().await.unwrap() {
        order.push(claim.lock.run_id());
        locks.push(claim.lock);
    }
    assert_eq!(order, [urgent, high, first_low, second_low]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn workers_claiming_at_once_never_get_one_run_twice() {
    let Some(url) = fresh_database().await else {
        return;
    };
    let queue = store_with(&url, Duration::from_secs(60)).await;
    let mut runs = HashSet::new();
    for _ in 0..60 {
        runs.insert(submitted(&queue, 0).await);
    }
    let mut workers = Vec::new();
    for _ in 0..4 {
        let store = store_with(&url, Duration::from_secs(60)).await;
        workers.push(tokio::spawn(async move {
            let mut claimed = Vec::new();
            while let Some(claim) = store.claim().await.unwrap() {
                claimed.push(claim);
            }
            (store, claimed)
        }));
    }
    let mut seen = HashSet::new();
    let mut kept = Vec::new();
    for worker in workers {
        let (store, claimed) = worker.await.unwrap();
        for claim in claimed {
            assert!(seen.insert(claim.lock.run_id()), "claimed twice");
            kept.push(claim);
        }
        drop(store);
    }
    assert_eq!(seen, runs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_worker_is_gone_is_claimed_again_and_continued() {
    let Some(url) = fresh_database().await else {
        return;
    };
    let dead = store_with(&url, Duration::from_secs(60)).await;
    let run = submitted(&dead, 0).await;
    let claim = dead.claim().await.unwrap().unwrap();
    dead.append(run, &warnings(run, 1..=2)).await.unwrap();
    dead.save_snapshot(&snapshot(run, 2, RunStatus::Running))
        .await
        .unwrap();
    // Stuck past its lease (a pause, a partition).
    expire(&dead, run).await;
    let heir = store_with(&url, Duration::from_secs(60)).await;
    let taken = heir.claim().await.unwrap().expect("the orphaned run");
    assert_eq!(taken.lock.run_id(), run);
    assert!(taken.started, "its log holds events: it is continued");
    // The zombie's next write is refused: the claim fenced it.
    let refused = dead.append(run, &[warning(run, 3)]).await;
    assert!(
        matches!(refused, Err(StoreError::LeaseLost(_))),
        "{refused:?}"
    );
    heir.append(run, &[warning(run, 3)]).await.unwrap();
    drop(claim);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ended_paused_and_unsubmitted_runs_are_never_claimed() {
    let Some(url) = fresh_database().await else {
        return;
    };
    let store = store_with(&url, Duration::from_secs(60)).await;
    for status in [RunStatus::Completed, RunStatus::Paused, RunStatus::Failed] {
        let run = submitted(&store, 0).await;
        let claim = store.claim().await.unwrap().unwrap();
        store.append(run, &[warning(run, 1)]).await.unwrap();
        store
            .save_snapshot(&snapshot(run, 1, status))
            .await
            .unwrap();
        claim.lock.release().await;
    }
    // A run a process started for itself (`awr run`) is its own, even once
    // interrupted: `awr recover` continues it, never a worker.
    let own = new_run();
    let lock = store.create_run(own).await.unwrap();
    store.append(own, &[warning(own, 1)]).await.unwrap();
    lock.release().await;
    let other = store_with(&url, Duration::from_secs(60)).await;
    assert!(other.claim().await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_never_claims_back_a_lease_of_its_own_that_expired() {
    let Some(url) = fresh_database().await else {
        return;
    };
    let store = store_with(&url, Duration::from_secs(60)).await;
    let run = submitted(&store, 0).await;
    let _claim = store.claim().await.unwrap().unwrap();
    expire(&store, run).await;
    // Its lock here is still held: a second one would write under a new
    // epoch beside it.
    assert!(store.claim().await.unwrap().is_none());
    let other = store_with(&url, Duration::from_secs(60)).await;
    assert_eq!(
        other.claim().await.unwrap().map(|c| c.lock.run_id()),
        Some(run)
    );
}

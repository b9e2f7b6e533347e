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

mod commands {
    use application::ports::{CommandReply, ControlChannel, ControlError};
    use application::testing::store_conformance::run_with;
    use domain::Caller;

    use super::*;
    use crate::clock::SystemClock;
    use crate::store::postgres::{PgControl, PgRunStore};

    async fn commands_left(store: &PgRunStore) -> i64 {
        let client = store.database().client().await.unwrap();
        client
            .query_one("SELECT count(*) FROM awr_commands", &[])
            .await
            .unwrap()
            .get(0)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_command_reaches_the_writer_through_the_database_and_its_answer_comes_back() {
        let Some(url) = fresh_database().await else {
            return;
        };
        let writer = store_with(&url, Duration::from_secs(60)).await;
        let sender = store_with(&url, Duration::from_secs(60)).await;
        let (run, _lock) = run_with(&writer, 1).await;
        let mut listener = PgControl::new(&writer).listen(run).await.unwrap();
        let answering = tokio::spawn(async move {
            let delivery = listener.commands.recv().await.expect("a command");
            let said = (delivery.raw.clone(), delivery.by.clone());
            let reply = CommandReply {
                accepted: true,
                offset: 7,
                error: None,
            };
            delivery.reply.send(reply, &SystemClock).await;
            said
        });
        let pause = json!({"type": "pause"});
        let ops = Caller::new("ops").unwrap();
        let reply = PgControl::new(&sender)
            .deliver(run, &pause, Some(ops.clone()))
            .await
            .unwrap();
        assert_eq!((reply.accepted, reply.offset), (true, 7));
        assert_eq!(answering.await.unwrap(), (pause, Some(ops)));
        assert_eq!(
            commands_left(&sender).await,
            0,
            "the answered command is gone"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_command_no_writer_took_is_withdrawn_when_the_writer_goes() {
        let Some(url) = fresh_database().await else {
            return;
        };
        let writer = store_with(&url, Duration::from_secs(60)).await;
        let sender = store_with(&url, Duration::from_secs(60)).await;
        let (run, lock) = run_with(&writer, 1).await;
        let control = PgControl::new(&sender);
        let cancel = json!({"type": "cancel"});
        // A writer that takes no command, then ends.
        let delivering = tokio::spawn({
            let control = control.clone();
            let cancel = cancel.clone();
            async move { control.deliver(run, &cancel, None).await }
        });
        // Sent, and waiting for its answer.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while commands_left(&sender).await == 0 {
            assert!(tokio::time::Instant::now() < deadline, "never sent");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        lock.release().await;
        let refused = delivering.await.unwrap();
        assert!(
            matches!(refused, Err(ControlError::NoWriter(r)) if r == run),
            "{refused:?}"
        );
        assert_eq!(commands_left(&sender).await, 0, "the command was withdrawn");
        // And with no writer at all, nothing is sent.
        let nobody = control.deliver(run, &cancel, None).await;
        assert!(
            matches!(nobody, Err(ControlError::NoWriter(_))),
            "{nobody:?}"
        );
        assert_eq!(commands_left(&sender).await, 0);
    }
}

mod unanswered {
    use application::ports::{ControlChannel, ControlError};
    use application::testing::store_conformance::run_with;

    use super::*;
    use crate::store::postgres::PgControl;

    /// A command the run took and never answered (its writer ended while
    /// recording it) may be on record: its sender is told so, and it is
    /// never sent again nor recorded by the sender.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_command_taken_and_not_answered_is_never_sent_twice() {
        let Some(url) = fresh_database().await else {
            return;
        };
        let writer = store_with(&url, Duration::from_secs(60)).await;
        let sender = store_with(&url, Duration::from_secs(60)).await;
        let (run, lock) = run_with(&writer, 1).await;
        let mut listener = PgControl::new(&writer).listen(run).await.unwrap();
        let delivering = tokio::spawn({
            let control = PgControl::new(&sender);
            async move { control.deliver(run, &json!({"type": "pause"}), None).await }
        });
        let delivery = listener.commands.recv().await.expect("the command");
        drop(delivery);
        lock.release().await;
        let told = tokio::time::timeout(Duration::from_secs(30), delivering)
            .await
            .expect("an answer in time")
            .unwrap();
        match told {
            Err(ControlError::Io(message)) => {
                assert!(message.contains("the run's log says"), "{message}");
            }
            other => panic!("expected the unknown outcome, got {other:?}"),
        }
        let client = sender.database().client().await.unwrap();
        let left: i64 = client
            .query_one("SELECT count(*) FROM awr_commands", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(left, 0);
    }

    /// A run that could not run where it was claimed waits before any
    /// worker claims it again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_deferred_run_is_not_claimed_until_its_time() {
        let Some(url) = fresh_database().await else {
            return;
        };
        let queue = store_with(&url, Duration::from_secs(60)).await;
        let run = submitted(&queue, 0).await;
        let claim = queue.claim().await.unwrap().unwrap();
        queue.defer(run, Duration::from_secs(600)).await.unwrap();
        claim.lock.release().await;
        let other = store_with(&url, Duration::from_secs(60)).await;
        assert!(other.claim().await.unwrap().is_none());
        queue.defer(run, Duration::ZERO).await.unwrap();
        assert_eq!(
            other.claim().await.unwrap().map(|c| c.lock.run_id()),
            Some(run)
        );
    }
}

//! Reading a run's current state, whatever a crash left behind, and never a
//! state its log contradicts.
//!
//! The snapshot on disk may lag the log (a crash between an event and the
//! next checkpoint) or be unreadable; since `fold(events) = snapshot`, the
//! current state is the saved snapshot brought up to date with the events
//! after its `lastOffset`, or the fold of all events (design §4.2).
//!
//! A snapshot is only used when the log agrees with it: it names this run,
//! its `lastOffset` is within the log, and the event at that offset is the
//! one it reflects (same timestamp; a terminal event for a terminal status).
//! Every event folded must be the next offset of this run. Anything else is
//! [`StoreError::Corrupt`] or [`StoreError::BadEvent`]: reported, never
//! papered over, because a status the log contradicts is worse than none.

use domain::{EventKind, RunId, RunSnapshot, RunStatus, RuntimeEvent};

use crate::ports::{RunStore, StoreError};

/// Events read per batch when catching a snapshot up.
const BATCH: usize = 1024;

/// The run's state as of its last recorded event.
pub async fn current_snapshot(
    store: &dyn RunStore,
    run_id: RunId,
) -> Result<RunSnapshot, StoreError> {
    let saved = match store.load_snapshot(run_id).await {
        Ok(saved) => saved,
        Err(StoreError::Corrupt(why)) => {
            tracing::warn!(run = %run_id, %why, "snapshot unreadable; rebuilding it from the event log");
            None
        }
        Err(e) => return Err(e),
    };
    let mut snapshot = match saved {
        Some(saved) => {
            check_saved(store, run_id, &saved).await?;
            saved
        }
        None => RunSnapshot::new(run_id),
    };
    loop {
        let events = store.read(run_id, snapshot.last_offset, BATCH).await?;
        if events.is_empty() {
            break;
        }
        for event in &events {
            check_next(run_id, snapshot.last_offset, event)?;
            snapshot.apply(event);
        }
    }
    Ok(snapshot)
}

/// Whether the log agrees with a saved snapshot (see the module docs).
async fn check_saved(
    store: &dyn RunStore,
    run_id: RunId,
    saved: &RunSnapshot,
) -> Result<(), StoreError> {
    if saved.run_id != run_id {
        return Err(StoreError::Corrupt(format!(
            "the snapshot of run {run_id} is the snapshot of run {}",
            saved.run_id
        )));
    }
    if saved.last_offset == 0 {
        return Ok(());
    }
    let last = store.last_offset(run_id).await?;
    if saved.last_offset > last {
        return Err(StoreError::Corrupt(format!(
            "run {run_id}: the snapshot reflects events up to offset {} (lastOffset) but the log ends at offset {last}: the log was truncated or replaced",
            saved.last_offset
        )));
    }
    let at = store.read(run_id, saved.last_offset - 1, 1).await?;
    let Some(event) = at.first() else {
        return Err(StoreError::Corrupt(format!(
            "run {run_id}: no event at the snapshot's lastOffset {}",
            saved.last_offset
        )));
    };
    check_next(run_id, saved.last_offset - 1, event)?;
    let status_agrees = match &event.kind {
        EventKind::FlowCompleted { .. } => saved.status == RunStatus::Completed,
        EventKind::FlowFailed { .. } => saved.status == RunStatus::Failed,
        EventKind::FlowCancelled { .. } => saved.status == RunStatus::Cancelled,
        _ => !saved.status.is_terminal(),
    };
    let time_agrees = saved.updated_at.is_none_or(|t| t == event.timestamp);
    if !status_agrees || !time_agrees {
        return Err(StoreError::Corrupt(format!(
            "run {run_id}: the snapshot (status {}, lastOffset {}) does not match the log's `{}` event at that offset",
            saved.status.as_str(),
            saved.last_offset,
            event.kind.type_name()
        )));
    }
    Ok(())
}

/// An event folded after offset `last` must be offset `last + 1` of this run.
fn check_next(run_id: RunId, last: u64, event: &RuntimeEvent) -> Result<(), StoreError> {
    let expected = last + 1;
    if event.run_id != run_id {
        return Err(StoreError::BadEvent {
            offset: expected,
            detail: format!(
                "run {run_id}: the event at offset {expected} belongs to run {}",
                event.run_id
            ),
        });
    }
    if event.offset.get() != expected {
        return Err(StoreError::BadEvent {
            offset: expected,
            detail: format!(
                "run {run_id}: offset {} found where offset {expected} belongs",
                event.offset
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::ports::MockRunStore;
    use domain::{Offset, Timestamp};
    use mockall::predicate::eq;

    fn run_id() -> RunId {
        "0b6f8f4e-3c1a-4d2b-9f3e-1a2b3c4d5e6f".parse().unwrap()
    }

    fn warning(offset: u64) -> RuntimeEvent {
        RuntimeEvent {
            id: format!("e{offset}"),
            offset: Offset::new(offset).unwrap(),
            timestamp: Timestamp::from_millis(offset as i64),
            run_id: run_id(),
            node_id: None,
            node_run_id: None,
            kind: EventKind::Warning {
                message: "w".into(),
                details: None,
            },
            extra: Default::default(),
        }
    }

    /// A store holding `log` and, maybe, a saved snapshot.
    fn store_of(log: Vec<RuntimeEvent>, saved: Option<RunSnapshot>) -> MockRunStore {
        let mut store = MockRunStore::new();
        store
            .expect_load_snapshot()
            .returning(move |_| Ok(saved.clone()));
        let last = log.len() as u64;
        store.expect_last_offset().returning(move |_| Ok(last));
        store.expect_read().returning(move |_, after, limit| {
            Ok(log
                .iter()
                .skip(after as usize)
                .take(limit)
                .cloned()
                .collect())
        });
        store
    }

    fn log(n: u64) -> Vec<RuntimeEvent> {
        (1..=n).map(warning).collect()
    }

    fn saved_at(offset: u64) -> RunSnapshot {
        RunSnapshot::fold(&log(offset)).unwrap()
    }

    #[tokio::test]
    async fn a_stale_snapshot_is_caught_up_from_its_last_offset() {
        let store = store_of(log(4), Some(saved_at(2)));
        let current = current_snapshot(&store, run_id()).await.unwrap();
        assert_eq!(current.last_offset, 4);
    }

    #[tokio::test]
    async fn an_unreadable_snapshot_is_rebuilt_from_all_events() {
        let mut store = MockRunStore::new();
        store
            .expect_load_snapshot()
            .returning(|_| Err(StoreError::Corrupt("snapshot.json: eof".into())));
        store
            .expect_read()
            .with(eq(run_id()), eq(0), eq(BATCH))
            .returning(|_, _, _| Ok(vec![warning(1)]));
        store
            .expect_read()
            .with(eq(run_id()), eq(1), eq(BATCH))
            .returning(|_, _, _| Ok(vec![]));
        let current = current_snapshot(&store, run_id()).await.unwrap();
        assert_eq!(current.last_offset, 1);
    }

    #[tokio::test]
    async fn a_snapshot_the_log_contradicts_is_corruption() {
        let other: RunId = "7c9e6679-7425-40de-944b-e07fc1f90ae7".parse().unwrap();
        let mut foreign = saved_at(2);
        foreign.run_id = other;
        let mut wrong_status = saved_at(2);
        wrong_status.status = RunStatus::Completed;
        let mut wrong_time = saved_at(2);
        wrong_time.updated_at = Some(Timestamp::from_millis(99));
        for (what, saved, needle) in [
            ("foreign", foreign, "snapshot of run 7c9e6679"),
            ("beyond the log", saved_at(5), "lastOffset"),
            ("wrong status", wrong_status, "does not match"),
            ("wrong time", wrong_time, "does not match"),
        ] {
            let store = store_of(log(3), Some(saved));
            let err = current_snapshot(&store, run_id()).await.unwrap_err();
            assert!(matches!(err, StoreError::Corrupt(_)), "{what}: {err}");
            assert!(err.to_string().contains(needle), "{what}: {err}");
        }
    }

    #[tokio::test]
    async fn events_out_of_order_or_of_another_run_are_corruption() {
        let mut shuffled = log(4);
        shuffled.swap(1, 2);
        let mut foreign = log(3);
        foreign[1].run_id = "7c9e6679-7425-40de-944b-e07fc1f90ae7".parse().unwrap();
        let mut repeated = log(3);
        repeated.insert(2, warning(2));
        for (what, events) in [
            ("shuffled", shuffled),
            ("foreign", foreign),
            ("repeated", repeated),
        ] {
            let store = store_of(events, None);
            let err = current_snapshot(&store, run_id()).await.unwrap_err();
            assert!(
                matches!(err, StoreError::BadEvent { offset: 2 | 3, .. }),
                "{what}: {err}"
            );
        }
    }
}

//! Reading a run's current state, whatever a crash left behind.
//!
//! The snapshot on disk may lag the log (a crash between an event and the
//! next checkpoint) or be unreadable; since `fold(events) = snapshot`, the
//! current state is the saved snapshot brought up to date with the events
//! after its `lastOffset`, or the fold of all events (design §4.2).

use domain::{RunId, RunSnapshot};

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
    let mut snapshot = saved.unwrap_or_else(|| RunSnapshot::new(run_id));
    loop {
        let events = store.read(run_id, snapshot.last_offset, BATCH).await?;
        for event in &events {
            snapshot.apply(event);
        }
        if events.len() < BATCH {
            break;
        }
    }
    Ok(snapshot)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::ports::MockRunStore;
    use domain::{EventKind, Offset, RuntimeEvent, Timestamp};
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
        }
    }

    #[tokio::test]
    async fn a_stale_snapshot_is_caught_up_from_its_last_offset() {
        let mut store = MockRunStore::new();
        let mut stale = RunSnapshot::new(run_id());
        stale.last_offset = 2;
        store
            .expect_load_snapshot()
            .returning(move |_| Ok(Some(stale.clone())));
        store
            .expect_read()
            .with(eq(run_id()), eq(2), eq(BATCH))
            .returning(|_, _, _| Ok(vec![warning(3), warning(4)]));
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
        let current = current_snapshot(&store, run_id()).await.unwrap();
        assert_eq!(current.last_offset, 1);
    }
}

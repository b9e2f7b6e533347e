//! A run that has ended is told so, whatever its storage says: a command or
//! a resume of a completed run is refused as ended even when this process
//! may read the run's storage but not take its lock.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use std::sync::atomic::AtomicU64;

use domain::RunStatus;
use serde_json::json;

use super::graph_tests::{Agents, Counter, after, rig, run, wf};
use super::*;
use crate::ports::{AgentRequest, AgentStream, MockRunStore, QueryError, StoreError};
use crate::testing::TokioClock;

const FLOW: &str = "name: e\nagents: {w: {provider: mock}}\nnodes: [{id: a, agent: w}]\n";

#[tokio::test(start_paused = true)]
async fn an_ended_run_is_told_so_even_when_its_lock_cannot_be_taken() {
    let done = rig(|_| after(0, "ok".into(), 1));
    let outcome = run(&done, wf(FLOW), json!("go")).await;
    assert_eq!(outcome.status, RunStatus::Completed);
    let run_id = outcome.run_id;
    let events = done.events.lock().unwrap().clone();
    // Storage this process may read and not write.
    let mut store = MockRunStore::new();
    store.expect_lock().returning(|_| {
        Err(StoreError::io_msg(
            "cannot open events.ndjson: Permission denied",
        ))
    });
    store.expect_load_snapshot().returning(|_| Ok(None));
    store.expect_read().returning(move |_, after, limit| {
        Ok((events.iter())
            .filter(|e| e.offset.get() > after)
            .take(limit)
            .cloned()
            .collect())
    });
    let executor = Executor::new(
        Arc::new(store),
        Arc::new(Agents(
            |_: AgentRequest| -> Result<AgentStream, QueryError> { panic!("no agent runs here") },
        )),
        Arc::new(TokioClock::new()),
        Arc::new(Counter(AtomicU64::new(1))),
    );
    let no_definition = async || Err(ExecutorError::Refused("not needed".into()));
    let refused = executor
        .command(run_id, &json!({"type": "pause"}), None, no_definition)
        .await
        .unwrap_err();
    let ended = format!("run {run_id} has ended (completed)");
    assert!(
        matches!(&refused, ExecutorError::Refused(m) if m.starts_with(&ended)),
        "{refused}"
    );
    let resumed = executor
        .resume(run_id, Arc::new(wf(FLOW)), None, None, Cancel::new())
        .await
        .unwrap_err();
    assert!(
        matches!(&resumed, ExecutorError::Refused(m) if m.starts_with(&ended)),
        "{resumed}"
    );
}

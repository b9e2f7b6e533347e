//! The executor's tests against mocked ports: every seam of the log and the
//! transcript, with no process, file or real clock.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::ports::{AgentMessage, AgentResult, QueryError, StoreError};
use crate::ports::{MockClock, MockIdGen, MockQueryFn, MockRunStore};
use domain::event::Usage;
use domain::{
    EventKind, NodeId, NodeStatus, RunSnapshot, RuntimeEvent, SessionId, Timestamp, WorkflowDef,
};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// What each node's agent does, by node id: one script per call.
pub(super) type Scripts = HashMap<&'static str, Vec<Vec<Result<AgentMessage, QueryError>>>>;

pub(super) struct Harness {
    pub(super) runner: Executor,
    pub(super) events: Arc<Mutex<Vec<RuntimeEvent>>>,
    pub(super) snapshots: Arc<Mutex<Vec<RunSnapshot>>>,
    pub(super) prompts: Arc<Mutex<Vec<(String, String)>>>,
    /// Makes saving a snapshot of an ended run fail (a full disk).
    pub(super) fail_final_save: Arc<std::sync::atomic::AtomicBool>,
    /// How many appends at `fail_append_at` fail (all, unless lowered).
    pub(super) append_failures: Arc<AtomicU64>,
}

/// The bytes of `value` as JSON: what the mocked store reports it wrote.
pub(super) fn json_len(value: &impl serde::Serialize) -> u64 {
    serde_json::to_vec(value).unwrap().len() as u64
}

pub(super) fn done(text: &str) -> Result<AgentMessage, QueryError> {
    Ok(AgentMessage::Completed(AgentResult {
        text: text.into(),
        usage: Usage {
            input_tokens: 10,
            output_tokens: 5,
            ..Usage::default()
        },
        num_turns: 1,
        ..AgentResult::default()
    }))
}

pub(super) fn session(id: &str) -> Result<AgentMessage, QueryError> {
    Ok(AgentMessage::Session {
        session_id: SessionId::new(id).unwrap(),
        model: None,
    })
}

pub(super) fn harness(scripts: Scripts, fail_append_at: Option<u64>) -> Harness {
    let events = Arc::new(Mutex::new(Vec::new()));
    let snapshots = Arc::new(Mutex::new(Vec::new()));
    let prompts = Arc::new(Mutex::new(Vec::new()));

    let mut store = MockRunStore::new();
    store
        .expect_create_run()
        .returning(|id| Ok(crate::ports::RunLock::new(id, ())));
    store
        .expect_lock()
        .returning(|id| Ok(crate::ports::RunLock::new(id, ())));
    let log = Arc::clone(&events);
    let append_failures = Arc::new(AtomicU64::new(u64::MAX));
    let failures = Arc::clone(&append_failures);
    let append = Arc::new(move |batch: &[RuntimeEvent]| -> Result<u64, StoreError> {
        let mut log = log.lock().unwrap();
        for e in batch {
            if Some(e.offset.get()) == fail_append_at
                && failures
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok()
            {
                return Err(StoreError::io_msg("disk full"));
            }
            assert_eq!(
                e.offset.get(),
                log.len() as u64 + 1,
                "offsets must have no gaps"
            );
            log.push(e.clone());
        }
        Ok(batch.iter().map(json_len).sum())
    });
    let borrowed = Arc::clone(&append);
    store
        .expect_append()
        .returning(move |_, batch| borrowed(batch));
    store.expect_append_owned().returning(move |_, batch| {
        let bytes = append(batch)?;
        batch.clear();
        Ok(bytes)
    });
    store.expect_flush().returning(|_| Ok(()));
    store.expect_needs_final_snapshot().return_const(true);
    // After a failed append the recorder reads the stored state back.
    store.expect_load_snapshot().returning(|_| Ok(None));
    let log = Arc::clone(&events);
    store.expect_read().returning(move |_, after, limit| {
        let log = log.lock().unwrap();
        let from = usize::try_from(after).unwrap().min(log.len());
        Ok(log[from..].iter().take(limit).cloned().collect())
    });
    let saved = Arc::clone(&snapshots);
    let fail_final_save = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let fail_final = Arc::clone(&fail_final_save);
    store.expect_save_snapshot().returning(move |s| {
        if s.status.is_terminal() && fail_final.load(Ordering::SeqCst) {
            return Err(StoreError::io_msg("disk full"));
        }
        saved.lock().unwrap().push(s.clone());
        Ok(json_len(s))
    });

    let scripts = Mutex::new(scripts);
    let seen = Arc::clone(&prompts);
    let mut query = MockQueryFn::new();
    query.expect_query().returning(move |req| {
        seen.lock()
            .unwrap()
            .push((req.node_id.to_string(), req.prompt.clone()));
        let mut scripts = scripts.lock().unwrap();
        let calls = scripts
            .get_mut(req.node_id.as_str())
            .expect("unscripted node");
        let script = calls.remove(0);
        Ok(Box::pin(futures::stream::iter(script)))
    });

    let now = AtomicU64::new(1_767_225_600_000);
    let mut clock = MockClock::new();
    clock
        .expect_now()
        .returning(move || Timestamp::from_millis(now.fetch_add(1, Ordering::SeqCst) as i64));
    clock
        .expect_sleep()
        .returning(|d| Box::pin(tokio::time::sleep(d)));
    let counter = AtomicU64::new(1);
    let mut ids = MockIdGen::new();
    ids.expect_uuid().returning(move || {
        let n = counter.fetch_add(1, Ordering::SeqCst);
        let mut bytes = [0u8; 16];
        bytes[8..].copy_from_slice(&n.to_be_bytes());
        uuid::Builder::from_random_bytes(bytes).into_uuid()
    });

    Harness {
        runner: Executor::new(
            Arc::new(store),
            Arc::new(query),
            Arc::new(clock),
            Arc::new(ids),
        )
        .with_checkpoints(CheckpointPolicy::EVERY_STEP),
        events,
        snapshots,
        prompts,
        fail_final_save,
        append_failures,
    }
}

pub(super) async fn run(
    h: &Harness,
    yaml: &str,
    input: Value,
) -> Result<RunOutcome, ExecutorError> {
    let workflow = Arc::new(WorkflowDef::from_yaml(yaml).unwrap());
    let run_id = h.runner.create().await.unwrap();
    h.runner
        .run(
            run_id,
            RunRequest {
                workflow,
                input,
                source: None,
                started_by: None,
            },
        )
        .await
}

pub(super) fn types(h: &Harness) -> Vec<String> {
    h.events
        .lock()
        .unwrap()
        .iter()
        .map(|e| e.kind.type_name().to_owned())
        .collect()
}

pub(super) fn of_type(h: &Harness, t: &str) -> Vec<RuntimeEvent> {
    h.events
        .lock()
        .unwrap()
        .iter()
        .filter(|e| e.kind.type_name() == t)
        .cloned()
        .collect()
}

pub(super) const CHAIN: &str = "
name: chain
agents:
  a: {provider: mock, system_prompt: first}
  b: {provider: mock, system_prompt: second}
  c: {provider: mock, system_prompt: third}
steps: [{agent: a}, {agent: b}, {agent: c}]
";

#[tokio::test]
async fn a_chain_passes_each_output_to_the_next_agent() {
    let h = harness(
        HashMap::from([
            ("a", vec![vec![session("s-a"), done("from a")]]),
            ("b", vec![vec![done("from b")]]),
            ("c", vec![vec![done("from c")]]),
        ]),
        None,
    );
    let outcome = run(&h, CHAIN, json!("topic")).await.unwrap();
    assert_eq!(outcome.status, RunStatus::Completed);
    assert_eq!(outcome.output, json!("from c"));
    assert_eq!(
        *h.prompts.lock().unwrap(),
        vec![
            ("a".to_owned(), "topic".to_owned()),
            ("b".to_owned(), "from a".to_owned()),
            ("c".to_owned(), "from b".to_owned())
        ]
    );
    let t = types(&h);
    assert_eq!(t.first().map(String::as_str), Some("flow:started"));
    assert_eq!(t.last().map(String::as_str), Some("flow:completed"));
    assert_eq!(of_type(&h, "node:started").len(), 3);
    assert_eq!(of_type(&h, "agent:start").len(), 3);
    assert_eq!(of_type(&h, "agent:complete").len(), 3);
    // The provider's session id is recorded when it names one; a node whose
    // provider names none has no session to resume (its `agent:start` was
    // provisional).
    assert_eq!(
        outcome.snapshot.agent_sessions[&NodeId::new("a").unwrap()].as_str(),
        "s-a"
    );
    assert_eq!(outcome.snapshot.agent_sessions.len(), 1);
    let provisional = of_type(&h, "agent:start")
        .iter()
        .filter(|e| {
            matches!(
                e.kind,
                EventKind::AgentStart {
                    provisional: true,
                    ..
                }
            )
        })
        .count();
    assert_eq!(provisional, 3, "no provider here takes a chosen session id");
    assert_eq!(of_type(&h, "agent:session").len(), 1);
    // Input shape of design §5.
    let EventKind::NodeStarted { input, .. } = &of_type(&h, "node:started")[1].kind else {
        panic!()
    };
    assert_eq!(
        input["metadata"],
        json!({"step_index": 1, "previous_agent": "a"})
    );
    let EventKind::NodeCompleted { output } = &of_type(&h, "node:completed")[0].kind else {
        panic!()
    };
    assert_eq!(output["data"], json!("from a"));
    assert_eq!(output["metadata"]["agent_name"], json!("a"));
    assert_eq!(output["metadata"]["tool_calls_count"], json!(0));
}

#[tokio::test]
async fn every_saved_snapshot_is_the_fold_of_the_events_before_it() {
    let h = harness(
        HashMap::from([
            ("a", vec![vec![done("1")]]),
            ("b", vec![vec![done("2")]]),
            ("c", vec![vec![done("3")]]),
        ]),
        None,
    );
    run(&h, CHAIN, json!("x")).await.unwrap();
    let events = h.events.lock().unwrap();
    let snapshots = h.snapshots.lock().unwrap();
    assert_eq!(
        snapshots.len(),
        4,
        "after start, after each step but the last, whose boundary is the run's end: final"
    );
    for snapshot in snapshots.iter() {
        let upto = snapshot.last_offset as usize;
        assert_eq!(RunSnapshot::fold(&events[..upto]).as_ref(), Some(snapshot));
        // Each non-final snapshot is followed by its state:saved marker.
        if let Some(next) = events.get(upto) {
            assert!(matches!(
                next.kind,
                EventKind::StateSaved { snapshot_offset } if snapshot_offset.get() == upto as u64
            ));
        }
    }
    assert_eq!(snapshots.last().unwrap().last_offset as usize, events.len());
}

#[tokio::test]
async fn snapshots_follow_the_checkpoint_policy_and_the_log_is_flushed_every_step() {
    let scripts = || {
        HashMap::from([
            ("a", vec![vec![done("1")]]),
            ("b", vec![vec![done("2")]]),
            ("c", vec![vec![done("3")]]),
        ])
    };
    // The mocked store reports the JSON size of what it is given.
    let h = harness(scripts(), None);
    let h = Harness {
        runner: h.runner.with_checkpoints(CheckpointPolicy {
            growth_percent: 300,
            min_log_bytes: 0,
            delta_percent: 0,
            min_delta_log_bytes: 0,
            min_delta_snapshot_bytes: 0,
            delta_budget_percent: 0,
        }),
        ..h
    };
    run(&h, CHAIN, json!("x")).await.unwrap();
    let snapshots = h.snapshots.lock().unwrap();
    let offsets: Vec<u64> = snapshots.iter().map(|s| s.last_offset).collect();
    let events = h.events.lock().unwrap();
    assert_eq!(offsets.first(), Some(&1), "always right after flow:started");
    assert_eq!(
        offsets.last(),
        Some(&(events.len() as u64)),
        "always at the end"
    );
    assert!(offsets.len() < 5, "not at every step: {offsets:?}");
    // Between two snapshots (the final one aside) the log grew by at least
    // three times the size of the first of them.
    for pair in snapshots.windows(2).take(snapshots.len().saturating_sub(2)) {
        let (from, to) = (pair[0].last_offset as usize, pair[1].last_offset as usize);
        let grown: u64 = events[from..to].iter().map(json_len).sum();
        assert!(grown >= 3 * json_len(&pair[0]), "{offsets:?}");
    }
}

/// The harness, writing its transcripts where the test can read them.
#[tokio::test]
async fn a_session_id_known_only_at_the_end_is_the_one_saved() {
    let late = Ok(AgentMessage::Completed(AgentResult {
        text: "done".into(),
        num_turns: 1,
        session_id: Some(SessionId::new("late-session").unwrap()),
        ..AgentResult::default()
    }));
    let h = harness(
        HashMap::from([
            (
                "a",
                vec![vec![
                    Ok(AgentMessage::TextDelta {
                        content: "d".into(),
                    }),
                    late,
                ]],
            ),
            ("b", vec![vec![done("2")]]),
            ("c", vec![vec![done("3")]]),
        ]),
        None,
    );
    let outcome = run(&h, CHAIN, json!("x")).await.unwrap();
    let a = NodeId::new("a").unwrap();
    assert_eq!(outcome.snapshot.agent_sessions[&a].as_str(), "late-session");
    let complete = &of_type(&h, "agent:complete")[0];
    assert!(
        matches!(&complete.kind, EventKind::AgentComplete { session_id: Some(s), .. } if s.as_str() == "late-session")
    );
    let b = &of_type(&h, "agent:complete")[1];
    assert!(
        matches!(
            &b.kind,
            EventKind::AgentComplete {
                session_id: None,
                ..
            }
        ),
        "no repeat when unchanged"
    );
}

#[tokio::test]
async fn a_failing_agent_fails_the_run_and_stops_it() {
    let failure = Err(QueryError::Agent {
        error_type: "api_error".into(),
        message: "slow down".into(),
        details: None,
    });
    let h = harness(HashMap::from([("a", vec![vec![failure]])]), None);
    let outcome = run(&h, CHAIN, json!("x")).await.unwrap();
    assert_eq!(outcome.status, RunStatus::Failed);
    assert!(outcome.error.unwrap().contains("slow down"));
    let err = &of_type(&h, "agent:error")[0];
    assert!(
        matches!(&err.kind, EventKind::AgentError { error_type, .. } if error_type == "api_error")
    );
    assert_eq!(types(&h).last().map(String::as_str), Some("flow:failed"));
    assert_eq!(h.prompts.lock().unwrap().len(), 1, "b and c never ran");
}

#[tokio::test]
async fn continue_on_error_lets_the_run_go_on_with_null_data() {
    let yaml = "
name: lenient
agents:
  a: {provider: mock, policy: {continue_on_error: true}}
  b: {provider: mock}
steps: [{agent: a}, {agent: b}]
";
    let h = harness(
        HashMap::from([
            (
                "a",
                vec![vec![Ok(AgentMessage::TextDelta {
                    content: "par".into(),
                })]],
            ),
            ("b", vec![vec![done("recovered")]]),
        ]),
        None,
    );
    let outcome = run(&h, yaml, json!("x")).await.unwrap();
    assert_eq!(outcome.status, RunStatus::Completed);
    let failed = &of_type(&h, "node:failed")[0];
    assert!(matches!(
        failed.kind,
        EventKind::NodeFailed {
            continued: true,
            ..
        }
    ));
    assert_eq!(h.prompts.lock().unwrap()[1].1, "", "b received null data");
    assert_eq!(
        outcome.snapshot.node_status[&NodeId::new("a").unwrap()],
        NodeStatus::Failed
    );
}

#[tokio::test]
async fn max_turns_and_output_schema_are_enforced() {
    let yaml = r#"
name: strict
agents:
  a: {provider: mock, max_turns: 2}
  b:
    provider: mock
    output_schema: {type: object, required: [score], properties: {score: {type: number}}}
steps: [{agent: a}]
"#;
    let too_long = Ok(AgentMessage::Completed(AgentResult {
        text: "x".into(),
        num_turns: 3,
        ..AgentResult::default()
    }));
    let h = harness(HashMap::from([("a", vec![vec![too_long]])]), None);
    let outcome = run(&h, yaml, json!("x")).await.unwrap();
    assert_eq!(outcome.status, RunStatus::Failed);
    assert!(matches!(&of_type(&h, "agent:error")[0].kind,
            EventKind::AgentError { error_type, .. } if error_type == "error_max_turns"));

    let yaml = yaml.replace("steps: [{agent: a}]", "steps: [{agent: b}]");
    let h = harness(
        HashMap::from([("b", vec![vec![done("```json\n{\"score\": 0.9}\n```")]])]),
        None,
    );
    let outcome = run(&h, &yaml, json!("x")).await.unwrap();
    assert_eq!(outcome.output, json!({"score": 0.9}));
    assert!(matches!(&of_type(&h, "agent:complete")[0].kind,
            EventKind::AgentComplete { structured_output: Some(v), .. } if v == &json!({"score": 0.9})));

    let h = harness(
        HashMap::from([("b", vec![vec![done("no json here")]])]),
        None,
    );
    let outcome = run(&h, &yaml, json!("x")).await.unwrap();
    assert_eq!(outcome.status, RunStatus::Failed);
}

#[tokio::test]
async fn a_stream_that_ends_without_a_result_is_a_failure() {
    let h = harness(
        HashMap::from([(
            "a",
            vec![vec![Ok(AgentMessage::Text {
                content: "half".into(),
            })]],
        )]),
        None,
    );
    let outcome = run(&h, CHAIN, json!("x")).await.unwrap();
    assert_eq!(outcome.status, RunStatus::Failed);
    assert_eq!(of_type(&h, "agent:text").len(), 1, "what arrived is kept");
}

#[tokio::test]
async fn a_final_snapshot_that_cannot_be_saved_does_not_undo_the_recorded_outcome() {
    let h = harness(
        HashMap::from([
            ("a", vec![vec![done("1")]]),
            ("b", vec![vec![done("2")]]),
            ("c", vec![vec![done("3")]]),
        ]),
        None,
    );
    h.fail_final_save.store(true, Ordering::SeqCst);
    let outcome = run(&h, CHAIN, json!("x")).await.unwrap();
    assert_eq!(outcome.status, RunStatus::Completed);
    assert_eq!(outcome.output, json!("3"));
    assert_eq!(types(&h).last().map(String::as_str), Some("flow:completed"));
}

#[tokio::test]
async fn a_store_failure_is_a_runtime_error() {
    let h = harness(
        HashMap::from([("a", vec![vec![done("1")]]), ("b", vec![vec![done("2")]])]),
        Some(6),
    );
    let err = run(&h, CHAIN, json!("x")).await.unwrap_err();
    assert!(
        matches!(err, ExecutorError::Store(StoreError::Io { .. })),
        "{err}"
    );
    assert_eq!(
        h.events.lock().unwrap().len(),
        5,
        "nothing after the failed append"
    );
}

/// A store that fails for a while (a lock held, a full disk freed later)
/// leaves the run to be resumed: `system:error` on record, and no terminal
/// event, so the run is not ended for good by its storage.
#[tokio::test]
async fn a_store_failure_leaves_the_run_resumable() {
    let h = harness(
        HashMap::from([("a", vec![vec![done("1")]]), ("b", vec![vec![done("2")]])]),
        Some(6),
    );
    h.append_failures.store(1, Ordering::SeqCst);
    let err = run(&h, CHAIN, json!("x")).await.unwrap_err();
    assert!(
        matches!(err, ExecutorError::Store(StoreError::Io { .. })),
        "{err}"
    );
    let events = h.events.lock().unwrap().clone();
    let last = events.last().map(|e| &e.kind);
    assert!(
        matches!(last, Some(EventKind::SystemError { message, .. }) if message.contains("disk full")),
        "{last:?}"
    );
    let state = RunSnapshot::fold(&events).unwrap();
    assert_eq!(state.status, RunStatus::Running, "not ended: resumable");
}

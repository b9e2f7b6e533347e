//! The executor's tests against mocked ports: every seam of the log and the
//! transcript, with no process, file or real clock.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::ports::{AgentMessage, AgentResult, QueryError, StoreError, Transcript};
use crate::ports::{MockClock, MockIdGen, MockQueryFn, MockRunStore};
use domain::event::Usage;
use domain::transcript::{ExchangeDraft, ExchangeType};
use domain::{
    EdgeStatus, EventKind, NodeId, NodeStatus, RunSnapshot, RuntimeEvent, SessionId, Timestamp,
    WorkflowDef,
};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// What each node's agent does, by node id: one script per call.
type Scripts = HashMap<&'static str, Vec<Vec<Result<AgentMessage, QueryError>>>>;

struct Harness {
    runner: Executor,
    events: Arc<Mutex<Vec<RuntimeEvent>>>,
    snapshots: Arc<Mutex<Vec<RunSnapshot>>>,
    prompts: Arc<Mutex<Vec<(String, String)>>>,
    /// Makes saving a snapshot of an ended run fail (a full disk).
    fail_final_save: Arc<std::sync::atomic::AtomicBool>,
}

fn done(text: &str) -> Result<AgentMessage, QueryError> {
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

fn session(id: &str) -> Result<AgentMessage, QueryError> {
    Ok(AgentMessage::Session {
        session_id: SessionId::new(id).unwrap(),
        model: None,
    })
}

fn harness(scripts: Scripts, fail_append_at: Option<u64>) -> Harness {
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
    store.expect_append().returning(move |_, batch| {
        let mut log = log.lock().unwrap();
        for e in batch {
            if Some(e.offset.get()) == fail_append_at {
                return Err(StoreError::Io("disk full".into()));
            }
            assert_eq!(
                e.offset.get(),
                log.len() as u64 + 1,
                "offsets must have no gaps"
            );
            log.push(e.clone());
        }
        Ok(())
    });
    store.expect_flush().returning(|_| Ok(()));
    let saved = Arc::clone(&snapshots);
    let fail_final_save = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let fail_final = Arc::clone(&fail_final_save);
    store.expect_save_snapshot().returning(move |s| {
        if s.status.is_terminal() && fail_final.load(Ordering::SeqCst) {
            return Err(StoreError::Io("disk full".into()));
        }
        saved.lock().unwrap().push(s.clone());
        Ok(())
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
    }
}

async fn run(h: &Harness, yaml: &str, input: Value) -> Result<RunOutcome, ExecutorError> {
    let workflow = Arc::new(WorkflowDef::from_yaml(yaml).unwrap());
    let run_id = h.runner.create().await.unwrap();
    h.runner.run(run_id, RunRequest { workflow, input }).await
}

fn types(h: &Harness) -> Vec<String> {
    h.events
        .lock()
        .unwrap()
        .iter()
        .map(|e| e.kind.type_name().to_owned())
        .collect()
}

fn of_type(h: &Harness, t: &str) -> Vec<RuntimeEvent> {
    h.events
        .lock()
        .unwrap()
        .iter()
        .filter(|e| e.kind.type_name() == t)
        .cloned()
        .collect()
}

const CHAIN: &str = "
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
    // The provider's session id is used when given, a runtime id otherwise.
    assert_eq!(
        outcome.snapshot.agent_sessions[&NodeId::new("a").unwrap()].as_str(),
        "s-a"
    );
    assert_eq!(outcome.snapshot.agent_sessions.len(), 3);
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
        5,
        "after start, after each of 3 steps, final"
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
    // Each step records 5 events and the clock moves 1 ms per reading.
    let h = harness(scripts(), None);
    let h = Harness {
        runner: h.runner.with_checkpoints(CheckpointPolicy {
            max_events: 10,
            max_interval_ms: 1_000,
        }),
        ..h
    };
    run(&h, CHAIN, json!("x")).await.unwrap();
    let offsets: Vec<u64> = h
        .snapshots
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.last_offset)
        .collect();
    let events = h.events.lock().unwrap();
    assert_eq!(offsets.first(), Some(&1), "always right after flow:started");
    assert_eq!(
        offsets.last(),
        Some(&(events.len() as u64)),
        "always at the end"
    );
    assert!(offsets.len() < 5, "not at every step: {offsets:?}");
    for pair in offsets.windows(2).take(offsets.len().saturating_sub(2)) {
        assert!(pair[1] - pair[0] >= 10, "{offsets:?}");
    }
}

/// The harness, writing its transcripts where the test can read them.
fn with_recorded_transcript(h: Harness, drops: u64) -> (Harness, Arc<Mutex<Vec<ExchangeDraft>>>) {
    let (transcripts, lines) = recording_transcripts(drops);
    let h = Harness {
        runner: h.runner.with_transcripts(Arc::new(transcripts)),
        ..h
    };
    (h, lines)
}

/// A transcript that keeps every draft and reports `drops` missed events.
fn recording_transcripts(
    drops: u64,
) -> (
    crate::ports::MockTranscripts,
    Arc<Mutex<Vec<ExchangeDraft>>>,
) {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&lines);
    let mut transcripts = crate::ports::MockTranscripts::new();
    transcripts.expect_open().returning(move |run_id, parent| {
        assert!(parent.is_none());
        let kept = Arc::clone(&kept);
        let mut t = crate::ports::MockTranscript::new();
        let seq = AtomicU64::new(0);
        t.expect_append().returning(move |draft| {
            kept.lock().unwrap().push(draft.clone());
            Ok(domain::transcript::ExchangeEvent {
                seq: seq.fetch_add(1, Ordering::SeqCst) + 1,
                run_id,
                parent_run_id: None,
                child_run_id: draft.child_run_id,
                kind: draft.kind,
                path: draft.path,
                iteration: draft.iteration,
                timestamp: draft.timestamp,
                payload: draft.payload,
                extra: Default::default(),
            })
        });
        t.expect_dropped().returning(move || drops);
        t.expect_close().returning(|| ());
        Ok(Arc::new(t) as Arc<dyn Transcript>)
    });
    (transcripts, lines)
}

#[tokio::test]
async fn the_transcript_records_every_seam_in_order() {
    let h = harness(
        HashMap::from([
            (
                "a",
                vec![vec![
                    Ok(AgentMessage::ThinkingDelta {
                        content: "hm".into(),
                        token_count: None,
                    }),
                    Ok(AgentMessage::TextDelta {
                        content: "fro".into(),
                    }),
                    Ok(AgentMessage::TextDelta {
                        content: "m a".into(),
                    }),
                    Ok(AgentMessage::Tool {
                        id: Some("toolu_1".into()),
                        name: "search".into(),
                        input: json!({"q": 1}),
                        output: json!("found"),
                        duration_ms: None,
                        error: None,
                    }),
                    done("from a"),
                ]],
            ),
            ("b", vec![vec![done("from b")]]),
            ("c", vec![vec![done("from c")]]),
        ]),
        None,
    );
    let (h, lines) = with_recorded_transcript(h, 3);
    run(&h, CHAIN, json!("topic")).await.unwrap();
    let lines = lines.lock().unwrap();
    let kinds: Vec<&str> = lines.iter().map(|l| l.kind.as_str()).collect();
    assert_eq!(kinds.first(), Some(&"run.started"));
    assert_eq!(kinds.last(), Some(&"run.completed"));
    assert_eq!(
        &kinds[1..8],
        [
            "step.started",
            "message.user",
            "tool.call",
            "tool.result",
            "message.assistant",
            "step.completed",
            "step.started"
        ]
    );
    let user = &lines[2].payload;
    assert_eq!(
        user["blocks"][0],
        json!({"type": "text", "text": "topic", "fidelity": "router"})
    );
    assert_eq!(
        user["blocks"][1]["text"], "first",
        "the system prompt, verbatim"
    );
    let reply = &lines[5].payload["blocks"];
    let types: Vec<&str> = reply
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["thinking", "text", "tool_use", "tool_result"]);
    assert_eq!(reply[1]["text"], "from a", "deltas join one block");
    assert_eq!(
        (&reply[2]["tool_id"], &reply[3]["tool_id"]),
        (&json!("toolu_1"), &json!("toolu_1"))
    );
    assert_eq!(lines[3].payload["call_id"], "toolu_1");
    assert_eq!(lines[4].payload["call_id"], "toolu_1");
    assert!(
        reply
            .as_array()
            .unwrap()
            .iter()
            .all(|b| b["fidelity"] == "agent_emitted")
    );
    assert_eq!(lines[3].payload["fidelity"], "agent_emitted");
    assert_eq!(lines[6].payload["result"], "from a");
    // The drops subscribers suffered are in the run's log.
    let warnings = of_type(&h, "warning");
    assert_eq!(warnings.len(), 1);
    assert!(
        matches!(&warnings[0].kind, EventKind::Warning { message, .. } if message.contains("missed 3"))
    );
}

#[tokio::test]
async fn tools_the_runtime_ran_are_router_events_lines_and_blocks() {
    let started = |id: &str, input: Value| {
        Ok(AgentMessage::ToolStarted {
            call_id: id.into(),
            name: "shell".into(),
            input,
        })
    };
    let finished = |id: &str, output: Result<Value, String>| {
        Ok(AgentMessage::ToolFinished {
            call_id: id.into(),
            name: "shell".into(),
            output,
            duration_ms: 4,
        })
    };
    let limited = Ok(AgentMessage::RateLimited {
        provider: "openai".into(),
        attempt: 1,
        retry_after_ms: Some(1000),
    });
    let script = vec![
        session("conv-1"),
        limited,
        started("c1", json!({"command": "echo hi"})),
        finished("c1", Ok(json!({"exit_code": 0, "stdout": "hi\n"}))),
        started("c2", json!({"command": 3})),
        finished("c2", Err("invalid input".into())),
        done("hi"),
    ];
    let h = harness(HashMap::from([("a", vec![script])]), None);
    let (h, lines) = with_recorded_transcript(h, 0);
    let yaml = "name: t\nagents:\n  a: {provider: mock, model: my-model-v2}\n\
            pricing:\n  my-model: {input: 1000000, output: 2000000}\nsteps: [{agent: a}]\n";
    let outcome = run(&h, yaml, json!("x")).await.unwrap();
    assert_eq!(outcome.status, RunStatus::Completed);
    let types = types(&h);
    let tool_types: Vec<&str> = types
        .iter()
        .map(String::as_str)
        .filter(|t| t.starts_with("tool:") || *t == "rate:limited")
        .collect();
    assert_eq!(
        tool_types,
        [
            "rate:limited",
            "tool:started",
            "tool:completed",
            "tool:started",
            "tool:failed"
        ]
    );
    let failed = &of_type(&h, "tool:failed")[0];
    assert!(
        matches!(&failed.kind, EventKind::ToolFailed { call_id, duration_ms: 4, .. } if call_id == "c2")
    );
    let complete = &of_type(&h, "agent:complete")[0];
    // 10 input tokens at $1 and 5 output tokens at $2 per token: the
    // workflow's price of `my-model` covers `my-model-v2`.
    assert!(
        matches!(&complete.kind, EventKind::AgentComplete { total_cost_usd: Some(c), .. } if (*c - 20.0).abs() < 1e-9),
        "{complete:?}"
    );
    let node = &of_type(&h, "node:completed")[0];
    assert!(
        serde_json::to_string(node)
            .unwrap()
            .contains(r#""tool_calls_count":2"#),
        "{node:?}"
    );
    let lines = lines.lock().unwrap();
    let tool_lines: Vec<&ExchangeDraft> = lines
        .iter()
        .filter(|l| matches!(l.kind, ExchangeType::ToolCall | ExchangeType::ToolResult))
        .collect();
    assert_eq!(tool_lines.len(), 4);
    assert!(tool_lines.iter().all(|l| l.payload["fidelity"] == "router"));
    assert_eq!(tool_lines[1].payload["output"]["stdout"], "hi\n");
    assert_eq!(tool_lines[3].payload["error"], "invalid input");
    let reply = lines
        .iter()
        .find(|l| l.kind == ExchangeType::MessageAssistant)
        .unwrap();
    let blocks = reply.payload["blocks"].as_array().unwrap();
    let kinds: Vec<&str> = blocks.iter().map(|b| b["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["tool_use", "tool_result", "tool_use", "tool_result", "text"]
    );
    assert_eq!(blocks[0]["tool_id"], "c1");
    assert!(blocks[..4].iter().all(|b| b["fidelity"] == "router"));
}

#[tokio::test]
async fn agent_tool_calls_keep_the_provider_ids_and_order_and_dangling_uses_stay_alone() {
    let use_of = |id: Option<&str>, command: &str| {
        Ok(AgentMessage::ToolUse {
            id: id.map(str::to_owned),
            name: "shell".into(),
            input: json!({ "command": command }),
        })
    };
    let text = |t: &str| Ok(AgentMessage::Text { content: t.into() });
    let script = vec![
        Ok(AgentMessage::Thinking {
            content: "plan".into(),
            token_count: None,
            signature: None,
        }),
        text("running a"),
        use_of(Some("toolu_A"), "echo a"),
        text("and b"),
        use_of(Some("toolu_B"), "sleep 99"),
        use_of(None, "echo c"),
        Ok(AgentMessage::Tool {
            id: Some("toolu_A".into()),
            name: "shell".into(),
            input: json!({"command": "echo a"}),
            output: json!({"output": "oops", "exit_code": 3}),
            duration_ms: None,
            error: Some("command exited with code 3".into()),
        }),
        Ok(AgentMessage::Tool {
            id: None,
            name: "shell".into(),
            input: json!({"command": "echo c"}),
            output: json!("c"),
            duration_ms: None,
            error: None,
        }),
        // A provider that reports only the whole call.
        Ok(AgentMessage::Tool {
            id: Some("item_9".into()),
            name: "web_search".into(),
            input: json!({"q": "x"}),
            output: json!("found"),
            duration_ms: None,
            error: None,
        }),
        done("1"),
    ];
    let h = harness(
        HashMap::from([
            ("a", vec![script]),
            ("b", vec![vec![done("2")]]),
            ("c", vec![vec![done("3")]]),
        ]),
        None,
    );
    let (h, lines) = with_recorded_transcript(h, 0);
    run(&h, CHAIN, json!("x")).await.unwrap();
    let lines = lines.lock().unwrap();
    let reply = lines
        .iter()
        .find(|l| l.kind == ExchangeType::MessageAssistant)
        .unwrap();
    let fidelity = "agent_emitted";
    let tool_use = |id: &str, command: &str| {
        let mut b = json!({"type": "tool_use", "tool_name": "shell",
                "tool_input": {"command": command}, "fidelity": fidelity});
        if !id.is_empty() {
            b["tool_id"] = json!(id);
        }
        b
    };
    assert_eq!(
        reply.payload["blocks"],
        json!([
            {"type": "thinking", "thinking": "plan", "fidelity": fidelity},
            {"type": "text", "text": "running a", "fidelity": fidelity},
            tool_use("toolu_A", "echo a"),
            {"type": "text", "text": "and b", "fidelity": fidelity},
            tool_use("toolu_B", "sleep 99"),
            tool_use("", "echo c"),
            {"type": "tool_result", "tool_id": "toolu_A", "tool_content": null, "fidelity": fidelity},
            {"type": "tool_result", "tool_content": "c", "fidelity": fidelity},
            {"type": "tool_use", "tool_name": "web_search", "tool_id": "item_9",
                "tool_input": {"q": "x"}, "fidelity": fidelity},
            {"type": "tool_result", "tool_id": "item_9", "tool_content": "found", "fidelity": fidelity},
        ])
    );
    let tool_lines: Vec<(&str, Option<&str>)> = lines
        .iter()
        .filter(|l| matches!(l.kind, ExchangeType::ToolCall | ExchangeType::ToolResult))
        .map(|l| (l.kind.as_str(), l.payload["call_id"].as_str()))
        .collect();
    assert_eq!(
        tool_lines,
        [
            ("tool.call", Some("toolu_A")),
            ("tool.call", Some("toolu_B")),
            ("tool.call", None),
            ("tool.result", Some("toolu_A")),
            ("tool.result", None),
            ("tool.call", Some("item_9")),
            ("tool.result", Some("item_9")),
        ],
        "no result is invented for toolu_B"
    );
    let tools: Vec<(String, Option<String>)> = h
        .events
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::AgentToolUse { tool_use_id, .. } => {
                Some(("use".into(), tool_use_id.clone()))
            }
            EventKind::AgentTool { tool_use_id, .. } => Some(("tool".into(), tool_use_id.clone())),
            _ => None,
        })
        .collect();
    let id = |s: &str| Some(s.to_owned());
    assert_eq!(
        tools,
        [
            ("use".into(), id("toolu_A")),
            ("use".into(), id("toolu_B")),
            ("use".into(), None),
            ("tool".into(), id("toolu_A")),
            ("tool".into(), None),
            ("tool".into(), id("item_9")),
        ]
    );
    let EventKind::NodeCompleted { output } = &of_type(&h, "node:completed")[0].kind else {
        panic!()
    };
    assert_eq!(output["metadata"]["tool_calls_count"], json!(4));
}

#[tokio::test]
async fn thinking_signatures_reach_the_log_and_the_transcript() {
    let thinking = Ok(AgentMessage::Thinking {
        content: "ponder".into(),
        token_count: None,
        signature: Some("c2ln".into()),
    });
    let h = harness(
        HashMap::from([
            ("a", vec![vec![thinking, done("1")]]),
            ("b", vec![vec![done("2")]]),
            ("c", vec![vec![done("3")]]),
        ]),
        None,
    );
    let (h, lines) = with_recorded_transcript(h, 0);
    run(&h, CHAIN, json!("x")).await.unwrap();
    assert!(matches!(&of_type(&h, "agent:thinking")[0].kind,
            EventKind::AgentThinking { signature: Some(s), .. } if s == "c2ln"));
    let lines = lines.lock().unwrap();
    let reply = lines
        .iter()
        .find(|l| l.kind == ExchangeType::MessageAssistant)
        .unwrap();
    assert_eq!(reply.payload["blocks"][0]["signature"], "c2ln");
}

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
async fn conditions_pick_a_branch_and_skip_the_other() {
    let yaml = r#"
name: branch
agents:
  judge: {provider: mock}
  yes: {provider: mock}
  no: {provider: mock}
nodes: [{id: judge, agent: judge}, {id: yes, agent: yes}, {id: no, agent: no}]
edges:
  - {from: judge, to: yes, when: 'output.contains("APPROVED")'}
  - {from: judge, to: no, when: '!output.contains("APPROVED")'}
"#;
    let h = harness(
        HashMap::from([
            ("judge", vec![vec![done("APPROVED")]]),
            ("yes", vec![vec![done("shipped")]]),
        ]),
        None,
    );
    let outcome = run(&h, yaml, json!("x")).await.unwrap();
    assert_eq!(outcome.output, json!("shipped"));
    let s = &outcome.snapshot;
    assert_eq!(
        s.node_status[&NodeId::new("no").unwrap()],
        NodeStatus::Skipped
    );
    assert_eq!(s.edge_status["judge->yes"], EdgeStatus::Fired);
    assert_eq!(s.edge_status["judge->no"], EdgeStatus::Skipped);
}

#[tokio::test]
async fn a_loop_edge_repeats_its_body_up_to_its_limit() {
    let yaml = r#"
name: refine
agents:
  writer: {provider: mock}
  critic: {provider: mock}
  publish: {provider: mock}
nodes: [{id: writer, agent: writer}, {id: critic, agent: critic}, {id: publish, agent: publish}]
edges:
  - {from: writer, to: critic}
  - {from: critic, to: writer, when: '!output.contains("OK")', max_iterations: 2, on_limit: continue}
  - {from: critic, to: publish}
"#;
    let h = harness(
        HashMap::from([
            (
                "writer",
                vec![
                    vec![done("draft 1")],
                    vec![done("draft 2")],
                    vec![done("draft 3")],
                ],
            ),
            (
                "critic",
                vec![
                    vec![done("again")],
                    vec![done("again")],
                    vec![done("still bad")],
                ],
            ),
            ("publish", vec![vec![done("published")]]),
        ]),
        None,
    );
    let outcome = run(&h, yaml, json!("x")).await.unwrap();
    assert_eq!(outcome.status, RunStatus::Completed);
    assert_eq!(outcome.output, json!("published"));
    assert_eq!(outcome.snapshot.loop_counters["critic->writer"], 2);
    let writer_prompts: Vec<String> = h
        .prompts
        .lock()
        .unwrap()
        .iter()
        .filter(|(n, _)| n == "writer")
        .map(|(_, p)| p.clone())
        .collect();
    assert_eq!(writer_prompts, ["x", "again", "again"]);
    let EventKind::EdgeSkipped { reason, .. } = &of_type(&h, "edge:skipped")[0].kind else {
        panic!()
    };
    assert_eq!(reason, "loop limit reached");
}

#[tokio::test]
async fn a_loop_edge_at_its_limit_fails_the_run_by_default() {
    let yaml = r#"
name: refine
agents:
  writer: {provider: mock}
  critic: {provider: mock}
  publish: {provider: mock}
nodes: [{id: writer, agent: writer}, {id: critic, agent: critic}, {id: publish, agent: publish}]
edges:
  - {from: writer, to: critic}
  - {from: critic, to: writer, id: revise, when: '!output.contains("OK")', max_iterations: 1}
  - {from: critic, to: publish}
"#;
    let h = harness(
        HashMap::from([
            ("writer", vec![vec![done("draft 1")], vec![done("draft 2")]]),
            ("critic", vec![vec![done("again")], vec![done("still bad")]]),
            ("publish", vec![vec![done("published")]]),
        ]),
        None,
    );
    let outcome = run(&h, yaml, json!("x")).await.unwrap();
    assert_eq!(outcome.status, RunStatus::Failed);
    let error = outcome.error.unwrap();
    assert!(
        error.contains("edge `revise` reached its loop limit (max_iterations: 1)"),
        "{error}"
    );
    assert_eq!(outcome.snapshot.loop_counters["revise"], 1);
    let failed = of_type(&h, "flow:failed");
    let EventKind::FlowFailed { failed_node, .. } = &failed[0].kind else {
        panic!()
    };
    assert_eq!(failed_node.as_ref().map(NodeId::as_str), Some("critic"));
    assert!(
        h.prompts
            .lock()
            .unwrap()
            .iter()
            .all(|(n, _)| n != "publish"),
        "publish never ran"
    );
}

#[tokio::test]
async fn a_condition_that_cannot_be_evaluated_fails_the_run_naming_the_edge() {
    let yaml = r#"
name: typo
agents:
  a: {provider: mock}
  b: {provider: mock}
nodes: [{id: a, agent: a}, {id: b, agent: b}]
edges: [{from: a, to: b, when: 'output.score > 1'}]
"#;
    let h = harness(
        HashMap::from([("a", vec![vec![done("not an object")]])]),
        None,
    );
    let outcome = run(&h, yaml, json!("x")).await.unwrap();
    assert_eq!(outcome.status, RunStatus::Failed);
    assert!(outcome.error.unwrap().contains("edge `a->b`"));
    assert_eq!(h.prompts.lock().unwrap().len(), 1, "b never ran");
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
        matches!(err, ExecutorError::Store(StoreError::Io(_))),
        "{err}"
    );
    assert_eq!(
        h.events.lock().unwrap().len(),
        5,
        "nothing after the failed append"
    );
}

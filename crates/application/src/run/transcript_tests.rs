//! The executor's exchange transcript, written as a projection of its
//! events: every seam in order, tools the runtime ran and tools agents ran,
//! thinking signatures — on mocked ports.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::tests::{CHAIN, Harness, done, harness, of_type, run, session, types};
use super::*;
use crate::ports::{AgentMessage, Transcript};
use domain::EventKind;
use domain::transcript::{ExchangeDraft, ExchangeType};
use serde_json::{Value, json};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
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
        t.expect_flush().returning(|| Ok(()));
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

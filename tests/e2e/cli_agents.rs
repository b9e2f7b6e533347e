//! CLI agents end to end through `awr run`, with fake executables standing in
//! for the real CLIs: a broken stream does not crash the run, everything valid
//! in it reaches the records in order, and a hanging CLI is killed.

use domain::{EventKind, RuntimeEvent};
use serde_json::Value;

use crate::util::{Awr, run_id_of};

fn fake_cli(awr: &Awr, name: &str, body: &str) -> String {
    awr.executable(name, &format!("#!/bin/sh\n{body}\n"))
        .display()
        .to_string()
}

fn flow(awr: &Awr, exe: &str, extra: &str) -> String {
    let yaml = format!(
        "name: cli\nagents:\n  coder:\n    provider: claude-code\n    executable: {exe}\n    system_prompt: You write code.\n{extra}steps: [{{agent: coder}}]\n"
    );
    awr.write("flow.yaml", &yaml).display().to_string()
}

#[test]
fn a_broken_stream_does_not_crash_the_run_and_what_is_valid_is_kept_in_order() {
    let awr = Awr::new();
    // What Claude Code prints, interleaved with what a crash or a bug leaves:
    // a line that is not JSON, an unknown type, a NUL inside a string.
    let lines = [
        r#"{"type":"system","subtype":"init","session_id":"sess-broken","model":"m"}"#,
        r#"{"type":"assistant","message":{"id":"m1","content":[{"type":"text","text":"first"}]}}"#,
        "this is not json",
        r#"{"type":"telemetry","something":1}"#,
        r#"{"type":"assistant","message":{"id":"m1","content":[{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"echo hi"}}]}}"#,
        r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":"hi","is_error":false}]}}"#,
        "{\"type\":\"assistant\",\"message\":{\"id\":\"m2\",\"content\":[{\"type\":\"text\",\"text\":\"sec\u{0}ond\"}]}}",
        r#"{"type":"result","subtype":"success","is_error":false,"result":"second","session_id":"sess-broken","num_turns":2,"duration_ms":5,"usage":{"input_tokens":10,"output_tokens":4}}"#,
    ];
    let stdout = awr.write("stdout.jsonl", &(lines.join("\n") + "\n"));
    let exe = fake_cli(&awr, "fake-claude", &format!("cat '{}'", stdout.display()));
    let out = awr.run(&["run", &flow(&awr, &exe, "")]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.stdout.trim(), "second");
    let run = run_id_of(&out);

    let events: Vec<RuntimeEvent> =
        std::fs::read_to_string(awr.run_dir(&run).join("events.ndjson"))
            .unwrap()
            .lines()
            .map(|l| RuntimeEvent::from_json(l.as_bytes()).unwrap())
            .collect();
    let warnings = events
        .iter()
        .filter(|e| e.kind.type_name() == "warning")
        .count();
    assert!(
        warnings >= 2,
        "the bad line and the unknown type are kept as warnings"
    );
    assert!(events.iter().any(|e| matches!(&e.kind,
        EventKind::AgentSession { session_id, .. } if session_id.as_str() == "sess-broken")));
    assert!(events.iter().any(|e| matches!(&e.kind,
        EventKind::AgentComplete { usage, .. } if usage.input_tokens == 10)));

    let transcript = std::fs::read_to_string(
        awr.storage()
            .join("transcripts")
            .join(format!("{run}.jsonl")),
    )
    .unwrap();
    let reply: Value = transcript
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|l| l["type"] == "message.assistant")
        .unwrap();
    let blocks = reply["payload"]["blocks"].as_array().unwrap();
    let kinds: Vec<&str> = blocks.iter().map(|b| b["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["text", "tool_use", "tool_result", "text"],
        "in the order produced"
    );
    assert_eq!(blocks[3]["text"], "sec\u{0}ond", "the NUL survives");
    assert!(blocks.iter().all(|b| b["fidelity"] == "agent_emitted"));
    assert!(
        transcript.contains("\\u0000"),
        "written as an escape, the line stays valid JSON"
    );
}

#[test]
fn a_cli_that_fails_or_hangs_fails_the_run_with_a_clear_error() {
    let awr = Awr::new();
    let exe = fake_cli(&awr, "fake-claude", "echo 'auth: no key' >&2; exit 41");
    let out = awr.run(&["run", &flow(&awr, &exe, "")]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("41") && out.stderr.contains("no key"),
        "{}",
        out.stderr
    );

    let awr = Awr::new();
    let exe = fake_cli(&awr, "fake-claude", "sleep 30");
    let started = std::time::Instant::now();
    let out = awr.run_within(25, &["run", &flow(&awr, &exe, "    timeout: 1s\n")]);
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(out.stderr.contains("timeout"), "{}", out.stderr);
}

/// The run's event log and transcript as JSON lines.
fn records(awr: &Awr, run: &str) -> (Vec<Value>, Vec<Value>) {
    let read = |path: std::path::PathBuf| -> Vec<Value> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    (
        read(awr.run_dir(run).join("events.ndjson")),
        read(
            awr.storage()
                .join("transcripts")
                .join(format!("{run}.jsonl")),
        ),
    )
}

/// `(type, tool id or text)` of each block of the first assistant message.
fn reply_blocks(transcript: &[Value]) -> Vec<(String, String)> {
    let reply = transcript
        .iter()
        .find(|l| l["type"] == "message.assistant")
        .expect("an assistant message");
    reply["payload"]["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            let detail = ["tool_id", "text", "thinking"]
                .iter()
                .find_map(|k| b[*k].as_str())
                .unwrap_or("");
            (b["type"].as_str().unwrap().to_owned(), detail.to_owned())
        })
        .collect()
}

#[test]
fn agent_tool_calls_keep_their_ids_their_order_and_their_missing_results() {
    let awr = Awr::new();
    // One Claude message: thinking, text, a tool call, more text, a second
    // call that never gets its result; then the first call's result and a
    // last message.
    let lines = [
        r#"{"type":"system","subtype":"init","session_id":"sess-order","model":"m"}"#,
        r#"{"type":"assistant","message":{"id":"m1","content":[{"type":"thinking","thinking":"plan","signature":"c2ln"}]}}"#,
        r#"{"type":"assistant","message":{"id":"m1","content":[{"type":"text","text":"running a"}]}}"#,
        r#"{"type":"assistant","message":{"id":"m1","content":[{"type":"tool_use","id":"toolu_A","name":"Bash","input":{"command":"echo a"}}]}}"#,
        r#"{"type":"assistant","message":{"id":"m1","content":[{"type":"text","text":"and b"}]}}"#,
        r#"{"type":"assistant","message":{"id":"m1","content":[{"type":"tool_use","id":"toolu_B","name":"Bash","input":{"command":"sleep 99"}}]}}"#,
        r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"toolu_A","content":"a"}]}}"#,
        r#"{"type":"assistant","message":{"id":"m2","content":[{"type":"text","text":"done"}]}}"#,
        r#"{"type":"result","subtype":"success","is_error":false,"result":"done","num_turns":2,"usage":{"input_tokens":1,"output_tokens":1}}"#,
    ];
    let stdout = awr.write("stdout.jsonl", &(lines.join("\n") + "\n"));
    let exe = fake_cli(&awr, "fake-claude", &format!("cat '{}'", stdout.display()));
    let out = awr.run(&["run", &flow(&awr, &exe, "")]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let (events, transcript) = records(&awr, &run_id_of(&out));

    let pair = |t: &str, d: &str| (t.to_owned(), d.to_owned());
    assert_eq!(
        reply_blocks(&transcript),
        [
            pair("thinking", "plan"),
            pair("text", "running a"),
            pair("tool_use", "toolu_A"),
            pair("text", "and b"),
            pair("tool_use", "toolu_B"),
            pair("tool_result", "toolu_A"),
            pair("text", "done"),
        ],
        "blocks in the order the agent produced them, with its ids, and no result for toolu_B"
    );
    let tool_lines: Vec<(String, String)> = transcript
        .iter()
        .filter(|l| l["type"] == "tool.call" || l["type"] == "tool.result")
        .map(|l| {
            let id = l["payload"]["call_id"].as_str().unwrap_or("").to_owned();
            (l["type"].as_str().unwrap().to_owned(), id)
        })
        .collect();
    assert_eq!(
        tool_lines,
        [
            pair("tool.call", "toolu_A"),
            pair("tool.call", "toolu_B"),
            pair("tool.result", "toolu_A"),
        ]
    );

    let agent_events: Vec<(String, String)> = events
        .iter()
        .filter(|e| {
            e["type"].as_str().is_some_and(|t| {
                t.starts_with("agent:") && t != "agent:start" && t != "agent:session"
            })
        })
        .map(|e| {
            let detail = ["toolUseId", "content"]
                .iter()
                .find_map(|k| e[*k].as_str())
                .unwrap_or("");
            (e["type"].as_str().unwrap().to_owned(), detail.to_owned())
        })
        .collect();
    assert_eq!(
        agent_events,
        [
            pair("agent:thinking", "plan"),
            pair("agent:text", "running a"),
            pair("agent:tool:use", "toolu_A"),
            pair("agent:text", "and b"),
            pair("agent:tool:use", "toolu_B"),
            pair("agent:tool", "toolu_A"),
            pair("agent:text", "done"),
            pair("agent:complete", ""),
        ],
        "the log keeps the same order and ids, and invents no result for toolu_B"
    );
}

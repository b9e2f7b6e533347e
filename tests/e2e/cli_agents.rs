//! CLI agents end to end through `awr run`, with fake executables standing in
//! for the real CLIs: a broken stream does not crash the run, everything valid
//! in it reaches the records in order, and a hanging CLI is killed.

use domain::{EventKind, RuntimeEvent};
use serde_json::Value;

use crate::util::{Awr, run_id_of};

fn fake_cli(awr: &Awr, name: &str, body: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = awr.write(name, &format!("#!/bin/sh\n{body}\n"));
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.display().to_string()
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
        EventKind::AgentStart { session_id, .. } if session_id.as_str() == "sess-broken")));
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

//! `awr verify-determinism --json` names every divergence field by field:
//! its kind, the node, the call, the JSON Pointer and both values (what
//! the recording holds, what the replay did), whatever diverged — a
//! request, a turn, a call too many or too few, an answer, the order of
//! events, an event one side lacks, the workflow file. Each test spoils a
//! real recording on disk the way one kind of divergence happens.

use std::path::Path;

use awr_tests::fake_model::FakeModel;
use serde_json::{Value, json};

use crate::determinism::{edit_json, recorded};
use crate::util::Awr;

/// `verify-determinism --json` of `rec`: exit 1, its report, and stderr.
fn report(a: &Awr, rec: &Path) -> (Value, String) {
    let out = a.run(&["verify-determinism", "--json", &rec.display().to_string()]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    let report: Value =
        serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {}", out.stdout));
    assert_eq!(report["result"], "diverged", "{report}");
    (report, out.stderr)
}

/// The fields every report has, whatever the kind.
fn assert_fields(report: &Value, kind: &str, node: &str, call: Value, pointer: &str) {
    assert_eq!(report["kind"], kind, "{report}");
    assert_eq!(report["node"], node, "{report}");
    assert_eq!(report["call"], call, "{report}");
    assert_eq!(report["pointer"], pointer, "{report}");
    for field in ["recorded", "actual", "turn", "message", "shape"] {
        assert!(report.get(field).is_some(), "no `{field}`: {report}");
    }
}

/// One recorded call's entry of node file `file`.
fn recorded_call(file: &Path, call: usize) -> Value {
    let v: Value = serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    v["calls"][call].clone()
}

/// A recorded prompt edited: the call sends another request. The report
/// names node, call and pointer, with the recorded and the sent value in
/// fields of their own, not only in the message.
#[test]
fn a_changed_request_reports_node_call_pointer_and_both_values() {
    let a = Awr::new();
    let rec = recorded(&a, "examples/research-pipeline.yaml");
    let file = rec.join("nodes/research-pipeline/analyst.json");
    let sent = recorded_call(&file, 0)["input"]["prompt"].clone();
    let edited = format!("X{}", &sent.as_str().unwrap()[1..]);
    edit_json(&file, |v| {
        v["calls"][0]["input"]["prompt"] = edited.clone().into()
    });
    let (report, stderr) = report(&a, &rec);
    assert_fields(&report, "request", "analyst", json!(0), "/prompt");
    assert_eq!(report["shape"], "recording");
    assert_eq!(report["recorded"], json!(edited));
    assert_eq!(report["actual"], sent);
    assert_eq!(report["instance"], "0");
    assert_eq!(report["instanceCall"], 0);
    assert!(
        report["file"].as_str().unwrap().ends_with("analyst.json"),
        "{report}"
    );
    for needle in [
        "kind      request",
        "node      analyst",
        "call      0",
        "path      /prompt",
        "recorded  \"X",
    ] {
        assert!(stderr.contains(needle), "{needle}: {stderr}");
    }
}

/// A node file with fewer calls than the run makes: the call the
/// recording lacks is reported with the request it sent.
#[test]
fn an_extra_call_reports_the_request_the_recording_lacks() {
    let a = Awr::new();
    let rec = recorded(&a, "examples/research-pipeline.yaml");
    let file = rec.join("nodes/research-pipeline/writer.json");
    let sent = recorded_call(&file, 0)["input"].clone();
    edit_json(&file, |v| v["calls"] = Value::Array(Vec::new()));
    let (report, stderr) = report(&a, &rec);
    assert_fields(&report, "extra-call", "writer", json!(0), "/calls/0");
    assert_eq!(report["recorded"], Value::Null);
    assert_eq!(report["actual"], sent, "the request the replay sent");
    assert_eq!(report["recordedCalls"], 0);
    assert!(stderr.contains("kind      extra-call"), "{stderr}");
}

/// A node file with more calls than the run makes: the first call never
/// made is reported with the request the recording holds for it.
#[test]
fn a_missing_call_reports_the_recorded_request_never_sent() {
    let a = Awr::new();
    let rec = recorded(&a, "examples/research-pipeline.yaml");
    let file = rec.join("nodes/research-pipeline/writer.json");
    edit_json(&file, |v| {
        let mut call = v["calls"][0].clone();
        call["call"] = 1.into();
        call["instanceCall"] = 1.into();
        call["input"]["prompt"] = "never asked".into();
        v["calls"].as_array_mut().unwrap().push(call);
    });
    let (report, stderr) = report(&a, &rec);
    assert_fields(&report, "missing-call", "writer", json!(1), "/calls/1");
    assert_eq!(report["shape"], "shortfall");
    assert_eq!(report["recorded"], recorded_call(&file, 1)["input"]);
    assert_eq!(report["actual"], Value::Null);
    assert_eq!(report["recordedCalls"], 2);
    assert!(stderr.contains("kind      missing-call"), "{stderr}");
}

/// A recorded answer edited after the fact: the replay's answer is not
/// the recorded run's. The report names the node and the call whose
/// answer it is, and both hashes.
#[test]
fn a_changed_output_reports_the_node_and_call_whose_answer_changed() {
    let a = Awr::new();
    let rec = recorded(&a, "examples/summarize.yaml");
    edit_json(&rec.join("nodes/summarize/fact-checker.json"), |v| {
        v["calls"][0]["output"]["text"] = "HACKED".into();
    });
    let (report, stderr) = report(&a, &rec);
    assert_fields(&report, "output", "fact-checker", json!(0), "/payload_hash");
    assert_eq!(report["shape"], "recorded-causal");
    assert_eq!(report["event"], "response_sent");
    let (recorded, actual) = (report["recorded"].as_str(), report["actual"].as_str());
    assert!(
        recorded.is_some() && actual.is_some() && recorded != actual,
        "{report}"
    );
    assert!(stderr.contains("kind      output"), "{stderr}");
}

/// A `command` node whose output is random: its answer differs, and no
/// provider call is behind it (`call` is null).
#[test]
fn a_random_command_output_reports_its_node_and_no_call() {
    let a = Awr::new();
    let flow = a.write(
        "dice.yaml",
        "name: dice\nnodes:\n  - id: roll\n    command: od -An -N8 -tx8 /dev/urandom\n",
    );
    let rec = recorded(&a, &flow.display().to_string());
    let (report, _) = report(&a, &rec);
    assert_fields(&report, "output", "roll", Value::Null, "/payload_hash");
    assert_ne!(report["recorded"], report["actual"]);
}

/// Two recorded causal events swapped: the same events in another order.
/// The report says so, with both whole events, rather than a changed id.
#[test]
fn a_changed_event_order_reports_both_events() {
    let a = Awr::new();
    let rec = recorded(&a, "examples/summarize.yaml");
    let path = rec.join("causal.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines.swap(2, 3);
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let without_time = |line: &str| {
        let mut v: Value = serde_json::from_str(line).unwrap();
        v.as_object_mut().unwrap().remove("timestamp_ns");
        v
    };
    let (report, stderr) = report(&a, &rec);
    assert_eq!(report["kind"], "order", "{report}");
    assert_eq!(report["line"], 3);
    assert_eq!(report["pointer"], "");
    assert_eq!(report["recorded"], without_time(lines[2]));
    assert_eq!(report["actual"], without_time(lines[3]));
    let first: Value = serde_json::from_str(lines[2]).unwrap();
    assert_eq!(report["node"], first["agent_id"]);
    assert!(stderr.contains("kind      order"), "{stderr}");
}

/// A causal event the recording has and the replay does not.
#[test]
fn a_missing_event_reports_the_recorded_one() {
    let a = Awr::new();
    let rec = recorded(&a, "examples/summarize.yaml");
    let path = rec.join("causal.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    let mut added = last.clone();
    added["event_id"] = "0f0e0d0c-0b0a-4908-8706-050403020100".into();
    added["parent_event_id"] = last["event_id"].clone();
    std::fs::write(&path, format!("{text}{added}\n")).unwrap();
    let (report, _) = report(&a, &rec);
    assert_eq!(report["kind"], "missing-event", "{report}");
    assert_eq!(report["shape"], "recorded-causal");
    assert_eq!(report["pointer"], "");
    assert_eq!(report["recorded"]["event_id"], added["event_id"]);
    assert_eq!(report["actual"], Value::Null);
    assert_eq!(report["node"], last["agent_id"]);
}

/// Causal events cut short: the replay has events the recording lacks.
#[test]
fn an_extra_event_reports_the_replays_one() {
    let a = Awr::new();
    let rec = recorded(&a, "examples/summarize.yaml");
    let path = rec.join("causal.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    let kept: String = text.lines().take(5).map(|l| format!("{l}\n")).collect();
    std::fs::write(&path, kept).unwrap();
    let sixth: Value = serde_json::from_str(text.lines().nth(5).unwrap()).unwrap();
    let (report, _) = report(&a, &rec);
    assert_eq!(report["kind"], "extra-event", "{report}");
    assert_eq!(report["shape"], "recorded-causal");
    assert_eq!(report["line"], 6);
    assert_eq!(report["recorded"], Value::Null);
    assert_eq!(report["actual"]["event_id"], sixth["event_id"]);
    assert_eq!(report["node"], sixth["agent_id"]);
}

/// The workflow file changed since it was recorded: both content hashes,
/// at the manifest's pointer.
#[test]
fn a_changed_workflow_reports_both_hashes() {
    let a = Awr::new();
    let rec = recorded(&a, "examples/summarize.yaml");
    let root = crate::util::repo_root();
    let flow = a.write(
        "moved/summarize.yaml",
        &format!(
            "{}# edited\n",
            std::fs::read_to_string(root.join("examples/summarize.yaml")).unwrap()
        ),
    );
    let status = std::process::Command::new("cp")
        .arg("-r")
        .arg(root.join("examples/fixtures"))
        .arg(flow.parent().unwrap())
        .status()
        .unwrap();
    assert!(status.success());
    let mut hash = Value::Null;
    edit_json(&rec.join("manifest.json"), |v| {
        v["workflow"]["path"] = flow.display().to_string().into();
        hash = v["workflow"]["contentHash"].clone();
    });
    let (report, stderr) = report(&a, &rec);
    assert_fields(
        &report,
        "workflow",
        "",
        Value::Null,
        "/workflow/contentHash",
    );
    assert_eq!(report["recorded"], hash);
    let now = report["actual"].as_str().unwrap();
    assert!(
        now.starts_with("sha256:") && report["actual"] != hash,
        "{report}"
    );
    assert!(stderr.contains("kind      workflow"), "{stderr}");
}

/// Records the HTTP tool-loop example against the fake model server, then
/// applies `spoil` to its one node file.
async fn spoiled_http_recording(a: &Awr, spoil: impl FnOnce(&mut Value)) -> std::path::PathBuf {
    let server = FakeModel::start().await.unwrap();
    let yaml = std::fs::read_to_string(crate::util::repo_root().join("examples/http/openai.yaml"))
        .unwrap()
        .replace("http://127.0.0.1:8089", &server.base_url());
    let flow = a.write("openai.yaml", &yaml);
    let rec = a.dir.path().join("rec-openai");
    let (flow, out) = (flow.display().to_string(), rec.display().to_string());
    let done = tokio::task::block_in_place(|| a.run(&["record-fixtures", &flow, "--out", &out]));
    assert_eq!(done.code, 0, "{}", done.stderr);
    drop(server);
    edit_json(&rec.join("nodes/openai-agent/operator.json"), spoil);
    rec
}

/// A recorded tool result edited: the replay's next turn sends the model
/// another conversation. The turn, the pointer and both values.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_turn_reports_the_turn_and_both_values() {
    let a = Awr::new();
    let rec = spoiled_http_recording(&a, |v| {
        let tool = v["calls"][0]["events"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .find(|e| e["type"] == "agent:tool")
            .unwrap();
        let output = tool["toolOutput"].to_string().replacen("hi", "hI", 1);
        tool["toolOutput"] = serde_json::from_str(&output).unwrap();
    })
    .await;
    let (report, stderr) = tokio::task::block_in_place(|| report(&a, &rec));
    assert_fields(
        &report,
        "turn",
        "operator",
        json!(0),
        "/messages/2/results/0/content",
    );
    assert_eq!(report["turn"], 1);
    let (recorded, actual) = (
        report["recorded"].as_str().unwrap(),
        report["actual"].as_str().unwrap(),
    );
    assert!(recorded.contains("hi") && actual.contains("hI"), "{report}");
    assert!(stderr.contains("turn      1"), "{stderr}");
}

/// A recorded call cut after its tool call: the replay asks for a turn
/// the recording does not hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extra_turn_reports_the_turn_the_recording_lacks() {
    let a = Awr::new();
    let rec = spoiled_http_recording(&a, |v| {
        let events = v["calls"][0]["events"].as_array_mut().unwrap();
        let tool = events
            .iter()
            .position(|e| e["type"] == "agent:tool")
            .unwrap();
        events.truncate(tool + 1);
        v["calls"][0]["turns"] = Value::Array(Vec::new());
    })
    .await;
    let (report, _) = tokio::task::block_in_place(|| report(&a, &rec));
    assert_fields(&report, "extra-turn", "operator", json!(0), "/messages");
    assert_eq!(report["turn"], 1);
    assert_eq!(report["recorded"], Value::Null);
    assert_eq!(report["recordedTurns"], 1);
    let sent = report["actual"].as_array().expect("the turn's messages");
    assert_eq!(sent.last().unwrap()["role"], "tool", "{report}");
}

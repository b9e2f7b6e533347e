//! `awr record-fixtures` and `awr verify-determinism`: the example
//! workflows recorded and verified (exit 0), an edited recording or a
//! workflow that now asks something else diverges (exit 1, naming node, call
//! and pointer), randomness in a `command` node diverges, a bad recording is
//! refused (exit 2), a replay that cannot run exits 3, and no key reaches a
//! recording.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use awr_tests::fake_model::FakeModel;
use serde_json::Value;

use crate::util::{Awr, Output, examples};

fn record(a: &Awr, flow: &str, out: &Path) -> Output {
    a.run(&["record-fixtures", flow, "--out", &out.display().to_string()])
}

pub(crate) fn verify(a: &Awr, recording: &Path) -> Output {
    a.run(&["verify-determinism", &recording.display().to_string()])
}

pub(crate) fn recorded(a: &Awr, flow: &str) -> PathBuf {
    let name = Path::new(flow)
        .file_stem()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let out = a.dir.path().join(format!("rec-{name}"));
    let done = record(a, flow, &out);
    assert_eq!(done.code, 0, "record {flow}: {}", done.stderr);
    out
}

pub(crate) fn edit_json(path: &Path, edit: impl FnOnce(&mut Value)) {
    let mut value: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    edit(&mut value);
    std::fs::write(path, serde_json::to_vec_pretty(&value).unwrap()).unwrap();
}

/// Every example, recorded, verifies: twice, exit 0. `for-each` runs two
/// items at once: their calls are served by node run, whatever order the
/// replay makes them in.
#[test]
fn every_example_recorded_verifies() {
    let a = Awr::new();
    for flow in examples() {
        let rec = recorded(&a, &flow);
        for pass in 0..2 {
            let out = verify(&a, &rec);
            assert_eq!(out.code, 0, "{flow} pass {pass}: {}", out.stderr);
            assert!(out.stderr.contains("IDENTICAL"), "{flow}: {}", out.stderr);
        }
        let manifest: Value =
            serde_json::from_str(&std::fs::read_to_string(rec.join("manifest.json")).unwrap())
                .unwrap();
        assert_eq!(manifest["complete"], true, "{flow}");
        for file in walk(&rec) {
            let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", file.display());
        }
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// Editing one byte of one recorded prompt: the workflow now sends another
/// request than the recording holds, a divergence naming node, call and
/// the pointer, with both values; never a default answer.
#[test]
fn a_one_byte_prompt_change_diverges_naming_node_call_and_pointer() {
    let a = Awr::new();
    let rec = recorded(&a, "examples/research-pipeline.yaml");
    edit_json(&rec.join("nodes/research-pipeline/analyst.json"), |v| {
        let prompt = v["calls"][0]["input"]["prompt"]
            .as_str()
            .unwrap()
            .to_owned();
        let mut bytes = prompt.into_bytes();
        bytes[0] = if bytes[0] == b'X' { b'Y' } else { b'X' };
        v["calls"][0]["input"]["prompt"] = Value::String(String::from_utf8(bytes).unwrap());
    });
    let out = verify(&a, &rec);
    assert_eq!(out.code, 1, "{}", out.stderr);
    for needle in [
        "DIVERGED",
        "node analyst call 0",
        "at /prompt",
        "recorded \"X",
        "sent ",
    ] {
        assert!(out.stderr.contains(needle), "{needle}: {}", out.stderr);
    }
}

/// A call the recording lacks (exhaustion) and recorded calls never made
/// (shortfall) are divergences from the recording, each named.
#[test]
fn exhaustion_and_shortfall_are_divergences() {
    let a = Awr::new();
    let rec = recorded(&a, "examples/research-pipeline.yaml");
    let writer = rec.join("nodes/research-pipeline/writer.json");
    let original = std::fs::read(&writer).unwrap();
    edit_json(&writer, |v| {
        let call = v["calls"][0].clone();
        v["calls"].as_array_mut().unwrap().push(call);
    });
    let out = verify(&a, &rec);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(
        out.stderr.contains(
            "shortfall: node writer of research-pipeline made 1 call(s); the recording has 2: call 1 was never made"
        ),
        "{}",
        out.stderr
    );
    std::fs::write(&writer, &original).unwrap();
    edit_json(&writer, |v| v["calls"] = Value::Array(Vec::new()));
    let out = verify(&a, &rec);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("no fixture for call 0"),
        "{}",
        out.stderr
    );
}

/// A `command` node that reads the OS's randomness: the two replays differ,
/// and the report shows where and both values.
#[test]
fn randomness_in_a_command_diverges_with_the_path_and_both_values() {
    let a = Awr::new();
    let flow = a.write(
        "dice.yaml",
        "name: dice\nnodes:\n  - id: roll\n    command: od -An -N8 -tx8 /dev/urandom\n",
    );
    let rec = recorded(&a, &flow.display().to_string());
    let out = verify(&a, &rec);
    assert_eq!(out.code, 1, "{}", out.stderr);
    // The first replay departs from the recorded run's causal events.
    for needle in [
        "DIVERGED (recorded-causal)",
        "path ",
        "run A ",
        "run B ",
        "chain ",
    ] {
        assert!(out.stderr.contains(needle), "{needle}: {}", out.stderr);
    }
    let json = a.run(&["verify-determinism", "--json", &rec.display().to_string()]);
    assert_eq!(json.code, 1);
    let report: Value = serde_json::from_str(json.stdout.trim()).unwrap();
    assert_eq!(report["result"], "diverged");
    assert_ne!(report["a"], report["b"]);
    assert!(
        report["pointer"].as_str().unwrap().starts_with('/'),
        "{report}"
    );
}

/// A change that spoils a copy of a recording.
type Spoil<'a> = Box<dyn Fn(&Path) + 'a>;

/// A recording that is not whole or not valid is refused with exit 2 and
/// the file named, never a panic; one whose workflow is gone exits 3.
#[test]
fn bad_recordings_exit_2_and_a_gone_workflow_exits_3() {
    let a = Awr::new();
    let good = recorded(&a, "examples/summarize.yaml");
    let copy = |name: &str| {
        let dir = a.dir.path().join(name);
        for file in walk(&good) {
            let to = dir.join(file.strip_prefix(&good).unwrap());
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::copy(&file, &to).unwrap();
        }
        dir
    };
    let node_file = |dir: &Path| walk(&dir.join("nodes")).remove(0);
    let cases: Vec<(&str, Spoil<'_>, &str)> = vec![
        (
            "incomplete",
            Box::new(|d| edit_json(&d.join("manifest.json"), |v| v["complete"] = false.into())),
            "complete: false",
        ),
        (
            "truncated",
            Box::new(|d| {
                std::fs::write(d.join("manifest.json"), b"{\"formatVersion\": 1, \"comp").unwrap()
            }),
            "manifest.json",
        ),
        (
            "garbage",
            Box::new(|d| {
                let f = node_file(d);
                let mut b = std::fs::read(&f).unwrap();
                b.extend_from_slice(b"}}trailing");
                std::fs::write(f, b).unwrap();
            }),
            ".json",
        ),
        (
            "utf8",
            Box::new(|d| std::fs::write(node_file(d), b"{\"calls\": [\"\xff\xfe\"]}").unwrap()),
            ".json",
        ),
        (
            "nul",
            Box::new(|d| std::fs::write(node_file(d), b"{\"calls\": []}\0").unwrap()),
            ".json",
        ),
        (
            "duplicate",
            Box::new(|d| {
                let c = std::fs::read_to_string(d.join("causal.jsonl")).unwrap();
                let first = c.lines().next().unwrap().to_owned();
                std::fs::write(d.join("causal.jsonl"), format!("{c}{first}\n")).unwrap();
            }),
            "appears twice",
        ),
        (
            "dangling",
            Box::new(|d| {
                let c = std::fs::read_to_string(d.join("causal.jsonl")).unwrap();
                let kept: Vec<&str> = c.lines().skip(1).collect();
                std::fs::write(d.join("causal.jsonl"), kept.join("\n") + "\n").unwrap();
            }),
            "not in the recording",
        ),
        (
            "self",
            Box::new(|d| {
                let c = std::fs::read_to_string(d.join("causal.jsonl")).unwrap();
                let mut e: Value = serde_json::from_str(c.lines().next().unwrap()).unwrap();
                e["parent_event_id"] = e["event_id"].clone();
                std::fs::write(d.join("causal.jsonl"), format!("{e}\n")).unwrap();
            }),
            "its own parent",
        ),
        (
            "newer",
            Box::new(|d| edit_json(&d.join("manifest.json"), |v| v["formatVersion"] = 99.into())),
            "newer",
        ),
        (
            "format-0",
            Box::new(|d| edit_json(&d.join("manifest.json"), |v| v["formatVersion"] = 0.into())),
            "format 0 is no recording format",
        ),
        (
            "renamed",
            Box::new(|d| {
                edit_json(&d.join("manifest.json"), |v| {
                    v["workflow"]["name"] = "other".into()
                })
            }),
            "manifest.json: workflow `other`",
        ),
        (
            // A FIFO in place of a node file: refused, never waited on.
            "fifo",
            Box::new(|d| {
                let f = node_file(d);
                std::fs::remove_file(&f).unwrap();
                let made = std::process::Command::new("mkfifo")
                    .arg(&f)
                    .status()
                    .unwrap();
                assert!(made.success());
            }),
            "not a regular file",
        ),
    ];
    for (name, spoil, needle) in cases {
        let dir = copy(name);
        spoil(&dir);
        let out = verify(&a, &dir);
        assert_eq!(out.code, 2, "{name}: {}", out.stderr);
        assert!(
            out.stderr.contains(needle),
            "{name}: {needle}: {}",
            out.stderr
        );
        assert!(!out.stderr.contains("panicked"), "{name}: {}", out.stderr);
    }
    let gone = copy("gone");
    edit_json(&gone.join("manifest.json"), |v| {
        v["workflow"]["path"] = "/nonexistent/flow.yaml".into()
    });
    let out = verify(&a, &gone);
    assert_eq!(out.code, 3, "{}", out.stderr);
    assert!(out.stderr.contains("is gone"), "{}", out.stderr);
}

/// A recording is never written over, and no key reaches it: a key in the
/// environment that the run's input repeats is masked in every file.
#[test]
fn a_recording_keeps_no_key_and_is_never_overwritten() {
    let a = Awr::new();
    let key = "sk-ant-fake-0123456789abcdefghij";
    let out_dir = a.dir.path().join("secret-rec");
    let done = a.run_in(
        &crate::util::repo_root(),
        &[("ANTHROPIC_API_KEY", key)],
        &[
            "record-fixtures",
            "examples/summarize.yaml",
            "--input-text",
            &format!("Summarise this: the key is {key}."),
            "--out",
            &out_dir.display().to_string(),
        ],
    );
    assert_eq!(done.code, 0, "{}", done.stderr);
    let files = walk(&out_dir);
    assert!(files.len() >= 3, "{files:?}");
    for file in files {
        let bytes = std::fs::read(&file).unwrap();
        assert!(
            !bytes.windows(key.len()).any(|w| w == key.as_bytes()),
            "{} holds the key",
            file.display()
        );
    }
    let again = record(&a, "examples/summarize.yaml", &out_dir);
    assert_eq!(again.code, 2, "{}", again.stderr);
    assert!(
        again.stderr.contains("never overwritten"),
        "{}",
        again.stderr
    );
}

/// The HTTP tool-loop example, recorded against the fake model server,
/// verifies with the server gone: no socket is needed to replay it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_tool_loop_example_verifies_without_its_server() {
    let a = Awr::new();
    let server = FakeModel::start().await.unwrap();
    let yaml = std::fs::read_to_string(crate::util::repo_root().join("examples/http/openai.yaml"))
        .unwrap()
        .replace("http://127.0.0.1:8089", &server.base_url());
    let flow = a.write("openai.yaml", &yaml);
    let rec = a.dir.path().join("rec-openai");
    let done = tokio::task::block_in_place(|| record(&a, &flow.display().to_string(), &rec));
    assert_eq!(done.code, 0, "{}", done.stderr);
    let calls: Value = serde_json::from_str(
        &std::fs::read_to_string(rec.join("nodes/openai-agent/operator.json")).unwrap(),
    )
    .unwrap();
    let events = calls["calls"][0]["events"].as_array().unwrap();
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "agent:tool" && e["toolName"] == "shell"),
        "the tool call is recorded: {events:?}"
    );
    let turns = calls["calls"][0]["turns"].as_array().unwrap();
    assert_eq!(turns[0]["turn"], 1, "the second turn is checked: {turns:?}");
    drop(server);
    let out = tokio::task::block_in_place(|| verify(&a, &rec));
    assert_eq!(out.code, 0, "{}", out.stderr);
    // And as a run of its own, the model server gone: the recorded answer.
    let (flow_arg, rec_arg) = (flow.display().to_string(), rec.display().to_string());
    let replayed =
        tokio::task::block_in_place(|| a.run(&["run", &flow_arg, "--replay-from", &rec_arg]));
    assert_eq!(replayed.code, 0, "{}", replayed.stderr);
    assert_eq!(replayed.stdout, done.stdout, "the recorded run's output");

    // One byte of the recorded tool result: the replay's loop sends the
    // model another second turn than the recording holds.
    let file = rec.join("nodes/openai-agent/operator.json");
    let original = std::fs::read(&file).unwrap();
    edit_json(&file, |v| {
        let tool = v["calls"][0]["events"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .find(|e| e["type"] == "agent:tool")
            .unwrap();
        let output = tool["toolOutput"].to_string().replacen("hi", "hI", 1);
        tool["toolOutput"] = serde_json::from_str(&output).unwrap();
    });
    let out = tokio::task::block_in_place(|| verify(&a, &rec));
    assert_eq!(out.code, 1, "{}", out.stderr);
    for needle in [
        "DIVERGED (recording)",
        "node operator call 0",
        "turn 1",
        "at /messages/2/results/0/content",
        "hI",
    ] {
        assert!(out.stderr.contains(needle), "{needle}: {}", out.stderr);
    }

    // The same byte in what the recording says that turn sends.
    std::fs::write(&file, &original).unwrap();
    edit_json(&file, |v| {
        let content = &mut v["calls"][0]["turns"][0]["messages"][1]["results"][0]["content"];
        *content = content.as_str().unwrap().replacen("hi", "hI", 1).into();
    });
    let out = tokio::task::block_in_place(|| verify(&a, &rec));
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("at /messages/2/results/0/content"),
        "{}",
        out.stderr
    );
}

/// `awr run --replay-from`: the workflow runs on the recording instead of
/// its providers, to the recorded output; an edited request fails the node
/// that sends it, naming call and pointer; recorded calls left unserved
/// fail the run; an unfinished recording is refused before anything runs.
#[test]
fn a_run_replays_from_a_recording_and_fails_where_it_departs_from_it() {
    let a = Awr::new();
    let flow = "examples/research-pipeline.yaml";
    let live = a.run(&["run", flow]);
    assert_eq!(live.code, 0, "{}", live.stderr);
    let rec = recorded(&a, flow);
    let rec_arg = rec.display().to_string();
    let replayed = a.run(&["run", flow, "--replay-from", &rec_arg]);
    assert_eq!(replayed.code, 0, "{}", replayed.stderr);
    assert_eq!(replayed.stdout, live.stdout, "the recorded output");

    let analyst = rec.join("nodes/research-pipeline/analyst.json");
    let original = std::fs::read(&analyst).unwrap();
    edit_json(&analyst, |v| {
        let prompt = v["calls"][0]["input"]["prompt"].as_str().unwrap();
        v["calls"][0]["input"]["prompt"] = format!("X{}", &prompt[1..]).into();
    });
    let out = a.run(&["run", flow, "--replay-from", &rec_arg]);
    assert_ne!(out.code, 0, "{}", out.stderr);
    for needle in ["replay mismatch", "node analyst call 0", "at /prompt"] {
        assert!(out.stderr.contains(needle), "{needle}: {}", out.stderr);
    }

    std::fs::write(&analyst, &original).unwrap();
    let writer = rec.join("nodes/research-pipeline/writer.json");
    edit_json(&writer, |v| {
        let mut call = v["calls"][0].clone();
        call["instanceCall"] = 1.into();
        v["calls"].as_array_mut().unwrap().push(call);
    });
    let out = a.run(&["run", flow, "--replay-from", &rec_arg]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("shortfall: node writer"),
        "{}",
        out.stderr
    );

    edit_json(&rec.join("manifest.json"), |v| v["complete"] = false.into());
    let out = a.run(&["run", flow, "--replay-from", &rec_arg]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("complete: false"), "{}", out.stderr);
}

/// A recorder killed with SIGKILL midway leaves a recording that says it
/// is not whole (`complete: false`): verifying it is refused with exit 2,
/// and recording again into it is refused rather than overwriting it.
#[test]
fn a_recorder_killed_midway_leaves_a_recording_refused_as_unfinished() {
    let a = Awr::new();
    let flow = a.write(
        "slow.yaml",
        "name: slow\nnodes:\n  - id: wait\n    command: sleep 60\n",
    );
    let out = a.dir.path().join("rec-killed");
    let (flow_arg, out_arg) = (flow.display().to_string(), out.display().to_string());
    let mut recorder = a
        .command(&["record-fixtures", &flow_arg, "--out", &out_arg])
        .spawn()
        .unwrap();
    let manifest = out.join("manifest.json");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !manifest.is_file() {
        assert!(std::time::Instant::now() < deadline, "no manifest.json");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    recorder.kill().unwrap();
    recorder.wait().unwrap();
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(&manifest).unwrap()).unwrap();
    assert_eq!(written["complete"], false);
    let out = verify(&a, Path::new(&out_arg));
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("complete: false"), "{}", out.stderr);
    let again = record(&a, &flow_arg, Path::new(&out_arg));
    assert_eq!(again.code, 2, "{}", again.stderr);
    let kept: Value = serde_json::from_str(&std::fs::read_to_string(&manifest).unwrap()).unwrap();
    assert_eq!(kept, written, "the unfinished recording is left as it was");
}

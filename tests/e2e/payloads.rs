//! Large payloads through the `awr` binary: a 50 MB input is stored once
//! across the run's records (log, snapshot, transcript) and every reader
//! gives it back whole; an input over the limit is refused before any run.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use domain::{RunSnapshot, RuntimeEvent};
use serde_json::{Value, json};

use crate::util::{Awr, run_id_of};

/// 50 MB of text that never repeats a 4 KiB window, and needs no JSON escape.
fn payload() -> String {
    const BYTES: usize = 50_000_000;
    let mut text = String::with_capacity(BYTES + 16);
    let mut i = 0u64;
    while text.len() < BYTES {
        let _ = write!(text, "w{i:08} ");
        i += 1;
    }
    text
}

/// Every file under `dir` with its size, a file of several names (hard
/// links) once: what is stored.
fn files(dir: &Path) -> Vec<(PathBuf, u64)> {
    fn walk(dir: &Path, seen: &mut std::collections::HashSet<(u64, u64)>) -> Vec<(PathBuf, u64)> {
        use std::os::unix::fs::MetadataExt;
        let mut out = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let meta = entry.metadata().unwrap();
            if meta.is_dir() {
                out.extend(walk(&entry.path(), seen));
            } else if seen.insert((meta.dev(), meta.ino())) {
                out.push((entry.path(), meta.len()));
            }
        }
        out
    }
    walk(dir, &mut std::collections::HashSet::new())
}

fn count(haystack: &[u8], needle: &[u8]) -> usize {
    memchr::memmem::find_iter(haystack, needle).count()
}

/// A one-agent workflow whose mock agent answers with `answer`.
fn echo_workflow(awr: &Awr, answer: &str) -> PathBuf {
    let flow = awr.write(
        "flow/big.yaml",
        "name: big\nagents:\n  echo:\n    provider: mock\n    system_prompt: Repeat what you get.\nsteps:\n  - agent: echo\n",
    );
    let fixture = json!({"calls": [{"output": {"text": answer, "sessionId": "s-echo"}}]});
    awr.write("flow/fixtures/big/echo.json", &fixture.to_string());
    flow
}

#[test]
fn a_50_mb_input_is_stored_once_and_every_reader_gives_it_back() {
    let awr = Awr::new();
    let text = payload();
    // The agent answers with the input itself, so the output (node:completed,
    // agent:complete, flow:completed, the snapshot, the transcript) carries it too.
    let flow = echo_workflow(&awr, &text);
    let input = awr.write("input.json", &serde_json::to_string(&text).unwrap());
    let input_arg = format!("@{}", input.display());
    let out = awr.run(&["run", flow.to_str().unwrap(), "--input", &input_arg]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.strip_suffix('\n') == Some(text.as_str()),
        "awr run prints the whole output"
    );
    let run = run_id_of(&out);

    let stored = files(&awr.storage());
    let total: u64 = stored.iter().map(|(_, n)| n).sum();
    assert!(
        total < text.len() as u64 * 12 / 10,
        "{total} bytes stored for a {}-byte payload: {stored:#?}",
        text.len()
    );
    let needle = &text.as_bytes()[..4096];
    let holding: Vec<_> = stored
        .iter()
        .filter(|(path, _)| count(&std::fs::read(path).unwrap(), needle) > 0)
        .collect();
    assert_eq!(holding.len(), 1, "the payload is in one file: {holding:#?}");
    let blob = std::fs::read(&holding[0].0).unwrap();
    assert_eq!(count(&blob, text.as_bytes()), 1, "once in that file");

    // `awr events --json`: every event that carries it has it whole.
    let out = awr.run(&["events", &run, "--json"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let events: Vec<RuntimeEvent> = out
        .stdout
        .lines()
        .map(|l| RuntimeEvent::from_json(l.as_bytes()).unwrap())
        .collect();
    let lines: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let of_type = |t: &str| lines.iter().find(|l| l["type"] == t).unwrap().clone();
    assert!(of_type("flow:started")["input"] == text.as_str());
    assert!(of_type("node:started")["input"]["data"] == text.as_str());
    assert!(of_type("agent:start")["prompt"] == text.as_str());
    assert!(of_type("node:completed")["output"]["data"] == text.as_str());
    assert!(of_type("flow:completed")["output"] == text.as_str());

    // `awr show --json` is the snapshot, with the output whole, and equals the fold.
    let out = awr.run(&["show", &run, "--json"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let shown: RunSnapshot = serde_json::from_str(&out.stdout).unwrap();
    assert!(shown.outputs["echo"].data().unwrap() == text.as_str());
    assert!(
        RunSnapshot::fold(&events).unwrap() == shown,
        "fold(events) == snapshot"
    );

    // `awr transcript --json`: the prompt and the answer, whole.
    let out = awr.run(&["transcript", &run, "--json"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let user: Value = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|l| l["type"] == "message.user")
        .unwrap();
    assert!(user["payload"]["blocks"][0]["text"] == text.as_str());
}

#[test]
fn an_input_over_the_limit_is_refused_naming_its_size_and_the_limit() {
    let awr = Awr::new();
    let flow = echo_workflow(&awr, "ok");
    // 64 MiB + 1 byte, sparse: nothing is written to disk.
    let input = awr.write("huge.json", "");
    std::fs::File::options()
        .write(true)
        .open(&input)
        .unwrap()
        .set_len(64 * 1024 * 1024 + 1)
        .unwrap();
    let arg = format!("@{}", input.display());
    let out = awr.run(&["run", flow.to_str().unwrap(), "--input", &arg]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("67108865 bytes"), "{}", out.stderr);
    assert!(out.stderr.contains("67108864"), "{}", out.stderr);
    assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
    assert!(awr.run_ids().is_empty(), "no run is created");

    // A stream with no end is not read at all.
    let out = awr.run_within(
        60,
        &["run", flow.to_str().unwrap(), "--input", "@/dev/zero"],
    );
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("not a regular file"), "{}", out.stderr);
    assert!(awr.run_ids().is_empty(), "no run is created");
}

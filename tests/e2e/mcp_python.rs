//! `awr mcp` driven by the official MCP SDK for Python (`mcp`, pinned and
//! installed by `.ci/install-mcp-python`; `cargo xtask test` sets
//! `AWR_MCP_PYTHON` to its python). The client script
//! (`tests/mcp/python_client.py`) starts a run, waits for it, reads its
//! events from an offset, and pauses and resumes another; each answer is
//! checked here against the runs' logs.

use std::path::PathBuf;

use serde_json::Value;

use crate::mcp_server::project;
use crate::util::{Awr, awr_bin, repo_root};

/// The SDK's python, or `None` (after saying the test skipped).
fn python() -> Option<PathBuf> {
    match std::env::var_os("AWR_MCP_PYTHON") {
        Some(path) if !path.is_empty() => Some(PathBuf::from(path)),
        _ => {
            awr_tests::skipped("AWR_MCP_PYTHON is not set", "cargo xtask test");
            None
        }
    }
}

#[test]
fn the_python_sdk_starts_waits_reads_pauses_and_resumes_runs_through_awr_mcp() {
    let Some(python) = python() else {
        return;
    };
    let awr = Awr::new();
    let root = project(&awr);
    let out = std::process::Command::new(python)
        .arg(repo_root().join("tests/mcp/python_client.py"))
        .arg(awr_bin())
        .arg(awr.storage_arg())
        .arg(&root)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let said: Value = serde_json::from_slice(&out.stdout).unwrap();

    assert_eq!(said["server"], "awr");
    assert_eq!(
        said["tools"].as_array().unwrap().len(),
        15,
        "{}",
        said["tools"]
    );

    // The first run: its end, and a page of its log from offset 2.
    let run = said["run"].as_str().unwrap();
    let log = awr.events(run);
    assert_eq!(said["waited"]["status"], "completed");
    assert_eq!(said["waited"]["lastOffset"], log.len());
    assert_eq!(said["waited"]["output"], log.last().unwrap()["output"]);
    assert_eq!(said["page"]["events"], Value::Array(log[2..5].to_vec()));
    assert_eq!(said["page"]["nextOffset"], 5);
    assert_eq!(said["page"]["more"], true);

    // The second: paused, then resumed, each where the log says.
    let gated = said["gated"].as_str().unwrap();
    let log = awr.events(gated);
    let at = |key: &str| log[said[key]["offset"].as_u64().unwrap() as usize - 1].clone();
    let pause = at("paused");
    assert_eq!(pause["type"], "command:received");
    assert_eq!(pause["command"]["type"], "pause");
    assert_eq!(pause["accepted"], true);
    assert_eq!(said["waitedPaused"]["status"], "paused");
    assert!(
        log.iter().any(|e| e["type"] == "flow:paused"),
        "the pause is on record"
    );
    let resumed = at("resumed");
    assert_eq!(resumed["type"], "flow:resumed");
    assert_eq!(resumed["message"], "go on");
    assert_eq!(said["waitedResumed"]["status"], "completed");
    assert_eq!(log.last().unwrap()["type"], "flow:completed");

    assert_eq!(said["refused"]["isError"], true);
    assert_eq!(said["refused"]["structured"]["error"], "not_found");
}

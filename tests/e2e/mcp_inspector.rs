//! awr's MCP server driven by the MCP Inspector's CLI mode
//! (`@modelcontextprotocol/inspector`, installed pinned by
//! `.ci/install-agent-clis`): over stdio (`awr mcp`) and over streamable
//! HTTP (`/mcp` on `awr serve`, with a token).

use std::path::Path;
use std::process::Command;

use awr_tests::serve::Served;
use serde_json::Value;

use crate::mcp_server::project;
use crate::real_clis::clis_dir;
use crate::util::{Awr, awr_bin};

/// `mcp-inspector --cli TARGET... ARGS...`, its JSON answer.
fn inspect(clis: &Path, target: &[&str], args: &[&str]) -> Value {
    let out = Command::new(clis.join("mcp-inspector"))
        .arg("--cli")
        .args(target)
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

#[test]
fn the_inspector_lists_and_calls_awrs_tools_over_stdio_and_http() {
    let Some(clis) = clis_dir() else {
        return;
    };
    let awr = Awr::new();
    let root = project(&awr);
    let ran = awr.run_in(&root, &[], &["run", "summarize.yaml"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    let run = crate::util::run_id_of(&ran);

    // Over stdio, a server of its own for each call.
    let (bin, storage) = (awr_bin().to_str().unwrap(), awr.storage_arg());
    let storage = storage.to_str().unwrap();
    let root_arg = root.to_str().unwrap();
    let stdio = [bin, "--storage", storage, "mcp", "--root", root_arg];
    let tools = inspect(&clis, &stdio, &["--method", "tools/list"]);
    let tools = tools["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 15, "{tools:?}");
    assert!(
        tools
            .iter()
            .all(|t| t["outputSchema"].is_object() && t["inputSchema"].is_object())
    );
    let shown = inspect(
        &clis,
        &stdio,
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "get_run",
            "--tool-arg",
            &format!("runId={run}"),
        ],
    );
    assert_eq!(shown["isError"], false, "{shown}");
    assert_eq!(shown["structuredContent"]["status"], "completed");
    let resources = inspect(&clis, &stdio, &["--method", "resources/list"]);
    let uri = format!("awr://runs/{run}/transcript");
    assert!(
        resources["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["uri"] == uri.as_str()),
        "{resources}"
    );

    // Over HTTP, with the server's token: the run started is its caller's.
    let token = "inspector-token-0123456789abcdef012345";
    let server = Served::start(awr_bin(), awr.storage(), &root, &["--token", token]);
    let url = format!("{}/mcp", server.base);
    let header = format!("Authorization: Bearer {token}");
    let http = [
        url.as_str(),
        "--transport",
        "http",
        "--header",
        header.as_str(),
    ];
    let started = inspect(
        &clis,
        &http,
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "start_run",
            "--tool-arg",
            "path=summarize.yaml",
        ],
    );
    let second = started["structuredContent"]["runId"]
        .as_str()
        .unwrap()
        .to_owned();
    let waited = inspect(
        &clis,
        &http,
        &[
            "--method",
            "tools/call",
            "--tool-name",
            "wait_run",
            "--tool-arg",
            &format!("runId={second}"),
            "--tool-arg",
            "timeoutSeconds=30",
        ],
    );
    assert_eq!(
        waited["structuredContent"]["status"], "completed",
        "{waited}"
    );
    assert_eq!(
        awr.events(&second).last().unwrap()["type"],
        "flow:completed"
    );
    // Without the token, nothing.
    let refused = Command::new(clis.join("mcp-inspector"))
        .args([
            "--cli",
            url.as_str(),
            "--transport",
            "http",
            "--method",
            "tools/list",
        ])
        .output()
        .unwrap();
    assert!(!refused.status.success());
}

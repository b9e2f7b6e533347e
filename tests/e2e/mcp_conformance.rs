//! `/mcp` of `awr serve` against the MCP conformance suite
//! (`@modelcontextprotocol/conformance`, pinned, with the Node 22 it needs,
//! installed by `.ci/install-mcp-conformance`; `cargo xtask test` sets
//! `AWR_MCP_CONFORMANCE` to its directory). Scenarios that need the suite's
//! own reference fixtures are listed, each with its reason, in
//! `tests/mcp/conformance-baseline.yml`; the suite fails on any other failure
//! and on a listed one that passes.

use std::path::{Path, PathBuf};
use std::process::Command;

use awr_tests::serve::Served;
use serde_json::Value;

use crate::mcp_server::project;
use crate::util::{Awr, awr_bin, repo_root};

/// The suite's install directory, or `None` (after saying the test skipped).
fn suite_dir() -> Option<PathBuf> {
    match std::env::var_os("AWR_MCP_CONFORMANCE") {
        Some(dir) if !dir.is_empty() => Some(PathBuf::from(dir)),
        _ => {
            awr_tests::skipped("AWR_MCP_CONFORMANCE is not set", "cargo xtask test");
            None
        }
    }
}

/// The checks of one scenario's results in `out`, which the suite writes to
/// `server-SCENARIO-TIMESTAMP/checks.json`.
fn checks(out: &Path, scenario: &str) -> Vec<Value> {
    let prefix = format!("server-{scenario}-2");
    let dir = std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(&prefix)
        })
        .unwrap_or_else(|| panic!("no results of {scenario} in {}", out.display()));
    let text = std::fs::read_to_string(dir.join("checks.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn awrs_mcp_server_passes_the_conformance_suite_but_for_the_reference_fixtures() {
    let Some(suite) = suite_dir() else {
        return;
    };
    let awr = Awr::new();
    let root = project(&awr);
    let ran = awr.run_in(&root, &[], &["run", "summarize.yaml"]);
    assert_eq!(ran.code, 0, "{}", ran.stderr);
    // The suite sends no token: served without one, on loopback.
    let server = Served::start(awr_bin(), awr.storage(), &root, &["--no-auth"]);
    let out = awr.dir.path().join("conformance");
    let ran = Command::new(suite.join("bin/node"))
        .arg(suite.join("node_modules/@modelcontextprotocol/conformance/dist/index.js"))
        .args(["server", "--url", &format!("{}/mcp", server.base)])
        .arg("--expected-failures")
        .arg(repo_root().join("tests/mcp/conformance-baseline.yml"))
        .arg("--output-dir")
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&ran.stdout);
    assert!(
        ran.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    assert!(
        stdout.contains("Baseline check passed"),
        "the suite did not check the baseline:\n{stdout}"
    );

    // What awr is measured on: each check of these scenarios passed.
    for scenario in [
        "server-initialize",
        "ping",
        "tools-list",
        "resources-list",
        "dns-rebinding-protection",
    ] {
        let checks = checks(&out, scenario);
        let verdicts: Vec<_> = checks.iter().filter(|c| c["status"] != "INFO").collect();
        assert!(!verdicts.is_empty(), "{scenario}: no verdict in {checks:?}");
        for check in verdicts {
            assert_eq!(check["status"], "SUCCESS", "{scenario}: {check}");
        }
    }
    let listed = checks(&out, "tools-list");
    let listed = listed.iter().find(|c| c["id"] == "tools-list").unwrap();
    assert_eq!(listed["details"]["toolCount"], 15, "{listed}");
    // The rebinding check's refusal came from awr's Host check.
    let rebinding = checks(&out, "dns-rebinding-protection");
    let rejected = rebinding
        .iter()
        .find(|c| c["id"] == "localhost-host-rebinding-rejected")
        .unwrap();
    assert_eq!(rejected["details"]["statusCode"], 421, "{rejected}");
}

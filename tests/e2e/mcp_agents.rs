//! A real agent CLI orchestrates awr through awr's MCP server: Claude Code
//! (offline, against the fake model server) is given `awr mcp` as an MCP
//! server of its workflow (`mcp_servers:`, rendered into its own
//! `--mcp-config`), starts a workflow with `start_run` and waits for it
//! with `wait_run`. Both are then on record: the agent's tool calls in the
//! parent run, and the child run it started.

use std::sync::Arc;

use awr_tests::fake_model::FakeModel;
use serde_json::Value;

use crate::real_clis::{Cli, Scratch, clis_dir, offline_env};
use crate::util::{awr_bin, of_type, read_json_lines, repo_root, run_id_of};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_starts_a_workflow_through_awrs_mcp_server_and_waits_for_it() {
    let Some(bin) = clis_dir() else { return };
    let server = FakeModel::start().await.expect("fake model");
    let scratch = Scratch::new();
    let cli = Cli {
        provider: "claude-code",
        exe: "claude",
        model: "claude-sonnet-4-5",
        reports_usage: true,
    };
    let mut env = offline_env(&cli, &scratch, &server.base_url());
    // Every MCP tool in the request itself, not deferred behind Claude
    // Code's tool search (the fake model calls only tools it is offered).
    env.push(("ENABLE_TOOL_SEARCH".into(), "false".into()));
    // The workflow the agent starts, with its fixtures, under the MCP
    // server's root.
    let root = scratch.path("work");
    let examples = repo_root().join("examples");
    std::fs::copy(examples.join("summarize.yaml"), root.join("summarize.yaml")).unwrap();
    std::fs::create_dir_all(root.join("fixtures/summarize")).unwrap();
    for file in ["summarizer.json", "fact-checker.json"] {
        std::fs::copy(
            examples.join("fixtures/summarize").join(file),
            root.join("fixtures/summarize").join(file),
        )
        .unwrap();
    }
    let q = |s: &str| serde_json::to_string(s).unwrap();
    let storage = scratch.storage().display().to_string();
    let mut yaml = format!(
        "name: orchestrate\n\
         input: |\n  Start the summary, then wait for it.\n  \
         CALLTOOL mcp__awr__start_run {{\"path\": \"summarize.yaml\"}}\n  \
         CALLTOOL mcp__awr__wait_run {{\"runId\": \"$LAST_UUID\", \"timeoutSeconds\": 30}}\n\
         mcp_servers:\n  awr:\n    command: {awr}\n    args: [--storage, {storage}, mcp, --root, {root}]\n\
         agents:\n  lead:\n    provider: claude-code\n    executable: {exe}\n    model: {model}\n    \
         timeout: 180s\n    tools: [awr/start_run, awr/wait_run]\n    env:\n",
        awr = q(&awr_bin().display().to_string()),
        storage = q(&storage),
        root = q(&root.display().to_string()),
        exe = q(&bin.join("claude").display().to_string()),
        model = q(cli.model),
    );
    for (k, v) in &env {
        yaml.push_str(&format!("      {k}: {}\n", q(v)));
    }
    yaml.push_str("steps: [{agent: lead}]\n");
    let flow = scratch
        .write("orchestrate.yaml", &yaml)
        .display()
        .to_string();

    let scratch = Arc::new(scratch);
    let out = {
        let scratch = Arc::clone(&scratch);
        tokio::task::spawn_blocking(move || scratch.awr(240, &["run", &flow]))
            .await
            .unwrap()
    };
    assert_eq!(
        out.code, 0,
        "stdout:\n{}\nstderr:\n{}",
        out.stdout, out.stderr
    );
    let parent = run_id_of(&out);
    let events = |run: &str| {
        read_json_lines(
            &scratch
                .storage()
                .join("runs")
                .join(run)
                .join("events.ndjson"),
        )
    };

    // The agent's two calls of awr's tools, as it emitted them.
    let log = events(&parent);
    let tools: Vec<&Value> = of_type(&log, "agent:tool");
    let names: Vec<&str> = tools
        .iter()
        .map(|t| t["toolName"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["mcp__awr__start_run", "mcp__awr__wait_run"],
        "{log:?}"
    );
    let started = tools[0]["toolOutput"].to_string();
    let child = (std::fs::read_dir(scratch.storage().join("runs")).unwrap())
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|run| *run != parent && !run.starts_with('.'))
        .expect("the child run");
    assert!(started.contains(&child), "{started}");
    assert_eq!(tools[1]["toolInput"]["runId"], child.as_str());
    let waited = tools[1]["toolOutput"].to_string();
    assert!(waited.contains("completed"), "{waited}");

    // The child run: started by the local user through `awr mcp`, completed.
    let child_log = events(&child);
    assert_eq!(child_log[0]["type"], "flow:started");
    assert!(child_log[0]["startedBy"].as_str().unwrap().contains('@'));
    assert_eq!(child_log.last().unwrap()["type"], "flow:completed");
    // The agent's configuration was a file of its own in this user's
    // private directory, gone once it ended.
    let private = adapters_agents::process::private_dir();
    assert!(private.is_dir(), "{}", private.display());
    let node_run = tools[0]["nodeRunId"].as_str().unwrap();
    let left: Vec<_> = std::fs::read_dir(&private)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(node_run))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

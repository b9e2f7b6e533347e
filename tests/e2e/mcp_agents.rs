//! A real agent CLI orchestrates awr through awr's MCP server: Claude Code
//! (offline, against the fake model server) is given `awr mcp` as an MCP
//! server of its workflow (`mcp_servers:`, rendered into its own
//! `--mcp-config`), starts a workflow with `start_run` and waits for it
//! with `wait_run`. Both are then on record: the agent's tool calls in the
//! parent run, and the child run it started. Codex and Copilot call a
//! granted tool of a workflow's server in their own configuration.

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

/// Runs `cli` (offline, against the fake model) with `server-everything`
/// declared and only its `echo` granted, prompted to call `tool` (the
/// name the CLI offers `echo` under) and then `get-sum`, which it is not
/// granted. Returns the run's `agent:tool` events, the fake model's
/// requests and the scratch directory the CLI's home is in.
async fn granted_echo(
    cli: Cli,
    tool: &str,
) -> Option<(
    Vec<Value>,
    Vec<awr_tests::fake_model::RecordedRequest>,
    Arc<Scratch>,
)> {
    let bin = clis_dir()?;
    let server = FakeModel::start().await.expect("fake model");
    let scratch = Scratch::new();
    let env = offline_env(&cli, &scratch, &server.base_url());
    let q = |s: &str| serde_json::to_string(s).unwrap();
    let mut yaml = format!(
        "name: echo-{provider}\n\
         input: |\n  CALLTOOL {tool} {{\"message\": \"hi from awr\"}}\n  CALLTOOL get-sum {{\"a\": 1, \"b\": 2}}\n\
         mcp_servers:\n  ev:\n    command: {everything}\n    args: [stdio]\n    startup_timeout: 120s\n\
         agents:\n  coder:\n    provider: {provider}\n    executable: {exe}\n    model: {model}\n    \
         timeout: 120s\n    tools: [ev/echo]\n    env:\n",
        provider = cli.provider,
        everything = q(&bin.join("mcp-server-everything").display().to_string()),
        exe = q(&bin.join(cli.exe).display().to_string()),
        model = q(cli.model),
    );
    for (k, v) in &env {
        yaml.push_str(&format!("      {k}: {}\n", q(v)));
    }
    yaml.push_str("steps: [{agent: coder}]\n");
    let flow = scratch.write("echo.yaml", &yaml).display().to_string();
    let scratch = Arc::new(scratch);
    let out = {
        let scratch = Arc::clone(&scratch);
        tokio::task::spawn_blocking(move || scratch.awr(180, &["run", &flow]))
            .await
            .unwrap()
    };
    assert_eq!(
        out.code, 0,
        "stdout:\n{}\nstderr:\n{}",
        out.stdout, out.stderr
    );
    let run = run_id_of(&out);
    let log = read_json_lines(
        &scratch
            .storage()
            .join("runs")
            .join(&run)
            .join("events.ndjson"),
    );
    let tools = of_type(&log, "agent:tool").into_iter().cloned().collect();
    Some((tools, server.requests(), scratch))
}

/// Codex gets the workflow's server as a `-c mcp_servers.ev=…` override
/// holding only the granted tool, calls it, and the call is on record as
/// Codex emitted it (`mcp_tool_call`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_calls_a_granted_tool_of_a_workflow_mcp_server() {
    // A model Codex has no metadata of: it offers every MCP tool in the
    // request itself. For one it knows to support its tool search (gpt-5.5)
    // it defers them behind `tool_search`, which the fake model does not
    // call (docs/mcp.md).
    let cli = Cli {
        provider: "codex",
        exe: "codex",
        model: "gpt-5",
        reports_usage: true,
    };
    let Some((tools, requests, _)) = granted_echo(cli, "mcp__ev__echo").await else {
        return;
    };
    let offered: Vec<String> = (requests.iter())
        .map(|r| r.body["tools"].to_string())
        .collect();
    assert_eq!(tools.len(), 1, "{tools:?}; tools offered: {offered:?}");
    assert_eq!(tools[0]["toolName"], "echo");
    assert_eq!(tools[0]["toolInput"]["server"], "ev");
    assert_eq!(tools[0]["toolInput"]["arguments"]["message"], "hi from awr");
    let output = tools[0]["toolOutput"].to_string();
    assert!(output.contains("Echo: hi from awr"), "{output}");
    // The model was offered the server's granted tool alone.
    let offered: Vec<Vec<String>> = (requests.iter())
        .filter_map(|r| r.body["tools"].as_array())
        .map(|tools| {
            let ns = tools.iter().find(|t| t["name"] == "mcp__ev");
            let inner = ns
                .and_then(|ns| ns["tools"].as_array())
                .into_iter()
                .flatten();
            inner
                .map(|f| f["name"].as_str().unwrap().to_owned())
                .collect()
        })
        .collect();
    assert!(!offered.is_empty());
    assert!(
        offered.iter().all(|names| names == &["echo"]),
        "{offered:?}"
    );
}

/// Copilot gets the workflow's server in an `--additional-mcp-config` file
/// offering only the granted tool, calls it, and the call is on record as
/// Copilot emitted it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copilot_calls_a_granted_tool_of_a_workflow_mcp_server() {
    let cli = Cli {
        provider: "copilot",
        exe: "copilot",
        model: "gpt-5.5",
        reports_usage: true,
    };
    let Some((tools, requests, _)) = granted_echo(cli, "ev-echo").await else {
        return;
    };
    assert_eq!(tools.len(), 1, "{tools:?}");
    assert_eq!(tools[0]["toolName"], "ev-echo");
    let output = tools[0]["toolOutput"].to_string();
    assert!(output.contains("Echo: hi from awr"), "{output}");
    let offered: Vec<String> = (requests.iter())
        .filter_map(|r| r.body["tools"].as_array())
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str())
        .filter(|name| name.starts_with("ev-"))
        .map(str::to_owned)
        .collect();
    assert!(!offered.is_empty());
    assert!(offered.iter().all(|name| name == "ev-echo"), "{offered:?}");
}

/// Gemini CLI gets the workflow's server in the settings of a home of the
/// invocation's own, offering only the granted tool, calls it, and the call
/// is on record as Gemini emitted it. The user's settings stay as they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_calls_a_granted_tool_of_a_workflow_mcp_server() {
    let cli = Cli {
        provider: "gemini",
        exe: "gemini",
        model: "gemini-2.5-flash",
        reports_usage: true,
    };
    let before = adapters_agents::process::private_dir();
    let homes = |dir: &std::path::Path| -> Vec<String> {
        (std::fs::read_dir(dir).into_iter().flatten().flatten())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with("gemini-home-"))
            .collect()
    };
    let left_before = homes(&before);
    let Some((tools, requests, scratch)) = granted_echo(cli, "mcp_ev_echo").await else {
        return;
    };
    let settings = std::fs::read_to_string(scratch.path("home/.gemini/settings.json")).unwrap();
    assert!(!settings.contains("mcpServers"), "{settings}");
    assert_eq!(tools.len(), 1, "{tools:?}");
    assert_eq!(tools[0]["toolName"], "mcp_ev_echo");
    let output = tools[0]["toolOutput"].to_string();
    assert!(output.contains("Echo: hi from awr"), "{output}");
    let offered: Vec<String> = (requests.iter())
        .filter_map(|r| r.body["tools"].as_array())
        .flatten()
        .filter_map(|t| t["functionDeclarations"].as_array())
        .flatten()
        .filter_map(|f| f["name"].as_str())
        .filter(|name| name.starts_with("mcp_"))
        .map(str::to_owned)
        .collect();
    assert!(!offered.is_empty());
    assert!(
        offered.iter().all(|name| name == "mcp_ev_echo"),
        "{offered:?}"
    );
    // The invocation's home went with it.
    let left: Vec<_> = (homes(&before).into_iter())
        .filter(|h| !left_before.contains(h))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// Runs the real Claude Code (offline, against the fake model) granted
/// `Bash` with `requires_approval`, its model asking to run a command
/// that writes outside its directory (which Claude Code asks about), and
/// answers the question awr puts with `answer` (`approve` or `reject`)
/// while the run waits live. Returns the run's events and what the command
/// wrote, if it ran.
async fn claude_asks(answer: &[&str]) -> (Vec<Value>, Option<String>) {
    let bin = clis_dir().expect("the agent CLIs");
    let server = FakeModel::start().await.expect("fake model");
    let scratch = Scratch::new();
    let cli = Cli {
        provider: "claude-code",
        exe: "claude",
        model: "claude-sonnet-4-5",
        reports_usage: true,
    };
    let env = offline_env(&cli, &scratch, &server.base_url());
    let written = scratch.path("outside.txt");
    let command = format!("echo approved > {}; echo done", written.display());
    let call = serde_json::json!({"command": command, "description": "write"});
    let q = |s: &str| serde_json::to_string(s).unwrap();
    let mut yaml = format!(
        "name: consent\n\
         input: {input}\n\
         agents:\n  coder:\n    provider: claude-code\n    executable: {exe}\n    model: {model}\n    \
         timeout: 180s\n    tools: [Read, {{name: Bash, requires_approval: true}}]\n    env:\n",
        input = q(&format!("CALLTOOL Bash {call}")),
        exe = q(&bin.join("claude").display().to_string()),
        model = q(cli.model),
    );
    for (k, v) in &env {
        yaml.push_str(&format!("      {k}: {}\n", q(v)));
    }
    yaml.push_str("steps: [{id: code, agent: coder}]\n");
    let flow = scratch.write("consent.yaml", &yaml).display().to_string();
    let scratch = Arc::new(scratch);
    let running = {
        let scratch = Arc::clone(&scratch);
        tokio::task::spawn_blocking(move || scratch.awr(240, &["run", &flow]))
    };
    let runs = scratch.storage().join("runs");
    let log_of = |run: &str| runs.join(run).join("events.ndjson");
    let events = |run: &str| read_json_lines(&log_of(run));
    let (run, asked) = tokio::task::block_in_place(|| {
        let run = crate::cancel::wait_for_value(180, "the run to start", || {
            (std::fs::read_dir(&runs).ok()?)
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .find(|name| !name.starts_with('.') && log_of(name).exists())
        });
        let asked = crate::cancel::wait_for_value(180, "Claude Code to ask", || {
            let log = events(&run);
            of_type(&log, "approval:requested")
                .first()
                .map(|e| (*e).clone())
        });
        (run, asked)
    });
    assert_eq!(asked["tool"]["toolName"], "Bash", "{asked}");
    assert_eq!(asked["tool"]["toolInput"]["command"], command.as_str());
    assert!(!written.exists(), "nothing ran before the answer");
    let node_run = asked["nodeRunId"].as_str().unwrap().to_owned();
    let mut args = vec![answer[0], &run, "--node-run", &node_run];
    args.extend_from_slice(&answer[1..]);
    let answered = {
        let scratch = Arc::clone(&scratch);
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            scratch.awr(60, &args)
        })
        .await
        .unwrap()
    };
    assert_eq!(answered.code, 0, "{}", answered.stderr);
    let out = running.await.unwrap();
    assert_eq!(
        out.code, 0,
        "stdout:\n{}\nstderr:\n{}",
        out.stdout, out.stderr
    );
    (events(&run), std::fs::read_to_string(&written).ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_codes_own_permission_request_becomes_an_awr_approval_and_runs_once_approved() {
    if clis_dir().is_none() {
        return;
    }
    let (log, written) = claude_asks(&["approve"]).await;
    let ask = (of_type(&log, "command:received").into_iter())
        .find(|c| c["command"]["type"] == "ask")
        .expect("the permission prompt's ask");
    assert_eq!(ask["accepted"], true, "{ask}");
    let resolved = of_type(&log, "approval:resolved");
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0]["approved"], true);
    assert_eq!(written.as_deref(), Some("approved\n"), "{log:#?}");
    let ran = of_type(&log, "agent:tool");
    assert_eq!(ran[0]["toolName"], "Bash", "{log:?}");
    assert_eq!(log.last().unwrap()["type"], "flow:completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejection_reaches_claude_code_with_the_reason_and_nothing_runs() {
    if clis_dir().is_none() {
        return;
    }
    let (log, written) = claude_asks(&["reject", "--reason", "not on this box"]).await;
    assert_eq!(written, None, "the rejected command did not run");
    let resolved = of_type(&log, "approval:resolved");
    assert_eq!(resolved[0]["approved"], false);
    // Claude Code got the person's reason as the call's error, and said so.
    let ran = of_type(&log, "agent:tool");
    let error = ran[0]["toolOutput"].to_string() + &ran[0]["error"].to_string();
    assert!(error.contains("not on this box"), "{ran:?}");
    let said = of_type(&log, "agent:complete")[0]["result"].to_string();
    assert!(said.contains("not on this box"), "{said}");
    assert_eq!(log.last().unwrap()["type"], "flow:completed");
}

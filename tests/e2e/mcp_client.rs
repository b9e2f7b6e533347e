//! The MCP client (`adapters_agents::mcp`) against the real reference
//! server, `@modelcontextprotocol/server-everything` over stdio, installed
//! pinned by `.ci/install-agent-clis` beside the agent CLIs: its tools
//! listed and called, its failures as the model would get them, its key
//! variables withheld, and a server killed mid-run started again once.

use std::collections::BTreeMap;
use std::time::Duration;

use adapters_agents::mcp::McpClients;
use application::ports::{McpConnector, McpError, McpSession};
use application::secrets::KeyNames;
use domain::RunId;
use domain::workflow::{McpServerDef, McpTransport, Timeout};
use serde_json::json;

use crate::real_clis::clis_dir;

/// `server-everything` over stdio, with `env`, calls cut at `tool_timeout`.
fn everything(env: &[(&str, &str)], tool_timeout: Duration) -> Option<McpServerDef> {
    let bin = clis_dir()?.join("mcp-server-everything");
    Some(McpServerDef {
        transport: McpTransport::Stdio {
            command: bin.to_string_lossy().into_owned(),
            args: vec!["stdio".into()],
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<BTreeMap<_, _>>(),
            cwd: None,
        },
        startup_timeout: Timeout(Duration::from_secs(60)),
        tool_timeout: Timeout(tool_timeout),
    })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A connector whose key variables include `CARGO_PKG_NAME`, which cargo
/// sets for every test process: a variable the server must not see.
fn clients() -> McpClients {
    McpClients::new(
        std::env::temp_dir(),
        KeyNames::new(["CARGO_PKG_NAME".to_owned()]),
    )
}

fn text(output: &serde_json::Value) -> &str {
    output.as_str().unwrap_or_default()
}

#[test]
fn a_stdio_server_lists_and_runs_its_tools_and_its_errors_come_back_as_results() {
    let Some(def) = everything(&[("AWR_MCP_GIVEN", "given")], Duration::from_secs(30)) else {
        return;
    };
    runtime().block_on(async {
        let session = clients().connect("everything", &def, None).await.unwrap();
        let names: Vec<&str> = session.tools().iter().map(|t| t.name.as_str()).collect();
        for tool in ["echo", "get-sum", "get-env"] {
            assert!(names.contains(&tool), "{names:?}");
        }
        let echo = session.tools().iter().find(|t| t.name == "echo").unwrap();
        assert_eq!(echo.input_schema["type"], "object", "{echo:?}");

        let said = session
            .call("echo", json!({"message": "hi"}))
            .await
            .unwrap();
        assert!(!said.is_error);
        assert_eq!(text(&said.output), "Echo: hi");
        let sum = session
            .call("get-sum", json!({"a": 1, "b": 2}))
            .await
            .unwrap();
        assert!(text(&sum.output).contains('3'), "{sum:?}");

        // Its own refusals are results marked as errors, for the model.
        let unknown = session.call("no-such-tool", json!({})).await.unwrap();
        assert!(unknown.is_error, "{unknown:?}");
        let bad = session.call("get-sum", json!({"a": "one"})).await.unwrap();
        assert!(bad.is_error, "{bad:?}");

        // It got the variable it was given, and no key variable of awr's.
        let env = session.call("get-env", json!({})).await.unwrap();
        let env = env.output.to_string();
        assert!(env.contains("AWR_MCP_GIVEN"), "{env}");
        assert!(
            !env.contains("CARGO_PKG_NAME"),
            "a key variable leaked: {env}"
        );
        session.close().await;
        let closed = session.call("echo", json!({"message": "hi"})).await;
        assert!(matches!(closed, Err(McpError::Closed { .. })), "{closed:?}");
    });
}

#[test]
fn a_call_past_its_timeout_is_an_error_and_the_server_goes_on() {
    let Some(def) = everything(&[], Duration::from_secs(1)) else {
        return;
    };
    runtime().block_on(async {
        let session = clients().connect("everything", &def, None).await.unwrap();
        let slow = session
            .call(
                "trigger-long-running-operation",
                json!({"duration": 10, "steps": 5}),
            )
            .await;
        assert!(
            matches!(&slow, Err(McpError::Timeout { server, seconds: 1 }) if server == "everything"),
            "{slow:?}"
        );
        let said = session.call("echo", json!({"message": "after"})).await.unwrap();
        assert_eq!(text(&said.output), "Echo: after");
        session.close().await;
    });
}

#[test]
fn a_server_killed_mid_run_fails_that_call_and_is_started_again_once() {
    let Some((def, run)) = tagged() else {
        return;
    };
    runtime().block_on(async {
        let session = connect_tagged(&def, run).await;
        assert!(session.call("echo", json!({"message": "1"})).await.is_ok());
        // Everything the run started is tagged with it.
        let killed = kill_tagged(run);
        assert!(killed > 0, "the server was not tagged with its run");
        let cut = session.call("echo", json!({"message": "2"})).await;
        assert!(matches!(cut, Err(McpError::Closed { .. })), "{cut:?}");
        // Started again: the next call is answered.
        let said = session.call("echo", json!({"message": "3"})).await.unwrap();
        assert_eq!(text(&said.output), "Echo: 3");
        // Once only: killed again, it stays gone.
        assert!(kill_tagged(run) > 0);
        let cut = session.call("echo", json!({"message": "4"})).await;
        assert!(matches!(cut, Err(McpError::Closed { .. })), "{cut:?}");
        let gone = session.call("echo", json!({"message": "5"})).await;
        assert!(matches!(gone, Err(McpError::Closed { .. })), "{gone:?}");
        session.close().await;
    });
}

#[test]
fn a_server_that_cannot_start_is_named() {
    let def = McpServerDef {
        transport: McpTransport::Stdio {
            command: "/nonexistent/mcp-server".into(),
            args: Vec::new(),
            env: BTreeMap::new(),
            cwd: None,
        },
        startup_timeout: Timeout(Duration::from_secs(5)),
        tool_timeout: Timeout(Duration::from_secs(5)),
    };
    let error = runtime()
        .block_on(clients().connect("broken", &def, None))
        .err()
        .unwrap();
    assert!(
        matches!(&error, McpError::Start { server, reason } if server == "broken" && reason.contains("/nonexistent/mcp-server")),
        "{error}"
    );
    // A program that exits at once is no server either.
    let def = McpServerDef {
        transport: McpTransport::Stdio {
            command: "true".into(),
            args: Vec::new(),
            env: BTreeMap::new(),
            cwd: None,
        },
        ..def
    };
    let error = runtime()
        .block_on(clients().connect("quits", &def, None))
        .err()
        .unwrap();
    assert!(
        matches!(&error, McpError::Start { server, .. } if server == "quits"),
        "{error}"
    );
}

/// Kills (SIGKILL) every process tagged with `run` (`AWR_RUN_ID`), as a
/// crash or an operator would; how many.
pub(crate) fn kill_tagged(run: RunId) -> usize {
    let tag = format!("AWR_RUN_ID={run}");
    let mut killed = 0;
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        if environ.split(|b| *b == 0).any(|v| v == tag.as_bytes())
            && let Some(pid) = rustix::process::Pid::from_raw(pid)
            && rustix::process::kill_process(pid, rustix::process::Signal::KILL).is_ok()
        {
            killed += 1;
        }
    }
    killed
}

/// Two calls that find the server gone together start it again once: the
/// second does not end the server the first started.
#[test]
fn calls_that_find_the_server_gone_together_restart_it_once() {
    let Some((def, run)) = tagged() else {
        return;
    };
    runtime().block_on(async {
        let session = connect_tagged(&def, run).await;
        assert!(session.call("echo", json!({"message": "1"})).await.is_ok());
        assert!(kill_tagged(run) > 0);
        let (a, b) = tokio::join!(
            session.call("echo", json!({"message": "a"})),
            session.call("echo", json!({"message": "b"}))
        );
        assert!(a.is_err() || b.is_err(), "{a:?} {b:?}");
        let said = session
            .call("echo", json!({"message": "after"}))
            .await
            .unwrap();
        assert_eq!(text(&said.output), "Echo: after");
        session.close().await;
    });
}

/// A session closed while a call waits starts nothing again, and leaves
/// no process of its run behind.
#[test]
fn a_session_closed_during_a_call_leaves_nothing_running() {
    let Some((def, run)) = tagged() else {
        return;
    };
    runtime().block_on(async {
        let session = connect_tagged(&def, run).await;
        let slow = session.call(
            "trigger-long-running-operation",
            json!({"duration": 10, "steps": 5}),
        );
        let close = async {
            // Once the call is on its way.
            tokio::task::yield_now().await;
            session.close().await;
        };
        let (slow, ()) = tokio::join!(slow, close);
        assert!(slow.is_err(), "{slow:?}");
        assert_eq!(kill_tagged(run), 0, "a server outlived its closed session");
    });
}

/// `server-everything` and a run id of its own: the kills of a test reach
/// no other test's processes.
fn tagged() -> Option<(McpServerDef, RunId)> {
    let def = everything(&[], Duration::from_secs(30))?;
    Some((def, uuid::Uuid::new_v4().to_string().parse().unwrap()))
}

async fn connect_tagged(def: &McpServerDef, run: RunId) -> Box<dyn McpSession> {
    clients()
        .connect("everything", def, Some(run))
        .await
        .unwrap()
}

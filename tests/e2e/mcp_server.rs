//! awr's own MCP server, driven by the official Rust SDK's client: `awr
//! mcp` over stdio and `/mcp` on `awr serve`. Every step is checked
//! against the run's log: a run started through a tool runs, its events
//! page from an offset, a pause and a resume are recorded with who asked,
//! and closing the connection pauses what it still runs.

use std::path::Path;
use std::process::Stdio;

use awr_tests::serve::Served;
use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ReadResourceRequestParams, ResourceContents,
};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};

use crate::util::{Awr, awr_bin, repo_root};

type Client = RunningService<RoleClient, ()>;

/// A scratch project: `summarize.yaml` with its fixtures, and
/// `gated.yaml`, whose one command step waits for the file `gate`.
pub(crate) fn project(awr: &Awr) -> std::path::PathBuf {
    let dir = awr.dir.path().join("project");
    let fixtures = dir.join("fixtures/summarize");
    std::fs::create_dir_all(&fixtures).unwrap();
    let examples = repo_root().join("examples");
    std::fs::copy(examples.join("summarize.yaml"), dir.join("summarize.yaml")).unwrap();
    for file in ["summarizer.json", "fact-checker.json"] {
        std::fs::copy(
            examples.join("fixtures/summarize").join(file),
            fixtures.join(file),
        )
        .unwrap();
    }
    let gate = dir.join("gate");
    std::fs::write(
        dir.join("gated.yaml"),
        format!(
            "name: gated\nsteps:\n  - id: wait\n    command: 'while [ ! -f {} ]; do sleep 0.02; done; echo through'\n",
            gate.display()
        ),
    )
    .unwrap();
    dir
}

/// `awr mcp --root DIR`, its stdio spoken to by an SDK client.
async fn stdio_client(awr: &Awr, root: &Path) -> (Client, tokio::process::Child) {
    let mut child = tokio::process::Command::new(awr_bin())
        .arg("--storage")
        .arg(awr.storage_arg())
        .args(["mcp", "--root"])
        .arg(root)
        .current_dir(root)
        .env_remove("AWR_STORAGE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let (stdout, stdin) = (child.stdout.take().unwrap(), child.stdin.take().unwrap());
    let client = ().serve((stdout, stdin)).await.unwrap();
    (client, child)
}

async fn call(client: &Client, tool: &str, arguments: Value) -> CallToolResult {
    let Value::Object(arguments) = arguments else {
        panic!("arguments are an object")
    };
    let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
    client.call_tool(params).await.unwrap()
}

/// The structured answer of a call that succeeded.
async fn ok(client: &Client, tool: &str, arguments: Value) -> Value {
    let result = call(client, tool, arguments).await;
    assert_ne!(result.is_error, Some(true), "{tool}: {result:?}");
    result.structured_content.expect("a structured answer")
}

/// The message of a call that failed as a tool error.
async fn refused(client: &Client, tool: &str, arguments: Value) -> String {
    let result = call(client, tool, arguments).await;
    assert_eq!(result.is_error, Some(true), "{tool}: {result:?}");
    result.structured_content.expect("a structured error")["message"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Waits (bounded by the tool) until the run settles.
async fn settled(client: &Client, run: &str) -> Value {
    for _ in 0..10 {
        let waited = ok(
            client,
            "wait_run",
            json!({"runId": run, "timeoutSeconds": 10}),
        )
        .await;
        if !waited["timedOut"].as_bool().unwrap() {
            return waited;
        }
    }
    panic!("run {run} did not settle")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_client_starts_waits_reads_and_commands_runs_over_stdio() {
    let awr = Awr::new();
    let root = project(&awr);
    let (client, mut child) = stdio_client(&awr, &root).await;

    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    for name in [
        "start_run",
        "get_run",
        "list_runs",
        "wait_run",
        "events_since",
        "transcript_since",
        "send_message",
        "reply",
        "pause",
        "cancel",
        "resume",
        "fork",
    ] {
        assert!(names.contains(&name), "{name}: {names:?}");
    }
    assert!(
        tools
            .iter()
            .all(|t| t.output_schema.is_some() && t.input_schema.contains_key("properties"))
    );

    // Started, then waited for: the answer is the log's end.
    let started = ok(&client, "start_run", json!({"path": "summarize.yaml"})).await;
    let run = started["runId"].as_str().unwrap().to_owned();
    let waited = settled(&client, &run).await;
    assert_eq!(waited["status"], "completed", "{waited}");
    assert_eq!(waited["done"], true);
    let log = awr.events(&run);
    assert_eq!(waited["lastOffset"], log.len());
    assert_eq!(&waited["output"], &log.last().unwrap()["output"]);
    assert_eq!(
        log[0]["startedBy"].as_str().map(|s| s.contains('@')),
        Some(true),
        "{}",
        log[0]
    );

    // The events, a page at a time from an offset: the log, line for line.
    let mut paged = Vec::new();
    let mut offset = 0;
    loop {
        let page = ok(
            &client,
            "events_since",
            json!({"runId": run, "offset": offset, "limit": 4}),
        )
        .await;
        paged.extend(page["events"].as_array().unwrap().iter().cloned());
        offset = page["nextOffset"].as_u64().unwrap();
        if !page["more"].as_bool().unwrap() {
            break;
        }
    }
    assert_eq!(paged, log);
    let ends = ok(
        &client,
        "events_since",
        json!({"runId": run, "types": ["flow:completed"]}),
    )
    .await;
    assert_eq!(ends["events"].as_array().unwrap().len(), 1);
    let shown = ok(&client, "get_run", json!({"runId": &run[..8]})).await;
    assert_eq!(shown["status"], "completed");
    let lines = ok(
        &client,
        "transcript_since",
        json!({"runId": run, "seq": 2, "limit": 3}),
    )
    .await;
    let seqs: Vec<u64> = lines["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [3, 4, 5]);

    // Resources: the run's snapshot.
    let uri = format!("awr://runs/{run}/snapshot");
    let listed = client.list_all_resources().await.unwrap();
    assert!(listed.iter().any(|r| r.uri == uri), "{listed:?}");
    let read = client
        .read_resource(ReadResourceRequestParams::new(uri))
        .await
        .unwrap();
    let ResourceContents::TextResourceContents { text, .. } = &read.contents[0] else {
        panic!("{read:?}")
    };
    assert_eq!(
        serde_json::from_str::<Value>(text).unwrap()["runId"],
        run.as_str()
    );

    // Bad arguments are errors the model reads, naming the field.
    assert!(
        refused(
            &client,
            "start_run",
            json!({"path": "summarize.yaml", "nope": 1})
        )
        .await
        .contains("nope")
    );
    assert!(
        refused(
            &client,
            "wait_run",
            json!({"runId": run, "timeoutSeconds": 99})
        )
        .await
        .contains("timeoutSeconds")
    );
    assert!(
        refused(
            &client,
            "events_since",
            json!({"runId": run, "types": ["flow:nope"]})
        )
        .await
        .contains("flow:nope")
    );
    assert!(
        refused(&client, "start_run", json!({"path": "../outside.yaml"}))
            .await
            .contains("outside")
    );
    assert!(
        refused(&client, "get_run", json!({"runId": "ffffffff"}))
            .await
            .contains("ffffffff")
    );

    // Paused and resumed, each on record as from this user.
    let gated = ok(&client, "start_run", json!({"path": "gated.yaml"})).await["runId"]
        .as_str()
        .unwrap()
        .to_owned();
    crate::cancel::wait_for(30, "the gated node to start", || {
        awr.events_so_far(&gated)
            .iter()
            .any(|e| e["type"] == "node:started")
    });
    let paused = ok(&client, "pause", json!({"runId": gated})).await;
    assert_eq!(paused["accepted"], true);
    assert_eq!(settled(&client, &gated).await["status"], "paused");
    let log = awr.events(&gated);
    let received = &log[paused["offset"].as_u64().unwrap() as usize - 1];
    assert_eq!(received["type"], "command:received");
    assert_eq!(received["command"]["type"], "pause");
    assert!(received["by"].as_str().unwrap().contains('@'), "{received}");
    std::fs::write(root.join("gate"), "").unwrap();
    let resumed = ok(
        &client,
        "resume",
        json!({"runId": gated, "message": "go on"}),
    )
    .await;
    let waited = settled(&client, &gated).await;
    assert_eq!(waited["status"], "completed", "{waited}");
    let log = awr.events(&gated);
    assert_eq!(
        log[resumed["offset"].as_u64().unwrap() as usize - 1]["type"],
        "flow:resumed"
    );

    // A command to a run that ended is refused, and says so.
    let late = refused(&client, "cancel", json!({"runId": gated})).await;
    assert!(
        late.contains("completed") || late.contains("ended"),
        "{late}"
    );

    // Closing the connection pauses what the server still runs.
    std::fs::remove_file(root.join("gate")).unwrap();
    let open = ok(&client, "start_run", json!({"path": "gated.yaml"})).await["runId"]
        .as_str()
        .unwrap()
        .to_owned();
    crate::cancel::wait_for(30, "the second gated node to start", || {
        awr.events_so_far(&open)
            .iter()
            .any(|e| e["type"] == "node:started")
    });
    client.cancel().await.unwrap();
    let status = child.wait().await.unwrap();
    assert!(status.success(), "{status:?}");
    assert_eq!(awr.events(&open).last().unwrap()["type"], "flow:paused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_on_the_server_takes_a_token_and_records_its_name() {
    let awr = Awr::new();
    let root = project(&awr);
    let token = "mcp-test-token-0123456789abcdef0123";
    let tokens = root.join("tokens");
    std::fs::write(
        &tokens,
        format!("reader read {token}-r\nstarter start,read {token}-s\n"),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).unwrap();
    let server = Served::start(
        awr_bin(),
        awr.storage(),
        &root,
        &["--tokens", tokens.to_str().unwrap()],
    );
    // reqwest is built without a default crypto provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let url = format!("{}/mcp", server.base);
    let connect = |secret: Option<String>| {
        let mut config = StreamableHttpClientTransportConfig::with_uri(url.clone());
        if let Some(secret) = secret {
            config = config.auth_header(secret);
        }
        ().serve(StreamableHttpClientTransport::from_config(config))
    };
    assert!(connect(None).await.is_err(), "no token, no MCP");

    let reader = connect(Some(format!("{token}-r"))).await.unwrap();
    let listed = ok(&reader, "list_runs", json!({})).await;
    assert_eq!(listed["runs"], json!([]));
    let forbidden = refused(&reader, "start_run", json!({"path": "summarize.yaml"})).await;
    assert!(
        forbidden.contains("`reader`") && forbidden.contains("start"),
        "{forbidden}"
    );
    assert!(awr.run_ids().is_empty());

    let starter = connect(Some(format!("{token}-s"))).await.unwrap();
    let run = ok(&starter, "start_run", json!({"path": "summarize.yaml"})).await["runId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(settled(&starter, &run).await["status"], "completed");
    assert_eq!(awr.events(&run)[0]["startedBy"], "starter");
    let denied = refused(&starter, "pause", json!({"runId": run})).await;
    assert!(denied.contains("control"), "{denied}");
}

/// An inline workflow that would run a program on this machine (an MCP
/// server over stdio, a command node) is refused, naming each place;
/// nothing is run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inline_workflow_that_reaches_the_host_is_refused() {
    let awr = Awr::new();
    let root = project(&awr);
    let (client, mut child) = stdio_client(&awr, &root).await;
    let workflow = "name: sly\nmcp_servers:\n  x: {command: touch, args: [pwned]}\n\
                    agents:\n  a: {provider: openai, model: m}\nsteps:\n  - {agent: a}\n  - {id: c, command: 'touch pwned'}\n";
    let why = refused(&client, "start_run", json!({"workflow": workflow})).await;
    assert!(
        why.contains("mcp_servers `x`") && why.contains("node `c`"),
        "{why}"
    );
    assert!(awr.run_ids().is_empty());
    assert!(!root.join("pwned").exists());
    client.cancel().await.unwrap();
    assert!(child.wait().await.unwrap().success());
}

/// An agent answers approvals through awr's MCP server: `list_approvals`
/// shows the question, `approve` and `reject` answer it, an answer is
/// taken once, and a run that waited goes on in the server's process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_client_lists_and_answers_approvals() {
    let awr = Awr::new();
    let root = project(&awr);
    std::fs::write(
        root.join("gate.yaml"),
        "name: gate\nnodes:\n  - id: ask\n    approval: {prompt: 'Ship {{ input }}?', schema: {type: object, required: [n]}}\n",
    )
    .unwrap();
    let (client, mut child) = stdio_client(&awr, &root).await;
    let started = ok(
        &client,
        "start_run",
        json!({"path": "gate.yaml", "input": "v2"}),
    )
    .await;
    let run = started["runId"].as_str().unwrap().to_owned();
    let waited = settled(&client, &run).await;
    assert_eq!(waited["status"], "waiting", "{waited}");

    let listed = ok(&client, "list_approvals", json!({"runId": run})).await;
    let question = &listed["approvals"][0];
    assert_eq!(question["prompt"], "Ship v2?");
    assert_eq!(question["status"], "waiting");
    let node_run = question["nodeRunId"].as_str().unwrap().to_owned();
    let everywhere = ok(&client, "list_approvals", json!({})).await;
    assert_eq!(everywhere["approvals"].as_array().unwrap().len(), 1);

    let bad = refused(
        &client,
        "approve",
        json!({"runId": run, "nodeRunId": node_run, "data": {}}),
    )
    .await;
    assert!(bad.contains("schema"), "{bad}");
    let answered = ok(
        &client,
        "approve",
        json!({"runId": run, "nodeRunId": node_run, "data": {"n": 1}}),
    )
    .await;
    assert_eq!(answered["accepted"], true);
    let done = settled(&client, &run).await;
    assert_eq!(done["status"], "completed", "{done}");
    let twice = refused(
        &client,
        "reject",
        json!({"runId": run, "nodeRunId": node_run}),
    )
    .await;
    assert!(twice.contains("has ended"), "{twice}");

    // On record: the answer, by the local user, as the MCP caller.
    let events = awr.events(&run);
    let resolved = crate::util::of_type(&events, "approval:resolved");
    assert_eq!(resolved.len(), 1);
    assert!(
        resolved[0]["by"].as_str().unwrap().contains('@'),
        "{resolved:?}"
    );
    assert_eq!(resolved[0]["data"]["n"], 1);
    let listed = ok(&client, "list_approvals", json!({})).await;
    assert!(listed["approvals"].as_array().unwrap().is_empty());
    drop(client);
    child.wait().await.unwrap();
}

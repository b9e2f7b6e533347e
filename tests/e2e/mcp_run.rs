//! Runs whose HTTP agents call tools of MCP servers, end to end: `awr run`
//! starts the server the workflow declares (the real `server-everything`,
//! installed pinned by `.ci/install-agent-clis`), the fake model server
//! calls its tools, and the record holds each call; the recording replays
//! with no server installed; a server killed mid-call is an error result
//! the model reads, and the run goes on.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use awr_tests::fake_model::FakeModel;

use crate::mcp_client::kill_tagged;
use crate::real_clis::clis_dir;
use crate::util::{Awr, Output, of_type, read_json_lines, run_id_of};

/// `PATH` with the directory of the installed server in front.
fn path_with(dir: &Path) -> OsString {
    let mut dirs = vec![dir.to_path_buf()];
    dirs.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    std::env::join_paths(dirs).unwrap()
}

/// `PATH` without any directory holding the server.
fn path_without_server() -> OsString {
    let dirs = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .filter(|dir| !dir.join("mcp-server-everything").exists())
        .collect::<Vec<PathBuf>>();
    std::env::join_paths(dirs).unwrap()
}

fn awr_with_path(awr: &Awr, path: &OsString, args: &[&str]) -> Output {
    let mut command = awr.command(args);
    command.env("PATH", path);
    Output::from(command.output().unwrap())
}

/// The example's workflow, pointed at `server`.
fn example(awr: &Awr, server: &FakeModel) -> String {
    let yaml =
        std::fs::read_to_string(crate::util::repo_root().join("examples/mcp/everything.yaml"))
            .unwrap()
            .replace("http://127.0.0.1:8089", &server.base_url());
    awr.write("everything.yaml", &yaml).display().to_string()
}

/// The example: the agent calls `echo` and `get-sum`, both on record with
/// their results, in the log and the transcript; the recording verifies,
/// and replays, with no server to start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mcp_example_calls_two_tools_and_replays_without_the_server() {
    let Some(clis) = clis_dir() else {
        return;
    };
    let awr = Awr::new();
    let server = FakeModel::start().await.unwrap();
    let flow = example(&awr, &server);
    let path = path_with(&clis);
    let out = tokio::task::block_in_place(|| awr_with_path(&awr, &path, &["run", &flow]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.stdout.trim(), "Tool said: The sum of 2 and 3 is 5.");
    let run = run_id_of(&out);

    let events = awr.events(&run);
    let completed = of_type(&events, "tool:completed");
    let said: Vec<(&str, &str)> = completed
        .iter()
        .map(|e| {
            let name = e["toolName"].as_str().unwrap();
            (name, e["toolOutput"].as_str().unwrap())
        })
        .collect();
    assert_eq!(
        said,
        [
            ("mcp__everything__echo", "Echo: hello from awr"),
            ("mcp__everything__get-sum", "The sum of 2 and 3 is 5."),
        ]
    );
    // `awr events --type` shows them with their results.
    let shown = awr.run(&["events", &run, "--type", "tool:completed", "--json"]);
    assert_eq!(shown.code, 0, "{}", shown.stderr);
    assert_eq!(shown.stdout.lines().count(), 2, "{}", shown.stdout);
    assert!(shown.stdout.contains("The sum of 2 and 3 is 5."));
    // The model was told the tools by the names it calls them, and no others.
    let requests = server.requests();
    let offered: Vec<&str> = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        offered,
        ["mcp__everything__echo", "mcp__everything__get-sum"]
    );

    let transcript = read_json_lines(&awr.storage().join(format!("transcripts/{run}.jsonl")));
    for (kind, needle) in [
        ("tool.call", "mcp__everything__echo"),
        ("tool.result", "Echo: hello from awr"),
        ("tool.call", "mcp__everything__get-sum"),
        ("tool.result", "The sum of 2 and 3 is 5."),
    ] {
        assert!(
            transcript
                .iter()
                .any(|l| l["type"] == kind && l["payload"].to_string().contains(needle)),
            "{kind} {needle}: {transcript:?}"
        );
    }
    assert_eq!(
        kill_tagged(run.parse().unwrap()),
        0,
        "the server outlived its run"
    );

    // Recorded, then verified and replayed with no server on PATH.
    let rec = awr.dir.path().join("rec");
    let rec_arg = rec.display().to_string();
    let recorded = tokio::task::block_in_place(|| {
        awr_with_path(&awr, &path, &["record-fixtures", &flow, "--out", &rec_arg])
    });
    assert_eq!(recorded.code, 0, "{}", recorded.stderr);
    drop(server);
    let bare = path_without_server();
    let verified = tokio::task::block_in_place(|| {
        awr_with_path(&awr, &bare, &["verify-determinism", &rec_arg])
    });
    assert_eq!(verified.code, 0, "{}", verified.stderr);
    let replayed = tokio::task::block_in_place(|| {
        awr_with_path(&awr, &bare, &["run", &flow, "--replay-from", &rec_arg])
    });
    assert_eq!(replayed.code, 0, "{}", replayed.stderr);
    assert_eq!(replayed.stdout, out.stdout);
}

/// A server that cannot start fails the node that needs it, naming the
/// server, before the model is asked anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_cannot_start_fails_the_node_naming_it() {
    let awr = Awr::new();
    let server = FakeModel::start().await.unwrap();
    let yaml = format!(
        "name: broken\ninput: hi\n\
         mcp_servers:\n  tools: {{command: awr-no-such-mcp-server, startup_timeout: 5s}}\n\
         agents:\n  a: {{provider: openai, model: m, base_url: {}/v1, tools: [tools/*]}}\n\
         steps: [{{agent: a}}]\n",
        server.base_url()
    );
    let flow = awr.write("broken.yaml", &yaml).display().to_string();
    let out = tokio::task::block_in_place(|| awr.run(&["run", &flow]));
    assert_eq!(out.code, 1, "{}", out.stderr);
    let events = awr.events(&awr.run_ids()[0]);
    let errors = of_type(&events, "agent:error");
    assert_eq!(errors.len(), 1, "{events:?}");
    assert_eq!(errors[0]["errorType"], "mcp_server_error");
    let message = errors[0]["message"].as_str().unwrap();
    assert!(
        message.contains("MCP server `tools` did not start")
            && message.contains("awr-no-such-mcp-server"),
        "{message}"
    );
    assert!(out.stderr.contains("`tools`"), "{}", out.stderr);
    assert!(server.requests().is_empty(), "the model was asked");
}

/// The server killed while a call runs: the model gets an error result,
/// its next call goes to the server started again, and the run completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_call_is_an_error_result_and_the_run_goes_on() {
    let Some(clis) = clis_dir() else {
        return;
    };
    let awr = Awr::new();
    let server = FakeModel::start().await.unwrap();
    let yaml = format!(
        "name: killed\n\
         input: |\n  CALLTOOL mcp__everything__trigger-long-running-operation {{\"duration\": 60, \"steps\": 2}}\n  \
         CALLTOOL mcp__everything__echo {{\"message\": \"after\"}}\n\
         mcp_servers:\n  everything: {{command: mcp-server-everything, args: [stdio], tool_timeout: 2m}}\n\
         agents:\n  a: {{provider: anthropic, model: m, base_url: {}, tools: [everything/*]}}\n\
         steps: [{{agent: a}}]\n",
        server.base_url()
    );
    let flow = awr.write("killed.yaml", &yaml);
    let mut command = awr.command(&["run", flow.to_str().unwrap()]);
    command
        .env("PATH", path_with(&clis))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = command.spawn().unwrap();
    let run = tokio::task::block_in_place(|| {
        let mut run = None;
        crate::cancel::wait_for(60, "the long call to start", || {
            run = awr.run_ids().into_iter().find(|run| {
                of_type(&awr.events_so_far(run), "tool:started")
                    .iter()
                    .any(|e| e["toolName"] == "mcp__everything__trigger-long-running-operation")
            });
            run.is_some()
        });
        run.unwrap()
    });
    assert!(
        kill_tagged(run.parse().unwrap()) > 0,
        "no server of the run was found"
    );
    let out = Output::from(tokio::task::block_in_place(|| child.wait_with_output()).unwrap());
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.stdout.trim(), "Tool said: Echo: after");

    let events = awr.events(&run);
    let failed = of_type(&events, "tool:failed");
    assert_eq!(failed.len(), 1, "{events:?}");
    let error = failed[0]["error"].as_str().unwrap();
    assert!(
        error.contains("MCP server `everything` closed the connection"),
        "{error}"
    );
    let completed = of_type(&events, "tool:completed");
    assert_eq!(completed.len(), 1, "{events:?}");
    assert_eq!(completed[0]["toolOutput"], "Echo: after");
    // The model read the error.
    let second = &server.requests()[1].body;
    assert!(
        second.to_string().contains("closed the connection"),
        "{second}"
    );
    assert_eq!(of_type(&events, "flow:completed").len(), 1);
    assert_eq!(
        kill_tagged(run.parse().unwrap()),
        0,
        "the restarted server outlived its run"
    );
}

/// A one-agent workflow on the fake model, granted `tools`, whose prompt
/// makes the model call each of `calls` in turn, with `servers` declared.
fn calling(server: &FakeModel, servers: &str, tools: &str, calls: &[&str]) -> String {
    let prompt: String = calls.iter().map(|c| format!("  CALLTOOL {c}\n")).collect();
    format!(
        "name: calling\ninput: |\n{prompt}mcp_servers:\n{servers}\
         agents:\n  a: {{provider: openai, model: m, base_url: {}/v1, tools: {tools}}}\n\
         steps: [{{agent: a}}]\n",
        server.base_url()
    )
}

/// `(toolName, output or error)` of each router tool call, in order.
fn tool_results(events: &[serde_json::Value]) -> Vec<(String, String)> {
    events
        .iter()
        .filter(|e| e["type"] == "tool:completed" || e["type"] == "tool:failed")
        .map(|e| {
            let said = match e["type"].as_str() {
                Some("tool:failed") => e["error"].as_str().unwrap().to_owned(),
                _ => e["toolOutput"].to_string(),
            };
            (e["toolName"].as_str().unwrap().to_owned(), said)
        })
        .collect()
}

/// `server-filesystem`: a file in its roots is read; one outside them is
/// an error result the model reads, and the run goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_filesystem_server_reads_inside_its_roots_and_refuses_outside() {
    let Some(clis) = clis_dir() else {
        return;
    };
    let awr = Awr::new();
    let server = FakeModel::start().await.unwrap();
    let shared = awr.dir.path().join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::write(shared.join("note.txt"), "the note").unwrap();
    let servers = format!(
        "  fs: {{command: {}, args: [{}]}}\n",
        clis.join("mcp-server-filesystem").display(),
        shared.display()
    );
    let outside = awr.write("outside.txt", "secret");
    let yaml = calling(
        &server,
        &servers,
        "[fs/read_text_file]",
        &[
            &format!(
                "mcp__fs__read_text_file {{\"path\": \"{}\"}}",
                shared.join("note.txt").display()
            ),
            &format!(
                "mcp__fs__read_text_file {{\"path\": \"{}\"}}",
                outside.display()
            ),
        ],
    );
    let flow = awr.write("fs.yaml", &yaml).display().to_string();
    let out = tokio::task::block_in_place(|| awr.run(&["run", &flow]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let said = tool_results(&awr.events(&run_id_of(&out)));
    assert_eq!(said.len(), 2, "{said:?}");
    assert!(said[0].1.contains("the note"), "{said:?}");
    assert!(said[1].1.contains("Access denied"), "{said:?}");
    assert!(!said[1].1.contains("secret"), "{said:?}");
}

/// `mcp-server-time` (Python): its structured answer is the tool's result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_time_server_answers_with_its_structured_content() {
    let Some(python) = std::env::var_os("AWR_MCP_PYTHON").filter(|p| !p.is_empty()) else {
        awr_tests::skipped("AWR_MCP_PYTHON is not set", "cargo xtask test");
        return;
    };
    let bin = PathBuf::from(python).with_file_name("mcp-server-time");
    let awr = Awr::new();
    let server = FakeModel::start().await.unwrap();
    let servers = format!(
        "  time: {{command: {}, args: [--local-timezone, UTC]}}\n",
        bin.display()
    );
    let yaml = calling(
        &server,
        &servers,
        "[time/*]",
        &["mcp__time__get_current_time {\"timezone\": \"UTC\"}"],
    );
    let flow = awr.write("time.yaml", &yaml).display().to_string();
    let out = tokio::task::block_in_place(|| awr.run(&["run", &flow]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let events = awr.events(&run_id_of(&out));
    let completed = of_type(&events, "tool:completed");
    assert_eq!(completed[0]["toolOutput"]["timezone"], "UTC", "{events:?}");
    assert!(completed[0]["toolOutput"]["datetime"].is_string());
}

/// A server over streamable HTTP, reached with a token from the
/// environment: awr's own, on `awr serve`. The token is in no file of
/// the run; a refusal of the server is an error result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_server_is_reached_with_a_token_from_the_environment() {
    let awr = Awr::new();
    let model = FakeModel::start().await.unwrap();
    let token = "http-mcp-token-0123456789abcdef0123456";
    let root = awr.dir.path().join("served");
    std::fs::create_dir_all(&root).unwrap();
    let served = awr_tests::serve::Served::start(
        crate::util::awr_bin(),
        awr.dir.path().join("served-storage"),
        &root,
        &["--token", token],
    );
    let servers = format!(
        "  awr: {{url: {}/mcp, bearer_token_env: AWR_TEST_MCP_TOKEN}}\n",
        served.base
    );
    let yaml = calling(
        &model,
        &servers,
        "[awr/list_runs, awr/get_run]",
        &[
            "mcp__awr__list_runs {}",
            "mcp__awr__get_run {\"runId\": \"ffffffff\"}",
        ],
    );
    let flow = awr.write("http.yaml", &yaml).display().to_string();
    let out = tokio::task::block_in_place(|| {
        awr.run_in(
            awr.dir.path(),
            &[("AWR_TEST_MCP_TOKEN", token)],
            &["run", &flow],
        )
    });
    assert_eq!(out.code, 0, "{}", out.stderr);
    let said = tool_results(&awr.events(&run_id_of(&out)));
    assert!(said[0].1.contains("\"counts\""), "{said:?}");
    assert!(said[1].1.contains("no run matches"), "{said:?}");
    let holding = crate::secrets::files_containing(&awr.storage(), token);
    assert!(holding.is_empty(), "the token is in {holding:?}");

    // Without the variable, the server cannot be reached: the node fails, naming it.
    let out = tokio::task::block_in_place(|| awr.run(&["run", &flow]));
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("`AWR_TEST_MCP_TOKEN` is not set"),
        "{}",
        out.stderr
    );
}

/// `awr validate --connect`: each server granted is started and each
/// grant checked against what it lists; a missing tool or a server that
/// does not start is named, exit 2.
#[test]
fn validate_connect_checks_grants_against_the_servers_tools() {
    let Some(clis) = clis_dir() else {
        return;
    };
    let awr = Awr::new();
    let flow = |tools: &str, command: &str| {
        let yaml = format!(
            "name: v\nmcp_servers:\n  everything: {{command: {command}, args: [stdio]}}\n\
             agents:\n  a: {{provider: openai, model: m, tools: {tools}}}\nsteps: [{{agent: a}}]\n"
        );
        awr.write("v.yaml", &yaml).display().to_string()
    };
    let server = clis.join("mcp-server-everything").display().to_string();
    let good = flow("[everything/echo, everything/get-sum]", &server);
    let out = awr.run(&["validate", "--connect", &good]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    // Without --connect, nothing is started: a grant is not checked.
    let bad = flow("[everything/echo, everything/nope]", &server);
    assert_eq!(awr.run(&["validate", &bad]).code, 0);
    let out = awr.run(&["validate", "--connect", &bad]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains(
            "agents.a.tools: `everything/nope`: server `everything` lists no tool `nope`"
        ) && out.stderr.contains("get-sum"),
        "{}",
        out.stderr
    );
    let missing = flow("[everything/echo]", "awr-no-such-mcp-server");
    let out = awr.run(&["validate", "--connect", &missing]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("mcp_servers.everything: MCP server `everything` did not start"),
        "{}",
        out.stderr
    );
}

/// `server-everything` over streamable HTTP. It listens on every
/// interface, so it runs in a network namespace of its own with only the
/// loopback up (`unshare -n`; the tests run as root), with the fake model
/// and `awr run` beside it; both are stopped with the namespace's script.
#[test]
fn server_everything_over_streamable_http_in_a_network_of_its_own() {
    let Some(clis) = clis_dir() else {
        return;
    };
    let awr = Awr::new();
    let yaml =
        std::fs::read_to_string(crate::util::repo_root().join("examples/mcp/everything.yaml"))
            .unwrap()
            .replace(
                "    command: mcp-server-everything\n    args: [stdio]\n",
                "    url: http://127.0.0.1:3911/mcp\n",
            );
    assert!(
        yaml.contains("3911"),
        "the example's server is declared as expected"
    );
    let flow = awr.write("everything-http.yaml", &yaml);
    let script = r#"
        set -e
        ip link set lo up
        trap 'kill $(jobs -p) 2>/dev/null; wait' EXIT
        PORT=3911 "$1" streamableHttp > "$2/server.log" 2>&1 &
        "$3" 127.0.0.1:8089 > "$2/model.log" 2>&1 &
        for port in 3911 8089; do
            for _ in $(seq 1 600); do
                (echo > "/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
                sleep 0.05
            done
        done
        "$4" --storage "$2/storage" run "$5"
    "#;
    let out = std::process::Command::new("unshare")
        .args(["--net", "bash", "-c", script, "bash"])
        .arg(clis.join("mcp-server-everything"))
        .arg(awr.dir.path())
        .arg(env!("CARGO_BIN_EXE_fake-model"))
        .arg(crate::util::awr_bin())
        .arg(&flow)
        .env_remove("AWR_STORAGE")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run unshare (util-linux)");
    let out = Output::from(out);
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert_eq!(out.stdout.trim(), "Tool said: The sum of 2 and 3 is 5.");
    let said = tool_results(&awr.events(&run_id_of(&out)));
    assert_eq!(said.len(), 2, "{said:?}");
    assert!(said[0].1.contains("Echo: hello from awr"), "{said:?}");
}

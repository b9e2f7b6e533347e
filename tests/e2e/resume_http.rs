//! An HTTP agent whose `awr run` is killed (SIGKILL) in the middle of its
//! tool loop resumes with `awr resume`: the conversation so far is rebuilt
//! from the run's record, and the model's next call holds all of it (the
//! prompt, the model's tool call, the tool's result) and then the resume
//! message. Against the fake model server on 127.0.0.1, for each HTTP
//! provider.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};

use awr_tests::fake_model::FakeModel;
use serde_json::Value;

use crate::cancel::{gone, wait_for};
use crate::util::{Awr, Output, of_type};

/// The API key handed to awr.
const KEY: &str = "sk-awr-resume-test";

/// Makes the fake server call the shell tool with `echo hi`.
const PROMPT: &str = "TOOLTEST: run `echo hi` in the shell";

/// What `awr resume` says to the agent.
const MESSAGE: &str = "Carry on from where you stopped.";

/// One entry of a model call's conversation, whatever its wire format.
#[derive(Debug, Clone, PartialEq)]
enum Said {
    /// User text.
    User(String),
    /// Assistant text.
    Assistant(String),
    /// A tool call: id, name, arguments as JSON text.
    Call(String, String, String),
    /// A tool result: the call's id and the content as text.
    Result(String, String),
}

/// Text of a content that is a string or an array of text blocks.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        other => other.to_string(),
    }
}

/// The conversation of a Chat Completions or Anthropic Messages body, in
/// order, message boundaries aside (system prompts left out).
fn conversation(body: &Value) -> Vec<Said> {
    let mut said = Vec::new();
    for message in body["messages"].as_array().expect("messages") {
        let role = message["role"].as_str().unwrap_or_default();
        match role {
            "tool" => said.push(Said::Result(
                message["tool_call_id"].as_str().unwrap_or_default().into(),
                text_of(&message["content"]),
            )),
            "assistant" => {
                let text = match &message["content"] {
                    Value::Array(_) => None,
                    other => Some(text_of(other)),
                };
                said.extend(text.filter(|t| !t.is_empty()).map(Said::Assistant));
                for call in message["tool_calls"].as_array().into_iter().flatten() {
                    said.push(Said::Call(
                        call["id"].as_str().unwrap_or_default().into(),
                        call["function"]["name"].as_str().unwrap_or_default().into(),
                        call["function"]["arguments"]
                            .as_str()
                            .unwrap_or_default()
                            .into(),
                    ));
                }
                for block in message["content"].as_array().into_iter().flatten() {
                    match block["type"].as_str() {
                        Some("text") => said.push(Said::Assistant(text_of(&block["text"]))),
                        Some("tool_use") => said.push(Said::Call(
                            block["id"].as_str().unwrap_or_default().into(),
                            block["name"].as_str().unwrap_or_default().into(),
                            block["input"].to_string(),
                        )),
                        _ => {}
                    }
                }
            }
            "user" => match &message["content"] {
                Value::Array(blocks) => {
                    for block in blocks {
                        match block["type"].as_str() {
                            Some("tool_result") => said.push(Said::Result(
                                block["tool_use_id"].as_str().unwrap_or_default().into(),
                                text_of(&block["content"]),
                            )),
                            Some("text") => said.push(Said::User(text_of(&block["text"]))),
                            _ => {}
                        }
                    }
                }
                other => said.push(Said::User(text_of(other))),
            },
            _ => {}
        }
    }
    said
}

/// A scratch storage with a workspace directory for the agent's tools.
fn scratch() -> (Awr, PathBuf) {
    let awr = Awr::new();
    let workspace = awr.dir.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    (awr, workspace)
}

/// Starts `awr run FILE` in `workspace` with the key in its environment.
fn spawn_run(awr: &Awr, workspace: &Path, file: &str) -> Child {
    awr.command(&["run", file])
        .current_dir(workspace)
        .env("AWR_TEST_API_KEY", KEY)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn awr run")
}

/// `awr ARGS` in `workspace` with the key in its environment, to its end.
fn awr_in(awr: &Awr, workspace: &Path, args: &[&str]) -> Output {
    tokio::task::block_in_place(|| awr.run_in(workspace, &[("AWR_TEST_API_KEY", KEY)], args))
}

async fn killed_mid_tool_loop_resumes(provider: &str, model: &str, path: &str) {
    let server = FakeModel::start().await.expect("fake model");
    // The first call is answered (the tool call); the one after the tool's
    // result hangs, so the run is surely killed inside its tool loop.
    server.hold_after(1);
    let (awr, workspace) = scratch();
    let yaml = format!(
        "name: resume-{provider}\ninput: {PROMPT:?}\nagents:\n  operator:\n    \
         provider: {provider}\n    model: {model}\n    base_url: {base}{path}\n    \
         api_key_env: AWR_TEST_API_KEY\n    system_prompt: You operate a shell.\n    \
         tools: [shell, read_file]\nsteps: [{{agent: operator}}]\n",
        base = server.base_url()
    );
    let file = awr.write("flow.yaml", &yaml).display().to_string();
    let mut child = spawn_run(&awr, &workspace, &file);
    wait_for(30, "a run in the store", || !awr.run_ids().is_empty());
    let run = awr.run_ids().pop().unwrap();
    wait_for(30, "the tool's result on record and the next call", || {
        !of_type(&awr.events_so_far(&run), "tool:completed").is_empty()
            && server.requests().len() >= 2
    });
    child.kill().unwrap();
    child.wait().unwrap();
    let before = awr.events(&run);
    assert!(
        of_type(&before, "flow:completed").is_empty(),
        "{provider}: killed before its end"
    );
    let node_run = of_type(&before, "agent:start")[0]["nodeRunId"].clone();
    let session = of_type(&before, "agent:session").last().map_or_else(
        || of_type(&before, "agent:start")[0]["sessionId"].clone(),
        |e| e["sessionId"].clone(),
    );

    server.release();
    let calls_before = server.requests().len();
    let out = awr_in(&awr, &workspace, &["resume", &run, "--message", MESSAGE]);
    assert_eq!(out.code, 0, "{provider}: {}\n{}", out.stderr, out.stdout);
    assert_eq!(
        out.stdout.trim(),
        "Hello from the fake server.",
        "{provider}"
    );

    let requests = server.requests();
    assert_eq!(
        requests.len(),
        calls_before + 1,
        "{provider}: one call continues the conversation"
    );
    let said = conversation(&requests.last().unwrap().body);
    let call = said
        .iter()
        .find_map(|s| match s {
            Said::Call(id, name, args) => Some((id.clone(), name.clone(), args.clone())),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{provider}: no tool call in {said:#?}"));
    assert_eq!(call.1, "shell", "{provider}: {said:#?}");
    assert!(call.2.contains("echo hi"), "{provider}: {said:#?}");
    let result = said
        .iter()
        .find_map(|s| match s {
            Said::Result(id, content) if *id == call.0 => Some(content.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{provider}: no result of the call in {said:#?}"));
    assert!(result.contains("hi"), "{provider}: {result}");
    let at = |wanted: &dyn Fn(&Said) -> bool| {
        said.iter()
            .position(wanted)
            .unwrap_or_else(|| panic!("{provider}: missing from {said:#?}"))
    };
    let prompt = at(&|s| matches!(s, Said::User(t) if t == PROMPT));
    let called = at(&|s| matches!(s, Said::Call(..)));
    let answered = at(&|s| matches!(s, Said::Result(..)));
    let message = at(&|s| matches!(s, Said::User(t) if t == MESSAGE));
    assert!(
        prompt < called && called < answered && answered < message,
        "{provider}: in order: prompt, call, result, message: {said:#?}"
    );
    assert_eq!(
        message,
        said.len() - 1,
        "{provider}: the message comes last"
    );
    assert_eq!(
        said.iter().filter(|s| matches!(s, Said::Call(..))).count(),
        1,
        "{provider}: the call is not repeated: {said:#?}"
    );

    let after = awr.events(&run);
    assert_eq!(
        of_type(&after, "tool:completed").len(),
        1,
        "{provider}: the tool is not run again"
    );
    let resumed = of_type(&after, "agent:start")
        .last()
        .copied()
        .unwrap()
        .clone();
    assert_eq!(
        resumed["nodeRunId"], node_run,
        "{provider}: the same node run"
    );
    assert_eq!(resumed["prompt"], MESSAGE, "{provider}");
    assert_eq!(
        resumed["sessionId"], session,
        "{provider}: the same session"
    );
    assert_eq!(of_type(&after, "flow:resumed").len(), 1, "{provider}");
    assert_eq!(
        after.last().unwrap()["type"],
        "flow:completed",
        "{provider}"
    );
    let shown = awr.show_json(&run);
    assert_eq!(shown["status"], "completed", "{provider}: {shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openai_agent_killed_mid_tool_loop_resumes_with_its_whole_conversation() {
    killed_mid_tool_loop_resumes("openai", "gpt-4o-mini", "/v1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anthropic_agent_killed_mid_tool_loop_resumes_with_its_whole_conversation() {
    killed_mid_tool_loop_resumes("anthropic", "claude-sonnet-4-5", "").await;
}

/// A shell the model started, left running by a writer killed with
/// SIGKILL (nothing records its processes), is killed by `awr resume`
/// before the agent goes on: it carries the run's `AWR_RUN_ID`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_kills_the_shell_a_dead_writer_left_running() {
    let server = FakeModel::start().await.expect("fake model");
    let (awr, workspace) = scratch();
    let pid_file = awr.dir.path().join("pids");
    let _leftovers = Leftovers(pid_file.clone());
    let command = format!(
        "sleep 300 >/dev/null 2>&1 & echo $$ $! > {}; wait",
        pid_file.display()
    );
    let prompt = format!(
        "CALLTOOL shell {}",
        serde_json::json!({ "command": command })
    );
    let yaml = format!(
        "name: shell-left\ninput: {prompt:?}\nagents:\n  operator:\n    provider: openai\n    \
         model: gpt-4o-mini\n    base_url: {}/v1\n    api_key_env: AWR_TEST_API_KEY\n    \
         tools: [shell]\nsteps: [{{agent: operator}}]\n",
        server.base_url()
    );
    let file = awr.write("flow.yaml", &yaml).display().to_string();
    let mut child = spawn_run(&awr, &workspace, &file);
    let pids = || -> Vec<String> {
        std::fs::read_to_string(&pid_file)
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    };
    wait_for(30, "the shell and its child to start", || pids().len() == 2);
    child.kill().unwrap();
    child.wait().unwrap();
    let started = pids();
    assert!(
        started.iter().all(|p| !gone(p)),
        "alive after awr died: {started:?}"
    );

    let run = awr.run_ids().pop().unwrap();
    let out = awr_in(&awr, &workspace, &["resume", &run]);
    assert_eq!(out.code, 0, "{}\n{}", out.stderr, out.stdout);
    for pid in &started {
        wait_for(10, &format!("process {pid} of the dead run to end"), || {
            gone(pid)
        });
    }
}

/// Kills the processes whose pids a test wrote to its file, however the test ends.
struct Leftovers(std::path::PathBuf);

impl Drop for Leftovers {
    fn drop(&mut self) {
        let pids = std::fs::read_to_string(&self.0).unwrap_or_default();
        for pid in pids.split_whitespace().filter(|p| !gone(p)) {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", pid])
                .status();
        }
    }
}

#[test]
fn conversation_reads_both_formats_in_order() {
    let chat = serde_json::json!({"messages": [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "p"},
        {"role": "assistant", "content": "t", "tool_calls": [
            {"id": "c1", "function": {"name": "shell", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "hi"},
        {"role": "user", "content": "m"}]});
    let anthropic = serde_json::json!({"messages": [
        {"role": "user", "content": [{"type": "text", "text": "p"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "t"},
            {"type": "tool_use", "id": "c1", "name": "shell", "input": {}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "c1", "content": "hi"},
            {"type": "text", "text": "m"}]}]});
    let expected = vec![
        Said::User("p".into()),
        Said::Assistant("t".into()),
        Said::Call("c1".into(), "shell".into(), "{}".into()),
        Said::Result("c1".into(), "hi".into()),
        Said::User("m".into()),
    ];
    assert_eq!(conversation(&chat), expected);
    assert_eq!(conversation(&anthropic), expected);
}

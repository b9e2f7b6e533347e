//! HTTP agents end to end: `awr run` with `openai` and `anthropic` agents
//! against the fake model server on 127.0.0.1, the runtime running their
//! tools. Each test checks the three records (event log, snapshot,
//! transcript) and that the API key reached the server but no file.

use awr_tests::fake_model::FakeModel;
use serde_json::Value;

use crate::util::{Awr, Output, of_type, read_json_lines, run_id_of};

/// The API key the tests hand to awr; unique so a search for it cannot
/// match anything else.
const KEY: &str = "sk-awr-test-7f3a9c1e5b2d4680";

/// The two HTTP providers, with a model each and the base URL they expect
/// (OpenAI's includes `/v1`, Anthropic's does not).
const PROVIDERS: [(&str, &str, &str); 2] = [
    ("openai", "gpt-4o-mini", "/v1"),
    ("anthropic", "claude-sonnet-4-5", ""),
];

struct Scratch {
    awr: Awr,
    server: FakeModel,
}

impl Scratch {
    async fn new() -> Self {
        Self {
            awr: Awr::new(),
            server: FakeModel::start().await.expect("fake model"),
        }
    }

    /// A one-agent workflow on `provider`, granted shell and read_file,
    /// with `prompt` as its input and `extra` agent settings.
    fn workflow(&self, provider: &str, prompt: &str, extra: &str) -> String {
        let (_, model, path) = PROVIDERS
            .iter()
            .find(|(p, ..)| *p == provider)
            .expect("a provider");
        let yaml = format!(
            "name: http-{provider}\n\
             input: {prompt:?}\n\
             agents:\n  operator:\n    provider: {provider}\n    model: {model}\n    \
             base_url: {}{path}\n    api_key_env: AWR_TEST_API_KEY\n    \
             system_prompt: You operate a shell.\n    tools: [shell, read_file]\n{extra}\
             steps: [{{agent: operator}}]\n",
            self.server.base_url()
        );
        self.awr
            .write(&format!("{provider}.yaml"), &yaml)
            .display()
            .to_string()
    }

    /// `awr run FILE` in the scratch workspace with the key in the environment.
    fn run(&self, file: &str) -> Output {
        let workspace = self.workspace();
        tokio::task::block_in_place(|| {
            self.awr
                .run_in(&workspace, &[("AWR_TEST_API_KEY", KEY)], &["run", file])
        })
    }

    fn workspace(&self) -> std::path::PathBuf {
        let dir = self.awr.dir.path().join("workspace");
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn events(&self, run: &str) -> Vec<Value> {
        self.awr.events(run)
    }

    fn transcript(&self, run: &str) -> Vec<Value> {
        read_json_lines(
            &self
                .awr
                .storage()
                .join("transcripts")
                .join(format!("{run}.jsonl")),
        )
    }

    /// The key reached the server, but no file under the storage directory,
    /// and nothing awr printed.
    fn assert_key_kept_secret(&self, out: &Output) {
        assert!(
            !out.stdout.contains(KEY) && !out.stderr.contains(KEY),
            "the key was printed"
        );
        let mut files = vec![self.awr.storage()];
        while let Some(path) = files.pop() {
            if path.is_dir() {
                files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            } else {
                let bytes = std::fs::read(&path).unwrap();
                let text = String::from_utf8_lossy(&bytes);
                assert!(!text.contains(KEY), "the key is in {}", path.display());
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_runs_echo_hi_through_the_shell_tool_on_each_provider() {
    for (provider, ..) in PROVIDERS {
        let s = Scratch::new().await;
        let file = s.workflow(provider, "TOOLTEST: run `echo hi` in the shell", "");
        let out = s.run(&file);
        assert_eq!(out.code, 0, "{provider}: {}", out.stderr);
        assert!(
            out.stdout.contains("Tool said: "),
            "{provider}: {}",
            out.stdout
        );
        let shown = "  tool shell (";
        assert!(out.stderr.contains(shown), "{provider}: {}", out.stderr);
        let run = run_id_of(&out);
        let events = s.events(&run);

        let completed = of_type(&events, "tool:completed");
        assert_eq!(completed.len(), 1, "{provider}: {events:#?}");
        assert_eq!(completed[0]["toolName"], "shell");
        assert_eq!(completed[0]["toolOutput"]["stdout"], "hi\n");
        assert_eq!(completed[0]["toolOutput"]["exit_code"], 0);
        assert!(completed[0]["durationMs"].is_u64());
        let started = of_type(&events, "tool:started");
        assert_eq!(started[0]["callId"], completed[0]["callId"]);
        assert_eq!(started[0]["toolInput"]["command"], "echo hi");

        let complete = of_type(&events, "agent:complete");
        let usage = &complete[0]["usage"];
        assert!(
            usage["inputTokens"].as_u64().unwrap() > 0,
            "{provider}: {usage}"
        );
        assert!(
            usage["outputTokens"].as_u64().unwrap() > 0,
            "{provider}: {usage}"
        );
        assert_eq!(complete[0]["numTurns"], 2);
        assert!(
            complete[0]["totalCostUsd"].as_f64().unwrap() > 0.0,
            "{provider}: a listed model is priced"
        );
        let node = of_type(&events, "node:completed");
        assert_eq!(
            node[0]["output"]["metadata"]["tool_calls_count"], 1,
            "{node:?}"
        );

        let snapshot = s.awr.state(&run);
        let session = snapshot["agentSessions"]["operator"].as_str().unwrap();
        let start = of_type(&events, "agent:start");
        assert_eq!(start[0]["sessionId"], session);

        let transcript = s.transcript(&run);
        let tool_lines: Vec<&Value> = transcript
            .iter()
            .filter(|l| l["type"] == "tool.call" || l["type"] == "tool.result")
            .collect();
        assert_eq!(tool_lines.len(), 2, "{provider}: {transcript:#?}");
        assert!(
            tool_lines
                .iter()
                .all(|l| l["payload"]["fidelity"] == "router")
        );
        let reply = transcript
            .iter()
            .find(|l| l["type"] == "message.assistant")
            .unwrap();
        assert!(
            reply["payload"]["blocks"]
                .as_array()
                .unwrap()
                .iter()
                .any(|b| b["type"] == "tool_use" && b["fidelity"] == "router")
        );

        let requests = s.server.requests();
        let (header, expected) = match provider {
            "openai" => ("authorization", format!("Bearer {KEY}")),
            _ => ("x-api-key", KEY.to_owned()),
        };
        assert!(
            requests
                .iter()
                .all(|r| r.header(header) == Some(expected.as_str())),
            "{provider}: the key goes in `{header}`"
        );
        assert_eq!(requests.len(), 2, "{provider}: one request per turn");
        assert_eq!(
            requests[0].peer, requests[1].peer,
            "{provider}: the second turn reuses the connection"
        );
        s.assert_key_kept_secret(&out);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_thinking_keeps_its_signature_in_the_log_and_the_next_turn() {
    let s = Scratch::new().await;
    let file = s.workflow("anthropic", "TOOLTEST: run `echo hi`", "");
    let out = s.run(&file);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let events = s.events(&run_id_of(&out));
    let thinking = of_type(&events, "agent:thinking");
    assert!(!thinking.is_empty(), "{events:#?}");
    let signature = thinking[0]["signature"].as_str().unwrap();
    assert!(!of_type(&events, "agent:thinking:delta").is_empty());
    // The second turn sends the signed thinking block back verbatim.
    let second = &s.server.requests()[1].body;
    let sent = second["messages"][1]["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "thinking")
        .expect("the thinking block goes back");
    assert_eq!(sent["signature"], signature);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_that_always_rate_limits_fails_the_run_after_its_retries() {
    for (provider, ..) in PROVIDERS {
        let s = Scratch::new().await;
        let file = s.workflow(provider, "RATETEST", "    max_retries: 1\n");
        let out = s.run(&file);
        assert_eq!(out.code, 1, "{provider}: {}", out.stderr);
        assert!(
            out.stderr.contains("rate limited"),
            "{provider}: {}",
            out.stderr
        );
        let events = s.events(&run_id_of(&out));
        let limited = of_type(&events, "rate:limited");
        assert_eq!(limited.len(), 1, "{provider}: one retry");
        assert_eq!(limited[0]["provider"], provider);
        assert_eq!(limited[0]["retryAfterMs"], 1000, "retry-after is honoured");
        let shown = format!("rate limited by {provider} (attempt 1), retrying in 1000 ms");
        assert!(out.stderr.contains(&shown), "{provider}: {}", out.stderr);
        let error = of_type(&events, "agent:error");
        assert_eq!(error[0]["errorType"], "rate_limit");
        assert_eq!(events.last().unwrap()["type"], "flow:failed");
        assert_eq!(s.server.requests().len(), 2);
        s.assert_key_kept_secret(&out);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_once_is_waited_out_and_the_run_completes() {
    for (provider, ..) in PROVIDERS {
        let s = Scratch::new().await;
        let file = s.workflow(provider, "RATEONCE then answer", "");
        let out = s.run(&file);
        assert_eq!(out.code, 0, "{provider}: {}", out.stderr);
        let events = s.events(&run_id_of(&out));
        assert_eq!(of_type(&events, "rate:limited").len(), 1);
        assert_eq!(events.last().unwrap()["type"], "flow:completed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_errors_cut_streams_and_bad_requests_fail_with_their_kind() {
    // (prompt, errorType, message part, requests made with one retry allowed)
    let cases = [
        ("ERRTEST", "api_error", "HTTP 500", 2),
        ("BADREQ", "api_error", "HTTP 400", 1),
        ("CUTSTREAM", "network_error", "stream ended", 1),
        // The fake sends `fake mid-stream failure` (OpenAI), `Overloaded` (Anthropic).
        ("MIDERR", "api_error", "API error: ", 1),
    ];
    for (provider, ..) in PROVIDERS {
        for (prompt, error_type, message, requests) in cases {
            let s = Scratch::new().await;
            let retry = "    max_retries: 1\n";
            let out = s.run(&s.workflow(provider, prompt, retry));
            let what = format!("{provider} {prompt}");
            assert_eq!(out.code, 1, "{what}: {}", out.stderr);
            let events = s.events(&run_id_of(&out));
            let error = of_type(&events, "agent:error");
            assert_eq!(error[0]["errorType"], error_type, "{what}: {error:?}");
            let text = error[0]["message"].as_str().unwrap();
            assert!(text.contains(message), "{what}: {text}");
            assert_eq!(s.server.requests().len(), requests, "{what}");
            assert_eq!(events.last().unwrap()["type"], "flow:failed");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_tool_calls_go_back_to_the_model_and_the_run_goes_on() {
    for (provider, ..) in PROVIDERS {
        let s = Scratch::new().await;
        std::fs::write(s.awr.dir.path().join("secret.txt"), "top secret").unwrap();
        for (prompt, error) in [
            (
                r#"CALLTOOL read_file {"path": "../secret.txt"}"#,
                "leaves the workspace",
            ),
            (r#"CALLTOOL shell {"cmd": 3}"#, "invalid input"),
        ] {
            let out = s.run(&s.workflow(provider, prompt, ""));
            assert_eq!(out.code, 0, "{provider} {prompt}: {}", out.stderr);
            assert!(!out.stdout.contains("top secret"));
            let events = s.events(&run_id_of(&out));
            let failed = of_type(&events, "tool:failed");
            assert_eq!(failed.len(), 1, "{provider} {prompt}: {events:#?}");
            let said = failed[0]["error"].as_str().unwrap();
            assert!(said.contains(error), "{provider} {prompt}: {said}");
            assert!(of_type(&events, "tool:completed").is_empty());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_key_or_an_unknown_tool_is_refused_with_its_name() {
    let s = Scratch::new().await;
    let file = s.workflow("openai", "hello", "");
    let workspace = s.workspace();
    let out = tokio::task::block_in_place(|| s.awr.run_in(&workspace, &[], &["run", &file]));
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(out.stderr.contains("AWR_TEST_API_KEY"), "{}", out.stderr);
    assert!(s.server.requests().is_empty());

    let yaml = std::fs::read_to_string(&file)
        .unwrap()
        .replace("[shell, read_file]", "[shell, rm_rf]");
    let bad = s.awr.write("bad.yaml", &yaml).display().to_string();
    let runs = s.awr.run_ids().len();
    let out = s.run(&bad);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains("unknown tool `rm_rf`"),
        "{}",
        out.stderr
    );
    assert_eq!(s.awr.run_ids().len(), runs, "refused before any run");
}

/// Runs an `openai` agent whose model calls `shell` with `command`, which
/// must complete: what awr printed, and the shell's stdout as recorded.
fn shell_stdout(s: &Scratch, command: &str) -> (Output, Value) {
    let prompt = format!(
        "CALLTOOL shell {}",
        serde_json::json!({ "command": command })
    );
    let out = s.run(&s.workflow("openai", &prompt, ""));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let events = s.events(&run_id_of(&out));
    let completed = of_type(&events, "tool:completed");
    (out, completed[0]["toolOutput"]["stdout"].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shell_the_model_runs_cannot_read_the_api_key() {
    let s = Scratch::new().await;
    let (out, stdout) = shell_stdout(&s, "echo key=$AWR_TEST_API_KEY");
    assert_eq!(stdout, "key=\n");
    s.assert_key_kept_secret(&out);
}

/// What the shell tool runs carries `AWR_RUN_ID`, as every process of a
/// run does, so that a resume finds it if its writer dies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shell_the_model_runs_is_tagged_with_the_run() {
    let s = Scratch::new().await;
    let (out, stdout) = shell_stdout(&s, "echo run=$AWR_RUN_ID");
    assert_eq!(stdout, format!("run={}\n", run_id_of(&out)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_examples_run_against_the_fake_server() {
    for example in ["openai", "anthropic"] {
        let s = Scratch::new().await;
        let path = crate::util::repo_root().join(format!("examples/http/{example}.yaml"));
        let yaml = std::fs::read_to_string(&path)
            .unwrap()
            .replace("http://127.0.0.1:8089", &s.server.base_url());
        let file = s.awr.write(&format!("{example}.yaml"), &yaml);
        let out = s.run(&file.display().to_string());
        assert_eq!(out.code, 0, "{example}: {}", out.stderr);
        // The model got the shell's result as JSON, and said so.
        assert!(
            out.stdout.contains(r#""stdout":"hi\n""#),
            "{example}: {}",
            out.stdout
        );
        let events = s.events(&run_id_of(&out));
        assert_eq!(of_type(&events, "tool:completed").len(), 1, "{example}");
        if example == "anthropic" {
            let asked = &s.server.requests()[0].body;
            assert_eq!(asked["thinking"]["budget_tokens"], 2048, "{asked}");
        }
    }
}

#[test]
fn a_key_pasted_into_the_workflow_is_refused_and_never_echoed() {
    let awr = Awr::new();
    let yaml = "name: pasted\nagents:\n  a:\n    provider: openai\n    model: gpt-4o\n    \
                api_key_env: sk-proj-PASTED0123456789\nsteps: [{agent: a}]\n";
    let file = awr.write("pasted.yaml", yaml).display().to_string();
    for command in ["validate", "run"] {
        let out = awr.run(&[command, &file]);
        assert_eq!(out.code, 2, "{command}: {}", out.stderr);
        assert!(out.stderr.contains("agents.a"), "{command}: {}", out.stderr);
        assert!(
            out.stderr.contains("api_key_env"),
            "{command}: {}",
            out.stderr
        );
        assert!(!out.stderr.contains("PASTED"), "{command}: {}", out.stderr);
    }
    assert!(awr.run_ids().is_empty());
}

//! The genuine agent CLIs (Claude Code, Codex, Gemini CLI, Copilot CLI) as
//! workflow agents through `awr run`, fully offline against the fake model
//! server on 127.0.0.1.
//!
//! Gated on `AWR_AGENT_CLIS`: the directory holding the CLIs' executables
//! (`.ci/install-agent-clis` installs the pinned versions and prints it;
//! `.ci/run` and `cargo xtask test` set it). Without it every test here says
//! on the test output that it skipped, and passes.
//!
//! Each CLI gets a `HOME` (and XDG directories, `CODEX_HOME`) of its own in
//! the test's temporary directory, with the settings it needs to run offline
//! (see docs/providers.md, "Real CLIs in CI"), and runs in a scratch working
//! directory outside the repository.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use awr_tests::fake_model::FakeModel;
use domain::{EventKind, RunSnapshot, RuntimeEvent};
use serde_json::Value;

use crate::util::{Output, awr_bin, run_id_of};

/// The environment variable naming the CLIs' bin directory.
const CLIS_VAR: &str = "AWR_AGENT_CLIS";

/// The prompt: TOOLTEST makes the fake server call the shell tool with
/// `echo hi`, then answer `Tool said: hi` once the result comes back.
const PROMPT: &str = "TOOLTEST: run the shell command `echo hi` and tell me what it printed.";

/// What the fake server answers after the tool result: this, then the tool
/// output as the CLI sent it back (each CLI wraps `hi` differently).
const FINAL_PREFIX: &str = "Tool said: ";

/// The CLIs' bin directory, or `None` (after saying the test skipped) when
/// the tests are not enabled.
pub(crate) fn clis_dir() -> Option<PathBuf> {
    match std::env::var_os(CLIS_VAR) {
        Some(dir) if !dir.is_empty() => Some(PathBuf::from(dir)),
        _ => {
            awr_tests::skipped(&format!("{CLIS_VAR} is not set"), "cargo xtask test");
            None
        }
    }
}

/// How one CLI is set up: its provider name, executable, model, and the
/// environment and files it needs under its own home.
pub(crate) struct Cli {
    pub provider: &'static str,
    pub exe: &'static str,
    pub model: &'static str,
    /// Whether it reports token usage (Copilot only through its usage file, which awr reads).
    pub reports_usage: bool,
}

/// A scratch directory for one CLI run: home, working directory, storage.
pub(crate) struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    pub(crate) fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        for sub in ["home", "work", "storage"] {
            std::fs::create_dir_all(dir.path().join(sub)).expect("mkdir");
        }
        Self { dir }
    }

    pub(crate) fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn home(&self) -> PathBuf {
        self.path("home")
    }

    pub(crate) fn storage(&self) -> PathBuf {
        self.path("storage")
    }

    pub(crate) fn write(&self, rel: &str, body: &str) -> PathBuf {
        let path = self.path(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, body).expect("write");
        path
    }

    /// `awr --storage <storage> ARGS` from the scratch working directory,
    /// killed (and the test failed) after `secs`.
    pub(crate) fn awr(&self, secs: u64, args: &[&str]) -> Output {
        let mut child = Command::new(awr_bin())
            .arg("--storage")
            .arg(self.storage())
            .args(args)
            .current_dir(self.path("work"))
            .env_remove("AWR_STORAGE")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn awr");
        // Read both pipes on threads so a chatty CLI cannot block on a full pipe.
        let mut stdout = child.stdout.take().expect("stdout");
        let mut stderr = child.stderr.take().expect("stderr");
        let out_reader = std::thread::spawn(move || {
            let mut buf = Vec::new();
            std::io::Read::read_to_end(&mut stdout, &mut buf).ok();
            buf
        });
        let err_reader = std::thread::spawn(move || {
            let mut buf = Vec::new();
            std::io::Read::read_to_end(&mut stderr, &mut buf).ok();
            buf
        });
        let deadline = Instant::now() + Duration::from_secs(secs);
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait") {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("`awr {}` did not end within {secs} s", args.join(" "));
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        Output {
            code: status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out_reader.join().expect("stdout reader"))
                .into_owned(),
            stderr: String::from_utf8_lossy(&err_reader.join().expect("stderr reader"))
                .into_owned(),
        }
    }
}

/// The environment every CLI gets: its own home and XDG directories, so it
/// reads no user settings and writes nothing outside the scratch directory.
fn common_env(scratch: &Scratch) -> Vec<(String, String)> {
    let home = scratch.home();
    let h = home.display().to_string();
    vec![
        ("HOME".into(), h.clone()),
        ("XDG_CONFIG_HOME".into(), format!("{h}/.config")),
        ("XDG_CACHE_HOME".into(), format!("{h}/.cache")),
        ("XDG_DATA_HOME".into(), format!("{h}/.local/share")),
        ("XDG_STATE_HOME".into(), format!("{h}/.local/state")),
        ("NO_UPDATE_NOTIFIER".into(), "1".into()),
    ]
}

/// The offline settings of one CLI (see /docs/providers.md), writing the
/// files it needs under the scratch home.
pub(crate) fn offline_env(cli: &Cli, scratch: &Scratch, base: &str) -> Vec<(String, String)> {
    let mut env = common_env(scratch);
    let mut add = |k: &str, v: &str| env.push((k.to_owned(), v.to_owned()));
    match cli.provider {
        "claude-code" => {
            add("ANTHROPIC_BASE_URL", base);
            add("ANTHROPIC_API_KEY", "sk-ant-fake");
            add("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
            add("DISABLE_AUTOUPDATER", "1");
            add("DISABLE_TELEMETRY", "1");
        }
        "codex" => {
            let codex_home = scratch.home().join(".codex");
            let config = format!(
                "model = \"{model}\"\n\
                 model_provider = \"fake\"\n\
                 approval_policy = \"never\"\n\
                 sandbox_mode = \"danger-full-access\"\n\
                 \n\
                 [model_providers.fake]\n\
                 name = \"Fake local provider\"\n\
                 base_url = \"{base}/v1\"\n\
                 env_key = \"FAKE_OPENAI_API_KEY\"\n\
                 wire_api = \"responses\"\n",
                model = cli.model
            );
            scratch.write("home/.codex/config.toml", &config);
            add("CODEX_HOME", &codex_home.display().to_string());
            add("FAKE_OPENAI_API_KEY", "sk-fake");
        }
        "gemini" => {
            scratch.write(
                "home/.gemini/settings.json",
                r#"{
  "general": { "enableAutoUpdate": false, "enableAutoUpdateNotification": false },
  "privacy": { "usageStatisticsEnabled": false },
  "telemetry": { "enabled": false },
  "security": { "folderTrust": { "enabled": false }, "auth": { "selectedType": "gemini-api-key" } }
}
"#,
            );
            add("GOOGLE_GEMINI_BASE_URL", base);
            add("GEMINI_API_KEY", "fake-gemini-key");
        }
        "copilot" => {
            add("COPILOT_OFFLINE", "true");
            add("COPILOT_PROVIDER_BASE_URL", &format!("{base}/v1"));
            add("COPILOT_PROVIDER_API_KEY", "sk-fake");
            add("COPILOT_MODEL", cli.model);
        }
        other => panic!("no offline settings for {other}"),
    }
    env
}

/// A one-agent workflow running `cli` from `bin` with `env`.
pub(crate) fn workflow(
    scratch: &Scratch,
    cli: &Cli,
    bin: &Path,
    env: &[(String, String)],
) -> PathBuf {
    let q = |s: &str| serde_json::to_string(s).expect("quote");
    let exe = bin.join(cli.exe);
    let mut yaml = format!(
        "name: real-{provider}\nagents:\n  coder:\n    provider: {provider}\n    executable: {exe}\n    model: {model}\n    timeout: 120s\n    env:\n",
        provider = cli.provider,
        exe = q(&exe.display().to_string()),
        model = q(cli.model),
    );
    for (k, v) in env {
        yaml.push_str(&format!("      {k}: {}\n", q(v)));
    }
    yaml.push_str("steps: [{agent: coder}]\n");
    scratch.write("flow.yaml", &yaml)
}

/// The parsed lines of a JSON-lines file.
fn json_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect()
}

/// Runs one CLI through `awr run` with the TOOLTEST prompt and checks the
/// records: session id, usage, the agent-emitted shell call, the final text.
async fn run_cli(cli: Cli) {
    let Some(bin) = clis_dir() else { return };
    let server = FakeModel::start().await.expect("fake model");
    let scratch = Scratch::new();
    let env = offline_env(&cli, &scratch, &server.base_url());
    let flow = workflow(&scratch, &cli, &bin, &env);
    let flow = flow.display().to_string();

    let started = Instant::now();
    // The blocking wait runs off the runtime so the fake server keeps serving.
    let scratch = std::sync::Arc::new(scratch);
    let out = {
        let scratch = std::sync::Arc::clone(&scratch);
        tokio::task::spawn_blocking(move || {
            scratch.awr(180, &["run", &flow, "--input-text", PROMPT])
        })
        .await
        .expect("awr task")
    };
    let elapsed = started.elapsed();
    let requests = server.requests();
    println!(
        "{}: exit {} in {:.1} s, {} request(s) to the fake server: {:?}",
        cli.provider,
        out.code,
        elapsed.as_secs_f64(),
        requests.len(),
        requests
            .iter()
            .map(|r| format!("{} {}", r.method, r.path))
            .collect::<Vec<_>>()
    );
    assert_eq!(
        out.code, 0,
        "{}: awr run failed\nstdout:\n{}\nstderr:\n{}",
        cli.provider, out.stdout, out.stderr
    );
    let final_text = out.stdout.trim();
    assert!(
        final_text.starts_with(FINAL_PREFIX) && final_text.contains("hi"),
        "{}: the final output is not the fake server's final text: {final_text:?}\nstderr:\n{}",
        cli.provider,
        out.stderr
    );

    let run = run_id_of(&out);
    let run_dir = scratch.storage().join("runs").join(&run);

    let events: Vec<RuntimeEvent> = std::fs::read_to_string(run_dir.join("events.ndjson"))
        .expect("events")
        .lines()
        .map(|l| RuntimeEvent::from_json(l.as_bytes()).expect("event"))
        .collect();
    // The run's state: the fold of its log (a run this short saves no snapshot).
    let state = RunSnapshot::fold(&events).expect("a foldable log");
    let session = state
        .agent_sessions
        .iter()
        .find_map(|(node, session)| (node.as_str() == "coder").then(|| session.as_str()))
        .unwrap_or_else(|| panic!("{}: no session for coder", cli.provider));
    assert!(!session.is_empty(), "{}: empty session id", cli.provider);
    let usage = events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::AgentComplete { usage, .. } => Some(usage.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{}: no agent:complete event", cli.provider));
    println!("{}: session {session}, usage {usage:?}", cli.provider);
    if cli.reports_usage {
        assert!(
            usage.input_tokens > 0 && usage.output_tokens > 0,
            "{}: usage {usage:?}",
            cli.provider
        );
    } else {
        assert_eq!(
            (usage.input_tokens, usage.output_tokens),
            (0, 0),
            "{}: no usage on stdout",
            cli.provider
        );
    }

    let transcript = json_lines(
        &scratch
            .storage()
            .join("transcripts")
            .join(format!("{run}.jsonl")),
    );
    let shell_call = transcript
        .iter()
        .filter_map(|l| l["payload"]["blocks"].as_array())
        .flatten()
        .chain(transcript.iter().map(|l| &l["payload"]))
        .find(|b| {
            ["tool_use", "command"].contains(&b["type"].as_str().unwrap_or(""))
                && b["fidelity"] == "agent_emitted"
                && b.to_string().contains("echo hi")
        });
    assert!(
        shell_call.is_some(),
        "{}: no agent_emitted tool_use/command with `echo hi` in the transcript:\n{}",
        cli.provider,
        transcript
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    );
    resume_session(&cli, &bin, &env, &scratch, &server, session).await;
}

/// Resumes the session of the first run through the provider's `QueryFn`
/// (what `awr resume` will do): the CLI must continue the same session and
/// send the earlier conversation back to the model.
async fn resume_session(
    cli: &Cli,
    bin: &Path,
    env: &[(String, String)],
    scratch: &Scratch,
    server: &FakeModel,
    session: &str,
) {
    use adapters_agents::Providers;
    use adapters_agents::{claude::ClaudeCode, codex::Codex, copilot::Copilot, gemini::Gemini};
    use application::ports::{AgentMessage, AgentRequest, QueryFn};
    use domain::workflow::{AgentDef, Provider, Timeout};
    use futures::StreamExt;
    use std::sync::Arc;

    let provider = match cli.provider {
        "claude-code" => Provider::ClaudeCode,
        "codex" => Provider::Codex,
        "gemini" => Provider::Gemini,
        _ => Provider::Copilot,
    };
    let providers = Providers::new()
        .with(Provider::ClaudeCode, Arc::new(ClaudeCode::default()))
        .with(Provider::Codex, Arc::new(Codex::default()))
        .with(Provider::Gemini, Arc::new(Gemini::default()))
        .with(Provider::Copilot, Arc::new(Copilot::default()));
    let before = server.requests().len();
    let request = AgentRequest {
        run_id: domain::RunId::new(uuid::Uuid::new_v4()).expect("run id"),
        workflow: "resume".into(),
        node_id: domain::NodeId::new("coder").expect("node"),
        node_run_id: domain::NodeRunId::new(uuid::Uuid::new_v4()),
        agent_name: "coder".into(),
        agent: AgentDef {
            executable: Some(bin.join(cli.exe).display().to_string()),
            model: Some(cli.model.into()),
            env: env.iter().cloned().collect(),
            timeout: Some(Timeout(Duration::from_secs(120))),
            workdir: Some(scratch.path("work").display().to_string()),
            ..AgentDef::new(provider)
        },
        prompt: "continue".into(),
        resume: Some(domain::SessionId::new(session).expect("session")),
        fork_session: false,
        session_id: None,
        session_usage: Default::default(),
        history: Vec::new(),
        approved_call: None,
        call_index: 1,
        instance: "0".into(),
        instance_call: 1,
        traceparent: None,
        run_tools: Default::default(),
        mcp_servers: Default::default(),
    };
    let out: Vec<_> = providers
        .query(request)
        .await
        .expect("start the resume")
        .collect()
        .await;
    let result = match out.last() {
        Some(Ok(AgentMessage::Completed(result))) => result.clone(),
        other => panic!(
            "{}: resume did not complete: {other:?}\n{out:?}",
            cli.provider
        ),
    };
    let announced = out.iter().find_map(|m| match m {
        Ok(AgentMessage::Session { session_id, .. }) => Some(session_id.to_string()),
        _ => None,
    });
    let resumed = announced.or(result.session_id.map(|s| s.to_string()));
    assert_eq!(
        resumed.as_deref(),
        Some(session),
        "{}: the same session continues",
        cli.provider
    );
    let requests = server.requests();
    let last = requests
        .get(before..)
        .and_then(|r| r.last())
        .expect("a model call");
    assert!(
        last.body.to_string().contains("echo hi"),
        "{}: the resumed call carries the earlier conversation",
        cli.provider
    );
    println!("{}: resumed session {session}", cli.provider);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_runs_offline_as_a_workflow_agent() {
    run_cli(Cli {
        provider: "claude-code",
        exe: "claude",
        model: "claude-sonnet-4-5",
        reports_usage: true,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_runs_offline_as_a_workflow_agent() {
    run_cli(Cli {
        provider: "codex",
        exe: "codex",
        model: "gpt-5.5",
        reports_usage: true,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_runs_offline_as_a_workflow_agent() {
    run_cli(Cli {
        provider: "gemini",
        exe: "gemini",
        model: "gemini-2.5-flash",
        reports_usage: true,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copilot_runs_offline_as_a_workflow_agent() {
    run_cli(Cli {
        provider: "copilot",
        exe: "copilot",
        model: "gpt-5.5",
        reports_usage: true,
    })
    .await;
}

/// Without the CLIs, a test here passes without checking anything; it must
/// say so in the test output (past libtest's capture of passing tests'
/// output), with the reason and the command that runs it for real.
#[test]
fn without_the_clis_a_test_says_it_skipped_and_how_to_run_it() {
    let test = "real_clis::claude_code_runs_offline_as_a_workflow_agent";
    let out = Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", test])
        .env_remove(CLIS_VAR)
        .output()
        .expect("run the test binary");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains(&format!(
            "SKIPPED {test}: {CLIS_VAR} is not set; run it with: cargo xtask test"
        )),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
}

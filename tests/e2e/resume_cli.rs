//! The genuine agent CLIs (Claude Code, Codex, Gemini CLI, Copilot CLI),
//! paused (`awr pause`) or killed (SIGKILL of `awr run`) in the middle of
//! their model call, continue with `awr resume` in the same provider
//! session: the resumed `agent:start` names the session of the first, the
//! CLI is called with its resume flag for that session, and the fake model
//! server's next call holds the first prompt and then the resume message.
//! Offline, against the fake model server on 127.0.0.1; gated on
//! `AWR_AGENT_CLIS` like `real_clis`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use awr_tests::fake_model::FakeModel;
use serde_json::Value;

use crate::cancel::gone;
use crate::real_clis::{Cli, Scratch, clis_dir, offline_env, workflow};
use crate::util::awr_bin;

/// The run's prompt; the fake server answers it with plain text.
const PROMPT: &str = "Remember the word PINEAPPLE, then say hello.";

/// What `awr resume` tells the agent.
const MESSAGE: &str = "Now say goodbye, please.";

/// What the fake server answers a prompt with no keyword.
const PLAIN: &str = "Hello from the fake server.";

/// How the first `awr run` is stopped mid-call.
#[derive(Debug, Clone, Copy)]
enum Stop {
    /// `awr pause RUN`: `awr run` exits 3.
    Pause,
    /// SIGKILL of `awr run`: its agent's process group is left behind.
    Kill,
    /// SIGKILL of `awr run` and of its agent, whose saved session is then
    /// removed: as if the CLI had been stopped before it saved it.
    Lost,
}

/// The parsed events of a run.
fn events(scratch: &Scratch, run: &str) -> Vec<Value> {
    std::fs::read_to_string(
        scratch
            .storage()
            .join("runs")
            .join(run)
            .join("events.ndjson"),
    )
    .unwrap_or_default()
    .lines()
    .map(|l| serde_json::from_str(l).expect("an event line"))
    .collect()
}

fn of_type<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

/// Polls `done` every 50 ms (on a blocking thread, so the fake server on
/// the test's runtime keeps serving) until it holds; fails after `secs`.
async fn wait_until(
    secs: u64,
    what: &'static str,
    mut done: impl FnMut() -> bool + Send + 'static,
) {
    tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while !done() {
            assert!(Instant::now() < deadline, "waited {secs} s for {what}");
            std::thread::sleep(Duration::from_millis(50));
        }
    })
    .await
    .expect("waiting");
}

/// Who names a CLI's session.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Naming {
    /// awr chooses the id and passes it to the CLI (`--session-id`): it is
    /// in `agent:start`, on record before the CLI starts.
    Chosen,
    /// The CLI names its session once it runs (`agent:session`).
    Named,
}

/// What a CLI does about sessions: who names them, where it saves them,
/// and how it is told to continue one.
struct Resumable {
    cli: Cli,
    naming: Naming,
    /// Whether `path` (under the CLI's home) is the file it saves `session` in.
    session_file: fn(path: &Path, session: &str) -> bool,
    /// Whether `args` (its command line) continue `session`.
    resumes: fn(args: &[String], session: &str) -> bool,
}

/// Whether `args` hold `flag` followed by `value`.
fn flag_with(args: &[String], flag: &str, value: &str) -> bool {
    args.windows(2).any(|w| w[0] == flag && w[1] == value)
}

/// The name of the file at `path`.
fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn claude() -> Resumable {
    Resumable {
        cli: Cli {
            provider: "claude-code",
            exe: "claude",
            model: "claude-sonnet-4-5",
            reports_usage: true,
        },
        naming: Naming::Chosen,
        // `~/.claude/projects/<project>/<id>.jsonl`
        session_file: |path, session| file_name(path) == format!("{session}.jsonl"),
        resumes: |args, session| flag_with(args, "--resume", session),
    }
}

fn codex() -> Resumable {
    Resumable {
        cli: Cli {
            provider: "codex",
            exe: "codex",
            model: "gpt-5.5",
            reports_usage: true,
        },
        naming: Naming::Named,
        // `$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl`
        session_file: |path, session| {
            let name = file_name(path);
            name.starts_with("rollout-") && name.ends_with(&format!("-{session}.jsonl"))
        },
        resumes: |args, session| {
            args.starts_with(&["exec".to_owned(), "resume".to_owned()])
                && args.iter().any(|a| a == session)
        },
    }
}

fn gemini() -> Resumable {
    Resumable {
        cli: Cli {
            provider: "gemini",
            exe: "gemini",
            model: "gemini-2.5-flash",
            reports_usage: true,
        },
        naming: Naming::Named,
        // `~/.gemini/tmp/<project>/chats/session-<time>-<first 8 of id>.jsonl`,
        // whose first line names the whole id.
        session_file: |path, session| {
            let name = file_name(path);
            path.parent().is_some_and(|p| p.ends_with("chats"))
                && name.starts_with("session-")
                && name.ends_with(&format!("-{}.jsonl", &session[..8.min(session.len())]))
                && std::fs::read_to_string(path).is_ok_and(|t| t.contains(session))
        },
        resumes: |args, session| flag_with(args, "--resume", session),
    }
}

fn copilot() -> Resumable {
    Resumable {
        cli: Cli {
            provider: "copilot",
            exe: "copilot",
            model: "gpt-5.5",
            reports_usage: true,
        },
        naming: Naming::Chosen,
        // `~/.copilot/session-state/<id>/events.jsonl`
        session_file: |path, session| {
            path.ends_with(
                Path::new("session-state")
                    .join(session)
                    .join("events.jsonl"),
            )
        },
        resumes: |args, session| args.iter().any(|a| *a == format!("--resume={session}")),
    }
}

/// Whether the CLI has saved session `session` with the prompt in it under
/// `home`, in the file `is_file` recognizes. Only then can the provider
/// continue it: a CLI stopped before it saved its session has nothing to
/// resume.
fn saved(home: &Path, session: &str, is_file: fn(&Path, &str) -> bool) -> bool {
    let mut dirs = vec![home.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if is_file(&path, session)
                && std::fs::read_to_string(&path).is_ok_and(|t| t.contains(PROMPT))
            {
                return true;
            }
        }
    }
    false
}

/// A directory holding `exe`: a script that saves its command line (NUL
/// separated) as `<dir>/argv/<pid>`, then becomes the real CLI in `bin`.
/// It keeps its pid, so the file is named after the pid `process:started`
/// records.
fn recording_wrapper(scratch: &Scratch, bin: &Path, exe: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch.path("wrapped");
    std::fs::create_dir_all(dir.join("argv")).unwrap();
    let q = |p: &Path| format!("'{}'", p.display().to_string().replace('\'', "'\\''"));
    let script = format!(
        "#!/bin/sh\nprintf '%s\\0' \"$@\" > {argv}/$$\nexec {real} \"$@\"\n",
        argv = q(&dir.join("argv")),
        real = q(&bin.join(exe)),
    );
    let path = dir.join(exe);
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// The command line the process `pid` was started with, as the wrapper saved it.
fn argv_of(wrapped: &Path, pid: &str) -> Vec<String> {
    let raw = std::fs::read(wrapped.join("argv").join(pid))
        .unwrap_or_else(|e| panic!("no command line saved for pid {pid}: {e}"));
    raw.strip_suffix(&[0])
        .unwrap_or(&raw)
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

/// The command line of the process the `nth` `agent:start` of `events` started.
fn process_args(events: &[Value], wrapped: &Path, nth: usize) -> Vec<String> {
    let start = of_type(events, "agent:start")[nth]["offset"]
        .as_u64()
        .unwrap();
    let pid = of_type(events, "process:started")
        .into_iter()
        .find(|e| e["offset"].as_u64().unwrap() > start)
        .unwrap_or_else(|| panic!("no process for invocation {nth}: {events:#?}"))["pid"]
        .to_string();
    argv_of(wrapped, &pid)
}

/// Removes what the CLI saved of `session` under `home`: each file
/// `is_file` recognizes, with its directory when that is named after the
/// session (Copilot's `session-state/<id>/`).
fn lose(home: &Path, session: &str, is_file: fn(&Path, &str) -> bool) {
    let mut dirs = vec![home.to_path_buf()];
    let mut lost = 0;
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if is_file(&path, session) {
                let parent = path.parent().unwrap();
                if parent.file_name().is_some_and(|n| n == session) {
                    std::fs::remove_dir_all(parent).unwrap();
                } else {
                    std::fs::remove_file(&path).unwrap();
                }
                lost += 1;
            }
        }
    }
    assert!(
        lost > 0,
        "no saved session {session} under {}",
        home.display()
    );
}

/// A resume of a session the CLI never saved: the CLI says so
/// (`session_not_found`), and the node run starts a new attempt in a new
/// session, asked its prompt again, and the run completes.
fn restarted_as_a_new_attempt(name: &str, events: &[Value], session: &Value) {
    let starts = of_type(events, "agent:start");
    assert_eq!(starts.len(), 3, "{name}: {starts:#?}");
    assert_eq!(starts[1]["sessionId"], *session, "{name}: tried first");
    assert_eq!(starts[1]["prompt"], MESSAGE, "{name}");
    assert_ne!(starts[2]["sessionId"], *session, "{name}: a new session");
    assert_eq!(
        starts[2]["prompt"], PROMPT,
        "{name}: asked its prompt again"
    );
    let errors = of_type(events, "agent:error");
    assert_eq!(
        errors.first().map(|e| &e["errorType"]),
        Some(&Value::from("session_not_found")),
        "{name}: {errors:#?}"
    );
    let attempts: Vec<&Value> = of_type(events, "node:started")
        .iter()
        .map(|e| &e["attempt"])
        .collect();
    assert_eq!(attempts, [1, 2], "{name}");
    assert_eq!(events.last().unwrap()["type"], "flow:completed", "{name}");
    println!("{name}: session {session} lost, restarted");
}

/// `awr run FLOW --input-text PROMPT` in the background, its output to files.
fn spawn_run(scratch: &Scratch, flow: &str) -> Child {
    let out = std::fs::File::create(scratch.path("run.stdout")).unwrap();
    let err = std::fs::File::create(scratch.path("run.stderr")).unwrap();
    Command::new(awr_bin())
        .arg("--storage")
        .arg(scratch.storage())
        .args(["run", flow, "--input-text", PROMPT])
        .current_dir(scratch.path("work"))
        .env_remove("AWR_STORAGE")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .expect("spawn awr run")
}

/// Kills a process left behind if the test fails before awr does.
struct Leftover(Option<String>);

impl Drop for Leftover {
    fn drop(&mut self) {
        if let Some(pid) = self.0.take().filter(|p| !gone(p)) {
            let _ = Command::new("kill").args(["-KILL", &pid]).status();
        }
    }
}

/// Runs `cli` until it is mid-call, stops it there as `stop` says, resumes
/// the run, and checks that it continued in the same session (or, for
/// [`Stop::Lost`], restarted the node run).
async fn stopped_mid_call_and_resumed(cli: Resumable, stop: Stop) {
    let Some(bin) = clis_dir() else { return };
    let Resumable {
        cli,
        naming,
        session_file,
        resumes,
    } = cli;
    let name = format!("{} ({stop:?})", cli.provider);
    let server = FakeModel::start().await.expect("fake model");
    // Every model call hangs until released: the agent is surely mid-call.
    server.hold_after(0);
    let scratch = std::sync::Arc::new(Scratch::new());
    let env = offline_env(&cli, &scratch, &server.base_url());
    let wrapped = recording_wrapper(&scratch, &bin, cli.exe);
    let flow = workflow(&scratch, &cli, &wrapped, &env)
        .display()
        .to_string();
    let mut child = spawn_run(&scratch, &flow);
    let mut awr_leftover = Leftover(Some(child.id().to_string()));

    let runs = scratch.storage().join("runs");
    let runs_dir = runs.clone();
    wait_until(60, "the run in the store", move || {
        std::fs::read_dir(&runs_dir).is_ok_and(|mut d| d.next().is_some())
    })
    .await;
    let run = std::fs::read_dir(&runs)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .file_name()
        .to_string_lossy()
        .into_owned();
    // Mid-call: its process on record, the model call with the prompt
    // under way, and its session known (chosen by awr and on record in
    // `agent:start`, or named by the CLI in `agent:session`) and saved by
    // the CLI.
    let shared = std::sync::Arc::new(server);
    {
        let (scratch, run, server, name) = (
            std::sync::Arc::clone(&scratch),
            run.clone(),
            std::sync::Arc::clone(&shared),
            name.clone(),
        );
        wait_until(180, "the agent in its model call", move || {
            let events = events(&scratch, &run);
            let session = match naming {
                Naming::Named => of_type(&events, "agent:session")
                    .last()
                    .and_then(|e| e["sessionId"].as_str().map(str::to_owned)),
                Naming::Chosen => of_type(&events, "agent:start").first().map(|start| {
                    assert_ne!(
                        start["provisional"], true,
                        "{name}: awr chooses the session before the CLI starts: {start}"
                    );
                    start["sessionId"].as_str().unwrap_or_default().to_owned()
                }),
            };
            !of_type(&events, "process:started").is_empty()
                && server
                    .requests()
                    .iter()
                    .any(|r| r.body.to_string().contains(PROMPT))
                && session.is_some_and(|s| saved(&scratch.path("home"), &s, session_file))
        })
        .await;
    }
    let before = events(&scratch, &run);
    let first_start = of_type(&before, "agent:start")[0].clone();
    let node_run = first_start["nodeRunId"].clone();
    let session = match naming {
        Naming::Named => of_type(&before, "agent:session").last().unwrap()["sessionId"].clone(),
        Naming::Chosen => first_start["sessionId"].clone(),
    };
    assert!(session.is_string(), "{name}: a session: {before:#?}");
    let agent_pid = of_type(&before, "process:started")[0]["pid"].to_string();
    let _agent_leftover = Leftover(Some(agent_pid.clone()));
    let first_args = argv_of(&wrapped, &agent_pid);
    assert!(
        !resumes(&first_args, session.as_str().unwrap()),
        "{name}: the first invocation starts its session: {first_args:?}"
    );

    match stop {
        Stop::Pause => {
            let out = {
                let scratch = std::sync::Arc::clone(&scratch);
                let run = run.clone();
                tokio::task::spawn_blocking(move || scratch.awr(60, &["pause", &run]))
                    .await
                    .unwrap()
            };
            assert_eq!(out.code, 0, "{name}: {}{}", out.stdout, out.stderr);
            let code = tokio::task::spawn_blocking(move || child.wait().unwrap())
                .await
                .unwrap();
            awr_leftover.0 = None;
            let stderr = std::fs::read_to_string(scratch.path("run.stderr")).unwrap();
            assert_eq!(
                code.code(),
                Some(3),
                "{name}: a paused run exits 3: {stderr}"
            );
            let paused = events(&scratch, &run);
            assert_eq!(paused.last().unwrap()["type"], "flow:paused", "{name}");
            // The pause killed the agent's process group; a large process
            // (Gemini CLI's) may take a moment to be torn down.
            let (pid, exited) = (agent_pid.clone(), Instant::now());
            wait_until(10, "the pause to end the agent", move || gone(&pid)).await;
            println!(
                "{name}: the agent was gone {} ms after `awr run` exited",
                exited.elapsed().as_millis()
            );
        }
        Stop::Kill | Stop::Lost => {
            child.kill().unwrap();
            child.wait().unwrap();
            awr_leftover.0 = None;
        }
    }
    if let Stop::Lost = stop {
        let group = format!("-{agent_pid}");
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let pid = agent_pid.clone();
        wait_until(30, "the agent killed", move || gone(&pid)).await;
        lose(
            &scratch.path("home"),
            session.as_str().unwrap(),
            session_file,
        );
    }

    shared.release();
    let calls_before = shared.requests().len();
    let out = {
        let scratch = std::sync::Arc::clone(&scratch);
        let run = run.clone();
        tokio::task::spawn_blocking(move || {
            scratch.awr(240, &["resume", &run, "--message", MESSAGE])
        })
        .await
        .unwrap()
    };
    assert_eq!(out.code, 0, "{name}: {}\n{}", out.stdout, out.stderr);
    assert_eq!(out.stdout.trim(), PLAIN, "{name}: {}", out.stderr);
    assert!(gone(&agent_pid), "{name}: the first agent process is gone");

    let after = events(&scratch, &run);
    if let Stop::Lost = stop {
        let resumed_args = process_args(&after, &wrapped, 1);
        assert!(
            resumes(&resumed_args, session.as_str().unwrap()),
            "{name}: the CLI is asked to continue {session} first: {resumed_args:?}"
        );
        return restarted_as_a_new_attempt(&name, &after, &session);
    }
    let starts = of_type(&after, "agent:start");
    let resumed = starts.last().unwrap();
    assert!(starts.len() >= 2, "{name}: {starts:#?}");
    assert_eq!(resumed["nodeRunId"], node_run, "{name}: the same node run");
    assert_eq!(resumed["prompt"], MESSAGE, "{name}");
    assert_eq!(
        resumed["sessionId"], session,
        "{name}: the resumed invocation continues the session"
    );
    let resumed_at = resumed["offset"].as_u64().unwrap();
    let resumed_args = process_args(&after, &wrapped, starts.len() - 1);
    assert!(
        resumes(&resumed_args, session.as_str().unwrap()),
        "{name}: the CLI is told to continue {session}: {resumed_args:?}"
    );
    assert!(
        resumed_args.iter().any(|a| a.contains(MESSAGE)),
        "{name}: with the message: {resumed_args:?}"
    );
    for named in of_type(&after, "agent:session") {
        assert_eq!(
            named["sessionId"], session,
            "{name}: no other session is named: {named}"
        );
    }
    assert!(
        of_type(&after, "agent:complete")
            .iter()
            .any(|e| e["offset"].as_u64().unwrap() > resumed_at),
        "{name}"
    );
    assert_eq!(of_type(&after, "flow:resumed").len(), 1, "{name}");
    assert_eq!(after.last().unwrap()["type"], "flow:completed", "{name}");
    // Resumed: the run saves its snapshot at its end.
    let snapshot: Value = serde_json::from_str(
        &std::fs::read_to_string(runs.join(&run).join("snapshot.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(snapshot["agentSessions"]["coder"], session, "{name}");

    // The model's next call carries the earlier conversation, then the message.
    let requests = shared.requests();
    let call = requests[calls_before..]
        .iter()
        .map(|r| r.body.to_string())
        .find(|b| b.contains(MESSAGE))
        .unwrap_or_else(|| panic!("{name}: no model call with the message"));
    let prompt_at = call
        .find(PROMPT)
        .unwrap_or_else(|| panic!("{name}: the resumed call lacks the first prompt: {call}"));
    assert!(
        prompt_at < call.find(MESSAGE).unwrap(),
        "{name}: the prompt comes before the message: {call}"
    );
    println!("{name}: resumed session {session}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_paused_mid_call_resumes_in_its_session() {
    stopped_mid_call_and_resumed(claude(), Stop::Pause).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_killed_mid_call_resumes_in_its_session() {
    stopped_mid_call_and_resumed(claude(), Stop::Kill).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_paused_mid_call_resumes_in_its_session() {
    stopped_mid_call_and_resumed(codex(), Stop::Pause).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_killed_mid_call_resumes_in_its_session() {
    stopped_mid_call_and_resumed(codex(), Stop::Kill).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_paused_mid_call_resumes_in_its_session() {
    stopped_mid_call_and_resumed(gemini(), Stop::Pause).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_killed_mid_call_resumes_in_its_session() {
    stopped_mid_call_and_resumed(gemini(), Stop::Kill).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copilot_paused_mid_call_resumes_in_its_session() {
    stopped_mid_call_and_resumed(copilot(), Stop::Pause).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copilot_killed_mid_call_resumes_in_its_session() {
    stopped_mid_call_and_resumed(copilot(), Stop::Kill).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_resuming_a_session_it_never_saved_restarts_the_node_run() {
    stopped_mid_call_and_resumed(gemini(), Stop::Lost).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copilot_resuming_a_session_it_never_saved_restarts_the_node_run() {
    stopped_mid_call_and_resumed(copilot(), Stop::Lost).await;
}

/// A CLI stopped before it saved its session has nothing to resume:
/// Claude Code then answers `--resume` with "No conversation found". The
/// node run starts a new attempt in a new session, from its prompt, and the
/// run completes. A fake Claude Code stands in: its first invocation holds
/// its turn open; once the run is paused, a new session answers at once.
#[test]
fn a_session_the_cli_never_saved_restarts_the_node_run_as_a_new_attempt() {
    use std::os::unix::fs::PermissionsExt;
    let awr = crate::util::Awr::new();
    let paused = awr.dir.path().join("paused");
    let script = format!(
        r#"#!/bin/sh
prompt="$2"
sid=""
resume=""
while [ $# -gt 0 ]; do
  case "$1" in
    --session-id) sid="$2"; shift ;;
    --resume) sid="$2"; resume=1; shift ;;
  esac
  shift
done
if [ -n "$resume" ]; then
  printf '%s\n' '{{"type":"result","subtype":"error_during_execution","duration_ms":0,"is_error":true,"num_turns":0,"session_id":"'"$sid"'","errors":["No conversation found with session ID: '"$sid"'"]}}'
  exit 1
fi
echo '{{"type":"system","subtype":"init","session_id":"'"$sid"'","model":"m"}}'
while [ ! -f '{paused}' ]; do sleep 0.02; done
printf '%s\n' '{{"type":"result","subtype":"success","is_error":false,"result":"done: '"$prompt"'","session_id":"'"$sid"'","num_turns":1,"duration_ms":5,"usage":{{"input_tokens":3,"output_tokens":2}}}}'
"#,
        paused = paused.display(),
    );
    let exe = awr.write("fake-claude", &script);
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let flow = awr.write(
        "flow.yaml",
        &format!(
            "name: unsaved\nagents:\n  coder: {{provider: claude-code, executable: '{}'}}\nsteps: [{{agent: coder}}]\n",
            exe.display()
        ),
    );
    let mut child = awr
        .command(&["run", flow.to_str().unwrap(), "--input-text", PROMPT])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn awr run");
    crate::cancel::wait_for(30, "a run in the store", || !awr.run_ids().is_empty());
    let run = awr.run_ids().pop().unwrap();
    let read = || -> Vec<Value> {
        std::fs::read_to_string(awr.run_dir(&run).join("events.ndjson"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    crate::cancel::wait_for(30, "the agent in its turn", || {
        !of_type(&read(), "process:started").is_empty()
    });
    let out = awr.run_within(30, &["pause", &run]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let code = crate::cancel::wait_exit(&mut child, 30, "awr run to pause");
    assert_eq!(code, 3);
    std::fs::write(&paused, "").unwrap();

    let out = awr.run_within(30, &["resume", &run, "--message", MESSAGE]);
    let events = read();
    assert_eq!(out.code, 0, "{}\n{events:#?}", out.stderr);
    assert_eq!(out.stdout.trim(), format!("done: {PROMPT}"));
    let starts = of_type(&events, "agent:start");
    assert_eq!(starts.len(), 3, "{starts:#?}");
    assert_eq!(
        starts[1]["sessionId"], starts[0]["sessionId"],
        "tried first"
    );
    assert_ne!(
        starts[2]["sessionId"], starts[0]["sessionId"],
        "a new session"
    );
    assert_eq!(starts[2]["prompt"], PROMPT, "asked its prompt again");
    let attempts: Vec<&Value> = of_type(&events, "node:started")
        .iter()
        .map(|e| &e["attempt"])
        .collect();
    assert_eq!(attempts, [1, 2], "{events:#?}");
    assert_eq!(
        of_type(&events, "agent:error")[0]["errorType"],
        "session_not_found"
    );
    assert_eq!(events.last().unwrap()["type"], "flow:completed");
}

//! The transcript a real run writes, read back by `awr transcript` and by `jq`
//! running the recipes of the transcript documentation.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use domain::transcript::{ExchangeEvent, ExchangeType};
use serde_json::Value;

use crate::util::{Awr, repo_root, run_id_of};

fn run_example(awr: &Awr, example: &str) -> (String, std::path::PathBuf) {
    let out = awr.run(&["run", example]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let run = run_id_of(&out);
    let path = awr
        .storage()
        .join("transcripts")
        .join(format!("{run}.jsonl"));
    (run, path)
}

fn system_prompt(example: &str, agent: &str) -> String {
    let text = std::fs::read_to_string(repo_root().join(example)).unwrap();
    let workflow = domain::WorkflowDef::from_yaml(&text).unwrap();
    workflow.agents[agent].system_prompt.clone()
}

/// Every system prompt of every example workflow.
fn example_system_prompts() -> Vec<String> {
    let mut prompts = Vec::new();
    for entry in std::fs::read_dir(repo_root().join("examples"))
        .unwrap()
        .flatten()
    {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let text = std::fs::read_to_string(&path).unwrap();
            let workflow = domain::WorkflowDef::from_yaml(&text).unwrap();
            prompts.extend(workflow.agents.values().map(|a| a.system_prompt.clone()));
        }
    }
    prompts
}

/// Checks one transcript file against the seed's rules; returns its lines.
fn check_transcript(path: &std::path::Path, run: &str, prompts: &[String]) -> Vec<Value> {
    let bytes = std::fs::read(path).unwrap();
    assert!(!bytes.contains(&b'\r'), "LF line endings only");
    assert_eq!(bytes.last(), Some(&b'\n'));
    let mode = std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let lines: Vec<Value> = String::from_utf8(bytes)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for (i, line) in lines.iter().enumerate() {
        assert_eq!(line["seq"], i as u64 + 1);
        assert_eq!(line["run_id"], run);
        let event: ExchangeEvent = serde_json::from_value(line.clone()).unwrap();
        assert!(
            !matches!(event.kind, ExchangeType::Unknown(_)),
            "closed vocabulary: {line}"
        );
        if let Some(blocks) = line["payload"]["blocks"].as_array() {
            for block in blocks {
                let fidelity = block["fidelity"].as_str().unwrap_or("");
                assert!(["router", "agent_emitted"].contains(&fidelity), "{block}");
            }
        }
        if line["type"] == "message.user" {
            let system = line["payload"]["blocks"][1]["text"].as_str().unwrap_or("");
            assert!(
                prompts.iter().any(|p| p == system),
                "system prompt verbatim: {line}"
            );
        }
    }
    assert_eq!(lines.first().unwrap()["type"], "run.started");
    assert_eq!(lines.last().unwrap()["type"], "run.completed");
    lines
}

#[test]
fn every_example_writes_a_complete_transcript() {
    let prompts = example_system_prompts();
    for example in [
        "examples/research-pipeline.yaml",
        "examples/triage.yaml",
        "examples/market-brief.yaml",
        "examples/summarize.yaml",
        "examples/fan-out.yaml",
        "examples/for-each.yaml",
        "examples/judge-refine.yaml",
    ] {
        let awr = Awr::new();
        let (run, path) = run_example(&awr, example);
        let lines = check_transcript(&path, &run, &prompts);
        for child in lines.iter().filter_map(|l| l["child_run_id"].as_str()) {
            let child_path = awr
                .storage()
                .join("transcripts")
                .join(format!("{child}.jsonl"));
            check_transcript(&child_path, child, &prompts);
        }
    }
    // The first agent's prompt, checked against its own definition.
    let awr = Awr::new();
    let (_, path) = run_example(&awr, "examples/research-pipeline.yaml");
    let text = std::fs::read_to_string(path).unwrap();
    let first_user: Value = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|l| l["type"] == "message.user")
        .unwrap();
    assert_eq!(
        first_user["payload"]["blocks"][1]["text"].as_str().unwrap(),
        system_prompt("examples/research-pipeline.yaml", "researcher")
    );
}

/// `jq` is required by `.ci/run` and `cargo xtask test` (which set
/// `AWR_REQUIRE_JQ`); elsewhere a machine without it skips these checks and
/// says so on the test output.
pub(crate) fn jq(args: &[&str], file: &std::path::Path) -> Option<String> {
    let out = match Command::new("jq").args(args).arg(file).output() {
        Ok(out) => out,
        Err(_) if std::env::var_os("AWR_REQUIRE_JQ").is_none() => {
            awr_tests::skipped(
                "jq is not on PATH",
                "cargo xtask test (after installing jq)",
            );
            return None;
        }
        Err(e) => panic!("jq is required here: {e}"),
    };
    assert!(
        out.status.success(),
        "jq {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8(out.stdout).unwrap())
}

#[test]
fn the_documented_jq_recipes_give_the_expected_answers() {
    let awr = Awr::new();
    let (_, path) = run_example(&awr, "examples/research-pipeline.yaml");
    let Some(all) = jq(&["-c", "."], &path) else {
        return;
    };
    assert_eq!(
        all.lines().count(),
        std::fs::read_to_string(&path).unwrap().lines().count()
    );

    let tools = jq(
        &[
            "-c",
            r#"select(.type == "tool.call" or .type == "tool.result")"#,
        ],
        &path,
    )
    .unwrap();
    assert_eq!(
        tools.lines().count(),
        4,
        "two tools, each a call and a result:\n{tools}"
    );

    let texts = jq(
        &["-r", r#"select(.type == "message.assistant") | .payload.blocks[] | select(.type == "text") | .text"#],
        &path,
    )
    .unwrap();
    assert!(
        texts.contains("Solid-state batteries are coming, but slowly and expensively."),
        "{texts}"
    );

    let router = jq(
        &[
            "-c",
            r#"select(.type == "tool.call" and .payload.fidelity == "router")"#,
        ],
        &path,
    )
    .unwrap();
    assert_eq!(
        router, "",
        "the mock's tools are agent-reported, not router-executed"
    );

    let tree = jq(
        &[
            "-r",
            r#"select(.type == "step.started") | "\(.seq)\t\(.path)\t\(.payload.kind)""#,
        ],
        &path,
    )
    .unwrap();
    let paths: Vec<&str> = tree
        .lines()
        .map(|l| l.split('\t').nth(1).unwrap_or(""))
        .collect();
    assert_eq!(paths, ["researcher", "analyst", "writer"]);
    assert!(tree.lines().all(|l| l.ends_with("\tagent")), "{tree}");

    let children = jq(
        &[
            "-r",
            r#"select(.type == "step.call_workflow.started") | .child_run_id"#,
        ],
        &path,
    )
    .unwrap();
    assert_eq!(children, "", "no sub-workflow in this example");
}

#[test]
fn unknown_lines_and_blocks_are_shown_not_refused() {
    let awr = Awr::new();
    let (run, path) = run_example(&awr, "examples/triage.yaml");
    let n = std::fs::read_to_string(&path).unwrap().lines().count();
    let line = format!(
        r#"{{"seq":{},"run_id":"{run}","type":"message.hologram","path":"classify","iteration":0,"timestamp":"2026-01-01T00:00:00.000Z","payload":{{"role":"assistant","blocks":[{{"type":"smell","odour":"ozone","fidelity":"agent_emitted"}}]}}}}"#,
        n + 1
    );
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    std::io::Write::write_all(&mut f, format!("{line}\n").as_bytes()).unwrap();

    let out = awr.run(&["transcript", &run]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("message.hologram"), "{}", out.stdout);
    let json = awr.run(&["transcript", &run, "--json"]);
    assert_eq!(json.code, 0, "{}", json.stderr);
    let last: Value = serde_json::from_str(json.stdout.lines().last().unwrap()).unwrap();
    assert_eq!(
        last,
        serde_json::from_str::<Value>(&line).unwrap(),
        "kept whole"
    );
}

#[test]
fn follow_on_a_finished_run_ends_and_tree_shows_the_steps() {
    let awr = Awr::new();
    let (run, _) = run_example(&awr, "examples/triage.yaml");
    let followed = awr.run_within(20, &["transcript", &run, "--follow"]);
    assert_eq!(followed.code, 0, "{}", followed.stderr);
    assert!(
        followed
            .stdout
            .lines()
            .last()
            .unwrap()
            .contains("run.completed")
    );
    let tree = awr.run(&["transcript", &run[..8], "--tree"]);
    assert_eq!(tree.code, 0, "{}", tree.stderr);
    assert!(
        tree.stdout.contains("triage (completed)"),
        "{}",
        tree.stdout
    );
    assert!(tree.stdout.contains("classify [agent]") && tree.stdout.contains("escalate [agent]"));
    assert!(
        !tree.stdout.contains("reply [agent]"),
        "the branch not taken did not run"
    );
    assert_eq!(
        awr.run(&["transcript", "00000000-0000-4000-8000-000000000000"])
            .code,
        2
    );
}

/// A fake Claude Code that says half of its answer and hangs the first
/// time, and finishes it when resumed. Notes its pid in `PIDS` and, once
/// it has spoken, touches `MARK`.
const HALF_THEN_REST: &str = r#"#!/bin/sh
session=none
resumed=
while [ $# -gt 0 ]; do
  case "$1" in --session-id) session="$2"; shift ;; --resume) session="$2"; resumed=1; shift ;; esac
  shift
done
echo '{"type":"system","subtype":"init","session_id":"'"$session"'","model":"m"}'
if [ -z "$resumed" ]; then
  echo '{"type":"assistant","message":{"id":"m1","content":[{"type":"text","text":"half of the answer"}]}}'
  echo $$ >> PIDS
  touch MARK
  exec sleep 300
fi
echo '{"type":"assistant","message":{"id":"m2","content":[{"type":"text","text":"the rest"}]}}'
echo '{"type":"result","subtype":"success","is_error":false,"result":"the rest","session_id":"'"$session"'","num_turns":1,"usage":{"input_tokens":3,"output_tokens":2}}'
"#;

/// What an agent said before its writer was killed is in the transcript
/// after the resume, as the reply so far ahead of the resume message: the
/// writer that held it in memory died, the log did not.
#[test]
fn a_turn_cut_short_by_a_kill_keeps_what_the_agent_said_in_the_transcript() {
    use crate::cancel::{wait_exit, wait_for};
    use crate::crash::Reaper;
    let awr = Awr::new();
    let dir = awr.dir.path();
    let (mark, pids) = (dir.join("MARK"), dir.join("PIDS"));
    let script = HALF_THEN_REST
        .replace("PIDS", &pids.display().to_string())
        .replace("MARK", &mark.display().to_string());
    let flow = awr.claude_flow("half", &script, "");
    let mut reaper = Reaper {
        child: None,
        pids: pids.clone(),
    };
    let child = awr
        .command(&["run", flow.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let child = reaper.child.insert(child);
    wait_for(20, "the agent to speak", || mark.exists());
    let run = crate::crash::only_run(&awr).unwrap();
    wait_for(20, "the agent's first words on record", || {
        awr.events_so_far(&run)
            .iter()
            .any(|e| e["type"] == "agent:text")
    });
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    wait_exit(child, 30, "awr run to die");

    let out = awr.run_within(60, &["resume", &run, "--message", "go on"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let out = awr.run(&["transcript", &run, "--json"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let messages: Vec<(String, String)> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| {
            l["type"]
                .as_str()
                .is_some_and(|t| t.starts_with("message."))
        })
        .map(|l| {
            let text = l["payload"]["blocks"][0]["text"]
                .as_str()
                .unwrap_or_default();
            (l["type"].as_str().unwrap().to_owned(), text.to_owned())
        })
        .collect();
    let expected = [
        ("message.assistant", "half of the answer"),
        ("message.user", "go on"),
        ("message.assistant", "the rest"),
    ];
    let tail: Vec<(&str, &str)> = messages
        .iter()
        .skip(1)
        .map(|(t, m)| (t.as_str(), m.as_str()))
        .collect();
    assert_eq!(tail, expected, "{}", out.stdout);
}

/// A run whose writer died writes no `run.completed` line: following its
/// transcript ends once no process writes it, with every line shown.
#[test]
fn follow_on_a_run_no_process_writes_ends() {
    let awr = Awr::new();
    let run = crate::interrupted::killed(&awr).run;
    let followed = awr.run_within(20, &["transcript", &run, "--follow", "--json"]);
    assert_eq!(followed.code, 0, "{}", followed.stderr);
    let plain = awr.run(&["transcript", &run, "--json"]);
    assert_eq!(followed.stdout, plain.stdout);
    assert!(plain.stdout.contains("run.started"), "{}", plain.stdout);
    assert!(!plain.stdout.contains("run.completed"), "{}", plain.stdout);
}

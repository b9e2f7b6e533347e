//! The `awr` binary end to end: real files, real exit codes.

use std::os::unix::fs::PermissionsExt;

use domain::{EventKind, RuntimeEvent};
use serde_json::Value;

use crate::util::{Awr, repo_root, run_id_of};

fn count(events: &[RuntimeEvent], t: &str, node: &str) -> usize {
    events
        .iter()
        .filter(|e| e.kind.type_name() == t && e.node_id.as_ref().map(|n| n.as_str()) == Some(node))
        .count()
}

fn fixture_text(path: &str) -> String {
    let raw = std::fs::read_to_string(repo_root().join(path)).unwrap();
    let v: Value = serde_json::from_str(&raw).unwrap();
    v["calls"][0]["output"]["text"].as_str().unwrap().to_owned()
}

#[test]
fn the_research_pipeline_runs_offline_and_leaves_a_complete_record() {
    let awr = Awr::new();
    let out = awr.run(&["run", "examples/research-pipeline.yaml"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let writer = fixture_text("examples/fixtures/research-pipeline/writer.json");
    assert_eq!(out.stdout.trim_end(), writer.trim_end());
    let run = run_id_of(&out);

    let events = awr.runtime_events(&run);
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e.offset.get(), i as u64 + 1, "offsets 1..n without gaps");
        assert_eq!(e.run_id.to_string(), run);
    }
    assert_eq!(events.first().unwrap().kind.type_name(), "flow:started");
    assert_eq!(events.last().unwrap().kind.type_name(), "flow:completed");
    for node in ["researcher", "analyst", "writer"] {
        for t in [
            "node:started",
            "node:completed",
            "agent:start",
            "agent:complete",
        ] {
            assert_eq!(count(&events, t, node), 1, "{t} for {node}");
        }
    }
    assert_eq!(count(&events, "agent:tool", "researcher"), 2);

    // A run this short saves no snapshot (the log is folded instead).
    assert!(!awr.run_dir(&run).join("snapshot.json").exists());
    let snapshot = awr.state(&run);
    for field in [
        "runId",
        "status",
        "outputs",
        "state",
        "nodeStatus",
        "edgeStatus",
        "loopCounters",
        "inbox",
        "agentSessions",
        "workflow",
        "lastOffset",
        "version",
    ] {
        assert!(snapshot.get(field).is_some(), "snapshot lacks {field}");
    }
    assert_eq!(snapshot["status"], "completed");
    assert_eq!(snapshot["agentSessions"]["writer"], "sess-writer-0001");
    assert_eq!(snapshot["lastOffset"], events.len());

    let mode = |p: std::path::PathBuf| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(awr.run_dir(&run)), 0o700);
    assert_eq!(mode(awr.run_dir(&run).join("events.ndjson")), 0o600);
}

#[test]
fn events_from_an_offset_and_follow_on_a_finished_run() {
    let awr = Awr::new();
    let run = awr.completed_run("examples/research-pipeline.yaml");
    let lines: Vec<String> = std::fs::read_to_string(awr.run_dir(&run).join("events.ndjson"))
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();

    for k in [0, 1, 7, lines.len() - 1, lines.len()] {
        let out = awr.run(&["events", &run, "--offset", &k.to_string(), "--json"]);
        assert_eq!(out.code, 0, "{}", out.stderr);
        let printed: Vec<&str> = out.stdout.lines().collect();
        assert_eq!(
            printed,
            lines[k..].iter().map(String::as_str).collect::<Vec<_>>(),
            "offset {k}"
        );
    }

    let followed = awr.run_within(20, &["events", &run, "--follow", "--json", "--offset", "3"]);
    assert_eq!(followed.code, 0, "{}", followed.stderr);
    assert_eq!(followed.stdout.lines().count(), lines.len() - 3);

    // Human-readable form, and a unique prefix of the id is enough.
    let short = awr.run(&["events", &run[..8]]);
    assert_eq!(short.code, 0, "{}", short.stderr);
    assert!(short.stdout.contains("flow:completed"));
}

#[test]
fn a_torn_last_line_does_not_stop_events_or_show() {
    let awr = Awr::new();
    let run = awr.completed_run("examples/research-pipeline.yaml");
    // Saved as a longer run's would be (a run this short saves none): the
    // cut below takes an event it reflects.
    awr.save_snapshot(&run);
    let log = awr.run_dir(&run).join("events.ndjson");
    let complete = std::fs::read_to_string(&log).unwrap().lines().count();
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    std::io::Write::write_all(&mut f, br#"{"id":"x","offset":99,"timestamp":"2026-"#).unwrap();
    drop(f);

    let events = awr.run(&["events", &run, "--json"]);
    assert_eq!(events.code, 0, "{}", events.stderr);
    assert_eq!(events.stdout.lines().count(), complete);
    let show = awr.run(&["show", &run]);
    assert_eq!(show.code, 0, "{}", show.stderr);
    assert!(show.stdout.contains("completed"), "{}", show.stdout);

    // A cut that takes an event on record with it (its snapshot reflects
    // it): shown up to the cut, and the loss said, exit 2, as `show` does.
    let text = std::fs::read_to_string(&log).unwrap();
    let kept: Vec<&str> = text.lines().take(complete - 1).collect();
    std::fs::write(&log, format!("{}\n{{\"id\":\"x", kept.join("\n"))).unwrap();
    let events = awr.run(&["events", &run, "--json"]);
    assert_eq!(events.code, 2, "{}", events.stderr);
    assert_eq!(events.stdout.lines().count(), complete - 1);
    assert!(
        events.stderr.contains(&format!(
            "its log ends at offset {}, and its snapshot reflects events up to offset {complete}",
            complete - 1
        )),
        "{}",
        events.stderr
    );
    assert_eq!(awr.run(&["show", &run]).code, 2);
}

#[test]
fn a_conditional_edge_takes_one_branch() {
    let awr = Awr::new();
    let out = awr.run(&["run", "examples/triage.yaml"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.starts_with("INCIDENT UPDATE 1"),
        "{}",
        out.stdout
    );
    let run = run_id_of(&out);
    let events = awr.runtime_events(&run);
    assert_eq!(count(&events, "node:skipped", "reply"), 1);
    assert!(events.iter().any(|e| matches!(&e.kind,
        EventKind::AgentComplete { structured_output: Some(v), .. } if v["severity"] == "critical")));
}

#[test]
fn runs_lists_and_show_prints_a_run() {
    let awr = Awr::new();
    let run = awr.completed_run("examples/research-pipeline.yaml");
    let runs = awr.run(&["runs"]);
    assert_eq!(runs.code, 0, "{}", runs.stderr);
    let row = runs
        .stdout
        .lines()
        .find(|l| l.starts_with(&run))
        .expect("run listed");
    assert!(
        row.contains("research-pipeline") && row.contains("completed"),
        "{row}"
    );
    let snapshot = awr.show_json(&run);
    assert_eq!(snapshot["runId"], run.as_str());
    let missing = awr.run(&["show", "00000000-0000-4000-8000-000000000000"]);
    assert_eq!(missing.code, 2);
}

#[test]
fn a_failing_agent_exits_1_and_records_the_failure() {
    let awr = Awr::new();
    let flow = awr.api_error_flow();
    let out = awr.run(&["run", flow.to_str().unwrap()]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(out.stderr.contains("slow down"), "{}", out.stderr);
    let events = awr.runtime_events(&run_id_of(&out));
    assert_eq!(events.last().unwrap().kind.type_name(), "flow:failed");
    assert!(events.iter().any(|e| matches!(&e.kind,
        EventKind::AgentError { error_type, .. } if error_type == "api_error")));
}

#[test]
fn a_missing_fixture_file_is_refused_before_the_run() {
    let awr = Awr::new();
    let flow = awr.write(
        "flow.yaml",
        "name: nofix\nagents:\n  lonely: {provider: mock, fixtures: nowhere}\nsteps: [{agent: lonely}]\n",
    );
    let out = awr.run(&["run", flow.to_str().unwrap()]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("node `lonely`: mock agent `lonely` has no fixture file")
            && out.stderr.contains("nowhere/lonely.json"),
        "{}",
        out.stderr
    );
    assert!(awr.run_ids().is_empty());
}

#[test]
fn a_fixture_without_the_call_asked_for_names_the_node_and_call() {
    let awr = Awr::new();
    let flow = awr.write(
        "flow.yaml",
        "name: short\nagents:\n  lonely: {provider: mock, fixtures: fx}\nsteps: [{agent: lonely}]\n",
    );
    awr.write("fx/lonely.json", r#"{"calls": []}"#);
    let out = awr.run(&["run", flow.to_str().unwrap()]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("node `lonely` failed") && out.stderr.contains("call 0"),
        "{}",
        out.stderr
    );
}

/// `awr validate` and `awr run` on `file`: exit 2, `needle` in the message,
/// no panic, no run.
fn refused(awr: &Awr, file: &str, needle: &str) {
    for command in ["validate", "run"] {
        let out = awr.run(&[command, file]);
        assert_eq!(out.code, 2, "{command} {file}: {}", out.stderr);
        assert!(
            !out.stderr.contains("panicked"),
            "{command} {file}: {}",
            out.stderr
        );
        assert!(
            out.stderr.contains(needle),
            "{command} {file}: `{needle}` not in {}",
            out.stderr
        );
        assert_eq!(out.stderr.lines().count(), 1, "one line: {}", out.stderr);
    }
    assert!(awr.run_ids().is_empty(), "{file}: a run was created");
}

/// Each file under `tests/workflows/bad/` opens with `# expect: TEXT`.
#[test]
fn hostile_workflow_files_are_refused_naming_the_field() {
    let dir = repo_root().join("tests/workflows/bad");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    assert!(files.len() >= 15, "{files:?}");
    let awr = Awr::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let needle = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("# expect: "))
            .unwrap_or_else(|| panic!("{} lacks `# expect: `", file.display()));
        let name = format!(
            "tests/workflows/bad/{}",
            file.file_name().unwrap().to_str().unwrap()
        );
        refused(&awr, &name, needle);
    }
}

#[test]
fn conditions_too_long_or_too_deep_are_refused_without_a_panic() {
    let awr = Awr::new();
    let graph =
        "name: t\nagents: {a: {provider: codex}}\nnodes: [{id: x, agent: a}, {id: y, agent: a}]\n";
    let cases = [
        (
            format!("{}1 +", " ".repeat(70_000)),
            "the condition is 70003 bytes long; at most 4096",
        ),
        (
            format!("{}1 +", " ".repeat(4_000)),
            "is not a valid CEL expression: 1:",
        ),
        (
            format!("1{} == 1", " + 1".repeat(1_000)),
            "levels deep; at most 32",
        ),
        (
            format!("{}true{}", "[".repeat(2_000), "]".repeat(2_000)),
            "nests brackets 2000 deep",
        ),
    ];
    for (i, (when, needle)) in cases.iter().enumerate() {
        let flow = awr.write(
            &format!("cel-{i}.yaml"),
            &format!("{graph}edges: [{{from: x, to: y, when: '{when}'}}]\n"),
        );
        refused(&awr, flow.to_str().unwrap(), needle);
    }
}

#[test]
fn a_workdir_outside_the_project_is_allowed_only_when_asked() {
    let awr = Awr::new();
    let flow = awr.write(
        "flow.yaml",
        "name: t\nagents:\n  a: {provider: codex, workdir: /etc, allow_outside_project: true}\n  b: {provider: codex, workdir: examples}\nsteps: [{agent: a}, {agent: b}]\n",
    );
    let out = awr.run(&["validate", flow.to_str().unwrap()]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    // The project directory is where awr runs: the same file from elsewhere.
    let inside = awr.write(
        "proj/flow.yaml",
        "name: t\nagents: {a: {provider: codex, workdir: '/PROJ/sub'}}\nsteps: [{agent: a}]\n",
    );
    let proj = inside.parent().unwrap().canonicalize().unwrap();
    std::fs::write(
        &inside,
        std::fs::read_to_string(&inside)
            .unwrap()
            .replace("/PROJ", proj.to_str().unwrap()),
    )
    .unwrap();
    let out = awr.run_in(&proj, &[], &["validate", "flow.yaml"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let out = awr.run(&["validate", inside.to_str().unwrap()]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains("is outside the project directory"),
        "{}",
        out.stderr
    );
}

#[test]
fn bad_json_input_is_an_error_and_text_needs_input_text() {
    let awr = Awr::new();
    let out = awr.run(&["run", "examples/triage.yaml", "--input", "{bad"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("--input: not JSON: key must be a string at line 1 column 2")
            && out.stderr.contains("--input-text"),
        "{}",
        out.stderr
    );
    let plain = awr.run(&["run", "examples/triage.yaml", "--input", "hello"]);
    assert_eq!(plain.code, 2, "{}", plain.stderr);
    // JSON that parses but nests deeper than the run's log could be read
    // back with: refused before a run is made.
    let nested = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    let deep = awr.run(&["run", "examples/triage.yaml", "--input", &nested(127)]);
    assert_eq!(deep.code, 2, "{}", deep.stderr);
    assert!(
        deep.stderr
            .contains("--input: nests arrays and objects deeper than 100 levels"),
        "{}",
        deep.stderr
    );
    assert!(awr.run_ids().is_empty());
    // The deepest input accepted is read back by every reader of the run.
    let out = awr.run(&["run", "examples/summarize.yaml", "--input", &nested(100)]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let id = run_id_of(&out);
    for read in [
        &["show", id.as_str()][..],
        &["events", id.as_str()],
        &["causal", id.as_str()],
    ] {
        let shown = awr.run(read);
        assert_eq!(shown.code, 0, "{read:?}: {}", shown.stderr);
    }

    let out = awr.run(&["run", "examples/triage.yaml", "--input-text", "{bad"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let events = awr.runtime_events(&run_id_of(&out));
    let EventKind::FlowStarted { input, .. } = &events[0].kind else {
        panic!("{:?}", events[0].kind)
    };
    assert_eq!(input, &Value::String("{bad".into()));
    let both = awr.run(&[
        "run",
        "examples/triage.yaml",
        "--input",
        "1",
        "--input-text",
        "x",
    ]);
    assert_eq!(both.code, 2, "{}", both.stderr);
}

/// `n` files, each calling the next `calls` times; the last runs an agent.
fn call_chain(awr: &Awr, n: usize, calls: usize) -> String {
    for i in 0..n {
        let body = if i + 1 == n {
            "steps: [{agent: a}]\n".to_owned()
        } else {
            let steps: Vec<String> = (0..calls)
                .map(|c| format!("{{id: c{c}, call_workflow: f{}.yaml}}", i + 1))
                .collect();
            format!("steps: [{}]\n", steps.join(", "))
        };
        awr.write(
            &format!("chain/f{i}.yaml"),
            &format!("name: f{i}\nagents: {{a: {{provider: mock}}}}\n{body}"),
        );
    }
    awr.write(
        &format!("chain/fixtures/f{}/a.json", n - 1),
        r#"{"calls": []}"#,
    );
    awr.dir
        .path()
        .join("chain/f0.yaml")
        .to_str()
        .unwrap()
        .to_owned()
}

#[test]
fn call_workflow_chains_nest_at_most_64_deep() {
    let awr = Awr::new();
    let top = call_chain(&awr, 64, 1);
    let out = awr.run(&["validate", &top]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let awr = Awr::new();
    let top = call_chain(&awr, 65, 1);
    let out = awr.run(&["validate", &top]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains("f63.yaml: node `c0` calls"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr
            .contains("`call_workflow` nests more than 64 workflows deep"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("overflow"), "{}", out.stderr);
}

/// 20 files, each calling the next twice: 2^19 paths through the calls,
/// each file loaded once.
#[test]
fn a_diamond_of_calls_loads_each_file_once() {
    let awr = Awr::new();
    let top = call_chain(&awr, 20, 2);
    crate::util::awr_bin(); // built before the clock starts
    let started = std::time::Instant::now();
    let out = awr.run(&["validate", &top]);
    let took = started.elapsed();
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        took < std::time::Duration::from_secs(10),
        "validate took {took:?}"
    );
}

/// Each broken workflow exits 2, names what is wrong, and leaves no run behind.
#[test]
fn broken_workflows_exit_2_and_write_nothing() {
    let agents = "agents:\n  a: {provider: mock}\n  b: {provider: mock}\n";
    let cases: Vec<(&str, String, &str)> = vec![
        ("empty", String::new(), "empty"),
        ("unparsable", "name: [unclosed\n".into(), "flow.yaml:"),
        (
            "missing name",
            format!("{agents}steps: [{{agent: a}}]\n"),
            "name",
        ),
        (
            "wrong type",
            "name: x\nagents:\n  a: {provider: mock, max_turns: ten}\nsteps: [{agent: a}]\n".into(),
            "max_turns",
        ),
        (
            "unknown provider",
            "name: x\nagents:\n  a: {provider: gpt9}\nsteps: [{agent: a}]\n".into(),
            "gpt9",
        ),
        (
            "unknown agent",
            format!("name: x\n{agents}steps: [{{agent: a}}, {{agent: zed}}]\n"),
            "zed",
        ),
        (
            "duplicate node",
            format!("name: x\n{agents}steps: [{{agent: a}}, {{agent: a}}]\n"),
            "`a`",
        ),
        (
            "edge to unknown node",
            format!(
                "name: x\n{agents}nodes: [{{id: a, agent: a}}]\nedges: [{{from: a, to: ghost}}]\n"
            ),
            "ghost",
        ),
        (
            "cycle",
            format!(
                "name: x\n{agents}nodes: [{{id: a, agent: a}}, {{id: b, agent: b}}]\nedges: [{{from: a, to: b}}, {{from: b, to: a}}]\n"
            ),
            "cycle",
        ),
    ];
    for (what, body, needle) in cases {
        let awr = Awr::new();
        let flow = awr.write("flow.yaml", &body);
        let out = awr.run(&["run", flow.to_str().unwrap()]);
        assert_eq!(out.code, 2, "{what}: {}", out.stderr);
        assert!(
            out.stderr.contains(needle),
            "{what}: `{needle}` not in {}",
            out.stderr
        );
        assert!(awr.run_ids().is_empty(), "{what}: a run was created");
        let validate = awr.run(&["validate", flow.to_str().unwrap()]);
        assert_eq!(validate.code, 2, "{what}");
    }
}

#[test]
fn bad_input_and_usage_exit_2() {
    let awr = Awr::new();
    let out = awr.run(&[
        "run",
        "examples/research-pipeline.yaml",
        "--input",
        "@/nonexistent/input.json",
    ]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(awr.run_ids().is_empty());
    assert_eq!(awr.run(&["run", "examples/missing.yaml"]).code, 2);
    assert_eq!(awr.run(&["frobnicate"]).code, 2);
    assert_eq!(awr.run(&["events", "not-a-run"]).code, 2);
    let ok = awr.run(&["validate", "examples/research-pipeline.yaml"]);
    assert_eq!(ok.code, 0, "{}", ok.stderr);
    // Storage that is a file: named, its cause said once.
    let file = awr.write("not-a-dir", "");
    let out = std::process::Command::new(crate::util::awr_bin())
        .args(["run", "examples/summarize.yaml", "--storage"])
        .arg(&file)
        .current_dir(repo_root())
        .env_remove("AWR_STORAGE")
        .output()
        .expect("run awr");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.matches("Not a directory").count(), 1, "{stderr}");
}

#[test]
fn storage_is_accepted_before_or_after_the_subcommand() {
    let awr = Awr::new();
    let storage = awr.storage();
    let out = std::process::Command::new(crate::util::awr_bin())
        .args(["run", "examples/triage.yaml", "--storage"])
        .arg(&storage)
        .current_dir(repo_root())
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(awr.run_ids().len(), 1);
}

#[test]
fn every_example_validates() {
    let awr = Awr::new();
    let mut files = Vec::new();
    for dir in ["examples", "examples/cli", "examples/mcp"] {
        for entry in std::fs::read_dir(repo_root().join(dir)).unwrap().flatten() {
            if entry.path().extension().is_some_and(|e| e == "yaml") {
                files.push(entry.path());
            }
        }
    }
    assert!(files.len() >= 8, "{files:?}");
    for file in files {
        let out = awr.run(&["validate", file.to_str().unwrap()]);
        assert_eq!(out.code, 0, "{}: {}", file.display(), out.stderr);
    }
}

/// `awr validate` counts in words a user reads: one agent, two nodes.
#[test]
fn validate_counts_in_the_singular_and_the_plural() {
    let awr = Awr::new();
    let out = awr.run(&["validate", "examples/market-brief.yaml"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout
            .trim_end()
            .ends_with("ok (1 agent, 2 nodes, 1 edge)"),
        "{}",
        out.stdout
    );
}

/// `awr show` lists the nodes in the order they ran (the declared order
/// for those that never did), not by name.
#[test]
fn show_lists_the_nodes_in_the_order_they_ran() {
    let awr = Awr::new();
    let run = awr.completed_run("examples/research-pipeline.yaml");
    let shown = awr.run(&["show", &run]);
    assert_eq!(shown.code, 0, "{}", shown.stderr);
    let nodes: Vec<&str> = shown
        .stdout
        .lines()
        .skip_while(|l| *l != "nodes")
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(
        nodes,
        ["researcher", "analyst", "writer"],
        "{}",
        shown.stdout
    );
}

/// `awr events` has a header, as `awr runs` has.
#[test]
fn events_has_a_header_as_runs_has() {
    let awr = Awr::new();
    let run = awr.completed_run("examples/summarize.yaml");
    let events = awr.run(&["events", &run]);
    assert_eq!(events.code, 0, "{}", events.stderr);
    let header = events.stdout.lines().next().unwrap();
    for column in ["OFFSET", "TIME", "TYPE", "NODE", "DETAILS"] {
        assert!(header.contains(column), "{header}");
    }
    let json = awr.run(&["events", &run, "--json"]);
    assert!(json.stdout.starts_with('{'), "no header in --json");
}

/// `mcp_servers:` is read and checked, and a grant of an MCP tool is
/// refused at load, naming it, while no server is started for a run: a
/// model never runs believing it has a tool it would not get.
#[test]
fn mcp_servers_are_checked_and_their_tools_granted_to_http_agents_only() {
    let awr = Awr::new();
    let declared = awr.write(
        "declared.yaml",
        "name: t\nmcp_servers:\n  everything: {command: mcp-server-everything, args: [stdio]}\nagents:\n  a: {provider: openai, model: m, tools: [read_file]}\nsteps: [{agent: a}]\n",
    );
    let out = awr.run(&["validate", declared.to_str().unwrap()]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    // A server runs in the project, or under it.
    let outside = awr.write(
        "outside.yaml",
        "name: t\nmcp_servers:\n  everything: {command: mcp-server-everything, cwd: /etc}\nagents:\n  a: {provider: openai, model: m, tools: [read_file]}\nsteps: [{agent: a}]\n",
    );
    let out = awr.run(&["validate", outside.to_str().unwrap()]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains("mcp_servers.everything") && out.stderr.contains("cwd"),
        "{}",
        out.stderr
    );

    let granted = awr.write(
        "granted.yaml",
        "name: t\nmcp_servers:\n  everything: {command: mcp-server-everything}\nagents:\n  a: {provider: openai, model: m, tools: [everything/echo, everything/*]}\nsteps: [{agent: a}]\n",
    );
    let out = awr.run(&["validate", granted.to_str().unwrap()]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    // Not to the mock, which calls no tool.
    let cli = awr.write(
        "cli.yaml",
        "name: t\nmcp_servers:\n  everything: {command: mcp-server-everything}\nagents:\n  a: {provider: mock, tools: [everything/echo]}\nsteps: [{agent: a}]\n",
    );
    for command in ["validate", "run"] {
        let out = awr.run(&[command, cli.to_str().unwrap()]);
        assert_eq!(out.code, 2, "{command}: {}", out.stderr);
        assert!(
            out.stderr.contains("cli.yaml")
                && out.stderr.contains("agents.a.tools")
                && out.stderr.contains("a mock agent calls no tool"),
            "{command}: {}",
            out.stderr
        );
    }
    assert!(awr.run_ids().is_empty(), "no run was started");
    // Claude Code starts its servers where it runs: a `cwd` would be lost.
    let moved = awr.write(
        "moved.yaml",
        "name: t\nmcp_servers:\n  s: {command: srv, cwd: tools}\nagents:\n  a: {provider: claude-code, tools: [s/x]}\nsteps: [{agent: a}]\n",
    );
    let out = awr.run(&["validate", moved.to_str().unwrap()]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("mcp_servers.s.cwd"), "{}", out.stderr);
    // So does Copilot; Codex and Gemini CLI take the server's `cwd` along.
    for (provider, code) in [("copilot", 2), ("codex", 0), ("gemini", 0)] {
        let yaml = format!(
            "name: t\nmcp_servers:\n  s: {{command: srv, cwd: tools}}\nagents:\n  a: {{provider: {provider}, tools: [s/x]}}\nsteps: [{{agent: a}}]\n"
        );
        let file = awr.write(&format!("moved-{provider}.yaml"), &yaml);
        let out = awr.run(&["validate", file.to_str().unwrap()]);
        assert_eq!(out.code, code, "{provider}: {}", out.stderr);
    }

    let undeclared = awr.write(
        "undeclared.yaml",
        "name: t\nagents:\n  a: {provider: openai, model: m, tools: [everything/echo]}\nsteps: [{agent: a}]\n",
    );
    let out = awr.run(&["validate", undeclared.to_str().unwrap()]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains("no MCP server `everything`"),
        "{}",
        out.stderr
    );
}

//! The error line of the commands that name a run (`resume`, `send`,
//! `reply`, `pause`, `cancel`, `recover`, `show`): it names the run once,
//! says what is wrong, and the exit code says whose fault it is (2: the
//! input, nothing was started).

use crate::util::{Awr, Output};

/// A run id that no run of a fresh storage has.
const UNKNOWN: &str = "6f1c2a9e-0d3b-4c5a-8e7f-1a2b3c4d5e6f";

/// Asserts that `out` exited 2 and that `line` is all it wrote on stderr:
/// nothing said the command was under way before it was refused.
fn refused_with(out: &Output, line: &str) {
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert_eq!(
        out.stderr.lines().collect::<Vec<_>>(),
        [line],
        "stderr:\n{}",
        out.stderr
    );
}

/// The workflow hash a run's `flow:started` records.
fn recorded_hash(awr: &Awr, run: &str) -> String {
    awr.events(run)[0]["workflow"]["hash"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn a_command_to_an_unknown_run_says_it_is_not_found_once() {
    let awr = Awr::new();
    // The storage exists, with one run that is not the one asked for.
    awr.completed_run("examples/summarize.yaml");
    let expected = format!("awr: run {UNKNOWN} not found");
    for args in [
        &["resume", UNKNOWN][..],
        &["send", UNKNOWN, "--node-run", UNKNOWN, "hello"],
        &["reply", UNKNOWN, "--node-run", UNKNOWN, "hello"],
        &["pause", UNKNOWN],
        &["cancel", UNKNOWN],
        &["show", UNKNOWN],
        &["events", UNKNOWN],
    ] {
        let out = awr.run_within(30, args);
        assert_eq!(out.stderr, format!("{expected}\n"), "{args:?}");
        refused_with(&out, &expected);
    }
}

#[test]
fn a_command_to_an_ended_run_names_the_run_once() {
    let awr = Awr::new();
    let run = awr.completed_run("examples/summarize.yaml");
    let ended = format!("awr: run {run} has ended (completed); it takes no more commands");
    for args in [
        &["cancel", &run][..],
        &["pause", &run],
        &["send", &run, "--node-run", UNKNOWN, "hello"],
    ] {
        let out = awr.run_within(30, args);
        assert_eq!(out.stderr, format!("{ended}\n"), "{args:?}");
        refused_with(&out, &ended);
    }
    let out = awr.run_within(30, &["resume", &run]);
    refused_with(
        &out,
        &format!("awr: run {run} has ended (completed); there is nothing to resume"),
    );
}

#[test]
fn resuming_with_a_changed_workflow_names_the_run_and_both_hashes_once() {
    let mut live = crate::commands::start();
    let run = live.run.clone();
    let out = live.awr(&["pause", &run]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let (code, _, report) = live.wait();
    assert_eq!(code, 3, "{report}");
    // Another definition: that of a run of another workflow, whose hash is on record.
    let other = live.awr.completed_run("examples/summarize.yaml");
    let other_hash = recorded_hash(&live.awr, &other);
    let hash = recorded_hash(&live.awr, &run);

    let out = live.awr(&["resume", &run, "--workflow", "examples/summarize.yaml"]);
    refused_with(
        &out,
        &format!(
            "awr: run {run} started with workflow `commands` of hash {hash}, and this \
             definition's hash is {other_hash}: it changed since the run started"
        ),
    );
}

#[test]
fn recover_names_each_run_it_could_not_resume_once() {
    let awr = Awr::new();
    let killed = crate::interrupted::killed(&awr);
    let run = killed.run.as_str();
    // The workflow file the run recorded is gone, and so is the definition
    // the storage kept of it (a log copied without it).
    let flow = awr.dir.path().join("flow.yaml");
    std::fs::remove_file(&flow).unwrap();
    std::fs::remove_dir_all(awr.storage().join("definitions")).unwrap();

    let out = awr.run_within(30, &["recover", "--all"]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(
        lines.last().copied(),
        Some("awr: 1 run(s) did not complete"),
        "{}",
        out.stderr
    );
    // The error line (a warning before it says the definition is lost).
    let about = lines
        .iter()
        .find(|l| l.starts_with("awr: ") && l.contains(run))
        .unwrap_or_else(|| panic!("no line names the run:\n{}", out.stderr));
    assert_eq!(about.matches(&run).count(), 1, "{about}");
    assert!(
        about.starts_with(&format!("awr: the workflow of run {run}: "))
            && about.contains(&flow.display().to_string()),
        "{about}"
    );
}

#[test]
fn recover_names_an_interrupted_run_it_cannot_read_and_exits_2() {
    let awr = Awr::new();
    let killed = crate::interrupted::killed(&awr);
    let (run, run_dir) = (killed.run.as_str(), &killed.dir);
    // Its last event replaced by a line that is no event.
    let log = run_dir.join("events.ndjson");
    let text = std::fs::read_to_string(&log).unwrap();
    let kept = text.trim_end().rsplit_once('\n').unwrap().0;
    std::fs::write(&log, format!("{kept}\n{{\"bogus\":1}}\n")).unwrap();
    // No snapshot either (a short run may have none before its end).
    let _ = std::fs::remove_file(run_dir.join("snapshot.json"));

    for args in [&["recover"][..], &["recover", "--all"]] {
        let out = awr.run_within(30, args);
        assert_eq!(out.code, 2, "{args:?}: {}", out.stderr);
        assert!(
            out.stderr.contains(run) && out.stderr.contains("corrupt store data"),
            "{args:?}: {}",
            out.stderr
        );
        assert!(
            out.stderr.ends_with("awr: 1 run(s) cannot be read\n"),
            "{args:?}: {}",
            out.stderr
        );
    }
    // A storage error, as for the reading commands: not "the run failed".
    let out = awr.run_within(30, &["resume", run]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("corrupt store data"), "{}", out.stderr);
}

/// `awr validate` reads every fixture a run would be served from, a called
/// workflow's included: one that does not parse is named before any run.
#[test]
fn validate_names_a_fixture_that_does_not_parse() {
    let awr = Awr::new();
    awr.write("fx/good.json", r#"{"calls": [{"output": {"text": "hi"}}]}"#);
    awr.write("fx/bad.json", "not json");
    awr.write(
        "child.yaml",
        "name: child\nagents:\n  b: {provider: mock, fixtures: fx}\nnodes:\n  - {id: bad, agent: b}\n",
    );
    let flow = awr.write(
        "flow.yaml",
        "name: top\nagents:\n  g: {provider: mock, fixtures: fx}\nnodes:\n  - {id: good, agent: g}\n  - {id: sub, call_workflow: child.yaml}\nedges:\n  - {from: good, to: sub}\n",
    );
    let out = awr.run(&["validate", flow.to_str().unwrap()]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains("invalid fixture file") && out.stderr.contains("fx/bad.json"),
        "{}",
        out.stderr
    );
    awr.write("fx/bad.json", r#"{"calls": []}"#);
    let out = awr.run(&["validate", flow.to_str().unwrap()]);
    assert_eq!(out.code, 0, "{}", out.stderr);
}

/// A condition that reads no variable can only ever give one value: one
/// that is not a bool, or fails, is refused by `awr validate`, naming the
/// edge, instead of failing the run when its edge is decided.
#[test]
fn validate_refuses_a_condition_that_can_only_fail() {
    let awr = Awr::new();
    let flow = |when: &str| {
        awr.write(
            "flow.yaml",
            &format!(
                "name: w\nagents:\n  g: {{provider: mock}}\nnodes:\n  - {{id: a, agent: g}}\n  - {{id: b, agent: g}}\nedges:\n  - {{from: a, to: b, when: \"{when}\"}}\n"
            ),
        )
    };
    for (when, why) in [
        ("1", "not a bool"),
        ("matches('x', '(')", "failed to evaluate"),
    ] {
        let file = flow(when);
        let out = awr.run(&["validate", file.to_str().unwrap()]);
        assert_eq!(out.code, 2, "{when}: {}", out.stderr);
        assert!(
            out.stderr.contains(why) && out.stderr.contains("a->b"),
            "{when}: {}",
            out.stderr
        );
    }
    for node in ["a", "b"] {
        awr.write(
            &format!("fixtures/w/{node}.json"),
            r#"{"calls": [{"output": {"text": "hi"}}]}"#,
        );
    }
    let file = flow("output != ''");
    let out = awr.run(&["validate", file.to_str().unwrap()]);
    assert_eq!(out.code, 0, "{}", out.stderr);
}

/// A workflow of one mock agent that answers `hi`, for the tests of its input.
fn one_mock_agent(awr: &Awr) -> std::path::PathBuf {
    awr.write(
        "fixtures/w/a.json",
        r#"{"calls": [{"output": {"text": "hi"}}]}"#,
    );
    awr.write(
        "flow.yaml",
        "name: w\nagents:\n  g: {provider: mock}\nnodes:\n  - {id: a, agent: g}\n",
    )
}

/// An integer beyond 64 bits in `--input` is refused, naming it: serde_json
/// would keep the nearest float, a value other than the one given.
#[test]
fn an_input_integer_beyond_64_bits_is_refused_not_changed() {
    let awr = Awr::new();
    let flow = one_mock_agent(&awr);
    let big = "123456789012345678901234567890";
    let out = awr.run(&[
        "run",
        flow.to_str().unwrap(),
        "--input",
        &format!("{{\"id\": {big}}}"),
    ]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains(big) && out.stderr.contains("64 bits"),
        "{}",
        out.stderr
    );
    let out = awr.run(&[
        "run",
        flow.to_str().unwrap(),
        "--input",
        &format!("{{\"id\": \"{big}\"}}"),
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
}

/// A duplicate key in `--input`, at any depth and from a file too, is
/// refused naming the key, as the workflow's own `input:` is: serde_json
/// would keep the last one, a value other than the one written. Nothing is
/// started.
#[test]
fn an_input_with_a_duplicate_key_is_refused_naming_it() {
    let awr = Awr::new();
    let flow = one_mock_agent(&awr);
    let file = awr.write("input.json", r#"{"a": 1, "b": {"c": 1, "c": 2}}"#);
    for input in [
        r#"{"a": 1, "a": 2}"#.to_owned(),
        format!("@{}", file.display()),
    ] {
        let out = awr.run(&["run", flow.to_str().unwrap(), "--input", &input]);
        assert_eq!(out.code, 2, "{input}: {}", out.stderr);
        assert!(
            out.stderr.contains("duplicate key") && !out.stderr.contains("not JSON"),
            "{}",
            out.stderr
        );
    }
    // Refused before the store was touched: there is none yet.
    let out = awr.run(&["runs"]);
    assert!(out.stderr.contains("does not exist"), "{}", out.stderr);
    let out = awr.run(&[
        "run",
        flow.to_str().unwrap(),
        "--input",
        r#"{"a": 1, "b": 2}"#,
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
}

/// `awr events --node` on a run whose log is damaged still shows that
/// node's events, and says what is wrong (exit 2): the node is checked
/// against the run's state only when the state can be read.
#[test]
fn events_of_a_node_are_shown_from_a_damaged_log() {
    let awr = Awr::new();
    let run = awr.completed_run("examples/summarize.yaml");
    let log = awr.corrupt_log_line(&run, 2);
    // A short run keeps no snapshot: its state is the fold of every line.
    let _ = std::fs::remove_file(log.with_file_name("snapshot.json"));
    let out = awr.run(&["show", &run]);
    assert_ne!(out.code, 0, "the state cannot be read: {}", out.stderr);
    let out = awr.run(&["events", &run, "--node", "summarizer"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stdout.contains("summarizer"), "{}", out.stdout);
}

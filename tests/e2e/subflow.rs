//! `call_workflow`: a child is a run of its own, linked to its parent both
//! ways, in the event logs and in the transcripts, to any depth.

use domain::EventKind;
use serde_json::Value;

use crate::util::{Awr, run_id_of};

fn transcript(awr: &Awr, run: &str) -> Vec<Value> {
    let path = awr
        .storage()
        .join("transcripts")
        .join(format!("{run}.jsonl"));
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn the_sub_workflow_example_links_parent_and_child_both_ways() {
    let awr = Awr::new();
    let out = awr.run(&["run", "examples/market-brief.yaml"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let parent = run_id_of(&out);
    assert_eq!(awr.run_ids().len(), 2, "the child is a run of its own");

    let lines = transcript(&awr, &parent);
    let started = lines
        .iter()
        .find(|l| l["type"] == "step.call_workflow.started")
        .expect("parent names its child");
    let child = started["child_run_id"].as_str().unwrap().to_owned();
    assert!(lines.iter().any(
        |l| l["type"] == "step.call_workflow.completed" && l["child_run_id"] == child.as_str()
    ));
    assert!(lines.iter().all(|l| l.get("parent_run_id").is_none()));

    let child_lines = transcript(&awr, &child);
    assert!(
        child_lines
            .iter()
            .all(|l| l["parent_run_id"] == parent.as_str() && l["run_id"] == child.as_str())
    );
    for (i, l) in child_lines.iter().enumerate() {
        assert_eq!(l["seq"], i as u64 + 1, "one seq series per file");
    }

    let parent_events = awr.runtime_events(&parent);
    assert!(parent_events.iter().any(|e| matches!(&e.kind,
        EventKind::SubflowStarted { child_run_id, .. } if child_run_id.to_string() == child)));
    assert!(parent_events.iter().any(|e| matches!(&e.kind,
        EventKind::SubflowCompleted { child_run_id, .. } if child_run_id.to_string() == child)));
    let child_events = awr.runtime_events(&child);
    assert!(matches!(&child_events[0].kind,
        EventKind::FlowStarted { parent_run_id: Some(p), .. } if p.to_string() == parent));

    // The child's output is the node's output, and the run's final output.
    let child_done = child_lines.last().unwrap();
    assert_eq!(child_done["type"], "run.completed");
    assert_eq!(
        out.stdout.trim_end(),
        child_done["payload"]["result"].as_str().unwrap().trim_end()
    );

    let path = awr
        .storage()
        .join("transcripts")
        .join(format!("{parent}.jsonl"));
    let recipe = r#"select(.type == "step.call_workflow.started") | .child_run_id"#;
    if let Some(children) = crate::transcript_cli::jq(&["-r", recipe], &path) {
        assert_eq!(
            children.trim(),
            child,
            "the documented recipe finds the child"
        );
    }

    let tree = awr.run(&["transcript", &parent, "--tree"]);
    assert_eq!(tree.code, 0, "{}", tree.stderr);
    let text = tree.stdout;
    let at = |needle: &str| {
        text.find(needle)
            .unwrap_or_else(|| panic!("`{needle}` not in\n{text}"))
    };
    assert!(at("market-brief") < at("condense [call_workflow]"));
    assert!(at("condense [call_workflow]") < at(&format!("run {child} summarize")));
    assert!(at("summarizer [agent]") < at("fact-checker [agent]"));
}

#[test]
fn nesting_goes_to_any_depth_and_cycles_are_refused() {
    let awr = Awr::new();
    let leaf = "name: leaf\nagents:\n  a: {provider: mock, fixtures: fx}\nsteps: [{agent: a}]\n";
    awr.write(
        "fx/a.json",
        r#"{"calls": [{"output": {"text": "from the leaf"}}]}"#,
    );
    awr.write("leaf.yaml", leaf);
    awr.write("middle.yaml", "name: middle\nagents:\n  a: {provider: mock}\nsteps: [{id: down, call_workflow: leaf.yaml}]\n");
    let top = awr.write("top.yaml", "name: top\nagents:\n  a: {provider: mock}\nsteps: [{id: down, call_workflow: middle.yaml}]\n");
    let out = awr.run(&["run", top.to_str().unwrap()]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.stdout.trim(), "from the leaf");
    assert_eq!(awr.run_ids().len(), 3);
    let tree = awr.run(&["transcript", &run_id_of(&out), "--tree"]);
    assert!(
        tree.stdout.contains("top (completed)")
            && tree.stdout.contains("middle (completed)")
            && tree.stdout.contains("leaf (completed)"),
        "{}",
        tree.stdout
    );

    let cyc = Awr::new();
    cyc.write(
        "b.yaml",
        "name: b\nagents:\n  a: {provider: mock}\nsteps: [{id: back, call_workflow: a.yaml}]\n",
    );
    let a = cyc.write(
        "a.yaml",
        "name: a\nagents:\n  a: {provider: mock}\nsteps: [{id: there, call_workflow: b.yaml}]\n",
    );
    let out = cyc.run(&["run", a.to_str().unwrap()]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains("must not call themselves"),
        "{}",
        out.stderr
    );
    assert!(cyc.run_ids().is_empty());

    let missing = Awr::new();
    let m = missing.write("m.yaml", "name: m\nagents:\n  a: {provider: mock}\nsteps: [{id: gone, call_workflow: nowhere.yaml}]\n");
    let out = missing.run(&["run", m.to_str().unwrap()]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains("nowhere.yaml") && out.stderr.contains("`gone`"),
        "{}",
        out.stderr
    );
    assert!(missing.run_ids().is_empty());
}

/// A child run beside a sibling that answers at once, on the file store
/// and `awr run`'s one thread: the child is a driver of its own that takes
/// the store's shared sync across its awaits, so the parent, writing the
/// sibling's end meanwhile, must not wait for a child it alone would poll.
/// Several runs, as which of the two flushes first depends on the turn.
#[test]
fn a_child_run_beside_a_sibling_never_stalls_its_parent() {
    let awr = Awr::new();
    awr.write(
        "fx/a.json",
        r#"{"calls": [{"output": {"text": "from the child"}}]}"#,
    );
    awr.write(
        "fx/side.json",
        r#"{"calls": [{"output": {"text": "from the side"}}]}"#,
    );
    awr.write(
        "child.yaml",
        "name: child\nagents:\n  a: {provider: mock, fixtures: fx}\nsteps: [{agent: a}]\n",
    );
    let top = awr.write(
        "top.yaml",
        "name: top\nagents:\n  a: {provider: mock, fixtures: fx}\nnodes:\n  - {id: call, call_workflow: child.yaml}\n  - {id: side, agent: a}\n",
    );
    for _ in 0..5 {
        let out = awr.run_within(60, &["run", top.to_str().unwrap()]);
        assert_eq!(out.code, 0, "{}", out.stderr);
        let parent = run_id_of(&out);
        let events = awr.runtime_events(&parent);
        assert_eq!(events.last().unwrap().kind.type_name(), "flow:completed");
        assert_eq!(
            events
                .iter()
                .filter(|e| e.kind.type_name() == "node:completed")
                .count(),
            2
        );
    }
}

#[test]
fn a_failing_child_fails_its_parent() {
    let awr = Awr::new();
    awr.write(
        "fx/a.json",
        r#"{"calls": [{"output": {"error": {"errorType": "api_error", "message": "boom"}}}]}"#,
    );
    awr.write(
        "child.yaml",
        "name: child\nagents:\n  a: {provider: mock, fixtures: fx}\nsteps: [{agent: a}]\n",
    );
    let top = awr.write("top.yaml", "name: top\nagents:\n  a: {provider: mock}\nsteps: [{id: sub, call_workflow: child.yaml}]\n");
    let out = awr.run(&["run", top.to_str().unwrap()]);
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(out.stderr.contains("boom"), "{}", out.stderr);
    let parent = run_id_of(&out);
    let last = awr.runtime_events(&parent).pop().unwrap();
    assert_eq!(last.kind.type_name(), "flow:failed");
    assert!(
        matches!(&awr.runtime_events(&parent).iter().find(|e| e.kind.type_name() == "subflow:completed").unwrap().kind,
        EventKind::SubflowCompleted { status, .. } if status.as_str() == "failed")
    );
}

/// How a parent run with its child in flight is stopped.
#[derive(Clone, Copy, Debug)]
enum Stop {
    /// `awr pause PARENT`: the child pauses with it.
    Pause,
    /// SIGKILL of the process that writes both.
    Kill,
}

/// A parent whose only node calls a child whose command waits the first
/// time (its marker file does not exist) and answers at once after. The
/// run is stopped while the child waits, then resumed: the same child run
/// goes on from where it was, never a second one, and its leftover
/// process is gone.
fn child_in_flight_goes_on_after(stop: Stop) {
    use crate::cancel::{gone, wait_exit, wait_for};
    use crate::crash::Reaper;
    let awr = Awr::new();
    let dir = awr.dir.path();
    let (mark, pids) = (dir.join("child.mark"), dir.join("pids"));
    awr.write(
        "child.yaml",
        &format!(
            "name: child\nnodes:\n  - {{id: wait, command: 'if [ -e {m} ]; then echo done; else touch {m}; echo $$ >> {p}; exec sleep 30; fi'}}\n",
            m = mark.display(),
            p = pids.display()
        ),
    );
    let parent = awr.write(
        "parent.yaml",
        "name: parent\nnodes:\n  - {id: call, call_workflow: child.yaml}\n",
    );
    let mut reaper = Reaper {
        child: None,
        pids: pids.clone(),
    };
    let child = awr
        .command(&["run", parent.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let child = reaper.child.insert(child);
    wait_for(20, "the child's command to start", || {
        std::fs::read_to_string(&pids).is_ok_and(|p| !p.trim().is_empty())
    });
    let runs = awr.run_ids();
    assert_eq!(runs.len(), 2, "{runs:?}");
    let is_child = |run: &str| {
        matches!(
            &awr.runtime_events(run)[0].kind,
            EventKind::FlowStarted {
                parent_run_id: Some(_),
                ..
            }
        )
    };
    let (child_run, parent_run) = match is_child(&runs[0]) {
        true => (runs[0].clone(), runs[1].clone()),
        false => (runs[1].clone(), runs[0].clone()),
    };
    match stop {
        Stop::Pause => {
            let out = awr.run(&["pause", &parent_run]);
            assert_eq!(out.code, 0, "{}", out.stderr);
            assert_eq!(wait_exit(child, 30, "awr run to pause"), 3);
        }
        Stop::Kill => {
            let sent = std::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status()
                .unwrap();
            assert!(sent.success());
            wait_exit(child, 30, "awr run to die");
        }
    }
    // The child alone is refused, pointing at its parent: the parent's
    // resume continues it.
    let child_file = dir.join("child.yaml");
    for args in [
        vec!["resume", &child_run],
        vec![
            "resume",
            &child_run,
            "--upgrade",
            child_file.to_str().unwrap(),
        ],
    ] {
        let out = awr.run(&args);
        assert_eq!(out.code, 2, "{stop:?} {args:?}: {}", out.stderr);
        assert!(
            out.stderr.contains(&format!("`awr resume {parent_run}`")),
            "{stop:?} {args:?}: {}",
            out.stderr
        );
    }
    let out = awr.run_within(60, &["resume", &parent_run]);
    assert_eq!(out.code, 0, "{stop:?}: {}", out.stderr);
    for run in [&parent_run, &child_run] {
        assert!(
            out.stderr.contains(&format!("run {run} resumes")),
            "{stop:?}: {}",
            out.stderr
        );
    }
    assert_eq!(awr.run_ids().len(), 2, "{stop:?}: no second child run");
    let first = std::fs::read_to_string(&pids).unwrap();
    let first = first.split_whitespace().next().unwrap();
    assert!(gone(first), "{stop:?}: the child's first command is gone");

    let parent_log = awr.runtime_events(&parent_run);
    let started: Vec<_> = parent_log
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::SubflowStarted { child_run_id, .. } => Some(child_run_id.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(started, std::slice::from_ref(&child_run), "{stop:?}");
    assert!(parent_log.iter().any(|e| matches!(&e.kind,
        EventKind::SubflowCompleted { child_run_id, status }
            if child_run_id.to_string() == child_run && status.as_str() == "completed")));
    let child_log = awr.runtime_events(&child_run);
    let types: Vec<&str> = child_log.iter().map(|e| e.kind.type_name()).collect();
    assert_eq!(
        types.iter().filter(|t| **t == "flow:started").count(),
        1,
        "{stop:?}: {types:?}"
    );
    assert!(types.contains(&"flow:resumed"), "{stop:?}: {types:?}");
    if let Stop::Pause = stop {
        assert!(types.contains(&"flow:paused"), "{types:?}");
    }
    assert_eq!(types.last(), Some(&"flow:completed"), "{stop:?}: {types:?}");
}

#[test]
fn a_paused_parent_resumes_its_child_run_where_it_was() {
    child_in_flight_goes_on_after(Stop::Pause);
}

#[test]
fn a_killed_parent_resumes_its_child_run_where_it_was() {
    child_in_flight_goes_on_after(Stop::Kill);
}

/// A parent killed while its child runs leaves both interrupted; `awr
/// recover --all` continues the parent, whose resume continues the child,
/// and does not try the child by itself (it records no workflow file).
#[test]
fn recover_all_continues_a_killed_parent_with_its_child() {
    let awr = Awr::new();
    let dir = awr.dir.path();
    let (started, go, pid) = (dir.join("started"), dir.join("go"), dir.join("sleep.pid"));
    awr.write(
        "child.yaml",
        &format!(
            "name: child\nnodes:\n  - id: wait\n    command: \"if [ -f '{go}' ]; then echo done; else echo $$ > '{pid}'; touch '{started}'; exec sleep 60; fi\"\n",
            go = go.display(),
            pid = pid.display(),
            started = started.display(),
        ),
    );
    let parent = awr.write(
        "parent.yaml",
        "name: parent\nnodes:\n  - id: call\n    call_workflow: child.yaml\n",
    );
    let mut first = awr.spawn_run(&parent);
    crate::cancel::wait_for(30, "the child's command to start", || started.exists());
    first.kill().unwrap();
    first.wait().unwrap();
    let sleeper = std::fs::read_to_string(&pid).unwrap().trim().to_owned();
    let _leftovers = crate::interrupted::Leftovers(vec![sleeper]);
    std::fs::write(&go, "").unwrap();

    let listed = awr.run_within(30, &["recover"]);
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    assert_eq!(listed.stdout.lines().count(), 2, "{}", listed.stdout);
    let out = awr.run_within(60, &["recover", "--all"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stderr.contains("goes on with its parent"),
        "{}",
        out.stderr
    );
    for run in awr.run_ids() {
        let log = awr.runtime_events(&run);
        assert!(
            matches!(
                log.last().map(|e| &e.kind),
                Some(EventKind::FlowCompleted { .. })
            ),
            "run {run} ends with {:?}",
            log.last().map(|e| &e.kind)
        );
    }
    assert_eq!(awr.run_ids().len(), 2);
}

/// A child run pauses with its parent, never alone: `awr pause CHILD` is
/// refused (its parent, waiting on it, took the pause for a failure and
/// ended for good), and the parent goes on to complete.
#[test]
fn pausing_a_child_run_alone_is_refused() {
    let awr = Awr::new();
    let gate = awr.dir.path().join("gate");
    awr.write(
        "child.yaml",
        &format!(
            "name: child\nnodes:\n  - id: wait\n    command: \"{}\"\n",
            crate::util::gated(&gate, "done")
        ),
    );
    let parent = awr.write(
        "parent.yaml",
        "name: parent\nnodes:\n  - id: call\n    call_workflow: child.yaml\n",
    );
    let mut running = awr.spawn_run(&parent);
    let child = awr.run_that_started("wait");
    let paused = awr.run_within(30, &["pause", &child]);
    assert_eq!(paused.code, 2, "{}{}", paused.stdout, paused.stderr);
    assert!(
        paused.stderr.contains("pause its parent run"),
        "{}",
        paused.stderr
    );
    std::fs::write(&gate, "").unwrap();
    let code = crate::cancel::wait_exit(&mut running, 60, "the parent run to end");
    assert_eq!(code, 0, "the parent completes");
    for run in awr.run_ids() {
        assert_eq!(awr.show_json(&run)["status"], "completed", "{run}");
    }
}

/// A parent paused with its child, then cancelled: the child is cancelled
/// with it, on its own record, never left paused under a parent that ended
/// (where `awr prune` would keep the tree for ever).
#[test]
fn cancelling_a_paused_parent_cancels_its_paused_child() {
    use crate::cancel::{wait_exit, wait_for};
    let awr = Awr::new();
    let dir = awr.dir.path();
    let started = dir.join("started");
    awr.write(
        "child.yaml",
        &format!(
            "name: child\nnodes:\n  - {{id: wait, command: 'touch {}; exec sleep 30'}}\n",
            started.display()
        ),
    );
    let parent = awr.write(
        "parent.yaml",
        "name: parent\nnodes:\n  - {id: call, call_workflow: child.yaml}\n",
    );
    let mut running = awr
        .command(&["run", parent.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_for(20, "the child's command to start", || started.exists());
    let runs = awr.run_ids();
    assert_eq!(runs.len(), 2, "{runs:?}");
    let workflow = |run: &str| match &awr.runtime_events(run)[0].kind {
        EventKind::FlowStarted { workflow, .. } => workflow.name.clone(),
        other => panic!("{other:?}"),
    };
    let (child, parent) = match workflow(&runs[0]).as_str() {
        "child" => (runs[0].clone(), runs[1].clone()),
        _ => (runs[1].clone(), runs[0].clone()),
    };
    let out = awr.run(&["pause", &parent]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(wait_exit(&mut running, 30, "awr run to pause"), 3);
    let out = awr.run(&["cancel", &parent]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    for run in [&parent, &child] {
        let log = awr.runtime_events(run);
        let types: Vec<&str> = log.iter().map(|e| e.kind.type_name()).collect();
        assert_eq!(types.last(), Some(&"flow:cancelled"), "{run}: {types:?}");
    }
    let out = awr.run(&["prune", "--older-than", "0s"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(awr.run_ids().is_empty(), "the whole tree is pruned");
}

//! `awr fork RUN --at OFFSET`: a new run that starts as a copy of RUN's log
//! up to OFFSET, records `flow:forked`, and runs the rest; on the file
//! store and on SQLite, with a sub-workflow in flight, and refused (exit 2,
//! no run made) when the request is bad.

use serde_json::Value;

use crate::util::{Awr, of_type, run_id_of};

/// The offset of the first event of `kind` (on `node`, when given).
fn offset_of(events: &[Value], kind: &str, node: Option<&str>) -> u64 {
    events
        .iter()
        .find(|e| e["type"] == kind && node.is_none_or(|n| e["nodeId"] == n))
        .unwrap_or_else(|| panic!("no {kind}"))["offset"]
        .as_u64()
        .unwrap()
}

/// The nodes of the `agent:start`s after offset `after`.
fn started_after(events: &[Value], after: u64) -> Vec<String> {
    of_type(events, "agent:start")
        .into_iter()
        .filter(|e| e["offset"].as_u64().unwrap() > after)
        .map(|e| e["nodeId"].as_str().unwrap().to_owned())
        .collect()
}

fn fork_after_the_first_node(awr: &Awr) {
    let out = awr.run(&["run", "examples/research-pipeline.yaml"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let parent = run_id_of(&out);
    let parent_events = awr.events(&parent);
    let at = offset_of(&parent_events, "node:completed", Some("researcher"));

    let forked = awr.run(&["fork", &parent, "--at", &at.to_string()]);
    assert_eq!(forked.code, 0, "{}", forked.stderr);
    assert_eq!(forked.stdout, out.stdout, "the same final output on stdout");
    let fork = run_id_of(&forked);
    assert_ne!(fork, parent);

    let events = awr.events(&fork);
    assert_eq!(events[usize::try_from(at).unwrap()]["type"], "flow:forked");
    assert_eq!(started_after(&events, at), ["analyst", "writer"]);
    assert_eq!(started_after(&parent_events, 0).len(), 3);
    for (copy, original) in events
        .iter()
        .zip(&parent_events[..usize::try_from(at).unwrap()])
    {
        assert_eq!(copy["runId"], fork.as_str());
        assert_eq!(copy["type"], original["type"]);
        assert_eq!(copy["timestamp"], original["timestamp"]);
    }
    assert_eq!(
        awr.events(&parent),
        parent_events,
        "the parent is untouched"
    );
    // The fork's transcript begins where its log does: the copied steps'
    // lines, at their events' times, then its own, to the same end.
    let lines = |run: &str| -> Vec<Value> {
        let out = awr.run(&["transcript", "--json", run]);
        assert_eq!(out.code, 0, "{}", out.stderr);
        out.stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let (theirs, ours) = (lines(&parent), lines(&fork));
    let shape = |l: &Value| (l["type"].clone(), l["path"].clone(), l["timestamp"].clone());
    assert_eq!(ours[0]["type"], "run.started", "{ours:?}");
    let copied = theirs
        .iter()
        .position(|l| l["type"] == "step.completed")
        .unwrap();
    assert_eq!(
        ours[..=copied].iter().map(shape).collect::<Vec<_>>(),
        theirs[..=copied].iter().map(shape).collect::<Vec<_>>(),
        "the first step as the parent wrote it"
    );
    assert_eq!(ours.len(), theirs.len(), "{ours:?}");
    assert_eq!(ours.last().unwrap()["type"], "run.completed");

    let shown = awr.show_json(&fork);
    assert_eq!(shown["status"], "completed");
    assert_eq!(shown["forkedFrom"]["runId"], parent.as_str());
    assert_eq!(shown["forkedFrom"]["offset"], at);
    assert_eq!(awr.show_json(&parent)["status"], "completed");
    let show = awr.run(&["show", &fork]);
    assert!(
        show.stdout
            .contains(&format!("forked    from {parent} at offset {at}")),
        "{}",
        show.stdout
    );
}

#[test]
fn a_fork_after_the_first_node_runs_the_other_two_again_on_files() {
    fork_after_the_first_node(&Awr::new());
}

#[test]
fn a_fork_after_the_first_node_runs_the_other_two_again_on_sqlite() {
    fork_after_the_first_node(&Awr::sqlite());
}

#[test]
fn a_sub_workflow_in_flight_at_the_fork_point_is_forked_with_its_parent() {
    let awr = Awr::new();
    let out = awr.run(&["run", "examples/market-brief.yaml"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let parent = run_id_of(&out);
    let parent_events = awr.events(&parent);
    let at = offset_of(&parent_events, "subflow:started", None);
    let child = of_type(&parent_events, "subflow:started")[0]["childRunId"]
        .as_str()
        .unwrap()
        .to_owned();
    let child_events = awr.events(&child);

    let forked = awr.run(&["fork", &parent, "--at", &at.to_string()]);
    assert_eq!(forked.code, 0, "{}", forked.stderr);
    assert_eq!(forked.stdout, out.stdout);
    let fork = run_id_of(&forked);
    let events = awr.events(&fork);
    let fork_child = of_type(&events, "subflow:started")[0]["childRunId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(fork_child, child, "the child in flight is forked with it");
    assert_eq!(
        of_type(&events, "subflow:started").len(),
        1,
        "not started twice"
    );
    assert_eq!(
        of_type(&events, "subflow:completed")[0]["childRunId"],
        fork_child.as_str()
    );
    let forked_child = awr.events(&fork_child);
    assert_eq!(forked_child[0]["type"], "flow:started");
    assert_eq!(forked_child[0]["parentRunId"], fork.as_str());
    assert_eq!(forked_child.last().unwrap()["type"], "flow:completed");
    if let Some(mark) = of_type(&forked_child, "flow:forked").first() {
        assert_eq!(mark["parentRunId"], child.as_str());
    }
    assert_eq!(awr.events(&child), child_events, "the child is untouched");
    assert_eq!(awr.run_ids().len(), 4);
    // The forked child's transcript, too, begins where its log does.
    let lines = awr.run(&["transcript", "--json", &fork_child]);
    assert_eq!(lines.code, 0, "{}", lines.stderr);
    let first: Value = serde_json::from_str(lines.stdout.lines().next().unwrap()).unwrap();
    assert_eq!(first["type"], "run.started", "{}", lines.stdout);
}

#[test]
fn a_bad_fork_exits_2_naming_the_problem_and_makes_no_run() {
    let awr = Awr::new();
    let parent = awr.completed_run("examples/summarize.yaml");
    let last = awr.events(&parent).len();
    let beyond = (last + 1).to_string();
    let unknown = "7f8c2b1e-3d4a-4b5c-9d6e-1f2a3b4c5d6e";
    for (args, says) in [
        (vec!["fork", &parent, "--at", "0"], "offset 0"),
        (vec!["fork", &parent, "--at", &beyond], "beyond the end"),
        (vec!["fork", unknown, "--at", "1"], "not found"),
        (
            vec!["fork", &parent, "--at", "1", "--input", "{not json"],
            "--input: not JSON",
        ),
        (vec!["fork", &parent, "--at", "x"], "--at"),
    ] {
        let out = awr.run(&args);
        assert_eq!(out.code, 2, "{args:?}: {}", out.stderr);
        assert!(out.stderr.contains(says), "{says}: {}", out.stderr);
    }
    assert_eq!(awr.run_ids(), [parent]);
}

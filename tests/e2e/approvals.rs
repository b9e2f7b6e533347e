//! `approval` nodes (docs/approvals.md) through the command line: a run
//! waits for people holding nothing (`waiting`, exit 4), each answer names
//! the node run that asked, an answer is taken once, a crash asks nothing
//! twice, and a deadline that passed while nothing ran fires at the next
//! load, once.

use serde_json::Value;

use crate::util::{Awr, Output, gated, of_type, repo_root, run_id_of};

/// The open questions of `run`, as `awr approvals --run RUN --json` lists
/// them.
fn questions(awr: &Awr, run: &str) -> Vec<Value> {
    let out = awr.run(&["approvals", "--run", run, "--json"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    (out.stdout.lines())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The open question of node `node` in `run`: its node run id.
fn asking(awr: &Awr, run: &str, node: &str) -> String {
    let open = questions(awr, run);
    let question = (open.iter())
        .find(|q| q["nodeId"] == node)
        .unwrap_or_else(|| panic!("no question of `{node}` in {open:?}"));
    question["nodeRunId"].as_str().unwrap().to_owned()
}

fn status(awr: &Awr, run: &str) -> String {
    awr.show_json(run)["status"].as_str().unwrap().to_owned()
}

fn approve(awr: &Awr, run: &str, node_run: &str, data: &str) -> Output {
    awr.run_within(
        60,
        &["approve", run, "--node-run", node_run, "--data", data],
    )
}

#[test]
fn a_fan_out_of_two_approvals_waits_and_is_answered_in_any_order_once_each() {
    let awr = Awr::new();
    let flow = awr.write(
        "fan.yaml",
        "name: fan\n\
         nodes:\n\
         - {id: start, command: 'echo go'}\n\
         - id: legal\n  approval: {prompt: 'Legal: {{ input.stdout }}', schema: {type: object, required: [ticket]}}\n\
         - id: design\n  approval: 'Design?'\n\
         - {id: done, command: 'echo done'}\n\
         edges:\n\
         - {from: start, to: legal}\n\
         - {from: start, to: design}\n\
         - {from: legal, to: done}\n\
         - {from: design, to: done}\n",
    );
    let out = awr.run(&["run", flow.to_str().unwrap()]);
    assert_eq!(out.code, 4, "waiting: {}", out.stderr);
    assert!(
        out.stderr.contains("waiting for an answer"),
        "{}",
        out.stderr
    );
    let run = run_id_of(&out);
    assert_eq!(status(&awr, &run), "waiting");
    let listed = awr.run(&["runs", "--status", "waiting"]);
    assert!(listed.stdout.contains(&run), "{}", listed.stdout);
    let open = questions(&awr, &run);
    assert_eq!(open.len(), 2, "{open:?}");
    let legal = asking(&awr, &run, "legal");
    let design = asking(&awr, &run, "design");
    let shown = open.iter().find(|q| q["nodeId"] == "legal").unwrap();
    assert_eq!(shown["prompt"], "Legal: go\n");
    assert_eq!(shown["schema"]["required"][0], "ticket");

    // The second first: the run goes on here, and waits again.
    let out = approve(&awr, &run, &design, "{\"by\": \"ux\"}");
    assert_eq!(out.code, 4, "{}", out.stderr);
    assert_eq!(status(&awr, &run), "waiting");
    // A third answer, to the question answered already: refused, recorded.
    let out = approve(&awr, &run, &design, "{}");
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("rejected"), "{}", out.stderr);
    // Data that fails the schema: refused, recorded.
    let out = approve(&awr, &run, &legal, "{\"nope\": 1}");
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("schema"), "{}", out.stderr);
    // Then the first: the run completes.
    let out = approve(&awr, &run, &legal, "{\"ticket\": 42}");
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("done"), "{}", out.stdout);
    assert_eq!(status(&awr, &run), "completed");

    let events = awr.events(&run);
    let resolved = of_type(&events, "approval:resolved");
    let order: Vec<&str> = resolved
        .iter()
        .map(|e| e["nodeId"].as_str().unwrap())
        .collect();
    assert_eq!(order, ["design", "legal"]);
    assert_eq!(resolved[1]["data"]["ticket"], 42);
    assert_eq!(of_type(&events, "approval:requested").len(), 2);
    let refused: Vec<_> = of_type(&events, "command:received")
        .into_iter()
        .filter(|c| c["accepted"] == false)
        .collect();
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert!(refused[0]["error"].as_str().unwrap().contains(&design));
    // Both answers are outputs the workflow can route on.
    let outputs = &awr.show_json(&run)["outputs"];
    assert_eq!(outputs["design"]["data"]["approved"], true);
    assert_eq!(outputs["design"]["data"]["data"]["by"], "ux");
    assert_eq!(outputs["legal"]["data"]["data"]["ticket"], 42);
    let by = outputs["legal"]["data"]["by"].as_str().unwrap();
    assert!(by.contains('@'), "the local user: {by}");
    // The transcript holds each question and its answer, in order.
    let out = awr.run(&["transcript", &run, "--json"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let lines: Vec<Value> = (out.stdout.lines())
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|l: &Value| l["type"].as_str().unwrap().starts_with("approval."))
        .collect();
    let kinds: Vec<(&str, &str)> = (lines.iter())
        .map(|l| (l["type"].as_str().unwrap(), l["path"].as_str().unwrap()))
        .collect();
    assert_eq!(kinds.len(), 4, "{lines:?}");
    assert_eq!(
        kinds
            .iter()
            .filter(|(t, _)| *t == "approval.requested")
            .count(),
        2
    );
    assert_eq!(kinds[3], ("approval.resolved", "legal"));
    assert_eq!(lines[3]["payload"]["data"]["ticket"], 42);
    assert_eq!(lines[3]["payload"]["how"], "answered");
    let asked = lines.iter().find(|l| l["path"] == "legal").unwrap();
    assert_eq!(asked["payload"]["prompt"], "Legal: go\n");
    // `awr events --type` shows the two resolutions.
    let out = awr.run(&["events", &run, "--type", "approval:resolved"]);
    assert_eq!(
        out.stdout
            .lines()
            .filter(|l| l.contains("approval:resolved"))
            .count(),
        2
    );
}

#[test]
fn a_writer_killed_while_an_approval_waits_asks_nothing_twice_after_recover() {
    let awr = Awr::new();
    let gate = awr.dir.path().join("gate");
    let flow = awr.write(
        "crash.yaml",
        &format!(
            "name: crash\n\
             nodes:\n\
             - {{id: ask, approval: 'Ship it?'}}\n\
             - {{id: slow, command: \"{}\"}}\n",
            gated(&gate, "built")
        ),
    );
    let mut child = awr.spawn_run(&flow);
    let run = awr.run_that_started("slow");
    crate::cancel::wait_for(30, "the question", || {
        of_type(&awr.events_so_far(&run), "approval:requested").len() == 1
    });
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(status(&awr, &run), "interrupted");

    std::fs::write(&gate, "").unwrap();
    let out = awr.run_within(60, &["recover", "--all"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stderr.contains("is waiting"), "{}", out.stderr);
    assert_eq!(status(&awr, &run), "waiting");
    let events = awr.events(&run);
    assert_eq!(
        of_type(&events, "approval:requested").len(),
        1,
        "asked once"
    );
    let ask = asking(&awr, &run, "ask");
    assert_eq!(ask, of_type(&events, "approval:requested")[0]["nodeRunId"]);

    let out = approve(&awr, &run, &ask, "{}");
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(status(&awr, &run), "completed");
    assert_eq!(of_type(&awr.events(&run), "approval:resolved").len(), 1);
}

#[test]
fn each_pass_of_a_loop_asks_anew_and_an_earlier_pass_cannot_be_answered() {
    let awr = Awr::new();
    let flow = awr.write(
        "loop.yaml",
        "name: revise\n\
         nodes:\n\
         - {id: draft, command: 'echo draft'}\n\
         - {id: review, approval: 'Good enough?'}\n\
         - {id: publish, command: 'echo published'}\n\
         edges:\n\
         - {from: draft, to: review}\n\
         - {from: review, to: draft, id: again, when: '!output.approved', max_iterations: 3}\n\
         - {from: review, to: publish, when: 'output.approved'}\n",
    );
    let out = awr.run(&["run", flow.to_str().unwrap()]);
    assert_eq!(out.code, 4, "{}", out.stderr);
    let run = run_id_of(&out);
    let mut asked = Vec::new();
    for pass in 0..2 {
        let review = asking(&awr, &run, "review");
        assert!(!asked.contains(&review), "pass {pass} asks under a new id");
        let out = awr.run_within(
            60,
            &["reject", &run, "--node-run", &review, "--reason", "more"],
        );
        assert_eq!(out.code, 4, "pass {pass}: {}", out.stderr);
        asked.push(review);
    }
    // An answer carrying an earlier pass's id is refused, and recorded.
    let out = approve(&awr, &run, &asked[0], "{}");
    assert_eq!(out.code, 2, "{}", out.stderr);
    let third = asking(&awr, &run, "review");
    assert!(!asked.contains(&third));
    let out = approve(&awr, &run, &third, "{}");
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("published"), "{}", out.stdout);

    let events = awr.events(&run);
    let resolved = of_type(&events, "approval:resolved");
    let ids: Vec<&str> = resolved
        .iter()
        .map(|e| e["nodeRunId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [asked[0].as_str(), asked[1].as_str(), third.as_str()]);
    let approved: Vec<bool> = resolved.iter().map(|e| e["approved"] == true).collect();
    assert_eq!(approved, [false, false, true]);
    assert_eq!(resolved[0]["reason"], "more");
    assert_eq!(of_type(&events, "approval:requested").len(), 3);
}

#[test]
fn a_deadline_that_passed_while_nothing_ran_fires_once_at_the_next_load() {
    let awr = Awr::new();
    let flow = awr.write(
        "deadline.yaml",
        "name: deadline\n\
         nodes:\n\
         - id: ask\n  approval: {prompt: 'Ship?', timeout: 1s, on_timeout: reject}\n\
         - {id: shipped, command: 'echo shipped'}\n\
         - {id: held, command: 'echo held'}\n\
         edges:\n\
         - {from: ask, to: shipped, when: 'output.approved'}\n\
         - {from: ask, to: held, when: '!output.approved'}\n",
    );
    let out = awr.run(&["run", flow.to_str().unwrap()]);
    assert_eq!(out.code, 4, "{}", out.stderr);
    let run = run_id_of(&out);
    let deadline = questions(&awr, &run)[0]["deadline"]
        .as_str()
        .unwrap()
        .to_owned();
    // Listed by `awr recover` only once its deadline has passed.
    crate::cancel::wait_for(30, "the deadline", || {
        awr.run(&["recover"]).stdout.contains(&run)
    });
    let out = awr.run_within(60, &["recover", "--all"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(status(&awr, &run), "completed");
    // Once: a second load finds nothing to do.
    let again = awr.run(&["recover", "--all"]);
    assert_eq!(again.code, 0, "{}", again.stderr);
    let events = awr.events(&run);
    let resolved = of_type(&events, "approval:resolved");
    assert_eq!(resolved.len(), 1, "{resolved:?}");
    assert_eq!(resolved[0]["how"], "timed_out");
    assert_eq!(resolved[0]["approved"], false);
    let output = &awr.show_json(&run)["outputs"]["ask"]["data"];
    assert_eq!(output["at"], deadline.as_str());
    assert_eq!(awr.show_json(&run)["nodeStatus"]["held"], "done");
    assert_eq!(awr.show_json(&run)["nodeStatus"]["shipped"], "skipped");
}

#[test]
fn bad_approvals_are_refused_when_the_workflow_loads_naming_the_field() {
    let awr = Awr::new();
    for (body, expected) in [
        ("approval: ''", "`approval.prompt` must not be empty"),
        ("approval: 'a {{ nope.x }}'", "`approval.prompt`"),
        ("approval: 'a {{ input'", "never closed"),
        (
            "approval: {prompt: x, on_timeout: fail}",
            "`approval.on_timeout` goes with `approval.timeout`",
        ),
        ("approval: {prompt: x, timeout: 8d}", "approval.timeout"),
        (
            "approval: {prompt: x, schema: {type: 7}}",
            "`approval.schema` is not a JSON Schema",
        ),
        (
            "approval: {prompt: x, timeout: 1s, on_timeout: maybe}",
            "on_timeout",
        ),
        (
            "approval: x\n    retry: {max_attempts: 2}",
            "`retry` has no effect on an `approval` node",
        ),
    ] {
        let flow = awr.write(
            "bad.yaml",
            &format!("name: bad\nnodes:\n  - id: ask\n    {body}\n"),
        );
        let out = awr.run(&["validate", flow.to_str().unwrap()]);
        assert_eq!(out.code, 2, "{body}: {}", out.stderr);
        assert!(out.stderr.contains(expected), "{body}: {}", out.stderr);
    }
    // Not in a called workflow yet.
    awr.write(
        "child.yaml",
        "name: child\nnodes:\n  - {id: ask, approval: 'Go?'}\n",
    );
    let parent = awr.write(
        "parent.yaml",
        "name: parent\nnodes:\n  - {id: call, call_workflow: child.yaml}\n",
    );
    let out = awr.run(&["validate", parent.to_str().unwrap()]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("an approval in a called workflow is not supported yet"),
        "{}",
        out.stderr
    );
}

/// `examples/approval.yaml` as its comment says: it waits, a rejection
/// sends the draft back, an approval with data meeting the schema
/// publishes it.
#[test]
fn the_approval_example_is_rejected_once_then_approved_and_published() {
    let awr = Awr::new();
    let example = repo_root().join("examples/approval.yaml");
    let out = awr.run(&["run", example.to_str().unwrap()]);
    assert_eq!(out.code, 4, "{}", out.stderr);
    let run = run_id_of(&out);
    let review = asking(&awr, &run, "review");
    assert!(
        questions(&awr, &run)[0]["prompt"]
            .as_str()
            .unwrap()
            .contains("Solid-state")
    );
    let out = awr.run_within(
        60,
        &["reject", &run, "--node-run", &review, "--reason", "shorter"],
    );
    assert_eq!(out.code, 4, "{}", out.stderr);
    let review = asking(&awr, &run, "review");
    let out = approve(&awr, &run, &review, "{\"channel\": \"elsewhere\"}");
    assert_eq!(
        out.code, 2,
        "not one of the schema's channels: {}",
        out.stderr
    );
    let out = approve(&awr, &run, &review, "{\"channel\": \"blog\"}");
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("published"), "{}", out.stdout);
}

/// `awr serve` watches the deadlines of the runs waiting in its store: a
/// run that waits past one is continued in the server's process, and the
/// question settled once, as its `on_timeout` says.
#[test]
fn a_server_settles_the_deadline_of_a_run_waiting_in_its_store() {
    let awr = Awr::new();
    let flow = awr.write(
        "served.yaml",
        "name: served\n\
         nodes:\n\
         - id: ask\n  approval: {prompt: 'Ship?', timeout: 1s, on_timeout: approve}\n\
         - {id: shipped, command: 'echo shipped'}\n\
         edges: [{from: ask, to: shipped, when: 'output.approved'}]\n",
    );
    let out = awr.run(&["run", flow.to_str().unwrap()]);
    assert_eq!(out.code, 4, "{}", out.stderr);
    let run = run_id_of(&out);
    let root = awr.dir.path().to_path_buf();
    let _server = awr_tests::serve::Served::start(
        crate::util::awr_bin(),
        awr.storage(),
        &root,
        &["--token", "deadline-token-0123456789abcdef0123"],
    );
    crate::cancel::wait_for(60, "the server to settle the deadline", || {
        status(&awr, &run) == "completed"
    });
    let events = awr.events(&run);
    let resolved = of_type(&events, "approval:resolved");
    assert_eq!(resolved.len(), 1, "{resolved:?}");
    assert_eq!(resolved[0]["how"], "timed_out");
    let resumed = of_type(&events, "flow:resumed");
    assert_eq!(resumed.len(), 1);
    assert!(
        resumed[0].get("by").is_none(),
        "the runtime's own: {resumed:?}"
    );
    assert_eq!(awr.show_json(&run)["nodeStatus"]["shipped"], "done");
}

/// A question waiting for a person holds no slot of `max_concurrency`: the
/// branch beside it runs, and only then does the run stop waiting.
#[test]
fn a_waiting_question_holds_no_slot_and_the_other_branch_runs() {
    let awr = Awr::new();
    let flow = awr.write(
        "slots.yaml",
        "name: slots\n\
         max_concurrency: 1\n\
         nodes:\n\
         - {id: ask, approval: 'Go?'}\n\
         - {id: work, command: 'echo worked'}\n",
    );
    let out = awr.run_within(60, &["run", flow.to_str().unwrap()]);
    assert_eq!(out.code, 4, "{}", out.stderr);
    let run = run_id_of(&out);
    assert_eq!(awr.show_json(&run)["nodeStatus"]["work"], "done");
    let ask = asking(&awr, &run, "ask");
    let out = awr.run_within(60, &["reject", &run, "--node-run", &ask]);
    assert_eq!(out.code, 0, "{}", out.stderr);
}

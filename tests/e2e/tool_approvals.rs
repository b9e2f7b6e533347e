//! Tool calls that wait for a person (`requires_approval:` on a grant,
//! docs/approvals.md): an HTTP agent's `shell` call stops the run
//! `waiting` before it runs, holding nothing; a rejection goes back to the
//! model as the call's error with the person's reason and the run goes
//! on; an approval runs the call. Against the fake model server.

use awr_tests::fake_model::FakeModel;
use serde_json::Value;

use crate::util::{Awr, Output, of_type, run_id_of};

const KEY: &str = "sk-awr-test-approvals-91c2";

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

    /// An `openai` agent granted `shell` with `gate` as its
    /// `requires_approval`, whose model calls it with `command`.
    fn workflow(&self, gate: &str, command: &str) -> String {
        let prompt = format!(
            "CALLTOOL shell {}",
            serde_json::json!({ "command": command })
        );
        let yaml = format!(
            "name: gated\n\
             input: {prompt:?}\n\
             agents:\n  operator:\n    provider: openai\n    model: gpt-4o-mini\n    \
             base_url: {}/v1\n    api_key_env: AWR_TEST_API_KEY\n    \
             tools: [{{name: shell, requires_approval: {gate}}}]\n\
             steps: [{{id: op, agent: operator}}]\n",
            self.server.base_url()
        );
        self.awr.write("gated.yaml", &yaml).display().to_string()
    }

    /// `awr ARGS` in the workspace, with the key.
    fn awr(&self, args: &[&str]) -> Output {
        let dir = self.awr.dir.path().join("workspace");
        std::fs::create_dir_all(&dir).unwrap();
        tokio::task::block_in_place(|| self.awr.run_in(&dir, &[("AWR_TEST_API_KEY", KEY)], args))
    }

    /// The node run whose tool call waits in `run`, from `awr approvals`.
    fn asking(&self, run: &str) -> Value {
        let out = self.awr(&["approvals", "--run", run, "--json"]);
        assert_eq!(out.code, 0, "{}", out.stderr);
        let open: Vec<Value> = (out.stdout.lines())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(open.len(), 1, "{open:?}");
        open[0].clone()
    }

    /// Everything the model was sent, as text.
    fn sent(&self) -> String {
        (self.server.requests().iter())
            .map(|r| r.body.to_string())
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_shell_call_reaches_the_model_with_the_reason_and_the_run_goes_on() {
    let s = Scratch::new().await;
    let file = s.workflow("true", "echo ran > ran.txt");
    let out = s.awr(&["run", &file]);
    assert_eq!(out.code, 4, "waiting: {}", out.stderr);
    let run = run_id_of(&out);
    let events = s.awr.events(&run);
    let asked = of_type(&events, "approval:requested");
    assert_eq!(asked.len(), 1, "{events:#?}");
    assert_eq!(asked[0]["tool"]["toolName"], "shell");
    assert!(of_type(&events, "tool:started").is_empty(), "nothing ran");
    assert_eq!(events.last().unwrap()["type"], "flow:paused");
    let question = s.asking(&run);
    assert_eq!(question["nodeId"], "op");
    assert_eq!(
        question["tool"]["toolInput"]["command"],
        "echo ran > ran.txt"
    );
    let node_run = question["nodeRunId"].as_str().unwrap().to_owned();
    let asked_before = s.server.requests().len();

    let out = s.awr(&[
        "reject",
        &run,
        "--node-run",
        &node_run,
        "--reason",
        "not on this machine",
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let events = s.awr.events(&run);
    assert_eq!(events.last().unwrap()["type"], "flow:completed");
    let resolved = of_type(&events, "approval:resolved");
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0]["approved"], false);
    assert!(
        of_type(&events, "tool:started").is_empty(),
        "the call never ran"
    );
    assert!(!s.awr.dir.path().join("workspace/ran.txt").exists());
    // The model got the rejection as the call's error, with the reason.
    assert_eq!(s.server.requests().len(), asked_before + 1);
    assert!(
        s.sent().contains("rejected it: not on this machine"),
        "{}",
        s.sent()
    );
    let complete = of_type(&events, "agent:complete");
    let said = complete.last().unwrap()["result"].as_str().unwrap();
    assert!(said.contains("not on this machine"), "{said}");

    // A second answer is refused and recorded.
    let again = s.awr(&["approve", &run, "--node-run", &node_run]);
    assert_ne!(again.code, 0, "{}", again.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_call_runs_and_a_condition_asks_only_for_what_it_names() {
    let s = Scratch::new().await;
    // The condition does not name this command: it runs without asking.
    let free = s.workflow("'args.command.contains(\"rm \")'", "echo free > free.txt");
    let out = s.awr(&["run", &free]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(s.awr.dir.path().join("workspace/free.txt").exists());
    let events = s.awr.events(&run_id_of(&out));
    assert!(of_type(&events, "approval:requested").is_empty());

    let file = s.workflow(
        "'args.command.contains(\"rm \")'",
        "touch x && rm x && echo gone > gone.txt",
    );
    let out = s.awr(&["run", &file]);
    assert_eq!(out.code, 4, "{}", out.stderr);
    let run = run_id_of(&out);
    let node_run = s.asking(&run)["nodeRunId"].as_str().unwrap().to_owned();
    let out = s.awr(&["approve", &run, "--node-run", &node_run]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(s.awr.dir.path().join("workspace/gone.txt").exists());
    let events = s.awr.events(&run);
    let completed = of_type(&events, "tool:completed");
    assert_eq!(completed.len(), 1, "{events:#?}");
    let by = of_type(&events, "approval:resolved")[0]["by"].clone();
    assert!(by.as_str().unwrap().contains('@'), "the local user: {by}");
    assert_eq!(events.last().unwrap()["type"], "flow:completed");
    // The transcript reads as a conversation with the person in it.
    let transcript = s.awr(&["transcript", &run, "--json"]);
    let kinds: Vec<String> = (transcript.stdout.lines())
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    let at = |kind: &str| {
        kinds
            .iter()
            .position(|k| k == kind)
            .unwrap_or_else(|| panic!("{kinds:?}"))
    };
    assert!(
        at("approval.requested") < at("approval.resolved"),
        "{kinds:?}"
    );
}

#[test]
fn requires_approval_on_a_cli_agent_is_refused_naming_the_field() {
    let awr = Awr::new();
    let flow = awr.write(
        "cli.yaml",
        "name: c\nagents:\n  a:\n    provider: codex\n    tools: [{name: shell, requires_approval: true}]\nsteps: [{agent: a}]\n",
    );
    let out = awr.run(&["validate", flow.to_str().unwrap()]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("agents.a.tools"), "{}", out.stderr);
    assert!(out.stderr.contains("requires_approval"), "{}", out.stderr);
}

//! A run that pauses or is handed over. A node run that finishes
//! meanwhile ran: its end is recorded and routed as in any turn, never left
//! in flight for the next writer to run again. What cannot reach a safe
//! point (an agent whose own tool call waits for a person) is stopped at
//! once, and a retry's backoff does not hold the pause up.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use domain::RunStatus;
use serde_json::json;

use super::graph_tests::{Rig, of_type, rig, run_with, wf};
use super::stop_tests::taking_commands;
use super::*;
use crate::ports::{
    CommandError, CommandOutcome, CommandRequest, CommandRunner, Delivery, QueryError,
};

/// A command that printed `built` and exited 0.
fn built() -> Result<CommandOutcome, CommandError> {
    Ok(CommandOutcome {
        exit_code: Some(0),
        stdout: "built".into(),
        stderr: String::new(),
        truncated: false,
        timed_out: false,
        duration_ms: 1,
    })
}

/// Hands its run over while it runs, then reports the command done.
struct HandsOver(Cancel);

#[async_trait]
impl CommandRunner for HandsOver {
    async fn run(&self, _: CommandRequest) -> Result<CommandOutcome, CommandError> {
        self.0.hand_over();
        built()
    }
}

/// Asks its run to pause while it runs, and reports the command done once
/// the pause is accepted: it ends as the run stops its node runs.
struct PausesIt(tokio::sync::mpsc::Sender<Delivery>);

#[async_trait]
impl CommandRunner for PausesIt {
    async fn run(&self, _: CommandRequest) -> Result<CommandOutcome, CommandError> {
        let (delivery, answer) = Delivery::new(json!({"type": "pause"}), None);
        self.0.send(delivery).await.unwrap();
        assert!(answer.recv().await.unwrap().0.accepted);
        built()
    }
}

fn with_commands(rig: Rig, runner: impl CommandRunner) -> Rig {
    Rig {
        executor: rig.executor.with_commands(Arc::new(runner)),
        events: rig.events,
    }
}

fn no_agent() -> Rig {
    rig(|_| panic!("no agent runs here"))
}

/// Two commands in a chain, `build` then `ship`, with `edge` between them.
fn chain(edge: &str) -> domain::WorkflowDef {
    wf(&format!(
        "name: h\nnodes:\n  - {{id: build, command: make}}\n  - {{id: ship, command: ship}}\nedges:\n  - {edge}\n"
    ))
}

/// The nodes of the events of type `t`, in order.
fn nodes_of(rig: &Rig, t: &str) -> Vec<String> {
    of_type(rig, t)
        .into_iter()
        .filter_map(|e| e.node_id.map(|n| n.to_string()))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_command_that_finishes_as_its_run_is_handed_over_is_recorded_and_routed() {
    let cancel = Cancel::new();
    let rig = with_commands(no_agent(), HandsOver(cancel.clone()));
    let outcome = run_with(&rig, chain("{from: build, to: ship}"), json!("go"), cancel).await;
    assert_eq!(outcome.status, RunStatus::Running, "handed over, not ended");
    assert_eq!(nodes_of(&rig, "node:completed"), ["build"]);
    let completed = of_type(&rig, "node:completed").remove(0);
    let EventKind::NodeCompleted { output } = completed.kind else {
        unreachable!()
    };
    assert_eq!(output["data"]["stdout"], "built");
    assert_eq!(
        of_type(&rig, "edge:fired").len(),
        1,
        "routed: the next writer starts `ship`"
    );
    assert_eq!(nodes_of(&rig, "node:started"), ["build"]);
    assert!(
        outcome.snapshot.node_runs.is_empty(),
        "nothing left in flight for the next writer to run again"
    );
}

#[tokio::test(start_paused = true)]
async fn a_command_that_finishes_as_its_run_pauses_is_recorded_and_routed() {
    let (commands, tx) = taking_commands(no_agent());
    let rig = with_commands(commands, PausesIt(tx));
    let flow = chain("{from: build, to: ship}");
    let outcome = run_with(&rig, flow, json!("go"), Cancel::new()).await;
    assert_eq!(outcome.status, RunStatus::Paused, "{:?}", outcome.error);
    assert_eq!(nodes_of(&rig, "node:completed"), ["build"]);
    assert_eq!(of_type(&rig, "edge:fired").len(), 1);
    assert_eq!(nodes_of(&rig, "node:started"), ["build"]);
    assert!(outcome.snapshot.node_runs.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_command_whose_end_fails_the_run_as_it_pauses_fails_it() {
    let (commands, tx) = taking_commands(no_agent());
    let rig = with_commands(commands, PausesIt(tx));
    // The command's output has no `score`: the condition cannot be evaluated.
    let flow = chain("{from: build, to: ship, when: 'output.score > 1'}");
    let outcome = run_with(&rig, flow, json!("go"), Cancel::new()).await;
    assert_eq!(outcome.status, RunStatus::Failed);
    let error = outcome.error.unwrap();
    assert!(error.contains("edge `build->ship`"), "{error}");
    assert!(of_type(&rig, "flow:paused").is_empty());
    assert_eq!(of_type(&rig, "flow:failed").len(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_agent_that_answers_as_its_run_is_handed_over_ends_with_its_answer() {
    let cancel = Cancel::new();
    let handing = cancel.clone();
    let rig = rig(move |r| {
        handing.hand_over();
        super::graph_tests::after(0, format!("answer of {}", r.node_id), 1)
    });
    let flow = wf(
        "name: h\nagents: {w: {provider: mock}}\nnodes:\n  - {id: a, agent: w}\n  - {id: b, agent: w}\nedges:\n  - {from: a, to: b}\n",
    );
    let outcome = run_with(&rig, flow, json!("go"), cancel).await;
    assert_eq!(outcome.status, RunStatus::Running);
    assert_eq!(nodes_of(&rig, "node:completed"), ["a"]);
    let EventKind::NodeCompleted { output } = of_type(&rig, "node:completed").remove(0).kind else {
        unreachable!()
    };
    assert_eq!(output["data"], "answer of a");
    assert_eq!(output["metadata"]["agent_name"], "w", "its own metadata");
    assert_eq!(of_type(&rig, "edge:fired").len(), 1);
    assert_eq!(nodes_of(&rig, "node:started"), ["a"]);
}

/// A Claude Code agent whose `Bash` calls wait for a person's answer.
const ASKS: &str = "name: h\nagents:\n  w: {provider: claude-code, tools: [{name: Bash, requires_approval: true}]}\nnodes:\n  - {id: a, agent: w}\n";

#[tokio::test(start_paused = true)]
async fn a_pause_stops_an_agent_whose_own_tool_call_waits_for_a_person() {
    use crate::ports::AgentMessage;
    use futures::StreamExt;
    // It calls `Bash` at once, then waits for the call's result for ever:
    // its permission prompt waits for a person, who does not answer.
    let rig = rig(|_| {
        let call = AgentMessage::ToolUse {
            id: Some("t1".into()),
            name: "Bash".into(),
            input: json!({"command": "git push"}),
        };
        Ok(Box::pin(
            futures::stream::iter([Ok(call)]).chain(futures::stream::pending()),
        ))
    });
    let (rig, tx) = taking_commands(rig);
    let events = Arc::clone(&rig.events);
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let run = (events.lock().unwrap().iter())
            .find(|e| e.kind.type_name() == "node:started")
            .and_then(|e| e.node_run_id)
            .unwrap();
        let ask = json!({
            "type": "ask",
            "nodeRunId": run,
            "tool": {"callId": "t1", "toolName": "Bash", "toolInput": {"command": "git push"}},
        });
        for raw in [ask, json!({"type": "pause"})] {
            let (delivery, answer) = Delivery::new(raw, None);
            tx.send(delivery).await.unwrap();
            assert!(answer.recv().await.unwrap().0.accepted);
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
    let running = run_with(&rig, wf(ASKS), json!("go"), Cancel::new());
    let outcome = tokio::time::timeout(Duration::from_secs(3600), running)
        .await
        .expect("the pause ends though no one answers");
    assert_eq!(outcome.status, RunStatus::Paused);
    assert_eq!(of_type(&rig, "approval:requested").len(), 1);
    let resolved = of_type(&rig, "approval:resolved");
    assert_eq!(resolved.len(), 1, "the question ends with the pause");
    let EventKind::ApprovalResolved { approved, how, .. } = &resolved[0].kind else {
        unreachable!()
    };
    assert!(!approved);
    assert_eq!(how, "cancelled");
    assert_eq!(
        outcome.snapshot.node_runs.len(),
        1,
        "the agent's node run stays in flight, for the resume to continue"
    );
    assert!(of_type(&rig, "node:failed").is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_pause_does_not_wait_out_a_retrys_backoff() {
    // Every attempt meets a rate limit; the next would start a minute later.
    let rig = rig(|_| {
        Err(QueryError::Agent {
            error_type: "rate_limit".into(),
            message: "slow down".into(),
            details: None,
        })
    });
    let (rig, tx) = taking_commands(rig);
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (delivery, answer) = Delivery::new(json!({"type": "pause"}), None);
        tx.send(delivery).await.unwrap();
        assert!(answer.recv().await.unwrap().0.accepted);
    });
    let flow = wf(
        "name: h\nagents: {w: {provider: mock}}\nnodes:\n  - {id: a, agent: w, retry: {max_attempts: 3, backoff: 1m}}\n",
    );
    let started = tokio::time::Instant::now();
    let outcome = run_with(&rig, flow, json!("go"), Cancel::new()).await;
    assert_eq!(outcome.status, RunStatus::Paused);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "paused after {:?}",
        started.elapsed()
    );
    assert_eq!(
        nodes_of(&rig, "node:started"),
        ["a"],
        "the attempt that never ran is not on record"
    );
    assert_eq!(
        outcome.snapshot.node_runs.len(),
        1,
        "in flight, for the resume"
    );
}

/// Command `a` asks the run to pause and ends once the pause is accepted;
/// command `b` ends right after it.
struct TwoEnd {
    tx: tokio::sync::mpsc::Sender<Delivery>,
    a_done: tokio::sync::watch::Sender<bool>,
}

#[async_trait]
impl CommandRunner for TwoEnd {
    async fn run(&self, request: CommandRequest) -> Result<CommandOutcome, CommandError> {
        if request.node_id.as_str() == "a" {
            let (delivery, answer) = Delivery::new(json!({"type": "pause"}), None);
            self.tx.send(delivery).await.unwrap();
            assert!(answer.recv().await.unwrap().0.accepted);
            self.a_done.send_replace(true);
        } else {
            let mut done = self.a_done.subscribe();
            done.wait_for(|done| *done).await.unwrap();
        }
        built()
    }
}

#[tokio::test(start_paused = true)]
async fn once_an_end_stops_a_pausing_run_the_ends_after_it_are_not_routed() {
    let (commands, tx) = taking_commands(no_agent());
    let (a_done, _) = tokio::sync::watch::channel(false);
    let rig = with_commands(commands, TwoEnd { tx, a_done });
    // `a`'s condition cannot be evaluated (no `score`): the run fails.
    let flow = wf(
        "name: h\nnodes:\n  - {id: a, command: make}\n  - {id: b, command: make}\n  - {id: c, command: ship}\n  - {id: d, command: ship}\nedges:\n  - {from: a, to: c, when: 'output.score > 1'}\n  - {from: b, to: d}\n",
    );
    let outcome = run_with(&rig, flow, json!("go"), Cancel::new()).await;
    assert_eq!(outcome.status, RunStatus::Failed, "{:?}", outcome.error);
    assert_eq!(nodes_of(&rig, "node:completed"), ["a", "b"]);
    assert!(
        of_type(&rig, "edge:fired").is_empty(),
        "b ended after the run was stopping: recorded, not routed"
    );
    assert_eq!(nodes_of(&rig, "node:started"), ["a", "b"]);
}

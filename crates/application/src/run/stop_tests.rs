//! How a run stops before it completes, and what commands do to a live
//! run, on mocked ports and tokio's paused clock: a cancellation or a node
//! failure stops the node runs in flight at once (each recorded), a child
//! run records its own end, a pause waits for the tool call in flight, and
//! a message is never lost to a session that cannot be continued.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use domain::{EventKind, RunSnapshot, RuntimeEvent};
use serde_json::json;

use super::graph_tests::{FAN_OUT, after, of_type, rig, run, run_with, wf};
use super::*;
use crate::ports::QueryError;

#[tokio::test(start_paused = true)]
async fn cancelling_stops_the_node_runs_in_flight_and_ends_with_flow_cancelled() {
    let rig = rig(|r| {
        let secs = if r.node_id.as_str() == "split" { 0 } else { 60 };
        after(secs, r.node_id.to_string(), 1)
    });
    let cancel = Cancel::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(5)).await;
        trigger.cancel("interrupted by SIGINT");
    });
    let started = tokio::time::Instant::now();
    let outcome = run_with(&rig, wf(FAN_OUT), json!("go"), cancel).await;
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(5),
        "no waiting for the agents"
    );
    assert_eq!(outcome.status, RunStatus::Cancelled);
    assert_eq!(outcome.error.as_deref(), Some("interrupted by SIGINT"));
    let failed = of_type(&rig, "node:failed");
    assert_eq!(failed.len(), 3, "x, y and z were in flight");
    let last = rig.events.lock().unwrap().last().cloned().unwrap();
    assert!(matches!(
        &last.kind,
        EventKind::FlowCancelled { reason: Some(r) } if r == "interrupted by SIGINT"
    ));
}

#[tokio::test(start_paused = true)]
async fn a_failure_cancels_the_siblings_in_flight() {
    let rig = rig(|r| match r.node_id.as_str() {
        "x" => Err(QueryError::Agent {
            error_type: "api_error".into(),
            message: "boom".into(),
            details: None,
        }),
        "split" => after(0, "s".into(), 1),
        _ => after(60, "late".into(), 1),
    });
    let started = tokio::time::Instant::now();
    let outcome = run(&rig, wf(FAN_OUT), json!("go")).await;
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert_eq!(outcome.status, RunStatus::Failed);
    assert!(outcome.error.unwrap().contains("node `x` failed"));
    let failed = of_type(&rig, "node:failed");
    assert_eq!(failed.len(), 3);
    assert!(failed[1..].iter().all(|e| matches!(&e.kind,
        EventKind::NodeFailed { error, .. } if error.starts_with("cancelled"))));
}

/// A node run that panics fails its node as an agent's error would (here
/// the run fails, and the node runs beside it are cancelled and recorded),
/// and takes neither the run's loop nor the process with it.
#[tokio::test(start_paused = true)]
async fn a_node_run_that_panics_fails_its_node_and_nothing_more() {
    let rig = rig(|r| match r.node_id.as_str() {
        "x" => panic!("the adapter broke"),
        "split" => after(0, "s".into(), 1),
        _ => after(60, "late".into(), 1),
    });
    let outcome = run(&rig, wf(FAN_OUT), json!("go")).await;
    assert_eq!(outcome.status, RunStatus::Failed);
    assert!(outcome.error.unwrap().contains("node `x` failed"));
    let failed = of_type(&rig, "node:failed");
    assert_eq!(failed.len(), 3);
    assert_eq!(failed[0].node_id.as_ref().map(|n| n.as_str()), Some("x"));
    assert!(matches!(&failed[0].kind,
        EventKind::NodeFailed { error, .. }
            if error == "the node run stopped unexpectedly: it panicked (the adapter broke)"));
    assert!(failed[1..].iter().all(|e| matches!(&e.kind,
        EventKind::NodeFailed { error, .. } if error.starts_with("cancelled"))));
}

const TIMED: &str = "name: timed\nagents: {a: {provider: mock, timeout: 1}}\nsteps: [{agent: a}]\n";

/// An adapter silent past its agent's `timeout` plus the 2 s of grace
/// fails its node run with `timeout`; one whose answer is ready at that
/// very moment (its driver came back to it late) is not failed: what it
/// sent wins over its silence.
#[tokio::test(start_paused = true)]
async fn an_adapters_silence_fails_it_but_not_an_answer_ready_at_the_deadline() {
    let silent = rig(|_| after(4, "too late".into(), 1));
    let outcome = run(&silent, wf(TIMED), json!("go")).await;
    assert_eq!(outcome.status, RunStatus::Failed);
    assert!(
        of_type(&silent, "agent:error")
            .iter()
            .any(|e| matches!(&e.kind,
        EventKind::AgentError { error_type, .. } if error_type == "timeout"))
    );

    let on_time = rig(|_| after(3, "just in time".into(), 1));
    let outcome = run(&on_time, wf(TIMED), json!("go")).await;
    assert_eq!(outcome.status, RunStatus::Completed, "{:?}", outcome.error);
    assert_eq!(outcome.output, json!("just in time"));
}

#[tokio::test(start_paused = true)]
async fn cancelling_a_run_cancels_its_child_run_which_records_its_own_end() {
    let child = Arc::new(wf(
        "name: child\nagents: {slow: {provider: mock}}\nsteps: [{agent: slow}]\n",
    ));
    let mut parent = wf(
        "name: parent\nagents: {a: {provider: mock}}\nnodes:\n  - {id: call, call_workflow: child.yaml}\n",
    );
    parent.nodes[0].kind = domain::workflow::NodeKind::CallWorkflow {
        workflow: "child.yaml".into(),
        resolved: Some(child),
    };
    let rig = rig(|r| after(60, r.node_id.to_string(), 1));
    let cancel = Cancel::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(5)).await;
        trigger.cancel("interrupted by SIGTERM");
    });
    let outcome = run_with(&rig, parent, json!("go"), cancel).await;
    assert_eq!(outcome.status, RunStatus::Cancelled);
    let events = rig.events.lock().unwrap().clone();
    let child_id = events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::SubflowStarted { child_run_id, .. } => Some(*child_run_id),
            _ => None,
        })
        .expect("a child run");
    let child_log: Vec<&RuntimeEvent> = events.iter().filter(|e| e.run_id == child_id).collect();
    let child_state = RunSnapshot::fold(child_log.iter().copied()).unwrap();
    assert_eq!(
        child_state.status,
        RunStatus::Cancelled,
        "the child ends itself"
    );
    assert!(matches!(
        &child_log.last().unwrap().kind,
        EventKind::FlowCancelled { reason: Some(r) } if r == "interrupted by SIGTERM"
    ));
    assert!(child_state.node_runs.is_empty());
}

/// A pause of the parent pauses its child run where it is (recorded in the
/// child's own log as the pause command it is), and the parent's node run
/// stays in flight with its child named, for the resume to continue.
#[tokio::test(start_paused = true)]
async fn pausing_a_run_pauses_its_child_run_which_stays_to_be_continued() {
    let child = Arc::new(wf(
        "name: child\nagents: {slow: {provider: mock}}\nsteps: [{agent: slow}]\n",
    ));
    let mut parent = wf(
        "name: parent\nagents: {a: {provider: mock}}\nnodes:\n  - {id: call, call_workflow: child.yaml}\n",
    );
    parent.nodes[0].kind = domain::workflow::NodeKind::CallWorkflow {
        workflow: "child.yaml".into(),
        resolved: Some(child),
    };
    let (rig, tx) = taking_commands(rig(|r| after(60, r.node_id.to_string(), 1)));
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let (delivery, answer) = crate::ports::Delivery::new(json!({"type": "pause"}), None);
        tx.send(delivery).await.unwrap();
        assert!(answer.recv().await.unwrap().0.accepted);
    });
    let started = tokio::time::Instant::now();
    let outcome = run(&rig, parent, json!("go")).await;
    assert_eq!(outcome.status, RunStatus::Paused);
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(5),
        "no waiting for the agent"
    );
    let events = rig.events.lock().unwrap().clone();
    let parent_id = outcome.run_id;
    let child_id = events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::SubflowStarted { child_run_id, .. } => Some(*child_run_id),
            _ => None,
        })
        .expect("a child run");
    let parent_log: Vec<&RuntimeEvent> = events.iter().filter(|e| e.run_id == parent_id).collect();
    let parent_state = RunSnapshot::fold(parent_log.iter().copied()).unwrap();
    let in_flight: Vec<_> = parent_state.node_runs.values().collect();
    assert_eq!(in_flight.len(), 1, "the call stays in flight");
    assert_eq!(in_flight[0].child, Some(child_id), "naming its child");
    assert!(
        !parent_log
            .iter()
            .any(|e| e.kind.type_name() == "subflow:completed"),
        "the child did not end"
    );
    let child_log: Vec<&RuntimeEvent> = events.iter().filter(|e| e.run_id == child_id).collect();
    let child_state = RunSnapshot::fold(child_log.iter().copied()).unwrap();
    assert_eq!(
        child_state.status,
        RunStatus::Paused,
        "the child paused too"
    );
    assert_eq!(child_state.node_runs.len(), 1, "its agent stays in flight");
    assert!(child_log.iter().any(|e| matches!(&e.kind,
        EventKind::CommandReceived { command, accepted: true, .. } if command["type"] == "pause")));
}

/// Takes the commands a test sends, as the writer's control endpoint.
struct Commands(std::sync::Mutex<Option<tokio::sync::mpsc::Receiver<crate::ports::Delivery>>>);

#[async_trait::async_trait]
impl crate::ports::ControlChannel for Commands {
    async fn listen(&self, _: domain::RunId) -> Result<crate::ports::Listener, ControlError> {
        // The first writer (the run) gets the test's commands; any other
        // (a child run) an endpoint nothing is sent to.
        let taken = self.0.lock().unwrap().take();
        Ok(match taken {
            Some(rx) => crate::ports::Listener::new(rx, ()),
            None => {
                let (tx, rx) = tokio::sync::mpsc::channel(1);
                crate::ports::Listener::new(rx, tx)
            }
        })
    }

    async fn deliver(
        &self,
        run: domain::RunId,
        _: &serde_json::Value,
        _: Option<domain::Caller>,
    ) -> Result<crate::ports::CommandReply, ControlError> {
        Err(ControlError::NoWriter(run))
    }
}

/// `rig` with a control endpoint; commands sent on the returned sender reach its runs.
pub(super) fn taking_commands(
    rig: super::graph_tests::Rig,
) -> (
    super::graph_tests::Rig,
    tokio::sync::mpsc::Sender<crate::ports::Delivery>,
) {
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    let executor = rig
        .executor
        .with_control(Arc::new(Commands(std::sync::Mutex::new(Some(rx)))));
    let rig = super::graph_tests::Rig {
        executor,
        events: rig.events,
    };
    (rig, tx)
}

/// An agent that calls a tool at once, gets its result after 10 s, and
/// answers 50 s later; the run is paused `at` seconds in. Returns when the
/// run stopped, its outcome and its events.
async fn paused_at(at: u64) -> (Duration, RunOutcome, Vec<RuntimeEvent>) {
    use crate::ports::{AgentMessage, AgentResult};
    use futures::StreamExt;
    let rig = rig(|_| {
        let steps = vec![
            (
                0,
                AgentMessage::ToolUse {
                    id: Some("t1".into()),
                    name: "Bash".into(),
                    input: json!({"command": "make"}),
                },
            ),
            (
                10,
                AgentMessage::Tool {
                    id: Some("t1".into()),
                    name: "Bash".into(),
                    input: json!({"command": "make"}),
                    output: json!("built"),
                    duration_ms: None,
                    error: None,
                },
            ),
            (
                50,
                AgentMessage::Completed(AgentResult {
                    text: "done".into(),
                    num_turns: 2,
                    ..AgentResult::default()
                }),
            ),
        ];
        Ok(Box::pin(futures::stream::iter(steps).then(
            |(secs, message)| async move {
                tokio::time::sleep(Duration::from_secs(secs)).await;
                Ok(message)
            },
        )))
    });
    let (rig, tx) = taking_commands(rig);
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(at)).await;
        let raw = json!({"type": "pause"});
        let (delivery, answer) = crate::ports::Delivery::new(raw, None);
        tx.send(delivery).await.unwrap();
        assert!(answer.recv().await.unwrap().0.accepted);
    });
    let started = tokio::time::Instant::now();
    let flow = wf("name: p\nagents: {w: {provider: mock}}\nnodes:\n  - {id: a, agent: w}\n");
    let outcome = run(&rig, flow, json!("go")).await;
    let events = rig.events.lock().unwrap().clone();
    (started.elapsed(), outcome, events)
}

#[tokio::test(start_paused = true)]
async fn a_pause_waits_for_the_tool_call_in_flight_then_stops_the_agent() {
    let (elapsed, outcome, events) = paused_at(5).await;
    assert_eq!(outcome.status, RunStatus::Paused);
    assert_eq!(
        elapsed,
        Duration::from_secs(10),
        "stopped once the tool ended"
    );
    let types: Vec<&str> = events.iter().map(|e| e.kind.type_name()).collect();
    assert!(
        types.contains(&"agent:tool"),
        "the tool's result is kept: {types:?}"
    );
    assert!(!types.contains(&"agent:complete"), "{types:?}");
    assert!(!types.contains(&"node:failed"), "{types:?}");
    assert_eq!(types.last(), Some(&"flow:paused"));
    let state = RunSnapshot::fold(&events).unwrap();
    assert_eq!(state.node_runs.len(), 1, "the node run stays in flight");
}

#[tokio::test(start_paused = true)]
async fn a_pause_with_no_tool_in_flight_stops_the_agent_at_once() {
    let (elapsed, outcome, events) = paused_at(15).await;
    assert_eq!(outcome.status, RunStatus::Paused);
    assert_eq!(elapsed, Duration::from_secs(15));
    let types: Vec<&str> = events.iter().map(|e| e.kind.type_name()).collect();
    assert!(!types.contains(&"agent:complete"), "{types:?}");
    assert_eq!(types.last(), Some(&"flow:paused"));
}

/// A message sent during a turn goes to the agent's session after it; when
/// that session cannot be continued, the node run starts afresh and the
/// message comes with the prompt instead of being lost.
#[tokio::test(start_paused = true)]
async fn a_message_for_a_session_that_cannot_be_continued_comes_with_the_fresh_start() {
    use crate::ports::{AgentMessage, AgentRequest, AgentResult};
    use futures::StreamExt;
    let requests: Arc<std::sync::Mutex<Vec<AgentRequest>>> = Arc::default();
    let seen = Arc::clone(&requests);
    let rig = rig(move |request| {
        let n = {
            let mut seen = seen.lock().unwrap();
            seen.push(request.clone());
            seen.len()
        };
        if request.resume.is_some() {
            return Err(QueryError::Agent {
                error_type: "session_not_found".into(),
                message: "no conversation found".into(),
                details: None,
            });
        }
        let session = AgentMessage::Session {
            session_id: domain::SessionId::new("s1").unwrap(),
            model: None,
        };
        let done = AgentMessage::Completed(AgentResult {
            text: format!("answer {n}"),
            num_turns: 1,
            ..AgentResult::default()
        });
        Ok(Box::pin(
            futures::stream::iter([(0, session), (10, done)]).then(|(secs, message)| async move {
                tokio::time::sleep(Duration::from_secs(secs)).await;
                Ok(message)
            }),
        ))
    });
    let (rig, tx) = taking_commands(rig);
    let log = Arc::clone(&rig.events);
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let run = log
            .lock()
            .unwrap()
            .iter()
            .find_map(|e| e.node_run_id)
            .unwrap();
        let raw = json!({"type": "send", "nodeRunId": run, "message": "use metric units"});
        let (delivery, answer) = crate::ports::Delivery::new(raw, None);
        tx.send(delivery).await.unwrap();
        assert!(answer.recv().await.unwrap().0.accepted);
    });
    let flow = wf("name: m\nagents: {w: {provider: claude-code}}\nnodes:\n  - {id: a, agent: w}\n");
    let outcome = run(&rig, flow, json!("go")).await;
    assert_eq!(outcome.status, RunStatus::Completed);
    let requests = requests.lock().unwrap().clone();
    let prompts: Vec<(bool, &str)> = requests
        .iter()
        .map(|r| (r.resume.is_some(), r.prompt.as_str()))
        .collect();
    assert_eq!(prompts.len(), 3, "{prompts:?}");
    assert_eq!(
        prompts[1],
        (true, "use metric units"),
        "delivered in the session"
    );
    assert!(!prompts[2].0, "started afresh: {prompts:?}");
    assert!(
        prompts[2].1.starts_with("go") && prompts[2].1.ends_with("use metric units"),
        "the prompt, then the message: {prompts:?}"
    );
    let events = rig.events.lock().unwrap().clone();
    let command = events
        .iter()
        .find(|e| e.kind.type_name() == "command:received")
        .unwrap()
        .offset
        .get();
    let last_start = events
        .iter()
        .rev()
        .find_map(|e| match &e.kind {
            EventKind::AgentStart { inbox, .. } => Some(inbox.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        last_start,
        [command],
        "the fresh start names what it delivers"
    );
}

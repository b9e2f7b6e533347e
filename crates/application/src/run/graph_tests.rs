//! The executor's graph semantics, budgets, retries and cancellation, on
//! mocked ports and tokio's paused clock: a test that waits "3 seconds"
//! takes none, and concurrency shows as virtual time.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use domain::condition::Expression;
use domain::event::Usage;
use domain::workflow::{Budget, ForEach, Join, Timeout};
use domain::{EventKind, NodeId, RunSnapshot, RuntimeEvent, WorkflowDef};
use serde_json::{Value, json};

use super::*;
use crate::ports::{
    AgentMessage, AgentRequest, AgentResult, AgentStream, IdGen, MockRunStore, QueryError, QueryFn,
};
use crate::testing::TokioClock;

/// Ids that count from where they start.
pub(super) struct Counter(pub(super) AtomicU64);

impl IdGen for Counter {
    fn uuid(&self) -> uuid::Uuid {
        let n = self.0.fetch_add(1, Ordering::SeqCst);
        let mut bytes = [0u8; 16];
        bytes[8..].copy_from_slice(&n.to_be_bytes());
        uuid::Builder::from_random_bytes(bytes).into_uuid()
    }
}

/// An agent as a function of its request.
pub(super) struct Agents<F>(pub(super) F);

#[async_trait]
impl<F> QueryFn for Agents<F>
where
    F: Fn(AgentRequest) -> Result<AgentStream, QueryError> + Send + Sync + 'static,
{
    async fn query(&self, request: AgentRequest) -> Result<AgentStream, QueryError> {
        (self.0)(request)
    }
}

pub(super) struct Rig {
    pub(super) executor: Executor,
    pub(super) events: Arc<Mutex<Vec<RuntimeEvent>>>,
}

pub(super) fn rig(
    agents: impl Fn(AgentRequest) -> Result<AgentStream, QueryError> + Send + Sync + 'static,
) -> Rig {
    let events = Arc::new(Mutex::new(Vec::<RuntimeEvent>::new()));
    let mut store = MockRunStore::new();
    store
        .expect_create_run()
        .returning(|id| Ok(crate::ports::RunLock::new(id, ())));
    store
        .expect_lock()
        .returning(|id| Ok(crate::ports::RunLock::new(id, ())));
    let log = Arc::clone(&events);
    store.expect_append_owned().returning(move |_, batch| {
        log.lock().unwrap().append(batch);
        Ok(0)
    });
    store.expect_flush().returning(|_| Ok(()));
    store.expect_needs_final_snapshot().return_const(true);
    store.expect_save_snapshot().returning(|_| Ok(0));
    let executor = Executor::new(
        Arc::new(store),
        Arc::new(Agents(agents)),
        Arc::new(TokioClock::new()),
        Arc::new(Counter(AtomicU64::new(1))),
    );
    Rig { executor, events }
}

/// A result after `secs` seconds, using `tokens` tokens.
pub(super) fn after(secs: u64, text: String, tokens: u64) -> Result<AgentStream, QueryError> {
    let result = AgentResult {
        text,
        usage: Usage {
            input_tokens: tokens,
            output_tokens: 0,
            ..Usage::default()
        },
        num_turns: 1,
        total_cost_usd: Some(0.25),
        ..AgentResult::default()
    };
    Ok(Box::pin(futures::stream::once(async move {
        tokio::time::sleep(Duration::from_secs(secs)).await;
        Ok(AgentMessage::Completed(result))
    })))
}

pub(super) async fn run(rig: &Rig, wf: WorkflowDef, input: Value) -> RunOutcome {
    run_with(rig, wf, input, Cancel::new()).await
}

pub(super) async fn run_with(
    rig: &Rig,
    wf: WorkflowDef,
    input: Value,
    cancel: Cancel,
) -> RunOutcome {
    let id = rig.executor.create().await.unwrap();
    let request = RunRequest {
        workflow: Arc::new(wf),
        input,
        source: None,
        started_by: None,
    };
    let outcome = rig
        .executor
        .run_cancellable(id, request, cancel)
        .await
        .unwrap();
    // The run is its log: folding what was written gives the executor's state.
    let events = rig.events.lock().unwrap().clone();
    let own = events.iter().filter(|e| e.run_id == outcome.run_id);
    assert_eq!(RunSnapshot::fold(own).as_ref(), Some(&outcome.snapshot));
    outcome
}

pub(super) fn types(rig: &Rig) -> Vec<String> {
    let events = rig.events.lock().unwrap();
    events
        .iter()
        .map(|e| e.kind.type_name().to_owned())
        .collect()
}

pub(super) fn of_type(rig: &Rig, t: &str) -> Vec<RuntimeEvent> {
    let events = rig.events.lock().unwrap();
    events
        .iter()
        .filter(|e| e.kind.type_name() == t)
        .cloned()
        .collect()
}

pub(super) fn node(id: &str) -> NodeId {
    NodeId::new(id).unwrap()
}

pub(super) fn wf(yaml: &str) -> WorkflowDef {
    WorkflowDef::from_yaml(yaml).unwrap()
}

pub(super) const FAN_OUT: &str = "
name: fan-out
agents:
  a: {provider: mock}
nodes:
  - {id: split, agent: a}
  - {id: x, agent: a}
  - {id: y, agent: a}
  - {id: z, agent: a}
  - {id: join, agent: a}
edges:
  - {from: split, to: x}
  - {from: split, to: y}
  - {from: split, to: z}
  - {from: x, to: join}
  - {from: y, to: join}
  - {from: z, to: join}
";

#[tokio::test(start_paused = true)]
async fn independent_branches_run_at_the_same_time() {
    let rig = rig(|r| {
        let secs = if ["x", "y", "z"].contains(&r.node_id.as_str()) {
            3
        } else {
            0
        };
        after(secs, r.node_id.to_string(), 1)
    });
    let started = tokio::time::Instant::now();
    let outcome = run(&rig, wf(FAN_OUT), json!("go")).await;
    assert_eq!(outcome.status, RunStatus::Completed);
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(3),
        "three 3 s agents in parallel take 3 s"
    );
    let join = &of_type(&rig, "node:started")[4];
    assert_eq!(join.node_id, Some(node("join")));
    let EventKind::NodeStarted { input, .. } = &join.kind else {
        unreachable!()
    };
    assert_eq!(input["data"], json!({"x": "x", "y": "y", "z": "z"}));
}

#[tokio::test(start_paused = true)]
async fn max_concurrency_bounds_the_node_runs_in_flight() {
    let mut def = wf(FAN_OUT);
    def.max_concurrency = 2;
    let rig = rig(|r| {
        let secs = if ["x", "y", "z"].contains(&r.node_id.as_str()) {
            3
        } else {
            0
        };
        after(secs, r.node_id.to_string(), 1)
    });
    let started = tokio::time::Instant::now();
    run(&rig, def, json!("go")).await;
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(6),
        "two at a time: 3 s + 3 s"
    );
}

/// A join's `previous_agent` is the agent of its last edge as written,
/// whichever branch ends last: a replay must give the node the same input.
#[tokio::test(start_paused = true)]
async fn a_joins_previous_agent_does_not_depend_on_which_branch_ends_last() {
    let flow = FAN_OUT
        .replace("agents:\n  a: {provider: mock}", "agents:\n  a: {provider: mock}\n  xa: {provider: mock}\n  ya: {provider: mock}\n  za: {provider: mock}")
        .replace("{id: x, agent: a}", "{id: x, agent: xa}")
        .replace("{id: y, agent: a}", "{id: y, agent: ya}")
        .replace("{id: z, agent: a}", "{id: z, agent: za}");
    for order in [["x", "y", "z"], ["z", "y", "x"]] {
        let rig = rig(move |r| {
            let secs = order
                .iter()
                .position(|n| *n == r.node_id.as_str())
                .map_or(0, |i| i as u64 + 1);
            after(secs, r.node_id.to_string(), 1)
        });
        let outcome = run(&rig, wf(&flow), json!("go")).await;
        assert_eq!(outcome.status, RunStatus::Completed);
        let join = &of_type(&rig, "node:started")[4];
        let EventKind::NodeStarted { input, .. } = &join.kind else {
            unreachable!()
        };
        assert_eq!(
            input["metadata"]["previous_agent"], "za",
            "branches ended {order:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn join_any_starts_on_the_first_branch_and_runs_once() {
    let mut def = wf(FAN_OUT);
    def.nodes[4].join = Join::Any;
    let rig = rig(|r| {
        let secs = match r.node_id.as_str() {
            "x" => 1,
            "y" => 2,
            "z" => 5,
            _ => 0,
        };
        after(secs, r.node_id.to_string(), 1)
    });
    let outcome = run(&rig, def, json!("go")).await;
    assert_eq!(outcome.status, RunStatus::Completed);
    let starts: Vec<String> = of_type(&rig, "node:started")
        .iter()
        .map(|e| e.node_id.as_ref().unwrap().to_string())
        .collect();
    assert_eq!(starts.iter().filter(|n| *n == "join").count(), 1);
    let join_at = starts.iter().position(|n| n == "join").unwrap();
    let first_done = of_type(&rig, "node:completed")
        .iter()
        .position(|e| e.node_id == Some(node("x")))
        .unwrap();
    assert!(join_at == 4 && first_done == 1, "{starts:?}");
}

#[tokio::test(start_paused = true)]
async fn for_each_runs_an_item_per_node_run_and_keeps_item_order() {
    let mut def = wf("
name: each
agents:
  a: {provider: mock}
nodes:
  - {id: review, agent: a}
");
    def.nodes[0].for_each = Some(ForEach {
        items: Expression::compile("input.files").unwrap(),
        max_concurrency: 2,
    });
    def.nodes[0].input =
        Some(Expression::compile("'review ' + item + ' (' + string(index) + ')'").unwrap());
    // The later items finish first: the output keeps item order regardless.
    let indices = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&indices);
    let rig = rig(move |r| {
        seen.lock().unwrap().push((r.prompt.clone(), r.call_index));
        let secs = if r.prompt.contains("a.rs") { 4 } else { 1 };
        after(secs, format!("ok: {}", r.prompt), 1)
    });
    let started = tokio::time::Instant::now();
    let input = json!({"files": ["a.rs", "b.rs", "c.rs"]});
    let outcome = run(&rig, def, input).await;
    assert_eq!(outcome.status, RunStatus::Completed);
    assert_eq!(
        outcome.output,
        json!([
            "ok: review a.rs (0)",
            "ok: review b.rs (1)",
            "ok: review c.rs (2)"
        ])
    );
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(4),
        "two at a time, c after b"
    );
    let starts = of_type(&rig, "node:started");
    assert_eq!(starts.len(), 4, "the node's own run and one per item");
    let mut runs: Vec<_> = starts.iter().map(|e| e.node_run_id.unwrap()).collect();
    runs.sort();
    runs.dedup();
    assert_eq!(runs.len(), 4, "each item is a node run of its own");
    assert!(matches!(
        starts[0].kind,
        EventKind::NodeStarted { items: Some(3), .. }
    ));
    // Each item's provider call has the index its start took in the log.
    let mut indices = indices.lock().unwrap().clone();
    indices.sort();
    assert_eq!(
        indices,
        [
            ("review a.rs (0)".to_owned(), 0),
            ("review b.rs (1)".to_owned(), 1),
            ("review c.rs (2)".to_owned(), 2)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_transient_failure_is_retried_as_a_new_attempt_of_the_same_node_run() {
    let calls = Arc::new(AtomicU64::new(0));
    let seen = Arc::clone(&calls);
    let rig = rig(move |r| {
        let n = seen.fetch_add(1, Ordering::SeqCst);
        assert_eq!(
            u64::from(r.call_index),
            n,
            "each attempt is the node's next call"
        );
        if n < 2 {
            return Err(QueryError::Agent {
                error_type: "rate_limit".into(),
                message: "slow down".into(),
                details: None,
            });
        }
        after(0, "done".into(), 1)
    });
    let started = tokio::time::Instant::now();
    let outcome = run(
        &rig,
        wf("name: r\nagents: {a: {provider: claude-code}}\nsteps: [{agent: a}]\n"),
        json!("x"),
    )
    .await;
    assert_eq!(outcome.status, RunStatus::Completed);
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(3),
        "waits 1 s, then 2 s"
    );
    let starts = of_type(&rig, "node:started");
    let attempts: Vec<Option<u32>> = starts
        .iter()
        .map(|e| match e.kind {
            EventKind::NodeStarted { attempt, .. } => attempt,
            _ => None,
        })
        .collect();
    assert_eq!(attempts, [Some(1), Some(2), Some(3)]);
    assert!(
        starts
            .iter()
            .all(|e| e.node_run_id == starts[0].node_run_id)
    );
    assert_eq!(of_type(&rig, "agent:error").len(), 2);
}

#[tokio::test(start_paused = true)]
async fn each_budget_kind_stops_the_run_with_budget_exceeded() {
    let cases: [(&str, Budget); 4] = [
        (
            "tokens",
            Budget {
                tokens: Some(150),
                ..Budget::default()
            },
        ),
        (
            "cost_usd",
            Budget {
                cost_usd: Some(0.4),
                ..Budget::default()
            },
        ),
        (
            "turns",
            Budget {
                turns: Some(1),
                ..Budget::default()
            },
        ),
        (
            "deadline",
            Budget {
                deadline: Some(Timeout(Duration::from_secs(5))),
                ..Budget::default()
            },
        ),
    ];
    for (kind, budget) in cases {
        let mut def = wf(FAN_OUT);
        def.budget = budget;
        let rig = rig(|r| {
            let secs = if r.node_id.as_str() == "z" { 30 } else { 2 };
            after(secs, r.node_id.to_string(), 100)
        });
        let outcome = run(&rig, def, json!("go")).await;
        assert_eq!(outcome.status, RunStatus::Failed, "{kind}");
        let exceeded = of_type(&rig, "budget:exceeded");
        assert_eq!(exceeded.len(), 1, "{kind}");
        let EventKind::BudgetExceeded {
            budget,
            limit,
            used,
        } = &exceeded[0].kind
        else {
            unreachable!()
        };
        assert_eq!(budget, kind);
        assert!(
            used > limit || (kind == "deadline" && used >= limit),
            "{kind}: {used} vs {limit}"
        );
        let types = types(&rig);
        assert_eq!(
            types.last().map(String::as_str),
            Some("flow:failed"),
            "{kind}"
        );
        // Node runs in flight were cancelled and recorded as such.
        let cancelled = of_type(&rig, "node:failed");
        assert!(!cancelled.is_empty(), "{kind}");
        assert!(
            outcome.snapshot.node_runs.is_empty(),
            "{kind}: nothing left in flight"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_node_budget_names_its_node() {
    let mut def = wf(FAN_OUT);
    def.nodes[2].budget = Budget {
        tokens: Some(50),
        ..Budget::default()
    };
    let rig = rig(|r| after(1, r.node_id.to_string(), 100));
    let outcome = run(&rig, def, json!("go")).await;
    assert_eq!(outcome.status, RunStatus::Failed);
    let exceeded = &of_type(&rig, "budget:exceeded")[0];
    assert_eq!(exceeded.node_id, Some(node("y")));
}

#[tokio::test(start_paused = true)]
async fn a_judge_loop_hands_the_writer_its_previous_draft_and_the_critique() {
    let mut def = wf(r#"
name: judge
agents:
  writer: {provider: mock}
  judge: {provider: mock, output_schema: {type: object, required: [verdict]}}
nodes:
  - {id: write, agent: writer}
  - {id: judge, agent: judge}
edges:
  - {from: write, to: judge}
  - {from: judge, to: write, when: 'output.verdict == "revise"', max_iterations: 3}
"#);
    def.nodes[0].input = Some(
        Expression::compile(
            r#""judge" in outputs ? {"task": input, "draft": outputs.write, "critique": outputs.judge.critique} : {"task": input}"#,
        )
        .unwrap(),
    );
    let drafts = Arc::new(AtomicU64::new(0));
    let prompts = Arc::new(Mutex::new(Vec::new()));
    let (d, p) = (Arc::clone(&drafts), Arc::clone(&prompts));
    let rig = rig(move |r| {
        p.lock()
            .unwrap()
            .push((r.node_id.to_string(), r.prompt.clone()));
        if r.node_id.as_str() == "write" {
            let n = d.fetch_add(1, Ordering::SeqCst) + 1;
            return after(1, format!("draft {n}"), 1);
        }
        let verdict = if drafts.load(Ordering::SeqCst) < 3 {
            "revise"
        } else {
            "accept"
        };
        let text = json!({"verdict": verdict, "critique": "more detail"}).to_string();
        after(1, text, 1)
    });
    let outcome = run(&rig, def, json!("a slogan")).await;
    assert_eq!(outcome.status, RunStatus::Completed, "{:?}", outcome.error);
    let prompts = prompts.lock().unwrap();
    let writes: Vec<&String> = prompts
        .iter()
        .filter(|(n, _)| n == "write")
        .map(|(_, p)| p)
        .collect();
    assert_eq!(writes.len(), 3, "{prompts:?}");
    let second: Value = serde_json::from_str(writes[1]).unwrap();
    assert_eq!(
        second,
        json!({"task": "a slogan", "draft": "draft 1", "critique": "more detail"})
    );
    let third: Value = serde_json::from_str(writes[2]).unwrap();
    assert_eq!(third["draft"], "draft 2");
}

#[tokio::test(start_paused = true)]
async fn an_input_expression_that_fails_fails_its_node_naming_it() {
    let mut def = wf("name: bad\nagents: {a: {provider: mock}}\nsteps: [{agent: a}]\n");
    def.nodes[0].input = Some(Expression::compile("input.missing.deeper").unwrap());
    let rig = rig(|_| after(0, "never".into(), 1));
    let outcome = run(&rig, def, json!({"x": 1})).await;
    assert_eq!(outcome.status, RunStatus::Failed);
    let error = outcome.error.unwrap();
    assert!(
        error.contains("node `a`") && error.contains("`input`"),
        "{error}"
    );
}

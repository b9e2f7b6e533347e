//! [`step`] as a table: a state, one input; then the events recorded (each
//! shown as its node and its type) and the effects. No tokio, no clock.

#![allow(clippy::unwrap_used)]

use domain::snapshot::NodeRunState;
use domain::{ErrorKind, RunId, RunStatus};
use serde_json::{Value, json};

use super::budget::Exceeded;
use super::*;

fn workflow() -> WorkflowDef {
    WorkflowDef::from_yaml(
        "name: w\n\
         agents: {m: {provider: mock}, c: {provider: codex}}\n\
         budget: {turns: 2}\n\
         nodes:\n\
         - {id: a, agent: m}\n\
         - {id: b, agent: m}\n\
         - {id: r, agent: c}\n\
         edges: [{from: a, to: b}]\n",
    )
    .unwrap()
}

fn node(name: &str) -> NodeId {
    NodeId::new(name).unwrap()
}

fn node_run(n: u128) -> NodeRunId {
    NodeRunId::new(uuid::Uuid::from_u128(0x4000_8000_0000_0000_0100 + n))
}

/// A running run that started at 0 ms, with node run 1 of `a` and node run
/// 2 of `r` (attempt 1) in flight, having spent `turns`.
fn state(turns: u64) -> RunSnapshot {
    let run = RunId::new(uuid::Uuid::from_u128(0x4000_8000_0000_0000_0001)).unwrap();
    let mut state = RunSnapshot::new(run);
    state.status = RunStatus::Running;
    state.started_at = Some(Timestamp::from_millis(0));
    state.spent.turns = turns;
    for (n, name) in [(1, "a"), (2, "r")] {
        let r: NodeRunState =
            serde_json::from_value(json!({"nodeId": name, "attempt": 1})).unwrap();
        state.node_runs.insert(node_run(n), r);
    }
    state
}

/// An event as its node and its type.
type Shown = (Option<String>, String);

/// A row of the table: what it shows, the turns spent, the input; then the
/// events and the effects.
type Row = (&'static str, u64, Input, Vec<Shown>, Vec<Effect>);

/// The events of `step` as `(node, type)`.
fn shown(step: &Step) -> Vec<Shown> {
    step.events
        .iter()
        .map(|((node, _), kind)| {
            let kind = serde_json::to_value(kind).unwrap();
            let kind = kind["type"].as_str().unwrap_or_default().to_owned();
            (node.as_ref().map(|n| n.as_str().to_owned()), kind)
        })
        .collect()
}

fn end(data: Value, error: Option<&str>) -> NodeEnd {
    NodeEnd {
        data,
        metadata: json!({}),
        error: error.map(str::to_owned),
    }
}

#[test]
fn every_input_records_its_events_then_asks_for_its_effects() {
    let wf = workflow();
    let given = Given {
        workflow: &wf,
        input: &Value::Null,
        budgeted: &[],
    };
    let at = |name: &str, kind: &str| (Some(name.to_owned()), kind.to_owned());
    let run_level = |kind: &str| (None, kind.to_owned());
    let received = || vec![run_level("command:received")];
    let ended = |data: Value, error: Option<&str>| Input::NodeEnded {
        run: node_run(1),
        node: node("a"),
        end: end(data, error),
    };
    let completed = |end: Option<NodeEnd>| Input::AgentCompleted {
        run: node_run(1),
        node: node("a"),
        end,
        at: Timestamp::from_millis(5),
    };
    let start = |name: &str, input: Result<Value, String>, items| Input::Start {
        run: node_run(3),
        node: node(name),
        input,
        item: None,
        items,
    };
    let table: Vec<Row> = vec![
        (
            "a node run's end is recorded, then its node's data is routed",
            0,
            ended(json!(7), None),
            vec![at("a", "node:completed")],
            vec![Effect::Then(Input::Ended {
                node: node("a"),
                data: json!(7),
            })],
        ),
        (
            "a failure stops the run",
            0,
            ended(Value::Null, Some("exit 3")),
            vec![at("a", "node:failed")],
            vec![Effect::Stop(Stop::Failed {
                node: Some(node("a")),
                error: "node `a` failed: exit 3".into(),
            })],
        ),
        (
            "a node run's start is recorded, then its task starts",
            0,
            start("a", Ok(json!({"data": 1})), None),
            vec![at("a", "node:started")],
            vec![Effect::Spawn {
                run: node_run(3),
                input: json!({"data": 1}).into(),
            }],
        ),
        (
            "a node run whose input cannot be computed fails at once",
            0,
            start("a", Err("no such field".into()), None),
            vec![at("a", "node:started")],
            vec![Effect::Then(Input::NodeEnded {
                run: node_run(3),
                node: node("a"),
                end: NodeEnd::failed("no such field"),
            })],
        ),
        (
            "a for_each node's own run has no task",
            0,
            start("a", Ok(json!({"data": [1, 2]})), Some(2)),
            vec![at("a", "node:started")],
            vec![],
        ),
        (
            "a node the workflow does not have fails at once",
            0,
            start("gone", Ok(json!({})), None),
            vec![at("gone", "node:started")],
            vec![Effect::Then(Input::NodeEnded {
                run: node_run(3),
                node: node("gone"),
                end: NodeEnd::failed("node `gone` is not in the workflow"),
            })],
        ),
        (
            "a skipped node skips its edges",
            0,
            Input::Skip {
                node: node("a"),
                reason: "no incoming edge fired",
            },
            vec![at("a", "node:skipped"), at("a", "edge:skipped")],
            vec![],
        ),
        (
            "an agent's result with messages waiting: the node run goes on",
            0,
            completed(None),
            vec![],
            vec![],
        ),
        (
            "an agent's result with none: the node run ends with it",
            0,
            completed(Some(end(json!(7), None))),
            vec![],
            vec![Effect::Then(Input::NodeEnded {
                run: node_run(1),
                node: node("a"),
                end: end(json!(7), None),
            })],
        ),
        (
            "an agent's result that crosses a budget: its end, not routed, then the stop",
            3,
            completed(Some(end(json!(7), None))),
            vec![at("a", "node:completed")],
            vec![Effect::Stop(Stop::Budget(Exceeded {
                budget: "turns".into(),
                limit: 2.0,
                used: 3.0,
                node: None,
            }))],
        ),
        (
            "a node's data goes along its edges, then a step boundary",
            0,
            Input::Ended {
                node: node("a"),
                data: json!(7),
            },
            vec![at("a", "edge:fired")],
            vec![Effect::Boundary],
        ),
        (
            "a transient failure of a CLI agent is tried again",
            0,
            Input::AttemptFailed {
                run: node_run(2),
                failure: retry::Failure {
                    kind: ErrorKind::Network,
                    continued: false,
                },
            },
            vec![],
            vec![Effect::Retry(Box::new(Retry {
                wait: std::time::Duration::from_secs(1),
                started: EventKind::NodeStarted {
                    input: Default::default(),
                    attempt: Some(2),
                    item: None,
                    items: None,
                },
            }))],
        ),
        (
            "any other failure is not",
            0,
            Input::AttemptFailed {
                run: node_run(2),
                failure: retry::Failure {
                    kind: ErrorKind::Api,
                    continued: false,
                },
            },
            vec![],
            vec![],
        ),
        (
            "an accepted pause is recorded, made durable, answered, then stops",
            0,
            Input::Command {
                raw: json!({"type": "pause"}),
                by: None,
                child: false,
                at: Timestamp::from_millis(0),
            },
            received(),
            vec![
                Effect::Checkpoint,
                Effect::Reply {
                    accepted: true,
                    error: None,
                },
                Effect::Stop(Stop::Paused("paused by a command".into())),
            ],
        ),
        (
            "a refused command is recorded and answered, and stops nothing",
            0,
            Input::Command {
                raw: json!({"type": "pause"}),
                by: None,
                child: true,
                at: Timestamp::from_millis(0),
            },
            received(),
            vec![
                Effect::Checkpoint,
                Effect::Reply {
                    accepted: false,
                    error: Some(
                        "this run is a child run (`call_workflow`): pause its parent run, \
                         which pauses it too"
                            .into(),
                    ),
                },
            ],
        ),
        (
            "a cancellation here is recorded as a command, then stops",
            0,
            Input::Cancelled("interrupted".into()),
            received(),
            vec![
                Effect::Checkpoint,
                Effect::Stop(Stop::Cancelled("interrupted".into())),
            ],
        ),
        (
            "a child run pauses with its parent",
            0,
            Input::ParentPaused,
            received(),
            vec![
                Effect::Checkpoint,
                Effect::Stop(Stop::Paused("its parent run paused".into())),
            ],
        ),
        (
            "a budget not crossed does nothing",
            2,
            Input::Tick {
                now: Timestamp::from_millis(5),
            },
            vec![],
            vec![],
        ),
        (
            "a budget crossed stops the run",
            3,
            Input::Tick {
                now: Timestamp::from_millis(5),
            },
            vec![],
            vec![Effect::Stop(Stop::Budget(Exceeded {
                budget: "turns".into(),
                limit: 2.0,
                used: 3.0,
                node: None,
            }))],
        ),
        (
            "a routing a dead writer left is not finished for a node still running",
            0,
            Input::RoutingUnfinished {
                node: node("a"),
                recorded: vec![],
            },
            vec![],
            vec![],
        ),
    ];
    for (case, turns, input, events, effects) in table {
        let step = step(&state(turns), &given, input);
        assert_eq!(shown(&step), events, "{case}");
        assert_eq!(step.effects.as_slice(), effects.as_slice(), "{case}");
    }
}

#[test]
fn an_unfinished_routing_records_the_edges_not_on_record_then_a_checkpoint() {
    let wf = workflow();
    let given = Given {
        workflow: &wf,
        input: &Value::Null,
        budgeted: &[],
    };
    let mut state = state(0);
    let ended = step(
        &state,
        &given,
        Input::NodeEnded {
            run: node_run(1),
            node: node("a"),
            end: end(json!(7), None),
        },
    );
    // Fold what the first step recorded, as the driver does.
    for (offset, ((node, run), kind)) in ended.events.into_iter().enumerate() {
        let event = domain::RuntimeEvent {
            id: format!("00000000-0000-4000-8000-00000000000{offset}"),
            offset: domain::Offset::new(offset as u64 + 1).unwrap(),
            timestamp: Timestamp::from_millis(1),
            run_id: state.run_id,
            node_id: node,
            node_run_id: run,
            kind,
            extra: Default::default(),
        };
        state.apply(&event);
    }
    let unfinished = |recorded: Vec<String>| Input::RoutingUnfinished {
        node: node("a"),
        recorded,
    };
    let rest = step(&state, &given, unfinished(vec![]));
    assert_eq!(shown(&rest), [(Some("a".into()), "edge:fired".into())]);
    assert_eq!(rest.effects.as_slice(), [Effect::Checkpoint]);
    let done = step(&state, &given, unfinished(vec!["a->b".into()]));
    assert_eq!(shown(&done), []);
    assert_eq!(done.effects.as_slice(), [Effect::Checkpoint]);
}

//! A run is continued (a resume, a recovery, a fork): the stop its last
//! writer had decided and not finished ([`stop_under_way`]), the step it
//! died in, read off the end of its log ([`LastStep`]), and what is left of
//! that step: the edge events of a routing not on record
//! ([`rest_of_routing`]), or the stop a failure was making
//! ([`stop::node_failed`](super::stop::node_failed)).

use domain::workflow::NodeKind;
use domain::{
    EventKind, NodeId, NodeRunId, NodeStatus, RunSnapshot, RuntimeEvent, Stopping, WorkflowDef,
};
use serde_json::{Value, json};

use super::budget::Exceeded;
use super::retry;
use super::stop::{Stop, closed_by_stop};
use crate::run::Continue;
use crate::run::node_run::{Continuation, NodeEnd};
use crate::run::recorder::Ctx;
use crate::run::routing;
use crate::run::transcript::render_prompt;

/// The stop the previous writer had decided and not finished, if the run
/// is to finish it: a cancel or a budget always; a pause when the run is
/// recovered, not when it is explicitly resumed or forked.
pub(crate) fn stop_under_way(state: &RunSnapshot, how: &Continue) -> Option<Stop> {
    Some(match state.stopping.clone()? {
        Stopping::Cancel { reason } => {
            Stop::Cancelled(reason.unwrap_or_else(|| "cancelled by a command".to_owned()))
        }
        Stopping::Budget {
            budget,
            limit,
            used,
            node_id,
        } => Stop::Budget(Exceeded {
            budget,
            limit,
            used,
            node: node_id,
        }),
        Stopping::Pause => match how {
            Continue::Recover(_) => Stop::Paused("paused by a command".to_owned()),
            Continue::Resume(..) | Continue::Upgrade(..) | Continue::Fork => return None,
        },
    })
}

/// The edge events of `node`'s routing that are not `recorded`, decided
/// again on the state: routing reads outputs and counters, which edge
/// events do not change, so it is the routing that was under way. `None`
/// when the node has not ended whole (a loop edge that fired sent it back
/// to pending): there is no routing to finish. The stop routing asks for,
/// as it did the first time.
pub(crate) fn rest_of_routing(
    state: &RunSnapshot,
    workflow: &WorkflowDef,
    node: &NodeId,
    recorded: &[String],
    run_input: &Value,
) -> Result<Option<Vec<(Ctx, EventKind)>>, Stop> {
    let ended = match routing::node_status(state, node) {
        NodeStatus::Done => true,
        NodeStatus::Failed => workflow
            .node(node)
            .is_some_and(|n| workflow.continues_on_error(n)),
        _ => false,
    };
    if !ended {
        return Ok(None);
    }
    let data = routing::data_of(state, node);
    let kinds =
        routing::route(state, workflow, node, &data, run_input).map_err(|error| Stop::Failed {
            node: Some(node.clone()),
            error,
        })?;
    Ok(Some(
        kinds
            .into_iter()
            .filter(|kind| match kind {
                EventKind::EdgeFired { edge_id, .. } | EventKind::EdgeSkipped { edge_id, .. } => {
                    !recorded.contains(edge_id)
                }
                _ => false,
            })
            .map(|kind| ((Some(node.clone()), None), kind))
            .collect(),
    ))
}

/// How a node run found in flight by a resume goes on ([`go_on`]).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum GoOn {
    /// Nothing to do: a `for_each` node's own run ends with its items,
    /// which are node runs of their own (or the node run is gone).
    Items,
    /// It ends now with this end.
    Ends(NodeEnd),
    /// Its agent goes on in its conversation, told the resume message and
    /// the messages waiting, if the conversation can be continued (a
    /// session to resume, or an HTTP agent's history on record); the
    /// provider call it was in, redone, keeps index `redo_call`. When it
    /// cannot be, the node run goes on as `afresh` says.
    Converse {
        redo_call: Option<u32>,
        afresh: Afresh,
    },
    /// Its child run goes on, under the same attempt.
    Child(Continuation),
    /// An approval, or an agent whose tool call waits for a person: it
    /// asks its question unless it has, and waits for the answer
    /// (`step::approval`).
    Ask,
    /// A new attempt ([`Afresh`]).
    Afresh(Afresh),
}

/// A new attempt of a node run found in flight: `started` records it, then
/// its task starts with `resume` (the provider call it was in, redone from
/// the start as the same call) or afresh.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Afresh {
    pub started: Option<EventKind>,
    pub resume: Option<Continuation>,
}

/// How node run `run`, found in flight, goes on, read off the state, so it
/// is the same whichever process wrote the run before: an agent whose last
/// invocation finished (and that no message waits for) ends with its result;
/// an agent continues its conversation where it can (a CLI agent's session
/// only on the machine `here` that has it); a `call_workflow` node run
/// continues its child run; anything else starts a new attempt.
pub(crate) fn go_on(
    state: &RunSnapshot,
    workflow: &WorkflowDef,
    run: NodeRunId,
    message: &str,
    here: Option<&str>,
) -> GoOn {
    let Some(current) = state.node_runs.get(&run) else {
        return GoOn::Items;
    };
    let node = &current.node_id;
    if current.item.is_none() && state.for_each.contains_key(node) {
        return GoOn::Items;
    }
    if current.approval.as_ref().is_some_and(|q| q.tool.is_some()) {
        // Its agent's turn waits for a person: nothing runs until the answer.
        return GoOn::Ask;
    }
    let Some(def) = workflow.node(node) else {
        return GoOn::Ends(NodeEnd::failed(format!(
            "node `{node}` is not in the workflow"
        )));
    };
    let afresh = |resume| Afresh {
        started: retry::again(state, run),
        resume,
    };
    match &def.kind {
        NodeKind::Agent { .. } => {
            let agent = workflow.agent_of(def);
            let waiting = state.inbox.iter().any(|e| e.node_run_id == run);
            if let Some(data) = current
                .result
                .clone()
                .filter(|_| !current.in_turn && !waiting)
            {
                let agent_name = agent.map(|(name, _)| name);
                return GoOn::Ends(NodeEnd {
                    data,
                    metadata: json!({ "agent_name": agent_name, "resumed": true }),
                    error: None,
                });
            }
            // The call it began is redone from the start, as the same call.
            let redo = current.in_turn.then(|| Continuation {
                message: render_prompt(current.input.get("data").unwrap_or(&Value::Null)),
                call_index: current.call_index,
                ..Continuation::default()
            });
            // A CLI agent's session is on the disk of the machine that ran
            // it: elsewhere, a new attempt redoes its call from the record.
            if let (Some((_, agent)), Some(there), Some(here)) = (agent, &current.host, here)
                && agent.provider.keeps_session_on_disk()
                && there != here
            {
                let restart = format!(
                    "the session of node run {run} is on machine `{there}`, not on `{here}`: \
                     a new attempt starts from what is on record"
                );
                let resume = Continuation {
                    message: render_prompt(current.input.get("data").unwrap_or(&Value::Null)),
                    call_index: current.call_index.filter(|_| current.in_turn),
                    restart: Some(restart),
                    ..Continuation::default()
                };
                return GoOn::Afresh(afresh(Some(resume)));
            }
            // Copied into a fork in flight: it goes on in a copy of its
            // session where its provider makes one, else it restarts.
            let converses =
                !current.forked || agent.is_some_and(|(_, agent)| agent.provider.forks_sessions());
            match converses {
                true => GoOn::Converse {
                    redo_call: current.call_index.filter(|_| current.in_turn),
                    afresh: afresh(redo),
                },
                false => GoOn::Afresh(afresh(redo)),
            }
        }
        NodeKind::CallWorkflow { .. } if current.child.is_some() => GoOn::Child(Continuation {
            message: message.to_owned(),
            child: current.child,
            ..Continuation::default()
        }),
        NodeKind::CallWorkflow { .. } | NodeKind::Command(_) => GoOn::Afresh(afresh(None)),
        NodeKind::Approval(_) => GoOn::Ask,
    }
}

/// A conversation to continue ([`converse`]): the invocation, whose
/// `history` an HTTP agent's (`http`) log gives.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Converse {
    pub next: Continuation,
    pub http: bool,
}

/// What node run `run`'s agent is told next: `first` (a resume message)
/// then the messages waiting in its inbox, in one invocation that goes on
/// in its session (CLI agents) or its conversation (HTTP agents). `None`
/// when there is nothing to say; a CLI agent with no session on record
/// has no conversation to continue either.
pub(crate) fn converse(
    state: &RunSnapshot,
    workflow: &WorkflowDef,
    run: NodeRunId,
    first: Option<&str>,
) -> Option<Converse> {
    let current = state.node_runs.get(&run)?;
    let waiting: Vec<_> = state
        .inbox
        .iter()
        .filter(|e| e.node_run_id == run)
        .collect();
    if first.is_none() && waiting.is_empty() {
        return None;
    }
    let http = workflow
        .node(&current.node_id)
        .and_then(|n| workflow.agent_of(n))
        .is_some_and(|(_, agent)| agent.provider.is_http());
    if !http && current.session.is_none() {
        return None;
    }
    let message = first
        .into_iter()
        .chain(waiting.iter().map(|e| e.message.as_str()))
        .collect::<Vec<_>>()
        .join("\n\n");
    let next = Continuation {
        session: current.session.clone(),
        session_usage: current.session_usage.clone().unwrap_or_default(),
        history: Vec::new(),
        message,
        approved_call: None,
        inbox: waiting.iter().map(|e| e.offset).collect(),
        notes: waiting.iter().map(|e| e.message.clone()).collect(),
        call_index: None,
        child: None,
        fork: current.forked,
        restart: None,
    };
    Some(Converse { next, http })
}

/// What a writer was in the middle of when it died.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum LastStep {
    /// Routing `node`'s end; the edges `recorded` are on record.
    Routing { node: NodeId, recorded: Vec<String> },
    /// Stopping the run for `node`'s failure `error` (of its node run `run`).
    Failing {
        node: NodeId,
        run: Option<NodeRunId>,
        error: String,
    },
}

impl LastStep {
    /// Read off `tail`, the last events of a log (`whole`: all of it);
    /// `None` when the answer lies further back.
    pub(crate) fn of(tail: &[RuntimeEvent], whole: bool) -> Option<Option<Self>> {
        let mut recorded = Vec::new();
        // The stopping failures at the end, latest first: the first of them
        // is the cause, the others the node runs it cancelled.
        let mut failing: Option<&RuntimeEvent> = None;
        for event in tail.iter().rev() {
            match &event.kind {
                EventKind::NodeFailed {
                    continued: false, ..
                } if recorded.is_empty() => failing = Some(event),
                _ if failing.is_some() => return Some(Self::failing(failing)),
                EventKind::EdgeFired { edge_id, .. } | EventKind::EdgeSkipped { edge_id, .. } => {
                    recorded.push(edge_id.clone());
                }
                // A fork's mark stands after the step its parent was in.
                EventKind::StateSaved { .. } | EventKind::FlowForked { .. } => {}
                EventKind::NodeCompleted { .. } | EventKind::NodeFailed { .. } => {
                    let node = event.node_id.clone()?;
                    return Some(Some(Self::Routing { node, recorded }));
                }
                _ => return Some(None),
            }
        }
        if !whole {
            return None;
        }
        Some(Self::failing(failing))
    }

    /// The failure `cause` was stopping the run with, unless it is one the
    /// stop itself wrote (a cancelled node run), whose cause is not on record.
    fn failing(cause: Option<&RuntimeEvent>) -> Option<Self> {
        let cause = cause?;
        let EventKind::NodeFailed { error, .. } = &cause.kind else {
            return None;
        };
        if closed_by_stop(error) {
            return None;
        }
        Some(Self::Failing {
            node: cause.node_id.clone()?,
            run: cause.node_run_id,
            error: error.clone(),
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const RUN: &str = "7f8c2b1e-3d4a-4b5c-9d6e-1f2a3b4c5d6e";

    /// Events from `(node, body)` pairs, offsets 1.., each `body` the
    /// event's type and fields as JSON.
    fn log(events: &[(&str, &str)]) -> Vec<RuntimeEvent> {
        events
            .iter()
            .enumerate()
            .map(|(i, (node, body))| {
                let line = format!(
                    r#"{{"id":"00000000-0000-4000-8000-00000000000{}","offset":{},"timestamp":"2026-01-01T00:00:00Z","runId":"{RUN}","nodeId":"{node}",{body}}}"#,
                    i,
                    i + 1
                );
                serde_json::from_str(&line).unwrap()
            })
            .collect()
    }

    #[test]
    fn an_end_followed_by_some_of_its_edges_is_a_routing_under_way() {
        let tail = log(&[
            ("a", r#""type":"node:completed","output":{"data":1}"#),
            (
                "a",
                r#""type":"edge:fired","edgeId":"a->b","from":"a","to":"b""#,
            ),
        ]);
        match LastStep::of(&tail, true) {
            Some(Some(LastStep::Routing { node, recorded })) => {
                assert_eq!(node.as_str(), "a");
                assert_eq!(recorded, ["a->b"]);
            }
            _ => panic!("not a routing under way"),
        }
    }

    #[test]
    fn the_first_of_the_stopping_failures_at_the_end_is_the_cause() {
        let tail = log(&[
            ("a", r#""type":"node:started","input":null"#),
            ("a", r#""type":"node:failed","error":"exit 3""#),
            (
                "b",
                r#""type":"node:failed","error":"cancelled because the run failed: exit 3""#,
            ),
        ]);
        match LastStep::of(&tail, false) {
            Some(Some(LastStep::Failing { node, error, .. })) => {
                assert_eq!(node.as_str(), "a");
                assert_eq!(error, "exit 3");
            }
            _ => panic!("not a failure under way"),
        }
        // All of the tail failures: the cause may lie further back.
        assert!(LastStep::of(&tail[1..], false).is_none());
    }

    #[test]
    fn a_stop_whose_cause_is_not_on_record_and_a_started_node_are_no_step() {
        let cancelled = log(&[("a", r#""type":"node:failed","error":"cancelled: SIGINT""#)]);
        assert!(matches!(LastStep::of(&cancelled, true), Some(None)));
        let started = log(&[("a", r#""type":"node:started","input":null"#)]);
        assert!(matches!(LastStep::of(&started, true), Some(None)));
    }

    fn stopping(stopping: Option<Stopping>) -> RunSnapshot {
        let mut state = RunSnapshot::new(RUN.parse().unwrap());
        state.stopping = stopping;
        state
    }

    /// The table: what the state says was stopping, how the run is
    /// continued; then the stop the continuation finishes.
    #[test]
    fn a_cancel_or_a_budget_under_way_is_finished_and_a_pause_only_on_recovery() {
        let resume = || Continue::Resume("go on".into(), None);
        let cancel = |reason: Option<&str>| Stopping::Cancel {
            reason: reason.map(str::to_owned),
        };
        let budget = Stopping::Budget {
            budget: "turns".into(),
            limit: 2.0,
            used: 3.0,
            node_id: Some(NodeId::new("a").unwrap()),
        };
        let table = [
            (None, resume(), None),
            (
                Some(cancel(Some("enough"))),
                Continue::Fork,
                Some(Stop::Cancelled("enough".into())),
            ),
            (
                Some(cancel(None)),
                resume(),
                Some(Stop::Cancelled("cancelled by a command".into())),
            ),
            (
                Some(budget),
                Continue::Recover(None),
                Some(Stop::Budget(Exceeded {
                    budget: "turns".into(),
                    limit: 2.0,
                    used: 3.0,
                    node: Some(NodeId::new("a").unwrap()),
                })),
            ),
            (
                Some(Stopping::Pause),
                Continue::Recover(None),
                Some(Stop::Paused("paused by a command".into())),
            ),
            (Some(Stopping::Pause), resume(), None),
            (Some(Stopping::Pause), Continue::Fork, None),
        ];
        for (under_way, how, stop) in table {
            let case = format!("{under_way:?}");
            assert_eq!(stop_under_way(&stopping(under_way), &how), stop, "{case}");
        }
    }

    /// The table: the log up to the kill, the edges on record; then the
    /// edge events the resume still records (`None`: no routing to finish).
    #[test]
    fn the_edges_of_a_routing_under_way_not_on_record_are_recorded() {
        let workflow = WorkflowDef::from_yaml(
            "name: w\nagents:\n  m: {provider: mock}\n\
             nodes: [{id: a, agent: m}, {id: b, agent: m}, {id: c, agent: m}]\n\
             edges: [{from: a, to: b}, {from: a, to: c, when: 'false'}]\n",
        )
        .unwrap();
        let started = (
            "a",
            r#""type":"node:started","nodeRunId":"00000000-0000-4000-8000-0000000000a1","input":null"#,
        );
        let completed = (
            "a",
            r#""type":"node:completed","nodeRunId":"00000000-0000-4000-8000-0000000000a1","output":{"data":1,"metadata":{}}"#,
        );
        let edges = |state: &RunSnapshot, recorded: &[&str]| {
            let recorded: Vec<String> = recorded.iter().map(|e| (*e).to_owned()).collect();
            let node = NodeId::new("a").unwrap();
            rest_of_routing(state, &workflow, &node, &recorded, &Value::Null).map(|rest| {
                rest.map(|edges| {
                    edges
                        .into_iter()
                        .map(|(_, kind)| serde_json::to_value(kind).unwrap()["type"].clone())
                        .collect::<Vec<_>>()
                })
            })
        };
        let ended = RunSnapshot::fold(&log(&[started, completed])).unwrap();
        let fired = serde_json::json!("edge:fired");
        let skipped = serde_json::json!("edge:skipped");
        assert_eq!(edges(&ended, &[]), Ok(Some(vec![fired.clone(), skipped])));
        assert_eq!(edges(&ended, &["a->c"]), Ok(Some(vec![fired])));
        assert_eq!(edges(&ended, &["a->b", "a->c"]), Ok(Some(vec![])));
        let running = RunSnapshot::fold(&log(&[started])).unwrap();
        assert_eq!(edges(&running, &[]), Ok(None));
    }

    /// The table: the node run found in flight (its node and what the state
    /// says of it), whether a message waits for it; then how it goes on.
    #[test]
    fn a_node_run_in_flight_ends_converses_continues_its_child_or_starts_again() {
        let workflow = WorkflowDef::from_yaml(
            "name: w\n\
             agents: {m: {provider: mock}, c: {provider: claude-code}}\n\
             nodes:\n\
             - {id: a, agent: m}\n\
             - {id: k, agent: c}\n\
             - {id: sh, command: 'true'}\n\
             - {id: sub, call_workflow: child.yaml}\n\
             - {id: each, agent: m, for_each: '[1, 2]'}\n",
        )
        .unwrap();
        let run = NodeRunId::new(uuid::Uuid::from_u128(0x4000_8000_0000_0000_0100));
        let child: domain::RunId = RUN.parse().unwrap();
        let input = json!({"data": "hello", "metadata": {}});
        let again = || {
            Some(EventKind::NodeStarted {
                input: input.clone().into(),
                attempt: Some(3),
                item: None,
                items: None,
            })
        };
        let redo = Continuation {
            message: render_prompt(&json!("hello")),
            call_index: Some(4),
            ..Continuation::default()
        };
        let resumed = |data| {
            GoOn::Ends(NodeEnd {
                data,
                metadata: json!({"agent_name": "m", "resumed": true}),
                error: None,
            })
        };
        let table = [
            ("a", json!({"result": 7}), false, resumed(json!(7))),
            (
                "a",
                json!({"result": 7}),
                true,
                GoOn::Converse {
                    redo_call: None,
                    afresh: Afresh {
                        started: again(),
                        resume: None,
                    },
                },
            ),
            (
                "a",
                json!({"result": 7, "inTurn": true, "callIndex": 4}),
                false,
                GoOn::Converse {
                    redo_call: Some(4),
                    afresh: Afresh {
                        started: again(),
                        resume: Some(redo.clone()),
                    },
                },
            ),
            (
                "a",
                json!({"forked": true, "inTurn": true, "callIndex": 4}),
                false,
                GoOn::Afresh(Afresh {
                    started: again(),
                    resume: Some(redo.clone()),
                }),
            ),
            (
                "k",
                json!({"forked": true}),
                false,
                GoOn::Converse {
                    redo_call: None,
                    afresh: Afresh {
                        started: again(),
                        resume: None,
                    },
                },
            ),
            (
                "sh",
                json!({}),
                false,
                GoOn::Afresh(Afresh {
                    started: again(),
                    resume: None,
                }),
            ),
            // A CLI agent whose session is on another machine starts again
            // here, saying why; on this machine it converses.
            (
                "k",
                json!({"inTurn": true, "callIndex": 4, "host": "there"}),
                false,
                GoOn::Afresh(Afresh {
                    started: again(),
                    resume: Some(Continuation {
                        restart: Some(format!(
                            "the session of node run {run} is on machine `there`, not on `here`: \
                             a new attempt starts from what is on record"
                        )),
                        ..redo.clone()
                    }),
                }),
            ),
            (
                "k",
                json!({"inTurn": true, "callIndex": 4, "host": "here"}),
                false,
                GoOn::Converse {
                    redo_call: Some(4),
                    afresh: Afresh {
                        started: again(),
                        resume: Some(redo.clone()),
                    },
                },
            ),
            // A mock agent keeps no session on a disk.
            (
                "a",
                json!({"inTurn": true, "callIndex": 4, "host": "there"}),
                false,
                GoOn::Converse {
                    redo_call: Some(4),
                    afresh: Afresh {
                        started: again(),
                        resume: Some(redo.clone()),
                    },
                },
            ),
            (
                "sub",
                json!({"child": RUN}),
                false,
                GoOn::Child(Continuation {
                    message: "go on".into(),
                    child: Some(child),
                    ..Continuation::default()
                }),
            ),
            ("each", json!({}), false, GoOn::Items),
            (
                "gone",
                json!({}),
                false,
                GoOn::Ends(NodeEnd::failed("node `gone` is not in the workflow")),
            ),
        ];
        for (node, said, waiting, expected) in table {
            let mut fields = json!({"nodeId": node, "attempt": 2, "input": input});
            for (k, v) in said.as_object().unwrap() {
                fields[k] = v.clone();
            }
            let mut state = RunSnapshot::new(RUN.parse().unwrap());
            state
                .node_runs
                .insert(run, serde_json::from_value(fields).unwrap());
            if node == "each" {
                let items = serde_json::from_value(json!({"items": [1, 2]})).unwrap();
                state.for_each.insert(NodeId::new("each").unwrap(), items);
            }
            if waiting {
                state.inbox.push(domain::command::InboxEntry {
                    node_run_id: run,
                    message: "also this".into(),
                    offset: 9,
                });
            }
            let case = format!("{node} {said} waiting: {waiting}");
            assert_eq!(
                go_on(&state, &workflow, run, "go on", Some("here")),
                expected,
                "{case}"
            );
        }
        let nowhere = NodeRunId::new(uuid::Uuid::from_u128(1));
        let empty = RunSnapshot::new(RUN.parse().unwrap());
        assert_eq!(
            go_on(&empty, &workflow, nowhere, "go on", Some("here")),
            GoOn::Items
        );
    }

    /// The table: the agent (`m`: mock, a CLI agent; `h`: HTTP), its session
    /// on record, the resume message, the messages waiting; then the
    /// message of the invocation that continues it (`None`: none does).
    #[test]
    fn a_conversation_goes_on_with_the_resume_message_then_the_messages_waiting() {
        let workflow = WorkflowDef::from_yaml(
            "name: w\n\
             agents: {m: {provider: mock}, h: {provider: openai, model: x}}\n\
             nodes: [{id: a, agent: m}, {id: b, agent: h}]\n",
        )
        .unwrap();
        let run = NodeRunId::new(uuid::Uuid::from_u128(0x4000_8000_0000_0000_0100));
        let table = [
            (
                "a",
                Some("s1"),
                Some("go on"),
                &["one", "two"][..],
                Some("go on\n\none\n\ntwo"),
            ),
            ("a", Some("s1"), None, &["one"][..], Some("one")),
            ("a", Some("s1"), None, &[][..], None),
            ("a", None, Some("go on"), &["one"][..], None),
            ("b", None, Some("go on"), &[][..], Some("go on")),
        ];
        for (node, session, first, waiting, expected) in table {
            let mut state = RunSnapshot::new(RUN.parse().unwrap());
            let fields = json!({"nodeId": node, "attempt": 1, "session": session});
            state
                .node_runs
                .insert(run, serde_json::from_value(fields).unwrap());
            for (i, message) in waiting.iter().enumerate() {
                state.inbox.push(domain::command::InboxEntry {
                    node_run_id: run,
                    message: (*message).to_owned(),
                    offset: 10 + i as u64,
                });
            }
            let case = format!("{node} {session:?} {first:?} {waiting:?}");
            let got = converse(&state, &workflow, run, first);
            assert_eq!(
                got.as_ref().map(|c| c.next.message.as_str()),
                expected,
                "{case}"
            );
            if let Some(got) = got {
                assert_eq!(got.http, node == "b", "{case}");
                assert_eq!(got.next.notes, waiting, "{case}");
                let offsets: Vec<u64> = (10..10 + waiting.len() as u64).collect();
                assert_eq!(got.next.inbox, offsets, "{case}");
                assert_eq!(
                    got.next.session.as_ref().map(|s| s.as_str()),
                    session,
                    "{case}"
                );
            }
        }
    }
}

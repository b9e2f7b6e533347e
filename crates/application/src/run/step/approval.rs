//! `approval` node runs (docs/approvals.md), as pure functions of the
//! folded state: the question a node run asks ([`question`]), which
//! questions are settled and how ([`due`]), the next deadline
//! ([`next_deadline`]), and whether the run has nothing left but people to
//! wait for ([`only_people`]).
//!
//! An approval node run has no task: the driver asks its question once
//! (`approval:requested`, kept in the state), and ends it when the state
//! holds an accepted answer or its deadline has passed. Both are read off
//! the state, so a writer that died after an answer was accepted leaves it
//! for the next one to resolve, and a deadline that passed while no
//! process ran fires at the next load, once.

use domain::event::AskedCall;
use domain::workflow::{ApprovalDef, NodeKind, OnTimeout};
use domain::{EventKind, NodeId, NodeRunId, RunSnapshot, Timestamp, WorkflowDef};
use serde_json::{Value, json};

use crate::ports::ToolCall;
use crate::run::node_run::NodeEnd;
use crate::run::routing::{Reads, input_vars};

/// The approval node run `run` is of, when it is one.
fn approval<'a>(
    state: &RunSnapshot,
    workflow: &'a WorkflowDef,
    run: NodeRunId,
) -> Option<&'a ApprovalDef> {
    let node = &state.node_runs.get(&run)?.node_id;
    match &workflow.node(node)?.kind {
        NodeKind::Approval(def) => Some(def),
        _ => None,
    }
}

/// Whether node run `run` is an approval's.
pub(crate) fn is_approval(state: &RunSnapshot, workflow: &WorkflowDef, run: NodeRunId) -> bool {
    approval(state, workflow, run).is_some()
}

/// The question approval node run `run` asks at `now`: `approval:requested`
/// with its prompt rendered (`input` is the data that reached the node,
/// `outputs` and `loops` as for a node's `input:`), or, when the prompt
/// cannot be rendered, why. `None` when it has asked already (a resume) or
/// is no approval's.
pub(crate) fn question(
    state: &RunSnapshot,
    workflow: &WorkflowDef,
    run: NodeRunId,
    now: Timestamp,
) -> Option<Result<EventKind, String>> {
    let def = approval(state, workflow, run)?;
    let current = state.node_runs.get(&run)?;
    if current.approval.is_some() {
        return None;
    }
    let data = current.input.get("data").cloned().unwrap_or(Value::Null);
    let mut vars = input_vars(state, &data, Reads::All);
    if let Some(item) = current.item {
        vars.insert("index".into(), json!(item));
        vars.insert("item".into(), data);
    }
    let prompt = match def.prompt.render(&vars) {
        Ok(prompt) => prompt,
        Err(e) => return Some(Err(format!("its prompt cannot be rendered: {e}"))),
    };
    let deadline = def.timeout.map(|t| now.plus_millis(t.0.as_millis()));
    Some(Ok(EventKind::ApprovalRequested {
        prompt,
        schema: def.schema.as_deref().cloned(),
        deadline,
        on_timeout: def.timeout.map(|_| def.on_timeout.as_str().to_owned()),
        approvers: def.approvers.clone(),
        tool: None,
        later_calls: Vec::new(),
    }))
}

/// What a CLI agent's own request to use a tool comes to (Claude Code's
/// permission prompt, [`permission`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Permission {
    /// It may: granted, and its grant does not ask for these arguments.
    Allow,
    /// It may not, and why (not granted to the agent).
    Deny(String),
    /// A person decides: granted with `requires_approval` that applies.
    Ask,
}

/// Whether the agent of node `node` may call `tool` as it asks, by the
/// agent's grants.
pub(crate) fn permission(workflow: &WorkflowDef, node: &NodeId, tool: &AskedCall) -> Permission {
    let Some((name, agent)) = workflow.node(node).and_then(|n| workflow.agent_of(n)) else {
        return Permission::Deny(format!("node `{node}` runs no agent"));
    };
    let Some(grant) = agent.tools.iter().find(|g| g.grants(&tool.tool_name)) else {
        return Permission::Deny(format!(
            "`{}` is not granted to agent `{name}`",
            tool.tool_name
        ));
    };
    match grant.asks(&tool.tool_input) {
        true => Permission::Ask,
        false => Permission::Allow,
    }
}

/// The question an agent's model turn asks when its call `calls[0]` is of
/// a tool granted with `requires_approval`: the call, and the turn's
/// calls after it, which wait with it.
pub(crate) fn tool_question(
    agent: &str,
    calls: &[ToolCall],
    extras: Vec<domain::event::Extra>,
) -> Option<EventKind> {
    let mut extras = extras.into_iter();
    let mut asked = |call: &ToolCall| AskedCall {
        call_id: call.id.clone(),
        tool_name: call.name.clone(),
        tool_input: call.input.clone(),
        extra: extras.next().unwrap_or_default(),
    };
    let (first, later) = calls.split_first()?;
    let first = asked(first);
    let later = later.iter().map(&mut asked).collect();
    Some(asking(agent, first, later))
}

/// The end of the open question of node run `run` found by a resume when
/// a CLI agent asked it (its permission prompt): that agent's process is
/// gone, and its session, continued, asks again if it still wants the call.
pub(crate) fn abandoned(
    state: &RunSnapshot,
    workflow: &WorkflowDef,
    run: NodeRunId,
) -> Option<EventKind> {
    let current = state.node_runs.get(&run)?;
    current.approval.as_ref().filter(|q| q.tool.is_some())?;
    let (_, agent) = workflow
        .node(&current.node_id)
        .and_then(|n| workflow.agent_of(n))?;
    if agent.provider.is_http() {
        return None;
    }
    Some(withdrawn(
        "the agent that asked stopped before an answer".to_owned(),
    ))
}

/// A question that will have no answer, withdrawn on record with `reason`
/// (`approval:resolved`, `how: cancelled`): its run stopped, or the agent
/// that asked is gone.
pub(crate) fn withdrawn(reason: String) -> EventKind {
    EventKind::ApprovalResolved {
        approved: false,
        data: Value::Null,
        reason: Some(reason),
        by: None,
        how: "cancelled".to_owned(),
    }
}

/// `approval:requested` for tool call `first` of agent `agent`, with the
/// calls of its turn that wait after it.
pub(crate) fn asking(agent: &str, first: AskedCall, later: Vec<AskedCall>) -> EventKind {
    let prompt = format!(
        "Agent `{agent}` asks to call `{}` with {}",
        first.tool_name, first.tool_input
    );
    EventKind::ApprovalRequested {
        prompt,
        schema: None,
        deadline: None,
        on_timeout: None,
        approvers: Vec::new(),
        tool: Some(first),
        later_calls: later,
    }
}

/// A question settled: its `approval:resolved`, and how its node run ends
/// (an approval node's), or `None`: its agent goes on with the tool call
/// answered.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Settled {
    pub run: NodeRunId,
    pub node: NodeId,
    pub resolved: EventKind,
    pub end: Option<NodeEnd>,
}

/// The questions settled at `now`, in the order they are to be recorded
/// (by deadline or answer time, then node run): each with an accepted
/// answer, and each unanswered one whose deadline has passed, which
/// becomes what its `on_timeout` says.
pub(crate) fn due(state: &RunSnapshot, workflow: &WorkflowDef, now: Timestamp) -> Vec<Settled> {
    let mut due: Vec<(Timestamp, Settled)> = Vec::new();
    for (run, current) in &state.node_runs {
        let Some(question) = &current.approval else {
            continue;
        };
        let node = current.node_id.clone();
        if question.tool.is_some() {
            // A tool call's question ends nothing: its agent goes on.
            if let Some(answer) = &question.answer {
                let settled = Settled {
                    run: *run,
                    node,
                    resolved: resolved(answer),
                    end: None,
                };
                due.push((answer.at, settled));
            }
            continue;
        }
        let Some(def) = approval(state, workflow, *run) else {
            continue;
        };
        if let Some(answer) = &question.answer {
            let resolved = resolved(answer);
            let data = json!({
                "approved": answer.approved,
                "data": answer.data,
                "reason": answer.reason,
                "by": answer.by,
                "at": answer.at,
            });
            let end = Some(success(data));
            due.push((
                answer.at,
                Settled {
                    run: *run,
                    node,
                    resolved,
                    end,
                },
            ));
            continue;
        }
        let Some(deadline) = question.deadline.filter(|d| *d <= now) else {
            continue;
        };
        let approved = def.on_timeout == OnTimeout::Approve;
        let reason = "no answer came before the deadline".to_owned();
        let resolved = EventKind::ApprovalResolved {
            approved,
            data: Value::Null,
            reason: Some(reason.clone()),
            by: None,
            how: "timed_out".to_owned(),
        };
        let end = Some(match def.on_timeout {
            OnTimeout::Fail => NodeEnd::failed(format!("approval timed out: {reason}")),
            OnTimeout::Approve | OnTimeout::Reject => success(json!({
                "approved": approved,
                "data": null,
                "reason": reason,
                "by": null,
                "at": deadline,
            })),
        });
        due.push((
            deadline,
            Settled {
                run: *run,
                node,
                resolved,
                end,
            },
        ));
    }
    due.sort_by(|(a, x), (b, y)| a.cmp(b).then(x.run.cmp(&y.run)));
    due.into_iter().map(|(_, settled)| settled).collect()
}

/// The `approval:resolved` of an accepted answer.
fn resolved(answer: &domain::command::Answer) -> EventKind {
    EventKind::ApprovalResolved {
        approved: answer.approved,
        data: answer.data.clone(),
        reason: answer.reason.clone(),
        by: answer.by.clone(),
        how: "answered".to_owned(),
    }
}

fn success(data: Value) -> NodeEnd {
    NodeEnd {
        data,
        metadata: json!({}),
        error: None,
    }
}

/// The earliest deadline of a question still open in an approval node run
/// (the workflow's: a node that is no approval any more, after an upgrade,
/// settles nothing).
pub(crate) fn next_deadline(state: &RunSnapshot, workflow: &WorkflowDef) -> Option<Timestamp> {
    (state.node_runs.iter())
        .filter(|(run, _)| is_approval(state, workflow, **run))
        .filter_map(|(_, r)| r.approval.as_ref())
        .filter(|q| q.answer.is_none())
        .filter_map(|q| q.deadline)
        .min()
}

/// When the state next has a question to settle
/// ([`RunSnapshot::question_due_at`]).
pub(crate) fn due_at(state: &RunSnapshot) -> Option<Timestamp> {
    state.question_due_at()
}

/// Whether everything in flight waits for a person: at least one question
/// is open, and every other node run in flight is one too, or a
/// `for_each` node's own run (which ends with its items). Then nothing
/// can happen until someone answers or a deadline passes: the run stops
/// `waiting`, holding nothing.
pub(crate) fn only_people(state: &RunSnapshot, workflow: &WorkflowDef) -> bool {
    let mut asked = false;
    for (run, current) in &state.node_runs {
        if current.approval.as_ref().is_some_and(|q| {
            q.answer.is_none() && (q.tool.is_some() || is_approval(state, workflow, *run))
        }) {
            asked = true;
            continue;
        }
        let spawns_items = current.item.is_none() && state.for_each.contains_key(&current.node_id);
        if !spawns_items {
            return false;
        }
    }
    asked
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use domain::snapshot::NodeRunState;
    use domain::{Caller, RunId, RunStatus, RuntimeCommand};

    use super::*;

    fn workflow() -> WorkflowDef {
        WorkflowDef::from_yaml(
            "name: w\n\
             nodes:\n\
             - {id: draft, command: 'true'}\n\
             - {id: ok, approval: {prompt: 'Ship {{ input.title }} ({{ outputs.draft.n }})?', timeout: 10s, on_timeout: fail}}\n\
             - {id: soft, approval: {prompt: 'Soft?', timeout: 10s, on_timeout: approve}}\n\
             - {id: free, approval: 'Whenever'}\n\
             edges: [{from: draft, to: ok}, {from: draft, to: soft}, {from: draft, to: free}]\n",
        )
        .unwrap()
    }

    fn node_run(n: u128) -> NodeRunId {
        NodeRunId::new(uuid::Uuid::from_u128(0x4000_8000_0000_0000_0200 + n))
    }

    /// A running run in which `draft` finished with `{n: 7}` and node runs
    /// 1 (`ok`), 2 (`soft`) and 3 (`free`) are in flight, their input
    /// `{title: "v2"}`.
    fn state() -> RunSnapshot {
        let run = RunId::new(uuid::Uuid::from_u128(0x4000_8000_0000_0000_0002)).unwrap();
        let mut state = RunSnapshot::new(run);
        state.status = RunStatus::Running;
        state.outputs.insert(
            NodeId::new("draft").unwrap(),
            domain::JsonText::from_value(&json!({"data": {"n": 7}, "metadata": {}})),
        );
        for (n, name) in [(1, "ok"), (2, "soft"), (3, "free")] {
            let r: NodeRunState = serde_json::from_value(json!({
                "nodeId": name, "attempt": 1, "input": {"data": {"title": "v2"}, "metadata": {}}
            }))
            .unwrap();
            state.node_runs.insert(node_run(n), r);
        }
        state
    }

    /// Folds `question`'s `approval:requested` into node run `n` of `state`.
    fn ask(state: &mut RunSnapshot, wf: &WorkflowDef, n: u128, now: i64) {
        let asked = question(state, wf, node_run(n), Timestamp::from_millis(now))
            .unwrap()
            .unwrap();
        let EventKind::ApprovalRequested {
            prompt,
            schema,
            deadline,
            ..
        } = asked
        else {
            panic!("{asked:?}")
        };
        let question = domain::snapshot::Question {
            prompt,
            schema,
            deadline,
            answer: None,
            tool: None,
        };
        state.node_runs.get_mut(&node_run(n)).unwrap().approval = Some(Box::new(question));
    }

    #[test]
    fn a_question_renders_its_prompt_once_with_its_deadline() {
        let wf = workflow();
        let mut state = state();
        let asked = question(&state, &wf, node_run(1), Timestamp::from_millis(1_000))
            .unwrap()
            .unwrap();
        let EventKind::ApprovalRequested {
            prompt,
            deadline,
            on_timeout,
            ..
        } = &asked
        else {
            panic!("{asked:?}")
        };
        assert_eq!(prompt, "Ship v2 (7)?");
        assert_eq!(*deadline, Some(Timestamp::from_millis(11_000)));
        assert_eq!(on_timeout.as_deref(), Some("fail"));
        ask(&mut state, &wf, 1, 1_000);
        // Asked once: a resume asks nothing again.
        assert!(question(&state, &wf, node_run(1), Timestamp::from_millis(5_000)).is_none());
        // Without a timeout there is no deadline.
        let free = question(&state, &wf, node_run(3), Timestamp::from_millis(0))
            .unwrap()
            .unwrap();
        assert!(matches!(
            free,
            EventKind::ApprovalRequested {
                deadline: None,
                on_timeout: None,
                ..
            }
        ));
    }

    #[test]
    fn answers_and_deadlines_settle_in_time_order_each_as_its_on_timeout_says() {
        let wf = workflow();
        let mut state = state();
        for n in 1..=3 {
            ask(&mut state, &wf, n, 1_000);
        }
        assert_eq!(
            next_deadline(&state, &wf),
            Some(Timestamp::from_millis(11_000))
        );
        assert_eq!(due_at(&state), Some(Timestamp::from_millis(11_000)));
        assert!(due(&state, &wf, Timestamp::from_millis(10_999)).is_empty());
        assert!(only_people(&state, &wf));
        // `free` is answered at 2 s; at 11 s the deadlines of the others pass.
        let alice = Caller::new("alice").unwrap();
        let reject = RuntimeCommand::Reject {
            node_run_id: node_run(3),
            reason: Some("not yet".into()),
        };
        let (run, answer) = reject
            .answer(Some(alice.clone()), Timestamp::from_millis(2_000))
            .unwrap();
        state
            .node_runs
            .get_mut(&run)
            .unwrap()
            .approval
            .as_mut()
            .unwrap()
            .answer = Some(answer);
        let settled = due(&state, &wf, Timestamp::from_millis(11_000));
        let order: Vec<_> = settled.iter().map(|s| s.node.as_str()).collect();
        assert_eq!(order, ["free", "ok", "soft"]);
        assert!(
            matches!(&settled[0].resolved, EventKind::ApprovalResolved { approved: false, how, by: Some(by), .. } if how == "answered" && *by == alice)
        );
        assert_eq!(settled[0].end.as_ref().unwrap().data["reason"], "not yet");
        assert_eq!(settled[0].end.as_ref().unwrap().data["by"], "alice");
        // on_timeout: fail fails the node; approve completes it approved.
        assert!(
            settled[1]
                .end
                .as_ref()
                .unwrap()
                .error
                .as_deref()
                .unwrap()
                .contains("timed out")
        );
        assert!(
            matches!(&settled[1].resolved, EventKind::ApprovalResolved { how, .. } if how == "timed_out")
        );
        assert_eq!(settled[2].end.as_ref().unwrap().data["approved"], true);
        assert!(settled[2].end.as_ref().unwrap().error.is_none());
    }

    #[test]
    fn only_people_means_every_node_run_in_flight_waits_for_an_answer() {
        let wf = workflow();
        let mut state = state();
        // Asked nothing yet: nothing waits for a person.
        assert!(!only_people(&state, &wf));
        for n in 1..=3 {
            ask(&mut state, &wf, n, 0);
        }
        assert!(only_people(&state, &wf));
        // A command running beside them: the run is not waiting.
        let draft: NodeRunState =
            serde_json::from_value(json!({"nodeId": "draft", "attempt": 1})).unwrap();
        state.node_runs.insert(node_run(9), draft);
        assert!(!only_people(&state, &wf));
    }
}

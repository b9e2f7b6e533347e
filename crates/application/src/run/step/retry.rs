//! An attempt of a node run failed: whether the node run is tried again,
//! after what wait, and the `node:started` that records the new attempt
//! ([`attempt_failed`]). Decided from the attempt on record, so a node run
//! resumed by another process goes on counting where the first stopped.

use std::time::Duration;

use domain::{ErrorKind, EventKind, NodeRunId, RunSnapshot, WorkflowDef};

/// How an attempt of an agent node run failed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Failure {
    /// What kind of error ended it.
    pub kind: ErrorKind,
    /// It continued a provider session (a resume, or a message delivered
    /// after a turn) rather than starting one.
    pub continued: bool,
}

/// A new attempt: wait `wait`, record `started`, then invoke afresh.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Retry {
    pub wait: Duration,
    pub started: EventKind,
}

/// What follows the failed attempt of node run `run`: a retry while the
/// error is transient and its node's `retry` policy has attempts left;
/// `None` when the node run fails with the error.
///
/// HTTP agents retry a transient failure inside their tool loop (keeping the
/// conversation), so their node does not retry it again. A continued
/// session its CLI never saved (stopped right after it began) is tried
/// again at once, whatever the policy: it cannot be continued, so the node
/// run starts afresh, as a node run with no session does on resume.
pub(crate) fn attempt_failed(
    state: &RunSnapshot,
    workflow: &WorkflowDef,
    run: NodeRunId,
    failure: &Failure,
) -> Option<Retry> {
    let attempt = state.node_runs.get(&run)?.attempt;
    let node = workflow.node(&state.node_runs.get(&run)?.node_id)?;
    let http = workflow
        .agent_of(node)
        .is_some_and(|(_, agent)| agent.provider.is_http());
    let policy = &node.retry;
    let retried = failure.kind.is_transient() && !http && attempt < policy.max_attempts;
    let wait = if retried {
        policy.wait_before(attempt.saturating_add(1))
    } else if failure.continued && failure.kind == ErrorKind::SessionNotFound {
        Duration::ZERO
    } else {
        return None;
    };
    Some(Retry {
        wait,
        started: again(state, run)?,
    })
}

/// The `node:started` of node run `run`'s next attempt, with the input and
/// item its first recorded.
pub(crate) fn again(state: &RunSnapshot, run: NodeRunId) -> Option<EventKind> {
    let current = state.node_runs.get(&run)?;
    Some(EventKind::NodeStarted {
        input: current.input.clone(),
        attempt: Some(current.attempt.saturating_add(1)),
        item: current.item,
        items: None,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use domain::RunId;
    use domain::snapshot::NodeRunState;
    use serde_json::json;

    fn workflow() -> WorkflowDef {
        WorkflowDef::from_yaml(
            "name: w\n\
             agents:\n  cli: {provider: claude-code}\n  http: {provider: openai, model: m}\n\
             nodes:\n\
             - {id: x, agent: cli, retry: {max_attempts: 3, backoff: 2s, max_backoff: 3s}}\n\
             - {id: h, agent: http}\n",
        )
        .unwrap()
    }

    fn run_id() -> NodeRunId {
        NodeRunId::new(uuid::Uuid::from_u128(0x4000_8000_0000_0000_0100))
    }

    /// A run whose node run of `node` is at `attempt`, on item 4.
    fn state(node: &str, attempt: u32) -> RunSnapshot {
        let run = RunId::new(uuid::Uuid::from_u128(0x4000_8000_0000_0000_0001)).unwrap();
        let mut state = RunSnapshot::new(run);
        let r: NodeRunState = serde_json::from_value(json!({
            "nodeId": node, "attempt": attempt, "item": 4,
            "input": {"data": "in", "metadata": {}},
        }))
        .unwrap();
        state.node_runs.insert(run_id(), r);
        state
    }

    fn failure(kind: ErrorKind, continued: bool) -> Failure {
        Failure { kind, continued }
    }

    /// The table: the node, its attempt on record, the failure; then the
    /// wait before the next attempt (`None`: the node run fails).
    #[test]
    fn transient_failures_of_cli_agents_are_retried_while_attempts_last() {
        let secs = |s| Some(Duration::from_secs(s));
        let table = [
            ("x", 1, failure(ErrorKind::RateLimit, false), secs(2)),
            ("x", 2, failure(ErrorKind::Network, false), secs(3)),
            ("x", 3, failure(ErrorKind::Overloaded, false), None),
            ("x", 1, failure(ErrorKind::Api, false), None),
            ("x", 1, failure(ErrorKind::MaxTurns, true), None),
            ("x", 3, failure(ErrorKind::SessionNotFound, true), secs(0)),
            ("x", 1, failure(ErrorKind::SessionNotFound, false), None),
            ("h", 1, failure(ErrorKind::RateLimit, false), None),
        ];
        for (node, attempt, failure, wait) in table {
            let state = state(node, attempt);
            let retry = attempt_failed(&state, &workflow(), run_id(), &failure);
            let case = format!("{node} attempt {attempt} {failure:?}");
            assert_eq!(retry.as_ref().map(|r| r.wait), wait, "{case}");
            if let Some(retry) = retry {
                let EventKind::NodeStarted {
                    input,
                    attempt: next,
                    item,
                    items,
                } = retry.started
                else {
                    panic!("{case}: {:?}", retry.started);
                };
                assert_eq!(next, Some(attempt + 1), "{case}");
                assert_eq!((item, items), (Some(4), None), "{case}");
                assert_eq!(*input, json!({"data": "in", "metadata": {}}), "{case}");
            }
        }
    }

    #[test]
    fn a_node_run_not_on_record_is_not_retried() {
        let state = state("x", 1);
        let other = NodeRunId::new(uuid::Uuid::from_u128(7));
        let failure = failure(ErrorKind::RateLimit, false);
        assert_eq!(attempt_failed(&state, &workflow(), other, &failure), None);
        assert_eq!(again(&state, other), None);
    }
}

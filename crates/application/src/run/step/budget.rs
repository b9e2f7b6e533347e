//! Budgets: the first budget of the run or of one of its nodes that the
//! state has crossed ([`exceeded`]), and when the next deadline falls
//! ([`next_deadline`]), so the driver can wake for it. Checked after every
//! agent result and at every turn of the driver's loop.

use domain::snapshot::Spent;
use domain::workflow::Budget;
use domain::{NodeId, RunSnapshot, Timestamp, WorkflowDef};

/// A budget that ran out: what `budget:exceeded` records.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Exceeded {
    /// `tokens`, `cost_usd`, `turns` or `deadline`.
    pub budget: String,
    /// The limit (milliseconds for a deadline).
    pub limit: f64,
    /// What was used (milliseconds for a deadline).
    pub used: f64,
    /// The node whose budget it is; `None` for the run's.
    pub node: Option<NodeId>,
}

/// The first budget `spent` crosses (tokens, cost, turns, deadline at `now`).
fn crossed(
    budget: &Budget,
    spent: &Spent,
    since: Option<Timestamp>,
    now: Timestamp,
) -> Option<(&'static str, f64, f64)> {
    if let Some(limit) = budget.tokens
        && spent.tokens > limit
    {
        return Some(("tokens", limit as f64, spent.tokens as f64));
    }
    if let Some(limit) = budget.cost_usd
        && spent.cost_usd > limit
    {
        return Some(("cost_usd", limit, spent.cost_usd));
    }
    if let Some(limit) = budget.turns
        && spent.turns > limit
    {
        return Some(("turns", limit as f64, spent.turns as f64));
    }
    if let (Some(deadline), Some(since)) = (budget.deadline, since) {
        let limit = deadline.0.as_millis() as f64;
        let used = now.millis_since(since) as f64;
        if used >= limit {
            return Some(("deadline", limit, used));
        }
    }
    None
}

/// Positions of the nodes that have a budget of their own: computed once
/// per run, so a step checks those nodes and not the whole graph.
pub(crate) fn budgeted(wf: &WorkflowDef) -> Vec<usize> {
    (0..wf.nodes.len())
        .filter(|&at| !wf.nodes[at].budget.is_unlimited())
        .collect()
}

/// The first budget of the run, or of one of its `budgeted` nodes, that the
/// state has crossed at `now`.
pub(crate) fn exceeded(
    state: &RunSnapshot,
    wf: &WorkflowDef,
    budgeted: &[usize],
    now: Timestamp,
) -> Option<Exceeded> {
    if let Some((budget, limit, used)) = crossed(&wf.budget, &state.spent, state.started_at, now) {
        return Some(Exceeded {
            budget: budget.to_owned(),
            limit,
            used,
            node: None,
        });
    }
    budgeted
        .iter()
        .filter_map(|&at| wf.nodes.get(at))
        .find_map(|n| {
            let spent = state.node_spent.get(&n.id)?;
            let (budget, limit, used) = crossed(&n.budget, spent, spent.since, now)?;
            Some(Exceeded {
                budget: budget.to_owned(),
                limit,
                used,
                node: Some(n.id.clone()),
            })
        })
}

/// When the next deadline of the run or of a `budgeted` node that has started falls.
pub(crate) fn next_deadline(
    state: &RunSnapshot,
    wf: &WorkflowDef,
    budgeted: &[usize],
) -> Option<Timestamp> {
    let run = wf
        .budget
        .deadline
        .zip(state.started_at)
        .map(|(d, since)| since.plus_millis(d.0.as_millis()));
    let nodes = budgeted.iter().filter_map(|&at| {
        let n = wf.nodes.get(at)?;
        let deadline = n.budget.deadline?;
        let since = state.node_spent.get(&n.id)?.since?;
        Some(since.plus_millis(deadline.0.as_millis()))
    });
    run.into_iter().chain(nodes).min()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use domain::event::Usage;
    use domain::workflow::Timeout;
    use std::time::Duration;

    fn spent(tokens: u64, cost: f64, turns: u64) -> Spent {
        Spent {
            tokens,
            cost_usd: cost,
            turns,
            since: None,
        }
    }

    #[test]
    fn each_budget_kind_is_crossed_only_past_its_limit() {
        let t0 = Timestamp::from_millis(0);
        let budget = Budget {
            tokens: Some(100),
            cost_usd: Some(1.0),
            turns: Some(5),
            deadline: Some(Timeout(Duration::from_secs(10))),
        };
        let cases: [(Spent, i64, Option<&str>); 6] = [
            (spent(100, 1.0, 5), 9_999, None),
            (spent(101, 0.0, 0), 0, Some("tokens")),
            (spent(0, 1.01, 0), 0, Some("cost_usd")),
            (spent(0, 0.0, 6), 0, Some("turns")),
            (spent(0, 0.0, 0), 10_000, Some("deadline")),
            (spent(500, 0.0, 0), 20_000, Some("tokens")),
        ];
        for (s, at, expected) in cases {
            let got = crossed(&budget, &s, Some(t0), Timestamp::from_millis(at)).map(|c| c.0);
            assert_eq!(got, expected, "{s:?} at {at} ms");
        }
    }

    #[test]
    fn spent_adds_tokens_cost_and_turns() {
        let mut s = Spent::default();
        let usage = Usage {
            input_tokens: 7,
            output_tokens: 3,
            ..Usage::default()
        };
        s.add(&usage, Some(0.5), 2);
        s.add(&usage, None, 1);
        assert_eq!((s.tokens, s.cost_usd, s.turns), (20, 0.5, 3));
    }
}

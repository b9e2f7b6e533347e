//! What the spans of the logs built in [`super`] count for in the metrics
//! (`trace::metrics`): each instrument's values and attributes, failures,
//! retries and interruptions, and what counts for nothing.

use super::*;

/// Every measurement the ended spans of `p` make, with its attributes as
/// `key=value` text, for comparing.
fn measured(p: &Projection) -> Vec<(&'static str, metrics::Value, Vec<String>)> {
    p.spans
        .iter()
        .flat_map(metrics::measure)
        .map(|m| {
            let attributes = m.attributes.0.iter().map(|(k, v)| format!("{k}={v}"));
            (m.instrument.name(), m.value, attributes.collect())
        })
        .collect()
}

#[test]
fn metrics_count_calls_tokens_node_runs_and_runs_by_how_they_ended() {
    let run = run_id(20);
    let (a, b) = (
        NodeRunId::new(Uuid::from_u128(201)),
        NodeRunId::new(Uuid::from_u128(202)),
    );
    let mut log = Log::new(run);
    log.started().node("plan", a, 1).call("plan", a, (100, 7));
    log.done("plan", a).node("write", b, 1);
    log.call("write", b, (40, 3)).done("write", b).completed();
    let m = measured(&log.project());
    use metrics::Value::{Seconds, Tokens};
    let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
    let call = ["gen_ai.operation.name=chat", "gen_ai.request.model=m-1"];
    let tokens = |kind: &str| {
        let mut a = s(&call);
        a.push(format!("gen_ai.token.type={kind}"));
        a
    };
    let node = |name: &str| {
        vec![
            format!("gen_ai.agent.name={name}"),
            "awr.node_run.status=completed".to_owned(),
        ]
    };
    // Each event is a second after the one before (`Log::at`).
    let expected = vec![
        (
            "awr.run.duration",
            Seconds(9.0),
            s(&["gen_ai.workflow.name=research", "awr.run.status=completed"]),
        ),
        ("awr.node_run.duration", Seconds(3.0), node("plan")),
        ("gen_ai.client.operation.duration", Seconds(1.0), s(&call)),
        ("gen_ai.client.token.usage", Tokens(100), tokens("input")),
        ("gen_ai.client.token.usage", Tokens(7), tokens("output")),
        ("awr.node_run.duration", Seconds(3.0), node("write")),
        ("gen_ai.client.operation.duration", Seconds(1.0), s(&call)),
        ("gen_ai.client.token.usage", Tokens(40), tokens("input")),
        ("gen_ai.client.token.usage", Tokens(3), tokens("output")),
    ];
    assert_eq!(m, expected);
}

#[test]
fn metrics_of_failures_and_interruptions_say_which() {
    // The retry: a call that failed, its attempt, the attempt after, the run.
    let run = run_id(21);
    let a = NodeRunId::new(Uuid::from_u128(211));
    let log = Log::retried(run, a);
    let m = measured(&log.project());
    let of = |name: &str| -> Vec<Vec<String>> {
        m.iter()
            .filter(|(n, _, _)| *n == name)
            .map(|(_, _, a)| a.clone())
            .collect()
    };
    let has = |attributes: &[String], wanted: &str| attributes.iter().any(|a| a == wanted);
    let runs = of("awr.run.duration");
    assert_eq!(runs.len(), 1);
    assert!(has(&runs[0], "awr.run.status=failed"), "{runs:?}");
    assert!(has(&runs[0], "error.type=flow_failed"), "{runs:?}");
    let attempts = of("awr.node_run.duration");
    assert_eq!(attempts.len(), 2);
    assert!(has(&attempts[0], "error.type=rate_limit"), "{attempts:?}");
    assert!(has(&attempts[1], "error.type=node_failed"), "{attempts:?}");
    assert!(
        attempts
            .iter()
            .all(|a| has(a, "awr.node_run.status=failed"))
    );
    let calls = of("gen_ai.client.operation.duration");
    assert_eq!(calls.len(), 1);
    assert!(has(&calls[0], "error.type=rate_limit"), "{calls:?}");
    // A failed call used no tokens it could say.
    assert!(of("gen_ai.client.token.usage").is_empty());

    // A resume: the part cut short is an interrupted attempt, not a failure.
    let run = run_id(22);
    let b = NodeRunId::new(Uuid::from_u128(221));
    let mut log = Log::new(run);
    log.started().node("plan", b, 1);
    log.at(
        None,
        EventKind::FlowResumed {
            message: None,
            by: None,
        },
    );
    log.call("plan", b, (5, 5)).done("plan", b).completed();
    let m = measured(&log.project());
    let statuses: Vec<&String> = m
        .iter()
        .filter(|(n, _, _)| *n == "awr.node_run.duration")
        .flat_map(|(_, _, a)| a.iter().filter(|a| a.starts_with("awr.node_run.status")))
        .collect();
    assert_eq!(
        statuses,
        [
            "awr.node_run.status=interrupted",
            "awr.node_run.status=completed"
        ]
    );
}

#[test]
fn an_open_span_or_a_tool_counts_for_nothing() {
    let run = run_id(23);
    let a = NodeRunId::new(Uuid::from_u128(231));
    let mut log = Log::new(run);
    log.started().node("plan", a, 1);
    // In flight: nothing has ended.
    assert!(measured(&log.project()).is_empty());
    let mut tool = log.project().spans[0].clone();
    tool.attributes
        .text("gen_ai.operation.name", "execute_tool");
    tool.end = Some(tool.start);
    assert!(metrics::measure(&tool).is_empty());
}

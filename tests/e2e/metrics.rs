//! Metrics sent live: each run's calls, tokens, node runs and end, counted
//! from its spans and received by an OTLP receiver that decodes them with
//! OpenTelemetry's own schema, over HTTP and gRPC.

use std::collections::BTreeMap;

use awr_tests::otlp::Receiver;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::metrics::v1::{Metric, metric};

use crate::util::Awr;

/// One histogram point: its attributes as text, its count and its sum.
#[derive(Debug, Clone, PartialEq)]
struct Point {
    attributes: BTreeMap<String, String>,
    count: u64,
    sum: f64,
}

/// The points of the last `name` received (cumulative: the last holds all).
fn points(received: &[(String, Metric)], name: &str) -> Vec<Point> {
    let Some((_, metric)) = received.iter().rev().find(|(_, m)| m.name == name) else {
        return Vec::new();
    };
    let Some(metric::Data::Histogram(histogram)) = &metric.data else {
        panic!("{name} is not a histogram: {metric:?}");
    };
    histogram
        .data_points
        .iter()
        .map(|p| Point {
            attributes: p
                .attributes
                .iter()
                .map(|kv| {
                    let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                        Some(Any::StringValue(s)) => s.clone(),
                        other => format!("{other:?}"),
                    };
                    (kv.key.clone(), value)
                })
                .collect(),
            count: p.count,
            sum: p.sum.unwrap_or_default(),
        })
        .collect()
}

/// The points whose attribute `key` is `value`.
fn with<'a>(points: &'a [Point], key: &str, value: &str) -> Vec<&'a Point> {
    points
        .iter()
        .filter(|p| p.attributes.get(key).map(String::as_str) == Some(value))
        .collect()
}

fn total(points: &[&Point]) -> (u64, f64) {
    points
        .iter()
        .fold((0, 0.0), |(n, s), p| (n + p.count, s + p.sum))
}

#[test]
fn the_research_pipeline_sends_its_tokens_calls_node_runs_and_run_as_metrics() {
    let a = Awr::new();
    let receiver = Receiver::http();
    let out = a.run_in(
        &crate::util::repo_root(),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.url),
            ("OTEL_SERVICE_NAME", "awr-metrics-test"),
        ],
        &["run", "examples/research-pipeline.yaml"],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let run = crate::util::run_id_of(&out);
    let received = receiver.metrics();
    assert!(!received.is_empty(), "no metrics: {}", out.stderr);
    assert!(
        received
            .iter()
            .all(|(service, _)| service.contains("awr-metrics-test")),
        "{received:?}"
    );
    for (_, metric) in &received {
        let unit = match metric.name.as_str() {
            "gen_ai.client.token.usage" => "{token}",
            _ => "s",
        };
        assert_eq!(metric.unit, unit, "{}", metric.name);
    }

    // The tokens are the log's `agent:complete` usage, call by call.
    let completes: Vec<serde_json::Value> = a
        .events(&run)
        .into_iter()
        .filter(|e| e["type"] == "agent:complete")
        .collect();
    let logged = |field: &str| -> f64 {
        completes
            .iter()
            .map(|e| e["usage"][field].as_u64().unwrap() as f64)
            .sum()
    };
    let tokens = points(&received, "gen_ai.client.token.usage");
    let input = total(&with(&tokens, "gen_ai.token.type", "input"));
    let output = total(&with(&tokens, "gen_ai.token.type", "output"));
    assert_eq!(input, (completes.len() as u64, logged("inputTokens")));
    assert_eq!(output, (completes.len() as u64, logged("outputTokens")));
    assert!(
        tokens
            .iter()
            .all(|p| p.attributes["gen_ai.operation.name"] == "chat"
                && p.attributes["gen_ai.provider.name"] == "awr.mock"
                && p.attributes["gen_ai.request.model"] == "claude-sonnet-4-5"),
        "{tokens:?}"
    );

    let calls = points(&received, "gen_ai.client.operation.duration");
    assert_eq!(
        total(&calls.iter().collect::<Vec<_>>()).0,
        completes.len() as u64
    );
    assert!(
        calls
            .iter()
            .all(|p| !p.attributes.contains_key("error.type"))
    );

    let nodes = points(&received, "awr.node_run.duration");
    let completed = with(&nodes, "awr.node_run.status", "completed");
    assert_eq!(total(&completed).0, 3, "{nodes:?}");
    let agents: Vec<&str> = completed
        .iter()
        .map(|p| p.attributes["gen_ai.agent.name"].as_str())
        .collect();
    for agent in ["researcher", "analyst", "writer"] {
        assert!(agents.contains(&agent), "{agents:?}");
    }

    let runs = points(&received, "awr.run.duration");
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0].count, 1);
    assert_eq!(runs[0].attributes["awr.run.status"], "completed");
    assert_eq!(
        runs[0].attributes["gen_ai.workflow.name"],
        "research-pipeline"
    );
    let took = a
        .events(&run)
        .last()
        .and_then(|e| e["durationMs"].as_f64())
        .unwrap();
    // The log's `durationMs` is read off the clock just before its
    // `flow:completed` is stamped: the same, but for a busy machine's pause.
    assert!(
        (runs[0].sum - took / 1000.0).abs() < 1.0,
        "{} s beside the log's {took} ms",
        runs[0].sum
    );
}

#[test]
fn a_failed_run_is_counted_as_failed_with_its_error_over_grpc() {
    let a = Awr::new();
    let flow = a.api_error_flow();
    let receiver = Receiver::grpc();
    let out = a.run_in(
        &crate::util::repo_root(),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.url),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ],
        &["run", flow.to_str().unwrap()],
    );
    assert_eq!(out.code, 1, "{}", out.stderr);
    let received = receiver.metrics();
    let runs = points(&received, "awr.run.duration");
    assert_eq!(runs.len(), 1, "{runs:?}: {}", out.stderr);
    assert_eq!(runs[0].attributes["awr.run.status"], "failed");
    assert_eq!(runs[0].attributes["error.type"], "flow_failed");
    let nodes = points(&received, "awr.node_run.duration");
    assert!(
        !nodes.is_empty()
            && nodes
                .iter()
                .all(|p| p.attributes["awr.node_run.status"] == "failed"),
        "{nodes:?}"
    );
    let calls = points(&received, "gen_ai.client.operation.duration");
    assert!(
        !calls.is_empty()
            && calls
                .iter()
                .all(|p| p.attributes["error.type"] == "api_error"),
        "{calls:?}"
    );
    // The spans went the same way.
    assert!(
        receiver
            .spans()
            .iter()
            .any(|s| s.name == "invoke_workflow failing")
    );
}

/// Metrics go out every `OTEL_METRIC_EXPORT_INTERVAL` while a run goes on,
/// not only when the process ends: the first node run is counted in a
/// request sent while the second (a command that waits) still runs.
#[test]
fn metrics_are_sent_every_interval_while_a_run_goes_on() {
    let a = Awr::new();
    let gate = a.dir.path().join("gate");
    a.write("fx/a.json", r#"{"calls": [{"output": {"text": "done"}}]}"#);
    let wait = format!("while [ ! -e '{}' ]; do sleep 0.05; done", gate.display());
    let flow = a.write(
        "flow.yaml",
        &format!(
            "name: slow\nagents:\n  a: {{provider: mock, fixtures: fx}}\nsteps:\n  - agent: a\n  - id: wait\n    command: {}\n",
            serde_json::to_string(&wait).unwrap()
        ),
    );
    let receiver = Receiver::http();
    let mut child = a
        .command(&["run", flow.to_str().unwrap()])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.url)
        .env("OTEL_METRIC_EXPORT_INTERVAL", "50")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the first node run's count to arrive while the run waits.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while points(&receiver.metrics(), "awr.node_run.duration").is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "no metrics while the run went on"
        );
        assert!(child.try_wait().unwrap().is_none(), "the run ended first");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(
        points(&receiver.metrics(), "awr.run.duration").is_empty(),
        "the run has not ended: {:?}",
        points(&receiver.metrics(), "awr.run.duration")
    );
    std::fs::write(&gate, "").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let received = receiver.metrics();
    assert_eq!(
        total(&with(
            &points(&received, "awr.node_run.duration"),
            "awr.node_run.status",
            "completed"
        ))
        .0,
        2
    );
    assert_eq!(points(&received, "awr.run.duration").len(), 1);
}

/// A fork sends the spans of the log it copied, but its metrics count only
/// what it did itself: the copied node run was counted in its parent run.
#[test]
fn a_fork_counts_only_what_it_did_itself() {
    let a = Awr::new();
    let run = a.completed_run("examples/summarize.yaml");
    let cut = a
        .events(&run)
        .iter()
        .find(|e| e["type"] == "node:completed")
        .and_then(|e| e["offset"].as_u64())
        .unwrap();
    let receiver = Receiver::http();
    let out = a.run_in(
        &crate::util::repo_root(),
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.url)],
        &["fork", &run, "--at", &cut.to_string()],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let received = receiver.metrics();
    let nodes = points(&received, "awr.node_run.duration");
    assert_eq!(total(&nodes.iter().collect::<Vec<_>>()).0, 1, "{nodes:?}");
    let calls = points(&received, "gen_ai.client.operation.duration");
    assert_eq!(total(&calls.iter().collect::<Vec<_>>()).0, 1, "{calls:?}");
    assert_eq!(points(&received, "awr.run.duration")[0].count, 1);
    // Its spans, copied ones included, all went.
    assert_eq!(receiver.spans().len(), 5);
}

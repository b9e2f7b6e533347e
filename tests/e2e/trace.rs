//! `awr trace show`: a run's OpenTelemetry spans, projected from its log,
//! as a tree and as OTLP/JSON, the same each time they are asked for.

use serde_json::Value;

use awr_tests::otlp::Receiver;
use prost::Message;

use crate::util::Awr;

/// The spans of an OTLP/JSON request.
fn spans(json: &str) -> Vec<Value> {
    let request: Value = serde_json::from_str(json).unwrap();
    request["resourceSpans"][0]["scopeSpans"][0]["spans"]
        .as_array()
        .unwrap()
        .clone()
}

fn attribute<'a>(span: &'a Value, key: &str) -> &'a Value {
    span["attributes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|kv| kv["key"] == key)
        .map_or(&Value::Null, |kv| &kv["value"])
}

#[test]
fn the_research_pipeline_is_one_trace_whose_calls_spent_what_the_log_says() {
    let a = Awr::new();
    let run = a.completed_run("examples/research-pipeline.yaml");
    let json = a.run(&["trace", "show", &run, "--json"]);
    assert_eq!(json.code, 0, "{}", json.stderr);
    let all = spans(&json.stdout);

    let roots: Vec<&Value> = all.iter().filter(|s| s["parentSpanId"] == "").collect();
    assert_eq!(roots.len(), 1, "one root");
    let root = roots[0];
    assert_eq!(root["traceId"], run.replace('-', ""));
    assert_eq!(
        attribute(root, "gen_ai.operation.name")["stringValue"],
        "invoke_workflow"
    );
    let agents: Vec<&Value> = all
        .iter()
        .filter(|s| s["name"].as_str().unwrap().starts_with("invoke_agent "))
        .collect();
    assert_eq!(agents.len(), 3, "three agent node runs");
    assert!(agents.iter().all(|s| s["parentSpanId"] == root["spanId"]));
    for agent in &agents {
        assert_eq!(
            attribute(agent, "gen_ai.provider.name")["stringValue"],
            "awr.mock",
            "from the run's definition"
        );
    }

    // Each call's input tokens are its `agent:complete` usage.
    let mut logged: Vec<u64> = a
        .events(&run)
        .iter()
        .filter(|e| e["type"] == "agent:complete")
        .map(|e| e["usage"]["inputTokens"].as_u64().unwrap())
        .collect();
    let mut chats: Vec<u64> = all
        .iter()
        .filter(|s| s["name"].as_str().unwrap().starts_with("chat "))
        .map(|s| {
            assert!(
                agents.iter().any(|a| a["spanId"] == s["parentSpanId"]),
                "{s}"
            );
            attribute(s, "gen_ai.usage.input_tokens")["intValue"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    logged.sort();
    chats.sort();
    assert_eq!(chats, logged);
    assert!(!chats.is_empty());

    // The same spans, ids included, every time.
    let again = a.run(&["trace", "show", &run, "--json"]);
    assert_eq!(again.stdout, json.stdout);

    let tree = a.run(&["trace", "show", &run]);
    assert_eq!(tree.code, 0, "{}", tree.stderr);
    let lines: Vec<&str> = tree.stdout.lines().collect();
    assert!(
        lines[0].starts_with("invoke_workflow research-pipeline"),
        "{}",
        tree.stdout
    );
    assert_eq!(
        lines.iter().filter(|l| l.contains("invoke_agent ")).count(),
        3,
        "{}",
        tree.stdout
    );
}

#[test]
fn a_trace_of_no_run_is_bad_input() {
    let a = Awr::new();
    a.completed_run("examples/summarize.yaml");
    let out = a.run(&["trace", "show", "00000000-0000-4000-8000-000000000000"]);
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("00000000-0000-4000-8000-000000000000 not found"),
        "{}",
        out.stderr
    );
}

#[test]
fn an_export_delivers_every_span_with_the_same_ids_each_time() {
    let a = Awr::new();
    let run = a.completed_run("examples/research-pipeline.yaml");
    let shown = a.run(&["trace", "show", &run, "--json"]);
    let expected = spans(&shown.stdout).len();

    // Nobody listens: the export fails, says so, and can be done later.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let down = a.run(&["trace", "export", &run, "--endpoint", &closed]);
    assert_eq!(down.code, 1, "{}", down.stderr);
    assert!(down.stderr.contains("collector"), "{}", down.stderr);

    let receiver = Receiver::http();
    for _ in 0..2 {
        let out = a.run(&["trace", "export", &run, "--endpoint", &receiver.url]);
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert!(
            out.stdout.contains(&format!("{expected} spans")),
            "{}",
            out.stdout
        );
    }
    let received = receiver.spans();
    assert_eq!(received.len(), 2 * expected);
    let (first, second) = received.split_at(expected);
    let ids = |spans: &[opentelemetry_proto::tonic::trace::v1::Span]| {
        spans
            .iter()
            .map(|s| {
                (
                    s.trace_id.clone(),
                    s.span_id.clone(),
                    s.parent_span_id.clone(),
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(ids(first), ids(second), "the same ids, byte for byte");
    assert!(first.iter().any(|s| s.name.starts_with("chat ")));
    let root = first.iter().find(|s| s.parent_span_id.is_empty()).unwrap();
    assert_eq!(hex(&root.trace_id), run.replace('-', ""));
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Every span of `spans`, by id, as bytes: what a collector stores.
fn by_id(
    spans: Vec<opentelemetry_proto::tonic::trace::v1::Span>,
) -> std::collections::BTreeMap<Vec<u8>, Vec<u8>> {
    spans
        .into_iter()
        .map(|s| (s.span_id.clone(), s.encode_to_vec()))
        .collect()
}

/// A run with the standard variables set exports its spans as it runs,
/// its child run's among them, under the node run that called it; a later
/// `awr trace export` of the run sends the same spans, byte for byte.
#[test]
fn a_run_exports_its_spans_live_and_a_later_export_sends_the_same() {
    let a = Awr::new();
    let live = Receiver::http();
    let out = a.run_in(
        &crate::util::repo_root(),
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &live.url)],
        &["run", "examples/market-brief.yaml"],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let run = crate::util::run_id_of(&out);
    let sent = live.spans();
    assert!(!sent.is_empty(), "nothing was exported live");
    let root = sent.iter().find(|s| s.parent_span_id.is_empty()).unwrap();
    assert_eq!(hex(&root.trace_id), run.replace('-', ""));
    assert!(
        sent.iter().any(|s| s.name == "invoke_workflow summarize"),
        "the child run's spans are in the trace"
    );
    assert!(
        sent.iter().all(|s| s.trace_id == root.trace_id),
        "one trace"
    );

    let later = Receiver::http();
    let out = a.run(&["trace", "export", &run, "--endpoint", &later.url]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let (sent, exported) = (by_id(sent), by_id(later.spans()));
    assert_eq!(sent.len(), exported.len());
    assert!(sent == exported, "a live span differs from its export");
}

/// A collector that is down fails no run; the spans it missed are on
/// record, and `awr trace export` sends them once it is up.
#[test]
fn a_collector_that_is_down_fails_no_run_and_loses_nothing() {
    let a = Awr::new();
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let out = a.run_in(
        &crate::util::repo_root(),
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &closed)],
        &["run", "examples/summarize.yaml"],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stderr.contains("not exported"), "{}", out.stderr);
    let run = crate::util::run_id_of(&out);
    let later = Receiver::http();
    let export = a.run(&["trace", "export", &run, "--endpoint", &later.url]);
    assert_eq!(export.code, 0, "{}", export.stderr);
    // The run, and a node run and a provider call per step.
    assert_eq!(later.spans().len(), 5);
}

/// A collector that takes no request keeps the export's one span of queue
/// full: the spans with no room are dropped, never waited for, and the
/// run's log counts them before its end.
#[test]
fn spans_dropped_for_want_of_room_are_counted_in_the_log() {
    let a = Awr::new();
    // Connections wait in its backlog; nothing ever answers them.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", silent.local_addr().unwrap());
    let out = a.run_in(
        &crate::util::repo_root(),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &url),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "300"),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "1"),
        ],
        &["run", "examples/summarize.yaml"],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let run = crate::util::run_id_of(&out);
    let events = a.events(&run);
    let dropped: u64 = events
        .iter()
        .filter(|e| e["type"] == "warning")
        .filter_map(|e| e["details"]["droppedSpans"].as_u64())
        .sum();
    // Five spans; room for one queued and one being sent at most.
    assert!((3..=5).contains(&dropped), "{dropped} dropped: {events:?}");
    assert_eq!(events.last().unwrap()["type"], "flow:completed");
}

/// A resumed run exports the spans that end after the resume, and none
/// of those that ended before it (its previous writer sent them): its log
/// cut after its first node run's end, then resumed with the variables
/// set, sends the second node run's spans and the run's, each as a later
/// export of the run has it.
#[test]
fn a_resumed_run_exports_what_ends_after_the_resume_only() {
    let a = Awr::new();
    let run = a.completed_run("examples/summarize.yaml");
    let dir = a.run_dir(&run);
    let log = std::fs::read_to_string(dir.join("events.ndjson")).unwrap();
    let cut = log
        .split_inclusive('\n')
        .position(|line| line.contains("\"type\":\"node:completed\""))
        .unwrap();
    let prefix: String = log.split_inclusive('\n').take(cut + 1).collect();
    std::fs::write(dir.join("events.ndjson"), prefix).unwrap();
    for derived in ["events.idx", "snapshot.json"] {
        let _ = std::fs::remove_file(dir.join(derived));
    }

    let live = Receiver::http();
    let out = a.run_in(
        &crate::util::repo_root(),
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &live.url)],
        &["resume", &run],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let later = Receiver::http();
    let export = a.run(&["trace", "export", &run, "--endpoint", &later.url]);
    assert_eq!(export.code, 0, "{}", export.stderr);

    let (sent, exported) = (by_id(live.spans()), by_id(later.spans()));
    let names: Vec<String> = live.spans().into_iter().map(|s| s.name).collect();
    assert_eq!(names.len(), 3, "{names:?}");
    assert!(names.iter().all(|n| !n.contains("summarizer")), "{names:?}");
    for (id, span) in &sent {
        assert_eq!(
            exported.get(id),
            Some(span),
            "a live span differs from its export"
        );
    }
}

/// An integer attribute of a span as a collector decodes it.
fn int_attribute(span: &opentelemetry_proto::tonic::trace::v1::Span, key: &str) -> Option<i64> {
    use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref()?.value.as_ref())
        .and_then(|v| match v {
            Any::IntValue(n) => Some(*n),
            _ => None,
        })
}

/// The research pipeline, run with the variables set, delivers one trace:
/// one root, three `invoke_agent` spans under it, each holding its `chat`
/// spans, whose input tokens are the `agent:complete` usage on record.
#[test]
fn the_research_pipeline_run_live_delivers_one_trace_whose_calls_spent_what_the_log_says() {
    let a = Awr::new();
    let live = Receiver::http();
    let out = a.run_in(
        &crate::util::repo_root(),
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &live.url)],
        &["run", "examples/research-pipeline.yaml"],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let run = crate::util::run_id_of(&out);
    let spans = live.spans();
    let roots: Vec<_> = spans
        .iter()
        .filter(|s| s.parent_span_id.is_empty())
        .collect();
    assert_eq!(roots.len(), 1, "one root");
    assert_eq!(hex(&roots[0].trace_id), run.replace('-', ""));
    let agents: Vec<_> = spans
        .iter()
        .filter(|s| s.name.starts_with("invoke_agent "))
        .collect();
    assert_eq!(agents.len(), 3);
    assert!(agents.iter().all(|s| s.parent_span_id == roots[0].span_id));
    let mut chats: Vec<i64> = spans
        .iter()
        .filter(|s| s.name.starts_with("chat"))
        .map(|s| {
            assert!(
                agents.iter().any(|a| a.span_id == s.parent_span_id),
                "{s:?}"
            );
            int_attribute(s, "gen_ai.usage.input_tokens").unwrap()
        })
        .collect();
    let mut logged: Vec<i64> = a
        .events(&run)
        .iter()
        .filter(|e| e["type"] == "agent:complete")
        .map(|e| e["usage"]["inputTokens"].as_i64().unwrap())
        .collect();
    chats.sort();
    logged.sort();
    assert!(!chats.is_empty());
    assert_eq!(chats, logged);
}

/// OTLP over gRPC: an export to a gRPC collector delivers every span, as
/// the HTTP one does, and a run with the variables set exports live over
/// gRPC too.
#[test]
fn spans_go_over_grpc_as_over_http() {
    let a = Awr::new();
    let grpc = Receiver::grpc();
    let out = a.run_in(
        &crate::util::repo_root(),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &grpc.url),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ],
        &["run", "examples/summarize.yaml"],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let run = crate::util::run_id_of(&out);
    let live = grpc.spans();
    assert_eq!(live.len(), 5, "{live:?}");

    let again = Receiver::grpc();
    let out = a.run(&[
        "trace",
        "export",
        &run,
        "--endpoint",
        &again.url,
        "--protocol",
        "grpc",
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let http = Receiver::http();
    let out = a.run(&["trace", "export", &run, "--endpoint", &http.url]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let (live, grpc, http) = (by_id(live), by_id(again.spans()), by_id(http.spans()));
    assert!(live == grpc && grpc == http, "the same spans every way");
}

/// A text attribute of a span as a collector decodes it.
fn text_attribute(span: &opentelemetry_proto::tonic::trace::v1::Span, key: &str) -> Option<String> {
    use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref()?.value.as_ref())
        .and_then(|v| match v {
            Any::StringValue(s) => Some(s.clone()),
            _ => None,
        })
}

/// Content is captured only when the conventions' variable says so, and
/// what is captured is redacted as the record is: a key value in a
/// prompt reaches no collector.
#[test]
fn captured_content_is_redacted_and_absent_unless_asked_for() {
    const KEY: &str = "sk-ant-5c8d20e9f1b7";
    let prompt = format!("- the key is {KEY}\n- Fact two (source B)");
    for capture in [false, true] {
        let a = Awr::new();
        let live = Receiver::http();
        let mut env = vec![
            ("OTEL_EXPORTER_OTLP_ENDPOINT", live.url.as_str()),
            ("ANTHROPIC_API_KEY", KEY),
        ];
        if capture {
            env.push(("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true"));
        }
        let out = a.run_in(
            &crate::util::repo_root(),
            &env,
            &[
                "run",
                "examples/summarize.yaml",
                &format!("--input-text={prompt}"),
            ],
        );
        assert_eq!(out.code, 0, "{}", out.stderr);
        let spans = live.spans();
        let everything = format!("{spans:?}");
        assert!(!everything.contains(KEY), "a key value left in a span");
        let chat = spans.iter().find(|s| s.name.starts_with("chat")).unwrap();
        let sent = text_attribute(chat, "gen_ai.input.messages");
        let answered = text_attribute(chat, "gen_ai.output.messages");
        if capture {
            let sent = sent.expect("the prompt is captured");
            assert!(sent.contains("Fact two (source B)"), "{sent}");
            assert!(sent.contains("[redacted]"), "{sent}");
            assert!(answered.is_some());
            // `awr trace show` captures the same, from the redacted log.
            let run = crate::util::run_id_of(&out);
            let shown = a.run_in(
                &crate::util::repo_root(),
                &[("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")],
                &["trace", "show", &run, "--json"],
            );
            assert!(
                shown.stdout.contains("gen_ai.input.messages"),
                "{}",
                shown.stdout
            );
            assert!(!shown.stdout.contains(KEY));
        } else {
            assert_eq!(
                (sent, answered),
                (None, None),
                "no content unless asked for"
            );
            assert!(!everything.contains("Fact two"), "{everything}");
        }
    }
}

/// `awr trace export --since T` sends what ended since then: with no run
/// named, every run active since then; with a run, only its spans that
/// ended since then.
#[test]
fn an_export_since_a_time_sends_what_ended_since_then() {
    let a = Awr::new();
    let first = a.completed_run("examples/summarize.yaml");
    let second = a.completed_run("examples/summarize.yaml");
    let receiver = Receiver::http();
    let out = a.run(&[
        "trace",
        "export",
        "--since",
        "1h",
        "--endpoint",
        &receiver.url,
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    for run in [&first, &second] {
        assert!(
            out.stdout.contains(&format!("run {run}: 5 spans exported")),
            "{}",
            out.stdout
        );
    }
    assert_eq!(receiver.spans().len(), 10);

    let future = "2999-01-01T00:00:00Z";
    let out = a.run(&[
        "trace",
        "export",
        &first,
        "--since",
        future,
        "--endpoint",
        &receiver.url,
    ]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("0 spans exported"), "{}", out.stdout);
    let none = a.run(&[
        "trace",
        "export",
        "--since",
        future,
        "--endpoint",
        &receiver.url,
    ]);
    assert_eq!(none.code, 0, "{}", none.stderr);
    assert!(none.stdout.contains("no run was active"), "{}", none.stdout);
    let neither = a.run(&["trace", "export", "--endpoint", &receiver.url]);
    assert_eq!(
        neither.code, 2,
        "a run or --since is needed: {}",
        neither.stderr
    );
}

/// A fake Claude Code that notes the trace context it was given, then
/// answers (its stream-json lines).
const NOTING_CLAUDE: &str = r#"#!/bin/sh
echo "${TRACEPARENT:-none}" >> "$NOTED"
echo '{"type":"system","subtype":"init","session_id":"s-1","model":"m"}'
echo '{"type":"result","subtype":"success","is_error":false,"result":"done","session_id":"s-1","num_turns":1,"duration_ms":5,"usage":{"input_tokens":10,"output_tokens":4}}'
"#;

/// A CLI agent of a run whose spans are exported gets its call's span as
/// `TRACEPARENT`, so its own spans join the run's trace under the call;
/// without the export it gets none.
#[test]
fn a_cli_agent_gets_its_calls_span_as_its_trace_parent() {
    use std::os::unix::fs::PermissionsExt;
    let a = Awr::new();
    let dir = a.dir.path();
    let cli = dir.join("claude");
    std::fs::write(&cli, NOTING_CLAUDE).unwrap();
    std::fs::set_permissions(&cli, std::fs::Permissions::from_mode(0o755)).unwrap();
    let flow = dir.join("flow.yaml");
    std::fs::write(
        &flow,
        format!(
            "name: noted\nagents:\n  coder: {{provider: claude-code, executable: '{}'}}\nsteps: [{{id: plan, agent: coder}}, {{id: build, agent: coder}}]\n",
            cli.display()
        ),
    )
    .unwrap();
    let noted = dir.join("noted");
    let noted_str = noted.to_str().unwrap();
    let live = Receiver::http();
    let flow_str = flow.to_str().unwrap();
    let out = a.run_in(
        dir,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &live.url),
            ("NOTED", noted_str),
        ],
        &["run", flow_str],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let run = crate::util::run_id_of(&out);
    let chats: Vec<String> = live
        .spans()
        .iter()
        .filter(|s| s.name.starts_with("chat"))
        .map(|s| format!("00-{}-{}-01", hex(&s.trace_id), hex(&s.span_id)))
        .collect();
    let given: Vec<String> = std::fs::read_to_string(&noted)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(given.len(), 2, "{given:?}");
    assert_eq!(given, chats, "each call's own span");
    assert!(given[0].contains(&run.replace('-', "")));

    std::fs::remove_file(&noted).unwrap();
    let out = a.run_in(dir, &[("NOTED", noted_str)], &["run", flow_str]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let given = std::fs::read_to_string(&noted).unwrap();
    assert_eq!(given, "none\nnone\n", "no export, no trace context");
}

/// A fork's first writer sends the spans of the log it was copied from
/// (under the fork's ids, which no writer sent before): a live fork
/// delivers every span a later export of it does.
#[test]
fn a_fork_exports_the_spans_of_its_copied_log_too() {
    let a = Awr::new();
    let run = a.completed_run("examples/summarize.yaml");
    let events = a.events(&run);
    let cut = events
        .iter()
        .find(|e| e["type"] == "node:completed")
        .and_then(|e| e["offset"].as_u64())
        .unwrap();
    let live = Receiver::http();
    let out = a.run_in(
        &crate::util::repo_root(),
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &live.url)],
        &["fork", &run, "--at", &cut.to_string()],
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let fork = crate::util::run_id_of(&out);
    let later = Receiver::http();
    let export = a.run(&["trace", "export", &fork, "--endpoint", &later.url]);
    assert_eq!(export.code, 0, "{}", export.stderr);
    let (sent, exported) = (by_id(live.spans()), by_id(later.spans()));
    assert_eq!(sent.len(), 5, "the copied node run's spans and the rest");
    assert!(sent == exported, "a live span differs from its export");
}

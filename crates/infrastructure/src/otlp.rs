//! Spans as OTLP carries them (`domain::trace` → OpenTelemetry's own
//! protobuf types, `opentelemetry-proto`): the request a collector gets,
//! its protobuf bytes (OTLP over HTTP or gRPC) and its OTLP/JSON form.
//!
//! Only translation happens here: what a span is, its ids and attributes,
//! is decided by the projection, so every exporter sends the same spans.

use domain::Timestamp;
use domain::trace::{AttrValue, Attributes, Span, SpanKind, SpanStatus};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Status, span, status};
use prost::Message;

/// The instrumentation scope the spans are reported under.
const SCOPE: &str = "awr";

/// `service.name` unless `OTEL_SERVICE_NAME` says otherwise.
pub const DEFAULT_SERVICE: &str = "awr";

/// One request holding the spans of `spans` that have ended (a span in
/// progress is sent once it ends), from the service `service`.
pub fn request(spans: &[Span], service: &str) -> ExportTraceServiceRequest {
    let spans = spans
        .iter()
        .filter_map(|span| Some(to_proto(span, span.end?)))
        .collect();
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![
                    key_value("service.name", &AttrValue::Str(service.to_owned())),
                    key_value(
                        "service.version",
                        &AttrValue::Str(env!("CARGO_PKG_VERSION").to_owned()),
                    ),
                ],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: SCOPE.to_owned(),
                    version: env!("CARGO_PKG_VERSION").to_owned(),
                    ..Default::default()
                }),
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// The request's protobuf bytes, as OTLP/HTTP (`application/x-protobuf`)
/// and OTLP/gRPC carry them.
pub fn protobuf(request: &ExportTraceServiceRequest) -> Vec<u8> {
    request.encode_to_vec()
}

/// The request in OTLP/JSON (ids in hex, times as decimal strings).
pub fn json(request: &ExportTraceServiceRequest) -> Result<String, serde_json::Error> {
    serde_json::to_string(request)
}

fn nanos(t: Timestamp) -> u64 {
    u64::try_from(t.as_millis())
        .unwrap_or(0)
        .saturating_mul(1_000_000)
}

fn to_proto(span: &Span, end: Timestamp) -> opentelemetry_proto::tonic::trace::v1::Span {
    let status = match &span.status {
        SpanStatus::Unset => None,
        SpanStatus::Error(message) => Some(Status {
            message: message.clone(),
            code: status::StatusCode::Error as i32,
        }),
    };
    opentelemetry_proto::tonic::trace::v1::Span {
        trace_id: span.trace_id.0.to_vec(),
        span_id: span.span_id.0.to_vec(),
        parent_span_id: span.parent.map(|p| p.0.to_vec()).unwrap_or_default(),
        name: span.name.clone(),
        kind: match span.kind {
            SpanKind::Internal => span::SpanKind::Internal,
            SpanKind::Client => span::SpanKind::Client,
        } as i32,
        start_time_unix_nano: nanos(span.start),
        end_time_unix_nano: nanos(end),
        attributes: key_values(&span.attributes),
        events: span
            .events
            .iter()
            .map(|event| span::Event {
                time_unix_nano: nanos(event.time),
                name: event.name.clone(),
                attributes: key_values(&event.attributes),
                ..Default::default()
            })
            .collect(),
        links: span
            .links
            .iter()
            .map(|link| span::Link {
                trace_id: link.trace_id.0.to_vec(),
                span_id: link.span_id.0.to_vec(),
                attributes: key_values(&link.attributes),
                ..Default::default()
            })
            .collect(),
        status,
        ..Default::default()
    }
}

fn key_values(attributes: &Attributes) -> Vec<KeyValue> {
    attributes
        .0
        .iter()
        .map(|(key, value)| key_value(key, value))
        .collect()
}

fn key_value(key: &str, value: &AttrValue) -> KeyValue {
    let value = match value {
        AttrValue::Str(s) => any_value::Value::StringValue(s.clone()),
        AttrValue::Int(n) => any_value::Value::IntValue(*n),
        AttrValue::Float(x) => any_value::Value::DoubleValue(*x),
        AttrValue::Bool(b) => any_value::Value::BoolValue(*b),
    };
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use domain::RunId;
    use domain::trace::{SpanEvent, SpanLink, TraceId, root_span_id, span_id};
    use serde_json::Value;

    use super::*;

    fn spans() -> Vec<Span> {
        let run: RunId = "00000000-0000-4000-8000-0000000000ab".parse().unwrap();
        let mut attributes = Attributes::default();
        attributes.int("gen_ai.usage.input_tokens", 42);
        attributes.text("gen_ai.operation.name", "chat");
        attributes.set("awr.cost_usd", AttrValue::Float(0.5));
        let mut why = Attributes::default();
        why.text("awr.link", "retry_of");
        let chat = Span {
            trace_id: TraceId::of_run(run),
            span_id: span_id(run, "3"),
            parent: Some(root_span_id(run)),
            name: "chat m".into(),
            kind: SpanKind::Client,
            start: Timestamp::from_millis(1_000),
            end: Some(Timestamp::from_millis(2_500)),
            attributes,
            status: SpanStatus::Error("boom".into()),
            events: vec![SpanEvent {
                name: "exception".into(),
                time: Timestamp::from_millis(2_000),
                attributes: Attributes::default(),
            }],
            links: vec![SpanLink {
                trace_id: TraceId::of_run(run),
                span_id: span_id(run, "2"),
                attributes: why,
            }],
        };
        let open = Span {
            span_id: span_id(run, "4"),
            end: None,
            ..chat.clone()
        };
        vec![chat, open]
    }

    /// The bytes decode, by OTel's own schema, to the span as projected;
    /// a span in progress is not sent.
    #[test]
    fn spans_reach_the_wire_as_projected() {
        let spans = spans();
        let request = request(&spans, "team-awr");
        let bytes = protobuf(&request);
        let back = ExportTraceServiceRequest::decode(bytes.as_slice()).unwrap();
        assert_eq!(back, request);
        let resource = &back.resource_spans[0];
        let sent = &resource.scope_spans[0].spans;
        assert_eq!(sent.len(), 1, "the span in progress waits");
        let chat = &sent[0];
        assert_eq!(chat.trace_id, spans[0].trace_id.0.to_vec());
        assert_eq!(chat.parent_span_id, spans[0].parent.unwrap().0.to_vec());
        assert_eq!(chat.kind, span::SpanKind::Client as i32);
        assert_eq!(chat.start_time_unix_nano, 1_000_000_000);
        assert_eq!(chat.end_time_unix_nano, 2_500_000_000);
        assert_eq!(
            chat.status.as_ref().unwrap().code,
            status::StatusCode::Error as i32
        );
        assert_eq!(chat.links[0].span_id, spans[0].links[0].span_id.0.to_vec());
        let tokens = chat
            .attributes
            .iter()
            .find(|kv| kv.key == "gen_ai.usage.input_tokens")
            .and_then(|kv| kv.value.clone())
            .and_then(|v| v.value);
        assert_eq!(tokens, Some(any_value::Value::IntValue(42)));
        let service = &resource.resource.as_ref().unwrap().attributes[0];
        assert_eq!(service.key, "service.name");
    }

    /// OTLP/JSON: ids in hex, as the specification says.
    #[test]
    fn the_json_form_has_hex_ids() {
        let spans = spans();
        let text = json(&request(&spans, DEFAULT_SERVICE)).unwrap();
        let value: Value = serde_json::from_str(&text).unwrap();
        let span = &value["resourceSpans"][0]["scopeSpans"][0]["spans"][0];
        assert_eq!(span["traceId"], spans[0].trace_id.to_string());
        assert_eq!(span["spanId"], spans[0].span_id.to_string());
        assert_eq!(span["name"], "chat m");
    }
}

//! Spans as OTLP carries them (`domain::trace` → the OpenTelemetry SDK's
//! `SpanData`): sent by the OTLP exporter (`opentelemetry-otlp`, gRPC or
//! HTTP with protobuf), or turned into OTLP's own protobuf types
//! (`opentelemetry-proto`) for their bytes and their OTLP/JSON form.
//!
//! Only translation happens here, once, into `SpanData`: what a span is,
//! its ids and attributes, is decided by the projection, so every way out
//! sends the same spans.

mod export;
mod live;
mod metrics;

use std::borrow::Cow;
use std::time::{Duration, SystemTime};

use domain::Timestamp;
use domain::trace::{AttrValue, Attributes, Span, SpanKind, SpanStatus};
use opentelemetry::trace::{self as otel, SpanContext, TraceFlags, TraceState};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};
use prost::Message;

pub use export::{ExportError, Exporter};
pub use live::{LiveExport, Outlets, QueueSettings, captures_content, wanted};
pub use metrics::{Metrics, metrics_wanted};

/// The instrumentation scope the spans are reported under.
const SCOPE: &str = "awr";

/// `service.name` unless `OTEL_SERVICE_NAME` says otherwise.
pub const DEFAULT_SERVICE: &str = "awr";

/// The resource spans come from: the service `service`, this awr's version.
pub fn resource(service: &str) -> Resource {
    Resource::builder_empty()
        .with_service_name(service.to_owned())
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .build()
}

/// The spans of `spans` that have ended, as the SDK hands spans to an
/// exporter; a span in progress is sent once it ends.
pub fn span_data(spans: &[Span]) -> Vec<SpanData> {
    spans
        .iter()
        .filter_map(|span| Some(to_span_data(span, span.end?)))
        .collect()
}

/// One request holding the spans of `spans` that have ended, from `resource`.
pub fn request(spans: &[Span], resource: &Resource) -> ExportTraceServiceRequest {
    let resource = ResourceAttributesWithSchema::from(resource);
    let mut resource_spans = group_spans_by_resource_and_scope(span_data(spans), &resource);
    // A resource keeps its attributes in a hash map: sorted, the same
    // spans always make the same request.
    for spans in &mut resource_spans {
        if let Some(resource) = &mut spans.resource {
            resource.attributes.sort_by(|a, b| a.key.cmp(&b.key));
        }
    }
    ExportTraceServiceRequest { resource_spans }
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

fn time(t: Timestamp) -> SystemTime {
    let millis = u64::try_from(t.as_millis()).unwrap_or(0);
    SystemTime::UNIX_EPOCH + Duration::from_millis(millis)
}

fn context(trace: domain::trace::TraceId, span: domain::trace::SpanId) -> SpanContext {
    SpanContext::new(
        otel::TraceId::from_bytes(trace.0),
        otel::SpanId::from_bytes(span.0),
        TraceFlags::SAMPLED,
        false,
        TraceState::default(),
    )
}

fn to_span_data(span: &Span, end: Timestamp) -> SpanData {
    let mut events = SpanEvents::default();
    events.events = span
        .events
        .iter()
        .map(|event| {
            otel::Event::new(
                event.name.clone(),
                time(event.time),
                key_values(&event.attributes),
                0,
            )
        })
        .collect();
    let mut links = SpanLinks::default();
    links.links = span
        .links
        .iter()
        .map(|link| {
            otel::Link::new(
                context(link.trace_id, link.span_id),
                key_values(&link.attributes),
                0,
            )
        })
        .collect();
    SpanData {
        span_context: context(span.trace_id, span.span_id),
        parent_span_id: span
            .parent
            .map_or(otel::SpanId::INVALID, |p| otel::SpanId::from_bytes(p.0)),
        parent_span_is_remote: false,
        span_kind: match span.kind {
            SpanKind::Internal => otel::SpanKind::Internal,
            SpanKind::Client => otel::SpanKind::Client,
        },
        name: Cow::Owned(span.name.clone()),
        start_time: time(span.start),
        end_time: time(end),
        attributes: key_values(&span.attributes),
        dropped_attributes_count: 0,
        events,
        links,
        status: match &span.status {
            SpanStatus::Unset => otel::Status::Unset,
            SpanStatus::Error(message) => otel::Status::error(message.clone()),
        },
        instrumentation_scope: InstrumentationScope::builder(SCOPE)
            .with_version(env!("CARGO_PKG_VERSION"))
            .build(),
    }
}

fn key_values(attributes: &Attributes) -> Vec<KeyValue> {
    attributes
        .0
        .iter()
        .map(|(key, value)| {
            let key = *key;
            match value {
                AttrValue::Str(s) => KeyValue::new(key, s.clone()),
                AttrValue::Int(n) => KeyValue::new(key, *n),
                AttrValue::Float(x) => KeyValue::new(key, *x),
                AttrValue::Bool(b) => KeyValue::new(key, *b),
            }
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use domain::RunId;
    use domain::trace::{SpanEvent, SpanLink, TraceId, root_span_id, span_id};
    use opentelemetry_proto::tonic::common::v1::any_value;
    use opentelemetry_proto::tonic::trace::v1::{span, status};
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
        let request = request(&spans, &resource("team-awr"));
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
        let service = resource
            .resource
            .as_ref()
            .unwrap()
            .attributes
            .iter()
            .find(|kv| kv.key == "service.name");
        assert_eq!(
            service
                .and_then(|kv| kv.value.clone())
                .and_then(|v| v.value),
            Some(any_value::Value::StringValue("team-awr".into()))
        );
    }

    /// OTLP/JSON: ids in hex, as the specification says.
    #[test]
    fn the_json_form_has_hex_ids() {
        let spans = spans();
        let text = json(&request(&spans, &resource(DEFAULT_SERVICE))).unwrap();
        let value: Value = serde_json::from_str(&text).unwrap();
        let span = &value["resourceSpans"][0]["scopeSpans"][0]["spans"][0];
        assert_eq!(span["traceId"], spans[0].trace_id.to_string());
        assert_eq!(span["spanId"], spans[0].span_id.to_string());
        assert_eq!(span["name"], "chat m");
    }
}

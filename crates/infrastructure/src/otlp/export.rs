//! Sending spans to a collector: the OTLP exporter of `opentelemetry-otlp`,
//! over gRPC or HTTP with protobuf, as the standard `OTEL_EXPORTER_OTLP_*`
//! variables (or the caller) say.

use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::trace::{SpanData, SpanExporter as _};

/// The path OTLP/HTTP takes traces at, added to an endpoint given without one.
const TRACES_PATH: &str = "/v1/traces";

/// The path OTLP/HTTP takes metrics at.
pub(super) const METRICS_PATH: &str = "/v1/metrics";

/// Why spans could not be sent.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExportError {
    /// The protocol asked for is not one awr speaks.
    #[error("OTLP protocol `{0}`: use grpc or http/protobuf")]
    Protocol(String),
    /// The exporter could not be made (a bad endpoint, a bad header).
    #[error("cannot set up the OTLP exporter: {0}")]
    Build(String),
    /// The collector did not take them (down, refused, timed out).
    #[error("the collector did not take the spans: {0}")]
    Send(String),
}

/// An OTLP exporter of spans.
#[derive(Debug)]
pub struct Exporter {
    inner: opentelemetry_otlp::SpanExporter,
    /// `grpc` or `http/protobuf`, for messages.
    protocol: &'static str,
}

impl Exporter {
    /// An exporter from `service`, over `protocol` (`grpc` or
    /// `http/protobuf`; else `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`, else
    /// `OTEL_EXPORTER_OTLP_PROTOCOL`, else `http/protobuf`, as the
    /// specification says) to `endpoint` (else the variables', else the
    /// protocol's default on localhost). An HTTP endpoint given without a
    /// path gets `/v1/traces`.
    pub fn new(
        endpoint: Option<&str>,
        protocol: Option<&str>,
        service: &str,
    ) -> Result<Self, ExportError> {
        let protocol = protocol_of(protocol, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL");
        let build = |e: opentelemetry_otlp::ExporterBuildError| ExportError::Build(e.to_string());
        // reqwest is built without a default crypto provider (ring is
        // lighter to build than aws-lc); an earlier install is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let (mut inner, protocol) = match protocol.as_str() {
            "grpc" => {
                let mut builder = opentelemetry_otlp::SpanExporter::builder()
                    .with_tonic()
                    .with_protocol(Protocol::Grpc);
                if let Some(endpoint) = endpoint {
                    builder = builder.with_endpoint(endpoint);
                }
                (builder.build().map_err(build)?, "grpc")
            }
            "http/protobuf" => {
                let mut builder = opentelemetry_otlp::SpanExporter::builder()
                    .with_http()
                    .with_protocol(Protocol::HttpBinary);
                if let Some(endpoint) = endpoint {
                    builder = builder.with_endpoint(http_endpoint(endpoint, TRACES_PATH));
                }
                (builder.build().map_err(build)?, "http/protobuf")
            }
            other => return Err(ExportError::Protocol(other.to_owned())),
        };
        inner.set_resource(&super::resource(service));
        Ok(Self { inner, protocol })
    }

    /// Sends `spans` in one request; they are the collector's once this
    /// returns `Ok`.
    pub async fn export(&self, spans: Vec<SpanData>) -> Result<(), ExportError> {
        if spans.is_empty() {
            return Ok(());
        }
        self.inner
            .export(spans)
            .await
            .map_err(|e| ExportError::Send(format!("{} ({})", e, self.protocol)))
    }
}

/// The protocol `given`, else the one the signal's variable `signal`
/// names, else `OTEL_EXPORTER_OTLP_PROTOCOL`'s, else `http/protobuf`, as
/// the specification says.
pub(super) fn protocol_of(given: Option<&str>, signal: &str) -> String {
    match given {
        Some(p) => p.to_owned(),
        None => [signal, "OTEL_EXPORTER_OTLP_PROTOCOL"]
            .iter()
            .find_map(|var| std::env::var(var).ok().filter(|v| !v.is_empty()))
            .unwrap_or_else(|| "http/protobuf".to_owned()),
    }
}

/// Whether the variables `var` reads ask for a signal: an OTLP endpoint
/// is named (the general one or the signal's, `endpoint`), and neither
/// `OTEL_SDK_DISABLED=true` nor the signal's `exporter=none` turns it off.
pub(super) fn signal_wanted(
    var: impl Fn(&str) -> Option<String>,
    endpoint: &str,
    exporter: &str,
) -> bool {
    let set = |name: &str| var(name).is_some_and(|v| !v.trim().is_empty());
    let is =
        |name: &str, value: &str| var(name).is_some_and(|v| v.trim().eq_ignore_ascii_case(value));
    (set("OTEL_EXPORTER_OTLP_ENDPOINT") || set(endpoint))
        && !is("OTEL_SDK_DISABLED", "true")
        && !is(exporter, "none")
}

/// The variables of `pairs`, as a test's environment.
#[cfg(test)]
pub(super) fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: std::collections::HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |name| map.get(name).cloned()
}

/// `endpoint` with OTLP/HTTP's path of a signal (`path`) when it names none.
pub(super) fn http_endpoint(endpoint: &str, path: &str) -> String {
    let trimmed = endpoint.trim_end_matches('/');
    let has_path = trimmed
        .split_once("://")
        .map_or(trimmed, |(_, rest)| rest)
        .contains('/');
    if has_path {
        endpoint.to_owned()
    } else {
        format!("{trimmed}{path}")
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn an_http_endpoint_without_a_path_gets_the_traces_path() {
        assert_eq!(
            http_endpoint("http://127.0.0.1:4318", TRACES_PATH),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            http_endpoint("http://127.0.0.1:4318/", TRACES_PATH),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            http_endpoint("http://collector/otlp/v1/traces", TRACES_PATH),
            "http://collector/otlp/v1/traces"
        );
    }

    #[test]
    fn an_unknown_protocol_is_refused_by_name() {
        let e = Exporter::new(None, Some("carrier-pigeon"), "awr").unwrap_err();
        assert!(e.to_string().contains("carrier-pigeon"), "{e}");
    }
}

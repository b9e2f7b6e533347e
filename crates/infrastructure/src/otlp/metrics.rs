//! Metrics sent live ([`Metrics`]): what each ended span counts for
//! (`domain::trace::metrics`) goes into the OpenTelemetry SDK's
//! histograms, which the live export's thread collects and sends over the
//! OTLP metrics exporter every `OTEL_METRIC_EXPORT_INTERVAL`, and once more
//! when it stops.
//!
//! Only live: a count of what happened while this process ran. `awr trace
//! export` sends a run's spans again, never its measurements (a collector
//! would count them twice).

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use domain::trace::Span;
use domain::trace::metrics::{Instrument, Value, measure};
use opentelemetry::metrics::{Histogram, MeterProvider as _};
use opentelemetry_otlp::{Protocol, WithExportConfig as _};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter as _;
use opentelemetry_sdk::metrics::reader::MetricReader;
use opentelemetry_sdk::metrics::{
    InstrumentKind, ManualReader, Pipeline, SdkMeterProvider, Temporality,
};

use super::export::{ExportError, METRICS_PATH, http_endpoint, protocol_of, signal_wanted};

/// Whether the standard variables ask for metrics: an OTLP endpoint is
/// named (`OTEL_EXPORTER_OTLP_ENDPOINT` or
/// `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`), and neither
/// `OTEL_SDK_DISABLED=true` nor `OTEL_METRICS_EXPORTER=none` turns them off.
pub fn metrics_wanted() -> bool {
    wanted_by(|name| std::env::var(name).ok())
}

fn wanted_by(var: impl Fn(&str) -> Option<String>) -> bool {
    signal_wanted(
        var,
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        "OTEL_METRICS_EXPORTER",
    )
}

/// How often metrics are sent: `OTEL_METRIC_EXPORT_INTERVAL` milliseconds
/// (60,000 by default, as the specification says).
fn interval_by(var: impl Fn(&str) -> Option<String>) -> Result<Duration, ExportError> {
    const NAME: &str = "OTEL_METRIC_EXPORT_INTERVAL";
    match var(NAME).filter(|v| !v.trim().is_empty()) {
        None => Ok(Duration::from_secs(60)),
        Some(v) => v
            .trim()
            .parse::<u64>()
            .ok()
            .filter(|n| *n > 0)
            .map(Duration::from_millis)
            .ok_or_else(|| {
                ExportError::Build(format!("{NAME}={v}: expected a positive whole number"))
            }),
    }
}

/// Cumulative (the default) or delta, as
/// `OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE` says (`lowmemory`
/// is delta for histograms, all awr has).
fn temporality_by(var: impl Fn(&str) -> Option<String>) -> Result<Temporality, ExportError> {
    const NAME: &str = "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE";
    match var(NAME).map(|v| v.trim().to_ascii_lowercase()).as_deref() {
        None | Some("") | Some("cumulative") => Ok(Temporality::Cumulative),
        Some("delta") | Some("lowmemory") => Ok(Temporality::Delta),
        Some(other) => Err(ExportError::Build(format!(
            "{NAME}={other}: expected cumulative, delta or lowmemory"
        ))),
    }
}

/// One instrument of the SDK.
enum Recorder {
    Tokens(Histogram<u64>),
    Seconds(Histogram<f64>),
}

/// The histograms, the reader that collects them and the exporter that
/// sends them.
pub struct Metrics {
    provider: SdkMeterProvider,
    reader: Arc<ManualReader>,
    exporter: opentelemetry_otlp::MetricExporter,
    recorders: HashMap<Instrument, Recorder>,
    interval: Duration,
    protocol: &'static str,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("interval", &self.interval)
            .field("protocol", &self.protocol)
            .finish_non_exhaustive()
    }
}

impl Metrics {
    /// Metrics of `service` sent as the standard variables say: to
    /// `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` (else the general endpoint
    /// with `/v1/metrics` over HTTP), over
    /// `OTEL_EXPORTER_OTLP_METRICS_PROTOCOL` (else
    /// `OTEL_EXPORTER_OTLP_PROTOCOL`, else `http/protobuf`).
    pub fn from_env(service: &str) -> Result<Self, ExportError> {
        Self::new(None, None, service)
    }

    /// Metrics of `service` sent to `endpoint` over `protocol` (each else
    /// as the variables say: [`Metrics::from_env`]); an HTTP endpoint given
    /// without a path gets `/v1/metrics`. A gRPC exporter belongs to the
    /// runtime it is made on.
    pub fn new(
        endpoint: Option<&str>,
        protocol: Option<&str>,
        service: &str,
    ) -> Result<Self, ExportError> {
        let var = |name: &str| std::env::var(name).ok();
        let protocol = protocol_of(protocol, "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL");
        let temporality = temporality_by(var)?;
        let build = |e: opentelemetry_otlp::ExporterBuildError| ExportError::Build(e.to_string());
        let _ = rustls::crypto::ring::default_provider().install_default();
        let (exporter, protocol) = match protocol.as_str() {
            "grpc" => {
                let mut builder = opentelemetry_otlp::MetricExporter::builder()
                    .with_tonic()
                    .with_protocol(Protocol::Grpc)
                    .with_temporality(temporality);
                if let Some(endpoint) = endpoint {
                    builder = builder.with_endpoint(endpoint);
                }
                (builder.build().map_err(build)?, "grpc")
            }
            "http/protobuf" => {
                let mut builder = opentelemetry_otlp::MetricExporter::builder()
                    .with_http()
                    .with_protocol(Protocol::HttpBinary)
                    .with_temporality(temporality);
                if let Some(endpoint) = endpoint {
                    builder = builder.with_endpoint(http_endpoint(endpoint, METRICS_PATH));
                }
                (builder.build().map_err(build)?, "http/protobuf")
            }
            other => return Err(ExportError::Protocol(other.to_owned())),
        };
        let reader = Arc::new(
            ManualReader::builder()
                .with_temporality(temporality)
                .build(),
        );
        let provider = SdkMeterProvider::builder()
            .with_resource(super::resource(service))
            .with_reader(Shared(Arc::clone(&reader)))
            .build();
        let meter = provider.meter_with_scope(
            opentelemetry::InstrumentationScope::builder(super::SCOPE)
                .with_version(env!("CARGO_PKG_VERSION"))
                .build(),
        );
        let recorders = Instrument::ALL
            .into_iter()
            .map(|instrument| {
                let boundaries = instrument.boundaries().to_vec();
                let recorder = match instrument {
                    Instrument::TokenUsage => Recorder::Tokens(
                        meter
                            .u64_histogram(instrument.name())
                            .with_unit(instrument.unit())
                            .with_description(instrument.description())
                            .with_boundaries(boundaries)
                            .build(),
                    ),
                    _ => Recorder::Seconds(
                        meter
                            .f64_histogram(instrument.name())
                            .with_unit(instrument.unit())
                            .with_description(instrument.description())
                            .with_boundaries(boundaries)
                            .build(),
                    ),
                };
                (instrument, recorder)
            })
            .collect();
        Ok(Self {
            provider,
            reader,
            exporter,
            recorders,
            interval: interval_by(var)?,
            protocol,
        })
    }

    /// How often they are sent.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// Counts what `span` counts for.
    pub fn record(&self, span: &Span) {
        for m in measure(span) {
            let attributes = super::key_values(&m.attributes);
            match (self.recorders.get(&m.instrument), m.value) {
                (Some(Recorder::Tokens(h)), Value::Tokens(n)) => h.record(n, &attributes),
                (Some(Recorder::Seconds(h)), Value::Seconds(s)) => h.record(s, &attributes),
                // An instrument whose values are of the other kind: none.
                _ => {}
            }
        }
    }

    /// Collects what was counted and sends it; a failure is logged (the
    /// counts stay: a cumulative one goes with the next send).
    pub async fn send(&self) {
        let mut collected = ResourceMetrics::default();
        if let Err(e) = self.reader.collect(&mut collected) {
            tracing::warn!(error = %e, "metrics could not be collected");
            return;
        }
        if collected.scope_metrics().next().is_none() {
            return;
        }
        if let Err(e) = self.exporter.export(&collected).await {
            tracing::warn!(protocol = self.protocol, error = %e, "metrics were not exported");
        }
    }

    /// Stops the meter provider (after the last [`Metrics::send`]).
    pub fn shutdown(&self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::debug!(error = %e, "the meter provider did not shut down cleanly");
        }
    }
}

/// The reader the provider is given, shared with [`Metrics::send`], which
/// calls it: the provider takes its readers by value.
#[derive(Debug)]
struct Shared(Arc<ManualReader>);

impl MetricReader for Shared {
    fn register_pipeline(&self, pipeline: Weak<Pipeline>) {
        self.0.register_pipeline(pipeline);
    }

    fn collect(&self, rm: &mut ResourceMetrics) -> OTelSdkResult {
        self.0.collect(rm)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }

    fn temporality(&self, kind: InstrumentKind) -> Temporality {
        self.0.temporality(kind)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::export::vars;
    use super::*;

    #[test]
    fn an_endpoint_turns_metrics_on_and_the_standard_switches_turn_them_off() {
        assert!(!wanted_by(vars(&[])));
        let on = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318");
        assert!(wanted_by(vars(&[on])));
        assert!(wanted_by(vars(&[(
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
            "http://127.0.0.1:4318/v1/metrics"
        )])));
        // A traces endpoint is not a metrics one.
        assert!(!wanted_by(vars(&[(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "http://127.0.0.1:4318/v1/traces"
        )])));
        assert!(!wanted_by(vars(&[on, ("OTEL_SDK_DISABLED", "true")])));
        assert!(!wanted_by(vars(&[on, ("OTEL_METRICS_EXPORTER", "NONE")])));
        assert!(wanted_by(vars(&[on, ("OTEL_TRACES_EXPORTER", "none")])));
    }

    #[test]
    fn the_interval_and_temporality_come_from_the_variables_and_a_bad_one_is_named() {
        assert_eq!(interval_by(vars(&[])).unwrap(), Duration::from_secs(60));
        let set = vars(&[("OTEL_METRIC_EXPORT_INTERVAL", "250")]);
        assert_eq!(interval_by(set).unwrap(), Duration::from_millis(250));
        for bad in ["0", "soon"] {
            let e = interval_by(vars(&[("OTEL_METRIC_EXPORT_INTERVAL", bad)])).unwrap_err();
            assert!(e.to_string().contains("OTEL_METRIC_EXPORT_INTERVAL"), "{e}");
        }
        let name = "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE";
        assert_eq!(temporality_by(vars(&[])).unwrap(), Temporality::Cumulative);
        assert_eq!(
            temporality_by(vars(&[(name, "Delta")])).unwrap(),
            Temporality::Delta
        );
        assert_eq!(
            temporality_by(vars(&[(name, "lowmemory")])).unwrap(),
            Temporality::Delta
        );
        let e = temporality_by(vars(&[(name, "sometimes")])).unwrap_err();
        assert!(e.to_string().contains(name), "{e}");
    }
}

//! An OTLP receiver on 127.0.0.1 ([`Receiver`]), over HTTP with protobuf
//! or gRPC, for traces and metrics: every request is decoded by
//! OpenTelemetry's own protobuf schema (`opentelemetry-proto`, its
//! generated gRPC services), so a test sees the bytes a collector would
//! get, not a mock of the exporter.

use std::sync::{Arc, Mutex, PoisonError};

use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::metrics::v1::Metric;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

/// What was received, in order, as it came: decoded when a test reads it,
/// so that a bench's receiver costs the machine little.
#[derive(Default)]
struct Kept {
    traces: Mutex<Vec<Vec<u8>>>,
    metrics: Mutex<Vec<Vec<u8>>>,
}

/// A collector's receiving end on 127.0.0.1, until dropped.
pub struct Receiver {
    /// Where it listens: `http://127.0.0.1:PORT`.
    pub url: String,
    kept: Arc<Kept>,
    _runtime: tokio::runtime::Runtime,
}

impl Receiver {
    /// An OTLP/HTTP receiver: `/v1/traces` and `/v1/metrics`, protobuf.
    ///
    /// # Panics
    /// When it cannot listen.
    pub fn http() -> Self {
        let (runtime, listener, url) = listen();
        let kept = Arc::new(Kept::default());
        let (traces, metrics) = (Arc::clone(&kept), Arc::clone(&kept));
        // An empty response is an empty Export*ServiceResponse.
        let answer = || {
            (
                [("content-type", "application/x-protobuf")],
                Vec::<u8>::new(),
            )
        };
        let app = axum::Router::new()
            .route(
                "/v1/traces",
                axum::routing::post(move |body: axum::body::Bytes| async move {
                    lock(&traces.traces).push(body.to_vec());
                    answer()
                }),
            )
            .route(
                "/v1/metrics",
                axum::routing::post(move |body: axum::body::Bytes| async move {
                    lock(&metrics.metrics).push(body.to_vec());
                    answer()
                }),
            );
        runtime.spawn(async move { axum::serve(listener, app).await });
        Self {
            url,
            kept,
            _runtime: runtime,
        }
    }

    /// An OTLP/gRPC receiver: OpenTelemetry's generated `TraceService` and
    /// `MetricsService` servers, taking every request as a collector does.
    pub fn grpc() -> Self {
        let (runtime, listener, url) = listen();
        let kept = Arc::new(Kept::default());
        let incoming = futures::stream::unfold(listener, |listener| async move {
            let accepted = listener.accept().await.map(|(stream, _)| stream);
            Some((accepted, listener))
        });
        runtime.spawn(
            tonic::transport::Server::builder()
                .add_service(TraceServiceServer::new(Grpc(Arc::clone(&kept))))
                .add_service(MetricsServiceServer::new(Grpc(Arc::clone(&kept))))
                .serve_with_incoming(incoming),
        );
        Self {
            url,
            kept,
            _runtime: runtime,
        }
    }

    /// Every span received, in order.
    ///
    /// # Panics
    /// On a request that is not an `ExportTraceServiceRequest`.
    #[allow(clippy::expect_used)]
    pub fn spans(&self) -> Vec<Span> {
        let requests: Vec<ExportTraceServiceRequest> = lock(&self.kept.traces)
            .iter()
            .map(|body| {
                ExportTraceServiceRequest::decode(body.as_slice())
                    .expect("an ExportTraceServiceRequest")
            })
            .collect();
        requests
            .iter()
            .flat_map(|r| r.resource_spans.iter())
            .flat_map(|r| r.scope_spans.iter())
            .flat_map(|s| s.spans.iter().cloned())
            .collect()
    }

    /// How many trace requests came.
    pub fn trace_requests(&self) -> usize {
        lock(&self.kept.traces).len()
    }

    /// Every metric received, in order, with the `service.name` of the
    /// resource it came from.
    ///
    /// # Panics
    /// On a request that is not an `ExportMetricsServiceRequest`.
    #[allow(clippy::expect_used)]
    pub fn metrics(&self) -> Vec<(String, Metric)> {
        let service = |r: &opentelemetry_proto::tonic::metrics::v1::ResourceMetrics| {
            r.resource
                .iter()
                .flat_map(|r| r.attributes.iter())
                .find(|kv| kv.key == "service.name")
                .and_then(|kv| kv.value.as_ref())
                .map(|v| format!("{:?}", v.value))
                .unwrap_or_default()
        };
        let requests: Vec<ExportMetricsServiceRequest> = lock(&self.kept.metrics)
            .iter()
            .map(|body| {
                ExportMetricsServiceRequest::decode(body.as_slice())
                    .expect("an ExportMetricsServiceRequest")
            })
            .collect();
        requests
            .iter()
            .flat_map(|r| r.resource_metrics.iter())
            .flat_map(|r| {
                let service = service(r);
                r.scope_metrics
                    .iter()
                    .flat_map(|s| s.metrics.iter().cloned())
                    .map(move |m| (service.clone(), m))
            })
            .collect()
    }
}

#[allow(clippy::expect_used)]
fn listen() -> (tokio::runtime::Runtime, tokio::net::TcpListener, String) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("a port on 127.0.0.1");
    let url = format!("http://{}", listener.local_addr().expect("its address"));
    (runtime, listener, url)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The gRPC services, keeping what they get.
struct Grpc(Arc<Kept>);

#[tonic::async_trait]
impl TraceService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        lock(&self.0.traces).push(request.into_inner().encode_to_vec());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl MetricsService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        lock(&self.0.metrics).push(request.into_inner().encode_to_vec());
        Ok(tonic::Response::new(ExportMetricsServiceResponse::default()))
    }
}

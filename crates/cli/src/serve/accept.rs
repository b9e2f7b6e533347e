//! The accept loop: what `axum::serve` does, plus what a server reachable
//! by others needs, which it does not do.
//!
//! - **TLS** (`--tls-cert`, `--tls-key`): rustls, so a team can serve
//!   across machines without a proxy.
//! - **HTTP/1.1 only**, in clear and over TLS: hyper bounds the time of an
//!   HTTP/1.1 head and of an idle kept-alive connection, and of nothing an
//!   HTTP/2 connection does.
//! - **A deadline for a request's head** ([`HEADER_TIMEOUT`]), for the
//!   first byte of a connection, and for a TLS handshake: a client that
//!   sends its headers a byte at a time (slowloris), or nothing at all, is
//!   cut off, where it held its connection, and a file descriptor, for as
//!   long as it liked.
//! - **A cap on open connections** ([`Limits::connections`]): each holds a
//!   descriptor and its buffers. Past the cap, a few more connections
//!   ([`OVERFLOW`]) are answered `503` with `Retry-After` and closed; past
//!   those, the next waits in the kernel's listen queue, which is bounded.
//!   The process never runs out of descriptors.
//! - **Graceful shutdown**: accepting stops at the signal, and each open
//!   connection ends once its request in flight is answered.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, anyhow};
use axum::Router;
use axum::body::Body;
use axum::http::{Response, StatusCode, header};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio_rustls::TlsAcceptor;

use super::limits::Limits;

/// How long a client has to send a request's whole head, or to finish a
/// TLS handshake.
pub(super) const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections past the cap that are answered 503 rather than left waiting.
pub(super) const OVERFLOW: usize = 64;

/// Seconds a client turned away at the cap is told to wait.
const RETRY_AFTER: u32 = 1;

/// `--tls-cert FILE --tls-key FILE`: PEM files.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The certificate chain, leaf first.
    pub cert: PathBuf,
    /// Its private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

impl TlsFiles {
    /// The acceptor of a server with this certificate and key; an error
    /// names the file and what is wrong with it.
    pub fn acceptor(&self) -> anyhow::Result<TlsAcceptor> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let certs = CertificateDer::pem_file_iter(&self.cert)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|e| anyhow!("--tls-cert {}: {e}", self.cert.display()))?;
        if certs.is_empty() {
            return Err(anyhow!(
                "--tls-cert {}: no certificate in it (PEM `CERTIFICATE` blocks)",
                self.cert.display()
            ));
        }
        let key = PrivateKeyDer::from_pem_file(&self.key)
            .map_err(|e| anyhow!("--tls-key {}: {e}", self.key.display()))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .context("TLS")?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| {
                anyhow!(
                    "--tls-cert {} and --tls-key {}: {e}",
                    self.cert.display(),
                    self.key.display()
                )
            })?;
        let mut config = config;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(TlsAcceptor::from(Arc::new(config)))
    }
}

/// Serves `router` on `listener` (over TLS with `tls`) until `shutdown`
/// resolves, then waits for the open connections to end.
pub(super) async fn serve(
    listener: TcpListener,
    router: Router,
    tls: Option<TlsAcceptor>,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let graceful = GracefulShutdown::new();
    let (stop, _) = watch::channel(false);
    let refusing = Router::new().fallback(|| async { busy() });
    let open = Arc::new(Semaphore::new(limits.connections.max(1)));
    let overflow = Arc::new(Semaphore::new(OVERFLOW));
    let mut shutdown = std::pin::pin!(shutdown);
    // HTTP/1.1 alone: its head has a deadline hyper enforces, where an
    // HTTP/2 connection (or a client still to say which it speaks) may sit
    // idle for good; the page needs few connections (docs/security.md).
    let mut builder = Builder::new(TokioExecutor::new()).http1_only();
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT);
    let builder = Arc::new(builder);
    loop {
        // A connection is taken when one may be served, or answered 503.
        let permit = tokio::select! {
            biased;
            permit = Arc::clone(&open).acquire_owned() => match permit {
                Ok(permit) => Permit::Serve(permit),
                Err(_) => break,
            },
            permit = Arc::clone(&overflow).acquire_owned() => match permit {
                Ok(permit) => Permit::Refuse(permit),
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors, or a connection reset before it
                    // was taken: wait a little rather than spin.
                    tracing::warn!(error = %e, "accept error");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // A place may have come free while this one waited to be accepted.
        let permit = match permit {
            Permit::Refuse(refuse) => match Arc::clone(&open).try_acquire_owned() {
                Ok(permit) => Permit::Serve(permit),
                Err(_) => Permit::Refuse(refuse),
            },
            serve => serve,
        };
        let router = match permit {
            Permit::Serve(_) => router.clone(),
            Permit::Refuse(_) => refusing.clone(),
        };
        let connection = Connection {
            builder: Arc::clone(&builder),
            watcher: graceful.watcher(),
            router,
            permit,
        };
        let stopped = stop.subscribe();
        match &tls {
            None => {
                tokio::spawn(async move {
                    // hyper's deadline for a head starts at its first byte:
                    // a connection that sends none would hold its place for
                    // good.
                    let mut first = [0u8; 1];
                    let sent = tokio::time::timeout(HEADER_TIMEOUT, stream.peek(&mut first));
                    match until_stopped(stopped, sent).await {
                        Some(Ok(Ok(n))) if n > 0 => connection.serve(stream).await,
                        Some(Err(_)) => tracing::debug!("a connection sent nothing; closed"),
                        _ => {}
                    }
                });
            }
            Some(tls) => {
                let tls = tls.clone();
                tokio::spawn(async move {
                    // The handshake, then the first byte of a request, within
                    // the head's deadline (hyper's starts at that byte).
                    let opened = async {
                        let mut stream = tokio::io::BufReader::new(tls.accept(stream).await?);
                        let first = tokio::io::AsyncBufReadExt::fill_buf(&mut stream).await?;
                        Ok::<_, std::io::Error>((!first.is_empty()).then_some(stream))
                    };
                    let opened = tokio::time::timeout(HEADER_TIMEOUT, opened);
                    match until_stopped(stopped, opened).await {
                        Some(Ok(Ok(Some(stream)))) => connection.serve(stream).await,
                        Some(Ok(Err(e))) => tracing::debug!(error = %e, "TLS handshake failed"),
                        Some(Err(_)) => {
                            tracing::debug!("TLS handshake or first request took too long");
                        }
                        _ => {}
                    }
                });
            }
        }
    }
    drop(listener);
    // Connections yet to send their first request are closed at once.
    stop.send_replace(true);
    graceful.shutdown().await;
    Ok(())
}

/// `f`, unless the server stops first (`None`).
async fn until_stopped<F: Future>(mut stopped: watch::Receiver<bool>, f: F) -> Option<F::Output> {
    tokio::select! {
        out = f => Some(out),
        _ = stopped.wait_for(|stop| *stop) => None,
    }
}

/// A connection's place: under the cap, or one of the few refused past
/// it; held until the connection ends.
enum Permit {
    Serve(#[allow(dead_code)] OwnedSemaphorePermit),
    Refuse(#[allow(dead_code)] OwnedSemaphorePermit),
}

/// One accepted connection and what serving it needs: `router` answers
/// its requests (the API, or 503 to each past the cap).
struct Connection {
    builder: Arc<Builder<TokioExecutor>>,
    watcher: Watcher,
    router: Router,
    permit: Permit,
}

impl Connection {
    /// Serves requests on `io` until it closes, or the shutdown ends it.
    async fn serve<IO>(self, io: IO)
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let service = TowerToHyperService::new(self.router);
        let connection = self
            .builder
            .serve_connection(TokioIo::new(io), service)
            .into_owned();
        if let Err(e) = self.watcher.watch(connection).await {
            tracing::debug!(error = %e, "connection ended with an error");
        }
        drop(self.permit);
    }
}

/// The answer to a request on a connection past the cap.
fn busy() -> Response<Body> {
    let body = serde_json::json!({
        "error": "unavailable",
        "message": "the server has as many connections open as it takes (--max-connections); try again later",
    });
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    headers.insert(header::RETRY_AFTER, RETRY_AFTER.into());
    headers.insert(
        header::CONNECTION,
        header::HeaderValue::from_static("close"),
    );
    response
}

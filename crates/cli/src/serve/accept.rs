//! The accept loop: what `axum::serve` does, plus the limits a server
//! reachable by others needs, which it does not set.
//!
//! - **A deadline for a request's head** (`HEADER_TIMEOUT`): a client that
//!   sends its headers a byte at a time (slowloris) is cut off, where it
//!   held its connection, and a file descriptor, for as long as it liked.
//! - **A bound on open connections** (`MAX_CONNECTIONS`): each one holds a
//!   descriptor and its buffers; past the bound, the next is accepted only
//!   once one closes, so the process never runs out of descriptors.
//! - **Graceful shutdown**: accepting stops at the signal, and each open
//!   connection ends once its request in flight is answered.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// How long a client has to send a request's whole head.
pub(super) const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections open at once; the next waits in the listen queue.
pub(super) const MAX_CONNECTIONS: usize = 1024;

/// Serves `router` on `listener` until `shutdown` resolves, then waits for
/// the open connections to end.
pub(super) async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let graceful = GracefulShutdown::new();
    let open = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut shutdown = std::pin::pin!(shutdown);
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT);
    loop {
        let permit = tokio::select! {
            permit = Arc::clone(&open).acquire_owned() => match permit {
                Ok(permit) => permit,
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
        let service = TowerToHyperService::new(router.clone());
        let connection = builder
            .serve_connection_with_upgrades(TokioIo::new(stream), service)
            .into_owned();
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

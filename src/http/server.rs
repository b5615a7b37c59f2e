//! The listener: hyper's HTTP/1 server under the axum router, set up the
//! way a balancer needs it. A client that half-closes its side after
//! sending the request still gets the answer (`half_close`); a client that
//! does not send a request's headers within the header timeout is dropped,
//! which also closes idle keep-alive connections (slowloris costs a socket
//! for that long, no more); at most `max_connections` are open at once (the
//! rest wait in the backlog, the process never runs out of descriptors); on
//! shutdown the listener closes, in-flight requests finish, and the wait for
//! them is bounded by the grace period.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tower::ServiceExt;
use tracing::{debug, warn};

/// What the listener allows.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub header_read_timeout: Duration,
    pub max_connections: usize,
    /// Longest shutdown waits for requests in flight.
    pub grace: Duration,
}

/// Serves `router` on `listener` until `shutdown` resolves, then drains
/// for at most `limits.grace`.
pub async fn serve(
    listener: TcpListener,
    router: axum::Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder
        .half_close(true)
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    tokio::pin!(shutdown);
    loop {
        // A free slot first: at the cap, connections wait in the backlog.
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
            _ = &mut shutdown => break,
        };
        let (stream, remote) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of descriptors, most often: back off, keep serving.
                    warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
            request
                .extensions_mut()
                .insert(ConnectInfo::<SocketAddr>(remote));
            router.clone().oneshot(request)
        });
        let connection = graceful.watch(builder.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                debug!(%remote, %error, "connection ended with an error");
            }
            drop(slot);
        });
    }
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(limits.grace) => warn!("connections still open after the grace period; stopping anyway"),
    }
    Ok(())
}

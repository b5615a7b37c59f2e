//! The listener. Plain `POST /press` requests, the hot path, are answered
//! right here (`wire` decides what is plain); the first request of a
//! connection that is anything else hands the connection, with the bytes
//! already read, to hyper's HTTP/1 server and the axum router for the rest
//! of its life. The profile of the press path showed a third of its time in
//! the framework layers; this is where it went.
//!
//! Both paths keep the same rules. A client that half-closes after its
//! request still gets the answer; a client that does not send a request's
//! head within the header timeout is dropped, which also closes idle
//! keep-alive connections (slowloris costs a socket for that long); a body
//! that does not arrive within the body timeout gets 408; a request that
//! takes longer than the request timeout gets 504; at most
//! `max_connections` are open at once (the rest wait in the backlog); on
//! shutdown the listener closes, idle connections close, requests in flight
//! finish, and the wait for them is bounded by the grace period.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::response::IntoResponse;
use bytes::BytesMut;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{timeout, timeout_at, Instant};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;
use tracing::{debug, warn};

use super::wire::{self, Head, PressHead};
use super::{ApiContext, ApiError};
use crate::config::ListenerLimits as Limits;

/// What every connection's task shares.
struct Shared {
    ctx: ApiContext,
    router: axum::Router,
    hyper: http1::Builder,
    limits: Limits,
    /// Cancelled when shutdown begins.
    stopping: CancellationToken,
}

/// Serves `router` (and `/press` beside it) on `listener` until `shutdown`
/// resolves, then drains for at most `limits.grace`.
pub async fn serve(
    listener: TcpListener,
    ctx: ApiContext,
    router: axum::Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let mut hyper = http1::Builder::new();
    hyper
        .half_close(true)
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let shared = Arc::new(Shared {
        ctx,
        router,
        hyper,
        limits,
        stopping: CancellationToken::new(),
    });
    let connections = TaskTracker::new();
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
        let shared = shared.clone();
        connections.spawn(async move {
            if let Err(error) = connection(stream, remote, &shared).await {
                debug!(%remote, %error, "connection ended with an error");
            }
            drop(slot);
        });
    }
    drop(listener);
    shared.stopping.cancel();
    connections.close();
    if timeout(limits.grace, connections.wait()).await.is_err() {
        warn!("connections still open after the grace period; stopping anyway");
    }
    Ok(())
}

/// One connection: presses served here until a request that is not one.
async fn connection(
    mut stream: TcpStream,
    remote: SocketAddr,
    shared: &Shared,
) -> std::io::Result<()> {
    let mut buf = BytesMut::with_capacity(1024);
    loop {
        let head_deadline = Instant::now() + shared.limits.header_read_timeout;
        let head = loop {
            match wire::classify(&buf) {
                Head::Partial => {}
                head => break head,
            }
            tokio::select! {
                biased;
                // Idle between requests: shutdown closes it.
                _ = shared.stopping.cancelled(), if buf.is_empty() => return Ok(()),
                read = timeout_at(head_deadline, read_more(&mut stream, &mut buf)) => match read {
                    // No head in time, or the client left: close (as hyper does).
                    Err(_) | Ok(Ok(0)) => return Ok(()),
                    Ok(Err(error)) => return Err(error),
                    Ok(Ok(_)) => {}
                },
            }
        };
        let press = match head {
            Head::Press(press) => press,
            _ => return hand_over(stream, buf, remote, shared).await,
        };
        if !read_body(&mut stream, &mut buf, &press, shared).await? {
            let answer = error_response(ApiError::BodyTimeout, true).await;
            stream.write_all(&answer).await?;
            return Ok(());
        }
        let request = buf.split_to(press.len());
        let close = press.close;
        let answer = answer_press(&shared.ctx, &request[press.head_len..], &press).await;
        stream.write_all(&answer).await?;
        if close {
            return stream.shutdown().await;
        }
    }
}

/// One read into `buf`, given room for a whole press first: what is left
/// of the buffer after the requests before it may be a few bytes, and a
/// request read in two parts costs a second `recv`. Reserving on an empty
/// buffer reuses its allocation.
async fn read_more(stream: &mut TcpStream, buf: &mut BytesMut) -> std::io::Result<usize> {
    buf.reserve(1024);
    stream.read_buf(buf).await
}

/// Reads until the whole body is in `buf`; false if it did not arrive
/// within the body timeout.
async fn read_body(
    stream: &mut TcpStream,
    buf: &mut BytesMut,
    press: &PressHead,
    shared: &Shared,
) -> std::io::Result<bool> {
    let deadline = Instant::now() + shared.ctx.body_read_timeout;
    while buf.len() < press.len() {
        match timeout_at(deadline, read_more(stream, buf)).await {
            Err(_) => return Ok(false),
            Ok(Ok(0)) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the client left before sending the whole body",
                ))
            }
            Ok(result) => {
                result?;
            }
        }
    }
    Ok(true)
}

/// The answer to a plain press: what the router would answer, byte for
/// byte in status, headers and body.
async fn answer_press(ctx: &ApiContext, body: &[u8], press: &PressHead) -> Vec<u8> {
    // Only read the clock when the line will be written: this is the hot path.
    let started = ctx.access_log.then(std::time::Instant::now);
    let mut session = None;
    let pressed = async {
        let request: super::press::PressRequest = super::extract::json_object(body)?;
        if let (true, super::press::IdField::Text(id)) = (ctx.access_log, &request.session_id) {
            session = Some(super::access::session_hash(id));
        }
        super::within_deadline(ctx, super::press::press_session(ctx, request.session_id)).await
    };
    let pressed = pressed.await;
    if let Some(started) = started {
        let (status, node) = match &pressed {
            Ok(answer) => (200, Some(answer.pressed.node.name.as_str())),
            Err(error) => (error.status().as_u16(), None),
        };
        super::access::line("POST", "/press", status, node, started, session.as_deref());
    }
    match pressed {
        Ok(answer) => {
            let (content_type, body) = answer.body(press.wants_json);
            let mut headers: [(&str, &[u8]); 2] = [("content-type", content_type.as_bytes()); 2];
            let count = match answer.served_by() {
                Some(name) => {
                    headers[1] = ("x-served-by", name.as_bytes());
                    2
                }
                None => 1,
            };
            wire::response(http::StatusCode::OK, &headers[..count], &body, press.close)
        }
        Err(error) => error_response(error, press.close).await,
    }
}

/// An error as the router renders it (the rare path: it goes through
/// axum's response).
async fn error_response(error: ApiError, close: bool) -> Vec<u8> {
    let response = error.into_response();
    let (parts, body) = response.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX)
        .await
        .unwrap_or_default();
    let headers: Vec<(&str, &[u8])> = parts
        .headers
        .iter()
        .filter(|(name, _)| *name != http::header::CONTENT_LENGTH)
        .map(|(name, value)| (name.as_str(), value.as_bytes()))
        .collect();
    wire::response(parts.status, &headers, &body, close)
}

/// The rest of the connection goes to hyper and the router, starting
/// with the bytes already read.
async fn hand_over(
    stream: TcpStream,
    read: BytesMut,
    remote: SocketAddr,
    shared: &Shared,
) -> std::io::Result<()> {
    let router = shared.router.clone();
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        request
            .extensions_mut()
            .insert(ConnectInfo::<SocketAddr>(remote));
        router.clone().oneshot(request)
    });
    let io = TokioIo::new(wire::Rewind::new(read.freeze(), stream));
    let connection = shared.hyper.serve_connection(io, service);
    tokio::pin!(connection);
    let result = tokio::select! {
        result = connection.as_mut() => result,
        _ = shared.stopping.cancelled() => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    result.map_err(std::io::Error::other)
}

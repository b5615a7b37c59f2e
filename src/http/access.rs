//! The access log (`ACCESS_LOG=true`): one line per request, at target
//! `access`, with method, path, status, the node that served it, the time
//! taken and, for presses, the session id hashed (a log is no place for
//! users' identifiers, and the hash still tells one session's lines apart).

use std::time::Instant;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;

use super::ApiContext;

/// A press's session, hashed, left on its response for the access log.
#[derive(Clone)]
pub struct SessionHash(pub String);

/// The hash a session id is logged as ([`crate::session::id::logged`]).
pub fn session_hash(id: &str) -> String {
    crate::session::id::logged(id)
}

/// One line for a request that is done.
pub fn line(
    method: &str,
    path: &str,
    status: u16,
    node: Option<&str>,
    started: Instant,
    session: Option<&str>,
) {
    tracing::info!(
        target: "access",
        method,
        path,
        status,
        node = node.unwrap_or("-"),
        duration_ms = started.elapsed().as_secs_f64() * 1000.0,
        session = session.unwrap_or("-"),
    );
}

/// The router's requests (the listener logs the presses it answers itself).
pub async fn layer(State(ctx): State<ApiContext>, request: Request, next: Next) -> Response {
    if !ctx.access_log {
        return next.run(request).await;
    }
    let started = Instant::now();
    let (method, path) = (request.method().clone(), request.uri().path().to_owned());
    let response = next.run(request).await;
    let node = response
        .headers()
        .get("x-served-by")
        .and_then(|v| v.to_str().ok());
    let session = response.extensions().get::<SessionHash>();
    line(
        method.as_str(),
        &path,
        response.status().as_u16(),
        node,
        started,
        session.map(|s| s.0.as_str()),
    );
    response
}

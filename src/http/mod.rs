//! The HTTP API of design.md §3. Handlers are thin: extract, call a service,
//! map the result; errors become responses in [`error`].

pub mod access;
mod error;
mod extract;
mod health;
mod nodes;
pub mod openapi;
mod press;
mod process;
pub mod server;
mod sessions;
mod status;
mod wire;

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;
use tower_http::trace::TraceLayer;

pub use error::ApiError;
pub use extract::MAX_BODY_BYTES;
pub use press::PressMetrics;

use crate::archive::Archive;
use crate::cluster::NodeAdmin;
use crate::session::SessionService;
use crate::store::Store;

/// Everything a handler may need. axum clones the state for every request,
/// so it is one `Arc`: a clone is one reference count.
#[derive(Clone)]
pub struct ApiContext(Arc<Services>);

pub struct Services {
    pub sessions: SessionService,
    pub admin: NodeAdmin,
    /// One log line per request (`ACCESS_LOG`).
    pub access_log: bool,
    pub process_router: crate::routing::ProcessRouter,
    pub store: Store,
    pub archive: Archive,
    pub admin_token: String,
    /// Whether the fence watcher runs (`/readyz` is 503 while it does not).
    pub fences_followed: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Longest a client may take to send a body.
    pub body_read_timeout: std::time::Duration,
    /// Longest any request may take.
    pub request_timeout: std::time::Duration,
    /// `GET /metrics` asks for the admin token too.
    pub metrics_require_token: bool,
    pub metrics: metrics_exporter_prometheus::PrometheusHandle,
    pub press_metrics: PressMetrics,
    /// What the status page draws: presses per node, last five minutes.
    pub press_history: Arc<crate::nodes::press_history::PressHistory>,
}

impl ApiContext {
    pub fn new(services: Services) -> Self {
        Self(Arc::new(services))
    }
}

impl std::ops::Deref for ApiContext {
    type Target = Services;
    fn deref(&self) -> &Services {
        &self.0
    }
}

pub fn router(ctx: ApiContext) -> Router {
    Router::new()
        .route("/press", post(press::press))
        .route("/node", post(nodes::node_command))
        .route("/nodes", get(nodes::list))
        .route("/events", get(nodes::events))
        .route("/sessions/{id}", get(sessions::show))
        .route("/process/{req_id}", get(process::process))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics))
        .route("/openapi.json", get(openapi::openapi_json))
        .route("/status", get(status::page))
        .route("/status/history", get(status::history))
        .fallback(|| async { ApiError::NotFound("no such endpoint".into()) })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .layer(axum::middleware::from_fn_with_state(ctx.clone(), deadline))
        .layer(axum::middleware::from_fn(no_transfer_encoding))
        .layer(axum::middleware::from_fn(refuse_oversized))
        .layer(axum::middleware::from_fn_with_state(
            ctx.clone(),
            access::layer,
        ))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(TraceLayer::new_for_http())
        .with_state(ctx)
}

/// Bodies come with `Content-Length` only. hyper drops a `Content-Length`
/// sent beside `Transfer-Encoding` before we see the request, so the pair
/// that request smuggling relies on can only be refused by refusing
/// `Transfer-Encoding` altogether; our bodies are a few bytes of JSON.
async fn no_transfer_encoding(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    if request
        .headers()
        .contains_key(axum::http::header::TRANSFER_ENCODING)
    {
        return ApiError::bad_request(
            "transfer_encoding_refused",
            "send the body with Content-Length; Transfer-Encoding is refused",
        )
        .into_response();
    }
    next.run(request).await
}

/// A body announced larger than the limit is refused from its head alone:
/// before anything reads the body, so a client that sent `Expect:
/// 100-continue` gets its 413 instead of an invitation to send megabytes.
async fn refuse_oversized(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let announced = request
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if announced.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return ApiError::PayloadTooLarge(MAX_BODY_BYTES).into_response();
    }
    next.run(request).await
}

/// `work` within `REQUEST_TIMEOUT_MS` (504 `request_timeout` past it): the
/// one deadline, for the router's requests and the presses the listener
/// answers itself. The work a request started that must finish (cleans,
/// failovers) runs on by itself.
pub(crate) async fn within_deadline<T>(
    ctx: &ApiContext,
    work: impl std::future::Future<Output = Result<T, ApiError>>,
) -> Result<T, ApiError> {
    tokio::time::timeout(ctx.request_timeout, work)
        .await
        .map_err(|_| ApiError::GatewayTimeout)?
}

/// Every router request [`within_deadline`].
async fn deadline(
    axum::extract::State(ctx): axum::extract::State<ApiContext>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    within_deadline(&ctx, async { Ok(next.run(request).await) })
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

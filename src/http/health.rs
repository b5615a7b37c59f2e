use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Serialize;

use super::error::ErrorBody;
use super::extract::Admin;
use super::{ApiContext, ApiError};

/// Prometheus text format; behind the admin token if `METRICS_REQUIRE_TOKEN`.
#[utoipa::path(get, path = "/metrics", tag = "operations",
    responses(
        (status = 200, description = "Prometheus text format", content_type = "text/plain", body = String),
        (status = 401, description = "`unauthorized` (with `METRICS_REQUIRE_TOKEN=true`)", body = ErrorBody),
    ))]
pub async fn metrics(
    State(ctx): State<ApiContext>,
    admin: Result<Admin, ApiError>,
) -> Result<impl axum::response::IntoResponse, ApiError> {
    if ctx.metrics_require_token {
        admin?;
    }
    ctx.metrics.run_upkeep();
    let table = ctx.admin.registry().table();
    let text = crate::telemetry::without_other_nodes(&ctx.metrics.render(), |address| {
        table.get(address).is_some()
    });
    Ok((
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        text,
    ))
}

/// `GET /healthz`'s answer.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Liveness {
    #[schema(example = "ok")]
    status: &'static str,
}

/// `GET /readyz`'s answer: each dependency's state.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Readiness {
    /// `ready` or `not_ready`.
    status: &'static str,
    /// `ok` or `unavailable`.
    redis: &'static str,
    /// `ok` or `unavailable`.
    postgres: &'static str,
    /// `ok`, `rebuilding` (after Redis lost its data) or `unknown`.
    registry: &'static str,
    /// `running` or `restarting`.
    fence_watcher: &'static str,
}

/// Liveness: the process answers.
#[utoipa::path(get, path = "/healthz", tag = "operations",
    responses((status = 200, description = "The process answers", body = Liveness)))]
pub async fn healthz() -> Json<Liveness> {
    Json(Liveness { status: "ok" })
}

/// Readiness: Redis and Postgres both answer, and the node registry is
/// complete (not being rebuilt after Redis lost its data).
#[utoipa::path(get, path = "/readyz", tag = "operations",
    responses(
        (status = 200, description = "Ready to serve", body = Readiness),
        (status = 503, description = "Not ready: see which part", body = Readiness),
    ))]
pub async fn readyz(State(ctx): State<ApiContext>) -> (StatusCode, Json<Readiness>) {
    let (registry, postgres) = tokio::join!(ctx.store.nodes.registry_epoch(), ctx.archive.ping());
    let redis = registry.is_ok();
    let registry = matches!(registry, Ok(Some(_)));
    let postgres = postgres.is_ok();
    let fences = ctx
        .fences_followed
        .load(std::sync::atomic::Ordering::Acquire);
    let status = |ok: bool| if ok { "ok" } else { "unavailable" };
    let ready = redis && postgres && registry && fences;
    let body = Readiness {
        status: if ready { "ready" } else { "not_ready" },
        redis: status(redis),
        postgres: status(postgres),
        registry: if !redis {
            "unknown"
        } else if registry {
            "ok"
        } else {
            "rebuilding"
        },
        fence_watcher: if fences { "running" } else { "restarting" },
    };
    let code = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, Json(body))
}

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};

use super::extract::Admin;
use super::{ApiContext, ApiError};

/// Prometheus text format; behind the admin token if `METRICS_REQUIRE_TOKEN`.
pub async fn metrics(
    State(ctx): State<ApiContext>,
    admin: Result<Admin, ApiError>,
) -> Result<impl axum::response::IntoResponse, ApiError> {
    if ctx.metrics_require_token {
        admin?;
    }
    ctx.metrics.run_upkeep();
    Ok((
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        ctx.metrics.render(),
    ))
}

/// Liveness: the process answers.
pub async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

/// Readiness: Redis and Postgres both answer, and the node registry is
/// complete (not being rebuilt after Redis lost its data).
pub async fn readyz(State(ctx): State<ApiContext>) -> (StatusCode, Json<Value>) {
    let (registry, postgres) = tokio::join!(ctx.store.registry_epoch(), ctx.archive.ping());
    let redis = registry.is_ok();
    let registry = matches!(registry, Ok(Some(_)));
    let postgres = postgres.is_ok();
    let fences = ctx
        .fences_followed
        .load(std::sync::atomic::Ordering::Acquire);
    let status = |ok: bool| if ok { "ok" } else { "unavailable" };
    let ready = redis && postgres && registry && fences;
    let body = json!({
        "status": if ready { "ready" } else { "not_ready" },
        "redis": status(redis),
        "postgres": status(postgres),
        "registry": if !redis { "unknown" } else if registry { "ok" } else { "rebuilding" },
        "fence_watcher": if fences { "running" } else { "restarting" },
    });
    let code = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, Json(body))
}

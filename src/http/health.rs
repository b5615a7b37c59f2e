use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Value};

use super::ApiContext;

/// Prometheus text format.
pub async fn metrics(State(ctx): State<ApiContext>) -> impl axum::response::IntoResponse {
    ctx.metrics.run_upkeep();
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        ctx.metrics.render(),
    )
}

/// Liveness: the process answers.
pub async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

/// Readiness: Redis and Postgres both answer.
pub async fn readyz(State(ctx): State<ApiContext>) -> (StatusCode, Json<Value>) {
    let (redis, postgres) = tokio::join!(ctx.store.ping(), ctx.archive.ping());
    let (redis, postgres) = (redis.is_ok(), postgres.is_ok());
    let status = |ok: bool| if ok { "ok" } else { "unavailable" };
    let body = json!({
        "status": if redis && postgres { "ready" } else { "not_ready" },
        "redis": status(redis),
        "postgres": status(postgres),
    });
    let code = if redis && postgres {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, Json(body))
}

//! `GET /status`: a live page for operators. The page itself is public and
//! holds no data; it asks for the admin token once and reads the admin API
//! (`/nodes`, `/events`, `/status/history`, `/readyz`) every two seconds.
//! `GET /status/history` (admin) is what it draws: this replica's presses
//! per node over the last five minutes (`nodes::press_history`).

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::Json;
use serde::Serialize;

use super::error::ErrorBody;
use super::extract::Admin;
use super::ApiContext;
use crate::nodes::press_history::{SAMPLE_EVERY, WINDOW};

const PAGE: &str = include_str!("status.html");

/// Inline script and style only: the page loads nothing from elsewhere.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'unsafe-inline'; \
     style-src 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'";

#[utoipa::path(get, path = "/status", tag = "operations",
    responses((status = 200, description = "The live status page (HTML); it asks for the admin token", content_type = "text/html", body = String)))]
pub async fn page() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
            (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        ],
        PAGE,
    )
}

/// `GET /status/history`'s answer.
#[derive(Serialize, utoipa::ToSchema)]
pub struct PressHistoryView {
    /// How often the totals are sampled, ms.
    #[schema(example = 2000)]
    pub sample_every_ms: u64,
    /// How far back the samples reach, ms.
    #[schema(example = 300000)]
    pub window_ms: u64,
    /// Every node in this replica's view.
    pub nodes: Vec<NodeHistoryView>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct NodeHistoryView {
    #[schema(example = "http://10.0.0.1:8080")]
    pub address: String,
    /// `[at, presses]` pairs, oldest first: wall time (ms since the epoch)
    /// and the presses this replica had forwarded to the node by then.
    #[schema(value_type = Vec<Vec<i64>>, example = json!([[1764670000000_i64, 1200], [1764670002000_i64, 1260]]))]
    pub points: Vec<(i64, u64)>,
}

/// This replica's presses forwarded to each node, sampled every two
/// seconds for five minutes (admin): the status page's charts.
#[utoipa::path(get, path = "/status/history", tag = "admin", security(("admin_token" = [])),
    responses(
        (status = 200, description = "Samples of each node's running total of presses", body = PressHistoryView),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
    ))]
pub async fn history(_: Admin, State(ctx): State<ApiContext>) -> Json<PressHistoryView> {
    Json(PressHistoryView {
        sample_every_ms: SAMPLE_EVERY.as_millis() as u64,
        window_ms: WINDOW.as_millis() as u64,
        nodes: ctx
            .press_history
            .series()
            .into_iter()
            .map(|series| NodeHistoryView {
                address: series.address.to_string(),
                points: series.points,
            })
            .collect(),
    })
}

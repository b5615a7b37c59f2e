//! `GET /status`: a live page for operators. The page itself is public and
//! holds no data; it asks for the admin token once and reads the admin API
//! (`/nodes`, `/events`, `/metrics`, `/readyz`) every two seconds.

use axum::http::header;
use axum::response::IntoResponse;

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

//! `GET /sessions/{id}` (admin): where a session lives, what it carries,
//! what is archived for it, and where it was placed before and why.

use axum::extract::State;
use axum::Json;
use chrono::DateTime;
use serde::Serialize;

use super::error::ErrorBody;
use super::extract::{Admin, PathParams};
use super::{ApiContext, ApiError};
use crate::archive::history::PlacementRecord;
use crate::session::SessionId;

/// Most placements shown.
const HISTORY: i64 = 50;

/// A session as an operator sees it.
#[derive(Serialize, utoipa::ToSchema)]
pub struct SessionView {
    pub session_id: String,
    /// Its mapping in Redis, if it has one.
    pub current: Option<CurrentMapping>,
    /// Clicks archived in Postgres, if any were.
    pub archived_clicks: Option<i64>,
    /// Its recent placements, newest first (kept `SESSION_HISTORY_SECS`).
    pub placements: Vec<PlacementRecord>,
}

/// Where a session lives now.
#[derive(Serialize, utoipa::ToSchema)]
pub struct CurrentMapping {
    /// The node's address.
    pub node: String,
    pub node_name: Option<String>,
    /// Clicks carried over from the archive, added to the node's count.
    pub base: i64,
    /// RFC 3339.
    pub expires_at: Option<String>,
    /// Expired, waiting for the sweep.
    pub expired: bool,
}

#[utoipa::path(
    get, path = "/sessions/{id}", tag = "admin", security(("admin_token" = [])),
    params(("id" = String, Path, description = "The session id")),
    responses(
        (status = 200, description = "The session", body = SessionView),
        (status = 400, description = "`invalid_session_id`, `invalid_path`", body = ErrorBody),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
        (status = 404, description = "`not_found`: no mapping, no archive, no history", body = ErrorBody),
        (status = 503, description = "`redis_unavailable`, `archive_unavailable`", body = ErrorBody),
        (status = 504, description = "`request_timeout`", body = ErrorBody),
    )
)]
pub async fn show(
    _: Admin,
    State(ctx): State<ApiContext>,
    PathParams(id): PathParams<String>,
) -> Result<Json<SessionView>, ApiError> {
    let id = SessionId::parse(id)?;
    let mapping = ctx.store.sessions.lookup(id.as_str()).await?;
    let archived = ctx.archive.total(id.as_str()).await?;
    let placements = ctx.archive.placements(id.as_str(), HISTORY).await?;
    if mapping.is_none() && archived.is_none() && placements.is_empty() {
        return Err(ApiError::NotFound(format!("no session {id} is known")));
    }
    let time = |ms: i64| DateTime::from_timestamp_millis(ms).map(|at| at.to_rfc3339());
    let current = mapping.map(|m| CurrentMapping {
        node_name: ctx
            .admin
            .registry()
            .table()
            .get(&m.node)
            .map(|entry| entry.name.clone()),
        expires_at: time(m.expires_at_ms),
        expired: m.expires_at_ms <= ctx.sessions.now_ms(),
        node: m.node,
        base: m.base,
    });
    Ok(Json(SessionView {
        session_id: id.as_str().to_owned(),
        current,
        archived_clicks: archived,
        placements,
    }))
}

//! `GET /sessions/{id}` (admin): where a session lives, what it carries,
//! what is archived for it, and where it was placed before and why.

use axum::extract::{Path, State};
use axum::Json;
use chrono::DateTime;
use serde_json::{json, Value};

use super::extract::Admin;
use super::{ApiContext, ApiError};
use crate::session::SessionId;

/// Most placements shown.
const HISTORY: i64 = 50;

pub async fn show(
    _: Admin,
    State(ctx): State<ApiContext>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let id = SessionId::parse(id)?;
    let mapping = ctx.store.lookup(id.as_str()).await?;
    let archived = ctx.archive.total(id.as_str()).await?;
    let placements = ctx.archive.placements(id.as_str(), HISTORY).await?;
    if mapping.is_none() && archived.is_none() && placements.is_empty() {
        return Err(ApiError::NotFound(format!("no session {id} is known")));
    }
    let time = |ms: i64| DateTime::from_timestamp_millis(ms).map(|at| at.to_rfc3339());
    let current = mapping.map(|m| {
        let name = ctx
            .admin
            .registry()
            .table()
            .get(&m.node)
            .map(|entry| entry.name.clone());
        json!({
            "node": m.node,
            "node_name": name,
            "base": m.base,
            "expires_at": time(m.expires_at_ms),
            "expired": m.expires_at_ms <= ctx.sessions.now_ms(),
        })
    });
    Ok(Json(json!({
        "session_id": id.as_str(),
        "current": current,
        "archived_clicks": archived,
        "placements": placements,
    })))
}

//! The admin endpoints: `POST /node` (add, drain, remove), `GET /nodes`,
//! `GET /events`. Every answer says what happened (`result`), besides the
//! `"message":"OK"` of the original API.

use std::time::Duration;

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::extract::{Admin, JsonBody};
use super::{ApiContext, ApiError};
use crate::archive::events::EventQuery;
use crate::cluster::Outcome;
use crate::nodes::NodeAddress;

#[derive(Deserialize)]
pub struct NodeCommand {
    action: String,
    address: String,
    name: Option<String>,
    weight: Option<u32>,
    /// `drain`: remove the node at the latest this many seconds from now.
    deadline_secs: Option<u64>,
}

/// `POST /node {"action":"add"|"drain"|"remove","address":..}` (admin),
/// counted by action and result.
pub async fn node_command(
    _: Admin,
    State(ctx): State<ApiContext>,
    JsonBody(cmd): JsonBody<NodeCommand>,
) -> Result<Response, ApiError> {
    let action: &'static str = match cmd.action.as_str() {
        "add" => "add",
        "drain" => "drain",
        "remove" => "remove",
        _ => "unknown",
    };
    let answer = run_command(&ctx, cmd).await;
    let result = match &answer {
        Ok((outcome, _)) => outcome.as_str(),
        Err(_) => "error",
    };
    metrics::counter!("nodes_control_admin_operations_total", "action" => action, "result" => result)
        .increment(1);
    answer.map(|(_, response)| response)
}

async fn run_command(ctx: &ApiContext, cmd: NodeCommand) -> Result<(Outcome, Response), ApiError> {
    match cmd.action.as_str() {
        "add" => {
            let (node, outcome) = ctx
                .admin
                .add(&cmd.address, cmd.name.as_deref(), cmd.weight)
                .await?;
            // 200 for a new node too: the API's contract says so (design.md
            // §3), and `result` tells a creation from a no-op.
            let body = json!({
                "message": "OK", "result": outcome, "address": node.address,
                "name": node.name, "weight": node.weight, "state": node.state,
            });
            Ok((outcome, Json(body).into_response()))
        }
        "drain" => {
            let drain = ctx
                .admin
                .drain(&cmd.address, cmd.deadline_secs.map(Duration::from_secs))
                .await?;
            let deadline = chrono::DateTime::from_timestamp_millis(drain.deadline_ms)
                .map(|at| at.to_rfc3339());
            let body = json!({
                "message": "OK", "result": Outcome::Draining, "sessions": drain.sessions,
                "deadline": deadline,
            });
            Ok((Outcome::Draining, Json(body).into_response()))
        }
        "remove" => {
            let removal = ctx.admin.remove(&cmd.address).await?;
            let body = json!({
                "message": "OK", "result": Outcome::Removed,
                "sessions": removal.sessions, "archived": removal.archived,
            });
            Ok((Outcome::Removed, Json(body).into_response()))
        }
        other => Err(ApiError::bad_request(
            "unknown_action",
            format!("unknown action {other:?}: expected \"add\", \"drain\" or \"remove\""),
        )),
    }
}

/// `GET /nodes` (admin).
pub async fn list(_: Admin, State(ctx): State<ApiContext>) -> Result<Json<Value>, ApiError> {
    Ok(Json(json!(ctx.admin.list().await?)))
}

/// Most events one `GET /events` returns.
const MAX_EVENTS: i64 = 1000;

#[derive(Deserialize)]
pub struct EventsParams {
    node: Option<String>,
    /// RFC 3339, e.g. `2026-12-01T10:00:00Z`.
    since: Option<String>,
    limit: Option<i64>,
}

/// `GET /events?node=&since=&limit=` (admin): the audit log, newest first.
pub async fn events(
    _: Admin,
    State(ctx): State<ApiContext>,
    Query(params): Query<EventsParams>,
) -> Result<Json<Value>, ApiError> {
    let node = match params.node.as_deref() {
        Some(node) => Some(
            NodeAddress::parse(node)
                .map_err(|e| ApiError::bad_request("invalid_node", e.to_string()))?
                .to_string(),
        ),
        None => None,
    };
    let since = match params.since.as_deref() {
        Some(since) => Some(
            chrono::DateTime::parse_from_rfc3339(since)
                .map_err(|e| {
                    ApiError::bad_request(
                        "invalid_query",
                        format!("since must be an RFC 3339 time (2026-12-01T10:00:00Z): {e}"),
                    )
                })?
                .with_timezone(&chrono::Utc),
        ),
        None => None,
    };
    let limit = params.limit.unwrap_or(100);
    if !(1..=MAX_EVENTS).contains(&limit) {
        return Err(ApiError::bad_request(
            "invalid_query",
            format!("limit must be between 1 and {MAX_EVENTS}"),
        ));
    }
    let events = ctx
        .archive
        .events(&EventQuery { node, since, limit })
        .await?;
    Ok(Json(json!(events)))
}

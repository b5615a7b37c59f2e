//! The admin endpoints: `POST /node` (add, drain, remove), `GET /nodes`,
//! `GET /events`. Every answer says what happened (`result`), besides the
//! `"message":"OK"` of the original API.

use std::time::Duration;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};

use super::error::ErrorBody;
use super::extract::{Admin, JsonBody, QueryParams};
use super::{ApiContext, ApiError};
use crate::archive::events::{EventQuery, EventRecord};
use crate::cluster::{NodeView, Outcome};
use crate::nodes::{NodeAddress, NodeState, Offers};

/// `POST /node`'s body.
#[derive(Deserialize, utoipa::ToSchema)]
pub struct NodeCommand {
    /// `add` (or re-weight), `drain` or `remove`.
    #[schema(pattern = "^(add|drain|remove)$", example = "add")]
    action: String,
    /// `http://host:port` of the node.
    #[schema(example = "http://127.0.0.1:8084")]
    address: String,
    /// `add`: a name for logs and metrics (default: from the address).
    name: Option<String>,
    /// `add`: 1 to 1000 (default 1).
    #[schema(minimum = 1, maximum = 1000)]
    weight: Option<u32>,
    /// `drain`: remove the node at the latest this many seconds from now
    /// (default: when its last session expires).
    #[schema(minimum = 1, maximum = 604800)]
    deadline_secs: Option<u64>,
}

/// What an admin command did. The fields beside `message` and `result`
/// depend on the action.
#[derive(Serialize, utoipa::ToSchema)]
pub struct NodeAnswer {
    /// Always `OK` (the original API's answer).
    #[schema(example = "OK")]
    message: &'static str,
    result: Outcome,
    /// `add`: the node as registered.
    #[serde(skip_serializing_if = "Option::is_none")]
    address: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    weight: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    state: Option<NodeState>,
    /// `add`: why a node was registered `down` (it did not answer, or could
    /// not be wiped); the health checks bring it up once it answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    /// `add`: what the node offers beyond `/press` and `/clean`.
    #[serde(skip_serializing_if = "Option::is_none")]
    offers: Option<Offers>,
    /// `drain`, `remove`: the node's sessions when the command ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    sessions: Option<i64>,
    /// `drain`: when the node is removed at the latest (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    deadline: Option<String>,
    /// `remove`: whether the node archived its sessions to Postgres (false:
    /// it was down or did not answer, and the clicks since its last archive
    /// are lost).
    #[serde(skip_serializing_if = "Option::is_none")]
    archived: Option<bool>,
}

impl NodeAnswer {
    fn new(result: Outcome) -> Self {
        Self {
            message: "OK",
            result,
            address: None,
            name: None,
            weight: None,
            state: None,
            reason: None,
            offers: None,
            sessions: None,
            deadline: None,
            archived: None,
        }
    }
}

/// `POST /node {"action":"add"|"drain"|"remove","address":..}` (admin),
/// counted by action and result.
#[utoipa::path(
    post, path = "/node", tag = "admin", security(("admin_token" = [])),
    request_body(content = NodeCommand, content_type = "application/json"),
    responses(
        (status = 200, description = "Done; `result` says what happened: `added`, `reweighted`, `unchanged`, `draining`, `removed`, `released` (an add of a node held down: the hold lifted, the node recovered if it answers)", body = NodeAnswer),
        (status = 400, description = "`invalid_json`, `invalid_node`, `unknown_action`, `invalid_deadline`, `bad_body`", body = ErrorBody),
        (status = 401, description = "`unauthorized`: no valid admin token", body = ErrorBody),
        (status = 404, description = "`not_found`: no such node (drain, remove)", body = ErrorBody),
        (status = 408, description = "`body_timeout`", body = ErrorBody),
        (status = 409, description = "`conflict` (another command on the node is running), `node_alias` (the node is registered under another address), `node_down` (drain of a node that is down)", body = ErrorBody),
        (status = 413, description = "`payload_too_large`", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`", body = ErrorBody),
        (status = 503, description = "`redis_unavailable`, `archive_unavailable`, `clean_failed`, `registry_rebuilding`, `operation_interrupted`, `admin_failed`", body = ErrorBody),
        (status = 504, description = "`request_timeout`", body = ErrorBody),
    )
)]
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
            let answer = NodeAnswer {
                address: Some(node.address),
                name: Some(node.name),
                weight: Some(node.weight),
                state: Some(node.state),
                reason: node.reason,
                offers: Some(node.offers),
                ..NodeAnswer::new(outcome)
            };
            Ok((outcome, Json(answer).into_response()))
        }
        "drain" => {
            let drain = ctx
                .admin
                .drain(&cmd.address, cmd.deadline_secs.map(Duration::from_secs))
                .await?;
            let deadline = chrono::DateTime::from_timestamp_millis(drain.deadline_ms)
                .map(|at| at.to_rfc3339());
            let answer = NodeAnswer {
                sessions: Some(drain.sessions),
                deadline,
                ..NodeAnswer::new(Outcome::Draining)
            };
            Ok((Outcome::Draining, Json(answer).into_response()))
        }
        "remove" => {
            let removal = ctx.admin.remove(&cmd.address).await?;
            let answer = NodeAnswer {
                sessions: Some(removal.sessions as i64),
                archived: Some(removal.archived),
                ..NodeAnswer::new(Outcome::Removed)
            };
            Ok((Outcome::Removed, Json(answer).into_response()))
        }
        other => Err(ApiError::bad_request(
            "unknown_action",
            format!("unknown action {other:?}: expected \"add\", \"drain\" or \"remove\""),
        )),
    }
}

/// `GET /nodes` (admin).
#[utoipa::path(
    get, path = "/nodes", tag = "admin", security(("admin_token" = [])),
    responses(
        (status = 200, description = "Every registered node", body = Vec<NodeView>),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
        (status = 503, description = "`redis_unavailable`, `registry_rebuilding`", body = ErrorBody),
        (status = 504, description = "`request_timeout`", body = ErrorBody),
    )
)]
pub async fn list(
    _: Admin,
    State(ctx): State<ApiContext>,
) -> Result<Json<Vec<NodeView>>, ApiError> {
    Ok(Json(ctx.admin.list().await?))
}

/// Most events one `GET /events` returns.
const MAX_EVENTS: i64 = 1000;

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventsParams {
    /// Only this node's events (`http://host:port`).
    node: Option<String>,
    /// Only events at or after this time, RFC 3339, e.g. `2026-12-01T10:00:00Z`.
    since: Option<String>,
    /// At most this many (default 100).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<i64>,
}

/// `GET /events?node=&since=&limit=` (admin): the audit log, newest first.
#[utoipa::path(
    get, path = "/events", tag = "admin", security(("admin_token" = [])),
    params(EventsParams),
    responses(
        (status = 200, description = "Membership changes, newest first", body = Vec<EventRecord>),
        (status = 400, description = "`invalid_node`, `invalid_query`", body = ErrorBody),
        (status = 401, description = "`unauthorized`", body = ErrorBody),
        (status = 503, description = "`archive_unavailable`", body = ErrorBody),
        (status = 504, description = "`request_timeout`", body = ErrorBody),
    )
)]
pub async fn events(
    _: Admin,
    State(ctx): State<ApiContext>,
    QueryParams(params): QueryParams<EventsParams>,
) -> Result<Json<Vec<EventRecord>>, ApiError> {
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
    Ok(Json(events))
}

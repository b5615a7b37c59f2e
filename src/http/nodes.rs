use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::extract::{Admin, JsonBody};
use super::{ApiContext, ApiError};

#[derive(Deserialize)]
pub struct NodeCommand {
    action: String,
    address: String,
    name: Option<String>,
    weight: Option<u32>,
}

/// `POST /node {"action":"add"|"remove","address":..}` (admin).
pub async fn node_command(
    _: Admin,
    State(ctx): State<ApiContext>,
    JsonBody(cmd): JsonBody<NodeCommand>,
) -> Result<Json<Value>, ApiError> {
    match cmd.action.as_str() {
        "add" => {
            let node = ctx
                .admin
                .add(&cmd.address, cmd.name.as_deref(), cmd.weight)
                .await?;
            Ok(Json(
                json!({ "message": "OK", "address": node.address, "state": node.state }),
            ))
        }
        "remove" => {
            let removal = ctx.admin.remove(&cmd.address).await?;
            Ok(Json(
                json!({ "message": "OK", "sessions": removal.sessions, "archived": removal.archived }),
            ))
        }
        other => Err(ApiError::bad_request(
            "unknown_action",
            format!("unknown action {other:?}: expected \"add\" or \"remove\""),
        )),
    }
}

/// `GET /nodes` (admin).
pub async fn list(_: Admin, State(ctx): State<ApiContext>) -> Result<Json<Value>, ApiError> {
    Ok(Json(json!(ctx.admin.list().await?)))
}

//! HTTP handlers of the reference node. Bodies are parsed leniently (any
//! content type) like the PHP nodes this one stands in for.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use rand::Rng;
use serde::Deserialize;
use serde_json::json;

use crate::counts::Pressed;
use crate::{archive, Node, NodeError};

pub(crate) fn router(node: Arc<Node>) -> Router {
    Router::new()
        .route("/press", post(press))
        .route("/clean", post(clean))
        .route("/process/{req_id}", get(process))
        .route("/health", get(health))
        .with_state(node)
}

#[derive(Deserialize)]
struct PressBody {
    session_id: String,
    /// The fencing epoch the balancer read the session's mapping under
    /// (`counts.rs`); absent from clients that do not fence.
    epoch: Option<u64>,
}

async fn press(State(node): State<Arc<Node>>, body: Bytes) -> Result<String, NodeError> {
    let body: PressBody = parse(&body)?;
    if body.session_id.is_empty() {
        return Err(NodeError::BadRequest("session_id must not be empty".into()));
    }
    let pressed = node
        .sessions
        .lock()
        .await
        .press(body.session_id, body.epoch);
    match pressed {
        Pressed::Counted(clicks) => Ok(format!("You clicked {clicks} times")),
        Pressed::Refused { fence } => Err(NodeError::StaleEpoch {
            epoch: body.epoch.unwrap_or_default(),
            fence,
        }),
    }
}

#[derive(Deserialize)]
struct CleanBody {
    #[serde(default)]
    archive: bool,
    session_ids: Option<Vec<String>>,
    /// The balancer's clean token, written into the archive rows; once
    /// the clean is done, no press under an older epoch counts for the
    /// sessions it forgot (`counts.rs`).
    generation: Option<i64>,
}

/// `/clean`: archive (optionally) then forget. The session map stays locked
/// for the whole operation so no press lands between the archive write and
/// the forget. If the archive write fails nothing is forgotten.
async fn clean(State(node): State<Arc<Node>>, body: Bytes) -> Result<Response, NodeError> {
    let body: CleanBody = if body.is_empty() {
        CleanBody {
            archive: false,
            session_ids: None,
            generation: None,
        }
    } else {
        parse(&body)?
    };
    let selected = body.session_ids.filter(|_| !node.clean_all);
    let token = body.generation.and_then(|g| u64::try_from(g).ok());
    let mut sessions = node.sessions.lock().await;
    let counts = sessions.snapshot(selected.as_deref(), token);
    if body.archive {
        // Bounded: the session map is locked meanwhile, so a silent
        // Postgres must not hold every press of this node.
        match tokio::time::timeout(
            node.archive_timeout,
            archive::upsert(&node.pool, &counts, body.generation),
        )
        .await
        {
            Ok(result) => result.map_err(NodeError::Archive)?,
            Err(_) => return Err(NodeError::ArchiveTimeout),
        }
    }
    tracing::info!(node = %node.name, sessions = counts.len(), archive = body.archive, "cleaned");
    sessions.forget(selected.as_deref(), token);
    match selected {
        Some(ids) => Ok(Json(json!({ "cleaned": ids })).into_response()),
        None => Ok("OK".into_response()),
    }
}

async fn process(
    State(node): State<Arc<Node>>,
    Path(req_id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Json<serde_json::Value> {
    let delay = if node.max_delay_ms == 0 {
        0
    } else {
        rand::rng().random_range(node.min_delay_ms..=node.max_delay_ms)
    };
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    let user_id = query.get("user_id").map(|u| {
        u.parse::<i64>()
            .map(serde_json::Value::from)
            .unwrap_or_else(|_| serde_json::Value::from(u.as_str()))
    });
    Json(json!({
        "agent_id": node.name,
        "request_id": req_id,
        "user_id": user_id,
        "timestamp": chrono::Utc::now().to_rfc3339(),
    }))
}

/// Says what this node offers beyond the task's API, for the balancer to
/// detect: an instance id (a restart is noticed), clean tokens written into
/// the archive rows, presses fenced by epoch (`counts.rs`), and cleans of
/// only the sessions named (unless started with `--clean-all`).
async fn health(State(node): State<Arc<Node>>) -> Json<serde_json::Value> {
    let mut features = vec!["clean_tokens", "fencing"];
    if !node.clean_all {
        features.push("session_ids");
    }
    Json(json!({
        "status": "ok",
        "name": node.name,
        "instance": node.instance,
        "features": features,
    }))
}

fn parse<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, NodeError> {
    serde_json::from_slice(body)
        .map_err(|e| NodeError::BadRequest(format!("invalid JSON body: {e}")))
}

use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;

use super::extract::JsonBody;
use super::{ApiContext, ApiError};
use crate::session::SessionId;

#[derive(Deserialize)]
pub struct PressRequest {
    session_id: String,
}

/// `POST /press {"session_id":..}` -> `You clicked N times`.
pub async fn press(
    State(ctx): State<ApiContext>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<PressRequest>,
) -> Result<Response, ApiError> {
    let id = SessionId::parse(body.session_id)?;
    let started = std::time::Instant::now();
    let result = ctx.sessions.press(&id).await;
    metrics::histogram!("nodes_control_press_duration_seconds")
        .record(started.elapsed().as_secs_f64());
    let outcome = if result.is_ok() { "ok" } else { "error" };
    metrics::counter!("nodes_control_presses_total", "outcome" => outcome).increment(1);
    let pressed = result?;
    let message = format!("You clicked {} times", pressed.clicks);
    let mut response = if wants_json(&headers) {
        Json(json!({ "session_id": id.as_str(), "clicks": pressed.clicks, "message": message }))
            .into_response()
    } else {
        message.into_response()
    };
    if let Some(name) = &pressed.node.served_by {
        response.headers_mut().insert("x-served-by", name.clone());
    }
    Ok(response)
}

fn wants_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| accept.contains("application/json"))
}

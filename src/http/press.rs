use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use metrics::{Counter, Histogram};
use serde::Deserialize;
use serde_json::json;

use super::extract::JsonBody;
use super::{ApiContext, ApiError, Services};
use crate::session::{Pressed, SessionId};

#[derive(Deserialize)]
pub struct PressRequest {
    pub session_id: String,
}

/// The press metrics, registered once: the macros look a metric up by name
/// and labels on every call, a cost the hot path does not need.
pub struct PressMetrics {
    served: Counter,
    failed: Counter,
    duration: Histogram,
}

impl PressMetrics {
    pub fn register() -> Self {
        Self {
            served: metrics::counter!("nodes_control_presses_total", "outcome" => "ok"),
            failed: metrics::counter!("nodes_control_presses_total", "outcome" => "error"),
            duration: metrics::histogram!("nodes_control_press_duration_seconds"),
        }
    }
}

/// A served press: what the answer is made of.
pub struct Answer {
    pub id: SessionId,
    pub pressed: Pressed,
}

impl Answer {
    /// The body and its content type: the count as text, or as JSON.
    pub fn body(&self, json: bool) -> (&'static str, Vec<u8>) {
        let clicks = self.pressed.clicks;
        if json {
            let body = json!({
                "session_id": self.id.as_str(),
                "clicks": clicks,
                "message": format!("You clicked {clicks} times"),
            });
            ("application/json", body.to_string().into_bytes())
        } else {
            (
                "text/plain; charset=utf-8",
                format!("You clicked {clicks} times").into_bytes(),
            )
        }
    }

    pub fn served_by(&self) -> Option<&HeaderValue> {
        self.pressed.node.served_by.as_ref()
    }
}

/// One press of the session named in `body`, counted in the metrics. Both
/// listeners' paths (the front's and the router's) come here.
pub async fn press_session(ctx: &Services, session_id: String) -> Result<Answer, ApiError> {
    let id = SessionId::parse(session_id)?;
    let started = std::time::Instant::now();
    let result = ctx.sessions.press(&id).await;
    ctx.press_metrics
        .duration
        .record(started.elapsed().as_secs_f64());
    match result {
        Ok(pressed) => {
            ctx.press_metrics.served.increment(1);
            Ok(Answer { id, pressed })
        }
        Err(error) => {
            ctx.press_metrics.failed.increment(1);
            Err(error.into())
        }
    }
}

/// `POST /press {"session_id":..}` -> `You clicked N times`. The listener
/// serves plain presses itself (`server`); this is the path of the rest.
pub async fn press(
    State(ctx): State<ApiContext>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<PressRequest>,
) -> Result<Response, ApiError> {
    let answer = press_session(&ctx, body.session_id).await?;
    let (content_type, body) = answer.body(wants_json(&headers));
    let mut response = ([(header::CONTENT_TYPE, content_type)], body).into_response();
    if let Some(name) = answer.served_by() {
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

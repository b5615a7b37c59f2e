use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use metrics::{Counter, Histogram};
use serde::Deserialize;

use super::error::ErrorBody;
use super::extract::JsonBody;
use super::{ApiContext, ApiError, Services};
use crate::session::{Pressed, SessionId, SessionIdError};

/// `POST /press`'s body.
#[derive(Deserialize, utoipa::ToSchema)]
pub struct PressRequest {
    /// The session's id: 1 to 255 bytes of UTF-8, no control characters
    /// and no invisible format characters (bidi controls, zero-width).
    #[serde(default)]
    #[schema(value_type = String, min_length = 1, max_length = 255, example = "u1")]
    pub session_id: IdField,
}

/// A press's answer with `Accept: application/json`.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct PressAnswer<'a> {
    pub session_id: &'a str,
    /// The session's count after this press.
    pub clicks: i64,
    /// `You clicked N times`, the plain answer.
    pub message: String,
}

/// `session_id` as sent. A missing id or one that is not a string is an
/// invalid id (400 `invalid_session_id`), not malformed JSON.
#[derive(Debug, Default)]
pub enum IdField {
    #[default]
    Missing,
    Text(String),
    NotText,
}

impl<'de> Deserialize<'de> for IdField {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(IdFieldVisitor)
    }
}

struct IdFieldVisitor;

impl<'de> serde::de::Visitor<'de> for IdFieldVisitor {
    type Value = IdField;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a session id")
    }

    fn visit_str<E>(self, v: &str) -> Result<IdField, E> {
        Ok(IdField::Text(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<IdField, E> {
        Ok(IdField::Text(v))
    }

    fn visit_bool<E>(self, _: bool) -> Result<IdField, E> {
        Ok(IdField::NotText)
    }

    fn visit_i64<E>(self, _: i64) -> Result<IdField, E> {
        Ok(IdField::NotText)
    }

    fn visit_u64<E>(self, _: u64) -> Result<IdField, E> {
        Ok(IdField::NotText)
    }

    fn visit_f64<E>(self, _: f64) -> Result<IdField, E> {
        Ok(IdField::NotText)
    }

    fn visit_unit<E>(self) -> Result<IdField, E> {
        Ok(IdField::NotText)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<IdField, A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(IdField::NotText)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<IdField, A::Error> {
        while map
            .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
            .is_some()
        {}
        Ok(IdField::NotText)
    }
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
pub struct ServedPress {
    pub id: SessionId,
    pub pressed: Pressed,
}

impl ServedPress {
    /// The body and its content type: the count as text, or as JSON.
    pub fn body(&self, json: bool) -> (&'static str, Vec<u8>) {
        let clicks = self.pressed.clicks;
        if json {
            let body = PressAnswer {
                session_id: self.id.as_str(),
                clicks,
                message: format!("You clicked {clicks} times"),
            };
            let body = serde_json::to_vec(&body).expect("a struct of strings and a number");
            ("application/json", body)
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
pub async fn press_session(ctx: &Services, session_id: IdField) -> Result<ServedPress, ApiError> {
    let id = match session_id {
        IdField::Text(id) => SessionId::parse(id)?,
        IdField::Missing => return Err(SessionIdError::Missing.into()),
        IdField::NotText => return Err(SessionIdError::NotAString.into()),
    };
    let started = std::time::Instant::now();
    let result = ctx.sessions.press(&id).await;
    ctx.press_metrics
        .duration
        .record(started.elapsed().as_secs_f64());
    match result {
        Ok(pressed) => {
            ctx.press_metrics.served.increment(1);
            Ok(ServedPress { id, pressed })
        }
        Err(error) => {
            ctx.press_metrics.failed.increment(1);
            Err(error.into())
        }
    }
}

/// `POST /press {"session_id":..}` -> `You clicked N times`. The listener
/// serves plain presses itself (`server`); this is the path of the rest.
#[utoipa::path(
    post, path = "/press", tag = "sessions",
    request_body(content = PressRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Counted: the session's count after this press; JSON with `Accept: application/json`",
            headers(("x-served-by" = String, description = "The node's name")),
            content(
                (String = "text/plain", example = "You clicked 1 times"),
                (PressAnswer = "application/json"),
            )),
        (status = 400, description = "`invalid_json`, `invalid_session_id`, `bad_body`, `transfer_encoding_refused`", body = ErrorBody),
        (status = 408, description = "`body_timeout`: the body did not arrive within `BODY_READ_TIMEOUT_MS`", body = ErrorBody),
        (status = 413, description = "`payload_too_large`: more than 4096 bytes", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`: not `application/json` in UTF-8", body = ErrorBody),
        (status = 503, description = "`no_node_available`, `nodes_failed`, `redis_unavailable`, `archive_unavailable`, `clean_failed`, `node_busy` (the node's queue stayed full), `failover_incomplete`, `registry_rebuilding`, `replica_not_ready`, `press_timeout`: nothing was counted. Every 503 carries `Retry-After`", body = ErrorBody),
        (status = 504, description = "The node took the press and its outcome is unknown (it may have counted it; the next 200 shows it; never tried elsewhere): `node_timeout` (no answer within `NODE_TIMEOUT_MS`), `node_unavailable` (a gateway in front of it answered 502 or 503), `node_failed` (the connection failed, or the node was declared down, after the press was sent), `replica_paused` (the node counted it, but this replica was silent meanwhile and the node may have been failed over, or the registry could not be read to rule it out: the count is not shown). `request_timeout`: past `REQUEST_TIMEOUT_MS`", body = ErrorBody),
    )
)]
pub async fn press(
    State(ctx): State<ApiContext>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<PressRequest>,
) -> Response {
    let session = match (&body.session_id, ctx.access_log) {
        (IdField::Text(id), true) => {
            Some(super::access::SessionHash(super::access::session_hash(id)))
        }
        _ => None,
    };
    let mut response = answer(&ctx, &headers, body)
        .await
        .unwrap_or_else(IntoResponse::into_response);
    if let Some(session) = session {
        response.extensions_mut().insert(session);
    }
    response
}

async fn answer(
    ctx: &ApiContext,
    headers: &HeaderMap,
    body: PressRequest,
) -> Result<Response, ApiError> {
    let answer = press_session(ctx, body.session_id).await?;
    let (content_type, body) = answer.body(wants_json(headers));
    let mut response = ([(header::CONTENT_TYPE, content_type)], body).into_response();
    if let Some(name) = answer.served_by() {
        response.headers_mut().insert("x-served-by", name.clone());
    }
    Ok(response)
}

fn wants_json(headers: &HeaderMap) -> bool {
    super::extract::wants_json(headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()))
}

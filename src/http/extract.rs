//! Request extractors: a JSON body with the statuses of design.md §3 (415 not
//! JSON, 413 too large, 400 malformed; never axum's 422), and admin auth.

use axum::body::Bytes;
use axum::extract::{FromRef, FromRequest, FromRequestParts, Request};
use axum::http::header;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use subtle::ConstantTimeEq;

use super::{ApiContext, ApiError};

/// Largest request body accepted (design.md §3).
pub const MAX_BODY_BYTES: usize = 4096;

pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T>
where
    ApiContext: FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        if !is_json(req.headers()) {
            return Err(ApiError::UnsupportedMediaType);
        }
        let limit = ApiContext::from_ref(state).body_read_timeout;
        // A client that trickles its body holds a socket for this long at most.
        let bytes = tokio::time::timeout(limit, Bytes::from_request(req, state))
            .await
            .map_err(|_| ApiError::BodyTimeout)?
            .map_err(|rejection| match rejection.status() {
                axum::http::StatusCode::PAYLOAD_TOO_LARGE => {
                    ApiError::PayloadTooLarge(MAX_BODY_BYTES)
                }
                _ => ApiError::bad_request("bad_body", rejection.body_text()),
            })?;
        json_object(&bytes).map(JsonBody)
    }
}

/// A JSON object body, as `T` (400 `invalid_json` otherwise).
pub fn json_object<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    // serde would read `["u1"]` as a struct too; our bodies are objects.
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(ApiError::bad_request(
            "invalid_json",
            "the body must be a JSON object",
        ));
    }
    serde_json::from_slice(bytes)
        .map_err(|e| ApiError::bad_request("invalid_json", format!("invalid JSON body: {e}")))
}

fn is_json(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(is_json_content_type)
}

/// `application/json` or `application/*+json`, in UTF-8 if a charset is named.
pub fn is_json_content_type(content_type: &str) -> bool {
    let mut parts = content_type.split(';');
    let essence = parts.next().unwrap_or("").trim().to_ascii_lowercase();
    // JSON is UTF-8 (RFC 8259); a body announced in another charset would
    // be read as something it is not.
    let utf8 = parts.all(|param| match param.split_once('=') {
        Some((name, value)) if name.trim().eq_ignore_ascii_case("charset") => {
            value.trim().trim_matches('"').eq_ignore_ascii_case("utf-8")
        }
        _ => true,
    });
    utf8 && (essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json")))
}

/// Whether a press's answer is JSON rather than the node's text: its (first)
/// `Accept` names `application/json`. The one rule, for the router and for
/// the presses the listener answers itself.
pub fn wants_json(accept: Option<&str>) -> bool {
    accept.is_some_and(|accept| accept.contains("application/json"))
}

/// Proof that the request carried `Authorization: Bearer $ADMIN_TOKEN`.
pub struct Admin;

impl<S: Send + Sync> FromRequestParts<S> for Admin
where
    ApiContext: FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let ctx = ApiContext::from_ref(state);
        let presented = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .map(str::trim)
            .unwrap_or("");
        // Constant time, so the token cannot be guessed byte by byte.
        if !presented.is_empty()
            && bool::from(presented.as_bytes().ct_eq(ctx.admin_token.as_bytes()))
        {
            Ok(Admin)
        } else {
            Err(ApiError::Unauthorized)
        }
    }
}

/// Query parameters; ones that do not parse are a JSON 400 `invalid_query`
/// (axum's own rejection is plain text).
pub struct QueryParams<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for QueryParams<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Query(params)| QueryParams(params))
            .map_err(|rejection| ApiError::bad_request("invalid_query", rejection.body_text()))
    }
}

/// Path parameters; ones that do not decode (bad percent-encoding, not
/// UTF-8) are a JSON 400 `invalid_path`.
pub struct PathParams<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for PathParams<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Path(params)| PathParams(params))
            .map_err(|rejection| ApiError::bad_request("invalid_path", rejection.body_text()))
    }
}

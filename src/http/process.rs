use std::collections::HashMap;
use std::net::SocketAddr;

use axum::extract::{ConnectInfo, State};
use axum::http::{header, Uri};
use axum::response::{IntoResponse, Response};
use balancing::StrategyKind;

use super::error::ErrorBody;
use super::extract::QueryParams;
use super::{ApiContext, ApiError};

/// Longest `/process/{req_id}` path passed on to a node, in bytes.
pub const MAX_PROCESS_PATH: usize = 1024;
/// Longest request id (the path segment), in bytes.
pub const MAX_REQUEST_ID: usize = 128;
/// Longest query string passed on to a node, in bytes.
pub const MAX_PROCESS_QUERY: usize = 2048;

/// `GET /process/{req_id}?user_id=N`: routed statelessly by `STRATEGY`.
#[utoipa::path(
    get, path = "/process/{req_id}", tag = "sessions",
    params(
        ("req_id" = String, Path, description = "1 to 128 letters, digits, `-`, `.`, `_` or `~`", pattern = "^[A-Za-z0-9._~-]{1,128}$"),
        ("user_id" = Option<String>, Query, description = "The key of hashing strategies (default: the request id)"),
    ),
    responses(
        (status = 200, description = "The node's answer, passed on with its content type",
            headers(("x-served-by" = String, description = "The node's name")),
            content(
                (Object = "application/json"),
                (String = "text/plain"),
            )),
        (status = 400, description = "`invalid_request_id`, `invalid_query`", body = ErrorBody),
        (status = 414, description = "`uri_too_long`: path over 1024 or query over 2048 bytes", body = ErrorBody),
        (status = 503, description = "`no_node_available`, `nodes_failed`, `node_busy` (the node's queue stayed full, or it timed out while answering others)", body = ErrorBody),
        (status = 504, description = "`request_timeout`", body = ErrorBody),
    )
)]
pub async fn process(
    State(ctx): State<ApiContext>,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    QueryParams(query): QueryParams<HashMap<String, String>>,
    uri: Uri,
) -> Result<Response, ApiError> {
    // Checked before anything is sent: a request we could not forward is
    // the client's error, never a node's (design.md §4.13).
    if uri.path().len() > MAX_PROCESS_PATH {
        return Err(ApiError::UriTooLong(format!(
            "the path is longer than {MAX_PROCESS_PATH} bytes"
        )));
    }
    if uri.query().map_or(0, str::len) > MAX_PROCESS_QUERY {
        return Err(ApiError::UriTooLong(format!(
            "the query is longer than {MAX_PROCESS_QUERY} bytes"
        )));
    }
    let req_id = uri.path().trim_start_matches("/process/");
    if req_id.is_empty()
        || req_id.len() > MAX_REQUEST_ID
        || !req_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b))
    {
        return Err(ApiError::bad_request(
            "invalid_request_id",
            format!("the request id must be 1 to {MAX_REQUEST_ID} letters, digits, '-', '.', '_' or '~'"),
        ));
    }
    let path_and_query = uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or(uri.path());
    // The key hashing strategies use: the user, else the request itself;
    // ip-hash keys on the client address like nginx's ip_hash.
    let key = if ctx.process_router.strategy() == StrategyKind::IpHash {
        client.ip().to_string()
    } else {
        query
            .get("user_id")
            .cloned()
            .unwrap_or_else(|| uri.path().trim_start_matches("/process/").to_owned())
    };
    let routed = ctx
        .process_router
        .route(path_and_query, key.as_bytes())
        .await?;
    let mut response = (routed.status, routed.body).into_response();
    if let Some(content_type) = routed.content_type {
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, content_type);
    }
    if let Some(name) = routed.served_by {
        response.headers_mut().insert("x-served-by", name);
    }
    Ok(response)
}

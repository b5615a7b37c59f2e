use std::collections::HashMap;
use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Query, State};
use axum::http::{header, Uri};
use axum::response::{IntoResponse, Response};
use balancing::StrategyKind;

use super::{ApiContext, ApiError};

/// `GET /process/{req_id}?user_id=N`: routed statelessly by `STRATEGY`.
pub async fn process(
    State(ctx): State<ApiContext>,
    ConnectInfo(client): ConnectInfo<SocketAddr>,
    Query(query): Query<HashMap<String, String>>,
    uri: Uri,
) -> Result<Response, ApiError> {
    let path_and_query = uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or(uri.path());
    // The key hashing strategies use: the user, else the request itself;
    // ip-hash keys on the client address like nginx's ip_hash.
    let key = if ctx.router.strategy() == StrategyKind::IpHash {
        client.ip().to_string()
    } else {
        query
            .get("user_id")
            .cloned()
            .unwrap_or_else(|| uri.path().trim_start_matches("/process/").to_owned())
    };
    let routed = ctx.router.route(path_and_query, key.as_bytes()).await?;
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

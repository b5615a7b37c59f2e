use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

/// Why a node request failed; turned into a response in one place.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("{0}")]
    BadRequest(String),
    #[error("writing the archive to Postgres")]
    Archive(#[source] sqlx::Error),
    #[error("the archive did not answer in time")]
    ArchiveTimeout,
}

impl IntoResponse for NodeError {
    fn into_response(self) -> Response {
        let (status, code, message) = match &self {
            NodeError::BadRequest(msg) => (StatusCode::BAD_REQUEST, "bad_request", msg.clone()),
            NodeError::Archive(source) => {
                tracing::error!(error = %source, "archive write failed");
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "archive_unavailable",
                    "the archive is unavailable; nothing was cleaned".to_string(),
                )
            }
            NodeError::ArchiveTimeout => {
                tracing::error!("archive write timed out");
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "archive_unavailable",
                    "the archive did not answer in time; nothing was cleaned".to_string(),
                )
            }
        };
        (status, Json(json!({ "error": message, "code": code }))).into_response()
    }
}

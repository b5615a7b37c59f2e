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
    /// A press read before the last clean of its session (`counts.rs`).
    #[error("epoch {epoch} is older than this session's fence {fence}")]
    StaleEpoch { epoch: u64, fence: u64 },
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
            NodeError::StaleEpoch { fence, .. } => {
                let body =
                    json!({ "error": self.to_string(), "code": "stale_epoch", "fence": fence });
                return (StatusCode::CONFLICT, Json(body)).into_response();
            }
        };
        (status, Json(json!({ "error": message, "code": code }))).into_response()
    }
}

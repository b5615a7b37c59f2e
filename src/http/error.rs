//! The one place errors become HTTP responses: JSON `{"error","code"}` with
//! the right status. A 5xx never carries internals; the detail goes to the log.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::archive::ArchiveError;
use crate::cluster::AdminError;
use crate::lifecycle::CleanError;
use crate::nodes::NodeCallError;
use crate::routing::RouteError;
use crate::session::{Busy, PressError, SessionIdError};
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{message}")]
    BadRequest { code: &'static str, message: String },
    #[error("a valid admin token is required: send Authorization: Bearer <ADMIN_TOKEN>")]
    Unauthorized,
    #[error("{0}")]
    NotFound(String),
    #[error("this endpoint does not answer that method (see the Allow header)")]
    MethodNotAllowed,
    #[error("{message}")]
    Conflict { code: &'static str, message: String },
    #[error("the request body is larger than {0} bytes")]
    PayloadTooLarge(usize),
    #[error("the request body must be JSON in UTF-8 (Content-Type: application/json)")]
    UnsupportedMediaType,
    #[error("{0}")]
    UriTooLong(String),
    #[error("the request body did not arrive in time")]
    BodyTimeout,
    #[error("the request took too long; try again")]
    GatewayTimeout,
    #[error("{message}")]
    Unavailable { code: &'static str, message: String },
    /// The node took the press and its outcome is unknown.
    #[error("{message}")]
    OutcomeUnknown { code: &'static str, message: String },
}

impl ApiError {
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::BadRequest {
            code,
            message: message.into(),
        }
    }

    fn unavailable(code: &'static str, message: &str) -> Self {
        Self::Unavailable {
            code,
            message: message.to_owned(),
        }
    }

    pub fn status(&self) -> StatusCode {
        self.status_and_code().0
    }

    fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::BadRequest { code, .. } => (StatusCode::BAD_REQUEST, code),
            ApiError::Unauthorized => (StatusCode::UNAUTHORIZED, "unauthorized"),
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            ApiError::MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
            ApiError::Conflict { code, .. } => (StatusCode::CONFLICT, code),
            ApiError::PayloadTooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
            ApiError::UnsupportedMediaType => {
                (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type")
            }
            ApiError::UriTooLong(_) => (StatusCode::URI_TOO_LONG, "uri_too_long"),
            ApiError::BodyTimeout => (StatusCode::REQUEST_TIMEOUT, "body_timeout"),
            ApiError::GatewayTimeout => (StatusCode::GATEWAY_TIMEOUT, "request_timeout"),
            ApiError::Unavailable { code, .. } => (StatusCode::SERVICE_UNAVAILABLE, code),
            ApiError::OutcomeUnknown { code, .. } => (StatusCode::GATEWAY_TIMEOUT, code),
        }
    }
}

/// The body of every error answer.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// What went wrong, for a person.
    pub error: String,
    /// What went wrong, for a program: `invalid_session_id`, `unauthorized`,
    /// `redis_unavailable`, ... (the README's error table).
    pub code: &'static str,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        let body = ErrorBody {
            error: self.to_string(),
            code,
        };
        let mut response = (status, Json(body)).into_response();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            // Every 503 is passing: a busy node, a dependency coming back.
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static("1"),
            );
        }
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                "Bearer".parse().expect("static header"),
            );
        }
        response
    }
}

impl From<SessionIdError> for ApiError {
    fn from(e: SessionIdError) -> Self {
        ApiError::bad_request("invalid_session_id", e.to_string())
    }
}

impl From<PressError> for ApiError {
    fn from(e: PressError) -> Self {
        match e {
            PressError::NoNode => {
                ApiError::unavailable("no_node_available", "no node is available")
            }
            PressError::NodeFailed { node, source } => {
                tracing::error!(%node, error = %source, "press failed on two nodes");
                ApiError::unavailable(
                    "nodes_failed",
                    "the press failed on two nodes in a row; try again",
                )
            }
            PressError::Store(source) => redis_unavailable(&source),
            PressError::Archive(source) => archive_unavailable(&source),
            PressError::Expire(source) => clean_failed(&source),
            PressError::FailOver(source) => {
                tracing::error!(error = %source, "failover did not complete");
                ApiError::unavailable(
                    "failover_incomplete",
                    "the session's node failed and its sessions are still being moved; try again",
                )
            }
            PressError::NodeBusy { node, why } => node_busy(&node, why),
            PressError::OutcomeUnknown { node, source } => outcome_unknown(&node, &source),
            PressError::FailedOverMeanwhile { node } => {
                tracing::warn!(%node, "press counted by a node failed over while this replica was silent");
                ApiError::OutcomeUnknown {
                    code: "replica_paused",
                    message: "this balancer replica was paused (or out of touch with Redis) while the node had the press, and the node may have been failed over meanwhile; the next answer shows where the session stands".to_owned(),
                }
            }
            PressError::Rebuilding => rebuilding(),
            PressError::NotFollowingFences => ApiError::unavailable(
                "replica_not_ready",
                "this balancer replica is restarting an internal task; try again",
            ),
            PressError::Deadline => {
                tracing::error!("press did not complete within its deadline");
                ApiError::unavailable("press_timeout", "the press took too long; try again")
            }
        }
    }
}

fn node_busy(node: &str, why: Busy) -> ApiError {
    match why {
        Busy::Cleaning => tracing::error!(%node, "press waited too long for a clean of its node"),
        Busy::Queue => tracing::debug!(%node, "press refused: the node's queue is full"),
    }
    ApiError::unavailable(
        "node_busy",
        &format!("the session's node is busy ({why}); nothing was counted; try again"),
    )
}

/// 504, with a code for what ended the press.
fn outcome_unknown(node: &str, source: &NodeCallError) -> ApiError {
    tracing::warn!(%node, error = %source, "press outcome unknown");
    let (code, what) = if source.is_timeout() {
        ("node_timeout", "the session's node did not answer in time")
    } else if source.is_gateway() {
        (
            "node_unavailable",
            "a gateway in front of the session's node answered that it is unavailable",
        )
    } else {
        (
            "node_failed",
            "the session's node failed while it had the press",
        )
    };
    ApiError::OutcomeUnknown {
        code,
        message: format!("{what}; it may have counted the press, and the next answer shows it"),
    }
}

impl From<RouteError> for ApiError {
    fn from(e: RouteError) -> Self {
        match e {
            RouteError::BadRequest(message) => ApiError::bad_request("invalid_request", message),
            RouteError::NodeFailed { node, source } => {
                tracing::error!(%node, error = %source, "/process failed on every node tried");
                ApiError::unavailable("nodes_failed", "no node could serve the request")
            }
            RouteError::NoNode => {
                ApiError::unavailable("no_node_available", "no node is available")
            }
            RouteError::Busy(node) => {
                tracing::debug!(%node, "/process refused: the node is busy");
                ApiError::unavailable("node_busy", "the chosen node is busy; try again")
            }
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        redis_unavailable(&e)
    }
}

impl From<ArchiveError> for ApiError {
    fn from(e: ArchiveError) -> Self {
        archive_unavailable(&e)
    }
}

impl From<AdminError> for ApiError {
    fn from(e: AdminError) -> Self {
        match e {
            AdminError::Address(_) | AdminError::Weight | AdminError::Name => {
                ApiError::bad_request("invalid_node", e.to_string())
            }
            AdminError::DrainDeadline => ApiError::bad_request("invalid_deadline", e.to_string()),
            AdminError::DrainDown(_) => ApiError::Conflict {
                code: "node_down",
                message: e.to_string(),
            },
            AdminError::UnknownNode(_) => ApiError::NotFound(e.to_string()),
            AdminError::Busy(_) => ApiError::Conflict {
                code: "conflict",
                message: e.to_string(),
            },
            AdminError::Alias { .. } => ApiError::Conflict {
                code: "node_alias",
                message: e.to_string(),
            },
            AdminError::Store(source) => redis_unavailable(&source),
            AdminError::Archive(source) => archive_unavailable(&source),
            AdminError::Clean(source) => clean_failed(&source),
            AdminError::Rebuilding => rebuilding(),
            AdminError::Task(error) => {
                tracing::error!(%error, "admin task failed");
                ApiError::unavailable("admin_failed", "the operation failed; try again")
            }
        }
    }
}

fn rebuilding() -> ApiError {
    ApiError::unavailable(
        "registry_rebuilding",
        "Redis lost its data and the node registry is being rebuilt; try again in a few seconds",
    )
}

fn redis_unavailable(source: &StoreError) -> ApiError {
    if source.is_identity_changed() {
        return rebuilding();
    }
    if source.is_lock_lost() {
        tracing::warn!(error = %source, "operation stopped: it lost its node lock");
        return ApiError::unavailable(
            "operation_interrupted",
            "the operation paused past its hold on the node and another took it over; try again",
        );
    }
    tracing::error!(error = %source, cause = %source.source, "Redis unavailable");
    ApiError::unavailable(
        "redis_unavailable",
        "session state is unavailable; try again",
    )
}

fn archive_unavailable(source: &ArchiveError) -> ApiError {
    tracing::error!(error = %source, cause = %source.source, "Postgres unavailable");
    ApiError::unavailable(
        "archive_unavailable",
        "the session archive is unavailable; try again",
    )
}

/// A clean that could not run: most often the node could not archive
/// because Postgres is down, so the session waits rather than restart.
fn clean_failed(source: &CleanError) -> ApiError {
    tracing::error!(error = %source, "clean failed");
    match source {
        CleanError::Store(store) => redis_unavailable(store),
        CleanError::Archive(archive) => archive_unavailable(archive),
        _ => ApiError::unavailable("clean_failed", "the node could not archive; try again"),
    }
}

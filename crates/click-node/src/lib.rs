//! The reference click-counter node (design.md §1): counts presses per session in
//! memory, archives them into `session_archive` on `/clean`, and serves the
//! stateless `/process/{req_id}` agent endpoint with simulated latency.
//!
//! It is a library so that tests and benchmarks start nodes in-process with
//! [`app`]; `main.rs` only parses flags and calls [`serve`].

mod archive;
mod config;
mod counts;
mod error;
mod routes;

use std::sync::Arc;

use axum::Router;
use sqlx::postgres::{PgPool, PgPoolOptions};
use tokio::net::TcpListener;
use tokio::sync::Mutex;

pub use config::Config;
pub use error::NodeError;

/// Everything a node holds. Cheap to share behind an `Arc`.
pub struct Node {
    name: String,
    pool: PgPool,
    /// Clicks per session, and the fence on them (`counts.rs`). A tokio
    /// mutex, not a std one, because `/clean` must hold it across the
    /// archive write: a press that slipped in between the archive and the
    /// forget would be lost (design.md §4.7, clean is a fence).
    sessions: Mutex<counts::Counts>,
    min_delay_ms: u64,
    max_delay_ms: u64,
    clean_all: bool,
    /// Longest wait for the archive write of a `/clean`.
    archive_timeout: std::time::Duration,
    /// Random id of this process: a restarted node reports a new one, so
    /// the balancer can tell that its counts are gone.
    instance: String,
}

impl Node {
    /// Builds a node from its configuration. The database pool is lazy so a
    /// node starts (and counts presses) while Postgres is down; only
    /// `/clean {"archive":true}` needs it.
    pub fn new(config: &Config) -> anyhow::Result<Arc<Self>> {
        let pool = PgPoolOptions::new()
            .max_connections(4)
            .acquire_timeout(std::time::Duration::from_millis(config.archive_timeout_ms))
            .connect_lazy(&config.database_url)?;
        Ok(Arc::new(Self {
            name: config.name.clone(),
            pool,
            sessions: Mutex::new(counts::Counts::default()),
            min_delay_ms: config.min_delay_ms.min(config.max_delay_ms),
            max_delay_ms: config.max_delay_ms,
            clean_all: config.clean_all,
            archive_timeout: std::time::Duration::from_millis(config.archive_timeout_ms),
            instance: uuid::Uuid::new_v4().to_string(),
        }))
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// Number of sessions this node currently counts.
    pub async fn session_count(&self) -> usize {
        self.sessions.lock().await.len()
    }
}

/// The node's router, with its state applied.
pub fn app(node: Arc<Node>) -> Router {
    routes::router(node)
}

/// Serves the node on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    node: Arc<Node>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, app(node))
        .with_graceful_shutdown(shutdown)
        .await
}

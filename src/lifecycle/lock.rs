//! One admin operation per node at a time, across replicas: add, remove,
//! recovery and every clean take the node's lock in Redis.

use std::future::Future;
use std::time::Duration;

use tracing::warn;

use crate::store::{SessionStore, StoreError};

/// How long an operation waits for another one on the same node.
pub const LOCK_WAIT: Duration = Duration::from_secs(15);
/// Lock lifetime: longer than any clean takes, so it only expires if its
/// holder died (and then the journal lets the next holder finish its work).
pub const LOCK_TTL_MS: u64 = 30_000;

/// Runs `op` holding the node's lock. `busy` makes the error returned when
/// the lock cannot be had within [`LOCK_WAIT`].
pub async fn with_node_lock<T, E: From<StoreError>>(
    store: &SessionStore,
    addr: &str,
    busy: impl FnOnce() -> E,
    op: impl Future<Output = Result<T, E>>,
) -> Result<T, E> {
    let lock = format!("node:{addr}");
    let deadline = tokio::time::Instant::now() + LOCK_WAIT;
    let token = loop {
        if let Some(token) = store.try_lock(&lock, LOCK_TTL_MS).await? {
            break token;
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(busy());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let result = op.await;
    if let Err(error) = store.unlock(&lock, &token).await {
        warn!(node = %addr, %error, "could not release the node lock; it expires by itself");
    }
    result
}

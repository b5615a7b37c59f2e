//! Work that must not be cut off halfway: admin operations and cleans run
//! in tasks of their own, so a client that hangs up cannot cancel them and
//! leave a fence raised; shutdown waits for them within its grace period.

use std::future::Future;
use std::sync::LazyLock;
use std::time::Duration;

use tokio_util::task::TaskTracker;

use crate::store::lock::{with_node_lock, NodeLock};
use crate::store::{SessionStore, StoreError};

/// Work started with [`detached`] that has not finished yet: shutdown waits
/// for it (within its grace period), so a stopping replica does not leave a
/// fence raised halfway through a clean.
static IN_FLIGHT: LazyLock<TaskTracker> = LazyLock::new(TaskTracker::new);

/// Waits (at most `limit`) until no detached work is running.
pub async fn wait_for_detached(limit: Duration) -> bool {
    IN_FLIGHT.close();
    let done = tokio::time::timeout(limit, IN_FLIGHT.wait()).await.is_ok();
    IN_FLIGHT.reopen();
    done
}

/// [`detached`] work under the node's lock: the one shape of every admin
/// operation and clean (`busy` when the lock is not had within `wait`).
pub async fn detached_under_node_lock<T, E, Fut>(
    store: SessionStore,
    addr: String,
    wait: Duration,
    busy: impl FnOnce() -> E + Send + 'static,
    panicked: impl FnOnce(String) -> E,
    op: impl FnOnce(NodeLock) -> Fut + Send + 'static,
) -> Result<T, E>
where
    T: Send + 'static,
    E: From<StoreError> + Send + 'static,
    Fut: Future<Output = Result<T, E>> + Send + 'static,
{
    detached(
        async move { with_node_lock(&store, &addr, wait, busy, op).await },
        panicked,
    )
    .await
}

/// Starts `work` in a task of its own that shutdown waits for, without
/// waiting for it here.
pub fn spawn_tracked(work: impl Future<Output = ()> + Send + 'static) {
    IN_FLIGHT.spawn(work);
}

/// Runs `work` to completion in a task of its own and waits for it. If the
/// caller is dropped (a client hung up), the work goes on regardless.
pub async fn detached<T, E>(
    work: impl Future<Output = Result<T, E>> + Send + 'static,
    panicked: impl FnOnce(String) -> E,
) -> Result<T, E>
where
    T: Send + 'static,
    E: Send + 'static,
{
    match IN_FLIGHT.spawn(work).await {
        Ok(result) => result,
        Err(error) => Err(panicked(error.to_string())),
    }
}

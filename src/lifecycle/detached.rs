//! Work that must not be cut off halfway: admin operations and cleans run
//! in tasks of their own, so a client that hangs up cannot cancel them and
//! leave a fence raised; shutdown waits for them within its grace period.
//!
//! Each application has its own [`Detached`]: applications sharing a
//! process (the tests) do not wait on each other's work when they stop.

use std::future::Future;
use std::time::Duration;

use tokio_util::task::TaskTracker;

use crate::store::{with_node_lock, NodeLock};
use crate::store::{Locks, StoreError};

/// One application's work started here that has not finished yet.
#[derive(Clone, Default)]
pub struct Detached {
    in_flight: TaskTracker,
}

impl Detached {
    /// Waits (at most `limit`) until no detached work is running. Work
    /// started meanwhile is waited for too.
    pub async fn wait(&self, limit: Duration) -> bool {
        self.in_flight.close();
        let done = tokio::time::timeout(limit, self.in_flight.wait())
            .await
            .is_ok();
        self.in_flight.reopen();
        done
    }

    /// Starts `work` in a task of its own that shutdown waits for, without
    /// waiting for it here.
    pub fn spawn(&self, work: impl Future<Output = ()> + Send + 'static) {
        self.in_flight.spawn(work);
    }

    /// Runs `work` to completion in a task of its own and waits for it. If
    /// the caller is dropped (a client hung up), the work goes on regardless.
    pub async fn run<T, E>(
        &self,
        work: impl Future<Output = Result<T, E>> + Send + 'static,
        panicked: impl FnOnce(String) -> E,
    ) -> Result<T, E>
    where
        T: Send + 'static,
        E: Send + 'static,
    {
        match self.in_flight.spawn(work).await {
            Ok(result) => result,
            Err(error) => Err(panicked(error.to_string())),
        }
    }

    /// [`run`](Self::run) under the node's lock: the one shape of every
    /// admin operation and clean (`busy` when the lock is not had within
    /// `wait`).
    pub async fn under_node_lock<T, E, Fut>(
        &self,
        locks: Locks,
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
        self.run(
            async move { with_node_lock(&locks, &addr, wait, busy, op).await },
            panicked,
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_application_does_not_wait_for_another_applications_work() {
        let (mine, theirs) = (Detached::default(), Detached::default());
        let (release, held) = tokio::sync::oneshot::channel::<()>();
        theirs.spawn(async move {
            let _ = held.await;
        });
        assert!(mine.wait(Duration::from_millis(50)).await);
        assert!(!theirs.wait(Duration::from_millis(50)).await);
        release.send(()).unwrap();
        assert!(theirs.wait(Duration::from_secs(5)).await);
    }

    #[tokio::test]
    async fn work_spawned_after_a_wait_is_tracked_again() {
        let detached = Detached::default();
        assert!(detached.wait(Duration::from_millis(10)).await);
        let (release, held) = tokio::sync::oneshot::channel::<()>();
        detached.spawn(async move {
            let _ = held.await;
        });
        assert!(!detached.wait(Duration::from_millis(50)).await);
        release.send(()).unwrap();
        assert!(detached.wait(Duration::from_secs(5)).await);
    }
}

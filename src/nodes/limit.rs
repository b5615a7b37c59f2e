//! A node's limit on presses in flight from this replica, with the queue in
//! front of it (HAProxy's per-server `maxconn` and `timeout queue`), made
//! adaptive: the limit grows by one after a limit's worth of answers and
//! halves (down to what the node had accepted) when the node shows it is
//! saturated, i.e. a connect to it timed out while it went on answering
//! others. A small server's listen backlog may be five connections; beyond
//! it connects time out although the node is busy, not gone, so one fixed
//! limit cannot fit every node (design.md, "Overload is not death").
//!
//! The queue is the semaphore's: fair (first come, first served) and
//! bounded by time. A press that gets no permit within its wait is answered
//! `node_busy` and never reaches the node.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Shortest time between two decreases: the presses that time out together
/// were all sent under the old limit, and one halving answers them all.
const DECREASE_EVERY: Duration = Duration::from_millis(500);

#[derive(Debug)]
pub struct InFlightLimit {
    /// Shared with the permits, which a press that outlives its request
    /// carries into a task of its own.
    permits: Arc<Semaphore>,
    /// The limit now, between 1 and `max`.
    limit: AtomicUsize,
    max: usize,
    /// Permits to take back as they come home: the limit fell below what
    /// was in use when it shrank.
    debt: Arc<AtomicUsize>,
    /// Answers since the limit last grew.
    answers: AtomicUsize,
    /// When the limit last shrank (ms on this process's monotonic clock).
    shrunk_at_ms: AtomicU64,
    started: std::time::Instant,
}

/// A press's place at the node; gives the permit back when dropped (or
/// keeps it, if the limit shrank meanwhile). Owned: it may go with a press
/// into a task of its own.
#[derive(Debug)]
pub struct InFlightPermit {
    permit: Option<OwnedSemaphorePermit>,
    debt: Arc<AtomicUsize>,
}

impl Drop for InFlightPermit {
    fn drop(&mut self) {
        if let Some(permit) = self.permit.take() {
            let paid = self
                .debt
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |d| d.checked_sub(1))
                .is_ok();
            if paid {
                permit.forget();
            }
        }
    }
}

impl InFlightLimit {
    pub fn new(max: usize) -> Self {
        let max = max.clamp(1, Semaphore::MAX_PERMITS);
        Self {
            permits: Arc::new(Semaphore::new(max)),
            limit: AtomicUsize::new(max),
            max,
            debt: Arc::default(),
            answers: AtomicUsize::new(0),
            shrunk_at_ms: AtomicU64::new(0),
            started: std::time::Instant::now(),
        }
    }

    /// A permit at once when one is free (the usual case arms no timer),
    /// else the first one freed within `wait`, in the order presses asked.
    pub async fn acquire(&self, wait: Duration) -> Option<InFlightPermit> {
        let permit = match self.permits.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => tokio::time::timeout(wait, self.permits.clone().acquire_owned())
                .await
                .ok()?
                .ok()?,
        };
        Some(InFlightPermit {
            permit: Some(permit),
            debt: self.debt.clone(),
        })
    }

    /// The limit now.
    pub fn limit(&self) -> usize {
        self.limit.load(Ordering::Acquire)
    }

    /// Presses holding a permit now.
    pub fn in_use(&self) -> usize {
        let limit = self.limit();
        let owed = self.debt.load(Ordering::Acquire);
        (limit + owed).saturating_sub(self.permits.available_permits())
    }

    /// The node answered: after a limit's worth of answers, one more press
    /// may be in flight (additive increase).
    pub fn answered(&self) {
        let limit = self.limit();
        if limit >= self.max {
            return;
        }
        if self.answers.fetch_add(1, Ordering::AcqRel) + 1 < limit {
            return;
        }
        self.answers.store(0, Ordering::Release);
        if self
            .limit
            .compare_exchange(limit, limit + 1, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            // Cancel a permit still owed before adding one.
            if self
                .debt
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |d| d.checked_sub(1))
                .is_err()
            {
                self.permits.add_permits(1);
            }
        }
    }

    /// The node is saturated: halve the limit, and go no higher than the
    /// presses it had accepted (`accepted`, when known). At most once per
    /// [`DECREASE_EVERY`]. Returns the new limit when it changed.
    pub fn saturated(&self, accepted: Option<usize>) -> Option<usize> {
        // Shifted by one period so that the first decrease is never held back.
        let now = self.started.elapsed().as_millis() as u64 + DECREASE_EVERY.as_millis() as u64;
        let last = self.shrunk_at_ms.load(Ordering::Acquire);
        if now < last + DECREASE_EVERY.as_millis() as u64
            || self
                .shrunk_at_ms
                .compare_exchange(last, now, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
        {
            return None;
        }
        let shrink = |limit: usize| {
            let target = (limit / 2).min(accepted.unwrap_or(usize::MAX)).max(1);
            (target < limit).then_some(target)
        };
        // Retried if an answer grew the limit meanwhile.
        let limit = self
            .limit
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, shrink)
            .ok()?;
        let target = shrink(limit)?;
        self.answers.store(0, Ordering::Release);
        let cut = limit - target;
        let taken = self.permits.forget_permits(cut);
        self.debt.fetch_add(cut - taken, Ordering::AcqRel);
        Some(target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` permits taken at once, all of which must be free.
    async fn take(limit: &InFlightLimit, n: usize) -> Vec<InFlightPermit> {
        futures::future::join_all((0..n).map(|_| limit.acquire(Duration::ZERO)))
            .await
            .into_iter()
            .map(|permit| permit.expect("a free permit"))
            .collect()
    }

    #[tokio::test]
    async fn a_press_beyond_the_limit_waits_for_a_permit_and_gives_up_after_its_wait() {
        let limit = InFlightLimit::new(2);
        let a = limit.acquire(Duration::ZERO).await.unwrap();
        let _b = limit.acquire(Duration::ZERO).await.unwrap();
        assert_eq!(limit.in_use(), 2);
        assert!(limit.acquire(Duration::from_millis(20)).await.is_none());
        let waiter = limit.acquire(Duration::from_secs(5));
        tokio::pin!(waiter);
        assert!(futures::poll!(waiter.as_mut()).is_pending());
        drop(a);
        assert!(
            waiter.await.is_some(),
            "the freed permit goes to the waiter"
        );
    }

    #[tokio::test]
    async fn saturation_halves_the_limit_down_to_what_the_node_accepted() {
        let limit = InFlightLimit::new(64);
        let held = take(&limit, 10).await;
        assert_eq!(limit.saturated(Some(6)), Some(6));
        // A second signal at once is the same episode.
        assert_eq!(limit.saturated(Some(1)), None);
        assert_eq!(limit.limit(), 6);
        // Ten were in flight under the old limit: four permits are owed and
        // taken back as they return, so at most six are ever out again.
        drop(held);
        assert_eq!(limit.in_use(), 0);
        let again = take(&limit, 6).await;
        assert!(limit.acquire(Duration::ZERO).await.is_none());
        assert_eq!(again.len(), 6);
    }

    #[tokio::test]
    async fn answers_grow_the_limit_back_one_at_a_time_up_to_the_maximum() {
        let limit = InFlightLimit::new(4);
        limit.shrunk_at_ms.store(0, Ordering::Release);
        assert_eq!(limit.saturated(None), Some(2));
        limit.answered();
        assert_eq!(limit.limit(), 2, "one answer of two does not grow it");
        limit.answered();
        assert_eq!(limit.limit(), 3);
        for _ in 0..10 {
            limit.answered();
        }
        assert_eq!(limit.limit(), 4, "never above the maximum");
        let held = take(&limit, 4).await;
        assert_eq!(held.len(), 4);
        assert!(limit.acquire(Duration::ZERO).await.is_none());
    }
}

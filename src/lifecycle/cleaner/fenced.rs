//! The fence of one node operation ([`Fenced`]): raised under the node's
//! lock and acknowledged by every live replica before anything reaches the
//! node or moves off it, lowered when the operation ends, unless a journal
//! written under it is left (then the sweep finishes the clean and lowers
//! it, design.md §4.7).

use std::time::Duration;

use tracing::warn;

use super::{CleanError, NodeCleaner};
use crate::store::FenceReason;
use crate::store::{NodeLock, LOCK_TTL_MS};

/// A node operation in progress under its fence: the node's lock and the
/// fence that every live replica acknowledged. Whatever moves sessions off
/// a node or sends it a clean takes one, so it cannot run with the fence
/// down.
///
/// The fence comes down with [`lower`](Self::lower); one dropped without it
/// (an error returned early) is lowered in the background the same way.
/// Either way it stays up over a journal written under it.
pub(super) struct Fenced<'a> {
    cleaner: &'a NodeCleaner,
    lock: &'a NodeLock,
    seq: u64,
    /// The Redis that holds the fence (`Store::server_id`), when
    /// known: a retried lower stops once another server answers, which
    /// may have handed this fence's number to a newer operation.
    server: Option<String>,
    lowered: bool,
}

impl<'a> Fenced<'a> {
    /// The fence a journal left up (sequence `seq`), taken over under the
    /// node's lock by the operation that finishes the journal; `server`
    /// (`Store::server_id`) read before the journal was.
    pub(super) fn adopt(
        cleaner: &'a NodeCleaner,
        lock: &'a NodeLock,
        seq: u64,
        server: Option<String>,
    ) -> Self {
        Self {
            cleaner,
            lock,
            seq,
            server,
            lowered: false,
        }
    }

    pub(super) fn lock(&self) -> &'a NodeLock {
        self.lock
    }

    pub(super) fn node(&self) -> &'a str {
        self.lock.node()
    }

    pub(super) fn seq(&self) -> u64 {
        self.seq
    }

    /// Lowers the fence now (Redis keeps it up over a journal written under
    /// it: `Store::lower_fence`). If Redis does not answer, it is
    /// tried again in the background: a fence left up holds the node's
    /// presses until its deadline.
    pub(super) async fn lower(mut self) {
        self.lowered = true;
        if let Err(error) = self
            .cleaner
            .store
            .fences
            .lower_fence(self.node(), self.seq)
            .await
        {
            warn!(node = %self.node(), %error, "could not lower a fence; trying again in the background");
            self.cleaner
                .lower_later(self.node(), self.seq, self.server.take());
        }
    }
}

impl Drop for Fenced<'_> {
    fn drop(&mut self) {
        if !self.lowered {
            self.cleaner
                .lower_later(self.node(), self.seq, self.server.take());
        }
    }
}

impl NodeCleaner {
    /// Raises the fence on a node and waits until every replica not given
    /// up on has closed its gate to it (`protocol::silence`).
    pub(super) async fn raise_and_wait<'a>(
        &'a self,
        lock: &'a NodeLock,
        reason: FenceReason,
    ) -> Result<Fenced<'a>, CleanError> {
        // Read before the raise: if Redis changes in between, the fence is
        // on a server this does not name, and is left to the sweep.
        let server = self.store.replicas.server_id().await.ok();
        let started = std::time::Instant::now();
        let raised = self.raise_and_wait_acks(lock, reason).await;
        let outcome = if raised.is_ok() { "acked" } else { "failed" };
        metrics::histogram!("nodes_control_fence_wait_seconds", "outcome" => outcome)
            .record(started.elapsed().as_secs_f64());
        let seq = raised?;
        Ok(Fenced {
            cleaner: self,
            lock,
            seq,
            server,
            lowered: false,
        })
    }

    async fn raise_and_wait_acks(
        &self,
        lock: &NodeLock,
        reason: FenceReason,
    ) -> Result<u64, CleanError> {
        let addr = lock.node();
        let seq = self
            .store
            .fences
            .raise_fence(
                lock.lock(),
                addr,
                Duration::from_millis(LOCK_TTL_MS),
                reason,
            )
            .await?;
        let deadline = tokio::time::Instant::now() + self.ack_timeout;
        loop {
            // Armed before the check, so an ack arriving meanwhile wakes us.
            let event = self.events.notified();
            // A replica silent for longer than this lapsed on its own clock
            // first: it sends nothing and shows nothing this fence could
            // hide from it (`protocol::silence`).
            let wait = self.silence.others_wait();
            let live = self.store.replicas.live_replicas(wait).await?;
            let acks = self.store.fences.fence_acks(addr, seq).await?;
            let missing: Vec<String> = live.into_iter().filter(|r| !acks.contains(r)).collect();
            if missing.is_empty() {
                return Ok(seq);
            }
            if tokio::time::Instant::now() >= deadline {
                self.store.fences.lower_fence(addr, seq).await?;
                return Err(CleanError::FenceTimeout {
                    node: addr.to_owned(),
                    missing,
                });
            }
            // The event wakes us; the timer covers a lost message.
            let _ = tokio::time::timeout(Duration::from_millis(100), event).await;
        }
    }

    /// Lowers the fence once Redis answers (unless a journal keeps it up),
    /// in the background, so a Redis outage does not keep the node fenced
    /// until the fence's deadline once Redis is back. Only on the server
    /// that holds it (`server`): a Redis that came back with older data may
    /// hand the same number to a newer fence, which this must not lower.
    /// Unknown, or another server: left to the sweep, which lowers a fence
    /// past its deadline.
    fn lower_later(&self, addr: &str, seq: u64, server: Option<String>) {
        let Some(server) = server else {
            return;
        };
        let (store, addr) = (self.store.clone(), addr.to_owned());
        self.detached.spawn(async move {
            let give_up = tokio::time::Instant::now() + Duration::from_millis(LOCK_TTL_MS);
            while tokio::time::Instant::now() < give_up {
                match store.replicas.server_id().await {
                    Ok(now) if now == server => {
                        if store.fences.lower_fence(&addr, seq).await.is_ok() {
                            return;
                        }
                    }
                    Ok(_) => return,
                    Err(_) => {}
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
    }
}

//! Moving a failed node's sessions off it (design.md §4.5, §4.10), and
//! wiping a node that comes back before it serves again.

use std::collections::HashMap;

use tracing::warn;

use super::fenced::Fenced;
use super::{CleanError, NodeCleaner, Wiped};
use crate::store::{FenceReason, NodeState};
use crate::store::{NodeLock, LOCK_WAIT};

impl NodeCleaner {
    /// A node was declared down: once every replica has stopped pressing it
    /// (the fence), revoke whatever it may still archive, then unmap its
    /// sessions so they continue elsewhere from their last archive
    /// (design.md §4.5, §4.10). Returns the sessions moved. Idempotent.
    pub async fn fail_over(&self, addr: &str) -> Result<usize, CleanError> {
        self.locked(addr, LOCK_WAIT, |this, lock| async move {
            if this
                .store
                .nodes
                .get_node(lock.node())
                .await?
                .map(|n| n.state)
                != Some(NodeState::Down)
            {
                return Ok(0); // recovered (and wiped) or removed meanwhile
            }
            this.fail_over_locked(&lock).await
        })
        .await
    }

    /// [`fail_over`](Self::fail_over) with the node lock held.
    pub(super) async fn fail_over_locked(&self, lock: &NodeLock) -> Result<usize, CleanError> {
        let addr = lock.node();
        // A clean left unsettled (its cleaner died) is still under way: the
        // node may yet archive under its token, on top of what this
        // failover would archive for it. The sweep finishes the journal
        // first (failing the node over if it does not answer), as it does
        // before any new clean.
        if self.store.fences.journal(addr).await?.is_some() {
            return Err(CleanError::Busy {
                node: addr.to_owned(),
            });
        }
        // Before its indexes are read: a replica's view may offer it still.
        self.store.sessions.close_to_new_sessions(addr).await?;
        if self.store.sessions.node_sessions(addr).await?.is_empty() {
            // Nothing left to move, but what the node may still archive
            // must stay fenced out all the same.
            let below = self.archive.wipe_token().await?;
            self.fence_out(lock, below).await?;
            return Ok(0);
        }
        self.hand_over_and_move(lock).await
    }

    /// Under a failover's fence of its own: what the replicas showed is
    /// archived (their acknowledgements of a failover's fence hand it
    /// over), then the sessions move off. Also how a clean whose node
    /// failed under it ends (its token revoked, its journal still up): the
    /// clean's fence was acknowledged without a hand-over, so this one is
    /// raised over it (model.md: `clean_timer_hands_over`).
    pub(super) async fn hand_over_and_move(&self, lock: &NodeLock) -> Result<usize, CleanError> {
        let fence = self.raise_and_wait(lock, FenceReason::Down).await?;
        let result = async {
            self.archive_shown(&fence).await?;
            self.move_sessions_off(&fence).await
        }
        .await;
        fence.lower().await;
        result
    }

    /// Under a failover's fence, before its sessions leave the node: the
    /// highest total the replicas showed of each one's present placement
    /// (handed over with their acknowledgements) goes into the archive on
    /// the node's behalf (`protocol::failover::handed_over`), so a session
    /// goes on from what its user saw, not from its last archive. A total
    /// of another placement (one that ended) is not this one's. Returns the
    /// clicks archived.
    async fn archive_shown(&self, fence: &Fenced<'_>) -> Result<i64, CleanError> {
        let (addr, seq) = (fence.node(), fence.seq());
        let acked = self.store.fences.fence_acks(addr, seq).await?;
        let mut shown: HashMap<String, Vec<(i64, i64)>> = HashMap::new();
        for handed in self.store.fences.handed_over(addr, seq, &acked).await? {
            shown
                .entry(handed.session)
                .or_default()
                .push((handed.expires_at_ms, handed.total));
        }
        let ids: Vec<String> = shown.keys().cloned().collect();
        let mappings = self.store.sessions.mappings_of(&ids).await?;
        let mut archived = 0;
        let totals: Vec<(String, i64)> = ids
            .into_iter()
            .zip(mappings)
            .filter_map(|(id, mapping)| {
                let mapping = mapping.filter(|m| m.node == addr)?;
                let of_this_placement = shown[&id]
                    .iter()
                    .filter(|(ends, _)| *ends == mapping.expires_at_ms)
                    .map(|(_, total)| *total);
                let clicks = protocol::failover::handed_over(of_this_placement, mapping.base)?;
                archived += clicks;
                Some((id, mapping.base + clicks))
            })
            .collect();
        if totals.is_empty() {
            return Ok(0);
        }
        // Postgres cannot be conditioned on the lock: read it just before.
        let close = !self.takes_tokens(addr).await?;
        fence.lock().lock().check_held(&self.store.locks).await?;
        let written = self.archive.archive_shown(addr, &totals, close).await?;
        warn!(node = %addr, sessions = written, clicks = archived, "failed node's shown clicks archived on its behalf");
        metrics::counter!("nodes_control_failover_clicks_archived_total")
            .increment(archived as u64);
        Ok(archived)
    }

    /// Under the fence: revoke the node's tokens, then unmap its sessions.
    async fn move_sessions_off(&self, fence: &Fenced<'_>) -> Result<usize, CleanError> {
        let (lock, addr) = (fence.lock(), fence.node());
        let below = self.archive.wipe_token().await?;
        let revoked = self.fence_out(lock, below).await?;
        let moved = self
            .store
            .sessions
            .unmap_node(lock.lock(), addr)
            .await?
            .len();
        warn!(node = %addr, sessions = moved, tokens_revoked = revoked, "failed node's sessions moved off it");
        metrics::counter!("nodes_control_sessions_failed_over_total").increment(moved as u64);
        Ok(moved)
    }

    /// Recovery of a down node: its sessions leave through its failover
    /// first, then, under a fence of its own, it is wiped with `/clean
    /// archive=false`.
    pub async fn wipe(&self, lock: &NodeLock) -> Result<Wiped, CleanError> {
        let addr = lock.node();
        // A node that answers its health checks before its failover ran
        // (alive all along, or restarted at once) still holds its
        // sessions: they move as a failed node's do, with what the
        // replicas showed of them, never from their last archive alone
        // (model.md: `recovery_fails_over`).
        let moved = self.fail_over_locked(lock).await?;
        let fence = self.raise_and_wait(lock, FenceReason::Clean).await?;
        let result = async {
            // The wipe archives nothing: its token only fences the node.
            // Taken before anything moves, so a wipe that arrives late (its
            // cleaner paused past the lock) forgets nothing placed after a
            // later operation, whose token is newer.
            let token = self.archive.wipe_token().await?;
            self.fence_out(lock, token).await?;
            // Nothing is mapped to it now (it is closed to new sessions):
            // this drops strays and zeroes its count.
            let strays = self.store.sessions.unmap_node(lock.lock(), addr).await?;
            lock.lock().check_held(&self.store.locks).await?;
            let selective = self
                .client
                .wipe(addr, Some(token))
                .await
                .map_err(|source| CleanError::Node {
                    node: addr.to_owned(),
                    source,
                })?;
            self.store.nodes.set_node_epoch(addr, token as u64).await?;
            Ok(Wiped {
                moved: moved + strays.len(),
                selective,
            })
        }
        .await;
        fence.lower().await;
        result
    }
}

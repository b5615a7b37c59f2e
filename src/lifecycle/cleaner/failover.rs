//! Moving a failed node's sessions off it (design.md §4.5, §4.10), and
//! wiping a node that comes back before it serves again.

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
        // Before its indexes are read: a replica's view may offer it still.
        self.store.sessions.close_to_new_sessions(addr).await?;
        if self.store.sessions.node_sessions(addr).await?.is_empty() {
            // Nothing left to move, but what the node may still archive
            // must stay fenced out all the same.
            let below = self.archive.wipe_token().await?;
            self.fence_out(lock, below).await?;
            return Ok(0);
        }
        let fence = self.raise_and_wait(lock, FenceReason::Down).await?;
        let result = self.move_sessions_off(&fence).await;
        fence.lower().await;
        result
    }

    /// Under the fence: revoke the node's tokens, then unmap its sessions.
    pub(super) async fn move_sessions_off(&self, fence: &Fenced<'_>) -> Result<usize, CleanError> {
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

    /// Recovery of a down node: under the fence, unmap its sessions (they
    /// restore from the archive) and wipe it with `/clean archive=false`.
    pub async fn wipe(&self, lock: &NodeLock) -> Result<Wiped, CleanError> {
        let addr = lock.node();
        let fence = self.raise_and_wait(lock, FenceReason::Clean).await?;
        let result = async {
            // The wipe archives nothing: its token only fences the node.
            // Taken before anything moves, so a wipe that arrives late (its
            // cleaner paused past the lock) forgets nothing placed after a
            // later operation, whose token is newer.
            let token = self.archive.wipe_token().await?;
            self.fence_out(lock, token).await?;
            let dropped = self.store.sessions.unmap_node(lock.lock(), addr).await?;
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
                dropped: dropped.len(),
                selective,
            })
        }
        .await;
        fence.lower().await;
        result
    }
}

//! The rebuild's step at each node (design.md §4.12): after Redis forgot
//! everything, a node that was up archives all it holds, one that was down
//! is wiped.

use tracing::{info, warn};

use super::{CleanError, NodeCleaner};
use crate::store::FenceReason;
use crate::store::NodeLock;

impl NodeCleaner {
    /// After Redis forgot everything (design.md §4.12): under the fence, a node
    /// that was up archives every session it holds with a fresh token, which
    /// is folded at once; a node that was down is only wiped (its counts are
    /// stale). Returns whether the node answered, and the clean's token:
    /// the node's fencing epoch from now on.
    pub async fn archive_all(
        &self,
        lock: &NodeLock,
        was_up: bool,
    ) -> Result<(bool, u64), CleanError> {
        let addr = lock.node();
        let fence = self.raise_and_wait(lock, FenceReason::Clean).await?;
        let result = async {
            lock.lock().check()?;
            if !was_up {
                let generation = self.archive.wipe_token().await?;
                self.fence_out(lock, generation).await?;
                let wiped = self.client.clean(addr, false, None, Some(generation)).await;
                return Ok((wiped.is_ok(), generation as u64));
            }
            // Redis forgot which sessions this node holds: every row a
            // hand-over closed takes its archive (`Archive::open_rows`).
            self.archive.open_rows(None).await?;
            let generation = self.archive.issue_token(addr).await?;
            match self.client.clean(addr, true, None, Some(generation)).await {
                Ok(_) => {
                    let folded = self.archive.fold_generation(generation).await?;
                    info!(node = %addr, sessions = folded, generation, "node archived after Redis forgot its sessions");
                    Ok((true, generation as u64))
                }
                Err(error) => {
                    warn!(node = %addr, %error, "node could not archive during the rebuild; it stays down");
                    self.archive.revoke_token(generation).await?;
                    self.fence_out(lock, generation).await?;
                    Ok((false, generation as u64))
                }
            }
        }
        .await;
        fence.lower().await;
        result
    }
}

//! Closing a node to new sessions, in every group, on a cluster: a
//! replica places from a view that may be a moment old (view.rs), so an
//! operation that moves a node's sessions off it closes it first, and a
//! claim (claim.lua) refuses a node closed in its group.

use super::{Sessions, StoreResult};

impl Sessions {
    /// Closes a node to new sessions in every group, on a cluster, before
    /// its sessions are read to be moved off it: a replica chooses from a
    /// view that may be a moment old (view.rs), and from here on its claim
    /// refuses the node (claim.lua), so no session is mapped to it behind
    /// that read. A removed node stays closed (its number is never given
    /// again), so a late view's claim cannot map to it either.
    pub async fn close_to_new_sessions(&self, address: &str) -> StoreResult<()> {
        self.set_closed(address, true).await
    }

    /// Opens a node that came up again to new sessions in every group.
    pub async fn open_to_new_sessions(&self, address: &str) -> StoreResult<()> {
        self.set_closed(address, false).await
    }

    async fn set_closed(&self, address: &str, closed: bool) -> StoreResult<()> {
        let Some(number) = self.cluster_number(address).await? else {
            return Ok(());
        };
        let context = match closed {
            true => "closing a node to new sessions in Redis",
            false => "opening a node to new sessions in Redis",
        };
        self.query_groups::<redis::Value>(context, |group, pipe| {
            let key = self.group_key(group, &["closed"]);
            match closed {
                true => pipe.sadd(key, number),
                false => pipe.srem(key, number),
            };
        })
        .await?;
        Ok(())
    }

    /// The numbers of the nodes closed to new sessions in any group (on a
    /// cluster; none on a single Redis), for the sweep to find a node up
    /// but still closed: an opening that failed or came late.
    pub async fn closed_numbers(&self) -> StoreResult<std::collections::HashSet<u64>> {
        if !self.cluster {
            return Ok(Default::default());
        }
        let closed: Vec<Vec<Vec<u64>>> = self
            .query_groups(
                "reading the nodes closed to new sessions in Redis",
                |group, pipe| {
                    pipe.smembers(self.group_key(group, &["closed"]));
                },
            )
            .await?;
        Ok(closed.into_iter().flatten().flatten().collect())
    }

    /// A node's number where groups close nodes: on a cluster only (a
    /// single Redis checks `placeable` in the placement itself).
    async fn cluster_number(&self, address: &str) -> StoreResult<Option<u64>> {
        if !self.cluster {
            return Ok(None);
        }
        self.node_number(address).await
    }
}

//! `NodeAdmin`: adding, removing, listing nodes and changing their state.
//! Every change goes to the registry in Redis first and to this replica's
//! [`NodeTable`] right after; other replicas catch up on their next refresh.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tracing::{info, warn};

use super::address::{AddressError, NodeAddress};
use super::client::{NodeCallError, NodeClient};
use super::table::{NodeEntry, NodeTable};
use crate::archive::{Archive, ArchiveError};
use crate::store::{NodeRecord, NodeState, SessionStore, StoreError};

pub const MAX_WEIGHT: u32 = 1000;
/// How long an admin operation waits for another one on the same node.
const LOCK_WAIT: Duration = Duration::from_secs(15);
/// Lock lifetime: longer than any clean we wait for, so it only expires if
/// its holder died.
const LOCK_TTL_MS: u64 = 60_000;

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error(transparent)]
    Address(#[from] AddressError),
    #[error("weight must be between 1 and {MAX_WEIGHT}")]
    Weight,
    #[error("name must be 1 to 255 characters without control characters")]
    Name,
    #[error("no node {0} is registered")]
    UnknownNode(String),
    #[error("another operation on node {0} is still running; try again")]
    Busy(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Archive(#[from] ArchiveError),
}

/// A node as `GET /nodes` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct NodeView {
    pub address: String,
    pub name: String,
    pub weight: u32,
    pub state: NodeState,
    pub active_sessions: i64,
    /// Presses of *this replica* in flight to the node.
    pub in_flight: u64,
}

/// What removing a node did, for the log and the tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removal {
    pub sessions: usize,
    /// False when the node could not archive (it was down or unreachable):
    /// the clicks since its last archive are lost.
    pub archived: bool,
}

#[derive(Clone)]
pub struct NodeAdmin {
    store: SessionStore,
    archive: Archive,
    table: Arc<NodeTable>,
    client: NodeClient,
}

impl NodeAdmin {
    pub fn new(
        store: SessionStore,
        archive: Archive,
        table: Arc<NodeTable>,
        client: NodeClient,
    ) -> Self {
        Self {
            store,
            archive,
            table,
            client,
        }
    }

    pub fn table(&self) -> &Arc<NodeTable> {
        &self.table
    }

    /// Registers a node (idempotent). A new node is wiped with
    /// `/clean archive=false` before it takes sessions, since counts it may
    /// hold from an earlier life would be wrong for us; one that does not
    /// answer is registered `down` and the health checker brings it up.
    pub async fn add(
        &self,
        address: &str,
        name: Option<&str>,
        weight: Option<u32>,
    ) -> Result<NodeRecord, AdminError> {
        let address = NodeAddress::parse(address)?;
        let weight = weight.unwrap_or(1);
        if weight == 0 || weight > MAX_WEIGHT {
            return Err(AdminError::Weight);
        }
        if name.is_some_and(|n| n.is_empty() || n.len() > 255 || n.chars().any(char::is_control)) {
            return Err(AdminError::Name);
        }
        if let Some(existing) = self.store.get_node(address.as_str()).await? {
            self.table.upsert(&existing);
            return Ok(existing);
        }
        let addr = address.as_str();
        self.with_node_lock(addr, async {
            if let Some(existing) = self.store.get_node(addr).await? {
                self.table.upsert(&existing);
                return Ok(existing);
            }
            let (state, reported_name) = match self.wipe(addr).await {
                Ok(reported) => (NodeState::Up, reported),
                Err(error) => {
                    warn!(node = %addr, %error, "new node does not answer; registering it down");
                    (NodeState::Down, None)
                }
            };
            // The admin's name, else the node's own, else host:port.
            let name = name
                .map(str::to_owned)
                .or(reported_name)
                .unwrap_or_else(|| address.host_port());
            let record = NodeRecord {
                address: addr.to_owned(),
                name,
                weight,
                state,
                active_sessions: 0,
            };
            self.store.register_node(&record).await?;
            self.table.upsert(&record);
            info!(node = %addr, name = %record.name, weight, %state, "node added");
            Ok(record)
        })
        .await
    }

    /// Removes a node: no new sessions, this replica's presses to it drained,
    /// `/clean archive=true`, fold, unmap. Its sessions restore from the
    /// archive on their next press, on another node.
    pub async fn remove(&self, address: &str) -> Result<Removal, AdminError> {
        let address = NodeAddress::parse(address)?;
        let addr = address.as_str();
        self.with_node_lock(addr, async {
            let record = self
                .store
                .get_node(addr)
                .await?
                .ok_or_else(|| AdminError::UnknownNode(addr.to_owned()))?;
            self.store
                .set_node_state(addr, NodeState::Draining, &[])
                .await?;
            self.table.upsert(&NodeRecord {
                state: NodeState::Draining,
                ..record.clone()
            });
            let entry = self.table.get(addr);
            // Hold this replica's presses off the node until it is gone.
            let _fence = match &entry {
                Some(entry) => Some(entry.fence().await),
                None => None,
            };
            let sessions = self.store.node_sessions(addr).await?;
            let archived =
                record.state != NodeState::Down && self.archive_and_fold(addr, &sessions).await;
            self.store.unmap_node(addr).await?;
            self.store.delete_node(addr).await?;
            self.table.remove(addr);
            self.table.bump_epoch();
            info!(node = %addr, sessions = sessions.len(), archived, "node removed");
            Ok(Removal {
                sessions: sessions.len(),
                archived,
            })
        })
        .await
    }

    /// `/clean archive=true` then fold. A down node is never archived: its
    /// counts are stale, and some of its sessions may live elsewhere now.
    async fn archive_and_fold(&self, addr: &str, sessions: &[String]) -> bool {
        match self.client.clean(addr, true, None).await {
            Ok(_) => {
                // The next placement folds too, so a failure here loses nothing.
                if let Err(error) = self.archive.fold(sessions).await {
                    warn!(node = %addr, %error, "fold after removal failed; the next press will fold");
                }
                true
            }
            Err(error) => {
                warn!(node = %addr, %error, "node did not archive on removal; its clicks since the last archive are lost");
                false
            }
        }
    }

    pub async fn list(&self) -> Result<Vec<NodeView>, AdminError> {
        let records = self.store.list_nodes().await?;
        self.table.sync(&records);
        Ok(records
            .into_iter()
            .map(|r| {
                let in_flight = self
                    .table
                    .get(&r.address)
                    .map(|e| e.in_flight())
                    .unwrap_or(0);
                NodeView {
                    address: r.address,
                    name: r.name,
                    weight: r.weight,
                    state: r.state,
                    active_sessions: r.active_sessions,
                    in_flight,
                }
            })
            .collect())
    }

    /// Reloads this replica's view of the registry.
    pub async fn refresh(&self) -> Result<(), StoreError> {
        let records = self.store.list_nodes().await?;
        self.table.sync(&records);
        Ok(())
    }

    /// Takes a failed node out of placement and press routing, on every replica.
    pub async fn mark_down(&self, entry: &NodeEntry) {
        entry.set_state(NodeState::Down);
        match self
            .store
            .set_node_state(&entry.address, NodeState::Down, &[NodeState::Up])
            .await
        {
            Ok(Some(_)) => {
                metrics::counter!("nodes_control_nodes_marked_down_total").increment(1);
                warn!(node = %entry.address, name = %entry.name, "node marked down");
            }
            Ok(None) => {}
            Err(error) => {
                warn!(node = %entry.address, %error, "could not record the node down in Redis")
            }
        }
    }

    /// Brings a down node that answers its health check back: its sessions
    /// are unmapped (they restore from the archive), it is wiped with
    /// `/clean archive=false` (its counts are stale), then it takes traffic.
    pub async fn recover(&self, addr: &str) -> Result<bool, AdminError> {
        self.with_node_lock(addr, async {
            match self.store.get_node(addr).await? {
                Some(record) if record.state == NodeState::Down => {}
                _ => return Ok(false),
            }
            let dropped = self.store.unmap_node(addr).await?;
            if let Err(error) = self.wipe(addr).await {
                warn!(node = %addr, %error, "node answered its health check but not /clean; it stays down");
                return Ok(false);
            }
            if let Some(old) = self.store.set_node_state(addr, NodeState::Up, &[NodeState::Down]).await? {
                info!(node = %addr, from = %old, sessions_dropped = dropped.len(), "node recovered and wiped");
            }
            self.refresh().await?;
            Ok(true)
        })
        .await
    }

    /// Health check, then `/clean archive=false`; returns the node's own name.
    async fn wipe(&self, addr: &str) -> Result<Option<String>, NodeCallError> {
        let name = self.client.health(addr).await?;
        self.client.clean(addr, false, None).await?;
        Ok(name)
    }

    async fn with_node_lock<T>(
        &self,
        addr: &str,
        op: impl std::future::Future<Output = Result<T, AdminError>>,
    ) -> Result<T, AdminError> {
        let lock = format!("node:{addr}");
        let deadline = tokio::time::Instant::now() + LOCK_WAIT;
        let token = loop {
            if let Some(token) = self.store.try_lock(&lock, LOCK_TTL_MS).await? {
                break token;
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(AdminError::Busy(addr.to_owned()));
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        };
        let result = op.await;
        if let Err(error) = self.store.unlock(&lock, &token).await {
            warn!(node = %addr, %error, "could not release the node lock; it expires by itself");
        }
        result
    }
}

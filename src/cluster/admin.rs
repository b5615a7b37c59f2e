//! `NodeAdmin`: adding, removing and listing nodes. Every change goes to
//! the registry in Redis first and to this replica's [`NodeTable`] right
//! after; other replicas catch up on their next refresh.

mod drain;

use std::sync::Arc;

use serde::Serialize;
use tracing::{info, warn};

use super::registry::NodeRegistry;
use crate::archive::events::{Actor, NodeEvent};
use crate::archive::{Archive, ArchiveError, Member};
use crate::lifecycle::CleanError;
use crate::nodes::address::{AddressError, NodeAddress};
use crate::nodes::client::{NodeClient, NodeHealth};
use crate::nodes::table::NodeTable;
use crate::nodes::Offers;
use crate::store::{NodeLock, LOCK_WAIT};
use crate::store::{NodeRecord, NodeState, Store, StoreError};
pub use drain::{Drain, MAX_DRAIN_SECS};

pub const MAX_WEIGHT: u32 = 1000;

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
    #[error("{address} is the same node as the registered {existing}; remove that one first to change its address")]
    Alias { address: String, existing: String },
    #[error("node {0} is down: it has no sessions to drain; remove it")]
    DrainDown(String),
    #[error("deadline_secs must be between 1 and {MAX_DRAIN_SECS}")]
    DrainDeadline,
    #[error("the registry is being rebuilt after Redis lost its data; try again")]
    Rebuilding,
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Archive(#[from] ArchiveError),
    #[error(transparent)]
    Clean(#[from] CleanError),
    #[error("an admin task failed: {0}")]
    Task(String),
}

/// A node as `GET /nodes` shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct NodeView {
    pub address: String,
    pub name: String,
    pub weight: u32,
    pub state: NodeState,
    pub active_sessions: i64,
    /// Presses of *this replica* in flight to the node.
    pub in_flight: u64,
    /// This replica's limit on presses in flight to the node now (it
    /// adapts below `NODE_MAX_IN_FLIGHT` when the node shows saturation).
    pub in_flight_limit: usize,
    /// Why the node is down, when it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Down until an admin adds it again: health checks do not bring it
    /// back (a `/clean` to it timed out, and it takes no clean tokens).
    pub held_down: bool,
    /// What it offers beyond `/press` and `/clean`, as last detected.
    pub offers: Offers,
}

/// What an admin command did, as its answer says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Added,
    Reweighted,
    Unchanged,
    Draining,
    Removed,
    /// `add` of a node held down: the hold is lifted (and the node
    /// recovered, if it answers).
    Released,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Added => "added",
            Outcome::Reweighted => "reweighted",
            Outcome::Unchanged => "unchanged",
            Outcome::Draining => "draining",
            Outcome::Removed => "removed",
            Outcome::Released => "released",
        }
    }
}

/// What removing a node did, for the log and the tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removal {
    pub sessions: usize,
    /// False when the node could not archive (it was down or unreachable):
    /// the clicks since its last archive are lost.
    pub archived: bool,
}

/// The admin commands: add, remove, list. Above the registry, which they
/// keep this replica's view in step through.
#[derive(Clone)]
pub struct NodeAdmin {
    registry: NodeRegistry,
}

impl NodeAdmin {
    pub fn new(registry: NodeRegistry) -> Self {
        Self { registry }
    }

    /// The registry the commands go through.
    pub fn registry(&self) -> &NodeRegistry {
        &self.registry
    }

    fn store(&self) -> &Store {
        self.registry.store()
    }

    fn archive(&self) -> &Archive {
        self.registry.archive()
    }

    fn table(&self) -> &Arc<NodeTable> {
        self.registry.table()
    }

    fn client(&self) -> &NodeClient {
        self.registry.client()
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
    ) -> Result<(NodeRecord, Outcome), AdminError> {
        self.add_as(address, name, weight, Actor::Admin).await
    }

    /// [`add`](Self::add), recorded in the audit log as `actor`'s doing
    /// (the `NODES` of the configuration are the start-up's, not an
    /// admin's).
    pub async fn add_as(
        &self,
        address: &str,
        name: Option<&str>,
        weight: Option<u32>,
        actor: Actor,
    ) -> Result<(NodeRecord, Outcome), AdminError> {
        let address = validate(address, name, weight)?;
        let requested_weight = weight;
        if let Some(existing) = self.store().nodes.get_node(address.as_str()).await? {
            if existing.held_down {
                return self.release(existing, requested_weight, actor).await;
            }
            return self.re_add(existing, requested_weight, actor).await;
        }
        let name = name.map(str::to_owned);
        let host_port = address.host_port();
        self.with_node_lock(address.as_str(), move |this, lock| async move {
            let addr = lock.node().to_owned();
            if let Some(existing) = this.store().nodes.get_node(&addr).await? {
                return this.re_add(existing, requested_weight, actor).await;
            }
            let (state, health, reason, token) = this.first_contact(&lock).await?;
            // The admin's name, else the node's own, else host:port.
            let name = name.or(health.name).unwrap_or(host_port);
            let mut record = NodeRecord {
                address: addr.clone(),
                name,
                weight: requested_weight.unwrap_or(1),
                state,
                active_sessions: 0,
                instance: health.instance.clone(),
                reason,
                held_down: false,
                number: 0,
                offers: health.offers,
                epoch: token as u64,
            };
            // Postgres first: a node Redis knows is always one a rebuild knows.
            record.number = this
                .archive()
                .upsert_member(&Member {
                    address: addr.clone(),
                    name: record.name.clone(),
                    weight: record.weight as i32,
                    state: state.as_str().to_owned(),
                    draining: false,
                    instance: health.instance,
                    held_down: false,
                    number: 0,
                })
                .await?;
            if this.store().nodes.register_node(&record, false).await?.is_none() {
                return Err(AdminError::Rebuilding);
            }
            if state == NodeState::Up {
                // A number is new unless Postgres kept the address's row
                // (a removal that could not forget it), closed since.
                this.store().sessions.open_to_new_sessions(&addr).await?;
            }
            this.store().nodes.set_node_offers(&addr, record.offers).await?;
            this.table().upsert(&record);
            // A node that did not answer is detected when it recovers.
            let reason = match &record.reason {
                Some(reason) => reason.clone(),
                None => record.offers.describe(),
            };
            info!(node = %addr, name = %record.name, weight = record.weight, %state, %reason, "node added");
            let event = NodeEvent::new(actor, &addr, "added")
                .states(None, Some(state.as_str()))
                .sessions(0)
                .reason(reason);
            this.archive().record(event);
            Ok((record, Outcome::Added))
        })
        .await
    }

    /// A new node's first contact, under its lock: its health check, the
    /// alias check (one node, one registration: design.md §4.13, refused
    /// before anything is sent that would change the node), and its wipe
    /// under a fresh token. Returns the state it is registered in, what it
    /// said of itself, why it is down (if it is) and the token, its first
    /// fencing epoch: whatever an earlier life of the node may still
    /// archive under older tokens is fenced out before it counts again.
    async fn first_contact(
        &self,
        lock: &NodeLock,
    ) -> Result<(NodeState, NodeHealth, Option<String>, i64), AdminError> {
        let addr = lock.node();
        let health = self.client().first_check(addr).await;
        self.refuse_alias(addr, health.as_ref().ok()).await?;
        let token = self.archive().wipe_token().await?;
        lock.lock().check_held(&self.store().locks).await?;
        self.archive().fence_failed_node(addr, token).await?;
        let (state, health, reason) = match health {
            Ok(mut health) => match self.client().wipe(addr, Some(token)).await {
                Ok(selective) => {
                    health.offers.selective_clean |= selective;
                    info!(node = %addr, reason = "new registration: counts from an earlier life would be wrong for us", "node wiped");
                    (NodeState::Up, health, None)
                }
                Err(error) => (
                    NodeState::Down,
                    health,
                    Some(format!("could not be wiped: {error}")),
                ),
            },
            Err(error) => (
                NodeState::Down,
                NodeHealth::default(),
                Some(format!("did not answer its first health check: {error}")),
            ),
        };
        if let Some(reason) = &reason {
            warn!(node = %addr, %reason, "new node registered down");
        }
        Ok((state, health, reason, token))
    }

    /// Adding a known node changes nothing but its weight, when one is given:
    /// the way to re-weight a node at run time.
    async fn re_add(
        &self,
        mut existing: NodeRecord,
        weight: Option<u32>,
        actor: Actor,
    ) -> Result<(NodeRecord, Outcome), AdminError> {
        let mut outcome = Outcome::Unchanged;
        if let Some(weight) = weight.filter(|w| *w != existing.weight) {
            self.archive()
                .set_member_weight(&existing.address, weight)
                .await?;
            self.store()
                .nodes
                .set_node_weight(&existing.address, weight)
                .await?;
            info!(node = %existing.address, from = existing.weight, to = weight, "node re-weighted");
            self.archive().record(
                NodeEvent::new(actor, &existing.address, "reweighted")
                    .reason(format!("weight {} -> {weight}", existing.weight)),
            );
            existing.weight = weight;
            outcome = Outcome::Reweighted;
        }
        self.table().upsert(&existing);
        Ok((existing, outcome))
    }

    /// An admin's add of a node held down (`NodeRecord::held_down`): the
    /// admin's word that no `/clean` sent to it earlier is still on its way
    /// (the node was restarted, or nothing between holds requests). The
    /// hold is lifted, Postgres first, and the node recovered now if it
    /// answers (wiped, failed over first); else the health checks bring it
    /// back once it does.
    async fn release(
        &self,
        existing: NodeRecord,
        weight: Option<u32>,
        actor: Actor,
    ) -> Result<(NodeRecord, Outcome), AdminError> {
        let addr = existing.address.as_str();
        self.archive().set_member_held_down(addr, false).await?;
        self.store().nodes.set_node_held_down(addr, false).await?;
        let reason = "added again by an admin: the health checks bring it back once it answers";
        self.store()
            .nodes
            .set_node_notes(addr, reason, None)
            .await?;
        info!(node = %addr, "hold lifted by an admin's add");
        self.archive()
            .record(NodeEvent::new(actor, addr, "released").reason(reason));
        if self.registry.recover(addr).await? {
            if let Some(entry) = self.table().get(addr) {
                entry.evidence.recovered();
            }
        }
        let record = self
            .store()
            .nodes
            .get_node(addr)
            .await?
            .ok_or_else(|| AdminError::UnknownNode(addr.to_owned()))?;
        // A weight given with the add applies as to any node added again.
        let (record, _) = self.re_add(record, weight, actor).await?;
        Ok((record, Outcome::Released))
    }

    /// Removes a node: no new sessions, then (under the fence, so no
    /// press is in flight to it on any replica) `/clean archive=true`, fold,
    /// unmap. Its sessions restore from the archive on their next press, on
    /// another node.
    pub async fn remove(&self, address: &str) -> Result<Removal, AdminError> {
        self.remove_as(address, Actor::Admin, "removed by an admin")
            .await
    }

    async fn remove_as(
        &self,
        address: &str,
        actor: Actor,
        reason: &'static str,
    ) -> Result<Removal, AdminError> {
        let address = NodeAddress::parse(address)?;
        self.with_node_lock(address.as_str(), move |this, lock| async move {
            let addr = lock.node();
            let record = this
                .store()
                .nodes.get_node(addr)
                .await?
                .ok_or_else(|| AdminError::UnknownNode(addr.to_owned()))?;
            if record.state != NodeState::Down {
                this.store().nodes.set_node_state(addr, NodeState::Draining, &[]).await?;
                this.table().upsert(&NodeRecord {
                    state: NodeState::Draining,
                    ..record.clone()
                });
            }
            let report = this.registry.cleaner().remove(&lock, record.state).await?;
            this.archive().delete_member(addr).await?;
            this.table().remove(addr);
            info!(node = %addr, sessions = report.unmapped, archived = report.archived, "node removed");
            let reason = match (report.archived, report.unmapped) {
                (true, _) => reason.to_owned(),
                (false, 0) => format!("{reason}; it held no session: nothing to archive"),
                (false, _) => format!("{reason}; the node could not archive: its sessions' clicks since their last archive are lost"),
            };
            this.archive().record(
                NodeEvent::new(actor, addr, "removed")
                    .states(Some(record.state.as_str()), None)
                    .sessions(report.unmapped as i64)
                    .reason(reason),
            );
            Ok(Removal {
                sessions: report.unmapped,
                archived: report.archived,
            })
        })
        .await
    }

    pub async fn list(&self) -> Result<Vec<NodeView>, AdminError> {
        let records = self.store().nodes.list_nodes().await?;
        self.table().sync(&records);
        Ok(records
            .into_iter()
            .map(|r| {
                let entry = self.table().get(&r.address);
                let in_flight = entry.as_ref().map(|e| e.in_flight()).unwrap_or(0);
                let in_flight_limit = entry.as_ref().map(|e| e.link.limit.limit()).unwrap_or(0);
                NodeView {
                    address: r.address,
                    name: r.name,
                    weight: r.weight,
                    state: r.state,
                    active_sessions: r.active_sessions,
                    in_flight,
                    in_flight_limit,
                    reason: r.reason.filter(|_| r.state == NodeState::Down),
                    held_down: r.held_down && r.state == NodeState::Down,
                    offers: r.offers,
                }
            })
            .collect())
    }

    /// Refuses a second address of a registered node: one that resolves to
    /// a socket address a registered node resolves to, or that reports the
    /// instance id of a registered node.
    async fn refuse_alias(
        &self,
        addr: &str,
        health: Option<&NodeHealth>,
    ) -> Result<(), AdminError> {
        let address = NodeAddress::parse(addr)?;
        let mine = address.resolve().await;
        for other in self.store().nodes.list_nodes().await? {
            if other.address == addr {
                continue;
            }
            let same_instance = health
                .and_then(|h| h.instance.as_ref())
                .is_some_and(|i| other.instance.as_ref() == Some(i));
            let same_socket = match NodeAddress::parse(&other.address) {
                Ok(other_address) => {
                    let theirs = other_address.resolve().await;
                    mine.iter().any(|a| theirs.contains(a))
                }
                Err(_) => false,
            };
            if same_instance || same_socket {
                return Err(AdminError::Alias {
                    address: addr.to_owned(),
                    existing: other.address,
                });
            }
        }
        Ok(())
    }

    /// Runs `op` holding the node's lock, in a task of its own: an admin
    /// whose request is cancelled does not cut a removal in half.
    async fn with_node_lock<T, F, Fut>(&self, addr: &str, op: F) -> Result<T, AdminError>
    where
        T: Send + 'static,
        F: FnOnce(NodeAdmin, NodeLock) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<T, AdminError>> + Send + 'static,
    {
        let busy = AdminError::Busy(addr.to_owned());
        let this = self.clone();
        self.registry
            .detached()
            .under_node_lock(
                self.store().locks.clone(),
                addr.to_owned(),
                LOCK_WAIT,
                || busy,
                AdminError::Task,
                move |lock| op(this, lock),
            )
            .await
    }
}

/// An add's address, name and weight, checked before anything is asked.
fn validate(
    address: &str,
    name: Option<&str>,
    weight: Option<u32>,
) -> Result<NodeAddress, AdminError> {
    let address = NodeAddress::parse(address)?;
    if weight.is_some_and(|w| w == 0 || w > MAX_WEIGHT) {
        return Err(AdminError::Weight);
    }
    if name.is_some_and(|n| n.is_empty() || n.len() > 255 || n.chars().any(char::is_control)) {
        return Err(AdminError::Name);
    }
    Ok(address)
}

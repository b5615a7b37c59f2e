//! Redis may forget; clicks are not lost (design.md §4.12).
//!
//! The registry carries an epoch key, written once the registry is complete.
//! Every replica checks it each second. Missing while Postgres remembers
//! nodes of this cluster means Redis lost its data (restarted without
//! persistence): the mappings are gone, but the nodes still hold the live
//! counts. One replica (under a lock) then rebuilds: each node that was up
//! archives everything it holds with a fresh token, which is folded at once,
//! and only then is it registered again; a node that was down is wiped.
//! Until the epoch is back nothing is placed (the placement script checks
//! it) and `/readyz` answers 503; every session's next press then restores
//! it from the archive, at its exact count.

use std::sync::Arc;
use std::time::Duration;

use tracing::{info, warn};

use super::cleaner::{CleanError, NodeCleaner};
use super::fence::HEARTBEAT;
use crate::archive::events::{Actor, NodeEvent};
use crate::archive::{Archive, Member};
use crate::nodes::{NodeClient, NodeTable};
use crate::store::{with_lock, with_node_lock, LOCK_WAIT};
use crate::store::{Identity, Layout, NodeRecord, NodeState, Store};

/// Where the registry stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registry {
    Ready,
    /// Redis forgot its data and the registry is being rebuilt.
    Rebuilding,
}

#[derive(Clone)]
pub struct Rebuilder {
    cleaner: NodeCleaner,
    /// Set when a layout this release does not read stopped the replica.
    refused: Arc<std::sync::Mutex<Option<crate::store::LayoutMismatch>>>,
}

impl Rebuilder {
    /// The rebuild restores nodes through `cleaner` and its handles.
    pub fn new(cleaner: NodeCleaner) -> Self {
        Self {
            cleaner,
            refused: Arc::default(),
        }
    }

    fn store(&self) -> &Store {
        self.cleaner.store()
    }

    fn archive(&self) -> &Archive {
        self.cleaner.archive()
    }

    /// To detect what each restored node offers.
    fn client(&self) -> &NodeClient {
        self.cleaner.client()
    }

    fn table(&self) -> &Arc<NodeTable> {
        self.cleaner.table()
    }

    /// At start-up, before this replica follows fences: a fresh cluster
    /// gets its epoch; a registry to rebuild is left to [`run`](Self::run).
    /// Fails with [`CleanError::Layout`] where Redis holds a layout this
    /// release does not read.
    pub async fn start_if_fresh(&self) -> Result<Registry, CleanError> {
        if self.registry_complete().await? {
            return Ok(Registry::Ready);
        }
        if self.archive().members().await?.is_empty() {
            return self.start_fresh().await;
        }
        Ok(Registry::Rebuilding)
    }

    /// One check: ready if the epoch is there; else this replica rebuilds
    /// (or finds another one doing it).
    pub async fn check_once(&self) -> Result<Registry, CleanError> {
        if self.registry_complete().await? {
            return Ok(Registry::Ready);
        }
        let this = self.clone();
        self.cleaner
            .detached()
            .run(
                async move {
                    let store = this.store().clone();
                    let busy = || CleanError::Busy {
                        node: "registry".into(),
                    };
                    match with_lock(&store.locks, "registry", Duration::ZERO, busy, |_| {
                        this.rebuild()
                    })
                    .await
                    {
                        Err(CleanError::Busy { .. }) => Ok(Registry::Rebuilding),
                        other => other,
                    }
                },
                CleanError::Task,
            )
            .await
    }

    async fn rebuild(&self) -> Result<Registry, CleanError> {
        if self.registry_complete().await? {
            return Ok(Registry::Ready); // another replica finished meanwhile
        }
        let members = self.archive().members().await?;
        if members.is_empty() {
            return self.start_fresh().await;
        }
        // Some group forgot (or the control slot did): nothing is placed
        // from here on, anywhere, until the rebuild is done.
        self.store().nodes.clear_registry_epoch().await?;
        warn!(
            nodes = members.len(),
            "Redis lost the registry; archiving every node's live counts before serving again"
        );
        metrics::counter!("nodes_control_registry_rebuilds_total").increment(1);
        // Replicas re-register within a heartbeat: wait for them, so the
        // fences below reach every replica that may still press a node.
        tokio::time::sleep(HEARTBEAT * 2).await;
        // What the groups that did not forget still map is stale once the
        // nodes archive and forget it: dropped first, so that no press
        // reaches a node through it after the node's archive.
        let numbers: Vec<u64> = members.iter().map(|m| m.number as u64).collect();
        self.store().sessions.wipe_groups(&numbers).await?;
        let restores = members.iter().map(|member| self.restore(member));
        let restored = futures::future::join_all(restores).await;
        let mut up = 0;
        for (member, result) in members.iter().zip(restored) {
            match result {
                Ok(true) => up += 1,
                Ok(false) => {}
                Err(error) => {
                    // Leave the epoch missing: the next check tries again.
                    warn!(node = %member.address, %error, "could not restore a node; the rebuild will be retried");
                    return Err(error);
                }
            }
        }
        let epoch = uuid::Uuid::new_v4().to_string();
        self.declare_complete(&epoch).await?;
        info!(
            nodes = members.len(),
            up, "registry rebuilt from Postgres; serving again"
        );
        Ok(Registry::Ready)
    }

    /// Whether the registry is complete, in a layout this release reads.
    async fn registry_complete(&self) -> Result<bool, CleanError> {
        if let Layout::Unknown(mismatch) = self.store().replicas.layout().await? {
            return Err(mismatch.into());
        }
        // Complete: the control slot's epoch and every group's (a group
        // without one lost its mappings while the nodes still count its
        // sessions), on the Redis that completed it (one that restarted or
        // failed over may hold older data: store/replicas/identity.rs).
        let store = self.store();
        Ok(store.nodes.registry_epoch().await?.is_some()
            && store.replicas.identity().await? != Identity::Changed
            && store.sessions.groups_without_epoch().await? == 0)
    }

    /// Declares the registry complete under `epoch` (fresh, or rebuilt
    /// after amnesia), on the Redis that answers now, in this release's
    /// layout: every group's epoch first, the registry's last.
    async fn declare_complete(&self, epoch: &str) -> Result<(), CleanError> {
        let store = self.store();
        store.sessions.set_group_epochs(epoch).await?;
        store.replicas.keep_identity().await?;
        store.replicas.keep_layout().await?;
        store.nodes.set_registry_epoch(epoch).await?;
        Ok(())
    }

    /// A cluster Postgres has never seen: remember what Redis holds (a
    /// registry of an earlier version), then declare the registry complete.
    async fn start_fresh(&self) -> Result<Registry, CleanError> {
        for record in self.store().nodes.list_nodes().await? {
            let number = self
                .archive()
                .upsert_member(&Member {
                    address: record.address.clone(),
                    name: record.name.clone(),
                    weight: record.weight as i32,
                    state: record.state.as_str().to_owned(),
                    draining: false,
                    held_down: false,
                    instance: None,
                    number: 0,
                })
                .await?;
            self.store()
                .nodes
                .set_node_number(&record.address, number)
                .await?;
        }
        let epoch = uuid::Uuid::new_v4().to_string();
        self.declare_complete(&epoch).await?;
        info!("registry epoch written");
        Ok(Registry::Ready)
    }

    /// Archives (or, if it was down, wipes) one node under its lock and
    /// fence, then registers it: up if it answered, else down (the health
    /// checks bring it back, wiped). Returns whether it is up.
    async fn restore(&self, member: &Member) -> Result<bool, CleanError> {
        let busy = || CleanError::Busy {
            node: member.address.clone(),
        };
        with_node_lock(
            &self.store().locks,
            &member.address,
            LOCK_WAIT,
            busy,
            |lock| async move {
                let addr = lock.node().to_owned();
                // A node held down is not wiped either: that is a clean a
                // late one could follow as well, and its answer would bring
                // it up. It comes back down, held, with its last epoch.
                let (answered, epoch) = match member.held_down {
                    true => (false, 0),
                    false => {
                        self.cleaner
                            .archive_all(&lock, member.state != NodeState::Down.as_str())
                            .await?
                    }
                };
                // What it offers is recorded from its answer only: one that
                // does not say now comes back down, and the health checks
                // bring it up once it does (hole 5, `NodeRegistry::recover`).
                let offers = match answered {
                    true => self.client().detect(&addr).await.ok().map(|h| h.offers),
                    false => None,
                };
                let answered = offers.is_some();
                let (state, draining) = restored_state(member, answered);
                self.archive()
                    .set_member_state(&addr, state.as_str())
                    .await?;
                let record = NodeRecord {
                    address: addr.clone(),
                    name: member.name.clone(),
                    weight: member.weight.max(1) as u32,
                    state,
                    active_sessions: 0,
                    instance: member.instance.clone(),
                    reason: match (member.held_down, answered) {
                        (true, _) => Some(HELD_DOWN.to_owned()),
                        (false, false) => {
                            Some("did not answer during the registry rebuild".to_owned())
                        }
                        (false, true) => None,
                    },
                    held_down: member.held_down,
                    number: member.number as u64,
                    offers: offers.unwrap_or_default(),
                    epoch,
                };
                self.register_restored(&record, draining).await?;
                self.table().upsert(&record);
                let mut event = NodeEvent::new(Actor::Rebuild, &addr, "rebuilt")
                    .states(Some(member.state.as_str()), Some(state.as_str()));
                if let Some(reason) = &record.reason {
                    event = event.reason(reason.clone());
                }
                self.archive().record(event);
                Ok(answered)
            },
        )
        .await
    }

    /// Writes a restored node into the registry: its record, whether it
    /// is open to new sessions, what it offers, its epoch, its session
    /// count, and its drain.
    async fn register_restored(
        &self,
        record: &NodeRecord,
        draining: bool,
    ) -> Result<(), CleanError> {
        let (addr, state) = (record.address.as_str(), record.state);
        if self.store().nodes.register_node(record, true).await? == Some(false) {
            // The control slot remembered the node (a group forgot):
            // it starts over all the same, with nothing mapped.
            self.store().nodes.set_node_state(addr, state, &[]).await?;
        }
        // Open to new sessions as it is up (a failover of the node
        // may have closed it in a group after the groups were wiped).
        if state == NodeState::Up {
            self.store().sessions.open_to_new_sessions(addr).await?;
        } else {
            self.store().sessions.close_to_new_sessions(addr).await?;
        }
        self.store()
            .nodes
            .set_node_offers(addr, record.offers)
            .await?;
        self.store()
            .nodes
            .set_node_held_down(addr, record.held_down)
            .await?;
        self.store()
            .nodes
            .set_node_epoch(addr, record.epoch)
            .await?;
        self.store()
            .sessions
            .tally(std::slice::from_ref(record))
            .await?;
        if draining {
            self.store()
                .nodes
                .set_drain_until(addr, crate::clock::wall_ms())
                .await?;
        }
        Ok(())
    }

    /// Checks every second until cancelled. A layout this release does
    /// not read (a newer release wrote it since) stops the replica:
    /// `stop` is cancelled, and [`refused`](Self::refused) says why.
    pub async fn run(
        self,
        cancel: tokio_util::sync::CancellationToken,
        stop: tokio_util::sync::CancellationToken,
    ) {
        crate::periodic::every(HEARTBEAT, cancel, || async {
            match self.check_once().await {
                Err(CleanError::Layout(mismatch)) => {
                    tracing::error!(%mismatch, "refusing to serve");
                    *self.refused.lock().unwrap_or_else(|e| e.into_inner()) = Some(mismatch);
                    stop.cancel();
                }
                Err(error) => warn!(%error, "registry check failed"),
                Ok(_) => {}
            }
        })
        .await
    }

    /// Why this replica stopped serving, if a layout it does not read
    /// stopped it.
    pub fn refused(&self) -> Option<crate::store::LayoutMismatch> {
        self.refused
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// Why a node held down comes back down from a rebuild.
const HELD_DOWN: &str = "held down before the registry rebuild (a clean to it timed out and it takes no clean tokens): it stays down until an admin adds it again";

/// What a node comes back as after the rebuild's clean, and whether it
/// drains. A node that was draining has just archived every session: it
/// goes on draining, with nothing left, so it is removed. (Or, down now,
/// drained before it failed: the drain outlives the down spell, see
/// `NodeRegistry::recover`.)
fn restored_state(member: &Member, answered: bool) -> (NodeState, bool) {
    let draining = member.draining || member.state == NodeState::Draining.as_str();
    let state = match (answered, draining) {
        (true, true) => NodeState::Draining,
        (true, false) => NodeState::Up,
        (false, _) => NodeState::Down,
    };
    (state, draining)
}

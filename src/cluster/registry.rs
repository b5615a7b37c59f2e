//! `NodeRegistry`: this replica's view of the nodes and the state changes
//! the press flow, the router and the health checker make: reload the view,
//! mark a node down, move a failed node's sessions off it, bring a node
//! back. The admin commands (`admin.rs`) go through it too.

use std::sync::Arc;

use tracing::{info, warn};

use crate::archive::events::{Actor, NodeEvent};
use crate::archive::Archive;
use crate::lifecycle::cleaner::Wiped;
use crate::lifecycle::detached::Detached;
use crate::lifecycle::down::record_marked_down;
use crate::lifecycle::{CleanError, NodeCleaner};
use crate::nodes::client::{NodeClient, NodeHealth};
use crate::nodes::table::{NodeEntry, NodeTable};
use crate::store::{NodeLock, LOCK_WAIT};
use crate::store::{NodeState, StateChange, Store, StoreError};

#[derive(Clone)]
pub struct NodeRegistry {
    cleaner: NodeCleaner,
    refreshes: Arc<Refreshes>,
}

/// Concurrent refreshes of the view coalesce: one reads the registry at a
/// time, and a caller that waited for one that started after it asked
/// takes that one's result instead of reading again (a wave of presses
/// naming a node this replica does not know yet costs one read).
#[derive(Default)]
struct Refreshes {
    turn: tokio::sync::Mutex<()>,
    /// Refreshes started so far.
    started: std::sync::atomic::AtomicU64,
    /// Whether the last one read the registry.
    last_ok: std::sync::atomic::AtomicBool,
}

impl NodeRegistry {
    /// The registry's operations go through `cleaner`'s handles.
    pub fn new(cleaner: NodeCleaner) -> Self {
        Self {
            cleaner,
            refreshes: Arc::default(),
        }
    }

    pub fn table(&self) -> &Arc<NodeTable> {
        self.cleaner.table()
    }

    pub fn store(&self) -> &Store {
        self.cleaner.store()
    }

    pub fn archive(&self) -> &Archive {
        self.cleaner.archive()
    }

    pub fn client(&self) -> &NodeClient {
        self.cleaner.client()
    }

    pub fn cleaner(&self) -> &NodeCleaner {
        &self.cleaner
    }

    pub fn detached(&self) -> &Detached {
        self.cleaner.detached()
    }

    /// How many times this replica has read the registry to reload its view.
    pub fn reads(&self) -> u64 {
        self.refreshes
            .started
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// Reloads this replica's view of the registry (or waits for a reload
    /// that started after this call, see [`Refreshes`]).
    pub async fn refresh(&self) -> Result<(), StoreError> {
        use std::sync::atomic::Ordering;
        let asked_after = self.refreshes.started.load(Ordering::Acquire);
        let _turn = self.refreshes.turn.lock().await;
        if self.refreshes.started.load(Ordering::Acquire) > asked_after
            && self.refreshes.last_ok.load(Ordering::Acquire)
        {
            return Ok(());
        }
        self.refreshes.started.fetch_add(1, Ordering::AcqRel);
        let records = self.store().nodes.list_nodes().await;
        self.refreshes
            .last_ok
            .store(records.is_ok(), Ordering::Release);
        self.table().sync(&records?);
        Ok(())
    }

    /// Takes a failed node out of placement and press routing, on every replica.
    pub async fn mark_down(&self, entry: &NodeEntry, actor: Actor, reason: &str) {
        entry.set_state(NodeState::Down);
        let change = self
            .store()
            .nodes
            .set_node_state(
                &entry.address,
                NodeState::Down,
                &[NodeState::Up, NodeState::Draining],
            )
            .await
            .map(|before| before.map_or(StateChange::Unexpected, StateChange::Changed));
        self.recorded_down(entry, actor, reason, change).await;
    }

    /// [`mark_down`](Self::mark_down) on timeouts alone (no refusal, no
    /// reset, no bad answer): refused for the last up node, atomically in
    /// Redis across replicas (design.md §4.15). Returns whether the node
    /// is down now.
    pub async fn mark_down_unless_last(
        &self,
        entry: &NodeEntry,
        actor: Actor,
        reason: &str,
    ) -> bool {
        let change = self
            .store()
            .nodes
            .mark_down_unless_last(&entry.address)
            .await;
        if let Ok(StateChange::LastUp) = change {
            warn!(node = %entry.address, %reason, "only timeouts speak against the last up node: it stays up");
            return false;
        }
        entry.set_state(NodeState::Down);
        self.recorded_down(entry, actor, reason, change).await;
        true
    }

    async fn recorded_down(
        &self,
        entry: &NodeEntry,
        actor: Actor,
        reason: &str,
        change: Result<StateChange, StoreError>,
    ) {
        match change {
            Ok(StateChange::Changed(before)) => {
                record_marked_down(
                    &self.store().nodes,
                    self.archive(),
                    &entry.address,
                    actor,
                    before,
                    reason,
                )
                .await;
            }
            Ok(StateChange::Unexpected | StateChange::LastUp) => {}
            Err(error) => {
                warn!(node = %entry.address, %error, "could not record the node down in Redis; this replica keeps it down and retries");
                self.record_down_later(entry, actor, reason);
            }
        }
    }

    /// Redis refused a mark-down: the node stays down in this view (the
    /// refresh would otherwise bring it back up from the registry's stale
    /// word, and the next press go to a node that may have counted the
    /// last), and the mark is written once Redis answers. Then the sweep or
    /// the next press fails it over as any node marked down.
    ///
    /// Written only if nothing happened to the node meanwhile: the same
    /// registration in this view, and no clean or wipe recorded since (its
    /// epoch unmoved). Otherwise another replica saw it serve, or failed it
    /// over and recovered it, and a late mark would take a healthy node down.
    fn record_down_later(&self, entry: &NodeEntry, actor: Actor, reason: &str) {
        entry.hold_down(true);
        let (this, address, reason) = (self.clone(), entry.address.clone(), reason.to_owned());
        let (failed, epoch) = (self.table().get(&address), entry.fence_epoch());
        self.detached().spawn(async move {
            let mut pause = std::time::Duration::from_millis(50);
            loop {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(std::time::Duration::from_secs(1));
                let entry = match (this.table().get(&address), &failed) {
                    (Some(now), Some(then)) if std::sync::Arc::ptr_eq(&now, then) => now,
                    _ => return, // removed (or added again) meanwhile
                };
                match this.store().nodes.node_epoch(&address).await {
                    Ok(recorded) if recorded > epoch => {
                        entry.hold_down(false);
                        return;
                    }
                    Ok(_) => {}
                    Err(_) => continue,
                }
                let change = this
                    .store()
                    .nodes
                    .set_node_state(
                        &address,
                        NodeState::Down,
                        &[NodeState::Up, NodeState::Draining],
                    )
                    .await
                    .map(|before| before.map_or(StateChange::Unexpected, StateChange::Changed));
                if change.is_ok() {
                    entry.hold_down(false);
                    Box::pin(this.recorded_down(&entry, actor, &reason, change)).await;
                    return;
                }
            }
        });
    }

    /// Moves the sessions of a node declared down off it, under its fence.
    pub async fn fail_over(&self, addr: &str) -> Result<usize, CleanError> {
        self.cleaner.fail_over(addr).await
    }

    /// Brings a down node that answers its health check back: its sessions
    /// are unmapped (they restore from the archive), it is wiped with
    /// `/clean archive=false` (its counts are stale), then it takes traffic,
    /// unless an admin drained it before it went down: then it comes back
    /// draining, so the drain still finishes (at once: it holds nothing).
    pub async fn recover(&self, addr: &str) -> Result<bool, CleanError> {
        let busy = CleanError::Busy {
            node: addr.to_owned(),
        };
        let this = self.clone();
        let work = move |lock: NodeLock| async move { this.recover_locked(&lock).await };
        self.detached()
            .under_node_lock(
                self.store().locks.clone(),
                addr.to_owned(),
                LOCK_WAIT,
                || busy,
                CleanError::Task,
                work,
            )
            .await
    }

    /// [`recover`](Self::recover) under the node's lock: a node still down
    /// is wiped, asked what it offers, and brought back.
    async fn recover_locked(&self, lock: &NodeLock) -> Result<bool, CleanError> {
        let addr = lock.node();
        match self.store().nodes.get_node(addr).await? {
            Some(record) if record.state == NodeState::Down && !record.held_down => {}
            _ => return Ok(false),
        }
        let wiped = match self.cleaner.wipe(lock).await {
            Ok(wiped) => wiped,
            Err(error) => {
                warn!(node = %addr, %error, "could not wipe the recovered node; it stays down");
                return Ok(false);
            }
        };
        // It may have come back as another program: detect again. What
        // a node offers (fencing above all) is only ever recorded from
        // its answer: one that does not give it now stays down until
        // the next check, not brought up offering nothing (hole 5).
        let health = match self.client().detect(addr).await {
            Ok(health) => health,
            Err(error) => {
                warn!(node = %addr, %error, "the recovered node did not say what it offers; it stays down");
                return Ok(false);
            }
        };
        self.bring_back(lock, wiped, health).await?;
        Ok(true)
    }

    /// Records a wiped node up again (or draining, if it was), with what
    /// it offers now.
    async fn bring_back(
        &self,
        lock: &NodeLock,
        wiped: Wiped,
        health: NodeHealth,
    ) -> Result<(), CleanError> {
        let addr = lock.node();
        let mut offers = health.offers;
        offers.selective_clean |= wiped.selective;
        let (state, reason) = match self.store().nodes.drain_until(addr).await? {
            Some(_) => (
                NodeState::Draining,
                "answered its health checks again; its counts are stale: wiped; still draining",
            ),
            None => (
                NodeState::Up,
                "answered its health checks again; its counts are stale: wiped",
            ),
        };
        let reason = format!("{reason}; {}", offers.describe());
        // Postgres first, with the instance: a rebuild restores what
        // the node says now, not what it said before it restarted.
        // Only while the node is still ours: a recovery that resumed
        // after another operation failed the node again brings nothing
        // back up (the state change below is conditioned on the lock).
        lock.lock().check_held(&self.store().locks).await?;
        let instance = health.instance.as_deref();
        self.archive()
            .set_member_recovered(addr, state.as_str(), instance)
            .await?;
        self.store()
            .nodes
            .set_node_notes(addr, "", instance)
            .await?;
        self.store().nodes.set_node_offers(addr, offers).await?;
        let changed =
            self.store()
                .nodes
                .set_node_state_locked(lock.lock(), addr, state, &[NodeState::Down]);
        if let Some(old) = changed.await? {
            let moved = wiped.moved;
            info!(
                node = %addr, from = %old, sessions_moved = moved, %reason,
                "node recovered and wiped"
            );
            self.archive().record(
                NodeEvent::new(Actor::HealthCheck, addr, "recovered")
                    .states(Some(old.as_str()), Some(state.as_str()))
                    .sessions(moved as i64)
                    .reason(reason),
            );
        }
        self.refresh().await?;
        Ok(())
    }
}

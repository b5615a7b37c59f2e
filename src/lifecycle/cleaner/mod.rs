//! `NodeCleaner`: every `/clean` of a node and every move of sessions off a
//! node goes through here, under the node's fence, so that no press is in
//! flight to the node on any replica meanwhile (design.md §4.7, §4.10), and
//! every session the node archived is folded before its next press (§4.6).
//!
//! A clean runs as: lock the node, raise the fence, wait for every live
//! replica's ack, take a clean token, write the journal, `/clean` with the
//! token, fold, apply the outcome to the mappings, delete the journal, lower
//! the fence. A clean that does not end in OK has its token revoked, so
//! whatever the node archives late is never folded; one that timed out or
//! could not reach the node is a node failure, handled right there under
//! the fence it holds. If the cleaner dies after `/clean`, the fence stays up
//! until a sweep finds it stale and finishes the journal (a second fold is a
//! no-op).
//!
//! Every operation runs in a task of its own ([`Detached`]): a press that
//! started it may be cancelled, the operation is not.
//!
//! By what they do: `clean` (cleans, expiry, removal, finishing a dead
//! cleaner's journal), `failover` (moving a failed node's sessions off it,
//! wiping a node that came back), `archive_all` (the rebuild's step at
//! each node), all under the fence of `fenced`.

mod archive_all;
mod clean;
mod failover;
mod fenced;

use std::sync::Arc;
use std::time::Duration;

use protocol::silence::Silence;
use tokio::sync::Notify;

use super::detached::Detached;
use super::down::record_marked_down;
use crate::archive::events::Actor;
use crate::archive::{Archive, ArchiveError};
use crate::nodes::{NodeCallError, NodeClient, NodeTable};
use crate::store::NodeLock;
use crate::store::{NodeState, Store, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum CleanError {
    #[error("node {node} is busy with another operation")]
    Busy { node: String },
    #[error("replicas {missing:?} did not close their gates to {node} in time")]
    FenceTimeout { node: String, missing: Vec<String> },
    #[error("node {node} could not clean: {source}")]
    Node {
        node: String,
        #[source]
        source: NodeCallError,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Archive(#[from] ArchiveError),
    #[error("a clean task failed: {0}")]
    Task(String),
    /// Redis holds a storage layout this release does not read.
    #[error(transparent)]
    Layout(#[from] crate::store::LayoutMismatch),
}

/// What one clean did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CleanReport {
    /// Sessions unmapped (they restore from the archive on their next press).
    pub unmapped: usize,
    /// Live sessions that stayed on the node with a new base.
    pub rebased: usize,
    /// Whether the node archived (false: it was down or did not answer).
    pub archived: bool,
    /// Of the sessions an expiry clean was asked about, those still on the
    /// node and past their end when it looked under the lock.
    pub expired: usize,
}

/// What a wipe did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wiped {
    /// Sessions moved off it (they go on elsewhere).
    pub moved: usize,
    /// Whether the node showed it cleans selectively.
    pub selective: bool,
}

#[derive(Clone)]
pub struct NodeCleaner {
    store: Store,
    archive: Archive,
    client: NodeClient,
    table: Arc<NodeTable>,
    detached: Detached,
    /// When a silent replica is no longer waited for (`others_wait`): it
    /// lapsed on its own clock before.
    silence: Silence,
    /// How long a cleaner waits for acks before giving up (and retrying
    /// later): a live replica's presses at the node end within a node
    /// timeout, a silent one is given up on after `others_wait`.
    ack_timeout: Duration,
    /// Notified whenever a fence event arrives (acks included), so waiting
    /// for acks wakes at once instead of polling.
    events: Arc<Notify>,
}

impl NodeCleaner {
    pub fn new(
        store: Store,
        archive: Archive,
        client: NodeClient,
        table: Arc<NodeTable>,
        detached: Detached,
        silence: Silence,
        events: Arc<Notify>,
    ) -> Self {
        let ack_timeout = client.timeout() + silence.others_wait() + Duration::from_secs(2);
        Self {
            store,
            archive,
            client,
            table,
            detached,
            silence,
            ack_timeout,
            events,
        }
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn archive(&self) -> &Archive {
        &self.archive
    }

    pub fn client(&self) -> &NodeClient {
        &self.client
    }

    pub fn table(&self) -> &Arc<NodeTable> {
        &self.table
    }

    pub fn detached(&self) -> &Detached {
        &self.detached
    }

    /// Runs `op` under the node's lock, in a task of its own.
    async fn locked<T, F, Fut>(&self, addr: &str, wait: Duration, op: F) -> Result<T, CleanError>
    where
        T: Send + 'static,
        F: FnOnce(NodeCleaner, NodeLock) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<T, CleanError>> + Send + 'static,
    {
        let node = addr.to_owned();
        let busy = move || CleanError::Busy { node };
        let this = self.clone();
        self.detached
            .under_node_lock(
                self.store.locks.clone(),
                addr.to_owned(),
                wait,
                busy,
                CleanError::Task,
                move |lock| op(this, lock),
            )
            .await
    }

    /// Opens an up node that a group still holds closed to new sessions
    /// (an opening that failed, or a closing that landed after the
    /// operation that made it lost the node's lock), on a cluster. Under
    /// the node's lock, and only while it is up: no removal or failover of
    /// it is under way then (they hold the lock from before they close it
    /// until they are done). Skipped while another operation holds it.
    /// Returns whether it was opened.
    pub async fn reopen(&self, addr: &str) -> Result<bool, CleanError> {
        self.locked(addr, Duration::ZERO, move |this, lock| async move {
            let addr = lock.node();
            if this.store.nodes.get_node(addr).await?.map(|n| n.state) != Some(NodeState::Up) {
                return Ok(false);
            }
            lock.lock().check_held(&this.store.locks).await?;
            this.store.sessions.open_to_new_sessions(addr).await?;
            // Opened late (this task stalled past the lock, and a removal or
            // failover closed and read the node meanwhile): closed again.
            let still_up =
                this.store.nodes.get_node(addr).await?.map(|n| n.state) == Some(NodeState::Up);
            if !still_up || lock.lock().check_held(&this.store.locks).await.is_err() {
                this.store.sessions.close_to_new_sessions(addr).await?;
                return Ok(false);
            }
            Ok(true)
        })
        .await
    }

    /// Whether the node stamps its archive rows with our clean tokens (and
    /// so refuses a clean older than its last): a late `/clean` of one that
    /// does not can still archive and forget.
    async fn takes_tokens(&self, addr: &str) -> Result<bool, CleanError> {
        let record = self.store.nodes.get_node(addr).await?;
        Ok(record.is_some_and(|record| record.offers.clean_tokens))
    }

    /// Marks the node down, under its lock: in this view first, then in
    /// Redis (only while the lock is still this operation's).
    /// `clean_may_arrive`: the node may yet receive a `/clean` this
    /// operation sent. A node without clean tokens cannot tell that clean
    /// from a new one, so it is held down until an admin adds it again
    /// (design.md, "Held down"). The hold is written first, Postgres then
    /// Redis, so no recovery ever finds the node down without it.
    pub(super) async fn declare_down(
        &self,
        lock: &NodeLock,
        reason: &str,
        clean_may_arrive: bool,
    ) -> Result<(), CleanError> {
        let addr = lock.node();
        let held = clean_may_arrive && !self.takes_tokens(addr).await?;
        let reason = match held {
            true => format!("{reason}; it takes no clean tokens, so that clean may still reach it: it stays down until an admin adds it again"),
            false => reason.to_owned(),
        };
        if held {
            self.archive.set_member_held_down(addr, true).await?;
            self.store.nodes.set_node_held_down(addr, true).await?;
        }
        if let Some(entry) = self.table.get(addr) {
            entry.set_state(NodeState::Down);
        }
        let before = self
            .store
            .nodes
            .set_node_state_locked(
                lock.lock(),
                addr,
                NodeState::Down,
                &[NodeState::Up, NodeState::Draining],
            )
            .await?;
        if let Some(before) = before {
            record_marked_down(
                &self.store.nodes,
                &self.archive,
                addr,
                Actor::Clean,
                before,
                &reason,
            )
            .await;
        }
        Ok(())
    }

    /// Revokes what a failed node may still archive: its tokens below
    /// `below`, a number this operation took from the sequence while it
    /// held the node. The lock is read after that number was taken, so an
    /// operation that paused before it (and lost the node) stops here, and
    /// one that pauses after it revokes nothing a later operation issued.
    pub(super) async fn fence_out(&self, lock: &NodeLock, below: i64) -> Result<u64, CleanError> {
        lock.lock().check_held(&self.store.locks).await?;
        Ok(self.archive.fence_failed_node(lock.node(), below).await?)
    }
}

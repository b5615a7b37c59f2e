//! `NodeTable`: this replica's view of the registry, refreshed from Redis.
//! The hot path reads node state and names here, in memory, so that a press
//! costs one Redis round trip (the session lookup) and nothing more.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use balancing::LoadTracker;

use super::entry::Membership;
pub use super::entry::{InFlight, NodeEntry};
use super::error::NodeCallError;
use super::record::NodeRecord;

pub use protocol::press::Spared;

/// All nodes this replica knows, by normalised address.
#[derive(Debug)]
pub struct NodeTable {
    /// In-flight counts by node address, read by load-aware strategies.
    loads: LoadTracker,
    /// Moves on whenever a node joins, leaves or changes state, so strategy
    /// node sets are rebuilt only when something changed.
    membership: Arc<Membership>,
    /// A std lock: held only to clone an `Arc` out or to swap entries, never
    /// across an await.
    entries: RwLock<HashMap<String, Arc<NodeEntry>>>,
    /// The clean mark: moves on whenever a clean of some node ends (a fence
    /// is lifted); each node remembers the mark its last clean ended at. A
    /// press that read its mapping before the clean of its node ended must
    /// read it again (it may be stale). Not a fencing epoch: this
    /// replica's own counter, never shared.
    clean_mark: AtomicU64,
    /// `NODE_MAX_IN_FLIGHT`: every node's limit starts here.
    max_in_flight: usize,
}

impl Default for NodeTable {
    fn default() -> Self {
        Self::new(crate::config::DEFAULT_NODE_MAX_IN_FLIGHT)
    }
}

impl NodeTable {
    pub fn new(max_in_flight: usize) -> Self {
        Self {
            loads: LoadTracker::default(),
            membership: Arc::default(),
            entries: RwLock::default(),
            clean_mark: AtomicU64::new(0),
            max_in_flight,
        }
    }

    /// Whether a call that failed is no evidence that its node is gone, and
    /// why (`protocol::press::spare`; design.md, "Overload is not death").
    /// `sent_at`: when the call began, on [`crate::clock::mono_ms`].
    pub fn spare(&self, entry: &NodeEntry, error: &NodeCallError, sent_at: u64) -> Option<Spared> {
        // It answered others while this call waited, or (a connect that
        // timed out) it holds connections of ours carrying presses: a full
        // listen backlog or a long queue of its own, not a dead process. (A
        // node cut off holds none: every press of ours is still connecting.)
        let busy = entry.evidence.answered_since(sent_at)
            || matches!(error, NodeCallError::ConnectTimeout)
                && entry.link.connections_busy().unwrap_or(0) > 0;
        let others_serve = self.others_serve(&entry.address);
        protocol::press::spare(error.is_inconclusive(), busy, others_serve)
    }

    /// Whether a node other than `address` serves presses in this view.
    pub fn others_serve(&self, address: &str) -> bool {
        self.read()
            .values()
            .any(|e| e.address != address && e.serves_presses())
    }

    pub fn get(&self, address: &str) -> Option<Arc<NodeEntry>> {
        self.read().get(address).cloned()
    }

    pub fn all(&self) -> Vec<Arc<NodeEntry>> {
        let mut all: Vec<_> = self.read().values().cloned().collect();
        all.sort_by(|a, b| a.address.cmp(&b.address));
        all
    }

    /// The clean mark now: read before a mapping, to tell later whether a
    /// clean of its node ended since ([`NodeEntry::cleaned_since`]).
    pub fn clean_mark(&self) -> u64 {
        self.clean_mark.load(Ordering::SeqCst)
    }

    /// Records that a clean of `node` just ended.
    pub fn cleaned(&self, node: &NodeEntry) {
        let mark = self.clean_mark.fetch_add(1, Ordering::AcqRel) + 1;
        node.cleaned_at.fetch_max(mark, Ordering::SeqCst);
    }

    /// Records that every node may have been cleaned just now (this
    /// replica's lease ran out): mappings read before are void.
    pub fn cleaned_all(&self) {
        let mark = self.clean_mark.fetch_add(1, Ordering::SeqCst) + 1;
        for node in self.read().values() {
            node.cleaned_at.fetch_max(mark, Ordering::SeqCst);
        }
    }

    /// Learns a newer fencing epoch of `node`, read from the registry. A
    /// press sends the epoch with a mapping read *before* it learned it
    /// only if no clean ended in between, so the clean mark moves first and
    /// the epoch after: a press that loads the new epoch (then checks the
    /// mark against the clean mark it read before its mapping) sees the
    /// mark too, and reads its mapping again unless the mark is older than
    /// that read, in which case the epoch was in Redis (and the clean that
    /// wrote it complete) before the mapping was read.
    pub fn learn_epoch(&self, node: &NodeEntry, epoch: u64) {
        if node.fence_epoch.load(Ordering::SeqCst) >= epoch {
            return;
        }
        let mark = self.clean_mark.fetch_add(1, Ordering::SeqCst) + 1;
        node.cleaned_at.fetch_max(mark, Ordering::SeqCst);
        node.fence_epoch.fetch_max(epoch, Ordering::SeqCst);
    }

    /// Brings the view in line with the registry: new nodes appear, states
    /// follow, removed nodes disappear. Entries that stay keep their
    /// in-flight counters and gates.
    pub fn sync(&self, records: &[NodeRecord]) {
        let mut entries = self.entries.write().unwrap_or_else(|e| e.into_inner());
        let before = entries.len();
        entries.retain(|address, _| records.iter().any(|r| &r.address == address));
        if entries.len() != before {
            self.membership.changed();
        }
        for record in records {
            self.apply(&mut entries, record);
        }
    }

    /// Wakes on every change of the membership version (a burst of changes
    /// may wake it once: it is for rebuilding, not for counting).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.membership.version.subscribe()
    }

    pub fn loads(&self) -> &LoadTracker {
        &self.loads
    }

    /// Sets one node's state in this view right away (the registry is the
    /// source of truth; this saves waiting for the next refresh).
    pub fn upsert(&self, record: &NodeRecord) {
        self.apply(
            &mut self.entries.write().unwrap_or_else(|e| e.into_inner()),
            record,
        );
    }

    pub fn remove(&self, address: &str) {
        if self
            .entries
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(address)
            .is_some()
        {
            self.membership.changed();
        }
    }

    fn apply(&self, entries: &mut HashMap<String, Arc<NodeEntry>>, record: &NodeRecord) {
        match entries.get(&record.address) {
            Some(entry) => {
                entry.follow_state(record.state);
                entry.set_weight(record.weight);
                entry
                    .fencing
                    .store(record.offers.fencing, Ordering::Release);
                self.learn_epoch(entry, record.epoch);
                *entry.instance.lock().unwrap_or_else(|e| e.into_inner()) = record.instance.clone();
            }
            None => {
                if let Some(entry) =
                    NodeEntry::new(record, &self.loads, &self.membership, self.max_in_flight)
                {
                    // A node (re)appearing in this view may have been cleaned
                    // while we did not know it (a removal and re-add, a
                    // rebuilt registry): mappings read before now are void.
                    let mark = self.clean_mark.fetch_add(1, Ordering::AcqRel) + 1;
                    entry.cleaned_at.store(mark, Ordering::Release);
                    entries.insert(record.address.clone(), Arc::new(entry));
                    self.membership.changed();
                }
            }
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Arc<NodeEntry>>> {
        self.entries.read().unwrap_or_else(|e| e.into_inner())
    }
}

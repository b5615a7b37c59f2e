//! `NodeTable`: this replica's view of the registry, refreshed from Redis.
//! The hot path reads node state and names here, in memory, so that a press
//! costs one Redis round trip (the session lookup) and nothing more.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use balancing::LoadTracker;
use tokio::sync::{RwLock as AsyncRwLock, RwLockWriteGuard};

use super::error::NodeCallError;
use super::record::{NodeRecord, NodeState};

/// One node as this replica sees it.
#[derive(Debug)]
pub struct NodeEntry {
    pub address: String,
    pub name: String,
    weight: AtomicU32,
    /// The `X-Served-By` value, built once (`None` if the name is not a
    /// valid header value).
    pub served_by: Option<http::HeaderValue>,
    state: AtomicU8,
    /// This replica's requests in flight to the node (presses and
    /// `/process`), shared with the load-aware strategies.
    in_flight: Arc<AtomicUsize>,
    /// The table's membership, moved on when this node's state changes.
    membership: Arc<Membership>,
    /// The table's clean mark at which the last clean of this node ended.
    cleaned_at: AtomicU64,
    /// Whether the node refuses presses under an older fencing epoch (it
    /// offers `fencing`): presses then carry [`fence_epoch`](Self::fence_epoch).
    fencing: std::sync::atomic::AtomicBool,
    /// Declared down here while Redis refused the mark: the view keeps it
    /// down, whatever the registry still says, until the mark is written
    /// ([`Self::hold_down`]); a node that failed a press it may have
    /// counted is never pressed again on the registry's stale word.
    down_unrecorded: std::sync::atomic::AtomicBool,
    /// The newest clean token of the node this replica has learned from
    /// the registry: the fencing epoch its presses carry. Learned only
    /// through [`NodeTable::learn_epoch`], which orders it with the clean
    /// mark (see there).
    fence_epoch: AtomicU64,
    /// Presses hold a read guard while in flight to the node; a clean takes
    /// the write guard, so no press of this replica is in flight to a node
    /// being cleaned (design.md §4.7). A tokio lock: it is held across awaits;
    /// shared, so that a press the node is slow to answer can keep holding
    /// it in a task of its own after its request was answered.
    gate: Arc<AsyncRwLock<()>>,
    /// Presses of this replica waiting at the gate now (counted on the slow
    /// path only: the usual press takes the gate at once).
    held: AtomicUsize,
    /// Fired when the node is declared down: presses in flight there stop
    /// waiting for it and fail over at once (design.md §4.13).
    down: tokio::sync::Notify,
    /// Serialises this replica's presses that find the node down, so one of
    /// them runs the failover and the others only re-read their mapping.
    pub(crate) failover: tokio::sync::Mutex<()>,
    /// What this replica has seen of the node's health.
    pub evidence: super::evidence::Evidence,
    /// The instance id recorded at the node's last wipe. A std mutex,
    /// never held across an await.
    instance: std::sync::Mutex<Option<String>>,
    /// How presses reach the node: its press URI, its connections, this
    /// replica's limit on them, its press metrics.
    pub link: Arc<super::link::Link>,
}

impl NodeEntry {
    fn new(
        record: &NodeRecord,
        loads: &LoadTracker,
        membership: &Arc<Membership>,
        max_in_flight: usize,
    ) -> Option<Self> {
        let link = Arc::new(super::link::Link::new(
            &record.address,
            &record.name,
            max_in_flight,
        )?);
        Some(Self {
            address: record.address.clone(),
            name: record.name.clone(),
            weight: AtomicU32::new(record.weight),
            served_by: http::HeaderValue::from_str(&record.name).ok(),
            state: AtomicU8::new(encode(record.state)),
            in_flight: loads.counter(&record.address.as_str().into()),
            membership: membership.clone(),
            cleaned_at: AtomicU64::new(0),
            fencing: std::sync::atomic::AtomicBool::new(record.offers.fencing),
            down_unrecorded: std::sync::atomic::AtomicBool::new(false),
            fence_epoch: AtomicU64::new(record.epoch),
            gate: Arc::new(AsyncRwLock::new(())),
            held: AtomicUsize::new(0),
            down: tokio::sync::Notify::new(),
            failover: tokio::sync::Mutex::new(()),
            evidence: Default::default(),
            instance: std::sync::Mutex::new(record.instance.clone()),
            link,
        })
    }

    /// The instance id recorded at the node's last wipe, if it reports one.
    pub fn instance(&self) -> Option<String> {
        self.instance
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn weight(&self) -> u32 {
        self.weight.load(Ordering::Acquire)
    }

    /// Follows the registry's weight; moves the table version on a change
    /// so weighted strategies rebuild.
    fn set_weight(&self, weight: u32) {
        if self.weight.swap(weight, Ordering::AcqRel) != weight {
            self.membership.changed();
        }
    }

    pub fn state(&self) -> NodeState {
        decode(self.state.load(Ordering::Acquire))
    }

    pub fn set_state(&self, state: NodeState) {
        if self.state.swap(encode(state), Ordering::AcqRel) != encode(state) {
            self.membership.changed();
            if state == NodeState::Down {
                self.down.notify_waiters();
            }
        }
    }

    /// Keeps the node down in this view (`true`) until its mark is in the
    /// registry (`false`).
    pub fn hold_down(&self, held: bool) {
        self.down_unrecorded.store(held, Ordering::Release);
        if held {
            self.set_state(NodeState::Down);
        }
    }

    /// The registry's state for the node, unless this view holds it down.
    fn follow_state(&self, state: NodeState) {
        if state != NodeState::Down && self.down_unrecorded.load(Ordering::Acquire) {
            return;
        }
        self.set_state(state);
    }

    /// Resolves when the node is declared down after this call. Create it
    /// before checking the state, so a declaration in between is not missed.
    pub fn declared_down(&self) -> tokio::sync::futures::Notified<'_> {
        self.down.notified()
    }

    /// Whether presses of sessions mapped here may be forwarded to it.
    pub fn serves_presses(&self) -> bool {
        matches!(self.state(), NodeState::Up | NodeState::Draining)
    }

    /// Whether the node enforces fencing epochs on presses.
    pub fn fences(&self) -> bool {
        self.fencing.load(Ordering::Acquire)
    }

    /// The fencing epoch a press carries. Loaded *before* the press checks
    /// [`cleaned_since`](Self::cleaned_since) for the clean mark it read
    /// before its mapping: see [`NodeTable::learn_epoch`].
    pub fn fence_epoch(&self) -> u64 {
        self.fence_epoch.load(Ordering::SeqCst)
    }

    /// Whether a clean of this node ended after the clean mark `mark`.
    pub fn cleaned_since(&self, mark: u64) -> bool {
        self.cleaned_at.load(Ordering::SeqCst) > mark
    }

    /// Presses of this replica currently in flight to the node.
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Relaxed) as u64
    }

    /// Counts a press in flight until the guard drops, even if the request
    /// future is cancelled.
    pub fn start_request(&self) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(self.in_flight.clone())
    }

    /// Waits (at most `wait`) until no clean of this node is running, then
    /// holds it off. The usual case takes the lock at once, without arming
    /// a timer.
    pub async fn enter(
        &self,
        wait: std::time::Duration,
    ) -> Option<tokio::sync::OwnedRwLockReadGuard<()>> {
        match self.gate.clone().try_read_owned() {
            Ok(guard) => Some(guard),
            Err(_) => {
                self.held.fetch_add(1, Ordering::AcqRel);
                // Counted down however the wait ends (a cancelled press too).
                let _held = WaitingAtGate(&self.held);
                tokio::time::timeout(wait, self.gate.clone().read_owned())
                    .await
                    .ok()
            }
        }
    }

    /// Presses of this replica waiting at the gate now, held off by a
    /// clean of the node.
    pub fn presses_held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }

    /// Waits for this replica's in-flight presses to the node to finish and
    /// keeps new ones out until the guard drops.
    pub async fn fence(&self) -> RwLockWriteGuard<'_, ()> {
        self.gate.write().await
    }
}

/// One request counted in flight to a node until dropped (owned, so it can
/// go with a press into a task of its own).
pub struct InFlight(Arc<AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

fn encode(state: NodeState) -> u8 {
    match state {
        NodeState::Up => 0,
        NodeState::Down => 1,
        NodeState::Draining => 2,
    }
}

fn decode(v: u8) -> NodeState {
    match v {
        0 => NodeState::Up,
        2 => NodeState::Draining,
        _ => NodeState::Down,
    }
}

/// The version of a table's membership, as a watch channel: bumped by
/// whoever changes a node's presence, state or weight, followed by the
/// selectors, which rebuild their node sets off the request path.
#[derive(Debug)]
pub(crate) struct Membership {
    version: tokio::sync::watch::Sender<u64>,
}

impl Default for Membership {
    fn default() -> Self {
        Self {
            version: tokio::sync::watch::Sender::new(0),
        }
    }
}

impl Membership {
    fn changed(&self) {
        self.version.send_modify(|version| *version += 1);
    }
}

/// Why a failed call did not take its node down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spared {
    /// The node is alive and saturated.
    Saturated,
    /// Only timeouts speak against it, and no other node serves.
    LastNode,
}

impl Spared {
    pub fn as_str(self) -> &'static str {
        match self {
            Spared::Saturated => "it answers others: saturated, not gone",
            Spared::LastNode => "only timeouts speak against it and no other node serves",
        }
    }
}

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
    /// why (design.md, "Overload is not death"). Only time running out, or
    /// a gateway's 502 or 503, can be spared; a refusal, a reset or a bad
    /// answer never is. `sent_at`: when the call began, on [`crate::clock::mono_ms`].
    pub fn spare(&self, entry: &NodeEntry, error: &NodeCallError, sent_at: u64) -> Option<Spared> {
        if !error.is_inconclusive() {
            return None;
        }
        // It answered others while this call waited, or (a connect that
        // timed out) it holds connections of ours carrying presses: a full
        // listen backlog or a long queue of its own, not a dead process. (A
        // node cut off holds none: every press of ours is still connecting.)
        let busy = entry.evidence.answered_since(sent_at)
            || matches!(error, NodeCallError::ConnectTimeout)
                && entry.link.connections_busy().unwrap_or(0) > 0;
        if busy {
            Some(Spared::Saturated)
        } else if !self.others_serve(&entry.address) {
            // Timeouts (or a gateway's word) alone never take the last node
            // down: a stalled
            // machine would otherwise eject every node, and every ejection
            // loses the clicks since the node's last archive.
            Some(Spared::LastNode)
        } else {
            None
        }
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

/// Counts a press down from [`NodeEntry::presses_held`] when it stops
/// waiting at the gate.
struct WaitingAtGate<'a>(&'a AtomicUsize);

impl Drop for WaitingAtGate<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

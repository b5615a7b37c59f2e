//! `NodeEntry`: one node as this replica sees it, and what a press holds
//! of it (its gate, its count in flight).

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{RwLock as AsyncRwLock, RwLockWriteGuard};

use super::record::{NodeRecord, NodeState};
use balancing::LoadTracker;

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
    pub(super) cleaned_at: AtomicU64,
    /// Whether the node refuses presses under an older fencing epoch (it
    /// offers `fencing`): presses then carry [`fence_epoch`](Self::fence_epoch).
    pub(super) fencing: std::sync::atomic::AtomicBool,
    /// Declared down here while Redis refused the mark: the view keeps it
    /// down, whatever the registry still says, until the mark is written
    /// ([`Self::hold_down`]); a node that failed a press it may have
    /// counted is never pressed again on the registry's stale word.
    down_unrecorded: std::sync::atomic::AtomicBool,
    /// The newest clean token of the node this replica has learned from
    /// the registry: the fencing epoch its presses carry. Learned only
    /// through [`NodeTable::learn_epoch`], which orders it with the clean
    /// mark (see there).
    pub(super) fence_epoch: AtomicU64,
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
    pub(super) instance: std::sync::Mutex<Option<String>>,
    /// How presses reach the node: its press URI, its connections, this
    /// replica's limit on them, its press metrics.
    pub link: Arc<super::link::Link>,
}

impl NodeEntry {
    pub(super) fn new(
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
    pub(super) fn set_weight(&self, weight: u32) {
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
    pub(super) fn follow_state(&self, state: NodeState) {
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
    pub(super) version: tokio::sync::watch::Sender<u64>,
}

impl Default for Membership {
    fn default() -> Self {
        Self {
            version: tokio::sync::watch::Sender::new(0),
        }
    }
}

impl Membership {
    pub(super) fn changed(&self) {
        self.version.send_modify(|version| *version += 1);
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
